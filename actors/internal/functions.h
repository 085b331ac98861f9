// Machinery of actors/api.h, not part of the contract: the table of remote functions that
// PHALANX_FUNCTION fills, and what phalanx::Task(&Fn).Remote(...) sends (task_pool.h runs it).
#pragma once

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/internal/registration.h"
#include "actors/internal/serialization.h"
#include "worker/actor_registry.h"
#include "worker/errors.h"
#include "worker/worker_host.h"

namespace phalanx::internal {

// The actor class of a C++ program's task workers, and the call that asks one if it is up.
using worker::kCppTaskWorkerClass;  // worker/worker_host.h
inline constexpr char kTaskWorkerReadyMethod[] = "__ready__";

// Registers kCppTaskWorkerClass in this program (once; task_pool.cc).
void RegisterTaskWorkerClass();

using FunctionInvoker = std::function<worker::CallOutcome(const std::string& args)>;

// Registered name → invoker.
inline std::map<std::string, FunctionInvoker>& FunctionTable() {
  static auto* table = new std::map<std::string, FunctionInvoker>();
  return *table;
}

// Function pointer → registered name.
inline std::map<std::string, std::string>& FunctionNames() {
  static auto* names = new std::map<std::string, std::string>();
  return *names;
}

template <typename R, typename... Params>
FunctionInvoker MakeFunctionInvoker(const std::string& name, R (*fn)(Params...)) {
  std::string signature = absl::StrCat("(", sizeof...(Params), " parameter(s))");
  return [name, signature, fn](const std::string& args) -> worker::CallOutcome {
    std::tuple<std::decay_t<Params>...> values;
    if (auto s = UnpackArgs(args, &values, name, signature); !s.ok()) return {s, ""};
    try {
      if constexpr (std::is_void_v<R>) {
        std::apply([&](auto&... a) { fn(a...); }, values);
        return {absl::OkStatus(), PackValue(msgpack::type::nil_t())};
      } else {
        R result = std::apply([&](auto&... a) { return fn(a...); }, values);
        return {absl::OkStatus(), PackValue(result)};
      }
    } catch (const std::exception& e) {
      return {worker::MakeError(absl::StatusCode::kUnknown, worker::error_kind::kTaskError,
                                absl::StrCat("task ", name, " raised: ", e.what())),
              ""};
    } catch (...) {
      return {worker::MakeError(absl::StatusCode::kUnknown, worker::error_kind::kTaskError,
                                absl::StrCat("task ", name, " raised a non-standard exception")),
              ""};
    }
  };
}

struct FunctionRegistrar {
  template <typename R, typename... Params>
  FunctionRegistrar(const char* name, R (*fn)(Params...)) {
    RegisterTaskWorkerClass();
    FunctionTable()[name] = MakeFunctionInvoker(name, fn);
    FunctionNames()[PointerKey(fn)] = name;
  }
};

// One argument of a task: a value (packed) or the result of an ObjectRef (a dependency).
struct TaskArgument {
  std::string packed;
  int dep = -1;  // index into the task's dependencies
};

// Packs `parts` as one msgpack array, with each dependency's value (already msgpack) in its
// place.
inline std::string AssembleTaskArguments(const std::vector<TaskArgument>& parts,
                                         const std::vector<std::string>& dep_values) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_array(static_cast<uint32_t>(parts.size()));
  for (const auto& part : parts) {
    const std::string& bytes = part.dep >= 0 ? dep_values[part.dep] : part.packed;
    buffer.write(bytes.data(), bytes.size());
  }
  return std::string(buffer.data(), buffer.size());
}

}  // namespace phalanx::internal

// Behind PHALANX_FUNCTION (actors/api.h).
#define PHALANX_INTERNAL_FUNCTION(Fn)                                 \
  static ::phalanx::internal::FunctionRegistrar PHALANX_INTERNAL_CAT( \
      PHALANX_INTERNAL_CAT(phalanx_function_registrar_, Fn), __LINE__)(#Fn, &Fn)
