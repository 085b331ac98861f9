// WorkerHost: what a worker process runs. It learns from its node manager which actor to
// host, builds it from the registry (its constructor's error becomes CREATION_FAILED), serves
// WorkerService (one PushCalls stream per caller; each call runs on its concurrency group's
// executor), and reports ready. The process is one actor for its whole life.
#pragma once

#include <optional>
#include <string>

namespace phalanx::worker {

// The actor this worker process hosts, and which attempt of it (0 first, then one more per
// restart); known from just before its constructor runs. nullopt outside a worker.
struct HostedActor {
  std::string actor_id;
  int attempt = 0;
  std::string class_name;
};
std::optional<HostedActor> CurrentHostedActor();

// True when this process was started by a node manager to host an actor.
bool InWorkerMode();

// Hosts the actor named by the environment the node manager set; returns when the worker
// is told to exit (or cannot start), with the process exit code.
int RunWorker();

}  // namespace phalanx::worker
