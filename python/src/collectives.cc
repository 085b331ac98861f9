// Collective groups on numpy arrays and torch tensors, without copies: the C++ ops run on
// the array's own memory (collectives/collective_group.h). Every op releases the GIL; a
// failure (a dead peer, a timeout, an abort) raises CollectiveError.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/collective_group.h"
#include "collectives/environment.h"
#include "python/src/bindings.h"
#include "worker/core_worker.h"

namespace phalanx::python {
namespace {

// A numpy array or torch tensor, seen as a buffer: no copy.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  collective::DType dtype = collective::DType::kFloat32;
};

collective::DType FromTorchDtype(const std::string& name) {
  if (name == "torch.float32") return collective::DType::kFloat32;
  if (name == "torch.float64") return collective::DType::kFloat64;
  if (name == "torch.float16") return collective::DType::kFloat16;
  if (name == "torch.bfloat16") return collective::DType::kBFloat16;
  if (name == "torch.int32") return collective::DType::kInt32;
  if (name == "torch.int64") return collective::DType::kInt64;
  throw py::type_error(absl::StrCat("dtype ", name,
                                    " is not supported by collectives: use float32, float64, "
                                    "float16, bfloat16, int32 or int64"));
}

Buffer ToBuffer(const py::object& obj, bool writable) {
  Buffer b;
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "numel")) {  // a torch tensor
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      throw py::value_error("the tensor is not contiguous: call .contiguous() first");
    }
    std::string device = py::str(obj.attr("device").attr("type"));
    if (device != "cpu" && device != "cuda") {
      throw py::value_error(absl::StrCat("tensors on ", device, " are not supported"));
    }
    b.data = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
    b.count = obj.attr("numel")().cast<size_t>();
    b.dtype = FromTorchDtype(py::str(obj.attr("dtype")));
    return b;
  }
  py::buffer buffer = py::reinterpret_borrow<py::buffer>(obj);
  py::buffer_info info = buffer.request(writable);
  if (info.ndim > 0) {
    ssize_t expected = info.itemsize;
    for (ssize_t d = info.ndim - 1; d >= 0; --d) {
      if (info.shape[d] > 1 && info.strides[d] != expected) {
        throw py::value_error("the array is not C-contiguous: use numpy.ascontiguousarray");
      }
      expected *= info.shape[d];
    }
  }
  b.data = info.ptr;
  b.count = static_cast<size_t>(info.size);
  char kind = info.format.empty() ? '?' : info.format.back();
  if (kind == 'f' && info.itemsize == 4) {
    b.dtype = collective::DType::kFloat32;
  } else if (kind == 'd' && info.itemsize == 8) {
    b.dtype = collective::DType::kFloat64;
  } else if (kind == 'e' && info.itemsize == 2) {
    b.dtype = collective::DType::kFloat16;
  } else if ((kind == 'i' || kind == 'l' || kind == 'q') && info.itemsize == 4) {
    b.dtype = collective::DType::kInt32;
  } else if ((kind == 'i' || kind == 'l' || kind == 'q') && info.itemsize == 8) {
    b.dtype = collective::DType::kInt64;
  } else {
    throw py::type_error(absl::StrCat("arrays of format '", info.format, "' (", info.itemsize,
                                      " bytes) are not supported by collectives: use float32, "
                                      "float64, float16, int32 or int64"));
  }
  return b;
}

collective::ReduceOp Op(const std::string& op) {
  if (op == "sum") return collective::ReduceOp::kSum;
  if (op == "prod" || op == "product") return collective::ReduceOp::kProd;
  if (op == "min") return collective::ReduceOp::kMin;
  if (op == "max") return collective::ReduceOp::kMax;
  if (op == "avg" || op == "mean") return collective::ReduceOp::kAvg;
  throw py::value_error(absl::StrCat("op '", op, "': use sum, prod, min, max or avg"));
}

constexpr char kGroupCapsule[] = "phalanx.CollectiveGroup";

class PyCollectiveGroup {
 public:
  PyCollectiveGroup(const std::string& name, const std::string& backend,
                    const std::string& gcs_address, const std::string& token,
                    const std::string& host, double timeout_s, bool shared_memory) {
    collective::GroupOptions options;
    options.name = name;
    if (backend == "nccl") {
      options.backend = collective::Backend::kNccl;
    } else if (backend != "gloo") {
      throw py::value_error(absl::StrCat("backend '", backend, "': use gloo or nccl"));
    }
    options.gcs_address = gcs_address;
    options.token = token;
    if (options.gcs_address.empty()) {
      if (worker::CoreWorker* cw = worker::CoreWorker::Get()) {
        options.gcs_address = cw->options().address;
        options.token = cw->options().token;
      }
    }
    if (!host.empty()) options.host = host;
    options.timeout = absl::Seconds(timeout_s);
    options.shared_memory = shared_memory;
    collective::GroupOptionsFromEnvironment(&options);
    group_ = CallBlocking([&] { return collective::CollectiveGroup::Create(options); },
                          ErrorDomain::kCollective);
  }

  void Reconfigure(int64_t epoch, int rank, int world, double timeout_s) {
    Run([&] {
      return group_->Reconfigure(epoch, rank, world,
                                 timeout_s < 0 ? absl::ZeroDuration() : absl::Seconds(timeout_s));
    });
  }
  void Allreduce(const py::object& t, const std::string& op, double timeout_s) {
    Buffer b = ToBuffer(t, true);
    collective::ReduceOp reduce = Op(op);
    Run([&] { return group_->Allreduce(b.data, b.count, b.dtype, reduce, T(timeout_s)); });
  }
  void Allgather(const py::object& in, const py::object& out, double timeout_s) {
    Buffer i = ToBuffer(in, false), o = ToBuffer(out, true);
    if (o.count != i.count * static_cast<size_t>(group_->world_size()) || o.dtype != i.dtype) {
      throw py::value_error(absl::StrCat("allgather: out must hold world_size (",
                                         group_->world_size(), ") × ", i.count,
                                         " elements of the input's dtype; it holds ", o.count));
    }
    Run([&] { return group_->Allgather(i.data, o.data, i.count, i.dtype, T(timeout_s)); });
  }
  void ReduceScatter(const py::object& in, const py::object& out, const std::string& op,
                     double timeout_s) {
    Buffer i = ToBuffer(in, false), o = ToBuffer(out, true);
    if (i.count != o.count * static_cast<size_t>(group_->world_size()) || o.dtype != i.dtype) {
      throw py::value_error(absl::StrCat("reduce_scatter: in must hold world_size (",
                                         group_->world_size(), ") × ", o.count,
                                         " elements of the output's dtype; it holds ", i.count));
    }
    collective::ReduceOp reduce = Op(op);
    Run([&] {
      return group_->ReduceScatter(i.data, o.data, o.count, i.dtype, reduce, T(timeout_s));
    });
  }
  void Broadcast(const py::object& t, int root, double timeout_s) {
    Buffer b = ToBuffer(t, true);
    Run([&] { return group_->Broadcast(b.data, b.count, b.dtype, root, T(timeout_s)); });
  }
  void Barrier(double timeout_s) {
    Run([&] { return group_->Barrier(T(timeout_s)); });
  }
  void Send(const py::object& t, int dst, double timeout_s) {
    Buffer b = ToBuffer(t, false);
    Run([&] { return group_->Send(b.data, b.count, b.dtype, dst, T(timeout_s)); });
  }
  void Recv(const py::object& t, int src, double timeout_s) {
    Buffer b = ToBuffer(t, true);
    Run([&] { return group_->Recv(b.data, b.count, b.dtype, src, T(timeout_s)); });
  }
  void Abort(const std::string& reason) { group_->Abort(reason); }
  // The group for _phalanx_torch (python/src/torch_process_group.cc), which links no Phalanx
  // library: a capsule named kGroupCapsule holding a std::shared_ptr to it.
  py::capsule Capsule() const {
    return py::capsule(new std::shared_ptr<collective::CollectiveGroup>(group_), kGroupCapsule,
                       [](PyObject* o) {
                         delete static_cast<std::shared_ptr<collective::CollectiveGroup>*>(
                             PyCapsule_GetPointer(o, kGroupCapsule));
                       });
  }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->world_size(); }
  int64_t epoch() const { return group_->epoch(); }
  std::string name() const { return group_->name(); }

 private:
  static absl::Duration T(double timeout_s) {
    return timeout_s < 0 ? absl::ZeroDuration() : absl::Seconds(timeout_s);
  }
  // Runs one collective without the GIL; a failure is a CollectiveError naming the cause.
  template <typename F>
  void Run(F&& f) {
    CallBlocking(std::forward<F>(f), ErrorDomain::kCollective);
  }

 private:
  std::shared_ptr<collective::CollectiveGroup> group_;
};

}  // namespace

void BindCollectives(py::module_& m) {
  py::class_<PyCollectiveGroup>(m, "CollectiveGroup")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::string&, double, bool>(),
           py::arg("name"), py::arg("backend") = "gloo", py::arg("gcs_address") = "",
           py::arg("token") = "", py::arg("host") = "", py::arg("timeout_s") = 30.0,
           py::arg("shared_memory") = true)
      .def("reconfigure", &PyCollectiveGroup::Reconfigure, py::arg("epoch"), py::arg("rank"),
           py::arg("world_size"), py::arg("timeout_s") = -1.0)
      .def("allreduce", &PyCollectiveGroup::Allreduce, py::arg("tensor"), py::arg("op") = "sum",
           py::arg("timeout_s") = -1.0)
      .def("allgather", &PyCollectiveGroup::Allgather, py::arg("tensor"), py::arg("out"),
           py::arg("timeout_s") = -1.0)
      .def("reduce_scatter", &PyCollectiveGroup::ReduceScatter, py::arg("tensor"), py::arg("out"),
           py::arg("op") = "sum", py::arg("timeout_s") = -1.0)
      .def("broadcast", &PyCollectiveGroup::Broadcast, py::arg("tensor"), py::arg("root") = 0,
           py::arg("timeout_s") = -1.0)
      .def("barrier", &PyCollectiveGroup::Barrier, py::arg("timeout_s") = -1.0)
      .def("send", &PyCollectiveGroup::Send, py::arg("tensor"), py::arg("dst"),
           py::arg("timeout_s") = -1.0)
      .def("recv", &PyCollectiveGroup::Recv, py::arg("tensor"), py::arg("src"),
           py::arg("timeout_s") = -1.0)
      .def("abort", &PyCollectiveGroup::Abort, py::arg("reason") = "aborted")
      .def("_capsule", &PyCollectiveGroup::Capsule)
      .def_property_readonly("rank", &PyCollectiveGroup::rank)
      .def_property_readonly("world_size", &PyCollectiveGroup::world_size)
      .def_property_readonly("epoch", &PyCollectiveGroup::epoch)
      .def_property_readonly("name", &PyCollectiveGroup::name);
}

}  // namespace phalanx::python
