#include "elastic/snapshot_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/proto/node.grpc.pb.h"
#include "base/rpc.h"
#include "node/snapshot_store.h"
#include "worker/core_worker.h"

namespace phalanx::elastic {
namespace {

// How long the peer's address is kept before the node list is read again.
constexpr absl::Duration kPeerLookupPeriod = absl::Seconds(10);
// The size of one chunk sent to the peer (the rate is kept chunk by chunk).
constexpr int64_t kPeerChunkBytes = int64_t{1} << 20;
// How long a writer waits for another rank of its node that writes a snapshot of the same job
// (the ranks of a node hold the same state: one writes it, the others find it there). A rank
// that holds the lock and is stopped (SIGSTOP) costs the others this much, then they write.
constexpr absl::Duration kNodeLockWait = absl::Seconds(2);

// An advisory lock on a file of the job's snapshot directory, shared by the ranks of a node.
class NodeLock {
 public:
  NodeLock(const std::string& path, absl::Duration wait) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return;
    absl::Time deadline = absl::Now() + wait;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (absl::Now() >= deadline) return;
      absl::SleepFor(absl::Milliseconds(5));
    }
    held_ = true;
  }
  ~NodeLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

}  // namespace

SnapshotWriter::SnapshotWriter(SnapshotWriterOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
  if (options_.peer_copy) peer_thread_ = std::thread([this] { PeerRun(); });
}

SnapshotWriter::~SnapshotWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (peer_call_ != nullptr) peer_call_->TryCancel();
  }
  thread_.join();
  if (peer_thread_.joinable()) peer_thread_.join();
}

void SnapshotWriter::Offer(std::shared_ptr<const std::string> state, int64_t step, int64_t epoch) {
  if (!state) return;
  absl::MutexLock lock(&mu_);
  if (step == offered_step_ && epoch == offered_epoch_) return;  // the same state again
  offered_step_ = step;
  offered_epoch_ = epoch;
  next_ = std::move(state);
  next_step_ = step;
  next_epoch_ = epoch;
}

void SnapshotWriter::RolledBack(int64_t step) {
  {
    absl::MutexLock lock(&mu_);
    if (next_ && next_step_ > step) {
      next_.reset();
      next_step_ = -1;
    }
    offered_step_ = -1;
  }
  node::PruneSnapshots(options_.store_dir, options_.job_id, node::kSnapshotsKept, step);
}

void SnapshotWriter::Run() {
  const std::string dir = node::SnapshotJobDir(options_.store_dir, options_.job_id);
  while (true) {
    std::shared_ptr<const std::string> state;
    int64_t step, epoch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return next_ || stop_; };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      state = std::move(next_);
      step = next_step_;
      epoch = next_epoch_;
    }
    absl::Status written = absl::OkStatus();
    if (!MakeDirs(dir, 0700).ok()) {
      written = absl::InternalError(absl::StrCat("cannot create ", dir));
    } else {
      // One rank of the node writes; the others find its copy (the same state).
      NodeLock lock(absl::StrCat(dir, "/.write.lock"), kNodeLockWait);
      if (!node::HasSnapshot(options_.store_dir, options_.job_id, step, epoch)) {
        written = node::WriteSnapshot(options_.store_dir, options_.job_id, step, epoch, "", *state);
        if (absl::IsAlreadyExists(written)) written = absl::OkStatus();
      }
    }
    bool tell = false;  // the first failure of a run of them: said in the job's log too
    absl::ReleasableMutexLock lock(&mu_);
    if (written.ok()) {
      warned_ = false;
      // The copy on another host is of the newest state kept here.
      if (options_.peer_copy) {
        kept_ = std::move(state);
        kept_step_ = step;
        kept_epoch_ = epoch;
      }
    } else {
      if (!warned_) {
        spdlog::warn("job {}: the snapshot of step {} was not kept in this node's memory: {}",
                     options_.job_id, step, written.message());
        warned_ = true;
        tell = true;
      }
    }
    lock.Release();
    // And where the user looks: the job's log (`phalanx job logs`, fit()'s output). Not under
    // mu_: a slow GCS must not hold up Offer, which a step calls.
    worker::CoreWorker* cw = worker::CoreWorker::Get();
    if (tell && cw != nullptr) {
      cw->gcs()
          .AppendJobLog(options_.job_id, absl::StrCat("(node ", options_.node_id.substr(0, 8),
                                                      ") phalanx: the snapshot of step ", step,
                                                      " was not kept in this node's memory: ",
                                                      written.message(), "\n"))
          .IgnoreError();
    }
  }
}

void SnapshotWriter::PeerRun() {
  while (true) {
    std::shared_ptr<const std::string> state;
    int64_t step, epoch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return kept_ || stop_; };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      state = std::move(kept_);
      step = kept_step_;
      epoch = kept_epoch_;
    }
    CopyToPeer(*state, step, epoch);
  }
}

std::string SnapshotWriter::PeerAddress() {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Now() - peer_looked_ < kPeerLookupPeriod) return peer_;
  }
  std::string peer;
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw != nullptr) {
    auto nodes = cw->gcs().GetAllNodes(/*alive_only=*/true);
    if (nodes.ok()) {
      std::vector<std::pair<std::string, std::string>> ring;  // node id, address
      std::string own_address;
      for (const auto& n : *nodes) {
        ring.emplace_back(n.node_id(), n.address());
        if (n.node_id() == options_.node_id) own_address = n.address();
      }
      std::sort(ring.begin(), ring.end());
      auto me = std::find_if(ring.begin(), ring.end(),
                             [&](const auto& n) { return n.first == options_.node_id; });
      if (me != ring.end()) {
        // The next node of the ring on another host (two node managers of one machine share
        // its memory: a copy there would not outlive the host); else the next node at all (a
        // copy that outlives this node manager's store, at least).
        auto host = [](const std::string& address) {
          return address.substr(0, address.rfind(':'));
        };
        std::string same_host;
        for (size_t i = 1; i < ring.size(); ++i) {
          const auto& candidate = ring[(static_cast<size_t>(me - ring.begin()) + i) % ring.size()];
          if (host(candidate.second) != host(own_address)) {
            peer = candidate.second;
            break;
          }
          if (same_host.empty()) same_host = candidate.second;
        }
        if (peer.empty()) peer = same_host;
      }
    }
  }
  absl::MutexLock lock(&mu_);
  peer_ = peer;
  peer_looked_ = absl::Now();
  return peer;
}

void SnapshotWriter::CopyToPeer(const std::string& state, int64_t step, int64_t epoch) {
  const std::string dir = node::SnapshotJobDir(options_.store_dir, options_.job_id);
  // One rank of the node sends; the others' copies would be the same bytes.
  NodeLock lock(absl::StrCat(dir, "/.peer.lock"), absl::ZeroDuration());
  if (!lock.held()) return;
  std::string address = PeerAddress();
  if (address.empty()) return;  // no other host
  absl::Status sent =
      PutSnapshot(address, options_.token, {options_.job_id, step, epoch, options_.node_id}, state,
                  options_.peer_bytes_per_s, [this](grpc::ClientContext* context) {
                    absl::MutexLock lock(&mu_);
                    peer_call_ = context;  // the destructor cancels it (null: the copy ended)
                    return !stop_;
                  });
  if (!sent.ok() && !absl::IsAlreadyExists(sent) && !absl::IsCancelled(sent)) {
    absl::MutexLock lock(&mu_);
    peer_looked_ = absl::InfinitePast();  // look again: the node may be gone
    spdlog::debug("job {}: the snapshot of step {} was not copied to {}: {}", options_.job_id, step,
                  address, sent.message());
  }
}

absl::Status PutSnapshot(const std::string& address, const std::string& token,
                         const SnapshotName& name, absl::string_view state, double bytes_per_s,
                         const std::function<bool(grpc::ClientContext*)>& go_on) {
  const int64_t total = static_cast<int64_t>(state.size());
  const double rate = bytes_per_s > 0 ? std::max(bytes_per_s, 1e6) : 0;
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  // 30 s, and the time the bytes take at the rate (or at 100 MB/s, unbounded).
  rpc::PrepareContext(&context, token,
                      absl::Seconds(30 + static_cast<double>(total) / (rate > 0 ? rate : 1e8)),
                      false);
  auto stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(address));
  rpc::PutSnapshotReply reply;
  if (go_on && !go_on(&context)) return absl::CancelledError("stopped");
  auto writer = stub->PutSnapshot(&context, &reply);
  bool sent_all = true;
  bool stopped = false;
  int64_t at = 0;
  do {
    rpc::SnapshotChunk chunk;
    if (at == 0) {
      chunk.set_job_id(name.job_id);
      chunk.set_step(name.step);
      chunk.set_epoch(name.epoch);
      chunk.set_total_bytes(total);
      chunk.set_from_node(name.from_node);
    }
    int64_t n = std::min(kPeerChunkBytes, total - at);
    chunk.set_data(state.data() + at, static_cast<size_t>(n));
    if (!writer->Write(chunk)) {
      sent_all = false;  // the peer answered early (it holds that step already) or went away
      break;
    }
    at += n;
    // At most `rate`: the copy must not take the link from the collectives.
    if (rate > 0) {
      absl::Duration wait = start + absl::Seconds(static_cast<double>(at) / rate) - absl::Now();
      if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    }
    if (go_on && !go_on(&context)) {
      context.TryCancel();
      sent_all = false;
      stopped = true;
      break;
    }
  } while (at < total);
  if (sent_all) writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (go_on) go_on(nullptr);
  if (stopped) return absl::CancelledError("stopped");
  if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat("node at ", address));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<node::Snapshot>> ListNodeSnapshots(const std::string& address,
                                                              const std::string& token,
                                                              const std::string& job_id,
                                                              absl::Duration timeout) {
  grpc::ClientContext context;
  rpc::PrepareContext(&context, token, timeout, false);
  rpc::ListSnapshotsRequest request;
  request.set_job_id(job_id);
  rpc::ListSnapshotsReply reply;
  auto stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(address));
  grpc::Status status = stub->ListSnapshots(&context, request, &reply);
  if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat("node at ", address));
  std::vector<node::Snapshot> out;
  for (const rpc::SnapshotInfo& info : reply.snapshots()) {
    node::Snapshot s;
    s.step = info.step();
    s.epoch = info.epoch();
    s.bytes = info.bytes();
    s.from_node = info.from_node();
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::string> FetchSnapshot(const std::string& address, const std::string& token,
                                          const std::string& job_id, int64_t step,
                                          absl::Duration timeout) {
  grpc::ClientContext context;
  rpc::PrepareContext(&context, token, timeout, false);
  rpc::ReadSnapshotRequest request;
  request.set_job_id(job_id);
  request.set_step(step);
  auto stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(address));
  auto reader = stub->ReadSnapshot(&context, request);
  std::string state;
  rpc::ObjectChunk chunk;
  while (reader->Read(&chunk)) {
    if (state.empty() && chunk.size() > 0) state.reserve(static_cast<size_t>(chunk.size()));
    state.append(chunk.data());
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat("node at ", address));
  return state;
}

}  // namespace phalanx::elastic
