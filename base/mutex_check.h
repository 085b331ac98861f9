// Abseil's run-time lock-order (deadlock) check, set once per process.
#pragma once

namespace phalanx {

// The environment variable that sets the check: "off" (the default), "report" (log a
// lock-order cycle and go on) or "abort" (log it and abort; scripts/test.sh runs the suite
// with it).
inline constexpr char kMutexDeadlockCheckEnv[] = "PHALANX_MUTEX_DEADLOCK_CHECK";

// Sets Abseil's lock-order check for absl::Mutex in this process from
// $PHALANX_MUTEX_DEADLOCK_CHECK. Abseil turns the check on where it was built without NDEBUG,
// as Debian's libabsl is: there every Lock records itself in one process-wide graph under one
// spin lock, gRPC's own locks included (gRPC's mutexes are absl::Mutex). Phalanx is built as a
// release, so the check is off unless asked for. Call it first in main, before any thread
// starts (a lock taken before the check is turned on and released after would be missing from
// its record); calling it again with the variable unchanged, as phalanx::Init does, changes
// nothing. An unknown value is reported on stderr and taken as "off".
void ConfigureMutexDeadlockCheck();

}  // namespace phalanx
