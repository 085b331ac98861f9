// The Phalanx C++ actor API, in the spirit of Ray's C++ API.
//
//   // counter.h/.cc — the actor class, registered once (in any one .cc of the program):
//   class Counter {
//    public:
//     explicit Counter(int start) : value_(start) {}
//     int Add(int x) { return value_ += x; }
//     int Value() const { return value_; }
//    private:
//     int value_;
//   };
//   PHALANX_ACTOR(Counter, int);         // the class and its constructor's argument types
//   PHALANX_METHODS(Counter, Add, Value);
//
//   // main.cc
//   int main() {
//     phalanx::Init().IgnoreError();     // first thing in main(): see "Where actor code runs"
//     auto counter = phalanx::Actor<Counter>().SetResources({{"CPU", 1}}).Remote(5);
//     if (!counter.ok()) { ... counter.status() names the problem ... }
//     phalanx::ObjectRef<int> sum = counter->Task(&Counter::Add).Remote(3);
//     absl::StatusOr<int> value = phalanx::Get(sum);    // 8
//   }
//
// Where actor code runs: a worker process runs the program that registered the class — by
// default the calling program's own binary — at the same path on the node the actor is placed
// on (as with MPI or torchrun, the program is installed or shared at one path on every node).
// In a worker, Init() hosts the actor and never returns, so call it at the top of main(),
// before anything with side effects. Another program's actors: ActorOf("Class") with
// SetCodePath("/path/to/that/program").
//
// Arguments and results cross the wire as msgpack (so Python can call C++ actors): any type
// msgpack-c can pack (numbers, strings, vectors, maps, tuples, MSGPACK_DEFINE structs).
//
// Errors: every call that can fail returns absl::Status / absl::StatusOr whose message names
// the actor and the cause, tagged with a kind: IsActorDied (the actor is DEAD: cause), IsTaskError
// (the method threw), IsGetTimeout; unknown methods and wrong argument types are
// InvalidArgument. Thread-safe: handles and refs may be used from any thread.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <msgpack.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/worker/actor_registry.h"
#include "runtime/worker/errors.h"
#include "runtime/worker/object_state.h"

namespace phalanx {

// ---------------------------------------------------------------------------------------
// Runtime

struct InitOptions {
  // The cluster: "" reads $PHALANX_ADDRESS, then the latest session on this machine.
  std::string address;
  // The cluster token: "" reads $PHALANX_TOKEN, then this machine's session of that address.
  std::string token;
  // The program workers run for this process's actors (it must register the classes and
  // call phalanx::Init() first in main). Empty: this program's own binary.
  std::string code_path;
  // Namespace for actor names.
  std::string namespace_;
};

// Connects this process to the cluster. In a worker process (started by a node manager) it
// hosts the actor instead and never returns. Errors: no cluster found, unreachable address,
// wrong token; AlreadyExists when called twice.
absl::Status Init(const InitOptions& options = {});
// Disconnects; the actors this program created (unless detached) are killed, as in Ray.
void Shutdown();
bool IsInitialized();

// Sleeps without blocking other calls of an async actor (max_concurrency > 1) on its thread.
void SleepFor(absl::Duration duration);

// ---------------------------------------------------------------------------------------
// Results

// A pending result of type T (void for methods that return nothing).
template <typename T>
class ObjectRef {
 public:
  ObjectRef() = default;
  ObjectRef(std::shared_ptr<ObjectState> state, std::string what)
      : state_(std::move(state)), what_(std::move(what)) {}
  bool Ready() const { return state_ && state_->done(); }
  const std::shared_ptr<ObjectState>& state() const { return state_; }
  // "Counter.Add on actor 3f2a9c1d", for error messages.
  const std::string& what() const { return what_; }

 private:
  std::shared_ptr<ObjectState> state_;
  std::string what_;
};

namespace internal {

template <typename T>
absl::StatusOr<T> Unpack(const std::string& bytes, const std::string& what) {
  try {
    msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
    return handle.get().as<T>();
  } catch (const std::exception& e) {
    return MakeError(absl::StatusCode::kInvalidArgument, error_kind::kInvalidCall,
                     absl::StrCat("the result of ", what,
                                  " does not convert to the type asked for: ", e.what()));
  }
}

inline absl::Status Await(const std::shared_ptr<ObjectState>& state, absl::Duration timeout,
                          const std::string& what) {
  if (!state) {
    return absl::FailedPreconditionError("Get on an empty ObjectRef");
  }
  if (!state->Wait(timeout)) {
    return MakeError(
        absl::StatusCode::kDeadlineExceeded, error_kind::kGetTimeout,
        absl::StrCat("Get timed out after ", absl::FormatDuration(timeout), " waiting for ", what));
  }
  return state->status();
}

}  // namespace internal

// Waits for the result (up to `timeout`) and returns it, or the call's error.
template <typename T>
absl::StatusOr<T> Get(const ObjectRef<T>& ref, absl::Duration timeout = absl::InfiniteDuration()) {
  if (auto s = internal::Await(ref.state(), timeout, ref.what()); !s.ok()) return s;
  return internal::Unpack<T>(ref.state()->value(), ref.what());
}

inline absl::Status Get(const ObjectRef<void>& ref,
                        absl::Duration timeout = absl::InfiniteDuration()) {
  return internal::Await(ref.state(), timeout, ref.what());
}

// Waits for all of `refs` (the timeout bounds the whole wait); the first error wins.
template <typename T>
absl::StatusOr<std::vector<T>> Get(const std::vector<ObjectRef<T>>& refs,
                                   absl::Duration timeout = absl::InfiniteDuration()) {
  absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  std::vector<T> out;
  out.reserve(refs.size());
  for (const auto& ref : refs) {
    absl::Duration left =
        deadline == absl::InfiniteFuture() ? absl::InfiniteDuration() : deadline - absl::Now();
    auto value = Get(ref, std::max(left, absl::ZeroDuration()));
    if (!value.ok()) return value.status();
    out.push_back(std::move(*value));
  }
  return out;
}

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> not_ready;
};

// Waits until `num_returns` of `refs` are ready (done or failed) or `timeout` passes.
template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_returns,
                   absl::Duration timeout = absl::InfiniteDuration()) {
  std::vector<std::shared_ptr<ObjectState>> states;
  for (const auto& r : refs) states.push_back(r.state());
  std::vector<bool> done = WaitAny(states, num_returns, timeout);
  WaitResult<T> out;
  for (size_t i = 0; i < refs.size(); ++i) {
    (done[i] && static_cast<int>(out.ready.size()) < num_returns ? out.ready : out.not_ready)
        .push_back(refs[i]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Actors

namespace internal {

struct ActorOptions {
  std::map<std::string, double> resources;
  std::string name;
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;
  std::string scheduling_strategy;  // DEFAULT, SPREAD, NODE_AFFINITY
  std::string affinity_node_id;
  bool affinity_soft = false;
  std::string placement_group_id;
  int bundle_index = -1;
  bool detached = false;
  std::map<std::string, std::string> env;
  std::string code_path;
  std::string language;  // "" / "cpp"; "python": hosted by a Python worker
  std::vector<std::string> avoid_node_ids;
  std::string namespace_;  // for `name`; "": this process's namespace
};

// What the GCS knows of an actor (the Python module's actor_info).
struct ActorSummary {
  std::string actor_id;
  std::string class_name;
  std::string language;
  std::string name;
  std::string state;  // DEPENDENCIES_UNREADY, PENDING_CREATION, ALIVE, RESTARTING, DEAD
  int pid = 0;
  std::string node_id;
  int num_restarts = 0;
  std::string death_cause;  // "" while not DEAD, else e.g. "OOM_KILLED: peak 1.9 GiB > ..."
};

// Non-template entry points into the runtime (actors/api.cc).
absl::StatusOr<std::string> CreateActor(const std::string& class_name, const ActorOptions& options,
                                        std::string packed_args);
std::shared_ptr<ObjectState> SubmitCall(const std::string& actor_id, const std::string& method,
                                        std::string packed_args);
absl::StatusOr<std::string> LookupNamedActor(const std::string& name);
absl::Status KillActor(const std::string& actor_id, bool no_restart);
// NotFound when the GCS does not know the actor (or no live actor has the name in `ns`).
absl::StatusOr<ActorSummary> DescribeActor(const std::string& actor_id);
absl::StatusOr<ActorSummary> DescribeNamedActor(const std::string& name, const std::string& ns);

template <typename... Args>
std::string PackArgs(Args&&... args) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_array(sizeof...(Args));
  (packer.pack(std::forward<Args>(args)), ...);
  return std::string(buffer.data(), buffer.size());
}

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

}  // namespace internal

template <typename T>
class ActorHandle;

// ---------------------------------------------------------------------------------------
// Placement groups (Ray's): bundles of resources reserved all-or-nothing across nodes.

class PlacementGroup {
 public:
  PlacementGroup() = default;
  explicit PlacementGroup(std::string id) : id_(std::move(id)) {}
  const std::string& id() const { return id_; }

  // Waits until every bundle is reserved. DeadlineExceeded (kind GetTimeout) after `timeout`,
  // with the reason it is still pending; FailedPrecondition if the group was removed.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) const;
  // The node of each bundle ("" while a bundle is not placed).
  absl::StatusOr<std::vector<std::string>> BundleNodes() const;
  // "PENDING", "CREATED", "RESCHEDULING", "REMOVED".
  absl::StatusOr<std::string> State() const;

 private:
  std::string id_;
};

// Creates a placement group: bundles like {{"CPU", 1}, {"GPU", 1}}, strategy PACK, SPREAD,
// STRICT_PACK or STRICT_SPREAD. Returns at once (Wait() for the reservation), or an error for
// a malformed request or one no node could ever hold.
absl::StatusOr<PlacementGroup> CreatePlacementGroup(
    const std::vector<std::map<std::string, double>>& bundles, const std::string& strategy = "PACK",
    const std::string& name = "");
// Kills the group's actors and frees its bundles.
absl::Status RemovePlacementGroup(const PlacementGroup& group);
// Kills the actors in bundle `index` and gives its resources back to its node for good; the
// group keeps its other bundles (an elastic rank that needs more than its bundle held, say).
absl::Status ReleaseBundle(const PlacementGroup& group, int index);

// A method call about to be sent: Remote(args...) converts the arguments to the method's
// parameter types (a compile-time check) and sends them.
template <typename R, typename... Params>
class TaskCaller {
 public:
  TaskCaller(std::string actor_id, std::string method, std::string what, absl::Status error)
      : actor_id_(std::move(actor_id)),
        method_(std::move(method)),
        what_(std::move(what)),
        error_(std::move(error)) {}

  template <typename... Args>
  ObjectRef<R> Remote(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "wrong number of arguments for this actor method");
    if (!error_.ok()) {
      auto state = std::make_shared<ObjectState>();
      state->Set(error_);
      return ObjectRef<R>(state, what_);
    }
    std::string packed =
        internal::PackArgs(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
    return ObjectRef<R>(internal::SubmitCall(actor_id_, method_, std::move(packed)), what_);
  }

 private:
  std::string actor_id_;
  std::string method_;
  std::string what_;
  absl::Status error_;
};

template <typename T>
class ActorHandle {
 public:
  ActorHandle() = default;
  ActorHandle(std::string id, std::string class_name)
      : id_(std::move(id)), class_name_(std::move(class_name)) {}

  const std::string& id() const { return id_; }

  template <typename R, typename... Params>
  TaskCaller<R, Params...> Task(R (T::*method)(Params...)) const {
    return MakeCaller<R, Params...>(internal::PointerKey(method));
  }
  template <typename R, typename... Params>
  TaskCaller<R, Params...> Task(R (T::*method)(Params...) const) const {
    return MakeCaller<R, Params...>(internal::PointerKey(method));
  }

  // Calls a method by name (as Python does); arguments are sent as given.
  template <typename R, typename... Args>
  ObjectRef<R> Call(const std::string& method, Args&&... args) const {
    return ObjectRef<R>(
        internal::SubmitCall(id_, method, internal::PackArgs(std::forward<Args>(args)...)),
        absl::StrCat(class_name_, ".", method, " on actor ", id_.substr(0, 8)));
  }

 private:
  template <typename R, typename... Params>
  TaskCaller<R, Params...> MakeCaller(const std::string& key) const {
    const auto& names = internal::MethodNames<T>();
    auto it = names.find(key);
    if (it == names.end()) {
      return TaskCaller<R, Params...>(
          id_, "", class_name_,
          MakeError(absl::StatusCode::kInvalidArgument, error_kind::kInvalidCall,
                    absl::StrCat("this method of ", class_name_,
                                 " is not registered: list it in PHALANX_METHODS(", class_name_,
                                 ", ...)")));
    }
    return TaskCaller<R, Params...>(
        id_, it->second, absl::StrCat(class_name_, ".", it->second, " on actor ", id_.substr(0, 8)),
        absl::OkStatus());
  }

  std::string id_;
  std::string class_name_;
};

// Options for creating an actor of class T; Remote(args...) creates it.
template <typename T>
class ActorCreator {
 public:
  explicit ActorCreator(std::string class_name) : class_name_(std::move(class_name)) {}

  // Resource requests: "CPU" (fractions allowed), "GPU", "memory" (bytes; enforced as a
  // limit), or custom names.
  ActorCreator& SetResources(const std::map<std::string, double>& resources) {
    options_.resources = resources;
    return *this;
  }
  ActorCreator& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  ActorCreator& SetName(const std::string& name) {
    options_.name = name;
    return *this;
  }
  // -1: restart forever; 0 (default): never.
  ActorCreator& SetMaxRestarts(int n) {
    options_.max_restarts = n;
    return *this;
  }
  // How many times a call cut off by the actor's death is retried (-1: forever).
  ActorCreator& SetMaxTaskRetries(int n) {
    options_.max_task_retries = n;
    return *this;
  }
  // > 1: calls run concurrently on fibers.
  ActorCreator& SetMaxConcurrency(int n) {
    options_.max_concurrency = n;
    return *this;
  }
  ActorCreator& SetSchedulingStrategy(const std::string& strategy) {
    options_.scheduling_strategy = strategy;
    return *this;
  }
  ActorCreator& SetNodeAffinity(const std::string& node_id, bool soft = false) {
    options_.scheduling_strategy = "NODE_AFFINITY";
    options_.affinity_node_id = node_id;
    options_.affinity_soft = soft;
    return *this;
  }
  // Runs the actor inside bundle `bundle_index` of the group (-1: any bundle with room).
  ActorCreator& SetPlacementGroup(const PlacementGroup& group, int bundle_index = -1) {
    options_.placement_group_id = group.id();
    options_.bundle_index = bundle_index;
    return *this;
  }
  // Outlives the program that created it.
  ActorCreator& SetDetached(bool detached = true) {
    options_.detached = detached;
    return *this;
  }
  ActorCreator& SetEnv(const std::string& key, const std::string& value) {
    options_.env[key] = value;
    return *this;
  }
  // Never place the actor on these nodes (e.g. where its predecessor was slow).
  ActorCreator& SetAvoidNodes(const std::vector<std::string>& node_ids) {
    options_.avoid_node_ids = node_ids;
    return *this;
  }
  // The program that hosts this actor (default: InitOptions::code_path, or this program).
  // "python": the actor runs in a Python worker (python3 -m phalanx._worker), which also
  // hosts the C++ classes of the phalanx module (the elastic controller and trainer hosts).
  ActorCreator& SetLanguage(const std::string& language) {
    options_.language = language;
    return *this;
  }
  ActorCreator& SetCodePath(const std::string& path) {
    options_.code_path = path;
    return *this;
  }

  // Creates the actor with constructor arguments `args`. Returns at once with a handle (the
  // actor starts in the background; calls wait for it), or an error when the request is
  // invalid or no node can ever hold it.
  template <typename... Args>
  absl::StatusOr<ActorHandle<T>> Remote(Args&&... args) const {
    auto id = internal::CreateActor(class_name_, options_,
                                    internal::PackArgs(std::forward<Args>(args)...));
    if (!id.ok()) return id.status();
    return ActorHandle<T>(*id, class_name_);
  }

 private:
  std::string class_name_;
  internal::ActorOptions options_;
};

namespace internal {
template <typename T>
struct ClassName {
  static std::string& Get() {
    static auto* name = new std::string();
    return *name;
  }
};
}  // namespace internal

// Starts building an actor of class T (registered with PHALANX_ACTOR).
template <typename T>
ActorCreator<T> Actor() {
  return ActorCreator<T>(internal::ClassName<T>::Get());
}

// An actor of a class this program does not link (registered in the program named with
// SetCodePath, or written in another language): call its methods by name with Call<R>().
struct AnyActor {};
inline ActorCreator<AnyActor> ActorOf(const std::string& class_name) {
  return ActorCreator<AnyActor>(class_name);
}

// Looks up a live named actor.
template <typename T>
absl::StatusOr<ActorHandle<T>> GetActor(const std::string& name) {
  auto id = internal::LookupNamedActor(name);
  if (!id.ok()) return id.status();
  return ActorHandle<T>(*id, internal::ClassName<T>::Get());
}

// Kills the actor. no_restart = false lets it restart if its max_restarts allows.
template <typename T>
absl::Status Kill(const ActorHandle<T>& actor, bool no_restart = true) {
  return internal::KillActor(actor.id(), no_restart);
}

// ---------------------------------------------------------------------------------------
// Registration (what the macros expand to)

namespace internal {

template <typename T>
using Invoker = std::function<CallOutcome(T*, const std::string&)>;

template <typename T>
std::map<std::string, Invoker<T>>& MethodTable() {
  static auto* table = new std::map<std::string, Invoker<T>>();
  return *table;
}

inline std::string Describe(const msgpack::object& o) {
  std::ostringstream out;
  out << o;
  return out.str();
}

// Unpacks a msgpack array into a tuple of exactly the parameter types.
template <typename Tuple>
absl::Status UnpackArgs(const std::string& bytes, Tuple* out, const std::string& what,
                        const std::string& signature) {
  try {
    msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
    const msgpack::object& o = handle.get();
    if (o.type != msgpack::type::ARRAY || o.via.array.size != std::tuple_size_v<Tuple>) {
      return MakeError(absl::StatusCode::kInvalidArgument, error_kind::kInvalidCall,
                       absl::StrCat(what, " takes ", std::tuple_size_v<Tuple>, " argument(s) ",
                                    signature, ", got ", Describe(o)));
    }
    o.convert(*out);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return MakeError(absl::StatusCode::kInvalidArgument, error_kind::kInvalidCall,
                     absl::StrCat("wrong argument types for ", what, signature, ": ", e.what()));
  }
}

template <typename V>
std::string PackValue(const V& value) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, value);
  return std::string(buffer.data(), buffer.size());
}

template <typename T, typename R, typename... Params, typename M>
Invoker<T> MakeInvoker(const std::string& what, M method) {
  std::string signature = absl::StrCat("(", sizeof...(Params), " parameter(s))");
  return [what, signature, method](T* self, const std::string& args) -> CallOutcome {
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
      return {MakeError(absl::StatusCode::kUnknown, error_kind::kTaskError,
                        absl::StrCat(what, " raised: ", e.what())),
              ""};
    } catch (...) {
      return {MakeError(absl::StatusCode::kUnknown, error_kind::kTaskError,
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
class TypedInstance final : public ActorInstance {
 public:
  explicit TypedInstance(std::unique_ptr<T> object) : object_(std::move(object)) {}
  CallOutcome Call(const std::string& method, const std::string& args) override {
    const auto& table = MethodTable<T>();
    auto it = table.find(method);
    if (it == table.end()) {
      std::string known;
      for (const auto& [name, fn] : table) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
      return {MakeError(absl::StatusCode::kInvalidArgument, error_kind::kInvalidCall,
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
    ActorClass cls;
    cls.name = name;
    cls.create = [name = std::string(name)](
                     const std::string& args) -> absl::StatusOr<std::unique_ptr<ActorInstance>> {
      std::tuple<std::decay_t<CtorArgs>...> values;
      std::string signature = absl::StrCat("(", sizeof...(CtorArgs), " parameter(s))");
      if (auto s = UnpackArgs(args, &values, name, signature); !s.ok()) return s;
      std::unique_ptr<T> object =
          std::apply([](auto&... a) { return std::make_unique<T>(a...); }, values);  // may throw
      return std::unique_ptr<ActorInstance>(new TypedInstance<T>(std::move(object)));
    };
    ActorRegistry::Global().Register(std::move(cls));
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
    ActorRegistry::Global().AddMethods(class_name, {method}, group, concurrency);
  }
};

}  // namespace internal
}  // namespace phalanx

// ---------------------------------------------------------------------------------------
// Macros. Use each once per class, at namespace scope, in one .cc file.

#define PHALANX_INTERNAL_CAT2(a, b) a##b
#define PHALANX_INTERNAL_CAT(a, b) PHALANX_INTERNAL_CAT2(a, b)

// PHALANX_ACTOR(Class, ConstructorArgTypes...): registers Class for remote creation.
#define PHALANX_ACTOR(Class, ...)                                                        \
  static ::phalanx::internal::ActorRegistrar<Class, ##__VA_ARGS__> PHALANX_INTERNAL_CAT( \
      phalanx_actor_registrar_, __LINE__)(#Class)

#define PHALANX_INTERNAL_METHOD(Class, Group, Concurrency, Method)         \
  static ::phalanx::internal::MethodRegistrar<Class> PHALANX_INTERNAL_CAT( \
      PHALANX_INTERNAL_CAT(phalanx_method_registrar_, Method), __LINE__)(  \
      #Class, #Method, &Class::Method, Group, Concurrency);

// Apply M(Class, Group, Concurrency, x) to each of up to 24 method names.
#define PHALANX_INTERNAL_EACH_1(M, C, G, N, x) M(C, G, N, x)
#define PHALANX_INTERNAL_EACH_2(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_1(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_3(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_2(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_4(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_3(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_5(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_4(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_6(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_5(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_7(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_6(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_8(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_7(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_9(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_8(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_10(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_9(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_11(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_10(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_12(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_11(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_13(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_12(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_14(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_13(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_15(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_14(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_16(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_15(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_17(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_16(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_18(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_17(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_19(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_18(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_20(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_19(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_21(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_20(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_22(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_21(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_23(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_22(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_24(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_23(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, \
                              _16, _17, _18, _19, _20, _21, _22, _23, _24, NAME, ...)           \
  NAME
#define PHALANX_INTERNAL_EACH(M, C, G, N, ...)                                                   \
  PHALANX_INTERNAL_PICK(                                                                         \
      __VA_ARGS__, PHALANX_INTERNAL_EACH_24, PHALANX_INTERNAL_EACH_23, PHALANX_INTERNAL_EACH_22, \
      PHALANX_INTERNAL_EACH_21, PHALANX_INTERNAL_EACH_20, PHALANX_INTERNAL_EACH_19,              \
      PHALANX_INTERNAL_EACH_18, PHALANX_INTERNAL_EACH_17, PHALANX_INTERNAL_EACH_16,              \
      PHALANX_INTERNAL_EACH_15, PHALANX_INTERNAL_EACH_14, PHALANX_INTERNAL_EACH_13,              \
      PHALANX_INTERNAL_EACH_12, PHALANX_INTERNAL_EACH_11, PHALANX_INTERNAL_EACH_10,              \
      PHALANX_INTERNAL_EACH_9, PHALANX_INTERNAL_EACH_8, PHALANX_INTERNAL_EACH_7,                 \
      PHALANX_INTERNAL_EACH_6, PHALANX_INTERNAL_EACH_5, PHALANX_INTERNAL_EACH_4,                 \
      PHALANX_INTERNAL_EACH_3, PHALANX_INTERNAL_EACH_2, PHALANX_INTERNAL_EACH_1)                 \
  (M, C, G, N, __VA_ARGS__)

// PHALANX_METHODS(Class, Method...): methods callable remotely, in the default concurrency
// group (the actor's max_concurrency).
#define PHALANX_METHODS(Class, ...) \
  PHALANX_INTERNAL_EACH(PHALANX_INTERNAL_METHOD, Class, "", 1, __VA_ARGS__)

// PHALANX_GROUP_METHODS(Class, "group", concurrency, Method...): methods that run in a
// concurrency group of their own (Ray's concurrency groups), e.g. a control lane that is
// served while a long call of the default group runs.
#define PHALANX_GROUP_METHODS(Class, Group, Concurrency, ...) \
  PHALANX_INTERNAL_EACH(PHALANX_INTERNAL_METHOD, Class, Group, Concurrency, __VA_ARGS__)
