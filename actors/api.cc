#include "actors/api.h"

#include <algorithm>
#include <atomic>
#include <boost/fiber/operations.hpp>
#include <cstdlib>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "actors/internal/task_pool.h"
#include "base/describe.h"
#include "base/mutex_check.h"
#include "base/session.h"
#include "base/tls.h"
#include "worker/core_worker.h"
#include "worker/errors.h"
#include "worker/worker_host.h"

namespace phalanx {

std::string ErrorKind(const absl::Status& status) { return worker::ErrorKind(status); }
bool IsActorDied(const absl::Status& status) { return worker::IsActorDied(status); }
bool IsTaskError(const absl::Status& status) { return worker::IsTaskError(status); }
bool IsGetTimeout(const absl::Status& status) { return worker::IsGetTimeout(status); }
namespace {

absl::Status NotInitialized() {
  return absl::FailedPreconditionError("phalanx is not initialized: call phalanx::Init() first");
}

// Each enum's names, as the GCS and its proto strings spell them.
template <typename E>
using Names = std::vector<std::pair<E, absl::string_view>>;

const auto& kSchedulingNames =
    *new Names<SchedulingStrategy>{{SchedulingStrategy::kDefault, "DEFAULT"},
                                   {SchedulingStrategy::kSpread, "SPREAD"},
                                   {SchedulingStrategy::kNodeAffinity, "NODE_AFFINITY"}};
const auto& kPlacementNames =
    *new Names<PlacementStrategy>{{PlacementStrategy::kPack, "PACK"},
                                  {PlacementStrategy::kSpread, "SPREAD"},
                                  {PlacementStrategy::kStrictPack, "STRICT_PACK"},
                                  {PlacementStrategy::kStrictSpread, "STRICT_SPREAD"}};
const auto& kLanguageNames =
    *new Names<Language>{{Language::kCpp, "cpp"}, {Language::kPython, "python"}};
const auto& kStateNames = *new Names<ActorState>{{ActorState::kPending, "PENDING"},
                                                 {ActorState::kCreating, "CREATING"},
                                                 {ActorState::kAlive, "ALIVE"},
                                                 {ActorState::kRestarting, "RESTARTING"},
                                                 {ActorState::kDead, "DEAD"}};
const auto& kGroupStateNames =
    *new Names<PlacementGroupState>{{PlacementGroupState::kPending, "PENDING"},
                                    {PlacementGroupState::kCreated, "CREATED"},
                                    {PlacementGroupState::kRescheduling, "RESCHEDULING"},
                                    {PlacementGroupState::kRemoved, "REMOVED"}};

template <typename E>
absl::string_view NameOf(const Names<E>& names, E value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  return "UNKNOWN";
}

template <typename E>
absl::StatusOr<E> Parse(const Names<E>& names, absl::string_view name, absl::string_view field) {
  std::vector<absl::string_view> allowed;
  for (const auto& [v, n] : names) {
    if (n == name) return v;
    allowed.push_back(n);
  }
  absl::string_view last = allowed.back();
  allowed.pop_back();
  return absl::InvalidArgumentError(absl::StrCat(field, " '", name, "' is unknown; use ",
                                                 absl::StrJoin(allowed, ", "), " or ", last));
}

ActorDescription ToDescription(const rpc::ActorInfo& a) {
  ActorDescription d;
  d.actor_id = ActorId(a.actor_id());
  d.class_name = a.class_name();
  d.language = a.language() == "python" ? Language::kPython : Language::kCpp;
  d.name = a.name();
  switch (a.state()) {
    case rpc::ACTOR_PENDING:
      d.state = ActorState::kPending;
      break;
    case rpc::ACTOR_CREATING:
      d.state = ActorState::kCreating;
      break;
    case rpc::ACTOR_ALIVE:
      d.state = ActorState::kAlive;
      break;
    case rpc::ACTOR_RESTARTING:
      d.state = ActorState::kRestarting;
      break;
    default:
      d.state = ActorState::kDead;
  }
  d.pid = a.pid();
  d.node_id = NodeId(a.node_id());
  d.num_restarts = a.num_restarts();
  d.labels = {a.labels().begin(), a.labels().end()};
  if (a.death_cause().kind() != rpc::DeathCause::NONE) {
    d.death_cause = rpc::DescribeCause(a.death_cause());
  }
  return d;
}

}  // namespace

absl::string_view ToString(SchedulingStrategy s) { return NameOf(kSchedulingNames, s); }
absl::string_view ToString(PlacementStrategy s) { return NameOf(kPlacementNames, s); }
absl::string_view ToString(Language language) { return NameOf(kLanguageNames, language); }
absl::string_view ToString(ActorState state) { return NameOf(kStateNames, state); }
absl::string_view ToString(PlacementGroupState state) { return NameOf(kGroupStateNames, state); }

absl::StatusOr<SchedulingStrategy> ParseSchedulingStrategy(absl::string_view name,
                                                           absl::string_view field) {
  return Parse(kSchedulingNames, name, field);
}
absl::StatusOr<PlacementStrategy> ParsePlacementStrategy(absl::string_view name,
                                                         absl::string_view field) {
  return Parse(kPlacementNames, name, field);
}
absl::StatusOr<Language> ParseLanguage(absl::string_view name, absl::string_view field) {
  return Parse(kLanguageNames, name, field);
}

absl::Status Init(const InitOptions& options) {
  ConfigureMutexDeadlockCheck();  // before any thread, and before a fork server forks
  if (worker::InWorkerMode()) std::exit(worker::RunWorker());
  auto cluster = rpc::FindCluster(options.address, options.token);
  if (!cluster.ok()) return cluster.status();
  worker::CoreWorkerOptions core;
  core.address = cluster->address;
  core.token = cluster->token;
  core.code_path = options.code_path;
  core.namespace_ = options.actor_namespace;
  core.is_driver = true;
  core.log_to_driver = options.log_to_driver;
  if (const char* job = std::getenv("PHALANX_JOB_ID"); job && *job) core.job_id = job;
  if (auto s = worker::CoreWorker::Init(core); !s.ok()) return s;
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] {
      internal::ShutdownTaskPools();
      worker::CoreWorker::Shutdown();
    });
  }
  return absl::OkStatus();
}

void Shutdown() {
  internal::ShutdownTaskPools();
  worker::CoreWorker::Shutdown();
}

bool IsInitialized() { return worker::CoreWorker::Get() != nullptr; }

void SleepFor(absl::Duration duration) {
  boost::this_fiber::sleep_for(absl::ToChronoNanoseconds(duration));
}

absl::StatusOr<PlacementGroup> CreatePlacementGroup(
    const std::vector<std::map<std::string, double>>& bundles, PlacementStrategy strategy,
    const std::string& name, bool detached, bool pend_if_infeasible) {
  auto created = internal::CreatePlacementGroupWithReason(bundles, std::string(ToString(strategy)),
                                                          name, detached, pend_if_infeasible);
  if (!created.ok()) return created.status();
  return PlacementGroup(PlacementGroupId(created->first));
}

namespace internal {

absl::StatusOr<std::pair<std::string, std::string>> CreatePlacementGroupWithReason(
    const std::vector<std::map<std::string, double>>& bundles, const std::string& strategy,
    const std::string& name, bool detached, bool pend_if_infeasible) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  rpc::PlacementGroupInfo spec;
  spec.set_name(name);
  spec.set_pend_if_infeasible(pend_if_infeasible);
  spec.set_strategy(strategy);
  if (!detached) spec.set_job_id(cw->options().job_id);  // removed with the job
  for (const auto& bundle : bundles) {
    auto* b = spec.add_bundles()->mutable_resources()->mutable_amounts();
    for (const auto& [k, v] : bundle) (*b)[k] = v;
  }
  auto created = cw->gcs().CreatePlacementGroup(spec);
  if (!created.ok()) return created.status();
  return std::make_pair(created->placement_group_id(), created->pending_reason());
}

}  // namespace internal

absl::Status RemovePlacementGroup(const PlacementGroup& group) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  return cw->gcs().RemovePlacementGroup(group.id().Hex());
}

absl::Status ReleaseBundle(const PlacementGroup& group, int index) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  return cw->gcs().ReleasePlacementGroupBundle(group.id().Hex(), index);
}

absl::Status PlacementGroup::Wait(absl::Duration timeout) const {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  while (true) {
    absl::Duration slice = std::min(absl::Seconds(30), deadline - absl::Now());
    auto pg = cw->gcs().WaitPlacementGroupReady(id_.Hex(), std::max(slice, absl::ZeroDuration()));
    if (!pg.ok()) return pg.status();
    if (pg->state() == rpc::PG_CREATED) return absl::OkStatus();
    if (pg->state() == rpc::PG_REMOVED) {
      return absl::FailedPreconditionError(
          absl::StrCat("placement group ", id_.Hex().substr(0, 8), " was removed"));
    }
    if (absl::Now() >= deadline) {
      return worker::MakeError(
          absl::StatusCode::kDeadlineExceeded, worker::error_kind::kGetTimeout,
          absl::StrCat("placement group ", id_.Hex().substr(0, 8), " is not placed after ",
                       absl::FormatDuration(timeout), ": ", pg->pending_reason()));
    }
  }
}

absl::StatusOr<std::vector<NodeId>> PlacementGroup::BundleNodes() const {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  auto pg = cw->gcs().GetPlacementGroup(id_.Hex());
  if (!pg.ok()) return pg.status();
  std::vector<NodeId> out;
  for (const auto& b : pg->bundles()) out.emplace_back(b.node_id());
  return out;
}

absl::StatusOr<PlacementGroupState> PlacementGroup::State() const {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  auto pg = cw->gcs().GetPlacementGroup(id_.Hex());
  if (!pg.ok()) return pg.status();
  switch (pg->state()) {
    case rpc::PG_PENDING:
      return PlacementGroupState::kPending;
    case rpc::PG_CREATED:
      return PlacementGroupState::kCreated;
    case rpc::PG_RESCHEDULING:
      return PlacementGroupState::kRescheduling;
    default:
      return PlacementGroupState::kRemoved;
  }
}

absl::StatusOr<ActorDescription> GetActorInfo(const ActorId& actor_id) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  auto info = cw->gcs().GetActor(actor_id.Hex());
  if (!info.ok()) return info.status();
  return ToDescription(*info);
}

namespace internal {

absl::StatusOr<std::string> CreateActor(const std::string& class_name, const ActorOptions& o,
                                        std::string packed_args) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  if (class_name.empty()) {
    return absl::InvalidArgumentError(
        "this actor class is not registered: add PHALANX_ACTOR(Class, ctor arg types...)");
  }
  rpc::ActorInfo spec;
  spec.set_class_name(class_name);
  spec.set_name(o.name);
  for (const auto& [k, v] : o.resources) (*spec.mutable_resources()->mutable_amounts())[k] = v;
  spec.set_max_restarts(o.max_restarts);
  spec.set_max_task_retries(o.max_task_retries);
  spec.set_max_concurrency(o.max_concurrency);
  // DEFAULT goes unset, as it always has; the GCS reads "" as DEFAULT.
  if (o.scheduling_strategy != SchedulingStrategy::kDefault) {
    spec.set_scheduling_strategy(std::string(ToString(o.scheduling_strategy)));
  }
  spec.set_affinity_node_id(o.affinity_node_id);
  spec.set_affinity_soft(o.affinity_soft);
  spec.set_placement_group_id(o.placement_group_id);
  spec.set_bundle_index(o.bundle_index);
  spec.set_detached(o.detached);
  for (const auto& [k, v] : o.env) (*spec.mutable_env())[k] = v;
  for (const auto& [k, v] : o.labels) (*spec.mutable_labels())[k] = v;
  spec.set_code_path(o.code_path);
  spec.set_language(std::string(ToString(o.language)));
  spec.set_namespace_(o.actor_namespace);
  for (const auto& n : o.avoid_node_ids) spec.add_avoid_node_ids(n);
  for (const auto& n : o.allowed_node_ids) spec.add_allowed_node_ids(n);
  spec.set_init_args(std::move(packed_args));
  auto created = cw->CreateActor(std::move(spec));
  if (!created.ok()) return created.status();
  return created->actor_id();
}

absl::Status CancelRef(const std::shared_ptr<worker::ObjectState>& result, bool force) {
  if (result == nullptr) return absl::InvalidArgumentError("Cancel of an empty ObjectRef");
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  absl::Status task = CancelTask(result, force);
  if (!absl::IsInvalidArgument(task)) return task;  // a task of this process
  if (force) {
    if (result->done()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "Cancel(ref, force=true) is for tasks; an actor call is cancelled without force (or "
        "Kill its actor)");
  }
  if (cw->CancelCall(result) || result->done()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "Cancel takes the ref of a task or an actor call of this process");
}

absl::Status CancelActorCall(const std::string& actor_id,
                             const std::shared_ptr<worker::ObjectState>& result) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  auto client = cw->Client(actor_id);
  if (!client.ok()) return client.status();
  (*client)->Cancel(result);
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::shared_ptr<worker::ActorClient>> ClientOf(const std::string& actor_id) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  return cw->Client(actor_id);
}

// A call's result slot, failed with `status` before the call was made.
std::shared_ptr<worker::ObjectState> FailedSlot(const absl::Status& status) {
  auto state = std::make_shared<worker::ObjectState>();
  state->Set(status);
  return state;
}

}  // namespace

std::shared_ptr<worker::ObjectState> SubmitCall(const std::string& actor_id,
                                                const std::string& method, std::string packed_args,
                                                const std::string& concurrency_group) {
  auto client = ClientOf(actor_id);
  if (!client.ok()) return FailedSlot(client.status());
  return (*client)->Submit(method, std::move(packed_args), 0, concurrency_group);
}

}  // namespace internal

bool IsCanceled() { return worker::CurrentCallCancelled(); }

namespace internal {

std::shared_ptr<worker::ObjectState> SubmitCallAfter(
    const std::string& actor_id, const std::string& method,
    std::vector<std::shared_ptr<worker::ObjectState>> deps,
    std::function<std::string(const std::vector<std::string>&)> assemble) {
  auto client = ClientOf(actor_id);
  if (!client.ok()) return FailedSlot(client.status());
  std::shared_ptr<worker::ObjectState> state;
  uint64_t seq = 0;
  std::tie(state, seq) = (*client)->Reserve(method);
  if (seq == 0) return state;
  // Filled once the last dependency is done, on a thread of its own: the thread that sets a
  // dependency may hold the lock of this very client (another call's result failed by it).
  auto left = std::make_shared<std::atomic<int>>(static_cast<int>(deps.size()));
  auto shared = std::make_shared<std::vector<std::shared_ptr<worker::ObjectState>>>(deps);
  for (const auto& dep : deps) {
    dep->OnDone([c = *client, seq, shared, left, assemble] {
      if (left->fetch_sub(1) != 1) return;
      RunInBackground([c, seq, shared, assemble] {
        std::vector<std::string> values;
        for (const auto& d : *shared) {
          if (!d->status().ok()) return c->Fill(seq, d->status(), d->value());
          values.push_back(d->value());
        }
        c->Fill(seq, absl::OkStatus(), assemble(values));
      });
    });
  }
  return state;
}

absl::StatusOr<ActorDescription> DescribeNamedActor(const std::string& name,
                                                    const std::string& ns) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  auto client = cw->NamedClient(name, ns);
  if (!client.ok()) return client.status();
  return ToDescription((*client)->info());
}

absl::StatusOr<std::string> LookupNamedActor(const std::string& name) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  auto client = cw->NamedClient(name, cw->options().namespace_);
  if (!client.ok()) return client.status();
  return (*client)->actor_id();
}

absl::Status KillActor(const std::string& actor_id, bool no_restart) {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return NotInitialized();
  return cw->Kill(actor_id, no_restart);
}

}  // namespace internal
}  // namespace phalanx
