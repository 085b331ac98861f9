// Actor classes used by the actor tests; registered in test_actors.cc and hosted by the test
// binary itself (its main() serves as a worker when a node manager starts it).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace phalanx::testing {

class Counter {
 public:
  explicit Counter(int start) : value_(start) {}
  int Add(int x) { return value_ += x; }
  int Value() const { return value_; }
  // Records `i` and returns how many calls came before it: in order, that is i.
  int64_t Record(int64_t i) {
    seen_.push_back(i);
    return static_cast<int64_t>(seen_.size()) - 1;
  }
  bool InOrder() const {
    for (size_t i = 0; i < seen_.size(); ++i) {
      if (seen_[i] != static_cast<int64_t>(i)) return false;
    }
    return true;
  }
  int Pid() const { return ::getpid(); }
  std::string Echo(std::string s) { return s; }
  void Exit(int code) { std::exit(code); }
  int Fail(std::string message) { throw std::runtime_error(message); }
  // Allocates and touches `mib` MiB, in 16 MiB steps so RSS grows steadily.
  int64_t Allocate(int mib);
  int SleepMs(int ms);
  // Returns 1 once `path` exists (0 after 120 s without it).
  int WaitForFile(std::string path);
  // Writes `dir`/started, then returns 1 once IsCanceled() (writing `dir`/saw-cancel), or 0
  // after 120 s.
  int RunUntilCanceled(std::string dir);
  // Fiber-friendly sleep; returns {start_us, end_us} of the call.
  std::vector<int64_t> Overlap(int ms);

 private:
  int value_;
  std::vector<int64_t> seen_;
  std::vector<std::vector<char>> blocks_;
};

class BadInit {
 public:
  explicit BadInit(std::string message) { throw std::runtime_error(message); }
  int Never() { return 0; }
};

}  // namespace phalanx::testing
