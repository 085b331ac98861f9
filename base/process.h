// Starting, watching and stopping child processes. All functions are thread-safe and safe to
// call from a process that runs other threads (the child only calls async-signal-safe
// functions between fork and exec).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program; searched on PATH if it has no '/'
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) ours
  std::string stdout_path;                               // appended to; empty: inherit ours
  std::string stderr_path;       // appended to; empty: same as stdout_path (or inherit)
  std::string cwd;               // empty: ours
  bool new_session = false;      // setsid(): detach from our terminal and process group
  bool die_with_parent = false;  // the kernel SIGKILLs the child when we die
  int stdin_fd = -1;             // the child's stdin (-1: /dev/null); the caller keeps it open
  int umask = -1;                // the child's umask (-1: ours)
};

// Starts a process. Returns its pid, or an error naming the program when it cannot be
// executed (not found, not executable): exec failures are reported, not left to the child.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// True if `pid` exists and is not a zombie.
bool ProcessAlive(pid_t pid);

// The start time of `pid` (field 22 of /proc/PID/stat, clock ticks since boot): with the pid,
// it names one process for good, as pids are reused. "" if it is gone.
std::string ProcessStartTime(pid_t pid);

// True when process `pid` that started at `start_time` (ProcessStartTime) has ended or is
// ending: gone, reused, a zombie, exiting, or with a SIGKILL pending. Once kill(pid, SIGKILL)
// has returned, this is true, though the process may still be in the kernel's exit path.
bool ProcessEnding(pid_t pid, const std::string& start_time);

// The parent of `pid` (from /proc/PID/stat); -1 if it is gone.
pid_t ProcessParent(pid_t pid);

// The scheduler's state letter of `pid` (field 3 of /proc/PID/stat): 'R' running or runnable,
// 'S' sleeping, 'D' in an uninterruptible wait, 'T' stopped by a signal, 't' stopped by a
// tracer, 'Z' a zombie; '\0' if it is gone. A process starved of CPU on a busy machine is
// 'R' or 'S', never 'T': the state tells a slow process from a stopped one.
char ProcessState(pid_t pid);

// True for a state in which a process cannot run until something outside it resumes it
// (SIGSTOP, a tracer) or reaps it: 'T', 't', 'Z', 'X', and '\0' (gone).
bool StateCannotRun(char state);

// The command line of `pid` with arguments joined by spaces; empty if it is gone.
std::string ProcessCmdline(pid_t pid);

// Sends SIGTERM, waits up to `grace` for the process to go, then SIGKILLs it and waits up to
// 2 s more. Reaps it when it is our child. Returns true when the process is gone.
bool TerminateProcess(pid_t pid, absl::Duration grace);

// Waits up to `timeout` for `pid` to go (reaping it if it is our child).
bool WaitProcessGone(pid_t pid, absl::Duration timeout);

// Resident set size of `pid` in bytes (from /proc/PID/statm); -1 if it is gone.
int64_t ProcessRssBytes(pid_t pid);
// Peak resident set of `pid` since it started (VmHWM), in bytes; -1 if it cannot be read.
int64_t ProcessPeakRssBytes(pid_t pid);

}  // namespace phalanx
