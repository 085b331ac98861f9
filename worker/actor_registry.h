// The actor classes a worker can host, type-erased: the public C++ API (actors/api.h)
// registers classes here at static-initialization time, and the worker host creates and
// calls them by name. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx::worker {

// What one call returned: OK with a serialized value, or an error (tagged with its kind).
struct CallOutcome {
  absl::Status status;
  std::string value;  // the result; with an error, its detail for the caller (often empty)
};

// One live actor object inside a worker.
class ActorInstance {
 public:
  virtual ~ActorInstance() = default;
  // Runs `method` with `args` (a msgpack array). Never throws: errors come back as statuses
  // (unknown method, wrong argument types, the method raised).
  virtual CallOutcome Call(const std::string& method, const std::string& args) = 0;
  // Starts `method` and gives its outcome to `done`, perhaps later and from another thread
  // (a Python async method's result comes from its event loop's thread), so the calling
  // thread need not wait for it. By default, Call and then `done` on this thread.
  virtual void CallAsync(const std::string& method, const std::string& args,
                         std::function<void(CallOutcome)> done) {
    done(Call(method, args));
  }
  // Interrupts the call running now, where the actor can (a Python task worker raises
  // KeyboardInterrupt in its task, as Ray's cancel does); whether one was. Runs beside the
  // running call, on the thread that reads calls (kInterruptMethod).
  virtual bool Interrupt() { return false; }
  // Cancels the running call `call` (CurrentCall's form), where the actor can: a Python
  // actor cancels an async method's asyncio task and flags a plain one (is_canceled). Runs
  // on the thread that reads calls (kCancelMethod).
  virtual void Cancel(const std::string& call) { (void)call; }
  // A call ended the actor (its error kind is kActorExiting) and the answers of the calls
  // before it are written: the instance ends its process now (a Python actor has the GCS
  // kill it, as its exit_actor() does).
  virtual void End() {}
  // Concurrency groups the instance names beside its class's (a Python actor's come from its
  // options and @method marks): group → max concurrency, method → group. Asked once, after
  // the constructor.
  virtual void ConcurrencyGroups(std::map<std::string, int>* group_concurrency,
                                 std::map<std::string, std::string>* method_group) {
    (void)group_concurrency;
    (void)method_group;
  }
};

struct ActorClass {
  std::string name;
  // Builds the actor from its msgpack-encoded constructor arguments. An error (or exception)
  // becomes the actor's CREATION_FAILED cause.
  std::function<absl::StatusOr<std::unique_ptr<ActorInstance>>(const std::string& args)> create;
  std::vector<std::string> methods;
  // Concurrency groups (Ray's): method → group name, group → max concurrency. Methods not
  // named run in the default group, whose concurrency is the actor's max_concurrency.
  std::map<std::string, std::string> method_group;
  std::map<std::string, int> group_concurrency;
  // Concurrent calls run on threads rather than fibers (Python actors).
  bool threaded = false;
};

// Dying-gasp hooks: the worker host runs them when its process is told to end (SIGTERM) or
// warned by its node that it nears its memory limit (SIGUSR1), before anything else; each run
// is bounded, so a stuck hook cannot keep a dying process alive.
void AddDyingGaspHook(std::function<void(const std::string& why)> hook);
void RunDyingGaspHooks(const std::string& why, int timeout_ms);

class ActorRegistry {
 public:
  static ActorRegistry& Global();

  void Register(ActorClass actor_class);
  // nullptr when no class of that name is registered (and no fallback is set).
  const ActorClass* Find(const std::string& name) const;
  // The class for every name not registered: a language runtime that builds its actors from
  // their constructor arguments (the Python worker: the pickled class travels with them).
  void SetFallback(ActorClass fallback);
  std::vector<std::string> Names() const;
  // Adds methods to an already registered class (used by method-registration macros that
  // may run before or after the class's own registration).
  void AddMethods(const std::string& class_name, const std::vector<std::string>& methods,
                  const std::string& group, int group_concurrency);

 private:
  mutable std::mutex mu_;
  std::map<std::string, ActorClass> classes_;
  std::unique_ptr<ActorClass> fallback_;
};

}  // namespace phalanx::worker
