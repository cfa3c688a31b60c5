//===- CpuKernelTest.cpp - Direct tests of the CPU backend's kernels ------===//
//
// Each kernel is called through its KernelCall, as the executor does, on
// small inputs whose results are computed by hand (or, for attention and
// convolution, by a naive loop written here from the op's definition).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Kernel.h"
#include "runtime/cpu/Blas.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace dtc::runtime;
using dtc::runtime::cpu::setThreadCount;
using dtc::runtime::cpu::threadCount;

namespace {

const KernelRegistry &registry() {
  static KernelRegistry r = [] {
    KernelRegistry reg;
    cpu::registerCpuKernels(reg);
    return reg;
  }();
  return r;
}

/// One kernel call under construction: its instruction, inputs and outputs.
struct Call {
  explicit Call(const std::string &op) { inst.set_op(op); }

  Call &in(const Tensor &t) {
    inputs.push_back(t);
    return *this;
  }
  Call &out(DType dtype, llvm::ArrayRef<int64_t> shape) {
    outputs.emplace_back(dtype, shape);
    return *this;
  }
  Call &flag(const std::string &name) {
    (*inst.mutable_attrs())[name].set_b(true);
    return *this;
  }
  Call &i(const std::string &name, int64_t v) {
    (*inst.mutable_attrs())[name].set_i(v);
    return *this;
  }
  Call &f(const std::string &name, double v) {
    (*inst.mutable_attrs())[name].set_f(v);
    return *this;
  }
  Call &ints(const std::string &name, std::vector<int64_t> values) {
    auto *list = (*inst.mutable_attrs())[name].mutable_ints();
    for (int64_t v : values)
      list->add_values(v);
    return *this;
  }

  /// Runs the kernel; returns "" or the error message.
  std::string run() {
    KernelFn fn = registry().lookup(inst.op());
    if (!fn)
      return "no kernel for " + inst.op();
    std::vector<TensorRef> in, outs;
    for (const Tensor &t : inputs)
      in.push_back(t.ref());
    for (const Tensor &t : outputs)
      outs.push_back(t.ref());
    KernelCall call(inst, in, outs);
    llvm::Error err = fn(call);
    return err ? llvm::toString(std::move(err)) : "";
  }

  std::vector<float> result(size_t index = 0) const {
    const Tensor &t = outputs[index];
    std::vector<float> values;
    for (int64_t j = 0; j < t.numElements(); ++j)
      values.push_back(loadAsFloat(t.ref(), j));
    return values;
  }

  dtc::program::Instruction inst;
  std::vector<Tensor> inputs, outputs;
};

Tensor f32(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<float> values) {
  Tensor t(DType::F32, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numElements());
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

template <typename T>
Tensor ints(DType dtype, llvm::ArrayRef<int64_t> shape,
            llvm::ArrayRef<T> values) {
  Tensor t(dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numElements());
  std::memcpy(t.data(), values.data(), values.size() * sizeof(T));
  return t;
}

Tensor i64(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> values) {
  return ints<int64_t>(DType::I64, shape, values);
}

Tensor random(llvm::ArrayRef<int64_t> shape, unsigned seed) {
  Tensor t(DType::F32, shape);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t j = 0; j < t.numElements(); ++j)
    t.as<float>()[j] = dist(gen);
  return t;
}

void expectNear(const std::vector<float> &got,
                const std::vector<float> &expected, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t j = 0; j < got.size(); ++j)
    EXPECT_NEAR(got[j], expected[j], tol) << "element " << j;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST(CpuElementwise, UnaryOps) {
  struct Case {
    const char *op;
    float x, y;
  } cases[] = {
      {"dtc.neg", 1.5f, -1.5f},        {"dtc.abs", -2.0f, 2.0f},
      {"dtc.exp", 1.0f, 2.7182818f},   {"dtc.log", 1.0f, 0.0f},
      {"dtc.sqrt", 9.0f, 3.0f},        {"dtc.rsqrt", 4.0f, 0.5f},
      {"dtc.reciprocal", 4.0f, 0.25f}, {"dtc.tanh", 0.5f, 0.46211716f},
      {"dtc.erf", 1.0f, 0.84270079f},  {"dtc.sigmoid", 0.0f, 0.5f},
      {"dtc.relu", -3.0f, 0.0f},       {"dtc.silu", 1.0f, 0.73105858f},
      {"dtc.gelu", 1.0f, 0.84134475f}, {"dtc.softplus", 0.0f, 0.69314718f}};
  for (const Case &c : cases) {
    Call call(c.op);
    call.in(f32({1}, {c.x})).out(DType::F32, {1});
    ASSERT_EQ(call.run(), "") << c.op;
    EXPECT_NEAR(call.result()[0], c.y, 1e-6) << c.op;
  }
  Call tanhGelu("dtc.gelu");
  tanhGelu.flag("approximate_tanh")
      .in(f32({2}, {1.0f, -2.0f}))
      .out(DType::F32, {2});
  ASSERT_EQ(tanhGelu.run(), "");
  expectNear(tanhGelu.result(), {0.84119199f, -0.04540231f}, 1e-6f);
}

TEST(CpuElementwise, ActivationsAreAccurateOverTheirRange) {
  // The f32 activations use vectorizable exp/erfc approximations; compare
  // with the double-precision definitions over [-20, 20]: relative error,
  // absolute below 1e-9 (in the negative tails the f32 rounding of the
  // exponent alone costs a few 1e-6 relative).
  int64_t n = 40001;
  Tensor x(DType::F32, {n});
  for (int64_t j = 0; j < n; ++j)
    x.as<float>()[j] = -20.0f + 0.001f * j;
  auto check = [&](const char *op, bool tanhForm, auto reference) {
    Call call(op);
    if (tanhForm)
      call.flag("approximate_tanh");
    call.in(x).out(DType::F32, {n});
    ASSERT_EQ(call.run(), "") << op;
    double worst = 0, worstAt = 0;
    for (int64_t j = 0; j < n; ++j) {
      double v = x.as<float>()[j], want = reference(v);
      double got = call.outputs[0].as<float>()[j];
      double error = std::fabs(got - want) / std::max(std::fabs(want), 1e-9);
      if (error > worst) {
        worst = error;
        worstAt = v;
      }
    }
    EXPECT_LT(worst, 1e-5) << op << (tanhForm ? " (tanh)" : "")
                           << " at x = " << worstAt;
  };
  // References in forms without cancellation in the negative tail:
  // 1 + erf(v) = erfc(-v) and (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u)).
  check("dtc.gelu", false,
        [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); });
  check("dtc.gelu", true, [](double v) {
    double u = std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
    return v / (1 + std::exp(-2 * u));
  });
  check("dtc.sigmoid", false, [](double v) { return 1 / (1 + std::exp(-v)); });
  check("dtc.silu", false, [](double v) { return v / (1 + std::exp(-v)); });
  check("dtc.softplus", false,
        [](double v) { return std::log1p(std::exp(v)); });
}

TEST(CpuElementwise, UnaryOnBf16RoundsTheResult) {
  Tensor x(DType::BF16, {2});
  x.as<uint16_t>()[0] = floatToBF16(2.0f);
  x.as<uint16_t>()[1] = floatToBF16(-1.0f);
  Call call("dtc.exp");
  call.in(x).out(DType::BF16, {2});
  ASSERT_EQ(call.run(), "");
  // e^2 = 7.389056 -> bf16 7.375; e^-1 = 0.36787944 -> 0.3671875.
  EXPECT_EQ(call.result()[0], 7.375f);
  EXPECT_EQ(call.result()[1], 0.3671875f);
}

TEST(CpuElementwise, BinaryBroadcasting) {
  Call add("dtc.add");
  add.in(f32({2, 3}, {1, 2, 3, 4, 5, 6}))
      .in(f32({3}, {10, 20, 30}))
      .out(DType::F32, {2, 3});
  ASSERT_EQ(add.run(), "");
  expectNear(add.result(), {11, 22, 33, 14, 25, 36});

  // [2, 1] x [1, 3] -> outer product.
  Call mul("dtc.mul");
  mul.in(f32({2, 1}, {2, 3}))
      .in(f32({1, 3}, {1, 10, 100}))
      .out(DType::F32, {2, 3});
  ASSERT_EQ(mul.run(), "");
  expectNear(mul.result(), {2, 20, 200, 3, 30, 300});

  // Scalar on the left, 3-d on the right.
  Call sub("dtc.sub");
  sub.in(f32({}, {1}))
      .in(f32({2, 1, 2}, {1, 2, 3, 4}))
      .out(DType::F32, {2, 1, 2});
  ASSERT_EQ(sub.run(), "");
  expectNear(sub.result(), {0, -1, -2, -3});

  Call pow("dtc.pow");
  pow.in(f32({3}, {2, 3, 4})).in(f32({1}, {2})).out(DType::F32, {3});
  ASSERT_EQ(pow.run(), "");
  expectNear(pow.result(), {4, 9, 16});

  Call mx("dtc.max"), mn("dtc.min");
  mx.in(f32({3}, {1, 5, -2})).in(f32({3}, {3, 4, -1})).out(DType::F32, {3});
  mn.in(f32({3}, {1, 5, -2})).in(f32({3}, {3, 4, -1})).out(DType::F32, {3});
  ASSERT_EQ(mx.run(), "");
  ASSERT_EQ(mn.run(), "");
  expectNear(mx.result(), {3, 5, -1});
  expectNear(mn.result(), {1, 4, -2});
}

TEST(CpuElementwise, IntegerBinaryOps) {
  Call div("dtc.div");
  div.in(i64({4}, {7, -7, 9, 5}))
      .in(i64({4}, {2, 2, 3, 0}))
      .out(DType::I64, {4});
  ASSERT_EQ(div.run(), "");
  const int64_t *q = div.outputs[0].as<int64_t>();
  // Truncation toward zero; division by zero gives 0 rather than a trap.
  EXPECT_EQ(q[0], 3);
  EXPECT_EQ(q[1], -3);
  EXPECT_EQ(q[2], 3);
  EXPECT_EQ(q[3], 0);

  Call add("dtc.add");
  add.in(ints<int32_t>(DType::I32, {2, 2}, {1, 2, 3, 4}))
      .in(ints<int32_t>(DType::I32, {2, 1}, {10, 20}))
      .out(DType::I32, {2, 2});
  ASSERT_EQ(add.run(), "");
  const int32_t *s = add.outputs[0].as<int32_t>();
  EXPECT_EQ(s[0], 11);
  EXPECT_EQ(s[1], 12);
  EXPECT_EQ(s[2], 23);
  EXPECT_EQ(s[3], 24);

  Call mx("dtc.max");
  mx.in(i64({3}, {-5, 6, 0})).in(i64({1}, {1})).out(DType::I64, {3});
  ASSERT_EQ(mx.run(), "");
  EXPECT_EQ(mx.outputs[0].as<int64_t>()[0], 1);
  EXPECT_EQ(mx.outputs[0].as<int64_t>()[1], 6);
}

TEST(CpuElementwise, LargeSameShapeAddUsesAllElements) {
  // Large enough to take the threaded path.
  int64_t n = 100000;
  Tensor a(DType::F32, {n}), b(DType::F32, {n});
  for (int64_t j = 0; j < n; ++j) {
    a.as<float>()[j] = static_cast<float>(j);
    b.as<float>()[j] = 0.5f;
  }
  Call add("dtc.add");
  add.in(a).in(b).out(DType::F32, {n});
  ASSERT_EQ(add.run(), "");
  const float *y = add.outputs[0].as<float>();
  for (int64_t j = 0; j < n; j += 9973)
    EXPECT_EQ(y[j], j + 0.5f);
  EXPECT_EQ(y[n - 1], n - 1 + 0.5f);
}

TEST(CpuElementwise, CastRoundsAndTruncates) {
  // bf16 round to nearest even: 1 + 2^-8 is a tie -> 1.0 (even);
  // 1 + 3 * 2^-8 is a tie -> 1 + 2^-6 (even); 1 + 2^-8 + 2^-12 rounds up.
  Call toBf16("dtc.cast");
  toBf16.in(f32({3}, {1.00390625f, 1.01171875f, 1.00415039f}))
      .out(DType::BF16, {3});
  ASSERT_EQ(toBf16.run(), "");
  const uint16_t *bits = toBf16.outputs[0].as<uint16_t>();
  EXPECT_EQ(bits[0], 0x3F80);
  EXPECT_EQ(bits[1], 0x3F82);
  EXPECT_EQ(bits[2], 0x3F81);

  Call toF16("dtc.cast");
  toF16.in(f32({2}, {1.0f, 65504.0f})).out(DType::F16, {2});
  ASSERT_EQ(toF16.run(), "");
  EXPECT_EQ(toF16.outputs[0].as<uint16_t>()[0], 0x3C00);
  EXPECT_EQ(toF16.outputs[0].as<uint16_t>()[1], 0x7BFF);

  Call toInt("dtc.cast");
  toInt.in(f32({4}, {2.7f, -2.7f, 0.0f, 1e20f})).out(DType::I32, {4});
  ASSERT_EQ(toInt.run(), "");
  const int32_t *n = toInt.outputs[0].as<int32_t>();
  EXPECT_EQ(n[0], 2);
  EXPECT_EQ(n[1], -2);
  EXPECT_EQ(n[2], 0);
  EXPECT_EQ(n[3], 2147483647); // saturates

  Call toBool("dtc.cast");
  toBool.in(f32({3}, {0.0f, 0.5f, -3.0f})).out(DType::BOOL, {3});
  ASSERT_EQ(toBool.run(), "");
  const uint8_t *b = toBool.outputs[0].as<uint8_t>();
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[1], 1);
  EXPECT_EQ(b[2], 1);

  Call fromInt("dtc.cast");
  fromInt.in(i64({2}, {-3, 1 << 20})).out(DType::F64, {2});
  ASSERT_EQ(fromInt.run(), "");
  EXPECT_EQ(fromInt.outputs[0].as<double>()[0], -3.0);
  EXPECT_EQ(fromInt.outputs[0].as<double>()[1], 1048576.0);

  Call narrow("dtc.cast");
  narrow.in(i64({2}, {300, -1})).out(DType::I8, {2});
  ASSERT_EQ(narrow.run(), "");
  EXPECT_EQ(narrow.outputs[0].as<int8_t>()[0], 44); // 300 mod 256
  EXPECT_EQ(narrow.outputs[0].as<int8_t>()[1], -1);
}

TEST(CpuElementwise, BadInputs) {
  Call add("dtc.add");
  add.in(f32({2}, {1, 2})).in(f32({3}, {1, 2, 3})).out(DType::F32, {3});
  std::string err = add.run();
  EXPECT_NE(err.find("does not broadcast"), std::string::npos) << err;

  Call exp("dtc.exp");
  exp.in(i64({1}, {1})).out(DType::I64, {1});
  err = exp.run();
  EXPECT_NE(err.find("unsupported dtype i64"), std::string::npos) << err;
}

//===----------------------------------------------------------------------===//
// Matmul and reductions
//===----------------------------------------------------------------------===//

TEST(CpuLinalg, Matmul2d) {
  Call mm("dtc.matmul");
  mm.in(f32({2, 2}, {1, 2, 3, 4}))
      .in(f32({2, 2}, {5, 6, 7, 8}))
      .out(DType::F32, {2, 2});
  ASSERT_EQ(mm.run(), "");
  expectNear(mm.result(), {19, 22, 43, 50});

  // lhs^T: [[1, 3], [2, 4]] x [[5, 6], [7, 8]].
  Call tl("dtc.matmul");
  tl.flag("transpose_lhs")
      .in(f32({2, 2}, {1, 2, 3, 4}))
      .in(f32({2, 2}, {5, 6, 7, 8}))
      .out(DType::F32, {2, 2});
  ASSERT_EQ(tl.run(), "");
  expectNear(tl.result(), {26, 30, 38, 44});
}

/// The kernel-table choice (runtime/cpu/Blas.h): its rule, and that a
/// switched table still computes the product (checked against a naive loop
/// on a problem large enough for OpenBLAS's packed kernels).
TEST(CpuBlas, PreferredCoreRule) {
  EXPECT_EQ(cpu::preferredOpenBlasCore("Cooperlake", "SkylakeX"), "SkylakeX");
  EXPECT_EQ(cpu::preferredOpenBlasCore("COOPERLAKE", "SkylakeX"), "SkylakeX");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Cooperlake", "Haswell"), "Cooperlake");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Haswell", "SkylakeX"), "Haswell");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Zen", "Haswell"), "Zen");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Zen", "SkylakeX"), "Zen");
  // OpenBLAS's fallbacks for a CPU it does not recognize give way to the
  // widest table the CPU runs; on an old CPU they stay.
  EXPECT_EQ(cpu::preferredOpenBlasCore("Prescott", "SkylakeX"), "SkylakeX");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Nehalem", "Haswell"), "Haswell");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Sandybridge", "Haswell"), "Haswell");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Sandybridge", "Sandybridge"),
            "Sandybridge");
  EXPECT_EQ(cpu::preferredOpenBlasCore("Prescott", "Prescott"), "Prescott");
  EXPECT_TRUE(cpu::cpuRunsOpenBlasCore(cpu::widestOpenBlasCore()));
  EXPECT_FALSE(cpu::cpuRunsOpenBlasCore("NoSuchCore"));
  EXPECT_TRUE(cpu::cpuRunsOpenBlasCore("Prescott"));
}

TEST(CpuBlas, SwitchedTablesComputeTheProduct) {
  registry(); // makes the backend's choice
  const cpu::BlasKernels &chosen = cpu::chooseBlasKernels();
  ASSERT_FALSE(chosen.used.empty());
  const int64_t m = 96, n = 80, k = 300;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> a(m * k), b(k * n);
  for (float &x : a)
    x = uniform(rng);
  for (float &x : b)
    x = uniform(rng);
  std::vector<float> expected(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l)
        sum += double(a[i * k + l]) * b[l * n + j];
      expected[i * n + j] = static_cast<float>(sum);
    }
  auto product = [&] {
    Call mm("dtc.matmul");
    mm.in(f32({m, k}, a)).in(f32({k, n}, b)).out(DType::F32, {m, n});
    EXPECT_EQ(mm.run(), "");
    return mm.result();
  };
  int switched = 0;
  for (const char *core : {"Sandybridge", "Haswell", "Zen", "SkylakeX"}) {
    if (!cpu::cpuRunsOpenBlasCore(core))
      continue;
    ASSERT_TRUE(cpu::useOpenBlasCore(core)) << core;
    ++switched;
    std::vector<float> got = product();
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_NEAR(got[i], expected[i], 1e-4f) << core << " element " << i;
  }
  EXPECT_GT(switched, 0) << "no table this x86-64 CPU runs";
  EXPECT_FALSE(cpu::useOpenBlasCore("NoSuchCore"));
  // Back to the backend's choice, which the other tests use.
  ASSERT_TRUE(cpu::useOpenBlasCore(chosen.used));
}

/// Naive batched matmul with numpy broadcasting of batch dims [B1, B2]
/// (lhs [1, B2, ...] against rhs [B1, 1, ...]).
TEST(CpuLinalg, TransposedMatmulWithBatchBroadcast) {
  int64_t b1 = 3, b2 = 2, m = 4, k = 5, n = 6;
  Tensor lhs = random({1, b2, m, k}, 1);
  Tensor rhs = random({b1, 1, n, k}, 2); // transposed: [n, k]
  Call mm("dtc.matmul");
  mm.flag("transpose_rhs").in(lhs).in(rhs).out(DType::F32, {b1, b2, m, n});
  ASSERT_EQ(mm.run(), "");
  std::vector<float> expected;
  for (int64_t x = 0; x < b1; ++x)
    for (int64_t y = 0; y < b2; ++y)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p)
            sum += lhs.as<float>()[(y * m + i) * k + p] *
                   rhs.as<float>()[(x * n + j) * k + p];
          expected.push_back(static_cast<float>(sum));
        }
  expectNear(mm.result(), expected);

  // Batch folded into m: [2, 3, k] x [k, n].
  Tensor a = random({2, 3, k}, 3), w = random({k, n}, 4);
  Call fold("dtc.matmul");
  fold.in(a).in(w).out(DType::F32, {2, 3, n});
  ASSERT_EQ(fold.run(), "");
  std::vector<float> folded;
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += a.as<float>()[r * k + p] * w.as<float>()[p * n + j];
      folded.push_back(static_cast<float>(sum));
    }
  expectNear(fold.result(), folded);
}

TEST(CpuLinalg, MatmulShapeMismatchIsAnError) {
  Call mm("dtc.matmul");
  mm.in(f32({2, 3}, {1, 2, 3, 4, 5, 6}))
      .in(f32({2, 2}, {1, 2, 3, 4}))
      .out(DType::F32, {2, 2});
  std::string err = mm.run();
  EXPECT_NE(err.find("inconsistent"), std::string::npos) << err;
}

TEST(CpuLinalg, Reductions) {
  // x[i][j][k] = 100 i + 10 j + k over [2, 3, 2].
  std::vector<float> x;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k)
        x.push_back(100 * i + 10 * j + k);
  Call sum("dtc.reduce_sum");
  sum.ints("dims", {0, 2}).in(f32({2, 3, 2}, x)).out(DType::F32, {3});
  ASSERT_EQ(sum.run(), "");
  // Sum over i, k of 100 i + 10 j + k = 200 + 40 j + 2.
  expectNear(sum.result(), {202, 242, 282});

  Call mean("dtc.reduce_mean");
  mean.ints("dims", {1})
      .flag("keep_dims")
      .in(f32({2, 3, 2}, x))
      .out(DType::F32, {2, 1, 2});
  ASSERT_EQ(mean.run(), "");
  expectNear(mean.result(), {10, 11, 110, 111});

  Call mx("dtc.reduce_max");
  mx.ints("dims", {2}).in(f32({2, 3, 2}, x)).out(DType::F32, {2, 3});
  ASSERT_EQ(mx.run(), "");
  expectNear(mx.result(), {1, 11, 21, 101, 111, 121});

  Call isum("dtc.reduce_sum");
  isum.ints("dims", {0}).in(i64({2, 2}, {1, 2, 3, 4})).out(DType::I64, {2});
  ASSERT_EQ(isum.run(), "");
  EXPECT_EQ(isum.outputs[0].as<int64_t>()[0], 4);
  EXPECT_EQ(isum.outputs[0].as<int64_t>()[1], 6);
}

//===----------------------------------------------------------------------===//
// Softmax and normalizations
//===----------------------------------------------------------------------===//

TEST(CpuNorm, Softmax) {
  float ln3 = std::log(3.0f);
  Call last("dtc.softmax");
  last.i("axis", 1).in(f32({2, 2}, {0, ln3, 5, 5})).out(DType::F32, {2, 2});
  ASSERT_EQ(last.run(), "");
  expectNear(last.result(), {0.25f, 0.75f, 0.5f, 0.5f});

  // Over axis 0 (strided): columns [0, ln3] and [1, 1].
  Call first("dtc.softmax");
  first.i("axis", 0).in(f32({2, 2}, {0, 1, ln3, 1})).out(DType::F32, {2, 2});
  ASSERT_EQ(first.run(), "");
  expectNear(first.result(), {0.25f, 0.5f, 0.75f, 0.5f});

  // Large logits do not overflow.
  Call big("dtc.softmax");
  big.i("axis", 0).in(f32({2}, {1000, 1000})).out(DType::F32, {2});
  ASSERT_EQ(big.run(), "");
  expectNear(big.result(), {0.5f, 0.5f});
}

TEST(CpuNorm, LayerNorm) {
  // Row [1, 2, 3, 4]: mean 2.5, variance 1.25.
  float a = 1.5f / std::sqrt(1.25f), b = 0.5f / std::sqrt(1.25f);
  Call ln("dtc.layer_norm");
  ln.i("axis", 1)
      .f("epsilon", 0.0)
      .in(f32({2, 4}, {1, 2, 3, 4, 5, 5, 5, 5}))
      .in(f32({4}, {1, 1, 2, 2}))
      .in(f32({4}, {0, 0, 1, 1}))
      .out(DType::F32, {2, 4});
  ASSERT_EQ(ln.run(), "");
  std::vector<float> got = ln.result();
  expectNear({got.begin(), got.begin() + 4}, {-a, -b, 2 * b + 1, 2 * a + 1});
  // A constant row with epsilon 0 gives 0/0: NaN, as in PyTorch.
  EXPECT_TRUE(std::isnan(got[4]));

  // No bias, epsilon 1: (x - 2.5) / sqrt(2.25) over [1, 2, 3, 4].
  Call noBias("dtc.layer_norm");
  noBias.i("axis", 0)
      .f("epsilon", 1.0)
      .in(f32({4}, {1, 2, 3, 4}))
      .in(f32({4}, {1, 1, 1, 1}))
      .out(DType::F32, {4});
  ASSERT_EQ(noBias.run(), "");
  expectNear(noBias.result(), {-1.0f, -1.0f / 3, 1.0f / 3, 1.0f});
}

TEST(CpuNorm, RmsNorm) {
  // [3, 4]: mean square 12.5.
  float rms = std::sqrt(12.5f);
  Call n("dtc.rms_norm");
  n.i("axis", 1)
      .f("epsilon", 0.0)
      .in(f32({1, 2}, {3, 4}))
      .in(f32({2}, {1, 2}))
      .out(DType::F32, {1, 2});
  ASSERT_EQ(n.run(), "");
  expectNear(n.result(), {3 / rms, 8 / rms});
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST(CpuDataMovement, ReshapeTransposeConcatSlice) {
  std::vector<float> x = {0, 1, 2, 3, 4, 5};
  Call rs("dtc.reshape");
  rs.in(f32({2, 3}, x)).out(DType::F32, {3, 2});
  ASSERT_EQ(rs.run(), "");
  expectNear(rs.result(), x);

  Call tr("dtc.transpose");
  tr.ints("permutation", {1, 0}).in(f32({2, 3}, x)).out(DType::F32, {3, 2});
  ASSERT_EQ(tr.run(), "");
  expectNear(tr.result(), {0, 3, 1, 4, 2, 5});

  // [2, 3, 2] with permutation (2, 0, 1) -> [2, 2, 3].
  std::vector<float> y(12);
  for (int j = 0; j < 12; ++j)
    y[j] = j;
  Call tr3("dtc.transpose");
  tr3.ints("permutation", {2, 0, 1})
      .in(f32({2, 3, 2}, y))
      .out(DType::F32, {2, 2, 3});
  ASSERT_EQ(tr3.run(), "");
  expectNear(tr3.result(), {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11});

  Call cat("dtc.concat");
  cat.i("axis", 1)
      .in(f32({2, 1}, {0, 1}))
      .in(f32({2, 2}, {2, 3, 4, 5}))
      .out(DType::F32, {2, 3});
  ASSERT_EQ(cat.run(), "");
  expectNear(cat.result(), {0, 2, 3, 1, 4, 5});

  // Rows 0..2 step 1, columns 0..3 step 2 of [2, 3]: [[0, 2], [3, 5]].
  Call sl("dtc.slice");
  sl.ints("starts", {0, 0})
      .ints("limits", {2, 3})
      .ints("strides", {1, 2})
      .in(f32({2, 3}, x))
      .out(DType::F32, {2, 2});
  ASSERT_EQ(sl.run(), "");
  expectNear(sl.result(), {0, 2, 3, 5});

  Call sl2("dtc.slice");
  sl2.ints("starts", {1, 1})
      .ints("limits", {2, 3})
      .ints("strides", {1, 1})
      .in(i64({2, 3}, {0, 1, 2, 3, 4, 5}))
      .out(DType::I64, {1, 2});
  ASSERT_EQ(sl2.run(), "");
  EXPECT_EQ(sl2.outputs[0].as<int64_t>()[0], 4);
  EXPECT_EQ(sl2.outputs[0].as<int64_t>()[1], 5);
}

TEST(CpuDataMovement, Embedding) {
  Tensor table = f32({3, 2}, {0, 1, 10, 11, 20, 21});
  Call emb("dtc.embedding");
  emb.in(table).in(i64({2, 2}, {2, 0, 1, 2})).out(DType::F32, {2, 2, 2});
  ASSERT_EQ(emb.run(), "");
  expectNear(emb.result(), {20, 21, 0, 1, 10, 11, 20, 21});

  Call emb32("dtc.embedding");
  emb32.in(table)
      .in(ints<int32_t>(DType::I32, {1}, {1}))
      .out(DType::F32, {1, 2});
  ASSERT_EQ(emb32.run(), "");
  expectNear(emb32.result(), {10, 11});

  Call bad("dtc.embedding");
  bad.in(table).in(i64({2}, {0, 5})).out(DType::F32, {2, 2});
  std::string err = bad.run();
  EXPECT_NE(err.find("id 5 at position 1 is out of range [0, 3)"),
            std::string::npos)
      << err;
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

TEST(CpuConvPool, ConvByHand) {
  // 3x3 input 1..9, 2x2 kernel of ones, no padding: window sums.
  Call conv("dtc.conv");
  conv.ints("strides", {1, 1})
      .ints("dilations", {1, 1})
      .ints("pads", {0, 0, 0, 0})
      .in(f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}))
      .in(f32({1, 1, 2, 2}, {1, 1, 1, 1}))
      .in(f32({1}, {0.5f}))
      .out(DType::F32, {1, 1, 2, 2});
  ASSERT_EQ(conv.run(), "");
  expectNear(conv.result(), {12.5f, 16.5f, 24.5f, 28.5f});

  // Padding 1 on every side, stride 2: corners of the padded input.
  Call padded("dtc.conv");
  padded.ints("strides", {2, 2})
      .ints("dilations", {1, 1})
      .ints("pads", {1, 1, 1, 1})
      .in(f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}))
      .in(f32({1, 1, 2, 2}, {1, 1, 1, 1}))
      .out(DType::F32, {1, 1, 2, 2});
  ASSERT_EQ(padded.run(), "");
  expectNear(padded.result(), {1, 5, 11, 28});
}

TEST(CpuConvPool, OneByOneConvWithOppositeEndPads) {
  // A 1x1 kernel of 1 over a 2x3 input, end pads +1 rows and -1 columns:
  // the result is 3x2, as many positions as the input has but not the
  // input itself; the padded row reads zeros, the last column is cut.
  Call conv("dtc.conv");
  conv.ints("pads", {0, 0, 1, -1})
      .in(f32({1, 1, 2, 3}, {1, 2, 3, 4, 5, 6}))
      .in(f32({1, 1, 1, 1}, {1}))
      .out(DType::F32, {1, 1, 3, 2});
  ASSERT_EQ(conv.run(), "");
  expectNear(conv.result(), {1, 2, 4, 5, 0, 0});
}

// Window ops write float results from float operands only: an integer
// result (which a kernel would leave unwritten) or bias is refused.
TEST(CpuConvPool, NonFloatResultsAndBiasesAreRefused) {
  Call pool("dtc.max_pool");
  pool.ints("kernel_shape", {2})
      .in(f32({1, 1, 4}, {1, 2, 3, 4}))
      .out(DType::I32, {1, 1, 3});
  EXPECT_NE(pool.run().find("result has unsupported dtype i32"),
            std::string::npos);
  Call avgGrad("dtc.avg_pool_grad");
  avgGrad.ints("kernel_shape", {2})
      .ints("input_shape", {1, 1, 4})
      .in(f32({1, 1, 3}, {1, 2, 3}))
      .out(DType::I64, {1, 1, 4});
  EXPECT_NE(avgGrad.run().find("result has unsupported dtype i64"),
            std::string::npos);
  Call conv("dtc.conv");
  conv.in(f32({1, 1, 3}, {1, 2, 3}))
      .in(f32({1, 1, 1}, {1}))
      .in(i64({1}, {1}))
      .out(DType::F32, {1, 1, 3});
  EXPECT_NE(conv.run().find("bias has unsupported dtype i64"),
            std::string::npos);
}

TEST(CpuConvPool, GroupedDilatedConvMatchesNaiveLoop) {
  int64_t n = 2, c = 4, f = 6, groups = 2, h = 7, w = 6, kh = 3, kw = 2;
  int64_t sh = 2, sw = 1, dh = 2, dw = 2, pt = 1, pl = 0, pb = 2, pr = 1;
  int64_t oh = (h + pt + pb - dh * (kh - 1) - 1) / sh + 1;
  int64_t ow = (w + pl + pr - dw * (kw - 1) - 1) / sw + 1;
  Tensor x = random({n, c, h, w}, 5);
  Tensor wt = random({f, c / groups, kh, kw}, 6);
  Tensor bias = random({f}, 7);
  Call conv("dtc.conv");
  conv.ints("strides", {sh, sw})
      .ints("dilations", {dh, dw})
      .ints("pads", {pt, pl, pb, pr})
      .i("groups", groups)
      .in(x)
      .in(wt)
      .in(bias)
      .out(DType::F32, {n, f, oh, ow});
  ASSERT_EQ(conv.run(), "");
  std::vector<float> expected;
  int64_t cg = c / groups, fg = f / groups;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < f; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double sum = bias.as<float>()[o];
          int64_t g = o / fg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                int64_t iy = y * sh + p * dh - pt, iz = z * sw + q * dw - pl;
                if (iy < 0 || iy >= h || iz < 0 || iz >= w)
                  continue;
                sum +=
                    x.as<float>()[((b * c + g * cg + ci) * h + iy) * w + iz] *
                    wt.as<float>()[((o * cg + ci) * kh + p) * kw + q];
              }
          expected.push_back(static_cast<float>(sum));
        }
  expectNear(conv.result(), expected);
}

TEST(CpuConvPool, Pools) {
  // 3x3 input 1..9, 2x2 windows, stride 1, pad 1 at the end of each dim.
  Tensor x = f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Call mx("dtc.max_pool");
  mx.ints("kernel_shape", {2, 2})
      .ints("strides", {1, 1})
      .ints("dilations", {1, 1})
      .ints("pads", {0, 0, 1, 1})
      .in(x)
      .out(DType::F32, {1, 1, 3, 3});
  ASSERT_EQ(mx.run(), "");
  expectNear(mx.result(), {5, 6, 6, 8, 9, 9, 8, 9, 9});

  Call avg("dtc.avg_pool");
  avg.ints("kernel_shape", {2, 2})
      .ints("strides", {1, 1})
      .ints("dilations", {1, 1})
      .ints("pads", {0, 0, 1, 1})
      .in(x)
      .out(DType::F32, {1, 1, 3, 3});
  ASSERT_EQ(avg.run(), "");
  // Padding is excluded from the count: the last column averages 2 taps.
  expectNear(avg.result(), {3, 4, 4.5f, 6, 7, 7.5f, 7.5f, 8.5f, 9});

  Call incl("dtc.avg_pool");
  incl.ints("kernel_shape", {2, 2})
      .ints("strides", {1, 1})
      .ints("dilations", {1, 1})
      .ints("pads", {0, 0, 1, 1})
      .flag("count_include_pad")
      .in(x)
      .out(DType::F32, {1, 1, 3, 3});
  ASSERT_EQ(incl.run(), "");
  expectNear(incl.result(), {3, 4, 2.25f, 6, 7, 3.75f, 3.75f, 4.25f, 2.25f});
}

//===----------------------------------------------------------------------===//
// Attention and cross-entropy
//===----------------------------------------------------------------------===//

/// Naive attention from the op definition, in double.
std::vector<float> naiveAttention(const Tensor &q, const Tensor &k,
                                  const Tensor &v, bool causal, double scale) {
  int64_t B = q.shape()[0], H = q.shape()[1], S = q.shape()[2],
          D = q.shape()[3], G = k.shape()[1], T = k.shape()[2],
          E = v.shape()[3];
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      int64_t g = h / (H / G);
      for (int64_t s = 0; s < S; ++s) {
        std::vector<double> p(T);
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t < T; ++t) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i)
            dot += q.as<float>()[((b * H + h) * S + s) * D + i] *
                   k.as<float>()[((b * G + g) * T + t) * D + i];
          p[t] = causal && t > s ? -INFINITY : dot * scale;
          mx = std::max(mx, p[t]);
        }
        for (int64_t t = 0; t < T; ++t)
          sum += (p[t] = std::exp(p[t] - mx));
        for (int64_t e = 0; e < E; ++e) {
          double acc = 0;
          for (int64_t t = 0; t < T; ++t)
            acc += p[t] / sum * v.as<float>()[((b * G + g) * T + t) * E + e];
          out.push_back(static_cast<float>(acc));
        }
      }
    }
  return out;
}

TEST(CpuTransformer, GqaCausalAttentionMatchesNaiveLoop) {
  int64_t b = 2, h = 4, g = 2, s = 5, d = 8, e = 3;
  Tensor q = random({b, h, s, d}, 11), k = random({b, g, s, d}, 12),
         v = random({b, g, s, e}, 13);
  Call causal("dtc.attention");
  causal.flag("causal")
      .f("scale", 1 / std::sqrt(double(d)))
      .in(q)
      .in(k)
      .in(v)
      .out(DType::F32, {b, h, s, e});
  ASSERT_EQ(causal.run(), "");
  expectNear(causal.result(),
             naiveAttention(q, k, v, true, 1 / std::sqrt(double(d))));
  // The first query position sees only the first key: its output is v[0].
  for (int64_t j = 0; j < e; ++j)
    EXPECT_NEAR(causal.result()[j], v.as<float>()[j], 1e-6);

  // MQA, not causal, explicit scale, more keys than queries.
  Tensor k1 = random({b, 1, 7, d}, 14), v1 = random({b, 1, 7, e}, 15);
  Call mqa("dtc.attention");
  mqa.f("scale", 0.3).in(q).in(k1).in(v1).out(DType::F32, {b, h, s, e});
  ASSERT_EQ(mqa.run(), "");
  expectNear(mqa.result(), naiveAttention(q, k1, v1, false, 0.3));
}

TEST(CpuTransformer, CrossEntropyWithIgnoreIndex) {
  float ln3 = std::log(3.0f);
  // Row 0: uniform over 2 -> ln 2; row 1 ignored; row 2: p(label) = 0.75.
  Call ce("dtc.cross_entropy");
  ce.i("ignore_index", -100)
      .in(f32({3, 2}, {0, 0, 7, 9, 0, ln3}))
      .in(i64({3}, {0, -100, 1}))
      .out(DType::F32, {});
  ASSERT_EQ(ce.run(), "");
  EXPECT_NEAR(ce.result()[0], (std::log(2.0) - std::log(0.75)) / 2, 1e-6);

  // A custom ignore_index and [b, s, v] logits.
  Call ce3("dtc.cross_entropy");
  ce3.i("ignore_index", 1)
      .in(f32({1, 2, 2}, {0, 0, 0, ln3}))
      .in(i64({1, 2}, {1, 1}))
      .out(DType::F32, {});
  ASSERT_EQ(ce3.run(), "");
  // Every label ignored: NaN, as PyTorch's mean over no elements.
  EXPECT_TRUE(std::isnan(ce3.result()[0]));

  Call bad("dtc.cross_entropy");
  bad.i("ignore_index", -100)
      .in(f32({1, 2}, {0, 0}))
      .in(i64({1}, {2}))
      .out(DType::F32, {});
  std::string err = bad.run();
  EXPECT_NE(err.find("label 2 at position 0 is out of range"),
            std::string::npos)
      << err;
}

/// Raw output bytes of `call` run with `threads` threads.
std::vector<char> bytesWithThreads(Call &call, int threads) {
  int saved = threadCount();
  setThreadCount(threads);
  std::string err = call.run();
  setThreadCount(saved);
  EXPECT_EQ(err, "") << call.inst.op();
  const Tensor &out = call.outputs[0];
  const char *data = static_cast<const char *>(out.data());
  return std::vector<char>(data, data + out.bytes());
}

TEST(CpuKernels, ResultsDoNotDependOnTheThreadCount) {
  // Sizes above every kernel's threading threshold.
  std::vector<Call> calls;
  calls.emplace_back("dtc.matmul");
  calls.back()
      .in(random({4, 150, 96}, 21))
      .in(random({96, 300}, 22))
      .out(DType::F32, {4, 150, 300});
  calls.emplace_back("dtc.matmul");
  calls.back()
      .flag("transpose_rhs")
      .in(random({6, 130, 64}, 23))
      .in(random({6, 270, 64}, 24))
      .out(DType::F32, {6, 130, 270});
  calls.emplace_back("dtc.attention");
  calls.back()
      .flag("causal")
      .f("scale", 1 / std::sqrt(32.0))
      .in(random({2, 4, 150, 32}, 25))
      .in(random({2, 2, 150, 32}, 26))
      .in(random({2, 2, 150, 32}, 27))
      .out(DType::F32, {2, 4, 150, 32});
  calls.emplace_back("dtc.softmax");
  calls.back()
      .i("axis", 1)
      .in(random({300, 500}, 28))
      .out(DType::F32, {300, 500});
  calls.emplace_back("dtc.layer_norm");
  calls.back()
      .i("axis", 1)
      .f("epsilon", 1e-5)
      .in(random({300, 500}, 29))
      .in(random({500}, 30))
      .in(random({500}, 31))
      .out(DType::F32, {300, 500});
  calls.emplace_back("dtc.reduce_sum");
  calls.back()
      .ints("dims", {0})
      .in(random({700, 300}, 32))
      .out(DType::F32, {300});
  Tensor labels(DType::I64, {300});
  for (int64_t j = 0; j < 300; ++j)
    labels.as<int64_t>()[j] = j % 7 == 0 ? -100 : j % 500;
  calls.emplace_back("dtc.cross_entropy");
  calls.back()
      .i("ignore_index", -100)
      .in(random({300, 500}, 33))
      .in(labels)
      .out(DType::F32, {});
  calls.emplace_back("dtc.conv");
  calls.back()
      .ints("strides", {1, 1})
      .ints("dilations", {1, 1})
      .ints("pads", {1, 1, 1, 1})
      .in(random({2, 8, 40, 40}, 34))
      .in(random({16, 8, 3, 3}, 35))
      .out(DType::F32, {2, 16, 40, 40});
  for (Call &call : calls) {
    std::vector<char> one = bytesWithThreads(call, 1);
    EXPECT_EQ(one, bytesWithThreads(call, 2)) << call.inst.op();
    EXPECT_EQ(one, bytesWithThreads(call, 3)) << call.inst.op();
  }
}

// A program whose MoE operands disagree in shape (hand-written, or
// corrupted) is refused by name instead of read or written out of bounds.
TEST(CpuMoe, MismatchedShapesAreRefused) {
  Tensor rows = random({1, 3, 2, 4}, 301), gates = random({1, 5, 3}, 302);
  Tensor slots = i64({1, 3, 2}, {0, 1, 2, -1, 4, 3});
  auto combine = [&](const Tensor &g, const Tensor &sl) {
    return Call("dtc.moe_combine")
        .in(rows)
        .in(sl)
        .in(g)
        .out(DType::F32, {1, 5, 4});
  };
  EXPECT_EQ(combine(gates, slots).run(), "");
  EXPECT_NE(combine(random({1, 5, 2}, 303), slots).run().find("gates"),
            std::string::npos);
  EXPECT_NE(combine(gates, i64({1, 2, 2}, {0, 1, 2, 3})).run().find("slots"),
            std::string::npos);
  // Slots of another batch than the input's.
  Call dispatch("dtc.moe_dispatch");
  dispatch.in(random({2, 5, 4}, 304)).in(slots).out(DType::F32, {2, 3, 2, 4});
  EXPECT_NE(dispatch.run().find("do not match a batch of 2"),
            std::string::npos);
  Call route("dtc.moe_route");
  route.i("top_k", 1).i("capacity", 2);
  (*route.inst.mutable_attrs())["score"].set_s("softmax");
  route.in(random({1, 5, 3}, 305))
      .out(DType::F32, {1, 5, 2})
      .out(DType::I64, {1, 3, 2})
      .out(DType::F32, {1});
  EXPECT_NE(route.run().find("gates has shape"), std::string::npos);
}

/// dtc.moe_route of `logits` [b, s, E] with `score` scores into `gates`
/// [b, s, E] (of `gatesDtype`), i64 slots [b, E, capacity] and an f32 aux
/// loss per sequence.
Call moeRoute(const Tensor &logits, int64_t topK, int64_t capacity,
              const std::string &score, DType gatesDtype = DType::F32) {
  Call route("dtc.moe_route");
  route.i("top_k", topK).i("capacity", capacity);
  (*route.inst.mutable_attrs())["score"].set_s(score);
  int64_t batch = logits.shape()[0], experts = logits.shape()[2];
  route.in(logits)
      .out(gatesDtype, logits.shape())
      .out(DType::I64, {batch, experts, capacity})
      .out(DType::F32, {batch});
  return route;
}

// A NaN score (a NaN logit under sigmoid scores) is chosen as the CUDA
// kernel chooses it: when it is the first expert not yet chosen, else
// passed over. (A sort by comparisons NaN breaks was undefined behaviour.)
TEST(CpuMoe, NanScoresAreChosenAsOnCuda) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Call route =
      moeRoute(f32({1, 3, 4}, {1, nan, 2, 0, nan, 1, 3, 2, 2, nan, 1, 0}), 2, 3,
               "sigmoid");
  ASSERT_EQ(route.run(), "");
  // Token 0 chooses experts 2 then 0, token 1 experts 0 then 2, token 2
  // experts 0 then 1. Slots fill by choice rank, then position.
  EXPECT_EQ(route.result(1),
            std::vector<float>({1, 2, 0, 2, -1, -1, 0, 1, -1, -1, -1, -1}));
  std::vector<bool> gated;
  for (float gate : route.result(0))
    gated.push_back(gate != 0);
  EXPECT_EQ(gated, std::vector<bool>({true, false, true, false, true, false,
                                      true, false, true, true, false, false}));
}

// Sequences of no tokens route nothing and have no load-balancing loss
// (not 0 / 0).
TEST(CpuMoe, EmptySequencesHaveNoAuxLoss) {
  Call route = moeRoute(Tensor(DType::F32, {2, 0, 4}), 2, 1, "softmax");
  ASSERT_EQ(route.run(), "");
  EXPECT_EQ(route.result(1), std::vector<float>(8, -1.0f));
  EXPECT_EQ(route.result(2), std::vector<float>({0, 0}));
}

// The kernels write float results only; an integer one (which they would
// leave unwritten) is refused, as the CUDA kernels refuse it.
TEST(CpuMoe, NonFloatResultsAreRefused) {
  Tensor logits = random({1, 5, 3}, 306);
  EXPECT_NE(moeRoute(logits, 1, 2, "softmax", DType::I32)
                .run()
                .find("gates has unsupported dtype i32"),
            std::string::npos);
  Call dispatch("dtc.moe_dispatch");
  dispatch.in(logits)
      .in(i64({1, 3, 2}, {0, 1, 2, -1, 4, 3}))
      .out(DType::I64, {1, 3, 2, 3});
  EXPECT_NE(dispatch.run().find("result has unsupported dtype i64"),
            std::string::npos);
}

// Every op having a kernel is checked by walking the dialect's registry
// (KernelCoverageTest.cpp), not by a list here.

} // namespace
