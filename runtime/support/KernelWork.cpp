//===- KernelWork.cpp - FLOPs and bytes of one kernel ---------------------===//

#include "runtime/support/KernelWork.h"

#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <optional>

using namespace dtc;

double TensorDesc::elements() const {
  double n = 1;
  for (int64_t d : shape)
    n *= static_cast<double>(d);
  return n;
}

namespace {

double dimOf(const TensorDesc &t, int index) {
  int rank = static_cast<int>(t.shape.size());
  if (index < 0)
    index += rank;
  return index >= 0 && index < rank ? static_cast<double>(t.shape[index]) : 1;
}

const TensorDesc &at(const llvm::SmallVector<TensorDesc, 4> &list, size_t i) {
  static const TensorDesc empty;
  return i < list.size() ? list[i] : empty;
}

bool isFreeOp(llvm::StringRef op) {
  return op == "dtc.parameter" || op == "dtc.constant" || op == "dtc.reshape" ||
         op == "dtc.wait";
}

/// The collective a `dtc.X_start` runs, and whether Collectives.h prices
/// it on its output (else its input).
std::optional<std::pair<Collective, bool>> commOf(llvm::StringRef op) {
  using Comm = std::optional<std::pair<Collective, bool>>;
  return llvm::StringSwitch<Comm>(op)
      .Case("dtc.all_reduce_start", std::pair{Collective::AllReduce, false})
      .Case("dtc.all_gather_start", std::pair{Collective::AllGather, true})
      .Case("dtc.reduce_scatter_start",
            std::pair{Collective::ReduceScatter, false})
      .Case("dtc.all_to_all_start", std::pair{Collective::AllToAll, false})
      .Case("dtc.send_start", std::pair{Collective::SendRecv, false})
      .Case("dtc.recv_start", std::pair{Collective::SendRecv, true})
      .Default(std::nullopt);
}

void setGemm(KernelWork &w, double m, double n, double k, double batch) {
  w.kind = KernelWork::Kind::Gemm;
  w.m = m;
  w.n = n;
  w.k = k;
  w.batch = batch;
  w.flops = w.executedFlops = 2 * m * n * k * batch;
}

/// A convolution as GEMMs: x [N, C, spatial...], w [F, C/groups, taps...],
/// y [N, F, spatial...]; one GEMM per group of (N * out spatial) x (F/g) x
/// (C/g * taps).
void setConv(KernelWork &w, const TensorDesc &x, const TensorDesc &weight,
             const TensorDesc &y, llvm::StringRef op) {
  double spatial = 1, taps = 1;
  for (size_t i = 2; i < y.shape.size(); ++i)
    spatial *= static_cast<double>(y.shape[i]);
  for (size_t i = 2; i < weight.shape.size(); ++i)
    taps *= static_cast<double>(weight.shape[i]);
  double inPerGroup = std::max(dimOf(weight, 1), 1.0);
  double groups = std::max(1.0, dimOf(x, 1) / inPerGroup);
  double m = dimOf(y, 0) * spatial, n = dimOf(weight, 0) / groups,
         k = inPerGroup * taps;
  if (op == "dtc.conv_grad_input")
    setGemm(w, m, k, n, groups);
  else if (op == "dtc.conv_grad_weight")
    setGemm(w, k, n, m, groups);
  else
    setGemm(w, m, n, k, groups);
}

} // namespace

KernelWork dtc::kernelWork(const KernelDesc &op) {
  KernelWork w;
  for (const TensorDesc &t : op.inputs)
    w.bytes += t.bytes();
  for (const TensorDesc &t : op.outputs)
    w.bytes += t.bytes();
  llvm::StringRef name = op.op;
  if (isFreeOp(name)) {
    w.bytes = 0;
    return w;
  }
  const TensorDesc &in0 = at(op.inputs, 0), &in1 = at(op.inputs, 1);
  const TensorDesc &out0 = at(op.outputs, 0);
  if (auto comm = commOf(name)) {
    w.kind = KernelWork::Kind::Comm;
    w.collective = comm->first;
    w.commBytes = comm->second ? out0.bytes() : in0.bytes();
    return w;
  }
  if (name == "dtc.matmul") {
    double m = dimOf(in0, -2), k = dimOf(in0, -1);
    if (op.transposeLhs)
      std::swap(m, k);
    double n = op.transposeRhs ? dimOf(in1, -2) : dimOf(in1, -1);
    // A weight (a rank-2 right operand) multiplies every row of the left
    // one: one GEMM over all of them, as Megatron-LM's layers run it.
    if (in1.shape.size() == 2 && !op.transposeLhs && n > 0)
      m = out0.elements() / n;
    double batch = m * n > 0 ? out0.elements() / (m * n) : 0;
    setGemm(w, m, n, k, batch);
    return w;
  }
  if (name == "dtc.conv" || name == "dtc.conv_grad_input" ||
      name == "dtc.conv_grad_weight") {
    // The kernels' operands: conv(x, w) -> y; grad_input(dy, w) -> dx;
    // grad_weight(x, dy) -> dw.
    bool forward = name == "dtc.conv",
         inputGrad = name == "dtc.conv_grad_input";
    const TensorDesc &x = forward || !inputGrad ? in0 : out0;
    const TensorDesc &weight = forward || inputGrad ? in1 : out0;
    const TensorDesc &y = forward ? out0 : inputGrad ? in0 : in1;
    setConv(w, x, weight, y, name);
    return w;
  }
  if (name == "dtc.attention" || name == "dtc.attention_grad" ||
      name == "dtc.attention_block" || name == "dtc.attention_block_grad") {
    // q [b, heads, s, d], k [b, groups, t, d], v [b, groups, t, dv]; a
    // ring step's block (context parallelism) is this rank's queries over
    // one key chunk, a causal one half of it averaged over the ring (the
    // zigzag chunks balance the diagonal, the chunks before and after).
    const TensorDesc &v = at(op.inputs, 2);
    double b = dimOf(in0, 0), heads = dimOf(in0, 1), s = dimOf(in0, 2),
           d = dimOf(in0, 3), t = dimOf(in1, 2);
    double dv = op.inputs.size() > 2 ? dimOf(v, 3) : d;
    w.kind = KernelWork::Kind::Attention;
    w.queries = s;
    w.keys = t;
    w.headDim = d;
    w.gradient = name.ends_with("_grad");
    w.flops = 2 * b * heads * s * t * (d + dv);
    w.executedFlops = w.flops * (op.causal ? 0.5 : 1.0);
    return w;
  }
  w.kind = KernelWork::Kind::Stream;
  for (const TensorDesc &t : op.outputs)
    w.flops += t.elements();
  if (name == "dtc.selective_scan" || name == "dtc.selective_scan_grad") {
    // Per element of the state [b, d, t, n]: h = a * h + x and y += h * c
    // (4); the gradient recomputes h (2), sums c's gradient (2) and runs
    // the reverse recurrence (5).
    w.flops = (name == "dtc.selective_scan" ? 4 : 9) * in0.elements();
  }
  w.executedFlops = w.flops;
  if (name == "dtc.embedding" || name == "dtc.slice" ||
      name == "dtc.shard_slice" || name == "dtc.gather_elements") {
    // They read only the rows or the part they return, not the whole table
    // or tensor: the result's bytes in and out, plus the indices.
    bool lookup = name == "dtc.embedding" || name == "dtc.gather_elements";
    w.bytes = 2 * out0.bytes() + (lookup ? in1.bytes() : 0);
  }
  return w;
}

KernelDesc dtc::gemmProbe(int64_t m, int64_t n, int64_t k, bool transposeLhs) {
  KernelDesc gemm;
  gemm.op = "dtc.matmul";
  gemm.transposeLhs = transposeLhs;
  gemm.inputs.push_back({transposeLhs ? llvm::SmallVector<int64_t, 4>{k, m}
                                      : llvm::SmallVector<int64_t, 4>{m, k}});
  gemm.inputs.push_back({{k, n}});
  gemm.outputs.push_back({{m, n}});
  return gemm;
}

KernelDesc dtc::attentionProbe(int64_t batch, int64_t heads, int64_t seq,
                               int64_t headDim, bool causal, bool gradient) {
  KernelDesc attention;
  attention.op = gradient ? "dtc.attention_grad" : "dtc.attention";
  attention.causal = causal;
  TensorDesc qkv{{batch, heads, seq, headDim}};
  attention.inputs.assign(gradient ? 4 : 3, qkv);
  attention.outputs.assign(gradient ? 3 : 1, qkv);
  return attention;
}

KernelDesc dtc::streamProbe(int64_t elements) {
  KernelDesc add;
  add.op = "dtc.add";
  add.inputs.assign(2, TensorDesc{{elements}});
  add.outputs.push_back({{elements}});
  return add;
}

KernelDesc dtc::crossEntropyKernel(double rows, double classes,
                                   int64_t elementBytes) {
  KernelDesc loss;
  loss.op = "dtc.cross_entropy";
  auto r = static_cast<int64_t>(rows), c = static_cast<int64_t>(classes);
  loss.inputs.push_back({{r, c}, elementBytes});
  loss.inputs.push_back({{r}, 8});
  loss.outputs.push_back({{}, 4});
  return loss;
}
