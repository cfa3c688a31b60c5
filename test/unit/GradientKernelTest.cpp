//===- GradientKernelTest.cpp - CPU gradient and optimizer kernels --------===//
//
// Each gradient kernel is checked against a finite difference of its forward
// function, written here as a plain loop in double precision: for a random
// output gradient w and a random direction u, the kernel's <dx, u> must
// match (L(x + h u) - L(x - h u)) / 2h with L(x) = <forward(x), w>. AdamW is
// checked against a hand-written two-step update, compare and select
// against hand values. Where engineer A's forward kernel is registered, it
// is also checked against the forward written here, so that the gradient
// and the forward op agree on conventions (causal alignment, padding, ...).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using dtc::runtime::DType;
using dtc::runtime::KernelCall;
using dtc::runtime::KernelFn;
using dtc::runtime::KernelRegistry;
using dtc::runtime::Tensor;
using dtc::runtime::TensorRef;
using dtc::runtime::cpu::setThreadCount;
using dtc::runtime::cpu::threadCount;
using Vec = std::vector<double>;
using Shape = std::vector<int64_t>;

int64_t count(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// An instruction under construction: op name and attributes.
struct Op {
  dtc::program::Instruction inst;
  explicit Op(const std::string &name) { inst.set_op(name); }
  Op &i(const std::string &name, int64_t v) {
    (*inst.mutable_attrs())[name].set_i(v);
    return *this;
  }
  Op &f(const std::string &name, double v) {
    (*inst.mutable_attrs())[name].set_f(v);
    return *this;
  }
  Op &b(const std::string &name) {
    (*inst.mutable_attrs())[name].set_b(true);
    return *this;
  }
  Op &s(const std::string &name, const std::string &v) {
    (*inst.mutable_attrs())[name].set_s(v);
    return *this;
  }
  Op &ints(const std::string &name, const Shape &v) {
    auto *values = (*inst.mutable_attrs())[name].mutable_ints();
    for (int64_t x : v)
      values->add_values(x);
    return *this;
  }
};

Tensor f32(const Shape &shape, const Vec &values) {
  Tensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.as<float>()[i] = static_cast<float>(values[i]);
  return t;
}

Tensor i64(const Shape &shape, const std::vector<int64_t> &values) {
  Tensor t(DType::I64, shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.as<int64_t>()[i] = values[i];
  return t;
}

Vec toVec(const Tensor &t) {
  Vec v(t.numElements());
  for (int64_t i = 0; i < t.numElements(); ++i)
    v[i] = dtc::runtime::loadAsFloat(t.ref(), i);
  return v;
}

/// Uniform values in [-1, 1), rounded to f32 so the kernel (which sees the
/// f32 tensor) and the double forward read the same numbers.
Vec randomVec(std::mt19937 &rng, int64_t n, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double &x : v)
    x = static_cast<float>(dist(rng));
  return v;
}

double dotVec(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

class GradientKernelTest : public ::testing::Test {
protected:
  GradientKernelTest() : rng(1234) {
    dtc::runtime::cpu::registerCpuKernels(registry);
  }

  /// Runs `op` on `inputs`; outputs are allocated as `outputs` (dtype,
  /// shape). Throws (a test failure) when the kernel is missing or fails.
  std::vector<Tensor> run(const Op &op, const std::vector<Tensor> &inputs,
                          const std::vector<std::pair<DType, Shape>> &outputs) {
    std::vector<Tensor> results;
    for (const auto &[dtype, shape] : outputs)
      results.emplace_back(dtype, shape);
    if (llvm::Error err = tryRun(op, inputs, results))
      throw std::runtime_error(llvm::toString(std::move(err)));
    return results;
  }

  llvm::Error tryRun(const Op &op, const std::vector<Tensor> &inputs,
                     std::vector<Tensor> &outputs) {
    KernelFn fn = registry.lookup(op.inst.op());
    if (!fn)
      throw std::runtime_error("no kernel for " + op.inst.op());
    std::vector<TensorRef> in, out;
    for (const Tensor &t : inputs)
      in.push_back(t.ref());
    for (Tensor &t : outputs)
      out.push_back(t.ref());
    return fn(KernelCall(op.inst, in, out));
  }

  /// The kernel's error message, or "" when it succeeds.
  std::string errorOf(const Op &op, const std::vector<Tensor> &inputs,
                      const std::vector<std::pair<DType, Shape>> &outputs) {
    std::vector<Tensor> results;
    for (const auto &[dtype, shape] : outputs)
      results.emplace_back(dtype, shape);
    llvm::Error err = tryRun(op, inputs, results);
    return err ? llvm::toString(std::move(err)) : "";
  }

  /// Checks <grad, u> against the central difference of `loss` along a
  /// random direction u of input `which` of `inputs`.
  void
  checkDirectional(const std::function<double(const std::vector<Vec> &)> &loss,
                   std::vector<Vec> inputs, size_t which, const Vec &grad,
                   const std::string &what) {
    ASSERT_EQ(grad.size(), inputs[which].size()) << what;
    Vec dir = randomVec(rng, grad.size());
    const double h = 1e-4;
    Vec base = inputs[which];
    for (size_t i = 0; i < base.size(); ++i)
      inputs[which][i] = base[i] + h * dir[i];
    double plus = loss(inputs);
    for (size_t i = 0; i < base.size(); ++i)
      inputs[which][i] = base[i] - h * dir[i];
    double minus = loss(inputs);
    double numeric = (plus - minus) / (2 * h);
    double analytic = dotVec(grad, dir);
    double scale = 0;
    for (size_t i = 0; i < grad.size(); ++i)
      scale += std::abs(grad[i] * dir[i]);
    EXPECT_NEAR(analytic, numeric, 1e-3 * (std::abs(numeric) + scale) + 1e-7)
        << what;
  }

  /// When `op`'s forward kernel is registered, checks it against `expected`
  /// (this file's forward).
  void checkForward(const Op &op, const std::vector<Tensor> &inputs,
                    const Shape &shape, const Vec &expected) {
    if (!registry.lookup(op.inst.op()))
      return;
    Tensor out = run(op, inputs, {{DType::F32, shape}})[0];
    Vec got = toVec(out);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], expected[i], 1e-5 * (1 + std::abs(expected[i])))
          << op.inst.op() << " forward at " << i;
  }

  KernelRegistry registry;
  std::mt19937 rng;
};

//===----------------------------------------------------------------------===//
// Forward functions in double
//===----------------------------------------------------------------------===//

/// [outer, size, inner] view of a tensor split at `axis`.
struct AxisView {
  int64_t outer = 1, size = 1, inner = 1;
  AxisView(const Shape &shape, int64_t axis) {
    for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
      (i < axis ? outer : i == axis ? size : inner) *= shape[i];
  }
};

Vec softmax(const Vec &x, const Shape &shape, int64_t axis) {
  AxisView v(shape, axis);
  Vec y(x.size());
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t in = 0; in < v.inner; ++in) {
      auto at = [&](int64_t j) { return (o * v.size + j) * v.inner + in; };
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < v.size; ++j)
        mx = std::max(mx, x[at(j)]);
      for (int64_t j = 0; j < v.size; ++j)
        sum += std::exp(x[at(j)] - mx);
      for (int64_t j = 0; j < v.size; ++j)
        y[at(j)] = std::exp(x[at(j)] - mx) / sum;
    }
  return y;
}

/// layer_norm (with bias) or rms_norm over rows of `n`.
Vec norm(const Vec &x, const Vec &w, const Vec *bias, int64_t n, double eps,
         bool rms) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < n; ++j)
        mean += x[r * n + j];
      mean /= n;
    }
    for (int64_t j = 0; j < n; ++j)
      var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
    var /= n;
    for (int64_t j = 0; j < n; ++j)
      y[r * n + j] = (x[r * n + j] - mean) / std::sqrt(var + eps) * w[j] +
                     (bias ? (*bias)[j] : 0.0);
  }
  return y;
}

struct AttentionDims {
  int64_t B, H, G, S, T, D, E;
};

Vec attention(const Vec &q, const Vec &k, const Vec &v, AttentionDims a,
              bool causal, double scale) {
  Vec out(a.B * a.H * a.S * a.E, 0.0);
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h)
      for (int64_t s = 0; s < a.S; ++s) {
        int64_t g = h / (a.H / a.G);
        int64_t visible = causal ? std::min(a.T, s + 1) : a.T;
        Vec score(visible);
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t < visible; ++t) {
          double d = 0;
          for (int64_t i = 0; i < a.D; ++i)
            d += q[((b * a.H + h) * a.S + s) * a.D + i] *
                 k[((b * a.G + g) * a.T + t) * a.D + i];
          score[t] = d * scale;
          mx = std::max(mx, score[t]);
        }
        for (double &x : score)
          sum += (x = std::exp(x - mx));
        for (int64_t t = 0; t < visible; ++t)
          for (int64_t e = 0; e < a.E; ++e)
            out[((b * a.H + h) * a.S + s) * a.E + e] +=
                score[t] / sum * v[((b * a.G + g) * a.T + t) * a.E + e];
      }
  return out;
}

Vec crossEntropyLoss(const Vec &logits, const std::vector<int64_t> &labels,
                     int64_t vocab, int64_t ignore) {
  double total = 0;
  int64_t counted = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] == ignore)
      continue;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < vocab; ++j)
      mx = std::max(mx, logits[r * vocab + j]);
    for (int64_t j = 0; j < vocab; ++j)
      sum += std::exp(logits[r * vocab + j] - mx);
    total += mx + std::log(sum) - logits[r * vocab + labels[r]];
    ++counted;
  }
  return {total / counted};
}

/// 2-D grouped convolution, input [N, C, X, Y], weight [F, C/groups, KX, KY].
struct Conv2d {
  int64_t N, C, X, Y, F, KX, KY, groups;
  Shape strides, dilations, pads; // pads: x begin, y begin, x end, y end
  int64_t OX() const {
    return (X + pads[0] + pads[2] - dilations[0] * (KX - 1) - 1) / strides[0] +
           1;
  }
  int64_t OY() const {
    return (Y + pads[1] + pads[3] - dilations[1] * (KY - 1) - 1) / strides[1] +
           1;
  }
  Shape inputShape() const { return {N, C, X, Y}; }
  Shape weightShape() const { return {F, C / groups, KX, KY}; }
  Shape outputShape() const { return {N, F, OX(), OY()}; }

  Vec forward(const Vec &x, const Vec &w) const {
    int64_t cg = C / groups, fg = F / groups;
    Vec out(count(outputShape()), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t ox = 0; ox < OX(); ++ox)
          for (int64_t oy = 0; oy < OY(); ++oy) {
            double sum = 0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t kx = 0; kx < KX; ++kx)
                for (int64_t ky = 0; ky < KY; ++ky) {
                  int64_t ix = ox * strides[0] + kx * dilations[0] - pads[0];
                  int64_t iy = oy * strides[1] + ky * dilations[1] - pads[1];
                  if (ix < 0 || ix >= X || iy < 0 || iy >= Y)
                    continue;
                  int64_t channel = f / fg * cg + c;
                  sum += x[((n * C + channel) * X + ix) * Y + iy] *
                         w[((f * cg + c) * KX + kx) * KY + ky];
                }
            out[((n * F + f) * OX() + ox) * OY() + oy] = sum;
          }
    return out;
  }
};

/// 2-D max or average pooling over [N, C, X, Y]; padding is in no window.
Vec pool2d(const Vec &x, const Conv2d &geo, bool max, bool includePad) {
  Vec out(geo.N * geo.C * geo.OX() * geo.OY());
  for (int64_t p = 0; p < geo.N * geo.C; ++p)
    for (int64_t ox = 0; ox < geo.OX(); ++ox)
      for (int64_t oy = 0; oy < geo.OY(); ++oy) {
        double acc = max ? -INFINITY : 0.0;
        int64_t inside = 0;
        for (int64_t kx = 0; kx < geo.KX; ++kx)
          for (int64_t ky = 0; ky < geo.KY; ++ky) {
            int64_t ix =
                ox * geo.strides[0] + kx * geo.dilations[0] - geo.pads[0];
            int64_t iy =
                oy * geo.strides[1] + ky * geo.dilations[1] - geo.pads[1];
            if (ix < 0 || ix >= geo.X || iy < 0 || iy >= geo.Y)
              continue;
            double value = x[(p * geo.X + ix) * geo.Y + iy];
            acc = max ? std::max(acc, value) : acc + value;
            ++inside;
          }
        out[(p * geo.OX() + ox) * geo.OY() + oy] =
            max ? acc : acc / (includePad ? geo.KX * geo.KY : inside);
      }
  return out;
}

//===----------------------------------------------------------------------===//
// compare, select
//===----------------------------------------------------------------------===//

TEST_F(GradientKernelTest, CompareBroadcastsAndGivesBooleans) {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = f32({3}, {2, 2, 5});
  struct Case {
    const char *predicate;
    std::vector<int> expected;
  } cases[] = {{"eq", {0, 1, 0, 0, 0, 0}}, {"ne", {1, 0, 1, 1, 1, 1}},
               {"lt", {1, 0, 1, 0, 0, 0}}, {"le", {1, 1, 1, 0, 0, 0}},
               {"gt", {0, 0, 0, 1, 1, 1}}, {"ge", {0, 1, 0, 1, 1, 1}}};
  for (const Case &c : cases) {
    Tensor out = run(Op("dtc.compare").s("predicate", c.predicate), {a, b},
                     {{DType::BOOL, {2, 3}}})[0];
    for (int i = 0; i < 6; ++i)
      EXPECT_EQ(out.as<uint8_t>()[i], c.expected[i])
          << c.predicate << " at " << i;
  }
}

TEST_F(GradientKernelTest, CompareIntegersExactly) {
  // 2^53 + 1 is not a double: integers must not compare through floats.
  int64_t big = (int64_t(1) << 53) + 1;
  Tensor a = i64({2}, {big, 7}), b = i64({2}, {big - 1, 7});
  Tensor out = run(Op("dtc.compare").s("predicate", "gt"), {a, b},
                   {{DType::BOOL, {2}}})[0];
  EXPECT_EQ(out.as<uint8_t>()[0], 1);
  EXPECT_EQ(out.as<uint8_t>()[1], 0);
}

TEST_F(GradientKernelTest, CompareRejectsUnknownPredicate) {
  Tensor a = f32({2}, {1, 2});
  EXPECT_NE(errorOf(Op("dtc.compare").s("predicate", "lg"), {a, a},
                    {{DType::BOOL, {2}}})
                .find("unknown predicate 'lg'"),
            std::string::npos);
}

TEST_F(GradientKernelTest, SelectBroadcastsAllThree) {
  Tensor cond(DType::BOOL, {2, 1});
  cond.as<uint8_t>()[0] = 1;
  cond.as<uint8_t>()[1] = 0;
  Tensor onTrue = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor onFalse = f32({}, {-1});
  Tensor out =
      run(Op("dtc.select"), {cond, onTrue, onFalse}, {{DType::F32, {2, 3}}})[0];
  EXPECT_EQ(toVec(out), (Vec{1, 2, 3, -1, -1, -1}));
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

TEST_F(GradientKernelTest, SoftmaxGradMatchesFiniteDifference) {
  for (int64_t axis : {1, 2}) {
    Shape shape = {2, 5, 3};
    Vec x = randomVec(rng, count(shape), -2, 2),
        w = randomVec(rng, count(shape));
    Vec y = softmax(x, shape, axis);
    checkForward(Op("dtc.softmax").i("axis", axis), {f32(shape, x)}, shape, y);
    Tensor dx = run(Op("dtc.softmax_grad").i("axis", axis),
                    {f32(shape, y), f32(shape, w)}, {{DType::F32, shape}})[0];
    checkDirectional(
        [&](const std::vector<Vec> &in) {
          return dotVec(softmax(in[0], shape, axis), w);
        },
        {x}, 0, toVec(dx), "softmax axis " + std::to_string(axis));
  }
}

TEST_F(GradientKernelTest, LayerNormGradMatchesFiniteDifference) {
  Shape shape = {3, 2, 8}, normalized = {2, 8};
  int64_t n = 16;
  double eps = 1e-5;
  Vec x = randomVec(rng, count(shape), -2, 2), w = randomVec(rng, n),
      b = randomVec(rng, n), dy = randomVec(rng, count(shape));
  checkForward(Op("dtc.layer_norm").i("axis", 1).f("epsilon", eps),
               {f32(shape, x), f32(normalized, w), f32(normalized, b)}, shape,
               norm(x, w, &b, n, eps, false));
  auto grads = run(Op("dtc.layer_norm_grad").i("axis", 1).f("epsilon", eps),
                   {f32(shape, x), f32(normalized, w), f32(shape, dy)},
                   {{DType::F32, shape},
                    {DType::F32, normalized},
                    {DType::F32, normalized}});
  auto loss = [&](const std::vector<Vec> &in) {
    return dotVec(norm(in[0], in[1], &in[2], n, eps, false), dy);
  };
  for (size_t i = 0; i < 3; ++i)
    checkDirectional(loss, {x, w, b}, i, toVec(grads[i]),
                     "layer_norm operand " + std::to_string(i));
}

TEST_F(GradientKernelTest, RmsNormGradMatchesFiniteDifference) {
  Shape shape = {4, 12}, normalized = {12};
  double eps = 1e-6;
  Vec x = randomVec(rng, count(shape), -2, 2), w = randomVec(rng, 12),
      dy = randomVec(rng, count(shape));
  checkForward(Op("dtc.rms_norm").i("axis", 1).f("epsilon", eps),
               {f32(shape, x), f32(normalized, w)}, shape,
               norm(x, w, nullptr, 12, eps, true));
  auto grads = run(Op("dtc.rms_norm_grad").i("axis", 1).f("epsilon", eps),
                   {f32(shape, x), f32(normalized, w), f32(shape, dy)},
                   {{DType::F32, shape}, {DType::F32, normalized}});
  auto loss = [&](const std::vector<Vec> &in) {
    return dotVec(norm(in[0], in[1], nullptr, 12, eps, true), dy);
  };
  for (size_t i = 0; i < 2; ++i)
    checkDirectional(loss, {x, w}, i, toVec(grads[i]),
                     "rms_norm operand " + std::to_string(i));
}

TEST_F(GradientKernelTest, AttentionGradMatchesFiniteDifference) {
  struct Case {
    AttentionDims dims;
    bool causal;
    std::optional<double> scale;
  } cases[] = {
      // Grouped-query heads (2 query heads per kv head), causal.
      {{2, 4, 2, 5, 5, 3, 4}, true, std::nullopt},
      // Fewer queries than keys, an explicit scale, multi-query.
      {{1, 3, 1, 3, 6, 4, 2}, false, 0.3},
      // Large enough for the kernel's threaded path.
      {{1, 2, 1, 48, 48, 16, 16}, true, std::nullopt},
  };
  for (const Case &c : cases) {
    AttentionDims a = c.dims;
    Shape qs = {a.B, a.H, a.S, a.D}, ks = {a.B, a.G, a.T, a.D},
          vs = {a.B, a.G, a.T, a.E}, os = {a.B, a.H, a.S, a.E};
    double scale = c.scale.value_or(1 / std::sqrt(double(a.D)));
    Vec q = randomVec(rng, count(qs)), k = randomVec(rng, count(ks)),
        v = randomVec(rng, count(vs)), dy = randomVec(rng, count(os));
    Op forward("dtc.attention"), backward("dtc.attention_grad");
    if (c.causal) {
      forward.b("causal");
      backward.b("causal");
    }
    // The program always states the scale (the lowering writes the
    // 1/sqrt(d) default).
    forward.f("scale", scale);
    backward.f("scale", scale);
    checkForward(forward, {f32(qs, q), f32(ks, k), f32(vs, v)}, os,
                 attention(q, k, v, a, c.causal, scale));
    auto grads =
        run(backward, {f32(qs, q), f32(ks, k), f32(vs, v), f32(os, dy)},
            {{DType::F32, qs}, {DType::F32, ks}, {DType::F32, vs}});
    auto loss = [&](const std::vector<Vec> &in) {
      return dotVec(attention(in[0], in[1], in[2], a, c.causal, scale), dy);
    };
    for (size_t i = 0; i < 3; ++i)
      checkDirectional(loss, {q, k, v}, i, toVec(grads[i]),
                       "attention S=" + std::to_string(a.S) + " operand " +
                           std::to_string(i));
  }
}

TEST_F(GradientKernelTest, EmbeddingGradScatterAddsRepeatedIds) {
  Shape idsShape = {2, 3};
  int64_t rows = 5, d = 4;
  std::vector<int64_t> ids = {1, 3, 1, 0, 1, 4};
  Vec table = randomVec(rng, rows * d), dy = randomVec(rng, 6 * d);
  auto forward = [&](const Vec &t) {
    Vec out(6 * d);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < d; ++j)
        out[i * d + j] = t[ids[i] * d + j];
    return out;
  };
  checkForward(Op("dtc.embedding"), {f32({rows, d}, table), i64(idsShape, ids)},
               {2, 3, d}, forward(table));
  Tensor grad = run(Op("dtc.embedding_grad").i("num_rows", rows),
                    {f32({2, 3, d}, dy), i64(idsShape, ids)},
                    {{DType::F32, {rows, d}}})[0];
  checkDirectional(
      [&](const std::vector<Vec> &in) { return dotVec(forward(in[0]), dy); },
      {table}, 0, toVec(grad), "embedding");
  // Row 2 is never looked up; row 1 three times.
  Vec g = toVec(grad);
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_EQ(g[2 * d + j], 0.0);
    EXPECT_FLOAT_EQ(g[1 * d + j], float(dy[0 * d + j]) + float(dy[2 * d + j]) +
                                      float(dy[4 * d + j]));
  }
}

TEST_F(GradientKernelTest, GatherElementsGradScatterAddsAlongTheAxis) {
  // data [2, 4, 3], indices [2, 5, 3] along axis 1, with repeats and
  // negative indices (ONNX: -1 is the last of the 4).
  int64_t lines = 2, size = 4, count = 5, inner = 3;
  std::vector<int64_t> ids = {0,  -1, 2, 1, 1, -4, 3, 0, 0, -2, 1, 2, 0, 0, 3,
                              -1, 2,  2, 1, 0, 0,  3, 3, 3, -3, 1, 2, 0, 1, 0};
  Vec data = randomVec(rng, lines * size * inner),
      dy = randomVec(rng, lines * count * inner);
  auto at = [&](int64_t e) {
    int64_t o = e / (count * inner), k = ids[e] < 0 ? ids[e] + size : ids[e];
    return (o * size + k) * inner + e % inner;
  };
  auto forward = [&](const Vec &x) {
    Vec out(ids.size());
    for (size_t e = 0; e < ids.size(); ++e)
      out[e] = x[at(e)];
    return out;
  };
  checkForward(
      Op("dtc.gather_elements").i("axis", 1),
      {f32({lines, size, inner}, data), i64({lines, count, inner}, ids)},
      {lines, count, inner}, forward(data));
  Tensor grad =
      run(Op("dtc.gather_elements_grad").i("axis", 1).i("dim_size", size),
          {f32({lines, count, inner}, dy), i64({lines, count, inner}, ids)},
          {{DType::F32, {lines, size, inner}}})[0];
  checkDirectional(
      [&](const std::vector<Vec> &in) { return dotVec(forward(in[0]), dy); },
      {data}, 0, toVec(grad), "gather_elements");
}

TEST_F(GradientKernelTest, GatherElementsRejectsOutOfRangeIndices) {
  std::string message =
      errorOf(Op("dtc.gather_elements").i("axis", 0),
              {f32({3}, {1, 2, 3}), i64({2}, {-3, 3})}, {{DType::F32, {2}}});
  EXPECT_NE(message.find("index 3 at position 1 is out of range [-3, 3)"),
            std::string::npos)
      << message;
}

TEST_F(GradientKernelTest, CumSumMatchesRunningSums) {
  // [2, 3] along axis 1 in each mode, against sums written out.
  Vec x = {1, 2, 4, 8, 16, 32};
  struct Mode {
    bool exclusive, reverse;
    Vec expected;
  } modes[] = {{false, false, {1, 3, 7, 8, 24, 56}},
               {true, false, {0, 1, 3, 0, 8, 24}},
               {false, true, {7, 6, 4, 56, 48, 32}},
               {true, true, {6, 4, 0, 48, 32, 0}}};
  for (const Mode &m : modes) {
    Op op("dtc.cumsum");
    op.i("axis", 1);
    if (m.exclusive)
      op.b("exclusive");
    if (m.reverse)
      op.b("reverse");
    checkForward(op, {f32({2, 3}, x)}, {2, 3}, m.expected);
  }
}

TEST_F(GradientKernelTest, SelectiveScanMatchesTheRecurrence) {
  // One line of 3 positions and 2 state dims, written out: h_0 = [1, 1],
  // y_0 = 1 + 1; h_1 = [0.5 + 2, 1 + 1], y_1 = 2.5 * 1 + 2 * 0; h_2 =
  // [1.25 + 4, 2 + 1], y_2 = 5.25 * 0 + 3 * 2.
  Vec a = {0.5, 1, 0.5, 1, 0.5, 1}, x = {1, 1, 2, 1, 4, 1},
      c = {1, 1, 1, 0, 0, 2};
  checkForward(Op("dtc.selective_scan"),
               {f32({1, 1, 3, 2}, a), f32({1, 1, 3, 2}, x), f32({1, 3, 2}, c)},
               {1, 1, 3}, {2, 2.5, 6});
}

TEST_F(GradientKernelTest, EmbeddingGradRejectsOutOfRangeIds) {
  std::string message = errorOf(Op("dtc.embedding_grad").i("num_rows", 3),
                                {f32({2, 2}, {1, 2, 3, 4}), i64({2}, {0, 3})},
                                {{DType::F32, {3, 2}}});
  EXPECT_NE(message.find("id 3 at position 1 is out of range [0, 3)"),
            std::string::npos)
      << message;
}

TEST_F(GradientKernelTest, CrossEntropyGradMatchesFiniteDifference) {
  Shape shape = {2, 3, 7};
  std::vector<int64_t> labels = {0, 6, -100, 3, 3, 2};
  Vec logits = randomVec(rng, count(shape), -3, 3);
  double gradLoss = 0.7;
  checkForward(Op("dtc.cross_entropy").i("ignore_index", -100),
               {f32(shape, logits), i64({2, 3}, labels)}, {},
               crossEntropyLoss(logits, labels, 7, -100));
  Tensor grad =
      run(Op("dtc.cross_entropy_grad").i("ignore_index", -100),
          {f32(shape, logits), i64({2, 3}, labels), f32({}, {gradLoss})},
          {{DType::F32, shape}})[0];
  checkDirectional(
      [&](const std::vector<Vec> &in) {
        return gradLoss * crossEntropyLoss(in[0], labels, 7, -100)[0];
      },
      {logits}, 0, toVec(grad), "cross_entropy");
  // The ignored position's row is zero.
  Vec g = toVec(grad);
  for (int64_t j = 0; j < 7; ++j)
    EXPECT_EQ(g[2 * 7 + j], 0.0);
}

TEST_F(GradientKernelTest, ActivationGradsMatchFiniteDifference) {
  Shape shape = {3, 11};
  Vec x = randomVec(rng, count(shape), -4, 4),
      dy = randomVec(rng, count(shape));
  auto geluErf = [](double v) {
    return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  };
  auto geluTanh = [](double v) {
    return 0.5 * v *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  struct Case {
    const char *forward, *backward;
    bool tanh;
    std::function<double(double)> fn;
  } cases[] = {{"dtc.gelu", "dtc.gelu_grad", false, geluErf},
               {"dtc.gelu", "dtc.gelu_grad", true, geluTanh},
               {"dtc.silu", "dtc.silu_grad", false, silu}};
  for (const Case &c : cases) {
    auto apply = [&](const Vec &in) {
      Vec out(in.size());
      for (size_t i = 0; i < in.size(); ++i)
        out[i] = c.fn(in[i]);
      return out;
    };
    Op forward(c.forward), backward(c.backward);
    if (c.tanh) {
      forward.b("approximate_tanh");
      backward.b("approximate_tanh");
    }
    checkForward(forward, {f32(shape, x)}, shape, apply(x));
    Tensor dx = run(backward, {f32(shape, x), f32(shape, dy)},
                    {{DType::F32, shape}})[0];
    checkDirectional(
        [&](const std::vector<Vec> &in) { return dotVec(apply(in[0]), dy); },
        {x}, 0, toVec(dx), std::string(c.backward) + (c.tanh ? " tanh" : ""));
  }
}

TEST_F(GradientKernelTest, ActivationGradInBF16RoundsTheF32Result) {
  Shape shape = {64};
  Vec x = randomVec(rng, 64, -3, 3), dy = randomVec(rng, 64);
  Tensor xb(DType::BF16, shape), dyb(DType::BF16, shape);
  for (int64_t i = 0; i < 64; ++i) {
    xb.as<uint16_t>()[i] = dtc::runtime::floatToBF16(float(x[i]));
    dyb.as<uint16_t>()[i] = dtc::runtime::floatToBF16(float(dy[i]));
  }
  Tensor asF32 =
      run(Op("dtc.silu_grad"), {f32(shape, toVec(xb)), f32(shape, toVec(dyb))},
          {{DType::F32, shape}})[0];
  Tensor asBF16 =
      run(Op("dtc.silu_grad"), {xb, dyb}, {{DType::BF16, shape}})[0];
  for (int64_t i = 0; i < 64; ++i)
    EXPECT_EQ(asBF16.as<uint16_t>()[i],
              dtc::runtime::floatToBF16(asF32.as<float>()[i]))
        << i;
}

TEST_F(GradientKernelTest, SliceGradScattersIntoZeros) {
  Shape input = {4, 9}, sliced = {2, 3};
  Shape starts = {1, 2}, limits = {4, 9}, strides = {2, 3};
  Vec x = randomVec(rng, count(input)), dy = randomVec(rng, count(sliced));
  auto forward = [&](const Vec &in) {
    Vec out;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        out.push_back(in[(1 + 2 * i) * 9 + (2 + 3 * j)]);
    return out;
  };
  checkForward(Op("dtc.slice")
                   .ints("starts", starts)
                   .ints("limits", limits)
                   .ints("strides", strides),
               {f32(input, x)}, sliced, forward(x));
  Tensor dx = run(Op("dtc.slice_grad")
                      .ints("input_shape", input)
                      .ints("starts", starts)
                      .ints("strides", strides),
                  {f32(sliced, dy)}, {{DType::F32, input}})[0];
  checkDirectional(
      [&](const std::vector<Vec> &in) { return dotVec(forward(in[0]), dy); },
      {x}, 0, toVec(dx), "slice");
  Vec g = toVec(dx);
  EXPECT_EQ(g[0], 0.0);
  EXPECT_FLOAT_EQ(g[3 * 9 + 8], float(dy[5])); // the last sliced element
}

Op convOp(const std::string &name, const Conv2d &c) {
  return Op(name)
      .ints("strides", c.strides)
      .ints("dilations", c.dilations)
      .ints("pads", c.pads)
      .i("groups", c.groups);
}

TEST_F(GradientKernelTest, ConvGradsMatchFiniteDifference) {
  Conv2d cases[] = {
      // Grouped, strided, dilated, asymmetric padding.
      {2, 4, 7, 6, 6, 3, 2, 2, {2, 1}, {1, 2}, {1, 0, 2, 1}},
      // A plain 3x3 "same" convolution.
      {1, 3, 5, 5, 2, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
  };
  for (const Conv2d &c : cases) {
    Vec x = randomVec(rng, count(c.inputShape())),
        w = randomVec(rng, count(c.weightShape())),
        dy = randomVec(rng, count(c.outputShape()));
    checkForward(convOp("dtc.conv", c),
                 {f32(c.inputShape(), x), f32(c.weightShape(), w)},
                 c.outputShape(), c.forward(x, w));
    Tensor dx = run(
        convOp("dtc.conv_grad_input", c).ints("input_shape", c.inputShape()),
        {f32(c.outputShape(), dy), f32(c.weightShape(), w)},
        {{DType::F32, c.inputShape()}})[0];
    Tensor dw = run(
        convOp("dtc.conv_grad_weight", c).ints("weight_shape", c.weightShape()),
        {f32(c.inputShape(), x), f32(c.outputShape(), dy)},
        {{DType::F32, c.weightShape()}})[0];
    auto loss = [&](const std::vector<Vec> &in) {
      return dotVec(c.forward(in[0], in[1]), dy);
    };
    checkDirectional(loss, {x, w}, 0, toVec(dx), "conv input");
    checkDirectional(loss, {x, w}, 1, toVec(dw), "conv weight");
  }
}

Op poolOp(const std::string &name, const Conv2d &c) {
  return Op(name)
      .ints("kernel_shape", {c.KX, c.KY})
      .ints("strides", c.strides)
      .ints("dilations", c.dilations)
      .ints("pads", c.pads);
}

TEST_F(GradientKernelTest, PoolGradsMatchFiniteDifference) {
  // Overlapping windows, padding, a dilation.
  Conv2d geo = {2, 3, 7, 6, 3, 3, 2, 1, {2, 1}, {1, 2}, {1, 0, 1, 1}};
  Shape input = geo.inputShape(), pooled = {2, 3, geo.OX(), geo.OY()};
  Vec x = randomVec(rng, count(input)), dy = randomVec(rng, count(pooled));
  checkForward(poolOp("dtc.max_pool", geo), {f32(input, x)}, pooled,
               pool2d(x, geo, true, false));
  Tensor dmax = run(poolOp("dtc.max_pool_grad", geo),
                    {f32(input, x), f32(pooled, dy)}, {{DType::F32, input}})[0];
  checkDirectional(
      [&](const std::vector<Vec> &in) {
        return dotVec(pool2d(in[0], geo, true, false), dy);
      },
      {x}, 0, toVec(dmax), "max_pool");
  for (bool includePad : {false, true}) {
    Op forward = poolOp("dtc.avg_pool", geo);
    Op backward = poolOp("dtc.avg_pool_grad", geo).ints("input_shape", input);
    if (includePad) {
      forward.b("count_include_pad");
      backward.b("count_include_pad");
    }
    checkForward(forward, {f32(input, x)}, pooled,
                 pool2d(x, geo, false, includePad));
    Tensor davg = run(backward, {f32(pooled, dy)}, {{DType::F32, input}})[0];
    checkDirectional(
        [&](const std::vector<Vec> &in) {
          return dotVec(pool2d(in[0], geo, false, includePad), dy);
        },
        {x}, 0, toVec(davg),
        includePad ? "avg_pool count_include_pad" : "avg_pool");
  }
}

TEST_F(GradientKernelTest, MaxPoolGradGoesToTheFirstMaximum) {
  // One 2x2 window holding 5 twice: the first in row-major order wins.
  Conv2d geo = {1, 1, 2, 2, 1, 2, 2, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}};
  Tensor dx = run(poolOp("dtc.max_pool_grad", geo),
                  {f32({1, 1, 2, 2}, {1, 5, 5, 2}), f32({1, 1, 1, 1}, {3})},
                  {{DType::F32, {1, 1, 2, 2}}})[0];
  EXPECT_EQ(toVec(dx), (Vec{0, 3, 0, 0}));
}

TEST_F(GradientKernelTest, GradientKernelsRejectIntegerData) {
  Tensor ints = i64({2, 2}, {1, 2, 3, 4});
  std::string message = errorOf(Op("dtc.softmax_grad").i("axis", 1),
                                {ints, ints}, {{DType::I64, {2, 2}}});
  EXPECT_NE(message.find("dtc.softmax_grad"), std::string::npos) << message;
  EXPECT_NE(message.find("i64"), std::string::npos) << message;
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

struct AdamWState {
  Vec param, expAvg, expAvgSq;
};

/// PyTorch's AdamW, written out: step `step` (1-based).
void adamwReference(AdamWState &s, const Vec &grad, double lr, int step,
                    double gradScale, double b1, double b2, double eps,
                    double wd) {
  for (size_t i = 0; i < s.param.size(); ++i) {
    double g = grad[i] * gradScale;
    s.expAvg[i] = b1 * s.expAvg[i] + (1 - b1) * g;
    s.expAvgSq[i] = b2 * s.expAvgSq[i] + (1 - b2) * g * g;
    double mHat = s.expAvg[i] / (1 - std::pow(b1, step));
    double vHat = s.expAvgSq[i] / (1 - std::pow(b2, step));
    s.param[i] =
        s.param[i] * (1 - lr * wd) - lr * mHat / (std::sqrt(vHat) + eps);
  }
}

Op adamwOp() {
  return Op("dtc.adamw")
      .f("beta1", 0.9)
      .f("beta2", 0.95)
      .f("epsilon", 1e-8)
      .f("weight_decay", 0.1);
}

TEST_F(GradientKernelTest, AdamWMatchesTwoHandWrittenSteps) {
  Shape shape = {3, 5};
  int64_t n = count(shape);
  AdamWState expected{randomVec(rng, n), Vec(n, 0.0), Vec(n, 0.0)};
  Tensor param = f32(shape, expected.param), m = f32(shape, Vec(n, 0.0)),
         v = f32(shape, Vec(n, 0.0));
  double lrs[] = {1e-2, 5e-3}, scales[] = {0.5, 1.0};
  for (int step = 1; step <= 2; ++step) {
    Vec grad = randomVec(rng, n);
    auto out =
        run(adamwOp(),
            {param, f32(shape, grad), m, v, f32({}, {lrs[step - 1]}),
             f32({}, {double(step)}), f32({}, {scales[step - 1]})},
            {{DType::F32, shape}, {DType::F32, shape}, {DType::F32, shape}});
    adamwReference(expected, grad, lrs[step - 1], step, scales[step - 1], 0.9,
                   0.95, 1e-8, 0.1);
    param = out[0];
    m = out[1];
    v = out[2];
    Vec got[] = {toVec(param), toVec(m), toVec(v)};
    const Vec *want[] = {&expected.param, &expected.expAvg, &expected.expAvgSq};
    for (int k = 0; k < 3; ++k)
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(got[k][i], (*want[k])[i],
                    1e-6 * (1 + std::abs((*want[k])[i])))
            << "step " << step << " result " << k << " at " << i;
  }
}

TEST_F(GradientKernelTest, AdamWUpdatesInPlace) {
  // The results share the buffers of param and the moments, as when the
  // lowering updates variables in place; the answer must not change.
  for (DType dtype : {DType::F32, DType::BF16}) {
    Shape shape = {40000}; // above the threading threshold
    int64_t n = count(shape);
    Vec p0 = randomVec(rng, n), g = randomVec(rng, n), m0 = randomVec(rng, n),
        v0 = randomVec(rng, n, 0, 1);
    auto make = [&](const Vec &values) {
      Tensor t(dtype, shape);
      for (int64_t i = 0; i < n; ++i) {
        if (dtype == DType::F32)
          t.as<float>()[i] = float(values[i]);
        else
          t.as<uint16_t>()[i] = dtc::runtime::floatToBF16(float(values[i]));
      }
      return t;
    };
    std::vector<Tensor> inputs = {make(p0),    make(g),         make(m0),
                                  make(v0),    f32({}, {1e-3}), f32({}, {3}),
                                  f32({}, {1})};
    auto separate = run(adamwOp(), inputs,
                        {{dtype, shape}, {dtype, shape}, {dtype, shape}});
    std::vector<TensorRef> in,
        out = {inputs[0].ref(), inputs[2].ref(), inputs[3].ref()};
    for (const Tensor &t : inputs)
      in.push_back(t.ref());
    Op op = adamwOp();
    llvm::Error err =
        registry.lookup("dtc.adamw")(KernelCall(op.inst, in, out));
    ASSERT_FALSE(err) << llvm::toString(std::move(err));
    size_t bytes = separate[0].bytes();
    EXPECT_EQ(std::memcmp(inputs[0].data(), separate[0].data(), bytes), 0);
    EXPECT_EQ(std::memcmp(inputs[2].data(), separate[1].data(), bytes), 0);
    EXPECT_EQ(std::memcmp(inputs[3].data(), separate[2].data(), bytes), 0);
  }
}

TEST_F(GradientKernelTest, AdamWRejectsStepZero) {
  Tensor t = f32({2}, {1, 2});
  std::string message = errorOf(
      adamwOp(), {t, t, t, t, f32({}, {1e-3}), f32({}, {0}), f32({}, {1})},
      {{DType::F32, {2}}, {DType::F32, {2}}, {DType::F32, {2}}});
  EXPECT_NE(message.find("step must be at least 1"), std::string::npos)
      << message;
}

//===----------------------------------------------------------------------===//
// Determinism
//===----------------------------------------------------------------------===//

TEST_F(GradientKernelTest, ResultsDoNotDependOnTheThreadCount) {
  // Shapes above the kernels' threading threshold; every result must be
  // bit-identical on 1 and 4 threads (dtc run is repeatable).
  Shape act = {8, 64, 128}, qkv = {2, 4, 64, 32};
  Conv2d conv = {4, 8, 24, 24, 8, 3, 3, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}};
  std::vector<int64_t> tokens(8 * 64), labels(4 * 64);
  for (int64_t &id : tokens)
    id = rng() % 300;
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = i % 7 ? int64_t(rng() % 256) : -100;
  struct Case {
    Op op;
    std::vector<Tensor> inputs;
    std::vector<std::pair<DType, Shape>> outputs;
  };
  auto r = [&](const Shape &shape) {
    return f32(shape, randomVec(rng, count(shape)));
  };
  std::vector<Case> cases = {
      {Op("dtc.softmax_grad").i("axis", 2),
       {r(act), r(act)},
       {{DType::F32, act}}},
      {Op("dtc.layer_norm_grad").i("axis", 2).f("epsilon", 1e-5),
       {r(act), r({128}), r(act)},
       {{DType::F32, act}, {DType::F32, {128}}, {DType::F32, {128}}}},
      {Op("dtc.rms_norm_grad").i("axis", 2).f("epsilon", 1e-5),
       {r(act), r({128}), r(act)},
       {{DType::F32, act}, {DType::F32, {128}}}},
      {Op("dtc.attention_grad").b("causal").f("scale", 1 / std::sqrt(32.0)),
       {r(qkv), r({2, 2, 64, 32}), r({2, 2, 64, 32}), r(qkv)},
       {{DType::F32, qkv},
        {DType::F32, {2, 2, 64, 32}},
        {DType::F32, {2, 2, 64, 32}}}},
      {Op("dtc.embedding_grad").i("num_rows", 300),
       {r(act), i64({8, 64}, tokens)},
       {{DType::F32, {300, 128}}}},
      {Op("dtc.cross_entropy_grad").i("ignore_index", -100),
       {r({4, 64, 256}), i64({4, 64}, labels), f32({}, {1.0})},
       {{DType::F32, {4, 64, 256}}}},
      {Op("dtc.gelu_grad"), {r(act), r(act)}, {{DType::F32, act}}},
      {convOp("dtc.conv_grad_input", conv)
           .ints("input_shape", conv.inputShape()),
       {r(conv.outputShape()), r(conv.weightShape())},
       {{DType::F32, conv.inputShape()}}},
      {convOp("dtc.conv_grad_weight", conv)
           .ints("weight_shape", conv.weightShape()),
       {r(conv.inputShape()), r(conv.outputShape())},
       {{DType::F32, conv.weightShape()}}},
      {poolOp("dtc.avg_pool_grad", conv).ints("input_shape", conv.inputShape()),
       {r(conv.outputShape())},
       {{DType::F32, conv.inputShape()}}},
      {poolOp("dtc.max_pool_grad", conv),
       {r(conv.inputShape()), r(conv.outputShape())},
       {{DType::F32, conv.inputShape()}}},
      {adamwOp(),
       {r(act), r(act), r(act), f32(act, randomVec(rng, count(act), 0, 1)),
        f32({}, {1e-3}), f32({}, {2}), f32({}, {0.5})},
       {{DType::F32, act}, {DType::F32, act}, {DType::F32, act}}},
  };
  int saved = threadCount();
  for (Case &c : cases) {
    setThreadCount(1);
    auto serial = run(c.op, c.inputs, c.outputs);
    setThreadCount(4);
    auto threaded = run(c.op, c.inputs, c.outputs);
    for (size_t i = 0; i < serial.size(); ++i)
      EXPECT_EQ(
          std::memcmp(serial[i].data(), threaded[i].data(), serial[i].bytes()),
          0)
          << c.op.inst.op() << " result " << i;
  }
  setThreadCount(saved);
}

} // namespace
