// Machinery of actors/api.h, not part of the contract: msgpack packing and unpacking of call
// arguments and results, and waiting on a result's slot.
#pragma once

// msgpack-c's Boost adaptors (boost::optional, variant, fusion) are not used: without this,
// <msgpack.hpp> pulls Boost into every program that includes actors/api.h.
#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif

#include <exception>
#include <memory>
#include <msgpack.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "worker/errors.h"
#include "worker/object_state.h"

namespace phalanx::internal {

// Packs `args` as one msgpack array (a call's or a constructor's arguments).
template <typename... Args>
std::string PackArgs(Args&&... args) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_array(sizeof...(Args));
  (packer.pack(std::forward<Args>(args)), ...);
  return std::string(buffer.data(), buffer.size());
}

template <typename V>
std::string PackValue(const V& value) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, value);
  return std::string(buffer.data(), buffer.size());
}

// A first pass over a message from the network, before msgpack allocates anything: sums the
// elements its containers claim, and stops once they outnumber the message's bytes (each
// element takes one at least).
struct UntrustedMessageCheck : msgpack::null_visitor {
  explicit UntrustedMessageCheck(size_t size) : size(size) {}
  bool start_array(uint32_t n) { return (claimed += n) <= size; }
  bool start_map(uint32_t n) { return (claimed += 2 * uint64_t{n}) <= size; }
  const size_t size;
  uint64_t claimed = 0;
};

// Unpacks bytes that came over the network. msgpack allocates a container's elements when it
// reads its header, so a 5-byte array32 header would make it allocate 2^32 objects (96 GiB);
// here the elements of all containers together may not outnumber the bytes, which bounds the
// memory to a small multiple of the message's size. Throws as msgpack::unpack does.
inline msgpack::object_handle UnpackUntrusted(const std::string& bytes) {
  UntrustedMessageCheck check(bytes.size());
  msgpack::parse(bytes.data(), bytes.size(), check);  // false as well for a malformed message
  if (check.claimed > bytes.size()) {
    throw msgpack::size_overflow("a container claims more elements than the message has bytes");
  }
  return msgpack::unpack(bytes.data(), bytes.size());
}

// A call's result as T; InvalidArgument (kind InvalidCall) when it does not convert.
template <typename T>
absl::StatusOr<T> Unpack(const std::string& bytes, const std::string& what) {
  try {
    msgpack::object_handle handle = UnpackUntrusted(bytes);
    return handle.get().as<T>();
  } catch (const std::exception& e) {
    return worker::MakeError(absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
                             absl::StrCat("the result of ", what,
                                          " does not convert to the type asked for: ", e.what()));
  }
}

// Waits for `state` as a caller's Get does: a task worker lends its CPU while it waits
// (worker::BlockedScope). False when `timeout` passed first. (task_pool.cc)
bool WaitForResult(const std::shared_ptr<worker::ObjectState>& state, absl::Duration timeout);
// Waits as a caller's Wait does (worker::WaitAny, lending as WaitForResult). (task_pool.cc)
std::vector<bool> WaitForResults(const std::vector<std::shared_ptr<worker::ObjectState>>& states,
                                 int num_ready, absl::Duration timeout);

// Waits for `state` (what: the call, for the message) and returns the call's status.
inline absl::Status Await(const std::shared_ptr<worker::ObjectState>& state, absl::Duration timeout,
                          const std::string& what) {
  if (!state) {
    return absl::FailedPreconditionError("Get on an empty ObjectRef");
  }
  if (!WaitForResult(state, timeout)) {
    return worker::MakeError(
        absl::StatusCode::kDeadlineExceeded, worker::error_kind::kGetTimeout,
        absl::StrCat("Get timed out after ", absl::FormatDuration(timeout), " waiting for ", what));
  }
  return state->status();
}

inline std::string Describe(const msgpack::object& o) {
  std::ostringstream out;
  out << o;
  return out.str();
}

// Unpacks a msgpack array into a tuple of exactly the parameter types.
template <typename Tuple>
absl::Status UnpackArgs(const std::string& bytes, Tuple* out, const std::string& what,
                        const std::string& signature) {
  try {
    msgpack::object_handle handle = UnpackUntrusted(bytes);
    const msgpack::object& o = handle.get();
    if (o.type != msgpack::type::ARRAY || o.via.array.size != std::tuple_size_v<Tuple>) {
      return worker::MakeError(absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
                               absl::StrCat(what, " takes ", std::tuple_size_v<Tuple>,
                                            " argument(s) ", signature, ", got ", Describe(o)));
    }
    o.convert(*out);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return worker::MakeError(
        absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
        absl::StrCat("wrong argument types for ", what, signature, ": ", e.what()));
  }
}

}  // namespace phalanx::internal
