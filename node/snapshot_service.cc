#include "node/snapshot_service.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/rpc.h"
#include "node/object_store.h"
#include "node/snapshot_store.h"

namespace phalanx::node {

grpc::Status ReceiveSnapshot(const std::string& store_dir,
                             grpc::ServerReader<rpc::SnapshotChunk>* reader,
                             rpc::PutSnapshotReply* reply) {
  rpc::SnapshotChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PutSnapshot: no chunk was sent");
  }
  if (chunk.step() < 0 || chunk.total_bytes() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("PutSnapshot: step ", chunk.step(), " and total_bytes ",
                                     chunk.total_bytes(), " must be >= 0"));
  }
  // The first chunk names it (a peer copy keeps the sender's step and epoch).
  const std::string job_id = chunk.job_id();
  const std::string from = chunk.from_node();
  SnapshotFileWriter writer;
  absl::Status opened =
      writer.Open(store_dir, job_id, chunk.step(), chunk.epoch(), from, chunk.total_bytes());
  if (!opened.ok()) return rpc::ToGrpc(opened);
  int64_t bytes = 0;
  do {
    if (auto s = writer.Append(chunk.data()); !s.ok()) return rpc::ToGrpc(s);
    bytes += static_cast<int64_t>(chunk.data().size());
  } while (reader->Read(&chunk));
  if (auto s = writer.Commit(); !s.ok()) return rpc::ToGrpc(s);
  reply->set_bytes(bytes);
  return grpc::Status::OK;
}

grpc::Status DescribeSnapshots(const std::string& store_dir,
                               const rpc::ListSnapshotsRequest& request,
                               rpc::ListSnapshotsReply* reply) {
  for (const Snapshot& s : ListSnapshots(store_dir, request.job_id())) {
    rpc::SnapshotInfo* info = reply->add_snapshots();
    info->set_step(s.step);
    info->set_epoch(s.epoch);
    info->set_bytes(s.bytes);
    info->set_from_node(s.from_node);
  }
  return grpc::Status::OK;
}

grpc::Status SendSnapshot(const std::string& store_dir, const rpc::ReadSnapshotRequest& request,
                          grpc::ServerWriter<rpc::ObjectChunk>* writer, int64_t* sent) {
  for (const Snapshot& s : ListSnapshots(store_dir, request.job_id())) {
    if (s.step != request.step()) continue;
    absl::Status status =
        StreamSnapshot(s.path, kObjectChunkBytes, [&](absl::string_view data, int64_t size) {
          rpc::ObjectChunk out;
          out.set_data(data.data(), data.size());
          out.set_size(size);
          if (!writer->Write(out)) return false;
          *sent += static_cast<int64_t>(data.size());
          return true;
        });
    if (!absl::IsNotFound(status)) return rpc::ToGrpc(status);
    // Pruned as it was opened: an older copy of the same step, if any.
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("this node holds no snapshot of step ", request.step(),
                                   " of job ", request.job_id()));
}

int RemoveSnapshotsOfEndedJobs(const std::string& store_dir, gcs::GcsClient& gcs) {
  int removed = 0;
  for (const std::string& job : SnapshotJobs(store_dir)) {
    auto info = gcs.GetJob(job);
    bool ended = false;
    if (info.ok()) {
      ended = info->state() == rpc::JOB_SUCCEEDED || info->state() == rpc::JOB_FAILED ||
              info->state() == rpc::JOB_STOPPED;
    } else if (absl::IsNotFound(info.status())) {
      struct stat st {};
      std::string dir = SnapshotJobDir(store_dir, job);
      ended = ::stat(dir.c_str(), &st) == 0 &&
              absl::Now() - absl::FromTimeT(st.st_mtime) > kStaleObjectStoreAge;
    }
    if (ended && RemoveAll(SnapshotJobDir(store_dir, job)).ok()) {
      spdlog::info("removed the snapshots of job {}: it has ended", job);
      ++removed;
    }
  }
  return removed;
}

}  // namespace phalanx::node
