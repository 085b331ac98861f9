// Machinery of actors/api.h, not part of the contract: the per-class tables that
// PHALANX_ACTOR and PHALANX_METHODS fill (actors/internal/macros.h), and the invokers that
// unpack a call's arguments, run the method and pack its result.
#pragma once

#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/internal/serialization.h"
#include "worker/actor_registry.h"
#include "worker/errors.h"

namespace phalanx::internal {

// The name T was registered under by PHALANX_ACTOR ("" if it was not).
template <typename T>
struct ClassName {
  static std::string& Get() {
    static auto* name = new std::string();
    return *name;
  }
};

// Member-function pointers → method names, per class (filled by PHALANX_METHODS).
template <typename T>
std::map<std::string, std::string>& MethodNames() {
  static auto* names = new std::map<std::string, std::string>();
  return *names;
}

template <typename M>
std::string PointerKey(M method) {
  std::string key(sizeof(M), '\0');
  std::memcpy(key.data(), &method, sizeof(M));
  return key;
}

// The registered name of the method of T whose PointerKey is `key`, or InvalidArgument
// (kind InvalidCall) naming the fix.
template <typename T>
absl::StatusOr<std::string> RegisteredMethod(const std::string& key,
                                             const std::string& class_name) {
  const auto& names = MethodNames<T>();
  auto it = names.find(key);
  if (it == names.end()) {
    return worker::MakeError(
        absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
        absl::StrCat("this method of ", class_name,
                     " is not registered: list it in PHALANX_METHODS(", class_name, ", ...)"));
  }
  return it->second;
}

// "Counter.Add on actor 3f2a9c1d", for error messages.
inline std::string CallName(const std::string& class_name, const std::string& method,
                            const std::string& actor_id) {
  return absl::StrCat(class_name, ".", method, " on actor ", actor_id.substr(0, 8));
}

template <typename T>
using Invoker = std::function<worker::CallOutcome(T*, const std::string&)>;

template <typename T>
std::map<std::string, Invoker<T>>& MethodTable() {
  static auto* table = new std::map<std::string, Invoker<T>>();
  return *table;
}

template <typename T, typename R, typename... Params, typename M>
Invoker<T> MakeInvoker(const std::string& what, M method) {
  std::string signature = absl::StrCat("(", sizeof...(Params), " parameter(s))");
  return [what, signature, method](T* self, const std::string& args) -> worker::CallOutcome {
    std::tuple<std::decay_t<Params>...> values;
    if (auto s = UnpackArgs(args, &values, what, signature); !s.ok()) return {s, ""};
    try {
      if constexpr (std::is_void_v<R>) {
        std::apply([&](auto&... a) { (self->*method)(a...); }, values);
        return {absl::OkStatus(), PackValue(msgpack::type::nil_t())};
      } else {
        R result = std::apply([&](auto&... a) { return (self->*method)(a...); }, values);
        return {absl::OkStatus(), PackValue(result)};
      }
    } catch (const std::exception& e) {
      return {worker::MakeError(absl::StatusCode::kUnknown, worker::error_kind::kTaskError,
                                absl::StrCat(what, " raised: ", e.what())),
              ""};
    } catch (...) {
      return {worker::MakeError(absl::StatusCode::kUnknown, worker::error_kind::kTaskError,
                                absl::StrCat(what, " raised a non-standard exception")),
              ""};
    }
  };
}

// An invoker for member function `fn` of T, deducing its signature.
template <typename T, typename R, typename... Params>
Invoker<T> MethodInvokerFor(const std::string& what, R (T::*fn)(Params...)) {
  return MakeInvoker<T, R, Params...>(what, fn);
}

template <typename T>
class TypedInstance final : public worker::ActorInstance {
 public:
  explicit TypedInstance(std::unique_ptr<T> object) : object_(std::move(object)) {}
  worker::CallOutcome Call(const std::string& method, const std::string& args) override {
    const auto& table = MethodTable<T>();
    auto it = table.find(method);
    if (it == table.end()) {
      std::string known;
      for (const auto& [name, fn] : table) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
      return {
          worker::MakeError(absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
                            absl::StrCat(ClassName<T>::Get(), " has no method '", method,
                                         "' (registered: ", known, ")")),
          ""};
    }
    return it->second(object_.get(), args);
  }

 private:
  std::unique_ptr<T> object_;
};

template <typename T, typename... CtorArgs>
struct ActorRegistrar {
  explicit ActorRegistrar(const char* name) {
    ClassName<T>::Get() = name;
    worker::ActorClass cls;
    cls.name = name;
    cls.create =
        [name = std::string(name)](
            const std::string& args) -> absl::StatusOr<std::unique_ptr<worker::ActorInstance>> {
      std::tuple<std::decay_t<CtorArgs>...> values;
      std::string signature = absl::StrCat("(", sizeof...(CtorArgs), " parameter(s))");
      if (auto s = UnpackArgs(args, &values, name, signature); !s.ok()) return s;
      std::unique_ptr<T> object =
          std::apply([](auto&... a) { return std::make_unique<T>(a...); }, values);  // may throw
      return std::unique_ptr<worker::ActorInstance>(new TypedInstance<T>(std::move(object)));
    };
    worker::ActorRegistry::Global().Register(std::move(cls));
  }
};

template <typename T>
struct MethodRegistrar {
  template <typename R, typename... Params>
  MethodRegistrar(const char* class_name, const char* method, R (T::*fn)(Params...),
                  const char* group = "", int concurrency = 1) {
    Add<R, Params...>(class_name, method, fn, group, concurrency);
  }
  template <typename R, typename... Params>
  MethodRegistrar(const char* class_name, const char* method, R (T::*fn)(Params...) const,
                  const char* group = "", int concurrency = 1) {
    Add<R, Params...>(class_name, method, fn, group, concurrency);
  }

 private:
  template <typename R, typename... Params, typename M>
  static void Add(const char* class_name, const char* method, M fn, const char* group,
                  int concurrency) {
    MethodTable<T>()[method] =
        MakeInvoker<T, R, Params...>(absl::StrCat(class_name, ".", method), fn);
    MethodNames<T>()[PointerKey(fn)] = method;
    worker::ActorRegistry::Global().AddMethods(class_name, {method}, group, concurrency);
  }
};

}  // namespace phalanx::internal
