#include "elastic/job_recorder.h"

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/system.h"

namespace phalanx::elastic {

std::optional<keys::CheckpointPointer> ReadCheckpointPointer(gcs::GcsClient& gcs,
                                                             const std::string& job_id) {
  auto value = gcs.KvGet(keys::kNamespace, keys::Checkpoint(job_id));
  if (!value.ok() || !value->has_value()) return std::nullopt;
  return keys::DecodeCheckpoint(**value);
}

absl::StatusOr<bool> PointCheckpointIfNewer(gcs::GcsClient& gcs, const std::string& job_id,
                                            const keys::CheckpointPointer& pointer) {
  auto current = ReadCheckpointPointer(gcs, job_id);
  if (current && current->step >= pointer.step) return false;
  auto put = gcs.KvPut(keys::kNamespace, keys::Checkpoint(job_id), keys::Encode(pointer), true);
  if (!put.ok()) return put.status();
  return true;
}

JobRecorder::JobRecorder(std::string job_id, absl::Duration period, absl::Duration finish_bound,
                         Inbox* requests)
    : job_id_(std::move(job_id)),
      period_(period),
      finish_bound_(finish_bound),
      requests_(requests) {}

JobRecorder::~JobRecorder() { Finish(); }

void JobRecorder::Start(gcs::GcsClient* gcs, rpc::JobInfo record) {
  gcs_ = gcs;
  {
    absl::MutexLock lock(&mu_);
    job_ = std::move(record);
    dirty_ = true;
  }
  writer_ = std::thread([this] { WriterLoop(); });
}

void JobRecorder::Finish() {
  {
    absl::MutexLock lock(&mu_);
    if (!finished_) give_up_ = absl::Now() + finish_bound_;
    finished_ = true;
    dirty_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

void JobRecorder::Condition(const std::string& type, const std::string& reason,
                            const std::string& message) {
  absl::MutexLock lock(&mu_);
  auto* c = job_.add_conditions();
  c->set_type(type);
  c->set_time_ms(NowMs());
  c->set_reason(reason);
  c->set_message(message);
  spdlog::info("job {}: {} — {}: {}", job_id_, type, reason, message);
  dirty_ = true;
}

void JobRecorder::Event(const std::string& kind, const std::string& message, int world_size,
                        int64_t epoch) {
  absl::MutexLock lock(&mu_);
  auto* e = job_.add_events();
  e->set_time_ms(NowMs());
  e->set_kind(kind);
  e->set_message(message);
  e->set_world_size(world_size);
  e->set_epoch(epoch);
  if (job_.events_size() > 500) job_.mutable_events()->DeleteSubrange(0, 100);
  spdlog::info("job {}: [{}] {} (world {}, epoch {})", job_id_, kind, message, world_size, epoch);
  dirty_ = true;
}

void JobRecorder::SetState(rpc::JobState state, const std::string& message, int exit_code) {
  absl::MutexLock lock(&mu_);
  job_.set_state(state);
  job_.set_message(message);
  job_.set_exit_code(exit_code);
  if (state != rpc::JOB_RUNNING && state != rpc::JOB_PENDING) job_.set_end_time_ms(NowMs());
  dirty_ = true;
}

void JobRecorder::Update(const std::function<void(rpc::JobInfo*)>& change) {
  absl::MutexLock lock(&mu_);
  change(&job_);
  dirty_ = true;
}

std::string JobRecorder::Describe() {
  absl::MutexLock lock(&mu_);
  return job_.DebugString();
}

void JobRecorder::RecordCheckpoint(const keys::CheckpointPointer& pointer) {
  absl::MutexLock lock(&mu_);
  pending_checkpoint_ = pointer;
  dirty_ = true;
}

std::vector<std::string> JobRecorder::RequestKeys() const {
  // As the GCS publishes a KV write: "<namespace>/<key>".
  return {absl::StrCat(keys::kNamespace, "/", keys::Scale(job_id_)),
          absl::StrCat(keys::kNamespace, "/", keys::Stop(job_id_))};
}

void JobRecorder::OnRequest(const rpc::KvEntry& entry) {
  if (entry.namespace_() != keys::kNamespace || entry.deleted()) return;
  absl::MutexLock lock(&mu_);
  if (entry.key() == keys::Scale(job_id_)) TakeRequestValues(entry.value(), false);
  if (entry.key() == keys::Stop(job_id_)) TakeRequestValues(std::nullopt, true);
}

void JobRecorder::TakeRequestValues(const std::optional<std::string>& scale, bool stop) {
  if (scale.has_value() && *scale != last_scale_request_) {
    last_scale_request_ = *scale;
    Signal request;
    request.kind = Signal::Kind::kScaleRequested;
    request.value = *scale;
    requests_->Post(std::move(request));
  }
  if (stop && !stop_posted_) {
    stop_posted_ = true;
    Signal request;
    request.kind = Signal::Kind::kStopRequested;
    requests_->Post(std::move(request));
  }
}

// Reads the requests the job kind wrote (elastic/job_keys.h) into the inbox.
void JobRecorder::PollRequests() {
  auto scale = gcs_->KvGet(keys::kNamespace, keys::Scale(job_id_));
  auto stop = gcs_->KvGet(keys::kNamespace, keys::Stop(job_id_));
  absl::MutexLock lock(&mu_);
  TakeRequestValues(scale.ok() ? *scale : std::nullopt, stop.ok() && stop->has_value());
}

void JobRecorder::WriterLoop() {
  while (true) {
    rpc::JobInfo snapshot;
    bool last;
    std::optional<keys::CheckpointPointer> checkpoint;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&dirty_), period_);
      last = finished_;
      checkpoint.swap(pending_checkpoint_);
    }
    if (checkpoint) {
      // A rank's dying gasp may have pointed the job at a newer state: the newer one stays.
      auto written = PointCheckpointIfNewer(*gcs_, job_id_, *checkpoint);
      if (!written.ok()) {
        absl::MutexLock lock(&mu_);
        if (!pending_checkpoint_) pending_checkpoint_ = checkpoint;
      }
    }
    PollRequests();
    {
      absl::MutexLock lock(&mu_);
      if (!dirty_ && !last) continue;
      dirty_ = false;
      snapshot = job_;
    }
    if (auto s = gcs_->UpdateJob(snapshot); !s.ok()) {
      spdlog::warn("job {}: cannot save the job record: {}", job_id_, s);
      absl::MutexLock lock(&mu_);
      dirty_ = true;
    }
    if (last) {
      absl::MutexLock lock(&mu_);
      if (!dirty_) return;
      if (absl::Now() > give_up_) {
        spdlog::warn("job {}: the last record was not saved within {}; giving up", job_id_,
                     absl::FormatDuration(finish_bound_));
        return;
      }
    }
  }
}

}  // namespace phalanx::elastic
