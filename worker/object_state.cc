#include "worker/object_state.h"

#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/mutex.hpp>
#include <chrono>
#include <mutex>

#include "absl/strings/cord.h"
#include "worker/errors.h"

namespace phalanx::worker {

absl::Status MakeError(absl::StatusCode code, absl::string_view kind, absl::string_view message) {
  absl::Status s(code, message);
  s.SetPayload(kErrorKindPayload, absl::Cord(kind));
  return s;
}

std::string ErrorKind(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorKindPayload);
  return payload ? std::string(*payload) : "";
}

namespace {
std::chrono::steady_clock::time_point DeadlineFor(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration() || timeout > absl::Hours(24 * 365)) {
    return std::chrono::steady_clock::time_point::max();
  }
  return std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
}
}  // namespace

struct ObjectState::Sync {
  boost::fibers::mutex mu;
  boost::fibers::condition_variable cv;
};

ObjectState::ObjectState() : sync_(std::make_unique<Sync>()) {}

ObjectState::~ObjectState() = default;

void ObjectState::Set(absl::Status status, std::string value) {
  std::vector<std::function<void()>> callbacks;
  {
    std::unique_lock<boost::fibers::mutex> lock(sync_->mu);
    if (done_) return;
    status_ = std::move(status);
    value_ = std::move(value);
    done_ = true;
    callbacks.swap(callbacks_);
  }
  sync_->cv.notify_all();
  for (auto& cb : callbacks) cb();
}

bool ObjectState::Wait(absl::Duration timeout) {
  std::unique_lock<boost::fibers::mutex> lock(sync_->mu);
  if (done_) return true;
  auto deadline = DeadlineFor(timeout);
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    sync_->cv.wait(lock, [this] { return done_; });
    return true;
  }
  return sync_->cv.wait_until(lock, deadline, [this] { return done_; });
}

bool ObjectState::done() const {
  std::unique_lock<boost::fibers::mutex> lock(sync_->mu);
  return done_;
}

void ObjectState::OnDone(std::function<void()> callback) {
  {
    std::unique_lock<boost::fibers::mutex> lock(sync_->mu);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

std::vector<bool> WaitAny(const std::vector<std::shared_ptr<ObjectState>>& states, int num_ready,
                          absl::Duration timeout) {
  struct Counter {
    boost::fibers::mutex mu;
    boost::fibers::condition_variable cv;
    int ready = 0;
  };
  auto counter = std::make_shared<Counter>();
  for (const auto& s : states) {
    s->OnDone([counter] {
      {
        std::unique_lock<boost::fibers::mutex> lock(counter->mu);
        ++counter->ready;
      }
      counter->cv.notify_all();
    });
  }
  {
    std::unique_lock<boost::fibers::mutex> lock(counter->mu);
    auto deadline = DeadlineFor(timeout);
    auto enough = [&] { return counter->ready >= num_ready; };
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      counter->cv.wait(lock, enough);
    } else {
      counter->cv.wait_until(lock, deadline, enough);
    }
  }
  std::vector<bool> out;
  for (const auto& s : states) out.push_back(s->done());
  return out;
}

}  // namespace phalanx::worker
