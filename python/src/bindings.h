// The pieces of the phalanx._native module (internal to python/src): each concern registers its
// functions and classes into the one module, and they share two helpers, so that every
// binding releases the GIL and raises errors the same way:
//
//   - CallBlocking(f, domain): runs f() with the GIL released; an absl::Status or StatusOr
//     it returns that is not OK is raised as the phalanx exception of its kind.
//   - RaiseStatus(status, domain): raises that exception (errors.cc holds the one table from
//     error kinds and status codes to the classes of phalanx/exceptions.py).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::worker {
class CoreWorker;
}  // namespace phalanx::worker

namespace phalanx::python {

namespace py = pybind11;

void BindDriver(py::module_& m);       // driver.cc: init, actors, calls, placement groups, KV
void BindWorker(py::module_& m);       // worker.cc: hosting Python actors
void BindCollectives(py::module_& m);  // collectives.cc: groups on numpy arrays and tensors
void BindJobs(py::module_& m);         // jobs.cc: elastic job specs and status
void BindErrors(py::module_& m);       // errors.cc: the exception translator
void BindObjects(py::module_& m);      // objects.cc: reading another node's objects

// Where an error comes from, for statuses that carry no error kind: a placement group's
// failure is a PlacementGroupError and a collective's a CollectiveError, whatever the code.
enum class ErrorDomain { kGeneral, kPlacementGroup, kCollective };

// A failed status on its way to Python (thrown in C++, turned into the phalanx exception by
// the translator BindErrors registers). The extras fill the exception's attributes.
struct StatusError : std::exception {
  absl::Status status;
  ErrorDomain domain = ErrorDomain::kGeneral;
  std::string actor_id;  // ActorError.actor_id
  std::string cause;     // ActorDiedError.cause
  std::string detail;    // TaskError.cause_type
  const char* what() const noexcept override { return "phalanx status error"; }
};

// The name of the class in phalanx.exceptions that `status` maps to.
const char* ExceptionClassFor(const absl::Status& status, ErrorDomain domain);

[[noreturn]] void RaiseStatus(absl::Status status, ErrorDomain domain = ErrorDomain::kGeneral);

namespace traits {
template <typename T>
struct IsStatusOr : std::false_type {};
template <typename T>
struct IsStatusOr<absl::StatusOr<T>> : std::true_type {};
}  // namespace traits

// Runs `f` with the GIL released (Python threads go on while it blocks) and hands back its
// result: an absl::Status becomes nothing, an absl::StatusOr<T> its T; an error is raised.
template <typename F>
auto CallBlocking(F&& f, ErrorDomain domain = ErrorDomain::kGeneral) {
  using R = std::invoke_result_t<F>;
  if constexpr (std::is_void_v<R>) {
    py::gil_scoped_release release;
    std::forward<F>(f)();
  } else {
    R result = [&] {
      py::gil_scoped_release release;
      return std::forward<F>(f)();
    }();
    if constexpr (std::is_same_v<R, absl::Status>) {
      if (!result.ok()) RaiseStatus(std::move(result), domain);
    } else if constexpr (traits::IsStatusOr<R>::value) {
      if (!result.ok()) RaiseStatus(result.status(), domain);
      return *std::move(result);
    } else {
      return result;
    }
  }
}

// This process's core worker; a phalanx error if phalanx.init() was not called.
worker::CoreWorker& Worker();

// Seconds from Python (< 0: no limit) as a Duration.
inline absl::Duration Timeout(double seconds) {
  return seconds < 0 ? absl::InfiniteDuration() : absl::Seconds(seconds);
}

}  // namespace phalanx::python
