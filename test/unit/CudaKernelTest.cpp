//===- CudaKernelTest.cpp - CUDA kernels against the CPU kernels ----------===//
//
// Every CUDA kernel runs on random inputs and is compared element by element
// with the CPU (reference) kernel of the same op and attributes:
// |cuda - cpu| <= atol + rtol |cpu|, tolerances per test (f32 kernels whose
// sums run in another order: rtol 1e-5..1e-4; bf16 results one bf16 ulp).
// Without a GPU those tests skip. The executor's device path (copies in and
// out, variables, readVariable/writeVariable) is also checked without a GPU
// through a MemorySpace that keeps "device" buffers in host memory.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Executor.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cuda/CudaBackend.h"
#ifndef DTC_CUDA_EMULATION // test/cuda-emulation: no device probe, no NCCL
#include "runtime/cuda/CudaProbe.h"
#include "runtime/cuda/NcclCommunicator.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace dtc;
using namespace dtc::runtime;

namespace {

const KernelRegistry &cpuKernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    cpu::registerCpuKernels(r);
    return r;
  }();
  return registry;
}

const KernelRegistry &cudaKernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    runtime::cuda::registerCudaKernels(r);
    return r;
  }();
  return registry;
}

#ifdef DTC_CUDA_EMULATION
bool haveDevice() { return true; }
#else
bool haveDevice() { return dtc::cuda::probe().deviceCount > 0; }
#endif

MemorySpace &deviceMemory() {
  static runtime::cuda::CudaMemory memory;
  return memory;
}

Tensor randomTensor(DType dtype, llvm::ArrayRef<int64_t> shape, float lo,
                    float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    float v = dist(gen);
    switch (dtype) {
    case DType::F32:
      t.as<float>()[i] = v;
      break;
    case DType::F64:
      t.as<double>()[i] = v;
      break;
    case DType::BF16:
      t.as<uint16_t>()[i] = floatToBF16(v);
      break;
    case DType::F16:
      t.as<uint16_t>()[i] = floatToHalf(v);
      break;
    case DType::I64:
      t.as<int64_t>()[i] = static_cast<int64_t>(std::floor(v));
      break;
    case DType::I32:
      t.as<int32_t>()[i] = static_cast<int32_t>(std::floor(v));
      break;
    case DType::BOOL:
      t.as<uint8_t>()[i] = v > 0;
      break;
    default:
      break;
    }
  }
  return t;
}

Tensor ids(DType dtype, llvm::ArrayRef<int64_t> shape, int64_t limit,
           unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, limit - 1);
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (dtype == DType::I64)
      t.as<int64_t>()[i] = dist(gen);
    else
      t.as<int32_t>()[i] = static_cast<int32_t>(dist(gen));
  }
  return t;
}

double elementAsDouble(const TensorRef &t, int64_t i) {
  if (t.dtype == DType::F64)
    return t.as<double>()[i];
  if (isFloat(t.dtype))
    return loadAsFloat(t, i);
  return static_cast<double>(loadAsInt(t, i));
}

/// One op run on both backends.
struct Case {
  explicit Case(const std::string &op) { inst.set_op(op); }

  Case &in(const Tensor &t) {
    inputs.push_back(t);
    return *this;
  }
  Case &out(DType dtype, llvm::ArrayRef<int64_t> shape) {
    outputShapes.emplace_back(dtype,
                              std::vector<int64_t>(shape.begin(), shape.end()));
    return *this;
  }
  Case &flag(const std::string &name) {
    (*inst.mutable_attrs())[name].set_b(true);
    return *this;
  }
  Case &i(const std::string &name, int64_t v) {
    (*inst.mutable_attrs())[name].set_i(v);
    return *this;
  }
  Case &f(const std::string &name, double v) {
    (*inst.mutable_attrs())[name].set_f(v);
    return *this;
  }
  Case &s(const std::string &name, const std::string &v) {
    (*inst.mutable_attrs())[name].set_s(v);
    return *this;
  }
  Case &ints(const std::string &name, std::vector<int64_t> values) {
    auto *list = (*inst.mutable_attrs())[name].mutable_ints();
    for (int64_t v : values)
      list->add_values(v);
    return *this;
  }

  std::string runCpu(std::vector<Tensor> &outs) const {
    return runOnHost(cpuKernels(), outs);
  }

  /// An output buffer of all-ones bytes (NaN in float types): a kernel
  /// must write every element, as arenas are reused between ops, so an
  /// element it leaves shows up instead of passing as a zero.
  static Tensor poisoned(DType dtype, llvm::ArrayRef<int64_t> shape) {
    Tensor t(dtype, shape);
    if (t.bytes())
      std::memset(t.data(), 0xFF, t.bytes());
    return t;
  }

  /// Runs the op of `registry` on host memory: the CPU kernels, or CUDA
  /// adapters that refuse the call before touching memory.
  std::string runOnHost(const KernelRegistry &registry,
                        std::vector<Tensor> &outs) const {
    KernelFn fn = registry.lookup(inst.op());
    if (!fn)
      return "no kernel for " + inst.op();
    std::vector<TensorRef> in, out;
    for (const Tensor &t : inputs)
      in.push_back(t.ref());
    for (auto &[dtype, shape] : outputShapes) {
      outs.push_back(poisoned(dtype, shape));
      out.push_back(outs.back().ref());
    }
    KernelCall call(inst, in, out, context);
    llvm::Error err = fn(call);
    return err ? llvm::toString(std::move(err)) : "";
  }

  /// Runs on the device and returns the outputs on the host.
  std::string runCuda(std::vector<Tensor> &outs) const {
    KernelFn fn = cudaKernels().lookup(inst.op());
    if (!fn)
      return "no CUDA kernel for " + inst.op();
    MemorySpace &memory = deviceMemory();
    std::vector<Tensor> deviceIn, deviceOut;
    std::vector<TensorRef> in, out;
    for (const Tensor &t : inputs) {
      auto d = runtime::cuda::toDevice(t, memory);
      if (!d)
        return llvm::toString(d.takeError());
      deviceIn.push_back(std::move(*d));
      in.push_back(deviceIn.back().ref());
    }
    for (auto &[dtype, shape] : outputShapes) {
      auto d = runtime::cuda::toDevice(poisoned(dtype, shape), memory);
      if (!d)
        return llvm::toString(d.takeError());
      deviceOut.push_back(std::move(*d));
      out.push_back(deviceOut.back().ref());
    }
    KernelCall call(inst, in, out, context);
    if (llvm::Error err = fn(call))
      return llvm::toString(std::move(err));
    if (llvm::Error err = memory.synchronize())
      return llvm::toString(std::move(err));
    for (const Tensor &d : deviceOut) {
      auto h = runtime::cuda::toHost(d, memory);
      if (!h)
        return llvm::toString(h.takeError());
      outs.push_back(std::move(*h));
    }
    return "";
  }

  /// Both backends succeed and agree within atol + rtol |cpu|.
  void check(double atol, double rtol) const {
    std::vector<Tensor> cpuOut, cudaOut;
    ASSERT_EQ(runCpu(cpuOut), "");
    ASSERT_EQ(runCuda(cudaOut), "");
    ASSERT_EQ(cpuOut.size(), cudaOut.size());
    for (size_t o = 0; o < cpuOut.size(); ++o) {
      const TensorRef &a = cpuOut[o].ref(), &b = cudaOut[o].ref();
      int64_t bad = 0;
      for (int64_t j = 0; j < a.numElements(); ++j) {
        double x = elementAsDouble(a, j), y = elementAsDouble(b, j);
        bool same = (std::isnan(x) && std::isnan(y)) || x == y ||
                    std::fabs(x - y) <= atol + rtol * std::fabs(x);
        if (!same && bad++ < 5)
          ADD_FAILURE() << inst.op() << " output " << o << " element " << j
                        << ": cpu " << x << ", cuda " << y;
      }
      EXPECT_EQ(bad, 0) << inst.op() << " output " << o << ": " << bad << " of "
                        << a.numElements() << " elements differ";
    }
  }

  program::Instruction inst;
  std::vector<Tensor> inputs;
  std::vector<std::pair<DType, std::vector<int64_t>>> outputShapes;
  /// For ops that ask the rank (dtc.shard_slice).
  ExecutionContext *context = nullptr;
};

class CudaKernel : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveDevice())
      GTEST_SKIP() << "no CUDA device";
  }
};

constexpr DType F32 = DType::F32, BF16 = DType::BF16, I64 = DType::I64,
                I32 = DType::I32, BOOL = DType::BOOL;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(CudaKernel, UnaryOps) {
  struct Op {
    const char *name;
    float lo, hi;
  } unary[] = {{"dtc.neg", -3, 3},          {"dtc.abs", -3, 3},
               {"dtc.exp", -5, 5},          {"dtc.log", 0.01f, 10},
               {"dtc.sqrt", 0, 10},         {"dtc.rsqrt", 0.1f, 10},
               {"dtc.reciprocal", 0.1f, 5}, {"dtc.tanh", -4, 4},
               {"dtc.erf", -3, 3},          {"dtc.sigmoid", -8, 8},
               {"dtc.relu", -3, 3},         {"dtc.silu", -8, 8},
               {"dtc.gelu", -6, 6},         {"dtc.softplus", -25, 25}};
  for (const Op &op : unary) {
    SCOPED_TRACE(op.name);
    Case(op.name)
        .in(randomTensor(F32, {3, 1000}, op.lo, op.hi, 1))
        .out(F32, {3, 1000})
        .check(1e-6, 2e-6);
    // bf16 in and out: the f32 results round to the same bf16 but for rare
    // ties, one bf16 ulp (2^-8 relative) apart.
    Case(op.name)
        .in(randomTensor(BF16, {257}, op.lo, op.hi, 2))
        .out(BF16, {257})
        .check(1e-6, 1.0 / 128);
  }
  Case("dtc.gelu")
      .flag("approximate_tanh")
      .in(randomTensor(F32, {4096}, -6, 6, 3))
      .out(F32, {4096})
      .check(1e-6, 2e-6);
}

TEST_F(CudaKernel, BinaryOpsBroadcast) {
  for (const char *op : {"dtc.add", "dtc.sub", "dtc.mul", "dtc.div", "dtc.max",
                         "dtc.min", "dtc.pow"}) {
    SCOPED_TRACE(op);
    Case(op)
        .in(randomTensor(F32, {2, 3, 40}, 0.5f, 2, 4))
        .in(randomTensor(F32, {3, 1}, 0.5f, 2, 5))
        .out(F32, {2, 3, 40})
        .check(0, 1e-6);
    Case(op)
        .in(randomTensor(F32, {1, 5}, 0.5f, 2, 6))
        .in(randomTensor(F32, {7, 1}, 0.5f, 2, 7))
        .out(F32, {7, 5})
        .check(0, 1e-6);
    // Integers: truncating division, division by zero gives 0. (pow's
    // exponents stay >= 0: 0^-k is inf, whose conversion the CPU leaves to
    // the hardware.)
    bool pow = std::string(op) == "dtc.pow";
    Case(op)
        .in(randomTensor(I64, {64}, -20, 20, 8))
        .in(randomTensor(I64, {64}, pow ? 0 : -4, 4, 9))
        .out(I64, {64})
        .check(0, 0);
    // Mixed dtypes convert to the result's; bf16 results round.
    Case(op)
        .in(randomTensor(BF16, {4, 33}, 0.5f, 2, 10))
        .in(randomTensor(F32, {33}, 0.5f, 2, 11))
        .out(BF16, {4, 33})
        .check(0, 1.0 / 128);
  }
}

TEST_F(CudaKernel, CompareSelectCast) {
  for (const char *pred : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    Case("dtc.compare")
        .s("predicate", pred)
        .in(randomTensor(I64, {6, 10}, -3, 3, 12))
        .in(randomTensor(I64, {10}, -3, 3, 13))
        .out(BOOL, {6, 10})
        .check(0, 0);
    Case("dtc.compare")
        .s("predicate", pred)
        .in(randomTensor(F32, {6, 10}, -1, 1, 14))
        .in(randomTensor(F32, {6, 1}, -1, 1, 15))
        .out(BOOL, {6, 10})
        .check(0, 0);
  }
  Case("dtc.select")
      .in(randomTensor(BOOL, {4, 1, 9}, -1, 1, 16))
      .in(randomTensor(F32, {4, 5, 9}, -1, 1, 17))
      .in(randomTensor(F32, {9}, -1, 1, 18))
      .out(F32, {4, 5, 9})
      .check(0, 0);
  Case("dtc.cast")
      .in(randomTensor(F32, {1000}, -40, 40, 19))
      .out(BF16, {1000})
      .check(0, 0);
  Case("dtc.cast")
      .in(randomTensor(F32, {1000}, -3e9f, 3e9f, 20))
      .out(I32, {1000})
      .check(0, 0);
  Case("dtc.cast")
      .in(randomTensor(I64, {100}, -100, 100, 21))
      .out(F32, {100})
      .check(0, 0);
  Case("dtc.cast")
      .in(randomTensor(F32, {100}, -1, 1, 22))
      .out(BOOL, {100})
      .check(0, 0);
}

/// A tensor holding `v` repeated, each value converted as its dtype stores
/// it.
Tensor values(DType dtype, llvm::ArrayRef<int64_t> shape,
              llvm::ArrayRef<double> v) {
  Tensor f(DType::F64, shape);
  for (int64_t i = 0; i < f.numElements(); ++i)
    f.as<double>()[i] = v[i % v.size()];
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double x = f.as<double>()[i];
    switch (dtype) {
    case DType::F64:
      t.as<double>()[i] = x;
      break;
    case DType::I64:
      t.as<int64_t>()[i] = static_cast<int64_t>(x);
      break;
    case DType::I32:
      t.as<int32_t>()[i] = static_cast<int32_t>(x);
      break;
    case DType::I8:
      t.as<int8_t>()[i] = static_cast<int8_t>(x);
      break;
    case DType::BOOL:
      t.as<uint8_t>()[i] = x != 0;
      break;
    default:
      t.as<float>()[i] = static_cast<float>(x);
      break;
    }
  }
  return t;
}

// The forms the ONNX importer writes for run-time masks (frontends/onnx/
// ops/Logic.cpp): compare on bool operands (Not, Xor), IsNaN as x != x and
// IsInf as |x| == inf on NaN and infinities, select of bool values (And, Or).
TEST_F(CudaKernel, ImportedMaskOps) {
  double inf = std::numeric_limits<double>::infinity();
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor special = values(F32, {3, 4}, {0, nan, inf, -inf, 1.5, -2, nan, 7});
  for (const char *pred : {"eq", "ne"})
    Case("dtc.compare")
        .s("predicate", pred)
        .in(randomTensor(BOOL, {5, 7}, -1, 1, 31))
        .in(randomTensor(BOOL, {7}, -1, 1, 32))
        .out(BOOL, {5, 7})
        .check(0, 0);
  Case("dtc.compare")
      .s("predicate", "ne")
      .in(special)
      .in(special)
      .out(BOOL, {3, 4})
      .check(0, 0);
  Case("dtc.compare")
      .s("predicate", "eq")
      .in(special)
      .in(values(F32, {}, {inf}))
      .out(BOOL, {3, 4})
      .check(0, 0);
  Case("dtc.select")
      .in(randomTensor(BOOL, {5, 7}, -1, 1, 33))
      .in(randomTensor(BOOL, {5, 7}, -1, 1, 34))
      .in(values(BOOL, {}, {0}))
      .out(BOOL, {5, 7})
      .check(0, 0);
}

// Mixed dtypes convert like castTensor: a float operand of an integer
// result saturates to the result's range (bool: nonzero), integers reach
// f64 exactly, and i64 rounds to f32 once.
TEST_F(CudaKernel, MixedDtypeConversions) {
  Case("dtc.add")
      .in(values(F32, {4}, {3e9, -3e9, 300.5, -2.5}))
      .in(values(I32, {4}, {0}))
      .out(I32, {4})
      .check(0, 0);
  Case("dtc.add")
      .in(values(F32, {4}, {300, -300, 1.5, -0.5}))
      .in(values(DType::I8, {4}, {0}))
      .out(DType::I8, {4})
      .check(0, 0);
  Case("dtc.mul")
      .in(values(F32, {4}, {0.5, 0.25, 2, 0}))
      .in(values(BOOL, {4}, {1}))
      .out(BOOL, {4})
      .check(0, 0);
  Case("dtc.add")
      .in(values(I32, {2}, {16777217, 2147483647}))
      .in(values(DType::F64, {2}, {0}))
      .out(DType::F64, {2})
      .check(0, 0);
  Tensor big(I64, {3});
  big.as<int64_t>()[0] = (int64_t(1) << 60) + (int64_t(1) << 36) + 1;
  big.as<int64_t>()[1] = 16777217;
  big.as<int64_t>()[2] = -big.as<int64_t>()[0];
  Case("dtc.cast").in(big).out(F32, {3}).check(0, 0);
  Case("dtc.cast").in(big).out(BF16, {3}).check(0, 0);
}

TEST_F(CudaKernel, ActivationGradients) {
  for (const char *op : {"dtc.gelu_grad", "dtc.silu_grad"}) {
    Case(op)
        .in(randomTensor(F32, {2048}, -6, 6, 23))
        .in(randomTensor(F32, {2048}, -1, 1, 24))
        .out(F32, {2048})
        .check(1e-6, 1e-5);
  }
  Case("dtc.gelu_grad")
      .flag("approximate_tanh")
      .in(randomTensor(F32, {2048}, -6, 6, 25))
      .in(randomTensor(F32, {2048}, -1, 1, 26))
      .out(F32, {2048})
      .check(1e-6, 1e-5);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST_F(CudaKernel, DataMovement) {
  Case("dtc.reshape")
      .in(randomTensor(F32, {6, 4}, -1, 1, 27))
      .out(F32, {2, 12})
      .check(0, 0);
  Case("dtc.transpose")
      .ints("permutation", {0, 2, 1, 3})
      .in(randomTensor(F32, {2, 5, 3, 7}, -1, 1, 28))
      .out(F32, {2, 3, 5, 7})
      .check(0, 0);
  Case("dtc.transpose")
      .ints("permutation", {2, 0, 1})
      .in(randomTensor(BF16, {4, 6, 3}, -1, 1, 29))
      .out(BF16, {3, 4, 6})
      .check(0, 0);
  Case("dtc.concat")
      .i("axis", 1)
      .in(randomTensor(F32, {3, 2, 5}, -1, 1, 30))
      .in(randomTensor(F32, {3, 4, 5}, -1, 1, 31))
      .out(F32, {3, 6, 5})
      .check(0, 0);
  Case("dtc.slice")
      .ints("starts", {1, 0, 2})
      .ints("limits", {4, 6, 9})
      .ints("strides", {1, 2, 3})
      .in(randomTensor(F32, {5, 6, 9}, -1, 1, 32))
      .out(F32, {3, 3, 3})
      .check(0, 0);
  Case("dtc.slice_grad")
      .ints("starts", {1, 0, 2})
      .ints("strides", {1, 2, 3})
      .in(randomTensor(F32, {3, 3, 3}, -1, 1, 33))
      .out(F32, {5, 6, 9})
      .check(0, 0);
}

/// A rank of a mesh that never communicates: enough for dtc.shard_slice,
/// which only asks for the group.
class MeshOnly final : public Communicator {
public:
  MeshOnly(Mesh mesh, int rank) : mesh_(std::move(mesh)), rank_(rank) {}
  int rank() const override { return rank_; }
  const Mesh &mesh() const override { return mesh_; }
  llvm::Expected<Request> allReduce(llvm::ArrayRef<std::string>,
                                    const TensorRef &, const TensorRef &,
                                    Reduction) override {
    return unsupported();
  }
  llvm::Expected<Request> allGather(llvm::ArrayRef<std::string>,
                                    const TensorRef &, const TensorRef &,
                                    int64_t, int64_t) override {
    return unsupported();
  }
  llvm::Expected<Request> reduceScatter(llvm::ArrayRef<std::string>,
                                        const TensorRef &, const TensorRef &,
                                        int64_t, int64_t, Reduction) override {
    return unsupported();
  }
  llvm::Expected<Request> allToAll(llvm::ArrayRef<std::string>,
                                   const TensorRef &, const TensorRef &,
                                   int64_t, int64_t) override {
    return unsupported();
  }
  llvm::Expected<Request> send(llvm::StringRef, int64_t,
                               const TensorRef &) override {
    return unsupported();
  }
  llvm::Expected<Request> recv(llvm::StringRef, int64_t,
                               const TensorRef &) override {
    return unsupported();
  }
  llvm::Error wait(Request) override { return unsupported(); }

private:
  static llvm::Error unsupported() {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "not a communicating test communicator");
  }
  Mesh mesh_;
  int rank_;
};

TEST_F(CudaKernel, ShardSliceTakesThisRanksPart) {
  auto mesh = Mesh::parse("dp:2,tp:4");
  ASSERT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  MeshOnly comm(*mesh, 6); // dp 1, tp 2: part 2 of 4 along tp
  ExecutionContext context;
  context.communicator = &comm;
  for (int64_t block : {0, 8}) {
    Case c("dtc.shard_slice");
    c.context = &context;
    c.i("dim", 1).i("block", block);
    (*c.inst.mutable_attrs())["mesh_axes"].mutable_strings()->add_values("tp");
    c.in(randomTensor(F32, {3, 16, 5}, -1, 1, 91)).out(F32, {3, 4, 5});
    c.check(0, 0);
  }
}

//===----------------------------------------------------------------------===//
// The vocabulary-parallel loss: each rank's shard of the logits, one
// exchange of row statistics (the all-gather is done here by hand).
//===----------------------------------------------------------------------===//

/// Columns [first, first + width) of the rows of `t` [rows..., v].
Tensor columns(const Tensor &t, int64_t first, int64_t width) {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  int64_t v = shape.back(), rows = t.numElements() / v;
  shape.back() = width;
  Tensor part(t.dtype(), shape);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(part.as<float>() + r * width, t.as<float>() + r * v + first,
                width * sizeof(float));
  return part;
}

/// Labels of `shape` in [0, vocab), every fifth one ignored (-100).
Tensor labelsWithIgnored(DType dtype, llvm::ArrayRef<int64_t> shape,
                         int64_t vocab, unsigned seed) {
  Tensor t = ids(dtype, shape, vocab, seed);
  for (int64_t i = 0; i < t.numElements(); i += 5) {
    if (dtype == DType::I64)
      t.as<int64_t>()[i] = -100;
    else
      t.as<int32_t>()[i] = -100;
  }
  return t;
}

struct LossShardCase {
  Mesh mesh;
  std::vector<std::unique_ptr<MeshOnly>> ranks;
  std::vector<ExecutionContext> contexts;

  explicit LossShardCase(int shards)
      : mesh(*Mesh::parse("tp:" + std::to_string(shards))), contexts(shards) {
    for (int r = 0; r < shards; ++r) {
      ranks.push_back(std::make_unique<MeshOnly>(mesh, r));
      contexts[r].communicator = ranks.back().get();
    }
  }
  Case op(const std::string &name, int rank) {
    Case c(name);
    c.context = &contexts[rank];
    (*c.inst.mutable_attrs())["mesh_axes"].mutable_strings()->add_values("tp");
    return c;
  }
};

TEST(VocabParallelLoss, ShardsComputeTheWholeLossAndGradient) {
  const int shards = 4;
  const int64_t width = 10, vocab = shards * width;
  LossShardCase mesh(shards);
  for (DType labelType : {I64, I32}) {
    // Logits far from 0, so that a missing max subtraction would overflow.
    Tensor logits = randomTensor(F32, {3, 5, vocab}, 60, 90, 301);
    Tensor labels = labelsWithIgnored(labelType, {3, 5}, vocab, 302);
    Tensor gradLoss(F32, {});
    gradLoss.as<float>()[0] = 0.7f;
    std::vector<Tensor> whole, wholeGrad;
    ASSERT_EQ(Case("dtc.cross_entropy")
                  .i("ignore_index", -100)
                  .in(logits)
                  .in(labels)
                  .out(F32, {})
                  .runCpu(whole),
              "");
    ASSERT_EQ(Case("dtc.cross_entropy_grad")
                  .i("ignore_index", -100)
                  .in(logits)
                  .in(labels)
                  .in(gradLoss)
                  .out(F32, {3, 5, vocab})
                  .runCpu(wholeGrad),
              "");
    // Each rank's statistics, then the all-gather along the last dim.
    Tensor gathered(F32, {3, 5, 3 * shards});
    for (int r = 0; r < shards; ++r) {
      std::vector<Tensor> stats;
      ASSERT_EQ(mesh.op("dtc.cross_entropy_stats", r)
                    .i("ignore_index", -100)
                    .in(columns(logits, r * width, width))
                    .in(labels)
                    .out(F32, {3, 5, 3})
                    .runCpu(stats),
                "");
      for (int64_t row = 0; row < 15; ++row)
        for (int k = 0; k < 3; ++k)
          gathered.as<float>()[row * 3 * shards + 3 * r + k] =
              stats[0].as<float>()[row * 3 + k];
    }
    std::vector<Tensor> loss;
    ASSERT_EQ(Case("dtc.cross_entropy_from_stats")
                  .i("ignore_index", -100)
                  .in(gathered)
                  .in(labels)
                  .out(F32, {})
                  .runCpu(loss),
              "");
    EXPECT_NEAR(loss[0].as<float>()[0], whole[0].as<float>()[0],
                1e-5 * std::abs(whole[0].as<float>()[0]));
    for (int r = 0; r < shards; ++r) {
      std::vector<Tensor> grad;
      ASSERT_EQ(mesh.op("dtc.cross_entropy_shard_grad", r)
                    .i("ignore_index", -100)
                    .in(columns(logits, r * width, width))
                    .in(labels)
                    .in(gathered)
                    .in(gradLoss)
                    .out(F32, {3, 5, width})
                    .runCpu(grad),
                "");
      Tensor expected = columns(wholeGrad[0], r * width, width);
      for (int64_t i = 0; i < expected.numElements(); ++i)
        EXPECT_NEAR(grad[0].as<float>()[i], expected.as<float>()[i], 1e-6)
            << "rank " << r << " element " << i;
    }
  }
  // A label past the whole vocabulary, and stats of another group size.
  Tensor logits = randomTensor(F32, {2, width}, -1, 1, 303);
  Tensor bad(I64, {2});
  bad.as<int64_t>()[0] = 3;
  bad.as<int64_t>()[1] = vocab;
  std::vector<Tensor> outs;
  EXPECT_NE(mesh.op("dtc.cross_entropy_stats", 1)
                .i("ignore_index", -100)
                .in(logits)
                .in(bad)
                .out(F32, {2, 3})
                .runCpu(outs)
                .find("label 40 at position 1 is out of range [0, 40)"),
            std::string::npos);
  Tensor fine = ids(I64, {2}, vocab, 304);
  EXPECT_NE(mesh.op("dtc.cross_entropy_shard_grad", 0)
                .i("ignore_index", -100)
                .in(logits)
                .in(fine)
                .in(randomTensor(F32, {2, 6}, -1, 1, 305))
                .in(randomTensor(F32, {}, -1, 1, 306))
                .out(F32, {2, width})
                .runCpu(outs)
                .find("stats must be f32 [2, 12]"),
            std::string::npos);
}

TEST_F(CudaKernel, VocabParallelLoss) {
  const int shards = 4;
  const int64_t width = 300, vocab = shards * width;
  LossShardCase mesh(shards);
  for (DType dtype : {F32, BF16}) {
    Tensor logits = randomTensor(dtype, {4, 7, width}, -4, 4, 311);
    Tensor labels = labelsWithIgnored(I64, {4, 7}, vocab, 312);
    Tensor stats = randomTensor(F32, {4, 7, 3 * shards}, 0.5, 2, 313);
    for (int r : {0, 2}) {
      mesh.op("dtc.cross_entropy_stats", r)
          .i("ignore_index", -100)
          .in(logits)
          .in(labels)
          .out(F32, {4, 7, 3})
          .check(1e-6, 1e-5);
      mesh.op("dtc.cross_entropy_shard_grad", r)
          .i("ignore_index", -100)
          .in(logits)
          .in(labels)
          .in(stats)
          .in(randomTensor(F32, {}, 0.5, 1, 314))
          .out(dtype, {4, 7, width})
          .check(1e-7, dtype == BF16 ? 8e-3 : 1e-5);
    }
    Case("dtc.cross_entropy_from_stats")
        .i("ignore_index", -100)
        .in(stats)
        .in(labels)
        .out(F32, {})
        .check(0, 1e-6);
  }
}

//===----------------------------------------------------------------------===//
// The vocabulary-parallel embedding: each rank holds a block of the table's
// rows; the lookups sum to the whole one, the gradients are its rows.
//===----------------------------------------------------------------------===//

/// Rows [first, first + count) of `t` [rows, d].
Tensor rowsOf(const Tensor &t, int64_t first, int64_t count) {
  int64_t d = t.shape()[1];
  Tensor part(t.dtype(), {count, d});
  size_t rowBytes = d * dtypeSize(t.dtype());
  std::memcpy(part.data(),
              static_cast<const char *>(t.data()) + first * rowBytes,
              count * rowBytes);
  return part;
}

TEST(VocabParallelEmbedding, ShardsSumToTheWholeLookupAndGradient) {
  const int shards = 4;
  const int64_t width = 6, vocab = shards * width, dim = 5;
  LossShardCase mesh(shards);
  for (DType idType : {I64, I32}) {
    Tensor table = randomTensor(F32, {vocab, dim}, -1, 1, 321);
    Tensor tokens = ids(idType, {3, 7}, vocab, 322);
    Tensor grad = randomTensor(F32, {3, 7, dim}, -1, 1, 323);
    std::vector<Tensor> whole, wholeGrad;
    ASSERT_EQ(Case("dtc.embedding")
                  .in(table)
                  .in(tokens)
                  .out(F32, {3, 7, dim})
                  .runCpu(whole),
              "");
    ASSERT_EQ(Case("dtc.embedding_grad")
                  .i("num_rows", vocab)
                  .in(grad)
                  .in(tokens)
                  .out(F32, {vocab, dim})
                  .runCpu(wholeGrad),
              "");
    std::vector<float> sum(whole[0].numElements(), 0.0f);
    for (int r = 0; r < shards; ++r) {
      std::vector<Tensor> lookup, shardGrad;
      ASSERT_EQ(mesh.op("dtc.embedding_shard", r)
                    .in(rowsOf(table, r * width, width))
                    .in(tokens)
                    .out(F32, {3, 7, dim})
                    .runCpu(lookup),
                "");
      // Exactly one shard holds each id: the others add exact zeros.
      for (size_t i = 0; i < sum.size(); ++i)
        sum[i] += lookup[0].as<float>()[i];
      ASSERT_EQ(mesh.op("dtc.embedding_shard_grad", r)
                    .i("num_rows", width)
                    .in(grad)
                    .in(tokens)
                    .out(F32, {width, dim})
                    .runCpu(shardGrad),
                "");
      Tensor expected = rowsOf(wholeGrad[0], r * width, width);
      for (int64_t i = 0; i < expected.numElements(); ++i)
        EXPECT_EQ(shardGrad[0].as<float>()[i], expected.as<float>()[i])
            << "rank " << r << " element " << i;
    }
    for (size_t i = 0; i < sum.size(); ++i)
      EXPECT_EQ(sum[i], whole[0].as<float>()[i]) << "element " << i;
  }
  // Ids are checked against the whole table, not the shard.
  Tensor bad(I64, {2});
  bad.as<int64_t>()[0] = 3;
  bad.as<int64_t>()[1] = vocab;
  std::vector<Tensor> outs;
  EXPECT_NE(mesh.op("dtc.embedding_shard", 2)
                .in(randomTensor(F32, {width, dim}, -1, 1, 324))
                .in(bad)
                .out(F32, {2, dim})
                .runCpu(outs)
                .find("id 24 at position 1 is out of range [0, 24)"),
            std::string::npos);
  EXPECT_NE(mesh.op("dtc.embedding_shard_grad", 0)
                .i("num_rows", width)
                .in(randomTensor(F32, {2, dim}, -1, 1, 325))
                .in(bad)
                .out(F32, {width, dim})
                .runCpu(outs)
                .find("id 24 at position 1 is out of range [0, 24)"),
            std::string::npos);
}

TEST_F(CudaKernel, VocabParallelEmbedding) {
  const int shards = 4;
  const int64_t width = 40, vocab = shards * width;
  LossShardCase mesh(shards);
  for (DType dtype : {F32, BF16})
    for (int r : {0, 2}) {
      mesh.op("dtc.embedding_shard", r)
          .in(randomTensor(dtype, {width, 24}, -1, 1, 331))
          .in(ids(I64, {4, 16}, vocab, 332))
          .out(dtype, {4, 16, 24})
          .check(0, 0);
      // Few rows, many ids: rows of the shard add several gradient rows.
      mesh.op("dtc.embedding_shard_grad", r)
          .i("num_rows", 3)
          .in(randomTensor(F32, {4, 16, 24}, -1, 1, 333))
          .in(ids(I32, {4, 16}, 3 * shards, 334))
          .out(dtype, {3, 24})
          .check(1e-6, dtype == BF16 ? 8e-3 : 1e-5);
    }
}

TEST_F(CudaKernel, EmbeddingAndGradient) {
  for (DType idType : {I64, I32}) {
    Case("dtc.embedding")
        .in(randomTensor(F32, {50, 24}, -1, 1, 34))
        .in(ids(idType, {4, 16}, 50, 35))
        .out(F32, {4, 16, 24})
        .check(0, 0);
    // Repeated ids add up (in another order than the CPU's).
    Case("dtc.embedding_grad")
        .i("num_rows", 10)
        .in(randomTensor(F32, {4, 16, 24}, -1, 1, 36))
        .in(ids(idType, {4, 16}, 10, 37))
        .out(F32, {10, 24})
        .check(1e-6, 1e-5);
  }
}

/// `shape` indices in [-limit, limit): negative ones count from the end.
Tensor signedIds(DType dtype, llvm::ArrayRef<int64_t> shape, int64_t limit,
                 unsigned seed) {
  Tensor t = ids(dtype, shape, 2 * limit, seed);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (dtype == DType::I64)
      t.as<int64_t>()[i] -= limit;
    else
      t.as<int32_t>()[i] -= static_cast<int32_t>(limit);
  }
  return t;
}

TEST_F(CudaKernel, GatherElementsAndGradient) {
  for (DType idType : {I64, I32}) {
    // Along the middle axis of [3, 7, 5]: 4 indices per line, some negative.
    Case("dtc.gather_elements")
        .i("axis", 1)
        .in(randomTensor(F32, {3, 7, 5}, -1, 1, 60))
        .in(signedIds(idType, {3, 4, 5}, 7, 61))
        .out(F32, {3, 4, 5})
        .check(0, 0);
    Case("dtc.gather_elements")
        .i("axis", 0)
        .in(ids(I64, {6, 3}, 100, 62))
        .in(signedIds(idType, {9, 3}, 6, 63))
        .out(I64, {9, 3})
        .check(0, 0);
    // Repeated indices add up (in another order than the CPU's).
    Case("dtc.gather_elements_grad")
        .i("axis", 1)
        .i("dim_size", 7)
        .in(randomTensor(F32, {3, 12, 5}, -1, 1, 64))
        .in(signedIds(idType, {3, 12, 5}, 7, 65))
        .out(F32, {3, 7, 5})
        .check(1e-6, 1e-5);
  }
}

TEST_F(CudaKernel, CumSum) {
  for (bool exclusive : {false, true})
    for (bool reverse : {false, true}) {
      Case f("dtc.cumsum");
      f.i("axis", 1);
      if (exclusive)
        f.flag("exclusive");
      if (reverse)
        f.flag("reverse");
      f.in(randomTensor(F32, {3, 40, 6}, -1, 1, 66))
          .out(F32, {3, 40, 6})
          .check(1e-6, 1e-5);
      Case n("dtc.cumsum");
      n.i("axis", 0);
      if (exclusive)
        n.flag("exclusive");
      if (reverse)
        n.flag("reverse");
      n.in(ids(I64, {9, 4}, 2, 67)).out(I64, {9, 4}).check(0, 0);
    }
}

TEST_F(CudaKernel, SelectiveScanAndGradient) {
  // 2 x 6 lines of 33 positions, state 5; decays in (0, 1).
  Tensor a = randomTensor(F32, {2, 6, 33, 5}, 0.5, 1, 68),
         x = randomTensor(F32, {2, 6, 33, 5}, -1, 1, 69),
         c = randomTensor(F32, {2, 33, 5}, -1, 1, 70);
  Case("dtc.selective_scan")
      .in(a)
      .in(x)
      .in(c)
      .out(F32, {2, 6, 33})
      .check(1e-5, 1e-4);
  Case("dtc.selective_scan_grad")
      .in(a)
      .in(x)
      .in(c)
      .in(randomTensor(F32, {2, 6, 33}, -1, 1, 71))
      .out(F32, {2, 6, 33, 5})
      .out(F32, {2, 6, 33, 5})
      .out(F32, {2, 33, 5})
      .check(1e-5, 1e-4);
}

TEST_F(CudaKernel, EmbeddingIdOutOfRangeIsReported) {
  Tensor bad(I64, {2});
  bad.as<int64_t>()[0] = 1;
  bad.as<int64_t>()[1] = 7;
  Case c("dtc.embedding");
  c.in(randomTensor(F32, {5, 4}, -1, 1, 38)).in(bad).out(F32, {2, 4});
  std::vector<Tensor> outs;
  EXPECT_NE(c.runCuda(outs).find("out of range"), std::string::npos);
  // The error word is reset: the next call succeeds.
  bad.as<int64_t>()[1] = 4;
  std::vector<Tensor> again;
  Case ok("dtc.embedding");
  ok.in(randomTensor(F32, {5, 4}, -1, 1, 38)).in(bad).out(F32, {2, 4});
  EXPECT_EQ(ok.runCuda(again), "");
}

//===----------------------------------------------------------------------===//
// Reductions, norms, losses
//===----------------------------------------------------------------------===//

TEST_F(CudaKernel, Reductions) {
  for (const char *op :
       {"dtc.reduce_sum", "dtc.reduce_mean", "dtc.reduce_max"}) {
    SCOPED_TRACE(op);
    Case(op)
        .ints("dims", {-1})
        .in(randomTensor(F32, {7, 300}, -1, 1, 39))
        .out(F32, {7})
        .check(1e-6, 1e-5);
    Case(op)
        .ints("dims", {1})
        .in(randomTensor(F32, {3, 50, 17}, -1, 1, 40))
        .out(F32, {3, 17})
        .check(1e-6, 1e-5);
    // Two reduced groups that are not adjacent.
    Case(op)
        .ints("dims", {0, 2})
        .in(randomTensor(F32, {4, 6, 5, 3}, -1, 1, 41))
        .out(F32, {6, 3})
        .check(1e-6, 1e-5);
    // Long reductions take the two-pass path. The CPU adds in one f32
    // chain: its own rounding error (about sqrt(n) half-ulps of the sum,
    // 3e-5 relative for 2^20 values in [0, 1)) sets the tolerance.
    Case(op)
        .ints("dims", {0, 1})
        .in(randomTensor(F32, {1024, 1024}, 0, 1, 42))
        .out(F32, {})
        .check(0, 3e-4);
    Case(op)
        .ints("dims", {0})
        .in(randomTensor(F32, {8192, 96}, -1, 1, 43))
        .out(F32, {96})
        .check(2e-3, 1e-4);
    Case(op)
        .ints("dims", {1})
        .in(randomTensor(I64, {5, 9}, -100, 100, 44))
        .out(I64, {5})
        .check(0, 0);
  }
}

TEST_F(CudaKernel, SoftmaxAndGradient) {
  Case("dtc.softmax")
      .i("axis", -1)
      .in(randomTensor(F32, {9, 1000}, -10, 10, 45))
      .out(F32, {9, 1000})
      .check(1e-7, 1e-5);
  Case("dtc.softmax")
      .i("axis", 1)
      .in(randomTensor(F32, {3, 40, 7}, -10, 10, 46))
      .out(F32, {3, 40, 7})
      .check(1e-7, 1e-5);
  Case("dtc.softmax_grad")
      .i("axis", -1)
      .in(randomTensor(F32, {9, 300}, 0, 0.01f, 47))
      .in(randomTensor(F32, {9, 300}, -1, 1, 48))
      .out(F32, {9, 300})
      .check(1e-7, 1e-5);
  Case("dtc.softmax_grad")
      .i("axis", 0)
      .in(randomTensor(F32, {30, 4}, 0, 0.1f, 49))
      .in(randomTensor(F32, {30, 4}, -1, 1, 50))
      .out(F32, {30, 4})
      .check(1e-7, 1e-5);
}

TEST_F(CudaKernel, NormsAndGradients) {
  Case("dtc.layer_norm")
      .i("axis", -1)
      .f("epsilon", 1e-5)
      .in(randomTensor(F32, {2, 150, 768}, -2, 3, 51))
      .in(randomTensor(F32, {768}, 0.5f, 1.5f, 52))
      .in(randomTensor(F32, {768}, -1, 1, 53))
      .out(F32, {2, 150, 768})
      .check(1e-5, 1e-4);
  Case("dtc.rms_norm")
      .i("axis", -1)
      .f("epsilon", 1e-6)
      .in(randomTensor(F32, {33, 200}, -2, 3, 54))
      .in(randomTensor(F32, {200}, 0.5f, 1.5f, 55))
      .out(F32, {33, 200})
      .check(1e-5, 1e-4);
  // More rows than one chunk of the weight-gradient partials.
  Case("dtc.layer_norm_grad")
      .i("axis", -1)
      .f("epsilon", 1e-5)
      .in(randomTensor(F32, {300, 96}, -2, 3, 56))
      .in(randomTensor(F32, {96}, 0.5f, 1.5f, 57))
      .in(randomTensor(F32, {300, 96}, -1, 1, 58))
      .out(F32, {300, 96})
      .out(F32, {96})
      .out(F32, {96})
      .check(1e-4, 1e-4);
  Case("dtc.rms_norm_grad")
      .i("axis", -1)
      .f("epsilon", 1e-5)
      .in(randomTensor(F32, {130, 64}, -2, 3, 59))
      .in(randomTensor(F32, {64}, 0.5f, 1.5f, 60))
      .in(randomTensor(F32, {130, 64}, -1, 1, 61))
      .out(F32, {130, 64})
      .out(F32, {64})
      .check(1e-4, 1e-4);
}

TEST_F(CudaKernel, CrossEntropyAndGradient) {
  Tensor labels = ids(I64, {4, 33}, 500, 62);
  labels.as<int64_t>()[3] = -100; // ignored
  labels.as<int64_t>()[40] = -100;
  Tensor logits = randomTensor(F32, {4, 33, 500}, -8, 8, 63);
  Case("dtc.cross_entropy")
      .i("ignore_index", -100)
      .in(logits)
      .in(labels)
      .out(F32, {})
      .check(1e-6, 1e-5);
  Tensor gradLoss(F32, {});
  gradLoss.as<float>()[0] = 0.75f;
  Case("dtc.cross_entropy_grad")
      .i("ignore_index", -100)
      .in(logits)
      .in(labels)
      .in(gradLoss)
      .out(F32, {4, 33, 500})
      .check(1e-8, 1e-5);
  // Every label ignored: NaN loss, zero gradient.
  Tensor ignored(I32, {2});
  ignored.as<int32_t>()[0] = ignored.as<int32_t>()[1] = 7;
  Case("dtc.cross_entropy")
      .i("ignore_index", 7)
      .in(randomTensor(F32, {2, 10}, -1, 1, 64))
      .in(ignored)
      .out(F32, {})
      .check(0, 0);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

struct AttentionConfig {
  int64_t b, h, g, s, t, d, e;
  bool causal;
  DType dtype;
};

/// A readable parameter in test names (not the struct's bytes, padding
/// included).
void PrintTo(const AttentionConfig &c, std::ostream *os) {
  *os << "b" << c.b << " h" << c.h << " g" << c.g << " s" << c.s << " t" << c.t
      << " d" << c.d << " e" << c.e << (c.causal ? " causal " : " full ")
      << dtypeName(c.dtype).str();
}

class CudaAttention : public CudaKernel,
                      public ::testing::WithParamInterface<AttentionConfig> {};

TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  AttentionConfig c = GetParam();
  Tensor q = randomTensor(c.dtype, {c.b, c.h, c.s, c.d}, -1, 1, 65);
  Tensor k = randomTensor(c.dtype, {c.b, c.g, c.t, c.d}, -1, 1, 66);
  Tensor v = randomTensor(c.dtype, {c.b, c.g, c.t, c.e}, -1, 1, 67);
  Tensor dy = randomTensor(c.dtype, {c.b, c.h, c.s, c.e}, -1, 1, 68);
  double rtol = c.dtype == BF16 ? 1.0 / 64 : 1e-4;
  double atol = c.dtype == BF16 ? 1e-2 : 1e-5;
  // The program always states the scale (the lowering writes 1/sqrt(d)).
  double scale = 1 / std::sqrt(double(c.d));
  Case forward("dtc.attention");
  forward.f("scale", scale)
      .in(q)
      .in(k)
      .in(v)
      .out(c.dtype, {c.b, c.h, c.s, c.e});
  if (c.causal)
    forward.flag("causal");
  forward.check(atol, rtol);
  Case backward("dtc.attention_grad");
  backward.f("scale", scale).in(q).in(k).in(v).in(dy);
  backward.out(c.dtype, {c.b, c.h, c.s, c.d})
      .out(c.dtype, {c.b, c.g, c.t, c.d})
      .out(c.dtype, {c.b, c.g, c.t, c.e});
  if (c.causal)
    backward.flag("causal");
  backward.check(atol, rtol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Values(
        AttentionConfig{2, 4, 4, 100, 100, 64, 64, true, F32},
        AttentionConfig{1, 2, 2, 70, 130, 32, 32, false, F32},
        AttentionConfig{1, 4, 2, 65, 65, 64, 48, true, F32},   // grouped
        AttentionConfig{1, 2, 1, 40, 40, 128, 128, true, F32}, // wide heads
        AttentionConfig{1, 3, 3, 30, 50, 16, 16, true, F32},   // t > s
        AttentionConfig{2, 2, 2, 64, 64, 64, 64, true, BF16},
        // More (batch, head) pairs than a grid's y dimension holds.
        AttentionConfig{1100, 60, 60, 5, 5, 16, 16, true, F32}),
    [](const ::testing::TestParamInfo<AttentionConfig> &info) {
      const AttentionConfig &c = info.param;
      return "b" + std::to_string(c.b) + "h" + std::to_string(c.h) + "g" +
             std::to_string(c.g) + "s" + std::to_string(c.s) + "t" +
             std::to_string(c.t) + "d" + std::to_string(c.d) + "e" +
             std::to_string(c.e) + (c.causal ? "causal" : "full") +
             dtypeName(c.dtype).str();
    });

TEST_F(CudaKernel, AttentionScaleAttribute) {
  Case("dtc.attention")
      .f("scale", 0.3)
      .in(randomTensor(F32, {1, 2, 20, 8}, -1, 1, 69))
      .in(randomTensor(F32, {1, 2, 20, 8}, -1, 1, 70))
      .in(randomTensor(F32, {1, 2, 20, 8}, -1, 1, 71))
      .out(F32, {1, 2, 20, 8})
      .check(1e-6, 1e-4);
}

//===----------------------------------------------------------------------===//
// Ring attention
//===----------------------------------------------------------------------===//

struct RingConfig {
  int64_t b, h, g, s, t, d, e;
  bool causal, zigzag;
  DType dtype;
};

/// A ring op over mesh axis "cp" holding the key chunk `shift` hops back.
Case ringCase(const std::string &op, const RingConfig &c, int64_t shift) {
  Case k(op);
  (*k.inst.mutable_attrs())["mesh_axes"].mutable_strings()->add_values("cp");
  k.i("kv_shift", shift);
  k.f("scale", 1 / std::sqrt(double(c.d)));
  if (c.causal)
    k.flag("causal");
  if (c.zigzag)
    k.flag("zigzag");
  return k;
}

/// dtc.attention_block and dtc.attention_block_grad against the CPU kernels
/// (`context` null: one chunk). The gradient takes the block's own output
/// and lse (from the CPU) as the merged ones, with `noKeyRows` rows of lse
/// set to -inf (rows that see no key at all).
void checkRingBlock(const RingConfig &c, int64_t shift,
                    ExecutionContext *context, unsigned seed,
                    int64_t noKeyRows = 0) {
  Tensor q = randomTensor(c.dtype, {c.b, c.h, c.s, c.d}, -1, 1, seed);
  Tensor k = randomTensor(c.dtype, {c.b, c.g, c.t, c.d}, -1, 1, seed + 1);
  Tensor v = randomTensor(c.dtype, {c.b, c.g, c.t, c.e}, -1, 1, seed + 2);
  Tensor dy = randomTensor(c.dtype, {c.b, c.h, c.s, c.e}, -1, 1, seed + 3);
  double rtol = c.dtype == BF16 ? 1.0 / 64 : 1e-4;
  double atol = c.dtype == BF16 ? 1e-2 : 1e-5;
  Case forward = ringCase("dtc.attention_block", c, shift);
  forward.context = context;
  forward.in(q).in(k).in(v);
  forward.out(c.dtype, {c.b, c.h, c.s, c.e}).out(F32, {c.b, c.h, c.s});
  forward.check(atol, rtol);
  std::vector<Tensor> merged;
  ASSERT_EQ(forward.runCpu(merged), "");
  Tensor &lse = merged[1];
  for (int64_t i = 0; i < noKeyRows; ++i)
    lse.as<float>()[i * 7 % lse.numElements()] =
        -std::numeric_limits<float>::infinity();
  Case backward = ringCase("dtc.attention_block_grad", c, shift);
  backward.context = context;
  backward.in(q).in(k).in(v).in(merged[0]).in(lse).in(dy);
  backward.out(c.dtype, {c.b, c.h, c.s, c.d})
      .out(c.dtype, {c.b, c.g, c.t, c.d})
      .out(c.dtype, {c.b, c.g, c.t, c.e});
  backward.check(atol, rtol);
}

void PrintTo(const RingConfig &c, std::ostream *os) {
  *os << "b" << c.b << " h" << c.h << " g" << c.g << " s" << c.s << " t" << c.t
      << " d" << c.d << " e" << c.e << (c.causal ? " causal" : " full")
      << (c.zigzag ? " zigzag " : " ") << dtypeName(c.dtype).str();
}

class CudaRingAttention : public CudaKernel,
                          public ::testing::WithParamInterface<RingConfig> {};

TEST_P(CudaRingAttention, OneChunkMatchesCpu) {
  checkRingBlock(GetParam(), 0, nullptr, 101, /*noKeyRows=*/3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaRingAttention,
    ::testing::Values(
        RingConfig{2, 4, 4, 100, 100, 64, 64, true, false, F32},
        RingConfig{1, 4, 2, 70, 130, 32, 48, true, false, F32}, // grouped
        RingConfig{1, 4, 2, 66, 66, 64, 64, false, false, F32},
        RingConfig{1, 6, 2, 80, 80, 32, 32, true, true, F32}, // zigzag of one
        RingConfig{1, 2, 1, 40, 40, 128, 128, true, false, F32}, // wide heads
        RingConfig{2, 2, 2, 64, 64, 64, 64, true, true, BF16}),
    [](const ::testing::TestParamInfo<RingConfig> &info) {
      const RingConfig &c = info.param;
      return "b" + std::to_string(c.b) + "h" + std::to_string(c.h) + "g" +
             std::to_string(c.g) + "s" + std::to_string(c.s) + "t" +
             std::to_string(c.t) + "d" + std::to_string(c.d) + "e" +
             std::to_string(c.e) + (c.causal ? "causal" : "full") +
             (c.zigzag ? "zigzag" : "") + dtypeName(c.dtype).str();
    });

TEST_F(CudaKernel, RingAttentionChunkPositionsFromTheGroup) {
  // Every (rank, kv_shift) of a 4-rank cp ring, contiguous and zigzag: the
  // blocks above, below and on the diagonal (causal), halves straddling
  // tiles.
  auto mesh = Mesh::parse("dp:2,cp:4");
  ASSERT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  for (bool zigzag : {false, true})
    for (int rank = 4; rank < 8; ++rank) // dp 1, cp 0..3
      for (int64_t shift = 0; shift < 4; ++shift) {
        SCOPED_TRACE("zigzag " + std::to_string(zigzag) + " rank " +
                     std::to_string(rank) + " kv_shift " +
                     std::to_string(shift));
        MeshOnly comm(*mesh, rank);
        ExecutionContext context;
        context.communicator = &comm;
        checkRingBlock({1, 4, 2, 140, 140, 32, 48, true, zigzag, F32}, shift,
                       &context, 111);
      }
}

TEST_F(CudaKernel, AttentionMerge) {
  float inf = std::numeric_limits<float>::infinity();
  Tensor lseA = randomTensor(F32, {2, 3, 50}, -2, 2, 120);
  Tensor lseB = randomTensor(F32, {2, 3, 50}, -2, 2, 121);
  // Both blocks empty, one empty, a far larger one.
  lseA.as<float>()[0] = lseB.as<float>()[0] = -inf;
  lseA.as<float>()[1] = -inf;
  lseB.as<float>()[2] = -inf;
  lseA.as<float>()[3] = 40;
  for (DType dtype : {F32, BF16}) {
    Case("dtc.attention_merge")
        .in(randomTensor(dtype, {2, 3, 50, 40}, -1, 1, 122))
        .in(lseA)
        .in(randomTensor(dtype, {2, 3, 50, 40}, -1, 1, 123))
        .in(lseB)
        .out(dtype, {2, 3, 50, 40})
        .out(F32, {2, 3, 50})
        .check(1e-6, dtype == BF16 ? 1.0 / 128 : 1e-5);
  }
}

TEST_F(CudaKernel, ZigzagOrder) {
  struct Shape {
    DType dtype;
    std::vector<int64_t> shape;
    int64_t dim, parts;
  } shapes[] = {
      {F32, {2, 12, 3}, 1, 3}, {BF16, {16, 5}, 0, 4},
      {I64, {3, 4, 8}, 2, 2},  {BOOL, {5, 8}, 1, 2}, // 2-byte pieces
      {I32, {2, 6, 1}, 1, 1}, // one rank: halves swap nothing
  };
  for (const Shape &s : shapes)
    for (bool inverse : {false, true}) {
      Case c("dtc.zigzag_order");
      c.i("dim", s.dim).i("parts", s.parts);
      if (inverse)
        c.flag("inverse");
      c.in(randomTensor(s.dtype, s.shape, -50, 50, 130))
          .out(s.dtype, s.shape)
          .check(0, 0);
    }
}

TEST(CudaKernelRegistry, RingAttentionRefusalsMatchTheCpuKernels) {
  // The adapters refuse these before any device work: host memory will do.
  RingConfig odd{1, 2, 2, 6, 7, 8, 8, true, true, F32};
  Case zigzagOdd = ringCase("dtc.attention_block", odd, 0);
  zigzagOdd.in(randomTensor(F32, {1, 2, 6, 8}, -1, 1, 140))
      .in(randomTensor(F32, {1, 2, 7, 8}, -1, 1, 141))
      .in(randomTensor(F32, {1, 2, 7, 8}, -1, 1, 142))
      .out(F32, {1, 2, 6, 8})
      .out(F32, {1, 2, 6});
  RingConfig even = odd;
  even.t = 6;
  even.zigzag = false;
  Case shifted = ringCase("dtc.attention_block", even, 1);
  shifted.in(randomTensor(F32, {1, 2, 6, 8}, -1, 1, 143))
      .in(randomTensor(F32, {1, 2, 6, 8}, -1, 1, 144))
      .in(randomTensor(F32, {1, 2, 6, 8}, -1, 1, 145))
      .out(F32, {1, 2, 6, 8})
      .out(F32, {1, 2, 6});
  Case badParts("dtc.zigzag_order");
  badParts.i("dim", 1).i("parts", 4);
  badParts.in(randomTensor(F32, {2, 12}, -1, 1, 146)).out(F32, {2, 12});
  for (const Case *c : {&zigzagOdd, &shifted, &badParts}) {
    std::vector<Tensor> cpuOut, cudaOut;
    std::string cpu = c->runOnHost(cpuKernels(), cpuOut);
    EXPECT_NE(cpu, "") << c->inst.op();
    EXPECT_EQ(c->runOnHost(cudaKernels(), cudaOut), cpu) << c->inst.op();
  }
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

struct MoeConfig {
  int64_t batch, seq, experts, topK, capacity;
  bool sigmoid, normalize;
  DType dtype;
};

void PrintTo(const MoeConfig &c, std::ostream *os) {
  *os << "b" << c.batch << " s" << c.seq << " E" << c.experts << " k" << c.topK
      << " C" << c.capacity << (c.sigmoid ? " sigmoid" : "")
      << (c.normalize ? " normalize" : "") << " " << dtypeName(c.dtype).str();
}

Case moeRouteCase(const std::string &op, const MoeConfig &c) {
  Case r(op);
  r.i("top_k", c.topK).i("capacity", c.capacity);
  if (c.sigmoid)
    r.s("score", "sigmoid");
  if (c.normalize)
    r.flag("normalize");
  return r;
}

/// Router logits; `ties` rounds them to a few values so that scores tie.
Tensor routerLogits(const MoeConfig &c, unsigned seed, bool ties = false) {
  Tensor t = randomTensor(F32, {c.batch, c.seq, c.experts}, -3, 3, seed);
  if (ties)
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.as<float>()[i] = std::floor(t.as<float>()[i]);
  if (c.dtype == F32)
    return t;
  Tensor cast(c.dtype, t.shape());
  for (int64_t i = 0; i < t.numElements(); ++i)
    cast.as<uint16_t>()[i] = floatToBF16(t.as<float>()[i]);
  return cast;
}

class CudaMoe : public ::testing::TestWithParam<MoeConfig> {
protected:
  void SetUp() override {
    if (!haveDevice())
      GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaMoe, RouteAndGradientMatchCpu) {
  const MoeConfig &c = GetParam();
  double rtol = c.dtype == BF16 ? 1.0 / 128 : 1e-5;
  for (bool ties : {false, true}) {
    SCOPED_TRACE(ties ? "tied scores" : "random scores");
    Tensor logits = routerLogits(c, 150, ties);
    // Gates, slots (exact: the same choices and drops) and the aux loss.
    moeRouteCase("dtc.moe_route", c)
        .in(logits)
        .out(c.dtype, {c.batch, c.seq, c.experts})
        .out(I64, {c.batch, c.experts, c.capacity})
        .out(F32, {c.batch})
        .check(1e-6, rtol);
    moeRouteCase("dtc.moe_route_grad", c)
        .in(logits)
        .in(randomTensor(c.dtype, {c.batch, c.seq, c.experts}, -1, 1, 151))
        .in(randomTensor(F32, {c.batch}, -1, 1, 152))
        .out(c.dtype, {c.batch, c.seq, c.experts})
        .check(1e-6, rtol);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, CudaMoe,
    ::testing::Values(
        // Capacity 10 of ~18 choices per expert: drops.
        MoeConfig{2, 37, 4, 2, 10, false, true, F32},
        // Top-1, dropless, not normalized; 130 tokens: a partial tile.
        MoeConfig{3, 130, 8, 1, 130, false, false, F32},
        // Several tiles of choices, sigmoid scores.
        MoeConfig{1, 300, 6, 2, 50, true, true, F32},
        MoeConfig{2, 40, 5, 2, 40, true, false, F32},
        // More experts than the slot kernel's threads; top-3, capacity 2.
        MoeConfig{2, 33, 300, 3, 2, false, true, F32},
        MoeConfig{2, 20, 4, 2, 6, false, true, BF16}));

TEST_F(CudaKernel, MoeRouteCollectsRoutingFigures) {
  MoeConfig c{3, 37, 4, 2, 10, false, true, F32};
  Case route = moeRouteCase("dtc.moe_route", c);
  route.i("layer", 1)
      .in(routerLogits(c, 153))
      .out(F32, {c.batch, c.seq, c.experts})
      .out(I64, {c.batch, c.experts, c.capacity})
      .out(F32, {c.batch});
  MoeRoutingStats cpuStats, cudaStats;
  ExecutionContext cpuContext, cudaContext;
  cpuContext.moeRouting = &cpuStats;
  cudaContext.moeRouting = &cudaStats;
  std::vector<Tensor> cpuOut, cudaOut;
  route.context = &cpuContext;
  ASSERT_EQ(route.runCpu(cpuOut), "");
  route.context = &cudaContext;
  ASSERT_EQ(route.runCuda(cudaOut), "");
  ASSERT_EQ(cudaStats.layers.size(), 1u);
  const MoeRoutingStats::Layer &a = cpuStats.layers[1],
                               &b = cudaStats.layers[1];
  EXPECT_EQ(a.expertChoices, b.expertChoices);
  EXPECT_GT(a.dropped, 0);
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.sequences, b.sequences);
  EXPECT_NEAR(a.auxSum, b.auxSum, 1e-5 * std::fabs(a.auxSum));
  // A recomputed route does not count.
  route.flag("recomputed");
  std::vector<Tensor> again;
  ASSERT_EQ(route.runCuda(again), "");
  EXPECT_EQ(cudaStats.layers[1].sequences, 3);
}

// NaN scores (every third logit NaN: under softmax whole tokens, under
// sigmoid single experts) pick the same experts on both backends, and
// sequences of no tokens have an aux loss of 0 on both.
TEST_F(CudaKernel, MoeRouteNanScoresAndEmptySequencesMatchCpu) {
  MoeConfig configs[] = {{2, 9, 5, 2, 4, false, true, F32},
                         {2, 9, 5, 2, 4, true, false, F32},
                         {2, 0, 4, 2, 1, false, true, F32}};
  for (const MoeConfig &c : configs) {
    SCOPED_TRACE(::testing::PrintToString(c));
    Tensor logits = routerLogits(c, 157);
    for (int64_t i = 0; i < logits.numElements(); i += 3)
      logits.as<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    Case route = moeRouteCase("dtc.moe_route", c);
    route.in(logits)
        .out(F32, {c.batch, c.seq, c.experts})
        .out(I64, {c.batch, c.experts, c.capacity})
        .out(F32, {c.batch});
    route.check(1e-6, 1e-5);
    std::vector<Tensor> out;
    ASSERT_EQ(route.runCuda(out), "");
    if (c.seq == 0) {
      for (int64_t b = 0; b < c.batch; ++b)
        EXPECT_EQ(out[2].as<float>()[b], 0.0f);
    }
  }
}

/// Slots of random positions in [-1, seq): empty slots and tokens that
/// appear several times, in one expert or several.
Tensor randomSlots(DType dtype, llvm::ArrayRef<int64_t> shape, int64_t seq,
                   unsigned seed) {
  Tensor t = ids(dtype, shape, seq + 1, seed);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (dtype == I64)
      t.as<int64_t>()[i] -= 1;
    else
      t.as<int32_t>()[i] -= 1;
  }
  return t;
}

/// A route's slots, from the CPU kernel.
Tensor routedSlots(const MoeConfig &c, unsigned seed) {
  std::vector<Tensor> outs;
  Case route = moeRouteCase("dtc.moe_route", c);
  route.in(routerLogits(c, seed))
      .out(F32, {c.batch, c.seq, c.experts})
      .out(I64, {c.batch, c.experts, c.capacity})
      .out(F32, {c.batch});
  EXPECT_EQ(route.runCpu(outs), "");
  return std::move(outs[1]);
}

TEST_F(CudaKernel, MoeDispatchAndCombine) {
  struct Slots {
    const char *what;
    Tensor slots;
    int64_t seq;
  };
  MoeConfig routed{2, 45, 4, 2, 16, false, true, F32};
  Slots cases[] = {
      {"routed, with drops", routedSlots(routed, 154), routed.seq},
      {"random i64", randomSlots(I64, {2, 3, 5}, 13, 155), 13},
      {"random i32", randomSlots(I32, {3, 2, 7}, 4, 156), 4},
  };
  for (const Slots &s : cases) {
    SCOPED_TRACE(s.what);
    int64_t b = s.slots.shape()[0], e = s.slots.shape()[1],
            cap = s.slots.shape()[2];
    for (int64_t h : {24, 37}) {
      for (DType dtype : {F32, BF16}) {
        double rtol = dtype == BF16 ? 1.0 / 128 : 1e-5;
        SCOPED_TRACE(dtypeName(dtype).str() + " h" + std::to_string(h));
        Tensor x = randomTensor(dtype, {b, s.seq, h}, -1, 1, 157);
        Tensor rows = randomTensor(dtype, {b, e, cap, h}, -1, 1, 158);
        Tensor gates = randomTensor(dtype, {b, s.seq, e}, 0, 1, 159);
        Tensor dy = randomTensor(dtype, {b, s.seq, h}, -1, 1, 160);
        Case("dtc.moe_dispatch")
            .in(x)
            .in(s.slots)
            .out(dtype, {b, e, cap, h})
            .check(0, 0);
        // Unweighted sums of a token's rows in the CPU's (expert, slot)
        // order: exact.
        Case("dtc.moe_dispatch_grad")
            .i("seq_len", s.seq)
            .in(rows)
            .in(s.slots)
            .out(dtype, {b, s.seq, h})
            .check(0, 0);
        Case("dtc.moe_combine")
            .in(rows)
            .in(s.slots)
            .in(gates)
            .out(dtype, {b, s.seq, h})
            .check(1e-6, rtol);
        // The gates' gradient is a dot product over h, summed in another
        // order.
        Case("dtc.moe_combine_grad")
            .in(rows)
            .in(s.slots)
            .in(gates)
            .in(dy)
            .out(dtype, {b, e, cap, h})
            .out(F32, {b, s.seq, e})
            .check(1e-5, 1e-5);
      }
    }
  }
}

TEST_F(CudaKernel, MoeSlotOutOfRangeIsReported) {
  for (int64_t bad : {-2, 6}) {
    Tensor slots = randomSlots(I64, {1, 2, 3}, 6, 161);
    slots.as<int64_t>()[4] = bad;
    Tensor rows = randomTensor(F32, {1, 2, 3, 8}, -1, 1, 162);
    Tensor gates = randomTensor(F32, {1, 6, 2}, 0, 1, 163);
    Case dispatch("dtc.moe_dispatch");
    dispatch.in(randomTensor(F32, {1, 6, 8}, -1, 1, 164))
        .in(slots)
        .out(F32, {1, 2, 3, 8});
    Case dispatchGrad("dtc.moe_dispatch_grad");
    dispatchGrad.i("seq_len", 6).in(rows).in(slots).out(F32, {1, 6, 8});
    Case combine("dtc.moe_combine");
    combine.in(rows).in(slots).in(gates).out(F32, {1, 6, 8});
    Case combineGrad("dtc.moe_combine_grad");
    combineGrad.in(rows)
        .in(slots)
        .in(gates)
        .in(randomTensor(F32, {1, 6, 8}, -1, 1, 165))
        .out(F32, {1, 2, 3, 8})
        .out(F32, {1, 6, 2});
    for (const Case *c : {&dispatch, &dispatchGrad, &combine, &combineGrad}) {
      std::vector<Tensor> cpuOut, cudaOut;
      EXPECT_NE(c->runCpu(cpuOut), "") << c->inst.op() << " slot " << bad;
      EXPECT_NE(c->runCuda(cudaOut), "") << c->inst.op() << " slot " << bad;
    }
  }
  // The error word is reset: the next call succeeds.
  Case ok("dtc.moe_dispatch");
  ok.in(randomTensor(F32, {1, 6, 8}, -1, 1, 166))
      .in(randomSlots(I64, {1, 2, 3}, 6, 167))
      .out(F32, {1, 2, 3, 8});
  std::vector<Tensor> outs;
  EXPECT_EQ(ok.runCuda(outs), "");
}

TEST(CudaKernelRegistry, MoeRefusalsMatchTheCpuKernels) {
  // The adapters refuse these before any device work: host memory will do.
  MoeConfig c{1, 4, 3, 2, 2, false, true, F32};
  Tensor logits = routerLogits(c, 168);
  auto route = [&](int64_t topK, int64_t capacity, const Tensor &in,
                   DType slotsType) {
    MoeConfig bad = c;
    bad.topK = topK;
    bad.capacity = capacity;
    Case r = moeRouteCase("dtc.moe_route", bad);
    r.in(in)
        .out(F32, {1, 4, 3})
        .out(slotsType, {1, 3, std::max<int64_t>(capacity, 0)})
        .out(F32, {1});
    return r;
  };
  Case tooManyChoices = route(4, 2, logits, I64);
  Case noCapacity = route(2, 0, logits, I64);
  Case flatLogits = route(2, 2, randomTensor(F32, {4, 3}, -1, 1, 169), I64);
  Case i32Slots = route(2, 2, logits, I32);
  Case floatSlots("dtc.moe_dispatch");
  floatSlots.in(randomTensor(F32, {1, 4, 8}, -1, 1, 170))
      .in(randomTensor(F32, {1, 3, 2}, 0, 3, 171))
      .out(F32, {1, 3, 2, 8});
  Case rank2Input("dtc.moe_dispatch");
  rank2Input.in(randomTensor(F32, {4, 8}, -1, 1, 172))
      .in(randomSlots(I64, {1, 3, 2}, 4, 173))
      .out(F32, {1, 3, 2, 8});
  Case badCombine("dtc.moe_combine");
  badCombine.in(randomTensor(F32, {1, 3, 2}, -1, 1, 174))
      .in(randomSlots(I64, {1, 3, 2}, 4, 175))
      .in(randomTensor(F32, {1, 4, 3}, 0, 1, 176))
      .out(F32, {1, 4, 8});
  Case badResult("dtc.moe_dispatch");
  badResult.in(randomTensor(F32, {1, 4, 8}, -1, 1, 177))
      .in(randomSlots(I64, {1, 3, 2}, 4, 178))
      .out(F32, {1, 3, 2, 7});
  for (const Case *r : {&tooManyChoices, &noCapacity, &flatLogits, &i32Slots,
                        &floatSlots, &rank2Input, &badCombine, &badResult}) {
    std::vector<Tensor> cpuOut, cudaOut;
    std::string cpu = r->runOnHost(cpuKernels(), cpuOut);
    EXPECT_NE(cpu, "") << r->inst.op();
    EXPECT_EQ(r->runOnHost(cudaKernels(), cudaOut), cpu) << r->inst.op();
  }
}

TEST(CudaKernelRegistry, MoeOpsHaveKernels) {
  for (const char *op :
       {"dtc.moe_route", "dtc.moe_route_grad", "dtc.moe_dispatch",
        "dtc.moe_dispatch_grad", "dtc.moe_combine", "dtc.moe_combine_grad"})
    EXPECT_NE(cudaKernels().lookup(op), nullptr) << op;
}

//===----------------------------------------------------------------------===//
// Optimizer, matmul
//===----------------------------------------------------------------------===//

TEST_F(CudaKernel, AdamW) {
  auto scalar = [](float v) {
    Tensor t(F32, {});
    t.as<float>()[0] = v;
    return t;
  };
  Case("dtc.adamw")
      .f("beta1", 0.9)
      .f("beta2", 0.95)
      .f("epsilon", 1e-8)
      .f("weight_decay", 0.1)
      .in(randomTensor(F32, {1000}, -1, 1, 72))
      .in(randomTensor(F32, {1000}, -1, 1, 73))
      .in(randomTensor(F32, {1000}, -0.1f, 0.1f, 74))
      .in(randomTensor(F32, {1000}, 0, 0.01f, 75))
      .in(scalar(3e-4f))
      .in(scalar(7))
      .in(scalar(0.5f))
      .out(F32, {1000})
      .out(F32, {1000})
      .out(F32, {1000})
      .check(1e-7, 1e-5);
}

TEST_F(CudaKernel, Matmul) {
  struct Shape {
    std::vector<int64_t> lhs, rhs, out;
    bool transLhs, transRhs;
  } shapes[] = {
      {{37, 53}, {53, 29}, {37, 29}, false, false},
      {{53, 37}, {53, 29}, {37, 29}, true, false},
      {{37, 53}, {29, 53}, {37, 29}, false, true},
      {{53, 37}, {29, 53}, {37, 29}, true, true},
      {{2, 3, 16, 24}, {24, 40}, {2, 3, 16, 40}, false, false}, // folds
      {{4, 16, 24}, {4, 24, 8}, {4, 16, 8}, false, false},      // batched
      {{4, 16, 24}, {4, 8, 24}, {4, 16, 8}, false, true},
      {{16, 24}, {3, 24, 8}, {3, 16, 8}, false, false},           // stride 0
      {{2, 1, 8, 12}, {1, 3, 12, 5}, {2, 3, 8, 5}, false, false}, // general
  };
  for (const Shape &s : shapes) {
    Case c("dtc.matmul");
    if (s.transLhs)
      c.flag("transpose_lhs");
    if (s.transRhs)
      c.flag("transpose_rhs");
    c.in(randomTensor(F32, s.lhs, -1, 1, 76))
        .in(randomTensor(F32, s.rhs, -1, 1, 77))
        .out(F32, s.out)
        .check(1e-5, 1e-4);
  }
  // bf16 inputs, f32 accumulation: products are exact in f32, only the
  // order of the sums differs.
  Case("dtc.matmul")
      .in(randomTensor(BF16, {64, 256}, -1, 1, 78))
      .in(randomTensor(BF16, {256, 48}, -1, 1, 79))
      .out(F32, {64, 48})
      .check(1e-4, 1e-4);
  Case("dtc.matmul")
      .in(randomTensor(BF16, {64, 256}, -1, 1, 80))
      .in(randomTensor(BF16, {256, 48}, -1, 1, 81))
      .out(BF16, {64, 48})
      .check(1e-2, 1.0 / 128);
  // Results in a type neither f32 nor the inputs': computed in f32, then
  // converted (cuBLASLt has no such kernels).
  Case("dtc.matmul")
      .in(randomTensor(F32, {16, 64}, -1, 1, 84))
      .in(randomTensor(F32, {64, 24}, -1, 1, 85))
      .out(BF16, {16, 24})
      .check(1e-2, 1.0 / 128);
  Case("dtc.matmul")
      .in(randomTensor(BF16, {16, 64}, -1, 1, 86))
      .in(randomTensor(BF16, {64, 24}, -1, 1, 87))
      .out(DType::F16, {16, 24})
      .check(1e-2, 1.0 / 512);
  // Mixed operand dtypes are computed in f32.
  Case("dtc.matmul")
      .in(randomTensor(F32, {8, 32}, -1, 1, 82))
      .in(randomTensor(BF16, {32, 8}, -1, 1, 83))
      .out(F32, {8, 8})
      .check(1e-5, 1e-4);
}

TEST(CudaKernelRegistry, EveryGptStepOpHasAKernel) {
  for (const char *op : {"dtc.add",
                         "dtc.reduce_sum",
                         "dtc.mul",
                         "dtc.adamw",
                         "dtc.matmul",
                         "dtc.transpose",
                         "dtc.slice",
                         "dtc.slice_grad",
                         "dtc.layer_norm",
                         "dtc.layer_norm_grad",
                         "dtc.gelu",
                         "dtc.gelu_grad",
                         "dtc.attention",
                         "dtc.attention_grad",
                         "dtc.sqrt",
                         "dtc.min",
                         "dtc.embedding",
                         "dtc.embedding_grad",
                         "dtc.div",
                         "dtc.cross_entropy",
                         "dtc.cross_entropy_grad",
                         "dtc.reshape"})
    EXPECT_NE(cudaKernels().lookup(op), nullptr) << op;
}

TEST(CudaKernelRegistry, RingAttentionOpsHaveKernels) {
  for (const char *op : {"dtc.attention_block", "dtc.attention_merge",
                         "dtc.attention_block_grad", "dtc.zigzag_order"})
    EXPECT_NE(cudaKernels().lookup(op), nullptr) << op;
}

//===----------------------------------------------------------------------===//
// The executor on a device memory space
//===----------------------------------------------------------------------===//

/// A tiny program: step(x) { t = x + w; y = t * c; w = t; return y }.
program::RankProgram tinyProgram() {
  program::RankProgram p;
  auto type = [](program::TensorType *t) {
    t->set_dtype(program::F32);
    t->add_shape(4);
  };
  program::Variable *w = p.add_variables();
  w->set_name("w");
  type(w->mutable_type());
  program::Constant *c = p.add_constants();
  type(c->mutable_type());
  float three = 3.0f;
  c->set_data(std::string(reinterpret_cast<char *>(&three), 4));
  c->set_splat(true);
  program::Function *f = p.add_functions();
  f->set_name("step");
  f->set_arena_bytes(32);
  for (int id = 0; id < 5; ++id) {
    program::Value *v = f->add_values();
    v->set_id(id);
    type(v->mutable_type());
  }
  f->mutable_values(0)->set_argument(0);      // x
  f->mutable_values(1)->set_state("w");       // w
  f->mutable_values(2)->set_constant(0);      // c
  f->mutable_values(3)->set_arena_offset(0);  // t
  f->mutable_values(4)->set_arena_offset(16); // y
  f->add_arguments()->set_value(0);
  program::Instruction *add = f->add_instructions();
  add->set_op("dtc.add");
  add->add_inputs(0);
  add->add_inputs(1);
  add->add_outputs(3);
  program::Instruction *mul = f->add_instructions();
  mul->set_op("dtc.mul");
  mul->add_inputs(3);
  mul->add_inputs(2);
  mul->add_outputs(4);
  f->add_results()->set_value(4);
  program::Result *update = f->add_results();
  update->set_value(3);
  update->set_state("w");
  return p;
}

/// "Device" memory that lives on the host but is not the host's to the
/// executor: every argument, result and variable goes through the copies.
class FakeDevice final : public MemorySpace {
public:
  llvm::StringRef name() const override { return "fake"; }
  void *allocate(size_t bytes) override {
    ++allocations;
    return hostMemory().allocate(bytes);
  }
  void release(void *p) override { hostMemory().release(p); }
  llvm::Error copyToDevice(void *d, const void *s, size_t n) override {
    ++toDevice;
    std::memcpy(d, s, n);
    return llvm::Error::success();
  }
  llvm::Error copyToHost(void *d, const void *s, size_t n) override {
    ++toHost;
    std::memcpy(d, s, n);
    return llvm::Error::success();
  }
  llvm::Error copyOnDevice(void *d, const void *s, size_t n) override {
    std::memcpy(d, s, n);
    return llvm::Error::success();
  }
  llvm::Error synchronize() override {
    ++syncs;
    return llvm::Error::success();
  }
  int allocations = 0, toDevice = 0, toHost = 0, syncs = 0;
};

void runTinyProgram(MemorySpace &memory, const KernelRegistry &kernels) {
  program::RankProgram program = tinyProgram();
  auto executor = Executor::create(program, kernels, nullptr, memory);
  ASSERT_TRUE(static_cast<bool>(executor))
      << llvm::toString(executor.takeError());
  Executor &ex = **executor;
  EXPECT_EQ(ex.variable("w") != nullptr, memory.isHost());
  Tensor w0(F32, {4});
  for (int i = 0; i < 4; ++i)
    w0.as<float>()[i] = static_cast<float>(i);
  ASSERT_FALSE(static_cast<bool>(ex.writeVariable("w", w0)));
  Tensor x(F32, {4});
  for (int i = 0; i < 4; ++i)
    x.as<float>()[i] = 10.0f * static_cast<float>(i + 1);
  for (int call = 1; call <= 2; ++call) {
    auto results = ex.run("step", {x});
    ASSERT_TRUE(static_cast<bool>(results))
        << llvm::toString(results.takeError());
    ASSERT_EQ(results->size(), 1u);
    auto w = ex.readVariable("w");
    ASSERT_TRUE(static_cast<bool>(w)) << llvm::toString(w.takeError());
    for (int i = 0; i < 4; ++i) {
      // w_call = w0 + call * x; y = 3 * w_call.
      float expected = static_cast<float>(i) + call * 10.0f * (i + 1);
      EXPECT_EQ(w->as<float>()[i], expected);
      EXPECT_EQ((*results)[0].as<float>()[i], 3.0f * expected);
    }
  }
  // Wrong shapes and unknown names are errors naming the variable.
  llvm::Error bad = ex.writeVariable("w", Tensor(F32, {5}));
  EXPECT_NE(llvm::toString(std::move(bad)).find("variable 'w'"),
            std::string::npos);
  EXPECT_FALSE(static_cast<bool>(ex.readVariable("nope")));
  llvm::consumeError(ex.readVariable("nope").takeError());
}

TEST(ExecutorMemory, HostMemoryRunsInPlace) {
  runTinyProgram(hostMemory(), cpuKernels());
}

TEST(ExecutorMemory, DevicePathCopiesArgumentsResultsAndVariables) {
  FakeDevice device;
  runTinyProgram(device, cpuKernels());
  // The variable, the constant, the arena and the argument buffer.
  EXPECT_EQ(device.allocations, 4);
  // Per call: the argument in, the result out; plus the constant, the
  // writeVariable and the reads of w.
  EXPECT_EQ(device.syncs, 2);
  EXPECT_EQ(device.toDevice, 1 + 1 + 2);
  EXPECT_EQ(device.toHost, 2 + 2);
}

TEST(ExecutorMemory, RunsOnTheCudaBackend) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  runTinyProgram(deviceMemory(), cudaKernels());
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// Spatial extents of a window's result, as the ops' shape rule gives them.
std::vector<int64_t> windowOutput(llvm::ArrayRef<int64_t> input,
                                  llvm::ArrayRef<int64_t> kernel,
                                  llvm::ArrayRef<int64_t> strides,
                                  llvm::ArrayRef<int64_t> dilations,
                                  llvm::ArrayRef<int64_t> pads) {
  size_t k = kernel.size();
  std::vector<int64_t> out;
  for (size_t i = 0; i < k; ++i) {
    int64_t s = strides.empty() ? 1 : strides[i];
    int64_t d = dilations.empty() ? 1 : dilations[i];
    int64_t padded = input[2 + i] + (pads.empty() ? 0 : pads[i] + pads[k + i]);
    out.push_back((padded - d * (kernel[i] - 1) - 1) / s + 1);
  }
  return out;
}

/// Sets strides, dilations and pads on `c` (left out when empty).
Case &windowAttrs(Case &c, const std::vector<int64_t> &strides,
                  const std::vector<int64_t> &dilations,
                  const std::vector<int64_t> &pads) {
  if (!strides.empty())
    c.ints("strides", strides);
  if (!dilations.empty())
    c.ints("dilations", dilations);
  if (!pads.empty())
    c.ints("pads", pads);
  return c;
}

struct ConvConfig {
  std::vector<int64_t> input; // [n, c, x...]
  int64_t filters;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides, dilations, pads; // empty: the defaults
  int64_t groups;
  bool bias;
  DType dtype;

  std::vector<int64_t> weightShape() const {
    std::vector<int64_t> w{filters, input[1] / groups};
    w.insert(w.end(), kernel.begin(), kernel.end());
    return w;
  }
  std::vector<int64_t> outputShape() const {
    std::vector<int64_t> o{input[0], filters};
    for (int64_t x : windowOutput(input, kernel, strides, dilations, pads))
      o.push_back(x);
    return o;
  }
  Case op(const std::string &name) const {
    Case c(name);
    windowAttrs(c, strides, dilations, pads);
    if (groups != 1)
      c.i("groups", groups);
    return c;
  }
};

void PrintTo(const ConvConfig &c, std::ostream *os) {
  *os << "input " << shapeString(c.input) << " filters " << c.filters
      << " kernel " << shapeString(c.kernel) << " strides "
      << shapeString(c.strides) << " dilations " << shapeString(c.dilations)
      << " pads " << shapeString(c.pads) << " groups " << c.groups
      << (c.bias ? " bias " : " ") << dtypeName(c.dtype).str();
}

class CudaConv : public ::testing::TestWithParam<ConvConfig> {
protected:
  void SetUp() override {
    if (!haveDevice())
      GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaConv, ForwardAndGradientsMatchCpu) {
  const ConvConfig &c = GetParam();
  bool bf16 = c.dtype == BF16;
  std::vector<int64_t> weight = c.weightShape(), out = c.outputShape();
  Tensor x = randomTensor(c.dtype, c.input, -1, 1, 200);
  Tensor w = randomTensor(c.dtype, weight, -1, 1, 201);
  Tensor dy = randomTensor(c.dtype, out, -1, 1, 202);
  // GEMM sums in another order; bf16 results: one bf16 ulp.
  Case forward = c.op("dtc.conv");
  forward.in(x).in(w);
  if (c.bias)
    forward.in(randomTensor(c.dtype, {c.filters}, -1, 1, 203));
  forward.out(c.dtype, out).check(bf16 ? 1e-2 : 1e-5, bf16 ? 1.0 / 128 : 1e-4);
  // The input gradient sums in the CPU's order (f32), the weight gradient
  // in double in another order.
  c.op("dtc.conv_grad_input")
      .ints("input_shape", c.input)
      .in(dy)
      .in(w)
      .out(c.dtype, c.input)
      .check(bf16 ? 1e-2 : 1e-6, bf16 ? 1.0 / 128 : 1e-5);
  c.op("dtc.conv_grad_weight")
      .ints("weight_shape", weight)
      .in(x)
      .in(dy)
      .out(c.dtype, weight)
      .check(bf16 ? 1e-2 : 1e-6, bf16 ? 1.0 / 128 : 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, CudaConv,
    ::testing::Values(
        // 1-D: defaults, then stride 2, dilation 2, uneven pads, 2 groups.
        ConvConfig{{2, 3, 11}, 4, {3}, {}, {}, {}, 1, true, F32},
        ConvConfig{{2, 4, 13}, 6, {3}, {2}, {2}, {1, 2}, 2, false, F32},
        // Stride past the kernel: some inputs in no window.
        ConvConfig{{1, 2, 10}, 3, {2}, {3}, {}, {}, 1, true, F32},
        // 2-D: "same" padding, more channels (a deeper GEMM).
        ConvConfig{{2, 3, 9, 7}, 5, {3, 3}, {}, {}, {1, 1, 1, 1}, 1, true, F32},
        ConvConfig{
            {1, 8, 6, 5}, 12, {3, 3}, {}, {}, {1, 1, 1, 1}, 1, false, F32},
        // Stride 2, mixed dilations, asymmetric pads, 3 groups of one image
        // (one GEMM per image).
        ConvConfig{{1, 6, 10, 9},
                   6,
                   {3, 2},
                   {2, 2},
                   {2, 1},
                   {0, 1, 2, 0},
                   3,
                   true,
                   F32},
        // Depthwise, channel multiplier 2.
        ConvConfig{
            {2, 4, 8, 8}, 8, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, 4, true, F32},
        ConvConfig{
            {3, 5, 7, 7}, 5, {5, 5}, {}, {}, {2, 2, 2, 2}, 5, false, F32},
        // 1x1 at unit stride: the GEMM reads the input as is.
        ConvConfig{{3, 5, 4, 6}, 7, {1, 1}, {}, {}, {}, 1, true, F32},
        // 1x1 with end padding: zero rows and columns, no plain read.
        ConvConfig{{2, 3, 4, 5}, 4, {1, 1}, {}, {}, {0, 0, 1, 1}, 1, true, F32},
        // 1x1 with end pads +1 and -1: as many positions as the input has,
        // but not the input's rows.
        ConvConfig{
            {2, 3, 4, 5}, 2, {1, 1}, {}, {}, {0, 0, 1, -1}, 1, false, F32},
        // 1x1 at stride 2 (an im2col that subsamples).
        ConvConfig{{2, 4, 5, 7}, 3, {1, 1}, {2, 2}, {}, {}, 1, false, F32},
        // 3-D.
        ConvConfig{{1, 2, 5, 4, 6},
                   3,
                   {2, 3, 2},
                   {1, 2, 1},
                   {},
                   {1, 0, 1, 0, 1, 1},
                   1,
                   true,
                   F32},
        // bf16 (a bf16 GEMM), odd sizes, 2 groups, bias.
        ConvConfig{
            {2, 4, 7, 9}, 4, {3, 3}, {2, 1}, {}, {1, 1, 1, 1}, 2, true, BF16},
        ConvConfig{{2, 3, 15}, 5, {4}, {1}, {3}, {2, 3}, 1, false, BF16}));

TEST_F(CudaKernel, ConvMixedDtypes) {
  // bf16 input, f32 weight and bias: an f32 GEMM; bf16 and f16 results
  // are converted from f32.
  Tensor x = randomTensor(BF16, {2, 3, 6, 5}, -1, 1, 204);
  Tensor w = randomTensor(F32, {4, 3, 3, 3}, -1, 1, 205);
  Tensor b = randomTensor(BF16, {4}, -1, 1, 206);
  Case("dtc.conv")
      .ints("pads", {1, 1, 1, 1})
      .in(x)
      .in(w)
      .in(b)
      .out(F32, {2, 4, 6, 5})
      .check(1e-5, 1e-4);
  Case("dtc.conv")
      .in(randomTensor(F32, {2, 3, 6, 5}, -1, 1, 207))
      .in(randomTensor(F32, {4, 3, 3, 3}, -1, 1, 208))
      .out(BF16, {2, 4, 4, 3})
      .check(1e-2, 1.0 / 128);
  Case("dtc.conv")
      .in(x)
      .in(randomTensor(BF16, {4, 3, 2, 2}, -1, 1, 209))
      .out(DType::F16, {2, 4, 5, 4})
      .check(1e-3, 1.0 / 512);
  Case("dtc.conv_grad_weight")
      .in(x)
      .in(randomTensor(F32, {2, 4, 4, 3}, -1, 1, 210))
      .out(F32, {4, 3, 3, 3})
      .check(1e-6, 1e-6);
  Case("dtc.conv_grad_input")
      .in(randomTensor(BF16, {2, 4, 4, 3}, -1, 1, 211))
      .in(w)
      .out(F32, {2, 3, 6, 5})
      .check(1e-6, 1e-5);
}

struct PoolConfig {
  std::vector<int64_t> input, kernel, strides, dilations, pads;
};

/// Inputs of few distinct values, so that windows tie for their maximum.
Tensor tiedInput(DType dtype, llvm::ArrayRef<int64_t> shape, unsigned seed) {
  Tensor t = randomTensor(F32, shape, -2, 2, seed);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.as<float>()[i] = std::floor(t.as<float>()[i] * 2) / 2;
  if (dtype == F32)
    return t;
  Tensor cast(dtype, t.shape());
  for (int64_t i = 0; i < t.numElements(); ++i)
    cast.as<uint16_t>()[i] = floatToBF16(t.as<float>()[i]);
  return cast;
}

TEST_F(CudaKernel, PoolsAndGradients) {
  PoolConfig configs[] = {
      // 3x3 stride 2 pad 1: overlapping windows (ResNet's stem pool).
      {{2, 3, 9, 8}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}},
      // Stride 1, dilation 2 across, uneven pads.
      {{1, 2, 7, 9}, {3, 3}, {}, {1, 2}, {1, 2, 0, 1}},
      // 1-D: wide windows mostly in the padding.
      {{2, 3, 10}, {4}, {3}, {}, {2, 2}},
      // Windows entirely in the padding: max -inf, mean of nothing.
      {{1, 2, 3}, {2}, {}, {}, {2, 2}},
      // ceil_mode as extra end padding: a last window half outside.
      {{1, 2, 7, 7}, {2, 2}, {3, 3}, {}, {0, 0, 1, 1}},
      // 3-D, no padding.
      {{1, 2, 4, 5, 3}, {2, 2, 2}, {1, 2, 1}, {}, {}},
      // Global pooling.
      {{2, 4, 5, 5}, {5, 5}, {}, {}, {}},
  };
  for (DType dtype : {F32, BF16}) {
    for (const PoolConfig &p : configs) {
      SCOPED_TRACE(dtypeName(dtype).str() + " input " + shapeString(p.input) +
                   " kernel " + shapeString(p.kernel) + " strides " +
                   shapeString(p.strides) + " pads " + shapeString(p.pads));
      std::vector<int64_t> out{p.input[0], p.input[1]};
      for (int64_t o :
           windowOutput(p.input, p.kernel, p.strides, p.dilations, p.pads))
        out.push_back(o);
      auto op = [&](const std::string &name) {
        Case c(name);
        c.ints("kernel_shape", p.kernel);
        windowAttrs(c, p.strides, p.dilations, p.pads);
        return c;
      };
      double tol = dtype == BF16 ? 1.0 / 128 : 0;
      for (bool ties : {false, true}) {
        Tensor x = ties ? tiedInput(dtype, p.input, 212)
                        : randomTensor(dtype, p.input, -1, 1, 213);
        Tensor dy = randomTensor(dtype, out, -1, 1, 214);
        // Maxima and the first maximum's gradients (sums of whole
        // gradients in window order): exact.
        op("dtc.max_pool").in(x).out(dtype, out).check(0, 0);
        op("dtc.max_pool_grad")
            .in(x)
            .in(dy)
            .out(dtype, p.input)
            .check(tol, tol);
        for (bool includePad : {false, true}) {
          SCOPED_TRACE(includePad ? "count_include_pad" : "inside only");
          Case avg = op("dtc.avg_pool");
          Case avgGrad = op("dtc.avg_pool_grad");
          if (includePad) {
            avg.flag("count_include_pad");
            avgGrad.flag("count_include_pad");
          }
          // Means in double in the CPU's order: exact.
          avg.in(x).out(dtype, out).check(tol, tol);
          avgGrad.ints("input_shape", p.input)
              .in(dy)
              .out(dtype, p.input)
              .check(dtype == BF16 ? tol : 1e-7, dtype == BF16 ? tol : 1e-6);
        }
      }
    }
  }
}

TEST_F(CudaKernel, MaxPoolNaNIsTheMaximum) {
  Tensor x = randomTensor(F32, {1, 1, 6, 6}, -1, 1, 215);
  x.as<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  x.as<float>()[8] = std::numeric_limits<float>::quiet_NaN();
  x.as<float>()[21] = std::numeric_limits<float>::quiet_NaN();
  Tensor dy = randomTensor(F32, {1, 1, 3, 3}, -1, 1, 216);
  for (const char *op : {"dtc.max_pool", "dtc.max_pool_grad"}) {
    Case c(op);
    c.ints("kernel_shape", {3, 3})
        .ints("strides", {2, 2})
        .ints("pads", {1, 1, 1, 1});
    c.in(x);
    if (std::string(op) == "dtc.max_pool_grad")
      c.in(dy).out(F32, {1, 1, 6, 6});
    else
      c.out(F32, {1, 1, 3, 3});
    c.check(0, 0);
  }
}

// Both backends read the shapes through runtime/core/Window.h; this checks
// that the CUDA kernels do so before they touch the device (no GPU needed).
TEST(CudaKernelRegistry, ConvPoolRefusalsMatchTheCpuKernels) {
  // The adapters refuse these before any device work: host memory will do.
  Tensor x = randomTensor(F32, {2, 4, 6, 6}, -1, 1, 217);
  Tensor w = randomTensor(F32, {6, 2, 3, 3}, -1, 1, 218);
  std::vector<Case> cases;
  auto conv = [&](const Tensor &in, const Tensor &weight,
                  std::vector<int64_t> out, int64_t groups) {
    Case c("dtc.conv");
    c.i("groups", groups).in(in).in(weight).out(F32, out);
    return c;
  };
  // groups 3 does not divide 4 channels; 2 channels per group against
  // groups 1.
  cases.push_back(conv(x, w, {2, 6, 4, 4}, 3));
  cases.push_back(conv(x, w, {2, 6, 4, 4}, 1));
  // A result of the wrong spatial size; a rank-2 input; an integer input.
  cases.push_back(conv(x, w, {2, 6, 5, 4}, 2));
  cases.push_back(conv(randomTensor(F32, {2, 4}, -1, 1, 219), w, {2, 6}, 2));
  cases.push_back(
      conv(randomTensor(I32, {2, 4, 6, 6}, -1, 1, 220), w, {2, 6, 4, 4}, 2));
  // A stride of 0, pads of the wrong count, a bias of the wrong size.
  cases.push_back(conv(x, w, {2, 6, 4, 4}, 2).ints("strides", {0, 1}));
  cases.push_back(conv(x, w, {2, 6, 4, 4}, 2).ints("pads", {1, 1}));
  cases.push_back(
      conv(x, w, {2, 6, 4, 4}, 2).in(randomTensor(F32, {5}, -1, 1, 221)));
  // Gradients: inconsistent groups, pads that give another result size, a
  // window larger than the padded input, a result of the wrong size.
  Tensor dy = randomTensor(F32, {2, 6, 4, 4}, -1, 1, 222);
  cases.push_back(Case("dtc.conv_grad_input")
                      .i("groups", 3)
                      .in(dy)
                      .in(w)
                      .out(F32, {2, 4, 6, 6}));
  cases.push_back(Case("dtc.conv_grad_input")
                      .i("groups", 2)
                      .ints("pads", {1, 0, 1, 0})
                      .in(dy)
                      .in(w)
                      .out(F32, {2, 4, 6, 6}));
  cases.push_back(Case("dtc.conv_grad_weight")
                      .i("groups", 2)
                      .in(randomTensor(F32, {2, 4, 2, 6}, -1, 1, 223))
                      .in(dy)
                      .out(F32, {6, 2, 3, 3}));
  cases.push_back(Case("dtc.conv_grad_weight")
                      .i("groups", 2)
                      .ints("strides", {2, 2})
                      .in(x)
                      .in(dy)
                      .out(F32, {6, 2, 3, 3}));
  auto pool = [&](const std::string &op, std::vector<int64_t> kernel,
                  std::vector<int64_t> out) {
    Case c(op);
    c.ints("kernel_shape", kernel).in(x).out(F32, out);
    return c;
  };
  // Pools: other channels, a kernel of the wrong rank, a dilation of 0.
  cases.push_back(pool("dtc.max_pool", {2, 2}, {2, 3, 5, 5}));
  cases.push_back(pool("dtc.avg_pool", {2}, {2, 4, 5, 5}));
  cases.push_back(
      pool("dtc.max_pool", {2, 2}, {2, 4, 5, 5}).ints("dilations", {0, 1}));
  cases.push_back(pool("dtc.avg_pool", {2, 2}, {2, 4, 4, 5}));
  // Pool gradients: a result unlike the input, pooled channels unlike the
  // input's, pads of the wrong count, a stride of 0, a kernel of 0.
  Tensor pooled = randomTensor(F32, {2, 4, 5, 5}, -1, 1, 224);
  cases.push_back(Case("dtc.max_pool_grad")
                      .ints("kernel_shape", {2, 2})
                      .in(x)
                      .in(pooled)
                      .out(F32, {2, 4, 6, 5}));
  cases.push_back(Case("dtc.max_pool_grad")
                      .ints("kernel_shape", {2, 2})
                      .in(x)
                      .in(randomTensor(F32, {2, 3, 5, 5}, -1, 1, 225))
                      .out(F32, {2, 4, 6, 6}));
  cases.push_back(Case("dtc.avg_pool_grad")
                      .ints("kernel_shape", {2, 2})
                      .ints("pads", {0, 0, 0})
                      .in(pooled)
                      .out(F32, {2, 4, 6, 6}));
  cases.push_back(Case("dtc.avg_pool_grad")
                      .ints("kernel_shape", {2, 2})
                      .ints("strides", {0, 1})
                      .in(pooled)
                      .out(F32, {2, 4, 6, 6}));
  cases.push_back(Case("dtc.avg_pool_grad")
                      .ints("kernel_shape", {0, 2})
                      .in(pooled)
                      .out(F32, {2, 4, 6, 6}));
  for (const Case &c : cases) {
    std::vector<Tensor> cpuOut, cudaOut;
    std::string cpu = c.runOnHost(cpuKernels(), cpuOut);
    EXPECT_NE(cpu, "") << c.inst.op();
    EXPECT_EQ(c.runOnHost(cudaKernels(), cudaOut), cpu) << c.inst.op();
  }
}

TEST(CudaKernelRegistry, ConvPoolOpsHaveKernels) {
  for (const char *op :
       {"dtc.conv", "dtc.conv_grad_input", "dtc.conv_grad_weight",
        "dtc.max_pool", "dtc.max_pool_grad", "dtc.avg_pool",
        "dtc.avg_pool_grad"})
    EXPECT_NE(cudaKernels().lookup(op), nullptr) << op;
}

#ifndef DTC_CUDA_EMULATION
//===----------------------------------------------------------------------===//
// NCCL on one GPU: every operation of a group of one is a copy, through the
// same streams, events and pack/unpack permutations as a larger group.
//===----------------------------------------------------------------------===//

TEST(NcclCommunicator, SingleRankOperationsCopy) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  auto mesh = Mesh::parse("dp:1,tp:1");
  ASSERT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  auto comm = runtime::cuda::NcclCommunicator::create(
      *mesh, 0, [](runtime::cuda::NcclId &) { return llvm::Error::success(); });
  ASSERT_TRUE(static_cast<bool>(comm)) << llvm::toString(comm.takeError());
  MemorySpace &memory = deviceMemory();
  Tensor host = randomTensor(F32, {3, 8, 5}, -1, 1, 90);
  auto in = runtime::cuda::toDevice(host, memory);
  ASSERT_TRUE(static_cast<bool>(in));
  std::vector<std::string> tp = {"tp"}, both = {"dp", "tp"};
  auto expectCopy = [&](llvm::Expected<Request> request, const Tensor &out) {
    ASSERT_TRUE(static_cast<bool>(request))
        << llvm::toString(request.takeError());
    ASSERT_FALSE(static_cast<bool>((*comm)->wait(*request)));
    ASSERT_FALSE(static_cast<bool>(memory.synchronize()));
    auto back = runtime::cuda::toHost(out, memory);
    ASSERT_TRUE(static_cast<bool>(back));
    EXPECT_EQ(std::memcmp(back->data(), host.data(), host.bytes()), 0);
  };
  auto out = [&] {
    auto t = Tensor::allocate(F32, {3, 8, 5}, memory);
    EXPECT_TRUE(static_cast<bool>(t));
    return std::move(*t);
  };
  Tensor o1 = out(), o2 = out(), o3 = out(), o4 = out();
  expectCopy((*comm)->allReduce(both, in->ref(), o1.ref(), Reduction::Sum), o1);
  expectCopy((*comm)->allGather(tp, in->ref(), o2.ref(), 1, 4), o2);
  expectCopy(
      (*comm)->reduceScatter(tp, in->ref(), o3.ref(), 2, 0, Reduction::Max),
      o3);
  expectCopy((*comm)->allToAll(both, in->ref(), o4.ref(), 1, 2), o4);
  // Unknown axes and requests are errors.
  auto bad = (*comm)->allReduce({"pp"}, in->ref(), o1.ref(), Reduction::Sum);
  EXPECT_FALSE(static_cast<bool>(bad));
  llvm::consumeError(bad.takeError());
  llvm::Error unknown = (*comm)->wait(12345);
  EXPECT_TRUE(static_cast<bool>(unknown));
  llvm::consumeError(std::move(unknown));
}

// Point-to-point channels join ring neighbours of the axes named at
// creation; an axis of one has none, so a send to oneself is an error rather
// than an NCCL receive that waits forever (test/mpi/NcclPointToPointTest.cpp
// runs the channels on two GPUs).
TEST(NcclCommunicator, SendWithoutAChannelIsAnError) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  auto mesh = Mesh::parse("pp:1");
  ASSERT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  std::vector<std::string> p2p = {"pp"};
  auto comm = runtime::cuda::NcclCommunicator::create(
      *mesh, 0, [](runtime::cuda::NcclId &) { return llvm::Error::success(); },
      p2p);
  ASSERT_TRUE(static_cast<bool>(comm)) << llvm::toString(comm.takeError());
  MemorySpace &memory = deviceMemory();
  auto buffer = Tensor::allocate(F32, {16}, memory);
  ASSERT_TRUE(static_cast<bool>(buffer));
  auto sent = (*comm)->send("pp", 0, buffer->ref());
  ASSERT_FALSE(static_cast<bool>(sent));
  EXPECT_NE(llvm::toString(sent.takeError()).find("no point-to-point channel"),
            std::string::npos);
  auto unknownAxis = runtime::cuda::NcclCommunicator::create(
      *mesh, 0, [](runtime::cuda::NcclId &) { return llvm::Error::success(); },
      {"cp"});
  EXPECT_FALSE(static_cast<bool>(unknownAxis));
  llvm::consumeError(unknownAxis.takeError());
}

#endif // DTC_CUDA_EMULATION

} // namespace
