#include "worker/core_worker.h"

#include <unistd.h>

#include <climits>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/system.h"
#include "worker/driver_lease.h"
#include "worker/worker_host.h"

namespace phalanx::worker {
namespace {

absl::Mutex g_mu;
CoreWorker* g_core_worker ABSL_GUARDED_BY(g_mu) = nullptr;

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

absl::Status CoreWorker::Init(const CoreWorkerOptions& options) {
  absl::MutexLock lock(&g_mu);
  if (g_core_worker != nullptr) {
    return absl::AlreadyExistsError("phalanx is already initialized in this process");
  }
  auto gcs = gcs::GcsClient::Connect({options.address, options.token});
  if (!gcs.ok()) return gcs.status();
  CoreWorkerOptions filled = options;
  if (filled.job_id.empty()) filled.job_id = NewId();
  if (filled.code_path.empty()) filled.code_path = SelfExe();
  bool driver = filled.is_driver;
  bool logs = filled.is_driver && filled.log_to_driver;
  const std::string job_id = filled.job_id;
  g_core_worker = new CoreWorker(std::move(filled), std::move(*gcs));
  if (logs) {  // its job's lines only: the GCS filters LOGS by their key, the job id
    CoreWorker* cw = g_core_worker;
    absl::MutexLock sub(&cw->subscribe_mu_);
    cw->logs_ = cw->gcs_->SubscribeKeys({rpc::LOGS}, {job_id},
                                        [cw](const rpc::PubMessage& m) { cw->PrintLogs(m); });
  }
  if (driver) {
    CoreWorker* cw = g_core_worker;
    cw->driver_lease_ = std::make_unique<DriverLease>(
        cw->gcs_.get(), cw->caller_id_, [cw] { return cw->options().job_id; }, options.address);
  }
  return absl::OkStatus();
}

CoreWorker* CoreWorker::Get() {
  absl::MutexLock lock(&g_mu);
  return g_core_worker;
}

void CoreWorker::Shutdown() {
  CoreWorker* cw;
  {
    absl::MutexLock lock(&g_mu);
    cw = g_core_worker;
    g_core_worker = nullptr;
  }
  if (cw == nullptr) return;
  cw->Stop();
  delete cw;
}

CoreWorker::CoreWorker(CoreWorkerOptions options, std::unique_ptr<gcs::GcsClient> gcs)
    : caller_id_(NewId()), gcs_(std::move(gcs)) {
  options_ = std::move(options);
}

void CoreWorker::Subscribe() {
  absl::MutexLock lock(&subscribe_mu_);
  if (subscription_ || stopped_) return;
  // The stream starts with a snapshot of the table: whatever changed before it is seen.
  subscription_ =
      gcs_->Subscribe({rpc::ACTOR}, [this](const rpc::PubMessage& m) { OnActorMessage(m); });
}

CoreWorkerOptions CoreWorker::options() const {
  absl::MutexLock lock(&mu_);
  return options_;
}

void CoreWorker::Adopt(const std::string& job_id, const std::string& ns,
                       const std::string& code_path) {
  absl::MutexLock lock(&mu_);
  if (!job_id.empty()) options_.job_id = job_id;
  options_.namespace_ = ns;
  if (!code_path.empty()) options_.code_path = code_path;
}

void CoreWorker::Stop() {
  std::vector<std::string> owned;
  std::map<std::string, std::shared_ptr<ActorClient>> clients;
  {
    absl::MutexLock lock(&mu_);
    owned = owned_;
    clients = clients_;
  }
  if (options().is_driver) {
    // Like Ray: a driver's actors go with it, unless created detached.
    for (const auto& id : owned) gcs_->KillActor(id, /*no_restart=*/true).IgnoreError();
    if (driver_lease_) driver_lease_->End();
  }
  std::unique_ptr<gcs::GcsClient::Subscription> subscription, logs;
  {
    absl::MutexLock lock(&subscribe_mu_);
    stopped_ = true;
    subscription = std::move(subscription_);
    logs = std::move(logs_);
  }
  subscription.reset();
  logs.reset();
  for (auto& [id, client] : clients) client->Close();
}

void CoreWorker::PrintLogs(const rpc::PubMessage& message) {
  if (!message.has_log() || message.log().job_id() != options().job_id) return;
  const rpc::LogLines& log = message.log();
  std::string prefix =
      absl::StrCat("(", log.label(), log.label().empty() ? "" : " ", "pid=", log.pid());
  if (!log.node_ip().empty() && !absl::StartsWith(log.node_ip(), "127.")) {
    absl::StrAppend(&prefix, ", ip=", log.node_ip());
  }
  prefix += ") ";
  std::string text;
  for (const std::string& line : log.lines()) absl::StrAppend(&text, prefix, line, "\n");
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void CoreWorker::OnActorMessage(const rpc::PubMessage& message) {
  if (!message.has_actor()) return;
  std::shared_ptr<ActorClient> client;
  {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(message.actor().actor_id());
    if (it == clients_.end()) {
      // Only remember actors this process may call soon (it created or looked them up).
      return;
    }
    latest_[message.actor().actor_id()] = message.actor();
    client = it->second;
  }
  client->OnActorUpdate(message.actor());
}

std::shared_ptr<ActorClient> CoreWorker::AddClient(const rpc::ActorInfo& info) {
  std::shared_ptr<ActorClient> client;
  {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(info.actor_id());
    if (it != clients_.end()) return it->second;
    client = std::make_shared<ActorClient>(caller_id_, options_.token, info);
    clients_[info.actor_id()] = client;
  }
  // Only a process that calls actors follows their changes: a worker that is only called
  // never subscribes (each subscriber gets every actor's every change, so a burst of N
  // workers that all did would cost the GCS N² messages).
  Subscribe();
  client->OnActorUpdate(info);
  // A change published between our lookup and the registration above would be missed:
  // look once more now that updates reach the client.
  auto fresh = gcs_->GetActor(info.actor_id());
  if (fresh.ok()) client->OnActorUpdate(*fresh);
  return client;
}

absl::StatusOr<rpc::ActorInfo> CoreWorker::CreateActor(rpc::ActorInfo spec) {
  CoreWorkerOptions o = options();
  if (spec.job_id().empty()) spec.set_job_id(o.job_id);
  if (spec.namespace_().empty()) spec.set_namespace_(o.namespace_);
  if (spec.language().empty()) spec.set_language("cpp");
  if (spec.code_path().empty() && spec.language() == "cpp") spec.set_code_path(o.code_path);
  spec.set_owner_address(caller_id_);
  // Ray's ownership: an actor created by an actor is that actor's, and dies with its process
  // unless detached (the GCS kills what a dead actor owned). So are the task workers a task
  // worker's own pool leases (a nested task's children): they go when their pool's process
  // is returned, holding a CPU or not. A task's other creations stay this process's: the
  // pool returns idle task workers, and a task may hand its actor on.
  if (auto hosted = CurrentHostedActor();
      hosted && (!IsTaskWorkerClass(hosted->class_name) || IsTaskWorkerClass(spec.class_name()))) {
    spec.set_owner_address(hosted->actor_id);
  }
  auto created = gcs_->CreateActor(spec);
  if (!created.ok()) return created.status();
  {
    absl::MutexLock lock(&mu_);
    if (!created->detached()) owned_.push_back(created->actor_id());
  }
  AddClient(*created);
  return created;
}

absl::StatusOr<std::shared_ptr<ActorClient>> CoreWorker::FreshClient(const std::string& actor_id) {
  auto info = gcs_->GetActor(actor_id);
  if (!info.ok()) return info.status();
  auto client = std::make_shared<ActorClient>(NewId(), options().token, *info);
  client->OnActorUpdate(*info);
  return client;
}

absl::StatusOr<std::shared_ptr<ActorClient>> CoreWorker::Client(const std::string& actor_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(actor_id);
    if (it != clients_.end()) return it->second;
  }
  auto info = gcs_->GetActor(actor_id);
  if (!info.ok()) return info.status();
  return AddClient(*info);
}

absl::StatusOr<std::shared_ptr<ActorClient>> CoreWorker::NamedClient(const std::string& name,
                                                                     const std::string& ns) {
  auto info = gcs_->GetNamedActor(name, ns);
  if (!info.ok()) {
    if (absl::IsNotFound(info.status())) {
      return absl::NotFoundError(
          absl::StrCat("no live actor named '", name, "'",
                       ns.empty() ? "" : absl::StrCat(" in namespace '", ns, "'"),
                       "; `phalanx list actors` shows the known ones"));
    }
    return info.status();
  }
  return AddClient(*info);
}

bool CoreWorker::CancelCall(const std::shared_ptr<ObjectState>& result) {
  std::vector<std::shared_ptr<ActorClient>> clients;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, client] : clients_) clients.push_back(client);
  }
  for (const auto& client : clients) {
    if (client->Cancel(result)) return true;
  }
  return false;
}

absl::Status CoreWorker::Kill(const std::string& actor_id, bool no_restart) {
  return gcs_->KillActor(actor_id, no_restart);
}

namespace {

// BlockedScope's count of this process's waits, and whether the first one lent the CPU.
absl::Mutex blocked_mu;
int blocked_waits ABSL_GUARDED_BY(blocked_mu) = 0;
bool blocked_lent ABSL_GUARDED_BY(blocked_mu) = false;

// This process's task-worker actor, or nullopt when it is not a task worker.
std::optional<HostedActor> TaskWorkerActor() {
  auto hosted = CurrentHostedActor();
  if (!hosted || !IsTaskWorkerClass(hosted->class_name) || CoreWorker::Get() == nullptr) {
    return std::nullopt;
  }
  return hosted;
}

}  // namespace

BlockedScope::BlockedScope() {
  auto me = TaskWorkerActor();
  if (!me) return;
  counted_ = true;
  absl::MutexLock lock(&blocked_mu);
  if (blocked_waits++ > 0) return;
  auto held = CoreWorker::Get()->gcs().LendActorResources(
      me->actor_id, me->attempt, rpc::LendActorResourcesRequest::LEND, kLendCallTimeout);
  if (!held.ok()) {
    spdlog::warn("task worker {}: could not lend its CPU while it waits: {}", ShortId(me->actor_id),
                 held.status().ToString());
  }
  blocked_lent = held.ok() && !*held;
}

BlockedScope::~BlockedScope() {
  if (!counted_) return;
  absl::MutexLock lock(&blocked_mu);
  if (--blocked_waits > 0 || !blocked_lent) return;
  blocked_lent = false;
  auto me = TaskWorkerActor();
  if (!me) return;  // shut down meanwhile
  auto held = CoreWorker::Get()->gcs().LendActorResources(
      me->actor_id, me->attempt, rpc::LendActorResourcesRequest::RECLAIM, kLendCallTimeout);
  if (!held.ok()) {
    spdlog::warn("task worker {}: could not take its CPU back after a wait: {}",
                 ShortId(me->actor_id), held.status().ToString());
  }
}

}  // namespace phalanx::worker
