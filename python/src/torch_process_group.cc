// phalanx._native_torch: the `phalanx` backend of torch.distributed (c10d). A ProcessGroupPhalanx
// runs torch's collectives on Phalanx's CollectiveGroup of one epoch (shared memory in a machine,
// TCP between machines), so that DDP, ZeroRedundancyOptimizer and a user's own dist.* calls
// go through the group the elastic controller forms, aborts and re-forms:
//
//   - An Abort of the group (the controller: a peer died, hung, or its host vanished) fails
//     the op in flight at once, and every op queued behind it, with the group's error; each
//     torch Work and its future carry that error.
//   - The group's size and rank are fixed per epoch, as c10d's are per ProcessGroup: the next
//     epoch gets a new ProcessGroupPhalanx over the same CollectiveGroup (phalanx.distributed
//     makes it the default group), and an op on a process group of an older epoch fails
//     naming both epochs. No TCPStore is needed: the group meets through the GCS.
//
// The CollectiveGroup comes from phalanx._native (phalanx.collective.CollectiveGroup) as a capsule
// holding a std::shared_ptr: this module links no Phalanx library (two copies of the runtime
// in one process would each have their own connections and registries); it calls the group
// through its virtual interface only.
//
// Ops run one at a time, in call order, on the process group's own thread (c10d's Work is
// asynchronous: DDP's reducer chains on each allreduce's future while backward goes on).
// Dtypes the group reduces natively (float32/64, float16, bfloat16, int32/64) go through in
// place; other dtypes are reduced through an int64 or float64 copy; ops that only move data
// (broadcast, allgather, alltoall, send/recv) move any dtype as bytes. A CUDA tensor is staged
// through host memory (Debian's torch has no CUDA; a CUDA build of torch gets correct results,
// without NCCL's speed).
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "collectives/collective_group.h"

namespace phalanx::python {
namespace {

namespace py = pybind11;
using collective::CollectiveGroup;
using collective::DType;
using collective::ReduceOp;

// The name capsules of phalanx._native.CollectiveGroup carry (python/src/collectives.cc).
constexpr char kGroupCapsule[] = "phalanx.CollectiveGroup";

// A torch op's outcome: Work's own state (wait(), isCompleted(), exception()) and the future
// DDP chains on, both set once by the op thread.
class PhalanxWork : public c10d::Work {
 public:
  PhalanxWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void Succeed() {
    finish();
    future_->markCompleted(c10::IValue(outputs_));
  }
  void Fail(const std::string& message) {
    auto error = std::make_exception_ptr(std::runtime_error(message));
    finish(error);
    future_->setError(error);
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A collective's buffer in the group's terms.
struct Buf {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
};

bool NativeDType(at::ScalarType t, DType* out) {
  switch (t) {
    case at::kFloat:
      *out = DType::kFloat32;
      return true;
    case at::kDouble:
      *out = DType::kFloat64;
      return true;
    case at::kHalf:
      *out = DType::kFloat16;
      return true;
    case at::kBFloat16:
      *out = DType::kBFloat16;
      return true;
    case at::kInt:
      *out = DType::kInt32;
      return true;
    case at::kLong:
      *out = DType::kInt64;
      return true;
    default:
      return false;
  }
}

// The bytes of a contiguous host tensor as elements the group can move (data movement only:
// nothing is added up). nbytes must be a multiple of 4 (callers pad).
Buf Words(const at::Tensor& t) {
  size_t bytes = t.numel() * t.element_size();
  if (bytes % 8 == 0) return Buf{t.data_ptr(), bytes / 8, DType::kInt64};
  return Buf{t.data_ptr(), bytes / 4, DType::kInt32};
}

// A flat host byte tensor of `bytes` rounded up to 4, holding `t`'s bytes (zero padded).
at::Tensor PaddedBytes(const at::Tensor& t, int64_t bytes_rounded) {
  at::Tensor out = at::zeros({bytes_rounded}, at::TensorOptions().dtype(at::kByte));
  int64_t n = t.numel() * t.element_size();
  if (n > 0) {
    std::memcpy(out.data_ptr(), t.data_ptr(), static_cast<size_t>(n));
  }
  return out;
}

int64_t RoundUp4(int64_t n) { return (n + 3) / 4 * 4; }

// The host, contiguous form of `t` that an op works on, and how its result gets back into `t`.
struct Staged {
  at::Tensor original;
  at::Tensor host;  // the same tensor when it already is host and contiguous
  bool copied = false;
  static Staged Of(const at::Tensor& t) {
    Staged s{t, t};
    if (!t.device().is_cpu() || !t.is_contiguous()) {
      s.host = t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
      s.copied = true;
    }
    return s;
  }
  void Back() {
    if (copied) original.copy_(host);
  }
};

const char* OpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

class ProcessGroupPhalanx : public c10d::ProcessGroup {
 public:
  // Wraps `group` as formed now (its epoch, rank and world size). `timeout`: each op's bound
  // (zero: the group's own).
  ProcessGroupPhalanx(std::shared_ptr<CollectiveGroup> group, std::chrono::milliseconds timeout)
      : ProcessGroup(group->rank(), group->world_size()),
        group_(std::move(group)),
        epoch_(group_->epoch()),
        timeout_(timeout) {
    thread_ = std::thread([this] { Loop(); });
  }

  ~ProcessGroupPhalanx() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const std::string getBackendName() const override { return "phalanx"; }
  int64_t epoch() const { return epoch_; }
  void Abort(const std::string& reason) { group_->Abort(reason); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    CheckOne(tensors, "broadcast");
    CheckRoot(opts.rootRank, "broadcast");
    at::Tensor t = tensors[0];
    int root = static_cast<int>(opts.rootRank);
    return Enqueue(c10d::OpType::BROADCAST, tensors, Ms(opts.timeout), [=, this](absl::Duration d) {
      Staged s = Staged::Of(t);
      absl::Status st = BroadcastBytes(s.host, root, d);
      if (st.ok()) s.Back();
      return st;
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    CheckOne(tensors, "allreduce");
    at::Tensor t = tensors[0];
    auto op = CheckReduce(opts.reduceOp, t, "allreduce");
    return Enqueue(c10d::OpType::ALLREDUCE, tensors, Ms(opts.timeout),
                   [=, this](absl::Duration d) { return AllreduceTensor(t, op, d); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    std::vector<c10d::ReduceOp::RedOpType> ops;
    for (auto& t : tensors) ops.push_back(CheckReduce(opts.reduceOp, t, "allreduce_coalesced"));
    return Enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors, Ms(opts.timeout),
                   [=, this](absl::Duration d) {
                     for (size_t i = 0; i < tensors.size(); ++i) {
                       absl::Status s = AllreduceTensor(tensors[i], ops[i], d);
                       if (!s.ok()) return s;
                     }
                     return absl::OkStatus();
                   });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    CheckOne(tensors, "reduce");
    CheckRoot(opts.rootRank, "reduce");
    at::Tensor t = tensors[0];
    auto op = CheckReduce(opts.reduceOp, t, "reduce");
    int root = static_cast<int>(opts.rootRank);
    // An allreduce of a copy: only the root's tensor takes the result (the others keep
    // theirs, as with Gloo).
    return Enqueue(c10d::OpType::REDUCE, tensors, Ms(opts.timeout), [=, this](absl::Duration d) {
      at::Tensor copy = t.to(at::kCPU, false, true).contiguous();
      absl::Status s = AllreduceTensor(copy, op, d);
      if (s.ok() && getRank() == root) t.copy_(copy);
      return s;
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    CheckOne(inputs, "allgather");
    if (outputs.size() != 1) Refuse("allgather takes one list of outputs per process");
    at::Tensor in = inputs[0];
    std::vector<at::Tensor> outs = outputs[0];
    CheckList(outs, in, "allgather", "output_tensor_list");
    return Enqueue(c10d::OpType::ALLGATHER, outs, Ms(opts.timeout), [=, this](absl::Duration d) {
      at::Tensor flat;
      absl::Status s = GatherBytes(in, &flat, d);
      if (!s.ok()) return s;
      int64_t bytes = in.numel() * in.element_size();
      int64_t stride = RoundUp4(bytes);
      for (int r = 0; r < getSize(); ++r) CopyBytesInto(outs[r], flat, r * stride, bytes);
      return absl::OkStatus();
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    CheckSize(output, input.numel() * getSize(), input, "_allgather_base", "output");
    at::Tensor in = input, out = output;
    return Enqueue(c10d::OpType::_ALLGATHER_BASE, {out}, Ms(opts.timeout),
                   [=, this](absl::Duration d) {
                     at::Tensor flat;
                     absl::Status s = GatherBytes(in, &flat, d);
                     if (!s.ok()) return s;
                     int64_t bytes = in.numel() * in.element_size();
                     Staged o = Staged::Of(out);
                     auto* dst = static_cast<uint8_t*>(o.host.data_ptr());
                     const auto* src = static_cast<const uint8_t*>(flat.data_ptr());
                     for (int r = 0; r < getSize(); ++r) {
                       std::memcpy(dst + r * bytes, src + r * RoundUp4(bytes), bytes);
                     }
                     o.Back();
                     return absl::OkStatus();
                   });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    CheckOne(inputs, "gather");
    CheckRoot(opts.rootRank, "gather");
    int root = static_cast<int>(opts.rootRank);
    at::Tensor in = inputs[0];
    std::vector<at::Tensor> outs;
    if (getRank() == root) {
      if (outputs.size() != 1) Refuse("gather: the root takes one list of outputs");
      outs = outputs[0];
      CheckList(outs, in, "gather", "gather_list");
    } else if (!outputs.empty() && !outputs[0].empty()) {
      Refuse("gather: only the root (dst) gives a gather_list");
    }
    return Enqueue(c10d::OpType::GATHER, outs, Ms(opts.timeout), [=, this](absl::Duration d) {
      at::Tensor flat;
      absl::Status s = GatherBytes(in, &flat, d);
      if (!s.ok() || getRank() != root) return s;
      int64_t bytes = in.numel() * in.element_size();
      for (int r = 0; r < getSize(); ++r) CopyBytesInto(outs[r], flat, r * RoundUp4(bytes), bytes);
      return absl::OkStatus();
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    CheckOne(outputs, "scatter");
    CheckRoot(opts.rootRank, "scatter");
    int root = static_cast<int>(opts.rootRank);
    at::Tensor out = outputs[0];
    std::vector<at::Tensor> ins;
    if (getRank() == root) {
      if (inputs.size() != 1) Refuse("scatter: the root takes one list of inputs");
      ins = inputs[0];
      CheckList(ins, out, "scatter", "scatter_list");
    }
    // The root broadcasts every rank's part; each keeps its own (world size × the bytes of a
    // part on the wire, where a tree of sends would move each part once).
    return Enqueue(c10d::OpType::SCATTER, outputs, Ms(opts.timeout), [=, this](absl::Duration d) {
      int64_t bytes = out.numel() * out.element_size();
      int64_t stride = RoundUp4(bytes);
      at::Tensor all = at::zeros({stride * getSize()}, at::TensorOptions().dtype(at::kByte));
      if (getRank() == root) {
        for (int r = 0; r < getSize(); ++r) {
          at::Tensor part = ins[r].to(at::kCPU, false, true).contiguous();
          std::memcpy(static_cast<uint8_t*>(all.data_ptr()) + r * stride, part.data_ptr(), bytes);
        }
      }
      Buf b = Words(all);
      absl::Status s = group_->Broadcast(b.data, b.count, b.dtype, root, d);
      if (!s.ok()) return s;
      CopyBytesInto(out, all, getRank() * stride, bytes);
      return absl::OkStatus();
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    CheckOne(outputs, "reduce_scatter");
    if (inputs.size() != 1) Refuse("reduce_scatter takes one list of inputs per process");
    at::Tensor out = outputs[0];
    std::vector<at::Tensor> ins = inputs[0];
    CheckList(ins, out, "reduce_scatter", "input_list");
    auto op = CheckReduce(opts.reduceOp, out, "reduce_scatter");
    return Enqueue(c10d::OpType::REDUCE_SCATTER, outputs, Ms(opts.timeout),
                   [=, this](absl::Duration d) {
                     std::vector<at::Tensor> flat;
                     for (auto& t : ins) flat.push_back(t.to(at::kCPU).reshape({-1}));
                     return ReduceScatterTensor(at::cat(flat), out, op, d);
                   });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    CheckSize(input, output.numel() * getSize(), output, "_reduce_scatter_base", "input");
    at::Tensor in = input, out = output;
    auto op = CheckReduce(opts.reduceOp, out, "_reduce_scatter_base");
    return Enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, Ms(opts.timeout),
                   [=, this](absl::Duration d) {
                     return ReduceScatterTensor(in.to(at::kCPU).reshape({-1}), out, op, d);
                   });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    if (output.scalar_type() != input.scalar_type()) {
      Refuse("alltoall: the output and input tensors must have the same dtype");
    }
    std::vector<int64_t> in_rows = Splits(input_splits, input, "input_split_sizes");
    std::vector<int64_t> out_rows = Splits(output_splits, output, "output_split_sizes");
    at::Tensor in = input, out = output;
    return Enqueue(
        c10d::OpType::ALLTOALL_BASE, {out}, Ms(opts.timeout), [=, this](absl::Duration d) {
          int64_t row = in.dim() == 0
                            ? in.element_size()
                            : in.numel() / std::max<int64_t>(in.size(0), 1) * in.element_size();
          return AllToAllBytes(in, in_rows, out, out_rows, row, d);
        });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    if (static_cast<int>(outputs.size()) != getSize() ||
        static_cast<int>(inputs.size()) != getSize()) {
      Refuse("alltoall takes world_size input and output tensors");
    }
    std::vector<at::Tensor> ins = inputs, outs = outputs;
    return Enqueue(c10d::OpType::ALLTOALL, outs, Ms(opts.timeout), [=, this](absl::Duration d) {
      std::vector<int64_t> in_bytes, out_bytes;
      std::vector<at::Tensor> flat_in;
      for (auto& t : ins) {
        flat_in.push_back(t.to(at::kCPU).contiguous().view(at::kByte).reshape({-1}));
        in_bytes.push_back(flat_in.back().numel());
      }
      for (auto& t : outs) out_bytes.push_back(t.numel() * t.element_size());
      int64_t total = 0;
      for (int64_t b : out_bytes) total += b;
      at::Tensor flat_out = at::empty({total}, at::TensorOptions().dtype(at::kByte));
      absl::Status s = AllToAllBytes(at::cat(flat_in), in_bytes, flat_out, out_bytes, 1, d);
      if (!s.ok()) return s;
      int64_t at_byte = 0;
      for (int r = 0; r < getSize(); ++r) {
        CopyBytesInto(outs[r], flat_out, at_byte, out_bytes[r]);
        at_byte += out_bytes[r];
      }
      return absl::OkStatus();
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return Enqueue(c10d::OpType::BARRIER, {}, Ms(opts.timeout),
                   [=, this](absl::Duration d) { return group_->Barrier(d); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int /*tag*/) override {
    CheckOne(tensors, "send");
    CheckPeer(dst, "send", "dst");
    at::Tensor t = tensors[0];
    return Enqueue(c10d::OpType::SEND, tensors, Ms(timeout_), [=, this](absl::Duration d) {
      int64_t bytes = t.numel() * t.element_size();
      at::Tensor padded = PaddedBytes(t.to(at::kCPU).contiguous(), RoundUp4(bytes));
      Buf b = Words(padded);
      return group_->Send(b.data, b.count, b.dtype, dst, d);
    });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int /*tag*/) override {
    CheckOne(tensors, "recv");
    CheckPeer(src, "recv", "src");
    at::Tensor t = tensors[0];
    return Enqueue(c10d::OpType::RECV, tensors, Ms(timeout_), [=, this](absl::Duration d) {
      int64_t bytes = t.numel() * t.element_size();
      at::Tensor padded = at::empty({RoundUp4(bytes)}, at::TensorOptions().dtype(at::kByte));
      Buf b = Words(padded);
      absl::Status s = group_->Recv(b.data, b.count, b.dtype, src, d);
      if (s.ok()) CopyBytesInto(t, padded, 0, bytes);
      return s;
    });
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& /*tensors*/,
                                               int /*tag*/) override {
    Refuse("recv without src (any source) is not supported: name the sender with src=");
  }

 private:
  using Run = std::function<absl::Status(absl::Duration)>;
  struct Item {
    c10::intrusive_ptr<PhalanxWork> work;
    Run run;
    absl::Duration timeout;
  };

  [[noreturn]] static void Refuse(const std::string& why) {
    throw std::invalid_argument("phalanx process group: " + why);
  }

  // An op's bound: its own (from the call's options), else the process group's, else (zero)
  // the collective group's.
  absl::Duration Ms(std::chrono::milliseconds t) const {
    if (t.count() < 0) t = timeout_;
    return t.count() <= 0 ? absl::ZeroDuration() : absl::Milliseconds(t.count());
  }

  void CheckOne(const std::vector<at::Tensor>& tensors, const char* op) const {
    if (tensors.size() != 1) {
      Refuse(std::string(op) + " takes one tensor per process (" + std::to_string(tensors.size()) +
             " given): start one process per device");
    }
  }
  void CheckRoot(int64_t root, const char* op) const {
    if (root < 0 || root >= getSize()) {
      Refuse(std::string(op) + ": rank " + std::to_string(root) + " is not in this group of " +
             std::to_string(getSize()));
    }
  }
  void CheckPeer(int peer, const char* op, const char* field) const {
    if (peer < 0 || peer >= getSize() || peer == getRank()) {
      Refuse(std::string(op) + ": " + field + "=" + std::to_string(peer) +
             " is not another rank of this group (0.." + std::to_string(getSize() - 1) +
             ", this is " + std::to_string(getRank()) + ")");
    }
  }
  void CheckList(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* op,
                 const char* field) const {
    if (static_cast<int>(list.size()) != getSize()) {
      Refuse(std::string(op) + ": " + field + " holds " + std::to_string(list.size()) +
             " tensors; give world_size (" + std::to_string(getSize()) + ")");
    }
    for (const auto& t : list) {
      if (t.numel() != like.numel() || t.scalar_type() != like.scalar_type()) {
        Refuse(std::string(op) + ": every tensor of " + field +
               " must have the other tensor's size and dtype");
      }
    }
  }
  void CheckSize(const at::Tensor& t, int64_t numel, const at::Tensor& like, const char* op,
                 const char* field) const {
    if (t.numel() != numel || t.scalar_type() != like.scalar_type()) {
      Refuse(std::string(op) + ": " + field + " must hold world_size × " +
             std::to_string(like.numel()) + " elements of the other tensor's dtype (it holds " +
             std::to_string(t.numel()) + ")");
    }
  }
  std::vector<int64_t> Splits(const std::vector<int64_t>& given, const at::Tensor& t,
                              const char* field) const {
    int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (given.empty()) {
      if (rows % getSize() != 0) {
        Refuse(std::string("alltoall: dim 0 (") + std::to_string(rows) +
               ") does not split evenly among " + std::to_string(getSize()) + " ranks: give " +
               field);
      }
      return std::vector<int64_t>(getSize(), rows / getSize());
    }
    int64_t sum = 0;
    for (int64_t s : given) sum += s;
    if (static_cast<int>(given.size()) != getSize() || sum != rows) {
      Refuse(std::string("alltoall: ") + field + " must give world_size sizes adding up to dim 0");
    }
    return given;
  }
  c10d::ReduceOp::RedOpType CheckReduce(const c10d::ReduceOp& op, const at::Tensor& t,
                                        const char* name) const {
    auto type = op.op_;
    bool integral = at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
    if (type == c10d::ReduceOp::PREMUL_SUM || type == c10d::ReduceOp::UNUSED) {
      Refuse(std::string(name) + ": ReduceOp." + OpName(type) +
             " is not supported: scale the tensor, then use SUM");
    }
    if ((type == c10d::ReduceOp::BAND || type == c10d::ReduceOp::BOR ||
         type == c10d::ReduceOp::BXOR) &&
        !integral) {
      Refuse(std::string(name) + ": ReduceOp." + OpName(type) + " needs an integer tensor, not " +
             std::string(c10::toString(t.scalar_type())));
    }
    if (t.is_complex()) {
      Refuse(std::string(name) + ": complex tensors: use torch.view_as_real first");
    }
    return type;
  }

  // Queues one op for the thread; the Work completes when it ran.
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         absl::Duration timeout, Run run) {
    auto work = c10::make_intrusive<PhalanxWork>(getRank(), type, std::move(outputs));
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Item{work, std::move(run), timeout});
    }
    cv_.notify_one();
    return work;
  }

  void Loop() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      absl::Status s;
      if (group_->epoch() != epoch_) {
        s = absl::FailedPreconditionError(
            "this process group belongs to epoch " + std::to_string(epoch_) + " of group '" +
            group_->name() + "', which has since been re-formed at epoch " +
            std::to_string(group_->epoch()) +
            " (a membership change): use torch.distributed's default group of the new epoch");
      } else {
        try {
          s = item.run(item.timeout);
        } catch (const std::exception& e) {
          s = absl::InternalError(e.what());
        }
      }
      if (s.ok()) {
        item.work->Succeed();
      } else {
        item.work->Fail("phalanx process group: " + std::string(s.message()));
      }
    }
  }

  // ---- the ops, on the op thread --------------------------------------------------------

  absl::Status BroadcastBytes(const at::Tensor& host, int root, absl::Duration d) {
    int64_t bytes = host.numel() * host.element_size();
    if (bytes % 4 == 0) {
      Buf b = Words(host);
      return group_->Broadcast(b.data, b.count, b.dtype, root, d);
    }
    at::Tensor padded = PaddedBytes(host, RoundUp4(bytes));
    Buf b = Words(padded);
    absl::Status s = group_->Broadcast(b.data, b.count, b.dtype, root, d);
    if (s.ok()) std::memcpy(host.data_ptr(), padded.data_ptr(), bytes);
    return s;
  }

  // Every rank's bytes of `in` (each padded to 4), rank-major, into a new byte tensor.
  absl::Status GatherBytes(const at::Tensor& in, at::Tensor* flat, absl::Duration d) {
    int64_t bytes = in.numel() * in.element_size();
    at::Tensor mine = PaddedBytes(in.to(at::kCPU).contiguous(), RoundUp4(bytes));
    *flat = at::empty({RoundUp4(bytes) * getSize()}, at::TensorOptions().dtype(at::kByte));
    Buf b = Words(mine);
    return group_->Allgather(b.data, flat->data_ptr(), b.count, b.dtype, d);
  }

  static void CopyBytesInto(const at::Tensor& dst, const at::Tensor& flat, int64_t offset,
                            int64_t bytes) {
    at::Tensor part = flat.narrow(0, offset, bytes);
    if (dst.device().is_cpu() && dst.is_contiguous()) {
      std::memcpy(dst.data_ptr(), part.data_ptr(), bytes);
    } else {
      dst.copy_(part.view(dst.scalar_type()).view(dst.sizes()));
    }
  }

  // The dtype a reduction runs in, for a tensor of dtype `t` the group cannot reduce itself.
  static at::ScalarType Wider(at::ScalarType t) {
    return at::isFloatingType(t) ? at::kDouble : at::kLong;
  }

  static ReduceOp Native(c10d::ReduceOp::RedOpType op) {
    switch (op) {
      case c10d::ReduceOp::AVG:
        return ReduceOp::kAvg;
      case c10d::ReduceOp::PRODUCT:
        return ReduceOp::kProd;
      case c10d::ReduceOp::MIN:
        return ReduceOp::kMin;
      case c10d::ReduceOp::MAX:
        return ReduceOp::kMax;
      default:
        return ReduceOp::kSum;
    }
  }

  absl::Status AllreduceTensor(const at::Tensor& t, c10d::ReduceOp::RedOpType op,
                               absl::Duration d) {
    if (op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR) {
      return BitwiseAllreduce(t, op, d);
    }
    DType dtype = DType::kFloat32;
    bool native = NativeDType(t.scalar_type(), &dtype);
    if (native) {
      Staged s = Staged::Of(t);
      absl::Status st = group_->Allreduce(s.host.data_ptr(), s.host.numel(), dtype, Native(op), d);
      if (st.ok()) s.Back();
      return st;
    }
    // bool, uint8, int8, int16: reduced as int64 and cast back (as torch's own casts wrap).
    at::Tensor wide = t.to(at::kCPU).to(Wider(t.scalar_type())).contiguous();
    NativeDType(wide.scalar_type(), &dtype);
    absl::Status st = group_->Allreduce(wide.data_ptr(), wide.numel(), dtype, Native(op), d);
    if (!st.ok()) return st;
    if (t.scalar_type() == at::kBool) wide = wide.ne(0);
    t.copy_(wide);
    return absl::OkStatus();
  }

  // BAND, BOR, BXOR: every rank's tensor gathered, then folded here in rank order.
  absl::Status BitwiseAllreduce(const at::Tensor& t, c10d::ReduceOp::RedOpType op,
                                absl::Duration d) {
    at::Tensor flat;
    absl::Status s = GatherBytes(t, &flat, d);
    if (!s.ok()) return s;
    int64_t bytes = t.numel() * t.element_size();
    at::Tensor acc;
    for (int r = 0; r < getSize(); ++r) {
      at::Tensor part = flat.narrow(0, r * RoundUp4(bytes), bytes).view(t.scalar_type());
      if (r == 0) {
        acc = part.clone();
      } else if (op == c10d::ReduceOp::BAND) {
        acc.bitwise_and_(part);
      } else if (op == c10d::ReduceOp::BOR) {
        acc.bitwise_or_(part);
      } else {
        acc.bitwise_xor_(part);
      }
    }
    t.copy_(acc.view(t.sizes()));
    return absl::OkStatus();
  }

  absl::Status ReduceScatterTensor(const at::Tensor& in_flat, const at::Tensor& out,
                                   c10d::ReduceOp::RedOpType op, absl::Duration d) {
    int64_t n = out.numel();
    DType dtype = DType::kFloat32;
    if (op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR ||
        !NativeDType(out.scalar_type(), &dtype)) {
      // Through an allreduce of the whole input: the rare dtypes and bitwise ops.
      at::Tensor all = in_flat.clone();
      absl::Status s = AllreduceTensor(all, op, d);
      if (!s.ok()) return s;
      out.copy_(all.narrow(0, getRank() * n, n).view(out.sizes()));
      return absl::OkStatus();
    }
    at::Tensor in = in_flat.contiguous();
    Staged o = Staged::Of(out);
    absl::Status s =
        group_->ReduceScatter(in.data_ptr(), o.host.data_ptr(), n, dtype, Native(op), d);
    if (s.ok()) o.Back();
    return s;
  }

  // All-to-all of byte rows: rank r sends in_rows[j] rows of `row` bytes to rank j, in order,
  // and receives out_rows[j] rows from rank j. Every rank's split sizes and input are
  // gathered (each input padded to the largest); each rank then takes its parts. It moves
  // world_size times the bytes a pairwise exchange would, and never deadlocks on sends that
  // wait for their receiver.
  absl::Status AllToAllBytes(const at::Tensor& input, const std::vector<int64_t>& in_rows,
                             const at::Tensor& output, const std::vector<int64_t>& out_rows,
                             int64_t row, absl::Duration d) {
    int n = getSize();
    at::Tensor splits = at::tensor(in_rows, at::TensorOptions().dtype(at::kLong));
    at::Tensor all_splits = at::empty({n * n}, at::TensorOptions().dtype(at::kLong));
    absl::Status s =
        group_->Allgather(splits.data_ptr(), all_splits.data_ptr(), n, DType::kInt64, d);
    if (!s.ok()) return s;
    const int64_t* S = all_splits.data_ptr<int64_t>();  // S[src * n + dst], in rows
    int64_t longest = 0;
    for (int src = 0; src < n; ++src) {
      int64_t total = 0;
      for (int dst = 0; dst < n; ++dst) total += S[src * n + dst];
      longest = std::max(longest, total);
    }
    for (int src = 0; src < n; ++src) {
      if (S[src * n + getRank()] != out_rows[src]) {
        return absl::InvalidArgumentError(
            "alltoall: rank " + std::to_string(src) + " sends " +
            std::to_string(S[src * n + getRank()]) + " rows here, but output_split_sizes[" +
            std::to_string(src) + "] is " + std::to_string(out_rows[src]));
      }
    }
    int64_t stride = RoundUp4(longest * row);
    at::Tensor mine = at::zeros({stride}, at::TensorOptions().dtype(at::kByte));
    at::Tensor in = input.to(at::kCPU).contiguous();
    int64_t in_bytes = in.numel() * in.element_size();
    if (in_bytes > 0) std::memcpy(mine.data_ptr(), in.data_ptr(), in_bytes);
    at::Tensor gathered = at::empty({stride * n}, at::TensorOptions().dtype(at::kByte));
    if (stride > 0) {
      Buf b = Words(mine);
      s = group_->Allgather(b.data, gathered.data_ptr(), b.count, b.dtype, d);
      if (!s.ok()) return s;
    }
    Staged o = Staged::Of(output);
    auto* dst = static_cast<uint8_t*>(o.host.data_ptr());
    const auto* src_bytes = static_cast<const uint8_t*>(gathered.data_ptr());
    int64_t at_out = 0;
    for (int src = 0; src < n; ++src) {
      int64_t offset = 0;
      for (int j = 0; j < getRank(); ++j) offset += S[src * n + j];
      int64_t len = S[src * n + getRank()] * row;
      if (len > 0) std::memcpy(dst + at_out, src_bytes + src * stride + offset * row, len);
      at_out += len;
    }
    o.Back();
    return absl::OkStatus();
  }

  std::shared_ptr<CollectiveGroup> group_;
  const int64_t epoch_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;
};

std::shared_ptr<CollectiveGroup> FromCapsule(const py::capsule& capsule) {
  if (capsule.name() == nullptr || std::string(capsule.name()) != kGroupCapsule) {
    throw py::type_error("expected the capsule of a phalanx.collective.CollectiveGroup");
  }
  auto* held = capsule.get_pointer<std::shared_ptr<CollectiveGroup>>();
  if (held == nullptr || *held == nullptr) throw py::value_error("the group is gone");
  if ((*held)->epoch() == 0) {
    throw py::value_error("the collective group has no epoch yet: call reconfigure() first");
  }
  return *held;
}

}  // namespace
}  // namespace phalanx::python

PYBIND11_MODULE(_native_torch, m) {
  using phalanx::python::ProcessGroupPhalanx;
  namespace py = pybind11;
  m.doc() = "The phalanx backend of torch.distributed (see phalanx.distributed)";
  // The base class's Python type lives in torch's own extension.
  py::module_::import("torch.distributed");
  py::class_<ProcessGroupPhalanx, c10::intrusive_ptr<ProcessGroupPhalanx>, c10d::ProcessGroup>(
      m, "ProcessGroupPhalanx")
      .def(py::init([](const py::capsule& group, double timeout_s) {
             return c10::make_intrusive<ProcessGroupPhalanx>(
                 phalanx::python::FromCapsule(group),
                 std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
           }),
           py::arg("group"), py::arg("timeout_s") = 0.0)
      .def_property_readonly("epoch", &ProcessGroupPhalanx::epoch)
      .def("abort", &ProcessGroupPhalanx::Abort, py::arg("reason") = "aborted",
           py::call_guard<py::gil_scoped_release>());
}
