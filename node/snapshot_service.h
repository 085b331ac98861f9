// The node manager's side of elastic jobs' snapshots (node/snapshot_store.h): a peer's copy
// received, what the store holds of a job, a snapshot streamed to a reader on another node, and
// the snapshots of jobs that ended removed. Kept apart from node_manager.cc's RPC wiring.
#pragma once

#include <cstdint>
#include <string>

#include "base/proto/node.grpc.pb.h"
#include "client/gcs_client.h"

namespace phalanx::node {

// PutSnapshot: the chunks of one snapshot from a rank of another node, written into `store_dir`
// as its peer copy. ALREADY_EXISTS (after the first chunk) when the store holds that step.
grpc::Status ReceiveSnapshot(const std::string& store_dir,
                             grpc::ServerReader<rpc::SnapshotChunk>* reader,
                             rpc::PutSnapshotReply* reply);

// ListSnapshots.
grpc::Status DescribeSnapshots(const std::string& store_dir,
                               const rpc::ListSnapshotsRequest& request,
                               rpc::ListSnapshotsReply* reply);

// ReadSnapshot: the state of that step (the newest epoch's), in chunks; NOT_FOUND when the store
// does not hold it. Returns the bytes sent in `sent`.
grpc::Status SendSnapshot(const std::string& store_dir, const rpc::ReadSnapshotRequest& request,
                          grpc::ServerWriter<rpc::ObjectChunk>* writer, int64_t* sent);

// Removes the snapshots of jobs that ended (SUCCEEDED, FAILED, STOPPED) or that the GCS does not
// know (once their directory is older than kStaleObjectStoreAge). A GCS that does not answer
// removes nothing. Returns how many jobs' snapshots were removed.
int RemoveSnapshotsOfEndedJobs(const std::string& store_dir, gcs::GcsClient& gcs);

}  // namespace phalanx::node
