// Fuzzes an actor call's argument decoding: the msgpack bytes a worker receives for a
// constructor or a method, unpacked by the invokers that PHALANX_ACTOR and PHALANX_METHODS
// register (actors/internal/registration.h, serialization.h), as the worker host calls them.
//
// Input: byte 0 picks the constructor or a method of FuzzActor, the rest is its msgpack
// argument array. Properties: a call never throws out of the invoker, bad arguments come back
// as InvalidArgument of kind InvalidCall, and a result is valid msgpack.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "actors/api.h"
#include "worker/actor_registry.h"
#include "worker/errors.h"

namespace {

// One method per kind of argument a real actor takes: scalars, strings, containers, nesting.
class FuzzActor {
 public:
  FuzzActor(std::string name, int64_t start) : name_(std::move(name)), total_(start) {}
  int64_t Add(int64_t n) {  // wraps (the arguments are arbitrary; UBSan is on)
    return total_ = static_cast<int64_t>(static_cast<uint64_t>(total_) + static_cast<uint64_t>(n));
  }
  bool Flags(bool a, int8_t b, uint16_t c, int32_t d, uint64_t e, float f) {
    return a && b == 0 && c == 0 && d == 0 && e == 0 && f == 0;
  }
  std::string Concat(std::string head, std::vector<std::string> tail) {
    for (const auto& t : tail) head += t;
    return head.substr(0, 64);
  }
  double Sum(std::vector<double> values) {
    double sum = 0;
    for (double v : values) sum += v;
    return sum;
  }
  size_t Count(std::map<std::string, int64_t> counts) { return counts.size(); }
  std::vector<std::vector<int>> Nested(std::vector<std::vector<int>> rows) { return rows; }
  std::tuple<int, std::string> Pair(std::tuple<int, std::string> pair) { return pair; }
  void Nothing() {}
  std::string Name() const { return name_; }

 private:
  std::string name_;
  int64_t total_;
};

const char* const kMethods[] = {"Add",    "Flags", "Concat",  "Sum", "Count",
                                "Nested", "Pair",  "Nothing", "Name"};
constexpr size_t kNumMethods = sizeof(kMethods) / sizeof(kMethods[0]);

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "msgpack_args fuzzer: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

void CheckRefusal(const absl::Status& status) {
  if (!absl::IsInvalidArgument(status) ||
      phalanx::worker::ErrorKind(status) != phalanx::worker::error_kind::kInvalidCall) {
    Fail("bad arguments are not InvalidArgument/InvalidCall", status);
  }
}

}  // namespace

PHALANX_ACTOR(FuzzActor, std::string, int64_t);
PHALANX_METHODS(FuzzActor, Add, Flags, Concat, Sum, Count, Nested, Pair, Nothing, Name);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const phalanx::worker::ActorClass* cls =
      phalanx::worker::ActorRegistry::Global().Find("FuzzActor");
  static std::unique_ptr<phalanx::worker::ActorInstance> actor = [] {
    auto created = cls->create(phalanx::internal::PackArgs(std::string("fuzz"), int64_t{0}));
    if (!created.ok()) Fail("cannot create the actor from good arguments", created.status());
    return std::move(*created);
  }();

  const std::string args(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t pick = data[0] % (kNumMethods + 1);
  if (pick == kNumMethods) {
    auto created = cls->create(args);
    if (!created.ok()) CheckRefusal(created.status());
    return 0;
  }
  phalanx::worker::CallOutcome outcome = actor->Call(kMethods[pick], args);
  if (!outcome.status.ok()) {
    CheckRefusal(outcome.status);
    return 0;
  }
  // The caller unpacks the result: it must be one whole msgpack value.
  try {
    msgpack::object_handle handle = msgpack::unpack(outcome.value.data(), outcome.value.size());
    (void)handle;
  } catch (const std::exception& e) {
    Fail("the result is not msgpack", absl::InternalError(e.what()));
  }
  return 0;
}
