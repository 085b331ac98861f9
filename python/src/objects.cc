// The object store's one native call: a value that another node holds, copied into a file of
// this one (python/phalanx/_objects.py reads it from there, and node/object_store.h
// serves it).
#include <fcntl.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/proto/node.grpc.pb.h"
#include "base/rpc.h"
#include "python/src/bindings.h"

namespace phalanx::python {
namespace {

// One stub per node address, for the life of the process.
rpc::NodeManagerService::Stub* NodeStub(const std::string& address) {
  static absl::Mutex mu;
  static auto* stubs = new std::map<std::string, std::unique_ptr<rpc::NodeManagerService::Stub>>;
  absl::MutexLock lock(&mu);
  auto& stub = (*stubs)[address];
  if (!stub) stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(address));
  return stub.get();
}

absl::StatusOr<std::string> Outcome(const grpc::Status& status, const std::string& address) {
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) return std::string("missing");
  if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    return std::string("owner_dead");
  }
  if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat("node at ", address));
  return std::string("ok");
}

// "ok" (the object is in `path`; with an empty path, only there), "missing" (not in the
// store) or "owner_dead"; other failures (the node unreachable, a full disk) are errors.
absl::StatusOr<std::string> ReadObject(const std::string& address, const std::string& token,
                                       const std::string& owner, const std::string& object_id,
                                       const std::string& path, absl::Duration timeout) {
  grpc::ClientContext context;
  rpc::PrepareContext(&context, token, timeout, /*wait_for_ready=*/false);
  rpc::ReadObjectRequest request;
  request.set_owner(owner);
  request.set_object_id(object_id);
  request.set_probe(path.empty());
  auto reader = NodeStub(address)->ReadObject(&context, request);
  if (path.empty()) {
    rpc::ObjectChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return Outcome(reader->Finish(), address);
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path));
  rpc::ObjectChunk chunk;
  int64_t at = 0;
  absl::Status written = absl::OkStatus();
  while (reader->Read(&chunk)) {
    if (at == 0 && chunk.size() > 0 && ::posix_fallocate(fd, 0, chunk.size()) != 0) {
      written = absl::ResourceExhaustedError(absl::StrCat(
          "no room for a ", chunk.size(), "-byte object in ", path, " (/dev/shm is full)"));
      context.TryCancel();
      break;
    }
    const std::string& data = chunk.data();
    for (size_t done = 0; done < data.size();) {
      ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, at);
      if (n <= 0) {
        written = absl::InternalError(absl::StrCat("writing ", path, " failed"));
        break;
      }
      done += static_cast<size_t>(n);
      at += n;
    }
    if (!written.ok()) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  ::close(fd);
  if (!written.ok()) return written;
  return Outcome(status, address);
}

// Whether each of `processes` ("<pid>-<start time>") runs on the machine of the node at
// `address`.
absl::StatusOr<std::vector<bool>> ProcessesAlive(const std::string& address,
                                                 const std::string& token,
                                                 const std::vector<std::string>& processes,
                                                 absl::Duration timeout) {
  grpc::ClientContext context;
  rpc::PrepareContext(&context, token, timeout, /*wait_for_ready=*/false);
  rpc::ProcessesAliveRequest request;
  for (const std::string& p : processes) request.add_processes(p);
  rpc::ProcessesAliveReply reply;
  grpc::Status status = NodeStub(address)->ProcessesAlive(&context, request, &reply);
  if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat("node at ", address));
  if (reply.alive_size() != request.processes_size()) {
    return absl::InternalError(absl::StrCat("node at ", address, " answered ", reply.alive_size(),
                                            " of ", request.processes_size(), " processes"));
  }
  return std::vector<bool>(reply.alive().begin(), reply.alive().end());
}

}  // namespace

void BindObjects(py::module_& m) {
  m.def(
      "processes_alive",
      [](const std::string& address, const std::string& token,
         const std::vector<std::string>& processes, double timeout_s) {
        return CallBlocking(
            [&] { return ProcessesAlive(address, token, processes, Timeout(timeout_s)); });
      },
      "Whether each process (\"<pid>-<start time>\") runs on the machine of the node at "
      "`address`; an error when the node does not answer.");
  m.def(
      "read_object",
      [](const std::string& address, const std::string& token, const std::string& owner,
         const std::string& object_id, const std::string& path, double timeout_s) {
        return CallBlocking(
            [&] { return ReadObject(address, token, owner, object_id, path, Timeout(timeout_s)); });
      },
      "Copies an object of another node's store into `path` (empty: only looks): 'ok', "
      "'missing' or 'owner_dead'.");
}

}  // namespace phalanx::python
