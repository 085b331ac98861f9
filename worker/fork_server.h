// The fork server (zygote) of a C++ worker program: a process of the program, started by its
// node manager with kForkServerEnv set (base/worker_env.h has the protocol), that
// forks one worker per request. A worker forked from it skips exec, dynamic linking and
// static initialization, the bulk of a C++ program's start (about 10 ms of CPU for a program
// linked with gRPC), so a burst of actor creations on a node costs a fork each.
#pragma once

namespace phalanx::worker {

// Serves the node's fork requests on stdin until the node closes the socket (the server then
// exits). Returns only in a forked worker, once it is the node manager's child with stdin on
// /dev/null, stdout and stderr on its log, and its environment set; the caller then runs it
// as a worker. A process with more than one thread cannot fork safely: it exits at once,
// with a line on stderr, and the node starts that program's workers as processes of their own.
void ServeForks();

}  // namespace phalanx::worker
