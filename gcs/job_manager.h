// GcsJobManager: jobs submitted to the head (`phalanx job submit`).
//
// A driver job runs its entrypoint under a phalanx-job-runner, a small supervisor process
// that the GCS starts in a session of its own: the runner starts the driver, writes its output
// to the job's log, forwards a stop (SIGTERM, then SIGKILL after the grace period), and
// reports the result to the GCS (retrying while the GCS restarts) and to a result file. So a
// GCS killed with -9 leaves running drivers running; the restarted GCS loads every job from
// Redis and finds its runners again (or their result files).
//
//   <session>/uploads/<upload id>/   a working dir streamed in (UploadWorkingDir), until a
//                                    submission names it (it moves) or upload_ttl passes
//   <session>/jobs/<job id>/
//     working_dir/   the client's working dir, copied (the driver's cwd)
//     driver.log     the driver's stdout and stderr
//     result         "<exit code> <signal> <stopped>" once the driver ended
//
// A job of another kind (gcs/job_kind.h, e.g. an elastic training job) is launched by its
// kind: the job manager records what the kind prepared and creates its actor, which owns the
// job's record from then on; stop and scale requests go to it through the kind.
//
// When a job ends, its actors that are not detached are killed (like Ray's job cleanup).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/gcs.pb.h"
#include "gcs/actor_manager.h"
#include "gcs/job_kind.h"
#include "gcs/kv_manager.h"
#include "gcs/record_table.h"

namespace phalanx::gcs {

struct JobManagerOptions {
  std::string session_dir;  // empty: no driver jobs (submission fails with a clear error)

  std::string token;        // PHALANX_TOKEN for drivers
  std::string tls_dir;      // PHALANX_TLS_DIR for drivers (empty: plaintext)
  std::string runner_path;  // phalanx-job-runner
  // Bounds of one working-dir upload (`--max-working-dir-mb` on the GCS for the first).
  int64_t max_working_dir_bytes = 100ll << 20;
  int64_t max_working_dir_files = 100000;
  // An upload no submission named within this long is removed (checked at each new upload).
  absl::Duration upload_ttl = absl::Hours(1);
  // The job kinds submissions may name besides drivers (GcsServerOptions::job_kinds).
  std::vector<std::shared_ptr<const JobKind>> kinds;
};

class GcsJobManager {
 public:
  GcsJobManager(RecordTable<rpc::JobInfo>* jobs, GcsActorManager* actors, GcsKvManager* kv,
                JobManagerOptions options);
  ~GcsJobManager();

  // After the job table is loaded: finds the runners of unfinished driver jobs (or their
  // results) and starts watching them.
  // `gcs_port`: drivers run on the head and reach the GCS at 127.0.0.1:port.
  void Start(int gcs_port);
  void Shutdown();

  // Receives a streamed working dir: `next` fills in the next chunk, false at the stream's
  // end. Written to disk as it comes; on any error nothing is left behind.
  absl::StatusOr<rpc::UploadWorkingDirReply> ReceiveUpload(
      const std::function<bool(rpc::UploadChunk*)>& next);
  absl::StatusOr<rpc::JobInfo> Submit(const rpc::SubmitJobRequest& request);
  absl::StatusOr<rpc::JobInfo> Stop(const std::string& job_id, double grace_s);
  // An actor died for good: if it was the controller of a job of a kind (elastic) that has not
  // ended, the job fails with its cause (nothing else would end it).
  void OnActorDead(const rpc::ActorInfo& actor);
  // Passes a scale request to the job's kind (FailedPrecondition for a driver job).
  absl::StatusOr<rpc::JobInfo> Scale(const rpc::ScaleJobRequest& request);
  absl::Status Report(const rpc::ReportJobRequest& report);
  // Stores a job record from a job's controller (state, message, events, elastic status). The
  // fields the GCS owns (entrypoint, working dir, env, kind, spec, driver and runner pids, log
  // path) keep their stored values (empty for a record new to the GCS).
  absl::Status Update(const rpc::JobInfo& job);

  // Streams the job's log from `offset` to `write` (false: the reader went away); with
  // `follow`, until the job ended and its log is drained, or `cancelled` returns true.
  // The driver log's path, checked to be in the job's own dir. NotFound: no such job;
  // FailedPrecondition: an elastic job (no driver), or a record pointing elsewhere.
  absl::StatusOr<std::string> LogPath(const std::string& job_id) const;
  // The last `max_bytes` of the driver log, and its whole size.
  absl::StatusOr<std::pair<std::string, int64_t>> TailLog(const std::string& job_id,
                                                          int64_t max_bytes) const;
  // Appends `data` to the job's log: an elastic job's first append makes its log
  // (output.log in the job's dir). Past kMaxAppendedLog bytes the rest is dropped, once
  // said in the log. NotFound: no such job; FailedPrecondition: a driver job (its runner
  // writes its log).
  absl::Status AppendLog(const std::string& job_id, const std::string& data);
  static constexpr int64_t kMaxAppendedLog = int64_t{256} << 20;
  absl::Status StreamLogs(const rpc::JobLogsRequest& request,
                          const std::function<bool(const rpc::JobLogsChunk&)>& write,
                          const std::function<bool()>& cancelled);

 private:
  absl::StatusOr<rpc::JobInfo> SubmitDriver(const rpc::SubmitJobRequest& request,
                                            const std::string& job_id);
  absl::StatusOr<rpc::JobInfo> SubmitKind(const JobKind& kind, const rpc::SubmitJobRequest& request,
                                          const std::string& requested_id);
  // The kind that launched `job`; null for a driver job (or a kind this GCS does not know).
  const JobKind* KindOf(const rpc::JobInfo& job) const;
  std::string JobDir(const std::string& job_id) const;
  std::string UploadsDir() const;
  // Removes uploads older than upload_ttl.
  void RemoveStaleUploads() const;
  // Marks a driver job finished (once) and cleans up its actors.
  void Finish(const std::string& job_id, int exit_code, int signal, bool stopped,
              const std::string& message);
  // A job whose runner is gone: its result file, or FAILED.
  void Reconcile(const rpc::JobInfo& job);
  // Ends a job of a kind whose controller cannot: kills its live actors (the controller and
  // its ranks) and records `state` with `message`.
  void EndKindJob(const std::string& job_id, rpc::JobState state, const std::string& message);
  void WatchLoop();

  RecordTable<rpc::JobInfo>* jobs_;
  GcsActorManager* actors_;
  GcsKvManager* kv_;
  const JobManagerOptions options_;
  std::map<std::string, std::shared_ptr<const JobKind>> kinds_;  // by JobKind::Name()
  absl::Mutex mu_;
  std::string gcs_address_ ABSL_GUARDED_BY(mu_);  // set by Start()
  std::atomic<bool> stopping_{false};
  std::thread watch_thread_;
  absl::Mutex append_mu_;  // one AppendLog writes at a time (its size check, then its write)
};

}  // namespace phalanx::gcs
