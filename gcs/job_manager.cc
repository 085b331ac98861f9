#include "gcs/job_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/describe.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/process.h"
#include "base/session.h"
#include "base/system.h"
#include "base/upload.h"

namespace phalanx::gcs {
namespace {

bool Finished(rpc::JobState state) {
  return state == rpc::JOB_SUCCEEDED || state == rpc::JOB_FAILED || state == rpc::JOB_STOPPED;
}

// `field`: how the caller named the id, for the error.
absl::Status CheckJobId(const std::string& id, const std::string& field = "--submission-id") {
  if (id.empty() || id.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", id, "' must be 1 to 64 characters"));
  }
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " '", id, "' may only hold letters, digits, '-', '_' and '.'; pick another"));
    }
  }
  if (id == "." || id == "..") {
    return absl::InvalidArgumentError(absl::StrCat(field, " may not be '.' or '..'"));
  }
  return absl::OkStatus();
}

// An upload id as the job manager makes them (RandomHex(8)): anything else names no upload.
bool IsUploadId(absl::string_view id) {
  if (id.size() != 16) return false;
  for (char c : id) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string DescribeEnd(int exit_code, int signal, bool stopped) {
  if (stopped) {
    return signal > 0 ? absl::StrCat("stopped by `phalanx job stop` (the driver ended by signal ",
                                     signal, ", ", strsignal(signal), ")")
                      : absl::StrCat("stopped by `phalanx job stop` (the driver exited with code ",
                                     exit_code, ")");
  }
  if (signal > 0)
    return absl::StrCat("the driver was killed by signal ", signal, " (", strsignal(signal), ")");
  if (exit_code == 0) return "the driver exited with code 0";
  return absl::StrCat("the driver exited with code ", exit_code);
}

}  // namespace

GcsJobManager::GcsJobManager(RecordTable<rpc::JobInfo>* jobs, GcsActorManager* actors,
                             GcsKvManager* kv, JobManagerOptions options)
    : jobs_(jobs), actors_(actors), kv_(kv), options_(std::move(options)) {
  for (const auto& kind : options_.kinds) kinds_[kind->Name()] = kind;
}

const JobKind* GcsJobManager::KindOf(const rpc::JobInfo& job) const {
  auto it = kinds_.find(job.kind());
  return it == kinds_.end() ? nullptr : it->second.get();
}

GcsJobManager::~GcsJobManager() { Shutdown(); }

void GcsJobManager::Start(int gcs_port) {
  {
    absl::MutexLock lock(&mu_);
    gcs_address_ = absl::StrCat("127.0.0.1:", gcs_port);
  }
  for (const auto& job : jobs_->List()) {
    // Only the drivers this job manager started (records written by other clients are theirs).
    if (job.kind() != "driver" || Finished(job.state())) continue;
    if (job.runner_pid() > 0 && ProcessAlive(job.runner_pid()) &&
        absl::StrContains(ProcessCmdline(job.runner_pid()), job.job_id())) {
      spdlog::info("job {}: its runner (pid {}) is still running", job.job_id(), job.runner_pid());
      continue;
    }
    Reconcile(job);
  }
  watch_thread_ = std::thread([this] { WatchLoop(); });
}

void GcsJobManager::Shutdown() {
  stopping_ = true;
  if (watch_thread_.joinable()) watch_thread_.join();
}

std::string GcsJobManager::JobDir(const std::string& job_id) const {
  return absl::StrCat(options_.session_dir, "/jobs/", job_id);
}

absl::StatusOr<rpc::JobInfo> GcsJobManager::Submit(const rpc::SubmitJobRequest& request) {
  std::string job_id = request.submission_id();
  if (!job_id.empty()) {
    if (auto s = CheckJobId(job_id); !s.ok()) return s;
    if (auto existing = jobs_->Get(job_id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("--submission-id '", job_id, "' is taken by a job that is ",
                       rpc::JobState_Name(existing->state()).substr(4), "; pick another id"));
    }
  }
  std::string kind = request.kind();
  if (kind.empty() && !request.spec_yaml().empty()) kind = "elastic";
  if (!kind.empty() && kind != "driver") {
    auto it = kinds_.find(kind);
    if (it == kinds_.end()) {
      std::vector<std::string> known = {"driver"};
      for (const auto& [name, k] : kinds_) known.push_back(name);
      return absl::InvalidArgumentError(
          absl::StrCat("kind: '", kind, "' is not a job kind this GCS runs; use one of ",
                       absl::StrJoin(known, ", ")));
    }
    if (!request.upload_id().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("upload_id: only driver jobs take a working dir, and this one is of kind '",
                       kind, "'; leave --working-dir out"));
    }
    return SubmitKind(*it->second, request, job_id);
  }
  if (request.entrypoint().empty() || request.entrypoint(0).empty()) {
    return absl::InvalidArgumentError(
        "entrypoint: empty: put the command after `--`, e.g. "
        "`phalanx job submit --working-dir . -- python3 train.py`");
  }
  if (options_.session_dir.empty()) {
    return absl::FailedPreconditionError(
        "this GCS was started without --session-dir, so it cannot run jobs; start the head "
        "with `phalanx start --head`");
  }
  if (job_id.empty()) job_id = absl::StrCat("job-", RandomHex(4));
  return SubmitDriver(request, job_id);
}

std::string GcsJobManager::UploadsDir() const {
  return absl::StrCat(options_.session_dir, "/uploads");
}

void GcsJobManager::RemoveStaleUploads() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  auto ttl = absl::ToChronoSeconds(options_.upload_ttl);
  for (const auto& entry : fs::directory_iterator(UploadsDir(), ec)) {
    auto written = entry.last_write_time(ec);
    if (ec || now - written < ttl) continue;
    spdlog::info("removing upload {}: no submission named it within {}",
                 entry.path().filename().string(), absl::FormatDuration(options_.upload_ttl));
    RemoveAll(entry.path().string()).IgnoreError();
  }
}

absl::StatusOr<rpc::UploadWorkingDirReply> GcsJobManager::ReceiveUpload(
    const std::function<bool(rpc::UploadChunk*)>& next) {
  if (options_.session_dir.empty()) {
    return absl::FailedPreconditionError(
        "this GCS was started without --session-dir, so it cannot take a working dir; start "
        "the head with `phalanx start --head`");
  }
  if (auto s = MakeDirs(UploadsDir(), 0700); !s.ok()) return s;
  RemoveStaleUploads();
  std::string id = RandomHex(8);
  // Written under a name no submission accepts, renamed once complete.
  std::string partial = absl::StrCat(UploadsDir(), "/", id, ".partial");
  if (::mkdir(partial.c_str(), 0700) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", partial, ": ", std::strerror(errno)));
  }
  UploadWriter writer(partial, options_.max_working_dir_bytes, options_.max_working_dir_files);
  absl::Status status;
  rpc::UploadChunk chunk;
  while (status.ok() && next(&chunk)) {
    if (!chunk.path().empty()) status = writer.Begin(chunk.path(), chunk.mode());
    if (status.ok()) status = writer.Append(chunk.data());
  }
  if (status.ok()) status = writer.Finish();
  std::string done = absl::StrCat(UploadsDir(), "/", id);
  if (status.ok() && ::rename(partial.c_str(), done.c_str()) != 0) {
    status = absl::UnavailableError(
        absl::StrCat("cannot rename ", partial, " to ", done, ": ", std::strerror(errno)));
  }
  if (!status.ok()) {
    RemoveAll(partial).IgnoreError();
    return status;
  }
  rpc::UploadWorkingDirReply reply;
  reply.set_upload_id(id);
  reply.set_bytes(writer.bytes());
  reply.set_files(writer.files());
  spdlog::info("upload {}: {} files, {} bytes", id, writer.files(), writer.bytes());
  return reply;
}

absl::StatusOr<rpc::JobInfo> GcsJobManager::SubmitDriver(const rpc::SubmitJobRequest& request,
                                                         const std::string& job_id) {
  std::string upload;
  if (!request.upload_id().empty()) {
    upload = absl::StrCat(UploadsDir(), "/", request.upload_id());
    if (!IsUploadId(request.upload_id()) || !PathExists(upload)) {
      return absl::NotFoundError(absl::StrCat(
          "upload_id '", absl::CEscape(request.upload_id().substr(0, 64)),
          "': the head holds no such upload (an upload serves one submission and is removed "
          "after ",
          absl::FormatDuration(options_.upload_ttl), " unused); upload the working dir again"));
    }
  }
  std::string dir = JobDir(job_id);
  if (auto s = MakeDirs(absl::StrCat(options_.session_dir, "/jobs")); !s.ok()) return s;
  // The job's directory is new (not `mkdir -p`): a concurrent submission of the same id, or a
  // directory left by an earlier job, is refused, and the cleanup below removes only what
  // this submission created.
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat("--submission-id '", job_id, "': the head already holds a directory for ",
                       "a job of that id (", dir, "); pick another id"));
    }
    return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  // From here on a refusal leaves nothing behind: no directory, no record.
  std::string cwd = dir + "/working_dir";
  int moved = upload.empty() ? ::mkdir(cwd.c_str(), 0700) : ::rename(upload.c_str(), cwd.c_str());
  if (moved != 0) {
    auto s =
        absl::UnavailableError(absl::StrCat("cannot create ", cwd, ": ", std::strerror(errno)));
    RemoveAll(dir).IgnoreError();
    return s;
  }

  rpc::JobInfo job;
  job.set_job_id(job_id);
  job.set_kind("driver");
  job.set_state(rpc::JOB_PENDING);
  for (const auto& a : request.entrypoint()) job.add_entrypoint(a);
  job.set_working_dir(request.working_dir());
  for (const auto& [k, v] : request.env()) (*job.mutable_env())[k] = v;
  job.set_submit_time_ms(NowMs());
  job.set_log_path(dir + "/driver.log");
  job.set_driver_node_id("head");

  SpawnOptions spawn;
  spawn.argv = {options_.runner_path, "--job-id",           job_id, "--job-dir", dir,
                "--session-dir",      options_.session_dir, "--"};
  for (const auto& a : request.entrypoint()) spawn.argv.push_back(a);
  for (const auto& [k, v] : request.env()) spawn.env.emplace_back(k, v);
  {
    absl::MutexLock lock(&mu_);
    if (gcs_address_.empty()) return absl::UnavailableError("the GCS is still starting; retry");
    spawn.env.emplace_back("PHALANX_ADDRESS", gcs_address_);
  }
  spawn.env.emplace_back("PHALANX_TOKEN", options_.token);
  if (!options_.tls_dir.empty()) spawn.env.emplace_back("PHALANX_TLS_DIR", options_.tls_dir);
  spawn.env.emplace_back("PHALANX_JOB_ID", job_id);
  spawn.cwd = cwd;
  spawn.stdout_path = dir + "/runner.log";
  spawn.new_session = true;  // not a child of the GCS's fate: a GCS restart leaves it running
  // The record first: the runner's first report must find it.
  if (auto s = jobs_->Put(job_id, job); !s.ok()) {
    RemoveAll(dir).IgnoreError();
    return s;
  }
  auto pid = Spawn(spawn);
  if (!pid.ok()) {
    Finish(job_id, -1, 0, false,
           absl::StrCat("the job runner could not start: ", pid.status().message()));
    return pid.status();
  }
  WritePidFile(options_.session_dir, absl::StrCat("job-", job_id), *pid, "phalanx-job-runner")
      .IgnoreError();
  jobs_
      ->Update(job_id,
               [&](rpc::JobInfo* j, bool exists) {
                 if (!exists) return false;
                 j->set_runner_pid(*pid);
                 return true;
               })
      .IgnoreError();
  spdlog::info("job {}: runner pid {} runs `{}`", job_id, *pid,
               absl::StrJoin(request.entrypoint(), " "));
  auto stored = jobs_->Get(job_id);
  return stored ? *stored : job;
}

absl::StatusOr<rpc::JobInfo> GcsJobManager::SubmitKind(const JobKind& kind,
                                                       const rpc::SubmitJobRequest& request,
                                                       const std::string& requested_id) {
  auto launch = kind.Prepare(request, requested_id);
  if (!launch.ok()) return launch.status();
  rpc::JobInfo& job = launch->job;
  job.set_kind(kind.Name());
  job.set_state(rpc::JOB_PENDING);
  job.set_submit_time_ms(NowMs());
  if (jobs_->Get(job.job_id())) {
    return absl::AlreadyExistsError(
        absl::StrCat("job id '", job.job_id(), "' is taken; pick another --submission-id"));
  }
  if (auto s = jobs_->Put(job.job_id(), job); !s.ok()) return s;

  // Its actor: detached (the job outlives its submitter), restarted if its process dies.
  rpc::ActorInfo& controller = launch->actor;
  controller.set_detached(true);
  controller.set_max_restarts(-1);
  controller.set_job_id(job.job_id());
  (*controller.mutable_env())["PHALANX_JOB_ID"] = job.job_id();
  for (const auto& [k, v] : request.env()) (*controller.mutable_env())[k] = v;
  const std::string& job_id = job.job_id();
  auto created = actors_->Create(controller);
  if (!created.ok()) {
    jobs_
        ->Update(job_id,
                 [&](rpc::JobInfo* j, bool exists) {
                   if (!exists) return false;
                   j->set_state(rpc::JOB_FAILED);
                   j->set_end_time_ms(NowMs());
                   j->set_message(absl::StrCat("the controller could not start: ",
                                               created.status().message()));
                   return true;
                 })
        .IgnoreError();
    return created.status();
  }
  jobs_
      ->Update(job_id,
               [&](rpc::JobInfo* j, bool exists) {
                 if (!exists) return false;
                 if (j->controller_actor_id().empty()) {
                   j->set_controller_actor_id(created->actor_id());
                 }
                 return true;
               })
      .IgnoreError();
  auto stored = jobs_->Get(job_id);
  return stored ? *stored : job;
}

absl::StatusOr<rpc::JobInfo> GcsJobManager::Stop(const std::string& job_id, double grace_s) {
  auto job = jobs_->Get(job_id);
  if (!job) {
    return absl::NotFoundError(
        absl::StrCat("no job '", job_id, "'; `phalanx job list` shows the known ones"));
  }
  if (Finished(job->state())) return *job;
  if (const JobKind* kind = KindOf(*job)) {
    if (auto s = kind->RequestStop(*job, *kv_); !s.ok()) return s;
    // The controller takes the request at its next look; one that does not run (its program
    // exits at once, it is still being created, or restarting) cannot, and the job ends here.
    auto controller = job->controller_actor_id().empty() ? std::nullopt
                                                         : actors_->Get(job->controller_actor_id());
    if (!controller || controller->state() != rpc::ACTOR_ALIVE) {
      EndKindJob(job_id, rpc::JOB_STOPPED,
                 absl::StrCat("stopped on request; its controller was ",
                              controller ? rpc::StateName(controller->state()) : "not started",
                              controller && controller->num_restarts() > 0
                                  ? absl::StrCat(" after ", controller->num_restarts(),
                                                 " restart(s), last: ",
                                                 rpc::DescribeCause(controller->death_cause()))
                                  : ""));
    }
    auto stored = jobs_->Get(job_id);
    return stored ? *stored : *job;
  }
  if (job->kind() != "driver") {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id,
                     " was not started by `phalanx job submit`: stop its driver "
                     "where it runs"));
  }
  if (grace_s <= 0) grace_s = 10;
  WriteFile(JobDir(job_id) + "/stop_grace", absl::StrCat(grace_s, "\n")).IgnoreError();
  jobs_
      ->Update(job_id,
               [](rpc::JobInfo* j, bool exists) {
                 if (!exists || Finished(j->state())) return false;
                 j->set_stop_requested(true);
                 j->set_message("stopping: SIGTERM sent to the driver");
                 return true;
               })
      .IgnoreError();
  pid_t runner = job->runner_pid();
  if (runner > 0 && ProcessAlive(runner) && absl::StrContains(ProcessCmdline(runner), job_id)) {
    ::kill(runner, SIGTERM);
  } else {
    Reconcile(*job);
  }
  auto stored = jobs_->Get(job_id);
  return stored ? *stored : *job;
}

void GcsJobManager::OnActorDead(const rpc::ActorInfo& actor) {
  if (actor.job_id().empty()) return;
  auto job = jobs_->Get(actor.job_id());
  if (!job || Finished(job->state()) || job->controller_actor_id() != actor.actor_id()) return;
  EndKindJob(
      job->job_id(), rpc::JOB_FAILED,
      absl::StrCat("the job's controller cannot run: ", rpc::DescribeCause(actor.death_cause())));
}

void GcsJobManager::EndKindJob(const std::string& job_id, rpc::JobState state,
                               const std::string& message) {
  bool ended = false;
  jobs_
      ->Update(job_id,
               [&](rpc::JobInfo* j, bool exists) {
                 if (!exists || Finished(j->state())) return false;
                 j->set_state(state);
                 j->set_end_time_ms(NowMs());
                 j->set_message(message);
                 ended = true;
                 return true;
               })
      .IgnoreError();
  if (!ended) return;
  spdlog::warn("job {}: {}", job_id, message);
  for (const auto& a : actors_->List(job_id)) {
    if (a.state() != rpc::ACTOR_DEAD)
      actors_->Kill(a.actor_id(), /*no_restart=*/true).IgnoreError();
  }
}

absl::StatusOr<rpc::JobInfo> GcsJobManager::Scale(const rpc::ScaleJobRequest& request) {
  auto job = jobs_->Get(request.job_id());
  if (!job) {
    return absl::NotFoundError(
        absl::StrCat("no job '", request.job_id(), "'; `phalanx job list` shows the known ones"));
  }
  const JobKind* kind = KindOf(*job);
  if (kind == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", request.job_id(), " is a ", job->kind(),
        " job and cannot scale; only elastic training jobs (`job submit -f JOB.yaml`) do"));
  }
  if (Finished(job->state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(), " has ended (",
                                                      rpc::JobState_Name(job->state()).substr(4),
                                                      "); nothing to scale"));
  }
  if (auto s = kind->RequestScale(*job, request, *kv_); !s.ok()) return s;
  return *job;
}

absl::Status GcsJobManager::Update(const rpc::JobInfo& update) {
  if (auto s = CheckJobId(update.job_id(), "UpdateJob: job_id"); !s.ok()) return s;
  // What the GCS itself decides about a job (what runs, where, under which process, where its
  // log is) is never taken from a caller: a record could otherwise point StopJob's SIGTERM at
  // any process, or JobLogs at any file.
  auto keep_ours = [](const rpc::JobInfo& ours, rpc::JobInfo* j) {
    j->mutable_entrypoint()->CopyFrom(ours.entrypoint());
    j->set_working_dir(ours.working_dir());
    j->mutable_env()->clear();
    j->mutable_env()->insert(ours.env().begin(), ours.env().end());
    j->set_driver_pid(ours.driver_pid());
    j->set_driver_node_id(ours.driver_node_id());
    j->set_log_path(ours.log_path());
    j->set_kind(ours.kind());
    j->set_spec_yaml(ours.spec_yaml());
    j->set_runner_pid(ours.runner_pid());
    j->set_submission_host(ours.submission_host());
    j->set_submit_time_ms(ours.submit_time_ms());
    // The elastic controller's record is read before the GCS names the controller in it.
    j->set_controller_actor_id(ours.controller_actor_id());
    j->set_stop_requested(ours.stop_requested() || j->stop_requested());
  };
  return jobs_->Update(update.job_id(), [&](rpc::JobInfo* j, bool exists) {
    rpc::JobInfo next = update;
    keep_ours(exists ? *j : rpc::JobInfo(), &next);
    *j = std::move(next);
    return true;
  });
}

absl::Status GcsJobManager::Report(const rpc::ReportJobRequest& report) {
  auto job = jobs_->Get(report.job_id());
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", report.job_id(), "'"));
  if (!report.finished()) {
    return jobs_->Update(report.job_id(), [&](rpc::JobInfo* j, bool exists) {
      if (!exists || Finished(j->state())) return false;
      j->set_state(rpc::JOB_RUNNING);
      j->set_driver_pid(report.driver_pid());
      j->set_start_time_ms(report.time_ms() > 0 ? report.time_ms() : NowMs());
      return true;
    });
  }
  Finish(report.job_id(), report.exit_code(), report.signal(), report.stopped(), report.message());
  return absl::OkStatus();
}

void GcsJobManager::Finish(const std::string& job_id, int exit_code, int signal, bool stopped,
                           const std::string& message) {
  bool changed = false;
  jobs_
      ->Update(
          job_id,
          [&](rpc::JobInfo* j, bool exists) {
            if (!exists || Finished(j->state())) return false;
            bool was_stopped = stopped || j->stop_requested();
            j->set_state(was_stopped      ? rpc::JOB_STOPPED
                         : exit_code == 0 ? rpc::JOB_SUCCEEDED
                                          : rpc::JOB_FAILED);
            j->set_exit_code(exit_code);
            j->set_signal(signal);
            j->set_end_time_ms(NowMs());
            if (j->start_time_ms() == 0) j->set_start_time_ms(j->end_time_ms());
            j->set_message(message.empty() ? DescribeEnd(exit_code, signal, was_stopped) : message);
            changed = true;
            return true;
          })
      .IgnoreError();
  if (!changed) return;
  auto job = jobs_->Get(job_id);
  spdlog::info("job {}: {} ({})", job_id, job ? rpc::JobState_Name(job->state()) : "?",
               job ? job->message() : "");
  // The job's actors go with it, unless detached.
  int killed = 0;
  for (const auto& actor : actors_->List(job_id)) {
    if (actor.detached() || actor.state() == rpc::ACTOR_DEAD) continue;
    if (actors_->Kill(actor.actor_id(), /*no_restart=*/true).ok()) ++killed;
  }
  if (killed > 0) spdlog::info("job {}: killed its {} actor(s)", job_id, killed);
  if (!options_.session_dir.empty()) {
    ::unlink(absl::StrCat(options_.session_dir, "/pids/job-", job_id, ".pid").c_str());
  }
}

void GcsJobManager::Reconcile(const rpc::JobInfo& job) {
  auto result = ReadFile(JobDir(job.job_id()) + "/result");
  if (result.ok()) {
    std::vector<std::string> parts = absl::StrSplit(absl::StripAsciiWhitespace(*result), ' ');
    int exit_code = -1, signal = 0, stopped = 0;
    if (parts.size() >= 3 && absl::SimpleAtoi(parts[0], &exit_code) &&
        absl::SimpleAtoi(parts[1], &signal) && absl::SimpleAtoi(parts[2], &stopped)) {
      Finish(job.job_id(), exit_code, signal, stopped != 0, "");
      return;
    }
  }
  Finish(job.job_id(), -1, 0, false,
         absl::StrCat("the job's runner (pid ", job.runner_pid(),
                      ") ended without a result; the driver's log may say why: ", job.log_path()));
}

void GcsJobManager::WatchLoop() {
  while (!stopping_) {
    absl::SleepFor(absl::Milliseconds(250));
    for (const auto& job : jobs_->List()) {
      if (job.kind() != "driver" || Finished(job.state()) || job.runner_pid() <= 0) continue;
      ::waitpid(job.runner_pid(), nullptr, WNOHANG);  // reap our own runners
      if (ProcessAlive(job.runner_pid()) &&
          absl::StrContains(ProcessCmdline(job.runner_pid()), job.job_id())) {
        continue;
      }
      // Gone: give its last report a moment to land, then settle from the result file.
      absl::SleepFor(absl::Milliseconds(200));
      auto fresh = jobs_->Get(job.job_id());
      if (fresh && !Finished(fresh->state())) Reconcile(*fresh);
    }
  }
}

absl::StatusOr<std::string> GcsJobManager::LogPath(const std::string& job_id) const {
  auto job = jobs_->Get(job_id);
  if (!job) {
    return absl::NotFoundError(
        absl::StrCat("no job '", job_id, "'; `phalanx job list` shows the known ones"));
  }
  if (!job->log_path().empty() && !absl::StartsWith(job->log_path(), JobDir(job_id) + "/")) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id,
                                                      "'s log is not in its own dir (",
                                                      JobDir(job_id), "); the record was altered"));
  }
  if (job->log_path().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id,
                     " is an elastic training job with no output yet (its Python ranks' "
                     "prints appear here once they print): `phalanx job status ",
                     job_id,
                     "` shows its events; its workers' logs are in the nodes' session "
                     "dirs (logs/worker-*.log)"));
  }
  return job->log_path();
}

absl::Status GcsJobManager::AppendLog(const std::string& job_id, const std::string& data) {
  auto job = jobs_->Get(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  if (job->kind() == "driver") {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is a driver job: its runner writes its log (the driver's output)"));
  }
  std::string path = job->log_path();
  if (path.empty()) {
    if (options_.session_dir.empty()) {
      return absl::FailedPreconditionError(
          "this GCS was started without --session-dir, so it keeps no job logs; start the "
          "head with `phalanx start --head`");
    }
    if (auto s = MakeDirs(JobDir(job_id), 0700); !s.ok()) return s;
    path = JobDir(job_id) + "/output.log";
    auto s = jobs_->Update(job_id, [&](rpc::JobInfo* j, bool exists) {
      if (!exists) return false;
      if (j->log_path().empty()) j->set_log_path(path);
      path = j->log_path();
      return true;
    });
    if (!s.ok()) return s;
  }
  if (!absl::StartsWith(path, JobDir(job_id) + "/")) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, "'s log is not in its own dir"));
  }
  absl::MutexLock lock(&append_mu_);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  int64_t size = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
  std::string out = data;
  if (size >= kMaxAppendedLog) {
    out.clear();
  } else if (size + static_cast<int64_t>(out.size()) > kMaxAppendedLog) {
    out = absl::StrCat("[phalanx] the job's log reached ", kMaxAppendedLog >> 20,
                       " MiB: later output is only in the workers' own logs "
                       "(logs/worker-*.log in each node's session dir)\n");
  }
  absl::Status result = absl::OkStatus();
  if (!out.empty() && ::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
    result = absl::UnavailableError(absl::StrCat("writing ", path, ": ", std::strerror(errno)));
  }
  ::close(fd);
  return result;
}

absl::StatusOr<std::pair<std::string, int64_t>> GcsJobManager::TailLog(const std::string& job_id,
                                                                       int64_t max_bytes) const {
  auto path = LogPath(job_id);
  if (!path.ok()) return path.status();
  int fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::make_pair(std::string(), int64_t{0});  // not written yet
  struct stat st {};
  int64_t size = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
  int64_t from = std::max<int64_t>(0, size - std::max<int64_t>(0, max_bytes));
  std::string tail(static_cast<size_t>(size - from), '\0');
  ssize_t n = size > from ? ::pread(fd, tail.data(), tail.size(), from) : 0;
  ::close(fd);
  tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return std::make_pair(std::move(tail), size);
}

absl::Status GcsJobManager::StreamLogs(const rpc::JobLogsRequest& request,
                                       const std::function<bool(const rpc::JobLogsChunk&)>& write,
                                       const std::function<bool()>& cancelled) {
  auto log_path = LogPath(request.job_id());
  auto job = jobs_->Get(request.job_id());
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", request.job_id(), "'"));
  // Followed, an elastic job with no output yet is an empty log that may begin later.
  bool may_begin = request.follow() && job->kind() != "driver" && job->log_path().empty();
  if (!log_path.ok() && !may_begin) return log_path.status();
  int64_t offset = std::max<int64_t>(0, request.offset());
  std::string buffer(64 << 10, '\0');
  int fd = -1;
  while (true) {
    if (fd < 0) {
      auto path = LogPath(request.job_id());  // checked to be in the job's dir
      if (path.ok()) fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
    }
    bool finished = false;
    if (auto fresh = jobs_->Get(request.job_id())) finished = Finished(fresh->state());
    // Drain what is there now.
    while (fd >= 0) {
      ssize_t n = ::pread(fd, buffer.data(), buffer.size(), offset);
      if (n <= 0) break;
      rpc::JobLogsChunk chunk;
      chunk.set_offset(offset);
      chunk.set_data(buffer.data(), static_cast<size_t>(n));
      offset += n;
      if (!write(chunk)) {
        ::close(fd);
        return absl::OkStatus();
      }
    }
    if (!request.follow() || finished || stopping_ || cancelled()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (fd >= 0) ::close(fd);
  return absl::OkStatus();
}

}  // namespace phalanx::gcs
