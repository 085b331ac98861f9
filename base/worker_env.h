// Environment variables of an actor's spec that the node's prestarted workers understand.
#pragma once

namespace phalanx {

// The job an actor belongs to. A prestarted worker takes it on when the actor is placed on
// it (it sets the variable then), so an actor that sets it still gets a prestarted worker.
inline constexpr char kJobIdEnv[] = "PHALANX_JOB_ID";

// Python actors: modules, comma-separated (e.g. "torch,numpy"), that the worker imports
// before it takes its actor. The list is part of the program's identity for prestarting: the
// node keeps idle workers that have already imported them, so a replacement rank of a torch
// job is ready without paying for `import torch`.
inline constexpr char kWorkerImportsEnv[] = "PHALANX_WORKER_IMPORTS";

}  // namespace phalanx

// C++ programs: set (to "1") on a program's fork server (zygote). Such a process has done its
// dynamic linking and its static initialization, and waits, before any gRPC, for the node to
// ask it for a worker: it forks one, which becomes the node manager's child (the node is a
// child subreaper) and goes on as a worker with the environment and log the node sent.
//
// The node's socket is the server's stdin (SOCK_SEQPACKET). A request is one message:
// the worker's log path, then its environment as KEY=VALUE entries, each ended by '\0'. The
// answer is one message: the new worker's pid in decimal, or '!' and why it could not fork.
inline constexpr char kForkServerEnv[] = "PHALANX_WORKER_FORK_SERVER";
// A fork server's process name (comm, what ps shows) while it serves; its workers take back
// the program's.
inline constexpr char kForkServerName[] = "phalanx-zygote";
// The largest fork request a server accepts, in bytes (the environment of an actor).
inline constexpr int kMaxForkRequestBytes = 64 << 10;
