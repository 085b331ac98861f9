// The one place where a C++ error becomes a Python exception: by the error kind the status
// carries (worker/errors.h), else by the domain of the call, else by its status code.
// Never by its message.
#include "worker/errors.h"

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "python/src/bindings.h"
#include "worker/core_worker.h"

namespace phalanx::python {

const char* ExceptionClassFor(const absl::Status& status, ErrorDomain domain) {
  const std::string kind = worker::ErrorKind(status);
  if (kind == worker::error_kind::kActorDied || kind == worker::error_kind::kCreationFailed) {
    return "ActorDiedError";
  }
  if (kind == worker::error_kind::kWorkerCrashed) return "WorkerCrashedError";
  if (kind == worker::error_kind::kOutOfMemory) return "OutOfMemoryError";
  if (kind == worker::error_kind::kActorUnavailable) return "ActorUnavailableError";
  if (kind == worker::error_kind::kTaskError) return "TaskError";
  if (kind == worker::error_kind::kInvalidCall) return "InvalidCallError";
  if (kind == worker::error_kind::kGetTimeout) return "GetTimeoutError";
  if (kind == worker::error_kind::kTaskCancelled) return "TaskCancelledError";
  switch (domain) {
    case ErrorDomain::kPlacementGroup:
      return "PlacementGroupError";
    case ErrorDomain::kCollective:
      return "CollectiveError";
    case ErrorDomain::kGeneral:
      break;
  }
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return "NotFoundError";
    case absl::StatusCode::kInvalidArgument:
      return "InvalidArgumentError";
    case absl::StatusCode::kAlreadyExists:
      return "AlreadyExistsError";
    default:
      return "PhalanxError";
  }
}

void RaiseStatus(absl::Status status, ErrorDomain domain) {
  StatusError e;
  e.status = std::move(status);
  e.domain = domain;
  throw e;
}

worker::CoreWorker& Worker() {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) {
    RaiseStatus(
        absl::FailedPreconditionError("phalanx is not initialized: call phalanx.init() first"));
  }
  return *cw;
}

namespace {

// Sets the Python error for `e` (the GIL is held: translators run in the interpreter).
void SetPythonError(const StatusError& e) {
  const char* name = ExceptionClassFor(e.status, e.domain);
  py::object cls = py::module_::import("phalanx.exceptions").attr(name);
  py::str message(std::string(e.status.message()));
  py::object error;
  const std::string n = name;
  if (n == "ActorDiedError" || n == "WorkerCrashedError" || n == "OutOfMemoryError") {
    error = cls(message, py::arg("actor_id") = e.actor_id, py::arg("cause") = e.cause);
  } else if (n == "TaskCancelledError") {
    // Also a TaskError, as Ray's cancelled call is a RayTaskError whose cause is it.
    error = py::module_::import("phalanx.exceptions").attr("_cancelled")(message);
    cls = py::type::of(error);
  } else if (n == "ActorUnavailableError") {
    error = cls(message, py::arg("actor_id") = e.actor_id);
  } else if (n == "TaskError") {
    // Also an instance of the remote exception's class where one can be made.
    error =
        py::module_::import("phalanx.exceptions").attr("_task_error")(message, py::bytes(e.detail));
    cls = py::type::of(error);
  } else {
    error = cls(message);
  }
  PyErr_SetObject(cls.ptr(), error.ptr());
}

}  // namespace

void BindErrors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      try {
        SetPythonError(e);
      } catch (py::error_already_set& failed) {  // phalanx.exceptions did not import
        failed.restore();
      }
    }
  });

  // For tests of the table above: raises what a status of `code` (an absl::StatusCode
  // number) tagged with `kind` raises in `domain` ("", "placement_group", "collective").
  m.def(
      "_raise_status",
      [](int code, const std::string& kind, const std::string& message, const std::string& domain,
         const std::string& detail) {
        StatusError e;
        e.status = kind.empty()
                       ? absl::Status(static_cast<absl::StatusCode>(code), message)
                       : worker::MakeError(static_cast<absl::StatusCode>(code), kind, message);
        e.domain = domain == "placement_group" ? ErrorDomain::kPlacementGroup
                   : domain == "collective"    ? ErrorDomain::kCollective
                                               : ErrorDomain::kGeneral;
        e.detail = detail;
        throw e;
      },
      py::arg("code"), py::arg("kind") = "", py::arg("message") = "", py::arg("domain") = "",
      py::arg("detail") = "");
}

}  // namespace phalanx::python
