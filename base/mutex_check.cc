#include "base/mutex_check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"

namespace phalanx {

void ConfigureMutexDeadlockCheck() {
  const char* value = std::getenv(kMutexDeadlockCheckEnv);
  std::string mode = value ? value : "off";
  absl::OnDeadlockCycle check = absl::OnDeadlockCycle::kIgnore;
  if (mode == "report") {
    check = absl::OnDeadlockCycle::kReport;
  } else if (mode == "abort") {
    check = absl::OnDeadlockCycle::kAbort;
  } else if (mode != "off") {
    std::fprintf(stderr, "%s=%s is not one of off, report, abort: the check stays off\n",
                 kMutexDeadlockCheckEnv, mode.c_str());
  }
  absl::SetMutexDeadlockDetectionMode(check);
}

}  // namespace phalanx
