#include "worker/actor_registry.h"

#include <algorithm>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace phalanx::worker {

namespace {

std::mutex hooks_mu;
std::vector<std::function<void(const std::string&)>>& Hooks() {
  static auto* hooks = new std::vector<std::function<void(const std::string&)>>();
  return *hooks;
}

}  // namespace

void AddDyingGaspHook(std::function<void(const std::string& why)> hook) {
  std::lock_guard<std::mutex> lock(hooks_mu);
  Hooks().push_back(std::move(hook));
}

void RunDyingGaspHooks(const std::string& why, int timeout_ms) {
  std::vector<std::function<void(const std::string&)>> hooks;
  {
    std::lock_guard<std::mutex> lock(hooks_mu);
    hooks = Hooks();
  }
  if (hooks.empty()) return;
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([hooks, why, done] {
    for (const auto& hook : hooks) {
      try {
        hook(why);
      } catch (...) {
      }
    }
    done->set_value();
  }).detach();
  finished.wait_for(std::chrono::milliseconds(timeout_ms));
}

ActorRegistry& ActorRegistry::Global() {
  static ActorRegistry* registry = new ActorRegistry();
  return *registry;
}

void ActorRegistry::Register(ActorClass actor_class) {
  std::lock_guard<std::mutex> lock(mu_);
  ActorClass& slot = classes_[actor_class.name];
  slot.name = actor_class.name;
  slot.create = std::move(actor_class.create);
  for (auto& m : actor_class.methods) slot.methods.push_back(m);
  for (auto& [m, g] : actor_class.method_group) slot.method_group[m] = g;
  for (auto& [g, c] : actor_class.group_concurrency) slot.group_concurrency[g] = c;
}

const ActorClass* ActorRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = classes_.find(name);
  if (it != classes_.end() && it->second.create) return &it->second;
  return fallback_ ? fallback_.get() : nullptr;
}

void ActorRegistry::SetFallback(ActorClass fallback) {
  std::lock_guard<std::mutex> lock(mu_);
  fallback_ = std::make_unique<ActorClass>(std::move(fallback));
}

std::vector<std::string> ActorRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, c] : classes_) out.push_back(name);
  return out;
}

void ActorRegistry::AddMethods(const std::string& class_name,
                               const std::vector<std::string>& methods, const std::string& group,
                               int group_concurrency) {
  std::lock_guard<std::mutex> lock(mu_);
  ActorClass& slot = classes_[class_name];
  slot.name = class_name;
  for (const auto& m : methods) {
    slot.methods.push_back(m);
    if (!group.empty()) slot.method_group[m] = group;
  }
  if (!group.empty()) slot.group_concurrency[group] = std::max(1, group_concurrency);
}

}  // namespace phalanx::worker
