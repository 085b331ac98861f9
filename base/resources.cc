#include "base/resources.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/system.h"
#include "nlohmann/json.hpp"

namespace phalanx {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
          c == ':' || c == '/')) {
      return false;
    }
  }
  return true;
}

int64_t ToFixed(double amount) { return std::llround(amount * Resources::kScale); }

}  // namespace

absl::StatusOr<Resources> Resources::FromMap(const std::map<std::string, double>& amounts,
                                             absl::string_view what) {
  Resources r;
  for (const auto& [name, amount] : amounts) {
    if (!ValidName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": resource name '", name,
                       "' is not valid; use letters, digits, '_', '-', '.', ':' or '/'"));
    }
    if (!std::isfinite(amount) || amount < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": resource '", name, "' has amount ",
                                                     amount, "; amounts must be finite and >= 0"));
    }
    if (amount > 0 && amount < 1.0 / kScale) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": resource '", name, "' has amount ",
                                                     amount, "; the smallest amount is 0.0001"));
    }
    if (amount > 9.0e14) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": resource '", name, "' has amount ", amount, "; that is too large"));
    }
    r.Set(name, amount);
  }
  return r;
}

absl::StatusOr<Resources> Resources::ParseJson(absl::string_view json, absl::string_view what) {
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": '", json, "' is not a JSON object; give one like '{\"CPU\": 4, \"accel\": 1}'"));
  }
  std::map<std::string, double> amounts;
  for (auto it = parsed.begin(); it != parsed.end(); ++it) {
    if (!it.value().is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": resource '", it.key(), "' must be a number, not ", it.value().dump()));
    }
    amounts[it.key()] = it.value().get<double>();
  }
  return FromMap(amounts, what);
}

double Resources::Get(const std::string& name) const {
  return static_cast<double>(GetFixed(name)) / kScale;
}

int64_t Resources::GetFixed(const std::string& name) const {
  auto it = amounts_.find(name);
  return it == amounts_.end() ? 0 : it->second;
}

void Resources::Set(const std::string& name, double amount) { SetFixed(name, ToFixed(amount)); }

void Resources::SetFixed(const std::string& name, int64_t amount) {
  if (amount <= 0) {
    amounts_.erase(name);
  } else {
    amounts_[name] = amount;
  }
}

bool Resources::Contains(const Resources& request) const {
  for (const auto& [name, amount] : request.amounts_) {
    if (GetFixed(name) < amount) return false;
  }
  return true;
}

bool Resources::Empty() const { return amounts_.empty(); }

Resources& Resources::operator+=(const Resources& other) {
  for (const auto& [name, amount] : other.amounts_) amounts_[name] += amount;
  return *this;
}

Resources& Resources::operator-=(const Resources& other) {
  for (const auto& [name, amount] : other.amounts_) SetFixed(name, GetFixed(name) - amount);
  return *this;
}

bool Resources::operator==(const Resources& other) const { return amounts_ == other.amounts_; }

std::map<std::string, double> Resources::ToMap() const {
  std::map<std::string, double> out;
  for (const auto& [name, amount] : amounts_) out[name] = static_cast<double>(amount) / kScale;
  return out;
}

std::string FormatAmount(const std::string& name, double amount) {
  if (name == "memory" || name.ends_with("_memory") || name.ends_with("_bytes")) {
    return FormatBytes(amount);
  }
  if (amount == std::floor(amount)) return absl::StrFormat("%.0f", amount);
  return absl::StrFormat("%g", amount);
}

std::string Resources::ToString() const {
  std::vector<std::string> parts;
  for (const auto& [name, amount] : ToMap()) {
    parts.push_back(absl::StrCat(name, ": ", FormatAmount(name, amount)));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

}  // namespace phalanx
