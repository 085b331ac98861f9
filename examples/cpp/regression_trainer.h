// RegressionTrainer: data-parallel SGD on a synthetic linear-regression set with known
// weights (y = x · w*), gradients summed with an allreduce. Used by the elastic_regression
// example and the elastic tests.
//
// Config (the job spec's `config`):
//   dims (8), lr (0.5)             model size and step size
//   stepMs (0)                     extra time per step (stands in for real compute)
//   stepPad ("before")             where that time goes: "before" sleeps stepMs before the
//                                  step's compute; "after" pads the step to stepMs after its
//                                  update is applied (and logged), as torchrun's peer trainer
//                                  (bench/peers/train_elastic.py) does, so that a benchmark
//                                  reading the updateLog times both sides at the same point
//   trackSamples (true)            keep, in the state, how often each sample was used
//   oomAtStep / exitAtStep /       test hooks: at that step, rank `faultRank` (0) allocates
//   failAtStep (-1)                past its memory limit, exits with exitCode, or returns an
//   exitCode (3), faultRank (0)    error from its Step before the step's allreduce (a trainer
//   faultMarker ("")               that raises; the process lives on) — once per job (a
//                                  marker file records that it happened, and when: unix ms)
//   oomTrigger ("")                a path prefix: the rank that finds <oomTrigger>.<rank> at the
//                                  start of a step removes it and allocates past its memory
//                                  limit (faults on demand, for soaks; unused when empty)
//   exitTrigger ("")               a path prefix: the rank that finds <exitTrigger>.<rank>
//                                  (its rank in the last step it ran), or <exitTrigger>.any,
//                                  when its state is loaded (rolled back as an epoch forms,
//                                  synced, or a checkpoint) removes it and exits with
//                                  exitCode: a rank lost while an epoch forms, on demand
//   oomHoldAtBytes / oomHoldMs     the OOM hook pauses once it holds that much (so that the
//                                  node's memory warning comes before the kill)
//   setupFailMarker ("")           a test hook: the first rank to start while this file is
//                                  absent creates it and fails its Setup (the process lives on)
//   setupStallMarker ("")          the same, but its Setup stalls for stallMs (it answers Pings)
//   stallTrigger ("")              as exitTrigger, but the rank stalls for stallMs instead of
//                                  exiting (alive, answering Pings: a phase that never ends)
//   stallMs (600000)               how long a stall lasts
//   updateLog ("")                 a file every rank appends one line to per applied update:
//                                  "pid step updates_before unix_ms world_size" (benchmarks
//                                  read the steps lost from it)
//
// The state counts the updates applied to the weights (Query("updates")): the runtime rolls it
// back with the weights, so after a recovery it says how many committed steps the model holds.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "elastic/trainer.h"

namespace phalanx::examples {

class RegressionTrainer : public elastic::Trainer {
 public:
  absl::Status Setup(const elastic::TrainerContext& ctx) override {
    auto get = [&](const char* key, double def) {
      auto it = ctx.config.find(key);
      double v;
      return it != ctx.config.end() && absl::SimpleAtod(it->second, &v) ? v : def;
    };
    dims_ = static_cast<int>(get("dims", 8));
    lr_ = get("lr", 0.5);
    step_ms_ = static_cast<int>(get("stepMs", 0));
    if (auto pad = ctx.config.find("stepPad"); pad != ctx.config.end()) {
      if (pad->second != "before" && pad->second != "after") {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.stepPad: \"", pad->second,
            "\" is not a padding: use \"before\" (sleep stepMs before the compute) or \"after\" "
            "(pad the step to stepMs after its update)"));
      }
      pad_after_ = pad->second == "after";
    }
    track_ = get("trackSamples", 1) != 0;
    oom_at_ = static_cast<int64_t>(get("oomAtStep", -1));
    exit_at_ = static_cast<int64_t>(get("exitAtStep", -1));
    fail_at_ = static_cast<int64_t>(get("failAtStep", -1));
    exit_code_ = static_cast<int>(get("exitCode", 3));
    hold_at_ = static_cast<int64_t>(get("oomHoldAtBytes", -1));
    hold_ms_ = static_cast<int>(get("oomHoldMs", 0));
    fault_rank_ = static_cast<int>(get("faultRank", 0));
    auto marker = ctx.config.find("faultMarker");
    marker_ = marker == ctx.config.end() ? "" : marker->second;
    auto trigger = ctx.config.find("oomTrigger");
    oom_trigger_ = trigger == ctx.config.end() ? "" : trigger->second;
    auto exit_trigger = ctx.config.find("exitTrigger");
    exit_trigger_ = exit_trigger == ctx.config.end() ? "" : exit_trigger->second;
    if (auto log = ctx.config.find("updateLog"); log != ctx.config.end() && update_log_ < 0) {
      update_log_ = ::open(log->second.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    stall_ms_ = static_cast<int64_t>(get("stallMs", 600000));
    if (auto t = ctx.config.find("stallTrigger"); t != ctx.config.end()) stall_trigger_ = t->second;
    if (auto stall = ctx.config.find("setupStallMarker"); stall != ctx.config.end()) {
      int fd = ::open(stall->second.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::close(fd);
        Stall();
      }
    }
    if (auto fail = ctx.config.find("setupFailMarker"); fail != ctx.config.end()) {
      int fd = ::open(fail->second.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::close(fd);
        return absl::FailedPreconditionError("setupFailMarker: this rank's Setup fails (once)");
      }
    }
    seed_ = ctx.seed;
    num_samples_ = ctx.num_samples;
    weights_.assign(dims_, 0.0);
    visits_.assign(track_ ? num_samples_ : 0, 0);
    return absl::OkStatus();
  }

  // The known weights: w*_j = (j + 1) / dims × (-1)^j.
  double TrueWeight(int j) const { return (j + 1.0) / dims_ * (j % 2 ? -1 : 1); }

  // Feature j of sample i: a deterministic value in [-1, 1].
  double Feature(int64_t i, int j) const {
    uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull ^
                 (static_cast<uint64_t>(j) + 1) * 0xC2B2AE3D27D4EB4Full ^
                 static_cast<uint64_t>(seed_) * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return static_cast<double>(h % 2000001) / 1000000.0 - 1.0;
  }

  absl::StatusOr<elastic::StepResult> Step(const elastic::StepInput& in) override {
    absl::Time start = absl::Now();
    last_rank_ = in.rank;
    if (absl::Status fault = MaybeFault(in); !fault.ok()) return fault;
    if (step_ms_ > 0 && !pad_after_) usleep(static_cast<useconds_t>(step_ms_) * 1000);
    // Local sums over this rank's samples: gradient, loss, and (for the checks) visits.
    std::vector<double> sums(dims_ + 1, 0.0);
    std::vector<int32_t> seen(track_ ? num_samples_ : 0, 0);
    for (int64_t i : in.indices) {
      double pred = 0, y = 0;
      for (int j = 0; j < dims_; ++j) {
        pred += weights_[j] * Feature(i, j);
        y += TrueWeight(j) * Feature(i, j);
      }
      double err = pred - y;
      for (int j = 0; j < dims_; ++j) sums[j] += err * Feature(i, j);
      sums[dims_] += 0.5 * err * err;
      if (track_) seen[i] += 1;
    }
    auto s = in.group->Allreduce(sums.data(), sums.size(), collective::DType::kFloat64,
                                 collective::ReduceOp::kSum);
    if (!s.ok()) return s;
    if (track_) {
      s = in.group->Allreduce(seen.data(), seen.size(), collective::DType::kInt32,
                              collective::ReduceOp::kSum);
      if (!s.ok()) return s;
      for (int64_t i = 0; i < num_samples_; ++i) visits_[i] += seen[i];
    }
    double scale = 1.0 / static_cast<double>(in.global_batch);
    for (int j = 0; j < dims_; ++j) weights_[j] -= lr_ * sums[j] * scale;
    ++updates_;
    if (update_log_ >= 0) {
      // One write of a short line to an O_APPEND file: the ranks' lines never interleave.
      std::string line = absl::StrCat(::getpid(), " ", in.step, " ", updates_ - 1, " ",
                                      absl::ToUnixMillis(absl::Now()), " ", in.world_size, "\n");
      (void)!::write(update_log_, line.data(), line.size());
    }
    if (step_ms_ > 0 && pad_after_) {
      absl::SleepFor(start + absl::Milliseconds(step_ms_) - absl::Now());  // none if past it
    }
    return elastic::StepResult{sums[dims_] * scale, {}};
  }

  // The state: the weights, the visits, then the update count.
  std::string SaveState() const override {
    size_t w = sizeof(double) * weights_.size(), v = sizeof(int32_t) * visits_.size();
    std::string out(w + v + sizeof(updates_), '\0');
    std::memcpy(out.data(), weights_.data(), w);
    std::memcpy(out.data() + w, visits_.data(), v);
    std::memcpy(out.data() + w + v, &updates_, sizeof(updates_));
    return out;
  }

  absl::Status LoadState(const std::string& state) override {
    if (!exit_trigger_.empty() &&
        ((last_rank_ >= 0 && ::unlink(absl::StrCat(exit_trigger_, ".", last_rank_).c_str()) == 0) ||
         ::unlink(absl::StrCat(exit_trigger_, ".any").c_str()) == 0)) {
      std::exit(exit_code_);  // removing the trigger claimed it: one exit per trigger
    }
    if (!stall_trigger_.empty() &&
        ((last_rank_ >= 0 &&
          ::unlink(absl::StrCat(stall_trigger_, ".", last_rank_).c_str()) == 0) ||
         ::unlink(absl::StrCat(stall_trigger_, ".any").c_str()) == 0)) {
      Stall();
    }
    size_t w = sizeof(double) * weights_.size(), v = sizeof(int32_t) * visits_.size();
    size_t want = w + v + sizeof(updates_);
    if (state.size() != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("state of ", state.size(), " bytes, expected ", want));
    }
    std::memcpy(weights_.data(), state.data(), w);
    std::memcpy(visits_.data(), state.data() + w, v);
    std::memcpy(&updates_, state.data() + w + v, sizeof(updates_));
    return absl::OkStatus();
  }

  std::string Query(const std::string& key) const override {
    if (key == "weights") {
      std::vector<std::string> w;
      for (double v : weights_) w.push_back(absl::StrCat(v));
      return absl::StrJoin(w, ",");
    }
    if (key == "true_weights") {
      std::vector<std::string> w;
      for (int j = 0; j < dims_; ++j) w.push_back(absl::StrCat(TrueWeight(j)));
      return absl::StrJoin(w, ",");
    }
    if (key == "updates") return absl::StrCat(updates_);
    if (key == "results")
      return absl::StrCat("weights=", Query("weights"), ";visits=", Query("visits"));
    if (key == "visits") {  // "min,max" visits over all samples
      if (visits_.empty()) return "";
      int32_t lo = visits_[0], hi = visits_[0];
      for (int32_t v : visits_) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      return absl::StrCat(lo, ",", hi);
    }
    return "";
  }

 private:
  // An error: this step fails (failAtStep).
  absl::Status MaybeFault(const elastic::StepInput& in) {
    if (!oom_trigger_.empty() && ::unlink(absl::StrCat(oom_trigger_, ".", in.rank).c_str()) == 0) {
      AllocatePastTheLimit();  // removing the trigger claimed it: one OOM per trigger
    }
    if (in.rank != fault_rank_ ||
        (in.step != oom_at_ && in.step != exit_at_ && in.step != fail_at_)) {
      return absl::OkStatus();
    }
    if (!marker_.empty()) {
      // It happened once: the respawned (or rolled-back) rank carries on.
      if (PathExists(marker_)) return absl::OkStatus();
      WriteFile(marker_, absl::StrCat(absl::ToUnixMillis(absl::Now()))).IgnoreError();
    }
    if (in.step == exit_at_) std::exit(exit_code_);
    if (in.step == fail_at_) {
      return absl::InternalError(
          absl::StrCat("failAtStep: rank ", in.rank, "'s step ", in.step, " fails (a test hook)"));
    }
    AllocatePastTheLimit();
    return absl::OkStatus();
  }

  // Allocates until the node's monitor kills the process for going past its memory limit.
  void AllocatePastTheLimit() {
    std::vector<std::vector<char>> hog;
    int64_t held = 0;
    for (int i = 0; i < 4096; ++i) {
      hog.emplace_back(16 << 20);
      std::memset(hog.back().data(), 1, hog.back().size());
      held += 16 << 20;
      if (hold_at_ > 0 && held >= hold_at_ && held - (16 << 20) < hold_at_) {
        usleep(static_cast<useconds_t>(hold_ms_) * 1000);
      }
      usleep(5000);
    }
  }

  int dims_ = 8;
  double lr_ = 0.5;
  int step_ms_ = 0;
  bool pad_after_ = false;  // stepPad: "after"
  bool track_ = true;
  int64_t oom_at_ = -1, exit_at_ = -1, fail_at_ = -1;
  int exit_code_ = 3;
  int64_t hold_at_ = -1;
  int hold_ms_ = 0;
  int64_t stall_ms_ = 600000;
  std::string stall_trigger_;
  void Stall() const { absl::SleepFor(absl::Milliseconds(stall_ms_)); }
  int fault_rank_ = 0;
  std::string marker_;
  std::string oom_trigger_;
  std::string exit_trigger_;
  int last_rank_ = -1;  // the rank of the last step run (exitTrigger)
  int64_t seed_ = 0;
  int64_t num_samples_ = 0;
  std::vector<double> weights_;
  std::vector<int32_t> visits_;
  int64_t updates_ = 0;  // updates applied to weights_ (part of the state)
  int update_log_ = -1;  // updateLog's descriptor, kept for the process's life
};

}  // namespace phalanx::examples
