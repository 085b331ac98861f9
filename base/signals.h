// Termination signals for daemons: block SIGTERM/SIGINT/SIGHUP in every thread (call before
// starting any), then wait for one on the main thread and shut down in order.
#pragma once

namespace phalanx {

// Blocks SIGTERM, SIGINT and SIGHUP for this thread and the threads it starts; ignores SIGPIPE.
void BlockTerminationSignals();

// Waits for one of the blocked termination signals and returns its number.
int WaitForTerminationSignal();

// Sends SIGTERM to ourselves (wakes WaitForTerminationSignal from another thread).
void RequestTermination();

}  // namespace phalanx
