#include "tests/actors/test_actors.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "actors/api.h"

namespace phalanx::testing {

int64_t Counter::Allocate(int mib) {
  for (int done = 0; done < mib; done += 16) {
    blocks_.emplace_back(16 << 20);
    std::memset(blocks_.back().data(), 1, blocks_.back().size());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return static_cast<int64_t>(blocks_.size()) * 16;
}

int Counter::SleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

std::vector<int64_t> Counter::Overlap(int ms) {
  int64_t start = absl::ToUnixMicros(absl::Now());
  phalanx::SleepFor(absl::Milliseconds(ms));
  return {start, absl::ToUnixMicros(absl::Now())};
}

}  // namespace phalanx::testing

using phalanx::testing::BadInit;
using phalanx::testing::Counter;
PHALANX_ACTOR(Counter, int);
int Counter::WaitForFile(std::string path) {
  for (int i = 0; i < 12000; ++i) {
    if (::access(path.c_str(), F_OK) == 0) return 1;
    ::usleep(10000);
  }
  return 0;
}

int Counter::RunUntilCanceled(std::string dir) {
  std::ofstream(dir + "/started") << "x";
  for (int i = 0; i < 12000; ++i) {
    if (IsCanceled()) {
      std::ofstream(dir + "/saw-cancel") << "x";
      return 1;
    }
    ::usleep(10000);
  }
  return 0;
}

PHALANX_METHODS(Counter, Add, Value, Record, InOrder, Pid, Echo, Exit, Fail, Allocate, SleepMs,
                Overlap, WaitForFile, RunUntilCanceled);
PHALANX_ACTOR(BadInit, std::string);
PHALANX_METHODS(BadInit, Never);
