#include "worker/executor.h"

#include <pthread.h>

#include <algorithm>
#include <boost/fiber/all.hpp>
#include <deque>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace phalanx::worker {
namespace {

void NameThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

// One or more threads taking tasks in order (one thread: strictly one at a time). Threads
// start as calls need them, up to `threads`: an async Python actor may take 1000 calls at
// once (Ray's default) and most actors never have more than a few.
class SerialExecutor final : public Executor {
 public:
  SerialExecutor(std::string name, int threads) : name_(std::move(name)), max_threads_(threads) {}
  ~SerialExecutor() override { Stop(); }

  void Post(std::function<void()> task) override {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
    if (stopping_ || idle_ >= static_cast<int>(queue_.size()) ||
        static_cast<int>(threads_.size()) >= max_threads_) {
      return;
    }
    ++idle_;  // counted idle until it takes a task
    threads_.emplace_back([this] {
      NameThread(name_);
      Loop();
    });
  }

  void Stop() override {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
      threads.swap(threads_);
    }
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](SerialExecutor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
              return e->stopping_ || !e->queue_.empty();
            },
            this));
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        --idle_;
      }
      task();
      absl::MutexLock lock(&mu_);
      ++idle_;
    }
  }

  const std::string name_;
  const int max_threads_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // threads started and not running a task
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

class FiberExecutor final : public Executor {
 public:
  FiberExecutor(std::string name, int max_concurrency)
      : max_concurrency_(std::max(1, max_concurrency)), channel_(4096) {
    thread_ = std::thread([this, name] {
      NameThread(name);
      Loop();
    });
  }
  ~FiberExecutor() override { Stop(); }

  void Post(std::function<void()> task) override { channel_.push(std::move(task)); }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    channel_.close();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::function<void()> task;
    while (channel_.pop(task) == boost::fibers::channel_op_status::success) {
      {
        std::unique_lock<boost::fibers::mutex> lock(mu_);
        slots_.wait(lock, [this] { return running_ < max_concurrency_; });
        ++running_;
      }
      boost::fibers::fiber([this, t = std::move(task)] {
        t();
        {
          std::unique_lock<boost::fibers::mutex> lock(mu_);
          --running_;
        }
        slots_.notify_one();
      }).detach();
    }
    std::unique_lock<boost::fibers::mutex> lock(mu_);
    slots_.wait(lock, [this] { return running_ == 0; });
  }

  const int max_concurrency_;
  boost::fibers::buffered_channel<std::function<void()>> channel_;
  boost::fibers::mutex mu_;
  boost::fibers::condition_variable slots_;
  int running_ = 0;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Executor> MakeSerialExecutor(std::string name) {
  return std::make_unique<SerialExecutor>(std::move(name), 1);
}

std::unique_ptr<Executor> MakeThreadPoolExecutor(std::string name, int threads) {
  return std::make_unique<SerialExecutor>(std::move(name), std::max(1, threads));
}

std::unique_ptr<Executor> MakeFiberExecutor(std::string name, int max_concurrency) {
  return std::make_unique<FiberExecutor>(std::move(name), max_concurrency);
}

}  // namespace phalanx::worker
