// Resource amounts (CPU, GPU, memory in bytes, custom names), kept in fixed point so that
// fractional requests add up exactly (0.1 + 0.2 CPU is 0.3 CPU, not 0.30000000000000004).
// A value type; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace phalanx {

class Resources {
 public:
  // Amounts are stored as multiples of 1/kScale of a unit.
  static constexpr int64_t kScale = 10000;

  Resources() = default;

  // Validates names (non-empty; letters, digits, '_', '-', '.', ':', '/') and amounts (finite,
  // >= 0). `what` names the input in errors ("--resources", "bundle 2").
  static absl::StatusOr<Resources> FromMap(const std::map<std::string, double>& amounts,
                                           absl::string_view what = "resources");
  // Parses a JSON object of name → number, e.g. {"CPU": 4, "accel": 1}.
  static absl::StatusOr<Resources> ParseJson(absl::string_view json,
                                             absl::string_view what = "--resources");

  double Get(const std::string& name) const;
  int64_t GetFixed(const std::string& name) const;
  void Set(const std::string& name, double amount);
  void SetFixed(const std::string& name, int64_t amount);

  // True if every amount in `request` is <= ours.
  bool Contains(const Resources& request) const;
  bool Empty() const;

  Resources& operator+=(const Resources& other);
  // Subtracts; an amount never goes below zero.
  Resources& operator-=(const Resources& other);
  bool operator==(const Resources& other) const;

  std::map<std::string, double> ToMap() const;
  const std::map<std::string, int64_t>& fixed() const { return amounts_; }

  // "{CPU: 4, memory: 2.0 GiB}" (memory-like names shown in bytes units).
  std::string ToString() const;

 private:
  std::map<std::string, int64_t> amounts_;  // zero amounts are dropped
};

// Formats one amount of `name`: bytes units for "memory", otherwise a short number.
std::string FormatAmount(const std::string& name, double amount);

}  // namespace phalanx
