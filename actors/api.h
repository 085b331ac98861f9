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
// Remote functions (tasks), as Ray's: a free function registered with PHALANX_FUNCTION runs
// on a pooled task worker of this program, one call per task (no process start):
//
//   int Square(int x) { return x * x; }
//   PHALANX_FUNCTION(Square);
//   phalanx::ObjectRef<int> four = phalanx::Task(&Square).Remote(2);
//   phalanx::ObjectRef<int> sixteen = phalanx::Task(&Square).Remote(four);  // a ref: resolved
//
// Ray's Put: phalanx::Put(value) is a ref to a value this process holds, to Get or to pass to
// tasks and actor calls like any other ref (its value goes in the call, once):
//
//   phalanx::ObjectRef<std::vector<double>> weights = phalanx::Put(std::move(w));
//   trainer->Task(&Trainer::Load).Remote(weights);
//
// Errors: every call that can fail returns absl::Status / absl::StatusOr whose message names
// the actor and the cause, tagged with a kind: IsActorDied (the actor is DEAD: cause), IsTaskError
// (the method threw), IsGetTimeout; unknown methods and wrong argument types are
// InvalidArgument. Thread-safe: handles and refs may be used from any thread.
//
// This header is the contract; the machinery behind it (templates' bodies, msgpack, the
// registration tables and macros) lives in actors/internal/ and may change at any time.
#pragma once

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "actors/internal/actor_options.h"
#include "base/typed_id.h"

namespace phalanx {

// The errors' kinds, as the comment above lists them: "ActorDied", "ActorUnavailable",
// "TaskError", "InvalidCall", "GetTimeout", "CreationFailed", "TaskCancelled" ("" for a
// status that is not one of this API's errors).
std::string ErrorKind(const absl::Status& status);
bool IsActorDied(const absl::Status& status);
bool IsTaskError(const absl::Status& status);
bool IsGetTimeout(const absl::Status& status);

// ---------------------------------------------------------------------------------------
// Ids

// ActorId, NodeId, PlacementGroupId: base/typed_id.h.

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
  // The namespace of this program's actor names ("": one of its own, as in Ray).
  std::string actor_namespace;
  // Print what this program's actors and tasks print, on its stderr, each line after
  // "(Class pid=N)" (Ray's log_to_driver; Python's init() turns it on).
  bool log_to_driver = false;
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
// Enums of the options and states with a fixed set of values. Each has a name, as the GCS
// and `phalanx list` spell it (ToString), and a parser for names that come from users
// (a YAML field, a Python argument): InvalidArgument naming `field` and the allowed names.

// Where the scheduler places an actor (Ray's policies; placement/scheduling_policy.h).
enum class SchedulingStrategy {
  kDefault,       // pack onto busy nodes up to a utilization threshold, then spread
  kSpread,        // the least utilized node that fits, rotating among equals
  kNodeAffinity,  // one named node (SetNodeAffinity)
};
// How a placement group's bundles are laid out across nodes (Ray's strategies).
enum class PlacementStrategy {
  kPack,          // as few nodes as possible
  kSpread,        // as many nodes as possible
  kStrictPack,    // one node, or not at all
  kStrictSpread,  // one node per bundle, or not at all
};
// What hosts an actor: a C++ program (SetCodePath), or a Python worker.
enum class Language { kCpp, kPython };
// An actor's lifecycle: PENDING -> CREATING -> ALIVE <-> RESTARTING, and DEAD from any.
enum class ActorState { kPending, kCreating, kAlive, kRestarting, kDead };
// A placement group's: PENDING -> CREATED <-> RESCHEDULING (a node died), REMOVED from any.
enum class PlacementGroupState { kPending, kCreated, kRescheduling, kRemoved };

absl::string_view ToString(SchedulingStrategy strategy);  // "DEFAULT", "SPREAD", ...
absl::string_view ToString(PlacementStrategy strategy);   // "PACK", "STRICT_SPREAD", ...
absl::string_view ToString(Language language);            // "cpp", "python"
absl::string_view ToString(ActorState state);             // "ALIVE", "DEAD", ...
absl::string_view ToString(PlacementGroupState state);    // "PENDING", "CREATED", ...
absl::StatusOr<SchedulingStrategy> ParseSchedulingStrategy(
    absl::string_view name, absl::string_view field = "scheduling strategy");
absl::StatusOr<PlacementStrategy> ParsePlacementStrategy(
    absl::string_view name, absl::string_view field = "placement strategy");
absl::StatusOr<Language> ParseLanguage(absl::string_view name,
                                       absl::string_view field = "language");

// ---------------------------------------------------------------------------------------
// Results

// A pending result of type T (void for methods that return nothing).
template <typename T>
class ObjectRef {
 public:
  ObjectRef() = default;
  bool Ready() const;
  // "Counter.Add on actor 3f2a9c1d", for error messages.
  const std::string& what() const { return what_; }

 private:
  // The runtime's state of the result is the machinery's alone (actors/internal/api_inl.h).
  friend struct internal::RefAccess;
  ObjectRef(std::shared_ptr<worker::ObjectState> state, std::string what)
      : state_(std::move(state)), what_(std::move(what)) {}

  std::shared_ptr<worker::ObjectState> state_;
  std::string what_;
};

// Waits for the result (up to `timeout`) and returns it, or the call's error.
template <typename T>
absl::StatusOr<T> Get(const ObjectRef<T>& ref, absl::Duration timeout = absl::InfiniteDuration());
inline absl::Status Get(const ObjectRef<void>& ref,
                        absl::Duration timeout = absl::InfiniteDuration());

// A ref to `value`, held by this process (its owner, as in Ray): Get gives it back, and tasks
// and actor calls take it where they take a value of its type.
template <typename T>
ObjectRef<std::decay_t<T>> Put(T&& value);

// Waits for all of `refs` (the timeout bounds the whole wait); the first error wins.
template <typename T>
absl::StatusOr<std::vector<T>> Get(const std::vector<ObjectRef<T>>& refs,
                                   absl::Duration timeout = absl::InfiniteDuration());

// Cancels a task or an actor call (Ray's cancel): its ref fails with kind TaskCancelled at
// once. One not started never runs. One that runs cannot be interrupted in C++: it runs on,
// and sees IsCanceled() (a Python task gets KeyboardInterrupt); its result is dropped.
// `force` kills a running task's worker (not for actor calls: kill the actor instead). OK
// for a ref already done (it keeps its value, a Put one too); InvalidArgument for a ref that
// is not done and not a task or actor call of this process.
template <typename T>
absl::Status Cancel(const ObjectRef<T>& ref, bool force = false);

// Whether the task or actor call this thread runs was cancelled: a long C++ function or
// method checks it to stop early, as Ray's runtime_context.is_canceled(). False on a thread
// that runs none (the driver). In an actor whose calls run on fibers (max_concurrency > 1) it
// names the call only until the method first yields (Get, SleepFor): check it before.
bool IsCanceled();

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> not_ready;
};

// Waits until `num_returns` of `refs` are ready (done or failed) or `timeout` passes.
template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_returns,
                   absl::Duration timeout = absl::InfiniteDuration());

// ---------------------------------------------------------------------------------------
// Placement groups (Ray's): bundles of resources reserved all-or-nothing across nodes.

class PlacementGroup {
 public:
  PlacementGroup() = default;
  explicit PlacementGroup(PlacementGroupId id) : id_(std::move(id)) {}
  const PlacementGroupId& id() const { return id_; }

  // Waits until every bundle is reserved. DeadlineExceeded (kind GetTimeout) after `timeout`,
  // with the reason it is still pending; FailedPrecondition if the group was removed.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) const;
  // The node of each bundle (a nil id while a bundle is not placed).
  absl::StatusOr<std::vector<NodeId>> BundleNodes() const;
  absl::StatusOr<PlacementGroupState> State() const;

 private:
  PlacementGroupId id_;
};

// Creates a placement group of bundles like {{"CPU", 1}, {"GPU", 1}}. Returns at once (Wait()
// for the reservation), or an error for a malformed request or, unless `pend_if_infeasible`
// (Ray's behaviour: it waits for a node that has it), one no node could ever hold.
// The group is removed when this driver's job ends, unless `detached` (Ray's
// lifetime="detached": it stays until RemovePlacementGroup).
absl::StatusOr<PlacementGroup> CreatePlacementGroup(
    const std::vector<std::map<std::string, double>>& bundles,
    PlacementStrategy strategy = PlacementStrategy::kPack, const std::string& name = "",
    bool detached = false, bool pend_if_infeasible = false);
// Kills the group's actors and frees its bundles.
absl::Status RemovePlacementGroup(const PlacementGroup& group);
// Kills the actors in bundle `index` and gives its resources back to its node for good; the
// group keeps its other bundles (an elastic rank that needs more than its bundle held, say).
absl::Status ReleaseBundle(const PlacementGroup& group, int index);

// ---------------------------------------------------------------------------------------
// Actors

// A method call about to be sent: Remote(args...) converts the arguments to the method's
// parameter types (a compile-time check) and sends them. An argument may be an ObjectRef of a
// type that converts: its value goes in the call. Remote() returns at once, as Ray's does:
// a call with a ref that is not ready yet is sent once it is, and the caller's later calls
// to the same actor go after it, so they keep their order; a ref that failed fails the call
// with its error. An unregistered method's calls fail with InvalidArgument (kind
// InvalidCall) naming the fix.
template <typename R, typename... Params>
class TaskCaller {
 public:
  TaskCaller(ActorId actor_id, std::string method, std::string what, absl::Status error)
      : actor_id_(std::move(actor_id)),
        method_(std::move(method)),
        what_(std::move(what)),
        error_(std::move(error)) {}

  template <typename... Args>
  ObjectRef<R> Remote(Args&&... args) const;

 private:
  ActorId actor_id_;
  std::string method_;
  std::string what_;
  absl::Status error_;
};

// A handle to an actor of class T: cheap to copy, usable from any thread and process (pass
// its id()).
template <typename T>
class ActorHandle {
 public:
  ActorHandle() = default;
  ActorHandle(ActorId id, std::string class_name)
      : id_(std::move(id)), class_name_(std::move(class_name)) {}

  const ActorId& id() const { return id_; }
  const std::string& class_name() const { return class_name_; }

  // A registered method, to call: handle.Task(&Counter::Add).Remote(3).
  template <typename R, typename... Params>
  TaskCaller<R, Params...> Task(R (T::*method)(Params...)) const;
  template <typename R, typename... Params>
  TaskCaller<R, Params...> Task(R (T::*method)(Params...) const) const;

  // Calls a method by name (as Python does); arguments are sent as given.
  template <typename R, typename... Args>
  ObjectRef<R> Call(const std::string& method, Args&&... args) const;

 private:
  ActorId id_;
  std::string class_name_;
};

// Options for creating an actor of class T; Remote(args...) creates it. Each setter returns
// *this, to chain.
template <typename T>
class ActorCreator {
 public:
  explicit ActorCreator(std::string class_name) : class_name_(std::move(class_name)) {}

  // Resource requests: "CPU" (fractions allowed), "GPU", "memory" (bytes; enforced as a
  // limit), or custom names.
  ActorCreator& SetResources(const std::map<std::string, double>& resources);
  ActorCreator& SetResource(const std::string& name, double amount);
  ActorCreator& SetName(const std::string& name);
  // -1: restart forever; 0 (default): never.
  ActorCreator& SetMaxRestarts(int n);
  // How many times a call cut off by the actor's death is retried (-1: forever).
  ActorCreator& SetMaxTaskRetries(int n);
  // > 1: calls run concurrently on fibers.
  ActorCreator& SetMaxConcurrency(int n);
  // kDefault or kSpread (kNodeAffinity: SetNodeAffinity).
  ActorCreator& SetSchedulingStrategy(SchedulingStrategy strategy);
  // Runs the actor on `node_id`; soft: elsewhere when that node cannot hold it.
  ActorCreator& SetNodeAffinity(const NodeId& node_id, bool soft = false);
  // Runs the actor inside bundle `bundle_index` of the group (-1: any bundle with room).
  ActorCreator& SetPlacementGroup(const PlacementGroup& group, int bundle_index = -1);
  // Outlives the program that created it.
  ActorCreator& SetDetached(bool detached = true);
  ActorCreator& SetEnv(const std::string& key, const std::string& value);
  // Never place the actor on these nodes (e.g. where its predecessor was slow).
  ActorCreator& SetAvoidNodes(const std::vector<NodeId>& node_ids);
  // Place the actor only on these nodes (empty: any); it waits while none has room.
  ActorCreator& SetAllowedNodes(const std::vector<NodeId>& node_ids);
  // kPython: the actor runs in a Python worker (python3 -m phalanx._worker), which also
  // hosts the C++ classes of the phalanx module (the elastic controller and trainer hosts).
  ActorCreator& SetLanguage(Language language);
  // The program that hosts this actor (default: InitOptions::code_path, or this program).
  ActorCreator& SetCodePath(const std::string& path);

  // Creates the actor with constructor arguments `args`. Returns at once with a handle (the
  // actor starts in the background; calls wait for it), or an error when the request is
  // invalid or no node can ever hold it.
  template <typename... Args>
  absl::StatusOr<ActorHandle<T>> Remote(Args&&... args) const;

 private:
  std::string class_name_;
  internal::ActorOptions options_;
};

// Starts building an actor of class T (registered with PHALANX_ACTOR).
template <typename T>
ActorCreator<T> Actor();

// An actor of a class this program does not link (registered in the program named with
// SetCodePath, or written in another language): call its methods by name with Call<R>().
struct AnyActor {};
inline ActorCreator<AnyActor> ActorOf(const std::string& class_name) {
  return ActorCreator<AnyActor>(class_name);
}

// Looks up a live named actor.
template <typename T>
absl::StatusOr<ActorHandle<T>> GetActor(const std::string& name);

// ---------------------------------------------------------------------------------------
// Remote functions (tasks)

// A task about to be sent: Remote(args...) takes each argument as a value of the function's
// parameter type or as an ObjectRef of one (resolved before the task runs: its value is sent;
// a failed ref fails the task with its error). Each setter returns *this, to chain.
//
// The task runs on a task worker: an actor of this program (or SetCodePath's) that hosts its
// PHALANX_FUNCTIONs, leased from the cluster by this process and kept for further tasks of
// the same options while it has work (see actors/internal/task_pool.h). A worker that dies
// mid-task (killed, OOM, its node lost) is replaced and the task sent again, up to
// SetMaxRetries times; then the task fails with IsActorDied and the death's cause. An
// exception the function throws fails it with IsTaskError, retried only with
// SetRetryExceptions.
template <typename R, typename... Params>
class FunctionCaller {
 public:
  FunctionCaller(std::string name, absl::Status error);

  // Per task: "CPU" (default 1), "GPU", "memory" (bytes; a limit), custom names.
  FunctionCaller& SetResources(const std::map<std::string, double>& resources);
  FunctionCaller& SetResource(const std::string& name, double amount);
  // Worker deaths a task survives (default 3, as Ray's; -1: no limit).
  FunctionCaller& SetMaxRetries(int n);
  // Also send a task again when the function throws (counted in SetMaxRetries).
  FunctionCaller& SetRetryExceptions(bool retry = true);
  FunctionCaller& SetSchedulingStrategy(SchedulingStrategy strategy);
  FunctionCaller& SetNodeAffinity(const NodeId& node_id, bool soft = false);
  FunctionCaller& SetPlacementGroup(const PlacementGroup& group, int bundle_index = -1);
  FunctionCaller& SetEnv(const std::string& key, const std::string& value);
  // The program whose PHALANX_FUNCTIONs run the task (default: this one).
  FunctionCaller& SetCodePath(const std::string& path);

  template <typename... Args>
  ObjectRef<R> Remote(Args&&... args) const;

 private:
  std::string name_;
  absl::Status error_;  // the function is not registered
  internal::ActorOptions options_;
  int max_retries_ = 3;
  bool retry_exceptions_ = false;
};

// A registered function, to call: phalanx::Task(&Square).Remote(2). An unregistered one's
// tasks fail with InvalidArgument (kind InvalidCall) naming the fix.
template <typename R, typename... Params>
FunctionCaller<R, Params...> Task(R (*function)(Params...));

// Kills the actor. no_restart = false lets it restart if its max_restarts allows.
template <typename T>
absl::Status Kill(const ActorHandle<T>& actor, bool no_restart = true);

// What the GCS knows of an actor (`phalanx list actors` shows the same).
struct ActorDescription {
  ActorId actor_id;
  std::string class_name;
  Language language = Language::kCpp;
  std::string name;  // "" unless named
  ActorState state = ActorState::kPending;
  int pid = 0;     // of its worker process; 0 while it has none
  NodeId node_id;  // nil while it has no node
  int num_restarts = 0;
  std::string death_cause;  // "" while not DEAD, else e.g. "OOM_KILLED: peak 1.9 GiB > ..."
  std::map<std::string, std::string> labels;  // given at creation (ActorOptions::labels)
};

// The actor's description; NotFound when the GCS does not know it.
template <typename T>
absl::StatusOr<ActorDescription> GetActorInfo(const ActorHandle<T>& actor);
absl::StatusOr<ActorDescription> GetActorInfo(const ActorId& actor_id);

}  // namespace phalanx

// ---------------------------------------------------------------------------------------
// Registration. Use each macro once per class, at namespace scope, in one .cc file.

// PHALANX_ACTOR(Class, ConstructorArgTypes...): registers Class for remote creation.
#define PHALANX_ACTOR(Class, ...)                                                        \
  static ::phalanx::internal::ActorRegistrar<Class, ##__VA_ARGS__> PHALANX_INTERNAL_CAT( \
      phalanx_actor_registrar_, __LINE__)(#Class)

// PHALANX_FUNCTION(Function): registers a free function for phalanx::Task(&Function).
#define PHALANX_FUNCTION(Function) PHALANX_INTERNAL_FUNCTION(Function)

// PHALANX_METHODS(Class, Method...): methods callable remotely, in the default concurrency
// group (the actor's max_concurrency).
#define PHALANX_METHODS(Class, ...) \
  PHALANX_INTERNAL_EACH(PHALANX_INTERNAL_METHOD, Class, "", 1, __VA_ARGS__)

// PHALANX_GROUP_METHODS(Class, "group", concurrency, Method...): methods that run in a
// concurrency group of their own (Ray's concurrency groups), e.g. a control lane that is
// served while a long call of the default group runs.
#define PHALANX_GROUP_METHODS(Class, Group, Concurrency, ...) \
  PHALANX_INTERNAL_EACH(PHALANX_INTERNAL_METHOD, Class, Group, Concurrency, __VA_ARGS__)

// The definitions of the templates above.
#include "actors/internal/api_inl.h"  // IWYU pragma: export
