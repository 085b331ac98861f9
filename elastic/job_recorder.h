// JobRecorder: an elastic job's record in the GCS, kept by its controller. It owns the record
// (state, conditions, events, the elastic status) and the checkpoint pointer, reads the scale
// and stop requests into the controller's inbox (inbox.h), and does all of its GCS traffic on
// a writer thread of its own: the step loop only changes the record in memory and never waits
// for the GCS (which may be restarting).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/gcs_client.h"
#include "elastic/inbox.h"
#include "elastic/job_keys.h"

namespace phalanx::elastic {

class JobRecorder {
 public:
  // `period`: how often the writer saves and polls for requests when nothing changed.
  // `finish_bound`: how long Finish() keeps trying to save the last record (the GCS may be
  // restarting) before it gives up with a warning. `requests`: where the scale and stop
  // requests go (the controller's inbox), each once; it must outlive the recorder.
  JobRecorder(std::string job_id, absl::Duration period, absl::Duration finish_bound,
              Inbox* requests);
  ~JobRecorder();  // Finish()
  JobRecorder(const JobRecorder&) = delete;
  JobRecorder& operator=(const JobRecorder&) = delete;

  // Takes the record as the controller starts it and starts the writer.
  void Start(gcs::GcsClient* gcs, rpc::JobInfo record);
  // Saves the record a last time (within `finish_bound`) and stops the writer. Idempotent.
  void Finish();

  // A condition (the job's phase: Pending, Running, Restarting, Scaling, Succeeded, Failed).
  void Condition(const std::string& type, const std::string& reason, const std::string& message);
  // An event in the log (the newest 400 to 500 are kept).
  void Event(const std::string& kind, const std::string& message, int world_size, int64_t epoch);
  void SetState(rpc::JobState state, const std::string& message, int exit_code);
  // Any other change to the record (the elastic status).
  void Update(const std::function<void(rpc::JobInfo*)>& change);
  std::string Describe();

  // Points the job at a saved state; the writer saves it unless the KV already points at a
  // newer one (a rank's dying gasp).
  void RecordCheckpoint(const keys::CheckpointPointer& pointer);

  // The keys whose writes are requests (the job kind's scale and stop keys): the controller
  // subscribes to them (channel KV), so that a request arrives as it is written; the writer
  // also reads them each period, which finds one written while no controller was there.
  std::vector<std::string> RequestKeys() const;
  // A request key written (a KV message of the subscription): posted to the inbox, unless
  // it is a scale request already posted, or a stop after the first.
  void OnRequest(const rpc::KvEntry& entry);

 private:
  void WriterLoop();
  void PollRequests();
  // A scale request's value, or a stop's presence, as read (either way): posted if new.
  void TakeRequestValues(const std::optional<std::string>& scale, bool stop)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string job_id_;
  const absl::Duration period_;
  const absl::Duration finish_bound_;
  gcs::GcsClient* gcs_ = nullptr;
  std::thread writer_;

  absl::Mutex mu_;
  rpc::JobInfo job_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time give_up_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();  // set by Finish()
  std::optional<keys::CheckpointPointer> pending_checkpoint_ ABSL_GUARDED_BY(mu_);
  Inbox* const requests_;
  std::string last_scale_request_ ABSL_GUARDED_BY(mu_);  // the last one posted
  bool stop_posted_ ABSL_GUARDED_BY(mu_) = false;
};

// The job's checkpoint pointer as the KV holds it (nullopt: none, or unreadable).
std::optional<keys::CheckpointPointer> ReadCheckpointPointer(gcs::GcsClient& gcs,
                                                             const std::string& job_id);
// Points the job at `pointer` unless it already points at a newer step. Returns whether it
// was written.
absl::StatusOr<bool> PointCheckpointIfNewer(gcs::GcsClient& gcs, const std::string& job_id,
                                            const keys::CheckpointPointer& pointer);

}  // namespace phalanx::elastic
