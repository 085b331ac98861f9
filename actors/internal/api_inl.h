// The definitions of actors/api.h's templates, kept out of the contract. Included only at the
// end of actors/api.h; do not include it directly.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "actors/internal/actor_options.h"
#include "actors/internal/functions.h"
#include "actors/internal/macros.h"
#include "actors/internal/registration.h"
#include "actors/internal/serialization.h"
#include "actors/internal/task_pool.h"

namespace phalanx {

namespace internal {

// The ids' strings, as the runtime takes them.
template <typename Id>
std::vector<std::string> Hexes(const std::vector<Id>& ids) {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const auto& id : ids) out.push_back(id.Hex());
  return out;
}

// The machinery's access to an ObjectRef's runtime state, which the API keeps from its users.
struct RefAccess {
  template <typename T>
  static const std::shared_ptr<worker::ObjectState>& State(const ObjectRef<T>& ref) {
    return ref.state_;
  }
  template <typename T>
  static ObjectRef<T> Make(std::shared_ptr<worker::ObjectState> state, std::string what) {
    return ObjectRef<T>(std::move(state), std::move(what));
  }
};

template <typename T>
struct IsObjectRef : std::false_type {};
template <typename T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {
  using Value = T;
};

// Adds one argument of a task for parameter type P: a value, packed as P, or a ref.
template <typename P, typename A>
void AddTaskArgument(std::vector<TaskArgument>* parts,
                     std::vector<std::shared_ptr<worker::ObjectState>>* deps, A&& arg) {
  using D = std::decay_t<A>;
  if constexpr (IsObjectRef<D>::value) {
    static_assert(std::is_convertible_v<typename IsObjectRef<D>::Value, std::decay_t<P>>,
                  "this ObjectRef's value does not convert to the function's parameter type");
    deps->push_back(RefAccess::State(arg));
    parts->push_back({"", static_cast<int>(deps->size()) - 1});
  } else {
    parts->push_back({PackValue(static_cast<std::decay_t<P>>(std::forward<A>(arg))), -1});
  }
}

}  // namespace internal

template <typename T>
bool ObjectRef<T>::Ready() const {
  return state_ && state_->done();
}

template <typename T>
absl::StatusOr<T> Get(const ObjectRef<T>& ref, absl::Duration timeout) {
  if (auto s = internal::Await(internal::RefAccess::State(ref), timeout, ref.what()); !s.ok())
    return s;
  return internal::Unpack<T>(internal::RefAccess::State(ref)->value(), ref.what());
}

inline absl::Status Get(const ObjectRef<void>& ref, absl::Duration timeout) {
  return internal::Await(internal::RefAccess::State(ref), timeout, ref.what());
}

template <typename T>
absl::StatusOr<std::vector<T>> Get(const std::vector<ObjectRef<T>>& refs, absl::Duration timeout) {
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
ObjectRef<std::decay_t<T>> Put(T&& value) {
  auto state = std::make_shared<worker::ObjectState>();
  state->Set(absl::OkStatus(), internal::PackValue(static_cast<const std::decay_t<T>&>(value)));
  return internal::RefAccess::Make<std::decay_t<T>>(std::move(state),
                                                    "a value put by this process");
}

template <typename T>
absl::Status Cancel(const ObjectRef<T>& ref, bool force) {
  return internal::CancelRef(internal::RefAccess::State(ref), force);
}

template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_returns, absl::Duration timeout) {
  std::vector<std::shared_ptr<worker::ObjectState>> states;
  for (const auto& r : refs) states.push_back(internal::RefAccess::State(r));
  std::vector<bool> done = internal::WaitForResults(states, num_returns, timeout);
  WaitResult<T> out;
  for (size_t i = 0; i < refs.size(); ++i) {
    (done[i] && static_cast<int>(out.ready.size()) < num_returns ? out.ready : out.not_ready)
        .push_back(refs[i]);
  }
  return out;
}

template <typename R, typename... Params>
template <typename... Args>
ObjectRef<R> TaskCaller<R, Params...>::Remote(Args&&... args) const {
  static_assert(sizeof...(Args) == sizeof...(Params),
                "wrong number of arguments for this actor method");
  if (!error_.ok()) {
    auto state = std::make_shared<worker::ObjectState>();
    state->Set(error_);
    return internal::RefAccess::Make<R>(state, what_);
  }
  std::vector<internal::TaskArgument> parts;
  std::vector<std::shared_ptr<worker::ObjectState>> deps;
  (internal::AddTaskArgument<Params>(&parts, &deps, std::forward<Args>(args)), ...);
  const bool pending = std::any_of(deps.begin(), deps.end(),
                                   [](const auto& d) { return d != nullptr && !d->done(); });
  const bool empty = std::any_of(deps.begin(), deps.end(), [](const auto& d) { return !d; });
  if (pending && !empty) {  // sent once they are done; the caller goes on, its order kept
    return internal::RefAccess::Make<R>(
        internal::SubmitCallAfter(
            actor_id_.Hex(), method_, std::move(deps),
            [parts = std::move(parts)](const std::vector<std::string>& values) {
              return internal::AssembleTaskArguments(parts, values);
            }),
        what_);
  }
  std::vector<std::string> values;
  for (const auto& dep : deps) {  // done (or empty: the error says so)
    if (auto s = internal::Await(dep, absl::InfiniteDuration(), what_); !s.ok()) {
      auto state = std::make_shared<worker::ObjectState>();
      state->Set(s);
      return internal::RefAccess::Make<R>(state, what_);
    }
    values.push_back(dep->value());
  }
  return internal::RefAccess::Make<R>(
      internal::SubmitCall(actor_id_.Hex(), method_,
                           internal::AssembleTaskArguments(parts, values)),
      what_);
}

namespace internal {

template <typename T, typename R, typename... Params>
TaskCaller<R, Params...> MakeCaller(const ActorHandle<T>& handle, const std::string& key) {
  auto method = RegisteredMethod<T>(key, handle.class_name());
  if (!method.ok()) {
    return TaskCaller<R, Params...>(handle.id(), "", handle.class_name(), method.status());
  }
  return TaskCaller<R, Params...>(handle.id(), *method,
                                  CallName(handle.class_name(), *method, handle.id().Hex()),
                                  absl::OkStatus());
}

}  // namespace internal

template <typename T>
template <typename R, typename... Params>
TaskCaller<R, Params...> ActorHandle<T>::Task(R (T::*method)(Params...)) const {
  return internal::MakeCaller<T, R, Params...>(*this, internal::PointerKey(method));
}

template <typename T>
template <typename R, typename... Params>
TaskCaller<R, Params...> ActorHandle<T>::Task(R (T::*method)(Params...) const) const {
  return internal::MakeCaller<T, R, Params...>(*this, internal::PointerKey(method));
}

template <typename T>
template <typename R, typename... Args>
ObjectRef<R> ActorHandle<T>::Call(const std::string& method, Args&&... args) const {
  return internal::RefAccess::Make<R>(
      internal::SubmitCall(id_.Hex(), method, internal::PackArgs(std::forward<Args>(args)...)),
      internal::CallName(class_name_, method, id_.Hex()));
}

template <typename T>
ActorCreator<T>& ActorCreator<T>::SetResources(const std::map<std::string, double>& resources) {
  options_.resources = resources;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetResource(const std::string& name, double amount) {
  options_.resources[name] = amount;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetName(const std::string& name) {
  options_.name = name;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetMaxRestarts(int n) {
  options_.max_restarts = n;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetMaxTaskRetries(int n) {
  options_.max_task_retries = n;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetMaxConcurrency(int n) {
  options_.max_concurrency = n;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetSchedulingStrategy(SchedulingStrategy strategy) {
  options_.scheduling_strategy = strategy;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetNodeAffinity(const NodeId& node_id, bool soft) {
  options_.scheduling_strategy = SchedulingStrategy::kNodeAffinity;
  options_.affinity_node_id = node_id.Hex();
  options_.affinity_soft = soft;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetPlacementGroup(const PlacementGroup& group, int bundle_index) {
  options_.placement_group_id = group.id().Hex();
  options_.bundle_index = bundle_index;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetDetached(bool detached) {
  options_.detached = detached;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetEnv(const std::string& key, const std::string& value) {
  options_.env[key] = value;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetAvoidNodes(const std::vector<NodeId>& node_ids) {
  options_.avoid_node_ids = internal::Hexes(node_ids);
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetAllowedNodes(const std::vector<NodeId>& node_ids) {
  options_.allowed_node_ids = internal::Hexes(node_ids);
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetLanguage(Language language) {
  options_.language = language;
  return *this;
}
template <typename T>
ActorCreator<T>& ActorCreator<T>::SetCodePath(const std::string& path) {
  options_.code_path = path;
  return *this;
}

template <typename T>
template <typename... Args>
absl::StatusOr<ActorHandle<T>> ActorCreator<T>::Remote(Args&&... args) const {
  auto id =
      internal::CreateActor(class_name_, options_, internal::PackArgs(std::forward<Args>(args)...));
  if (!id.ok()) return id.status();
  return ActorHandle<T>(ActorId(*id), class_name_);
}

template <typename T>
ActorCreator<T> Actor() {
  return ActorCreator<T>(internal::ClassName<T>::Get());
}

template <typename T>
absl::StatusOr<ActorHandle<T>> GetActor(const std::string& name) {
  auto id = internal::LookupNamedActor(name);
  if (!id.ok()) return id.status();
  return ActorHandle<T>(ActorId(*id), internal::ClassName<T>::Get());
}

template <typename T>
absl::Status Kill(const ActorHandle<T>& actor, bool no_restart) {
  return internal::KillActor(actor.id().Hex(), no_restart);
}

template <typename T>
absl::StatusOr<ActorDescription> GetActorInfo(const ActorHandle<T>& actor) {
  return GetActorInfo(actor.id());
}

// ---- remote functions ----

template <typename R, typename... Params>
FunctionCaller<R, Params...>::FunctionCaller(std::string name, absl::Status error)
    : name_(std::move(name)), error_(std::move(error)) {
  options_.resources = {{"CPU", 1}};
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetResources(
    const std::map<std::string, double>& resources) {
  options_.resources = resources;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetResource(const std::string& name,
                                                                        double amount) {
  options_.resources[name] = amount;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetMaxRetries(int n) {
  max_retries_ = n;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetRetryExceptions(bool retry) {
  retry_exceptions_ = retry;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetSchedulingStrategy(
    SchedulingStrategy strategy) {
  options_.scheduling_strategy = strategy;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetNodeAffinity(const NodeId& node_id,
                                                                            bool soft) {
  options_.scheduling_strategy = SchedulingStrategy::kNodeAffinity;
  options_.affinity_node_id = node_id.Hex();
  options_.affinity_soft = soft;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetPlacementGroup(
    const PlacementGroup& group, int bundle_index) {
  options_.placement_group_id = group.id().Hex();
  options_.bundle_index = bundle_index;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetEnv(const std::string& key,
                                                                   const std::string& value) {
  options_.env[key] = value;
  return *this;
}

template <typename R, typename... Params>
FunctionCaller<R, Params...>& FunctionCaller<R, Params...>::SetCodePath(const std::string& path) {
  options_.code_path = path;
  return *this;
}

template <typename R, typename... Params>
template <typename... Args>
ObjectRef<R> FunctionCaller<R, Params...>::Remote(Args&&... args) const {
  static_assert(sizeof...(Args) == sizeof...(Params),
                "wrong number of arguments for this function");
  std::string what = absl::StrCat("task ", name_);
  if (!error_.ok()) {
    auto state = std::make_shared<worker::ObjectState>();
    state->Set(error_);
    return internal::RefAccess::Make<R>(state, what);
  }
  std::vector<internal::TaskArgument> parts;
  internal::TaskSubmission task;
  (internal::AddTaskArgument<Params>(&parts, &task.deps, std::forward<Args>(args)), ...);
  task.function = name_;
  task.worker_class = internal::kCppTaskWorkerClass;
  task.worker = options_;
  task.worker_init_args = internal::PackArgs();
  task.ready_method = internal::kTaskWorkerReadyMethod;
  task.ready_args = internal::PackArgs();
  task.method = name_;
  task.assemble = [parts = std::move(parts)](const std::vector<std::string>& values) {
    return internal::AssembleTaskArguments(parts, values);
  };
  task.max_retries = max_retries_;
  if (retry_exceptions_) {
    task.retryable = [](const absl::Status&, std::string*) { return true; };
  }
  return internal::RefAccess::Make<R>(internal::SubmitTask(std::move(task)), what);
}

template <typename R, typename... Params>
FunctionCaller<R, Params...> Task(R (*function)(Params...)) {
  internal::RegisterTaskWorkerClass();
  const auto& names = internal::FunctionNames();
  auto it = names.find(internal::PointerKey(function));
  if (it == names.end()) {
    return FunctionCaller<R, Params...>(
        "", worker::MakeError(absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
                              "this function is not registered: add PHALANX_FUNCTION(Function) "
                              "at namespace scope in one .cc file"));
  }
  return FunctionCaller<R, Params...>(it->second, absl::OkStatus());
}

}  // namespace phalanx
