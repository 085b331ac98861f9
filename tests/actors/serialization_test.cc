// Decoding an actor call's msgpack arguments (actors/internal/serialization.h) from bytes
// that came over the network: a bad message is refused as InvalidCall, in memory proportional
// to its size, on the stack a call runs on.
#include "actors/internal/serialization.h"

#include <pthread.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/errors.h"

namespace phalanx::internal {
namespace {

bool IsInvalidCall(const absl::Status& s) {
  return absl::IsInvalidArgument(s) && worker::ErrorKind(s) == worker::error_kind::kInvalidCall;
}

// Runs `fn` on a thread with a 128 KiB stack, the size of a worker's call fibers.
template <typename F>
void OnSmallStack(F fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 128 << 10), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* arg) -> void* {
                  (*static_cast<F*>(arg))();
                  return nullptr;
                },
                &fn),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(SerializationTest, GoodArgumentsRoundTrip) {
  std::tuple<int, std::string, std::vector<double>> args;
  ASSERT_TRUE(
      UnpackArgs(PackArgs(7, std::string("x"), std::vector<double>{1.5}), &args, "f", "").ok());
  EXPECT_EQ(std::get<0>(args), 7);
  EXPECT_EQ(std::get<1>(args), "x");
  EXPECT_EQ(std::get<2>(args), std::vector<double>{1.5});
  using Counts = std::map<std::string, int>;
  EXPECT_EQ(*Unpack<Counts>(PackValue(Counts{{"a", 1}}), "g"), (Counts{{"a", 1}}));
}

// Found by fuzz/msgpack_args_fuzzer.cc (ASan: "allocator is out of memory trying to allocate
// 0x4000000008 bytes"): a 5-byte map32 header made msgpack allocate 2^32-1 pairs up front,
// before reading any. Without ASan the allocation mostly failed and was caught; where it did
// not, a few bytes reserved gigabytes.
TEST(SerializationTest, AContainerClaimingMoreElementsThanBytesIsRefusedBeforeAllocating) {
  std::tuple<std::vector<int>> args;
  for (std::string header : {std::string("\xdd\xff\xff\xff\xff", 5),         // array32
                             std::string("\xdf\xff\xff\xff\xff", 5),         // map32
                             std::string("\x91\xdd\x10\x00\x00\x00", 6)}) {  // nested
    EXPECT_THROW(UnpackUntrusted(header), msgpack::size_overflow);
    EXPECT_TRUE(IsInvalidCall(UnpackArgs(header, &args, "f", "")));
    EXPECT_FALSE(Unpack<std::vector<int>>(header, "f").ok());
  }
}

// Arguments of the wrong shape are described in the error; msgpack prints a value without
// recursing, so even [[[[...]]]] nested 100000 deep is refused on a call fiber's 128 KiB stack.
TEST(SerializationTest, DeeplyNestedArgumentsAreRefusedOnAFibersStack) {
  std::string nested(100000, '\x91');  // 100000 arrays of one, each in the next
  nested += '\x01';
  OnSmallStack([&] {
    std::tuple<int, int> args;  // two parameters: the one-element array is described
    EXPECT_TRUE(IsInvalidCall(UnpackArgs(nested, &args, "f", "")));
    EXPECT_FALSE(Unpack<int>(nested, "f").ok());
  });
}

}  // namespace
}  // namespace phalanx::internal
