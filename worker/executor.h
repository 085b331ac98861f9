// Executors run the calls of one concurrency group of an actor.
//   Serial: one thread, calls one at a time in the order posted (max_concurrency = 1).
//   Thread pool: like serial with several threads (Python actors with max_concurrency > 1).
//   Fiber: one thread running Boost.Fiber fibers, at most `max_concurrency` calls at once;
//     calls interleave where they wait on something fiber-aware (phalanx::Get on another
//     actor's result, phalanx::SleepFor), as Ray's async actors interleave at `await`.
// Post() is thread-safe; Stop() finishes what was posted, then joins.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace phalanx::worker {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void Post(std::function<void()> task) = 0;
  virtual void Stop() = 0;
};

std::unique_ptr<Executor> MakeSerialExecutor(std::string name);
std::unique_ptr<Executor> MakeFiberExecutor(std::string name, int max_concurrency);
// `threads` OS threads taking calls in order: for actors whose code cannot share a thread
// between calls (Python: each thread has its own interpreter state).
std::unique_ptr<Executor> MakeThreadPoolExecutor(std::string name, int threads);

}  // namespace phalanx::worker
