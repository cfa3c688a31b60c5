//===- RingAttentionTest.cpp - Ring attention CPU kernels -----------------===//
//
// The sequence is cut into n chunks; for every query chunk the blocks over
// all key chunks, merged in ring order, must equal the whole-sequence
// dtc.attention kernel on that chunk, and the block gradients, summed over
// the ring, dtc.attention_grad's; likewise for the zigzag cut, whose chunks
// are two halves of the sequence. The math runs through the functions of
// runtime/cpu/RingAttention.h with explicit positions; the kernels are
// checked for shapes, errors and the positions they read from the
// communicator.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/RingAttention.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using dtc::runtime::Communicator;
using dtc::runtime::DType;
using dtc::runtime::ExecutionContext;
using dtc::runtime::KernelCall;
using dtc::runtime::KernelFn;
using dtc::runtime::KernelRegistry;
using dtc::runtime::Mesh;
using dtc::runtime::Reduction;
using dtc::runtime::Request;
using dtc::runtime::Tensor;
using dtc::runtime::TensorRef;
using dtc::runtime::cpu::RingAttentionChunks;
using dtc::runtime::cpu::RingAttentionDims;
using dtc::runtime::cpu::RingAttentionPositions;
using Shape = std::vector<int64_t>;
using Vec = std::vector<float>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t count(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Vec randomVec(std::mt19937 &rng, int64_t n) {
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  Vec v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

Tensor f32(const Shape &shape, const Vec &values) {
  Tensor t(DType::F32, shape);
  std::copy(values.begin(), values.end(), t.as<float>());
  return t;
}

Vec toVec(const Tensor &t) {
  Vec v(t.numElements());
  for (int64_t i = 0; i < t.numElements(); ++i)
    v[i] = dtc::runtime::loadAsFloat(t.ref(), i);
  return v;
}

/// Rows [c * len, (c + 1) * len) of dim 2 of a [b, h, seq, w] array.
Vec chunk(const Vec &x, int64_t outer, int64_t seq, int64_t w, int64_t c,
          int64_t len) {
  Vec out(outer * len * w);
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(x.begin() + (o * seq + c * len) * w, len * w,
                out.begin() + o * len * w);
  return out;
}

/// The rows of dim 2 of a [outer, seq, w] array at `positions`.
Vec rowsAt(const Vec &x, int64_t outer, int64_t seq, int64_t w,
           const std::vector<int64_t> &positions) {
  int64_t len = positions.size();
  Vec out(outer * len * w);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < len; ++i)
      std::copy_n(x.begin() + (o * seq + positions[i]) * w, w,
                  out.begin() + (o * len + i) * w);
  return out;
}

/// The global positions of zigzag chunk c of n, `len` rows: halves c and
/// 2n - 1 - c.
std::vector<int64_t> zigzagPositions(int64_t c, int64_t n, int64_t len) {
  std::vector<int64_t> positions;
  int64_t half = len / 2;
  for (int64_t i = 0; i < len; ++i)
    positions.push_back(i < half ? c * half + i
                                 : (2 * n - 1 - c) * half + (i - half));
  return positions;
}

float maxAbsDiff(const Vec &a, const Vec &b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) // Also equal infinities.
      continue;
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

/// An instruction: op name and attributes.
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
  Op &axes(const std::vector<std::string> &names) {
    auto *values = (*inst.mutable_attrs())["mesh_axes"].mutable_strings();
    for (const std::string &name : names)
      values->add_values(name);
    return *this;
  }
};

/// A rank of a mesh that never communicates: the kernels only ask it for
/// the group.
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

/// One ring configuration: n chunks of a [batch, heads, seq] sequence.
struct Case {
  int64_t n;
  bool causal;
  int64_t heads, groups;
  int64_t batch = 2, seq = 16, headDim = 8, valueDim = 8;

  std::string name() const {
    return "n=" + std::to_string(n) + (causal ? " causal" : "") +
           " h=" + std::to_string(heads) + " g=" + std::to_string(groups) +
           " seq=" + std::to_string(seq);
  }
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int64_t n : {1, 2, 4})
    for (bool causal : {false, true})
      for (auto [h, g] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}})
        all.push_back({n, causal, h, g});
  // Chunks longer than the kernels' 64-row blocks, with the mask cutting
  // through blocks, on the threaded path.
  all.push_back({2, true, 4, 2, 1, 160, 16, 8});
  all.push_back({3, false, 4, 1, 1, 150, 8, 16});
  return all;
}

class RingAttentionTest : public ::testing::Test {
protected:
  RingAttentionTest() : rng(4321) {
    dtc::runtime::cpu::registerCpuKernels(registry);
  }

  llvm::Error tryRun(const Op &op, const std::vector<Tensor> &inputs,
                     std::vector<Tensor> &outputs,
                     ExecutionContext *context = nullptr) {
    KernelFn fn = registry.lookup(op.inst.op());
    if (!fn)
      throw std::runtime_error("no kernel for " + op.inst.op());
    std::vector<TensorRef> in, out;
    for (const Tensor &t : inputs)
      in.push_back(t.ref());
    for (Tensor &t : outputs)
      out.push_back(t.ref());
    return fn(KernelCall(op.inst, in, out, context));
  }

  std::vector<Tensor> run(const Op &op, const std::vector<Tensor> &inputs,
                          const std::vector<std::pair<DType, Shape>> &outputs,
                          ExecutionContext *context = nullptr) {
    std::vector<Tensor> results;
    for (const auto &[dtype, shape] : outputs)
      results.emplace_back(dtype, shape);
    if (llvm::Error err = tryRun(op, inputs, results, context))
      throw std::runtime_error(llvm::toString(std::move(err)));
    return results;
  }

  std::mt19937 rng;
  KernelRegistry registry;
};

/// The whole-sequence problem and its ring split.
struct Problem {
  Case c;
  float scale;
  Vec q, k, v, dy;
  int64_t s, t; // Rows per chunk.

  Problem(const Case &c, std::mt19937 &rng)
      : c(c), scale(1.0f / std::sqrt(float(c.headDim))) {
    q = randomVec(rng, c.batch * c.heads * c.seq * c.headDim);
    k = randomVec(rng, c.batch * c.groups * c.seq * c.headDim);
    v = randomVec(rng, c.batch * c.groups * c.seq * c.valueDim);
    dy = randomVec(rng, c.batch * c.heads * c.seq * c.valueDim);
    s = t = c.seq / c.n;
  }
  Shape qShape() const { return {c.batch, c.heads, c.seq, c.headDim}; }
  Shape kShape() const { return {c.batch, c.groups, c.seq, c.headDim}; }
  Shape vShape() const { return {c.batch, c.groups, c.seq, c.valueDim}; }
  Shape oShape() const { return {c.batch, c.heads, c.seq, c.valueDim}; }
  RingAttentionDims dims() const {
    return {c.batch, c.heads, c.groups, s, t, c.headDim, c.valueDim};
  }
  RingAttentionPositions at(int64_t qc, int64_t kc) const {
    RingAttentionPositions p;
    p.queryStart = qc * s;
    p.keyStart = kc * t;
    p.causal = c.causal;
    p.scale = scale;
    return p;
  }
  Vec qChunk(int64_t i) const {
    return chunk(q, c.batch * c.heads, c.seq, c.headDim, i, s);
  }
  Vec kChunk(int64_t i) const {
    return chunk(k, c.batch * c.groups, c.seq, c.headDim, i, t);
  }
  Vec vChunk(int64_t i) const {
    return chunk(v, c.batch * c.groups, c.seq, c.valueDim, i, t);
  }
  Vec dyChunk(int64_t i) const {
    return chunk(dy, c.batch * c.heads, c.seq, c.valueDim, i, s);
  }
  int64_t kvChunk(int64_t qc, int64_t shift) const {
    return ((qc - shift) % c.n + c.n) % c.n;
  }

  /// Query chunk qc's attention over the whole sequence: blocks for
  /// kv_shift 0..n-1 merged in ring order.
  std::pair<Vec, Vec> ring(int64_t qc) const {
    RingAttentionDims d = dims();
    int64_t rows = c.batch * c.heads * s;
    Vec out(rows * c.valueDim), lse(rows), blockOut(out.size()), blockLse(rows);
    Vec qi = qChunk(qc);
    for (int64_t shift = 0; shift < c.n; ++shift) {
      int64_t kc = kvChunk(qc, shift);
      Vec ki = kChunk(kc), vi = vChunk(kc);
      float *o = shift ? blockOut.data() : out.data();
      float *l = shift ? blockLse.data() : lse.data();
      dtc::runtime::cpu::attentionBlock(d, at(qc, kc), qi.data(), ki.data(),
                                        vi.data(), o, l);
      if (shift)
        dtc::runtime::cpu::attentionMerge(
            rows, c.valueDim, out.data(), lse.data(), blockOut.data(),
            blockLse.data(), out.data(), lse.data());
    }
    return {out, lse};
  }

  /// log sum_j exp(scale q_i . k_j) over the keys row i sees, in double.
  double directLse(int64_t b, int64_t h, int64_t i) const {
    int64_t g = h / (c.heads / c.groups);
    int64_t keys = c.causal ? i + 1 : c.seq;
    std::vector<double> scores(keys);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int64_t x = 0; x < c.headDim; ++x)
        dot += double(q[((b * c.heads + h) * c.seq + i) * c.headDim + x]) *
               k[((b * c.groups + g) * c.seq + j) * c.headDim + x];
      scores[j] = scale * dot;
      mx = std::max(mx, scores[j]);
    }
    double sum = 0;
    for (double x : scores)
      sum += std::exp(x - mx);
    return mx + std::log(sum);
  }
};

TEST_F(RingAttentionTest, MergedBlocksEqualWholeAttention) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name());
    Problem p(c, rng);
    Op attention("dtc.attention");
    attention.f("scale", p.scale);
    if (c.causal)
      attention.b("causal");
    Vec whole = toVec(
        run(attention,
            {f32(p.qShape(), p.q), f32(p.kShape(), p.k), f32(p.vShape(), p.v)},
            {{DType::F32, p.oShape()}})[0]);
    for (int64_t qc = 0; qc < c.n; ++qc) {
      SCOPED_TRACE("query chunk " + std::to_string(qc));
      auto [out, lse] = p.ring(qc);
      EXPECT_LT(maxAbsDiff(out, chunk(whole, c.batch * c.heads, c.seq,
                                      c.valueDim, qc, p.s)),
                1e-5f);
      float lseDiff = 0;
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t i = 0; i < p.s; ++i)
            lseDiff = std::max(
                lseDiff, float(std::abs(lse[(b * c.heads + h) * p.s + i] -
                                        p.directLse(b, h, qc * p.s + i))));
      EXPECT_LT(lseDiff, 1e-5f);
    }
  }
}

TEST_F(RingAttentionTest, BlockGradientsSumToWholeGradient) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name());
    Problem p(c, rng);
    Op grad("dtc.attention_grad");
    grad.f("scale", p.scale);
    if (c.causal)
      grad.b("causal");
    auto whole = run(grad,
                     {f32(p.qShape(), p.q), f32(p.kShape(), p.k),
                      f32(p.vShape(), p.v), f32(p.oShape(), p.dy)},
                     {{DType::F32, p.qShape()},
                      {DType::F32, p.kShape()},
                      {DType::F32, p.vShape()}});
    RingAttentionDims d = p.dims();
    int64_t qOuter = c.batch * c.heads, kOuter = c.batch * c.groups;
    std::vector<Vec> dq(c.n, Vec(qOuter * p.s * c.headDim, 0.0f)),
        dk(c.n, Vec(kOuter * p.t * c.headDim, 0.0f)),
        dv(c.n, Vec(kOuter * p.t * c.valueDim, 0.0f));
    Vec dqPart(dq[0].size()), dkPart(dk[0].size()), dvPart(dv[0].size());
    for (int64_t qc = 0; qc < c.n; ++qc) {
      auto [out, lse] = p.ring(qc);
      Vec qi = p.qChunk(qc), dyi = p.dyChunk(qc);
      for (int64_t shift = 0; shift < c.n; ++shift) {
        int64_t kc = p.kvChunk(qc, shift);
        Vec ki = p.kChunk(kc), vi = p.vChunk(kc);
        dtc::runtime::cpu::attentionBlockGrad(
            d, p.at(qc, kc), qi.data(), ki.data(), vi.data(), out.data(),
            lse.data(), dyi.data(), dqPart.data(), dkPart.data(),
            dvPart.data());
        for (size_t i = 0; i < dqPart.size(); ++i)
          dq[qc][i] += dqPart[i];
        for (size_t i = 0; i < dkPart.size(); ++i)
          dk[kc][i] += dkPart[i];
        for (size_t i = 0; i < dvPart.size(); ++i)
          dv[kc][i] += dvPart[i];
      }
    }
    Vec wq = toVec(whole[0]), wk = toVec(whole[1]), wv = toVec(whole[2]);
    for (int64_t i = 0; i < c.n; ++i) {
      SCOPED_TRACE("chunk " + std::to_string(i));
      EXPECT_LT(maxAbsDiff(dq[i], chunk(wq, qOuter, c.seq, c.headDim, i, p.s)),
                1e-4f);
      EXPECT_LT(maxAbsDiff(dk[i], chunk(wk, kOuter, c.seq, c.headDim, i, p.t)),
                1e-4f);
      EXPECT_LT(maxAbsDiff(dv[i], chunk(wv, kOuter, c.seq, c.valueDim, i, p.t)),
                1e-4f);
    }
  }
}

TEST_F(RingAttentionTest, MergeHandlesEmptyRows) {
  // Rows: only b, neither, only a, both (weights 1 : 3).
  Vec outA = {9, 9, 0, 0, 1, 2, 1, 5};
  Vec lseA = {kNegInf, kNegInf, 0.25f, 0.0f};
  Vec outB = {3, 4, 0, 0, 7, 7, 5, 1};
  Vec lseB = {0.5f, kNegInf, kNegInf, std::log(3.0f)};
  Vec out(8), lse(4);
  dtc::runtime::cpu::attentionMerge(4, 2, outA.data(), lseA.data(), outB.data(),
                                    lseB.data(), out.data(), lse.data());
  EXPECT_EQ(out, (Vec{3, 4, 0, 0, 1, 2, 4, 2}));
  EXPECT_FLOAT_EQ(lse[0], 0.5f);
  EXPECT_EQ(lse[1], kNegInf);
  EXPECT_FLOAT_EQ(lse[2], 0.25f);
  EXPECT_FLOAT_EQ(lse[3], std::log(4.0f));

  // Through the kernel, on [2, 2] rows.
  auto results = run(Op("dtc.attention_merge"),
                     {f32({2, 2, 2}, outA), f32({2, 2}, lseA),
                      f32({2, 2, 2}, outB), f32({2, 2}, lseB)},
                     {{DType::F32, {2, 2, 2}}, {DType::F32, {2, 2}}});
  EXPECT_EQ(toVec(results[0]), out);
  EXPECT_EQ(toVec(results[1]), lse);
}

TEST_F(RingAttentionTest, KernelsOnOneRank) {
  // n = 1 without a communicator: the block is dtc.attention with its lse,
  // the block gradient dtc.attention_grad.
  Shape qs = {1, 4, 5, 3}, ks = {1, 2, 5, 3}, vs = {1, 2, 5, 2},
        os = {1, 4, 5, 2}, ls = {1, 4, 5};
  Vec q = randomVec(rng, count(qs)), k = randomVec(rng, count(ks)),
      v = randomVec(rng, count(vs)), dy = randomVec(rng, count(os));
  const float scale = 0.7f;
  Op block("dtc.attention_block"), blockGrad("dtc.attention_block_grad");
  for (Op *op : {&block, &blockGrad})
    op->axes({"cp"}).i("kv_shift", 0).b("causal").f("scale", scale);
  auto blockOut = run(block, {f32(qs, q), f32(ks, k), f32(vs, v)},
                      {{DType::F32, os}, {DType::F32, ls}});
  ASSERT_EQ(Shape(blockOut[0].shape().begin(), blockOut[0].shape().end()), os);
  ASSERT_EQ(Shape(blockOut[1].shape().begin(), blockOut[1].shape().end()), ls);
  Vec out = toVec(blockOut[0]), lse = toVec(blockOut[1]);
  // Causal: the first query sees only the first key.
  float score = 0;
  for (int64_t x = 0; x < 3; ++x)
    score += q[x] * k[x];
  EXPECT_NEAR(lse[0], scale * score, 1e-6);
  EXPECT_NEAR(out[0], v[0], 1e-6);
  EXPECT_NEAR(out[1], v[1], 1e-6);

  Op attention("dtc.attention"), grad("dtc.attention_grad");
  for (Op *op : {&attention, &grad})
    op->b("causal").f("scale", scale);
  Vec whole = toVec(run(attention, {f32(qs, q), f32(ks, k), f32(vs, v)},
                        {{DType::F32, os}})[0]);
  EXPECT_LT(maxAbsDiff(out, whole), 1e-6f);

  auto grads = run(blockGrad,
                   {f32(qs, q), f32(ks, k), f32(vs, v), blockOut[0],
                    blockOut[1], f32(os, dy)},
                   {{DType::F32, qs}, {DType::F32, ks}, {DType::F32, vs}});
  auto wholeGrads = run(grad, {f32(qs, q), f32(ks, k), f32(vs, v), f32(os, dy)},
                        {{DType::F32, qs}, {DType::F32, ks}, {DType::F32, vs}});
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LT(maxAbsDiff(toVec(grads[i]), toVec(wholeGrads[i])), 1e-5f)
        << "result " << i;

  // bf16 operands convert like the other kernels'.
  auto bf16 = [](const Shape &shape, const Vec &values) {
    Tensor t(DType::BF16, shape);
    dtc::runtime::cpu::storeF32(values.data(), t.ref());
    return t;
  };
  auto lowOut = run(block, {bf16(qs, q), bf16(ks, k), bf16(vs, v)},
                    {{DType::BF16, os}, {DType::F32, ls}});
  EXPECT_LT(maxAbsDiff(toVec(lowOut[0]), out), 0.05f);
  EXPECT_LT(maxAbsDiff(toVec(lowOut[1]), lse), 0.05f);
}

TEST_F(RingAttentionTest, KernelsReadTheirPlaceInTheRing) {
  // Rank 6 of dp:2,cp:4 is chunk 2 of 4 along cp.
  auto mesh = Mesh::parse("dp:2,cp:4");
  ASSERT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  MeshOnly comm(*mesh, 6);
  ExecutionContext context;
  context.communicator = &comm;
  Case c{4, true, 2, 1, 1, 24, 4, 4};
  Problem p(c, rng);
  RingAttentionDims d = p.dims();
  Shape qs = {1, 2, 6, 4}, ks = {1, 1, 6, 4}, ls = {1, 2, 6};
  Vec qi = p.qChunk(2), ki = p.kChunk(0), vi = p.vChunk(0),
      oi = randomVec(rng, count(qs)), li = randomVec(rng, count(ls)),
      dyi = p.dyChunk(2);
  for (int64_t shift = 0; shift < 4; ++shift) {
    SCOPED_TRACE("kv_shift " + std::to_string(shift));
    Op block("dtc.attention_block"), blockGrad("dtc.attention_block_grad");
    for (Op *op : {&block, &blockGrad})
      op->axes({"cp"}).i("kv_shift", shift).b("causal").f("scale", p.scale);
    auto got = run(block, {f32(qs, qi), f32(ks, ki), f32(ks, vi)},
                   {{DType::F32, qs}, {DType::F32, ls}}, &context);
    auto gotGrad =
        run(blockGrad,
            {f32(qs, qi), f32(ks, ki), f32(ks, vi), f32(qs, oi), f32(ls, li),
             f32(qs, dyi)},
            {{DType::F32, qs}, {DType::F32, ks}, {DType::F32, ks}}, &context);
    RingAttentionPositions at = p.at(2, (2 - shift + 4) % 4);
    Vec out(count(qs)), lse(count(ls)), dq(count(qs)), dk(count(ks)),
        dv(count(ks));
    dtc::runtime::cpu::attentionBlock(d, at, qi.data(), ki.data(), vi.data(),
                                      out.data(), lse.data());
    dtc::runtime::cpu::attentionBlockGrad(
        d, at, qi.data(), ki.data(), vi.data(), oi.data(), li.data(),
        dyi.data(), dq.data(), dk.data(), dv.data());
    EXPECT_EQ(toVec(got[0]), out);
    EXPECT_EQ(toVec(got[1]), lse);
    EXPECT_EQ(toVec(gotGrad[0]), dq);
    EXPECT_EQ(toVec(gotGrad[1]), dk);
    EXPECT_EQ(toVec(gotGrad[2]), dv);
    // Chunk 3 lies after chunk 2: nothing visible.
    if (shift == 3) {
      EXPECT_EQ(lse, Vec(count(ls), kNegInf));
    }

    // Zigzag: the same chunks, read as halves.
    for (Op *op : {&block, &blockGrad})
      op->b("zigzag");
    got = run(block, {f32(qs, qi), f32(ks, ki), f32(ks, vi)},
              {{DType::F32, qs}, {DType::F32, ls}}, &context);
    gotGrad =
        run(blockGrad,
            {f32(qs, qi), f32(ks, ki), f32(ks, vi), f32(qs, oi), f32(ls, li),
             f32(qs, dyi)},
            {{DType::F32, qs}, {DType::F32, ks}, {DType::F32, ks}}, &context);
    RingAttentionChunks chunks;
    chunks.queryChunk = 2;
    chunks.keyChunk = (2 - shift + 4) % 4;
    chunks.chunks = 4;
    chunks.zigzag = chunks.causal = true;
    chunks.scale = p.scale;
    dtc::runtime::cpu::ringAttentionBlock(d, chunks, qi.data(), ki.data(),
                                          vi.data(), out.data(), lse.data());
    dtc::runtime::cpu::ringAttentionBlockGrad(
        d, chunks, qi.data(), ki.data(), vi.data(), oi.data(), li.data(),
        dyi.data(), dq.data(), dk.data(), dv.data());
    EXPECT_EQ(toVec(got[0]), out);
    EXPECT_EQ(toVec(got[1]), lse);
    EXPECT_EQ(toVec(gotGrad[0]), dq);
    EXPECT_EQ(toVec(gotGrad[1]), dk);
    EXPECT_EQ(toVec(gotGrad[2]), dv);
    // Chunk 2's later half sees some keys of every chunk.
    EXPECT_NE(lse.back(), kNegInf);
  }
}

/// The ring over zigzag chunks: chunk c's rows, whole-sequence operands
/// gathered at its positions.
struct ZigzagRing {
  const Problem &p;
  explicit ZigzagRing(const Problem &p) : p(p) {}

  std::vector<int64_t> at(int64_t chunk) const {
    return zigzagPositions(chunk, p.c.n, p.s);
  }
  Vec q(int64_t i) const {
    return rowsAt(p.q, p.c.batch * p.c.heads, p.c.seq, p.c.headDim, at(i));
  }
  Vec k(int64_t i) const {
    return rowsAt(p.k, p.c.batch * p.c.groups, p.c.seq, p.c.headDim, at(i));
  }
  Vec v(int64_t i) const {
    return rowsAt(p.v, p.c.batch * p.c.groups, p.c.seq, p.c.valueDim, at(i));
  }
  Vec dy(int64_t i) const {
    return rowsAt(p.dy, p.c.batch * p.c.heads, p.c.seq, p.c.valueDim, at(i));
  }
  RingAttentionChunks chunks(int64_t qc, int64_t kc) const {
    RingAttentionChunks c;
    c.queryChunk = qc;
    c.keyChunk = kc;
    c.chunks = p.c.n;
    c.zigzag = true;
    c.causal = p.c.causal;
    c.scale = p.scale;
    return c;
  }

  /// Blocks for kv_shift 0..n-1 merged in ring order.
  std::pair<Vec, Vec> ring(int64_t qc) const {
    const Case &c = p.c;
    int64_t rows = c.batch * c.heads * p.s;
    Vec out(rows * c.valueDim), lse(rows), blockOut(out.size()), blockLse(rows);
    Vec qi = q(qc);
    for (int64_t shift = 0; shift < c.n; ++shift) {
      int64_t kc = p.kvChunk(qc, shift);
      Vec ki = k(kc), vi = v(kc);
      float *o = shift ? blockOut.data() : out.data();
      float *l = shift ? blockLse.data() : lse.data();
      dtc::runtime::cpu::ringAttentionBlock(p.dims(), chunks(qc, kc), qi.data(),
                                            ki.data(), vi.data(), o, l);
      if (shift)
        dtc::runtime::cpu::attentionMerge(
            rows, c.valueDim, out.data(), lse.data(), blockOut.data(),
            blockLse.data(), out.data(), lse.data());
    }
    return {out, lse};
  }
};

TEST_F(RingAttentionTest, ZigzagRingEqualsWholeAttention) {
  for (const Case &c : cases()) {
    if (c.seq % (2 * c.n))
      continue;
    SCOPED_TRACE(c.name());
    Problem p(c, rng);
    ZigzagRing z(p);
    Op attention("dtc.attention"), grad("dtc.attention_grad");
    for (Op *op : {&attention, &grad}) {
      op->f("scale", p.scale);
      if (c.causal)
        op->b("causal");
    }
    Vec whole = toVec(
        run(attention,
            {f32(p.qShape(), p.q), f32(p.kShape(), p.k), f32(p.vShape(), p.v)},
            {{DType::F32, p.oShape()}})[0]);
    auto wholeGrad = run(grad,
                         {f32(p.qShape(), p.q), f32(p.kShape(), p.k),
                          f32(p.vShape(), p.v), f32(p.oShape(), p.dy)},
                         {{DType::F32, p.qShape()},
                          {DType::F32, p.kShape()},
                          {DType::F32, p.vShape()}});
    Vec wq = toVec(wholeGrad[0]), wk = toVec(wholeGrad[1]),
        wv = toVec(wholeGrad[2]);
    int64_t qOuter = c.batch * c.heads, kOuter = c.batch * c.groups;
    std::vector<Vec> dq(c.n, Vec(qOuter * p.s * c.headDim, 0.0f)),
        dk(c.n, Vec(kOuter * p.t * c.headDim, 0.0f)),
        dv(c.n, Vec(kOuter * p.t * c.valueDim, 0.0f));
    Vec dqPart(dq[0].size()), dkPart(dk[0].size()), dvPart(dv[0].size());
    for (int64_t qc = 0; qc < c.n; ++qc) {
      SCOPED_TRACE("query chunk " + std::to_string(qc));
      auto [out, lse] = z.ring(qc);
      std::vector<int64_t> positions = z.at(qc);
      EXPECT_LT(
          maxAbsDiff(out, rowsAt(whole, qOuter, c.seq, c.valueDim, positions)),
          1e-5f);
      float lseDiff = 0;
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t i = 0; i < p.s; ++i)
            lseDiff = std::max(
                lseDiff, float(std::abs(lse[(b * c.heads + h) * p.s + i] -
                                        p.directLse(b, h, positions[i]))));
      EXPECT_LT(lseDiff, 1e-5f);

      Vec qi = z.q(qc), dyi = z.dy(qc);
      for (int64_t shift = 0; shift < c.n; ++shift) {
        int64_t kc = p.kvChunk(qc, shift);
        Vec ki = z.k(kc), vi = z.v(kc);
        dtc::runtime::cpu::ringAttentionBlockGrad(
            p.dims(), z.chunks(qc, kc), qi.data(), ki.data(), vi.data(),
            out.data(), lse.data(), dyi.data(), dqPart.data(), dkPart.data(),
            dvPart.data());
        for (size_t i = 0; i < dqPart.size(); ++i)
          dq[qc][i] += dqPart[i];
        for (size_t i = 0; i < dkPart.size(); ++i)
          dk[kc][i] += dkPart[i];
        for (size_t i = 0; i < dvPart.size(); ++i)
          dv[kc][i] += dvPart[i];
      }
    }
    for (int64_t i = 0; i < c.n; ++i) {
      SCOPED_TRACE("chunk " + std::to_string(i));
      std::vector<int64_t> positions = z.at(i);
      EXPECT_LT(
          maxAbsDiff(dq[i], rowsAt(wq, qOuter, c.seq, c.headDim, positions)),
          1e-4f);
      EXPECT_LT(
          maxAbsDiff(dk[i], rowsAt(wk, kOuter, c.seq, c.headDim, positions)),
          1e-4f);
      EXPECT_LT(
          maxAbsDiff(dv[i], rowsAt(wv, kOuter, c.seq, c.valueDim, positions)),
          1e-4f);
    }
  }
}

TEST_F(RingAttentionTest, ZigzagOrder) {
  // [2, 8] i64 in 4 pieces of 2 along dim 1: the order is 0, 3, 1, 2.
  Tensor ints(DType::I64, {2, 8});
  for (int64_t i = 0; i < 16; ++i)
    ints.as<int64_t>()[i] = i;
  Op forward("dtc.zigzag_order"), inverse("dtc.zigzag_order");
  forward.i("dim", 1).i("parts", 2);
  inverse.i("dim", 1).i("parts", 2).b("inverse");
  Tensor zig = run(forward, {ints}, {{DType::I64, {2, 8}}})[0];
  std::vector<int64_t> got(zig.as<int64_t>(), zig.as<int64_t>() + 16);
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 6, 7, 2, 3, 4, 5, //
                                       8, 9, 14, 15, 10, 11, 12, 13}));
  Tensor back = run(inverse, {zig}, {{DType::I64, {2, 8}}})[0];
  EXPECT_EQ(std::vector<int64_t>(back.as<int64_t>(), back.as<int64_t>() + 16),
            std::vector<int64_t>(ints.as<int64_t>(), ints.as<int64_t>() + 16));

  // f32 [2, 12, 3] along dim 1 over 3 parts: the result's contiguous thirds
  // are the zigzag chunks.
  Shape shape = {2, 12, 3};
  Vec x = randomVec(rng, count(shape));
  Op forward3("dtc.zigzag_order"), inverse3("dtc.zigzag_order");
  forward3.i("dim", 1).i("parts", 3);
  inverse3.i("dim", 1).i("parts", 3).b("inverse");
  Tensor zig3 = run(forward3, {f32(shape, x)}, {{DType::F32, shape}})[0];
  std::vector<int64_t> order;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t pos : zigzagPositions(r, 3, 4))
      order.push_back(pos);
  EXPECT_EQ(toVec(zig3), rowsAt(x, 2, 12, 3, order));
  EXPECT_EQ(toVec(run(inverse3, {zig3}, {{DType::F32, shape}})[0]), x);

  // The dim must split into 2 x parts pieces.
  std::vector<Tensor> outputs;
  outputs.emplace_back(DType::F32, shape);
  Op bad("dtc.zigzag_order");
  bad.i("dim", 1).i("parts", 4);
  llvm::Error err = tryRun(bad, {f32(shape, x)}, outputs);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("equal pieces"),
            std::string::npos);
}

TEST_F(RingAttentionTest, BadShapesAreErrors) {
  Shape qs = {1, 2, 4, 3}, ks = {1, 2, 4, 3}, os = {1, 2, 4, 3}, ls = {1, 2, 4};
  auto expectError = [&](const Op &op, const std::vector<Tensor> &inputs,
                         const std::vector<std::pair<DType, Shape>> &shapes,
                         const std::string &needle) {
    std::vector<Tensor> outputs;
    for (const auto &[dtype, shape] : shapes)
      outputs.emplace_back(dtype, shape);
    llvm::Error err = tryRun(op, inputs, outputs);
    ASSERT_TRUE(static_cast<bool>(err)) << op.inst.op() << " accepted it";
    std::string message = llvm::toString(std::move(err));
    EXPECT_NE(message.find(op.inst.op()), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  };
  Op block("dtc.attention_block"), blockGrad("dtc.attention_block_grad");
  for (Op *op : {&block, &blockGrad})
    op->axes({"cp"}).i("kv_shift", 0).f("scale", 0.5);
  Tensor q(DType::F32, qs), k(DType::F32, ks), badK(DType::F32, {1, 2, 4, 5}),
      o(DType::F32, os), l(DType::F32, ls);
  // Key head dim 5 against query head dim 3.
  expectError(block, {q, badK, k}, {{DType::F32, os}, {DType::F32, ls}},
              "inconsistent");
  expectError(block, {q, k, k}, {{DType::F32, os}, {DType::F32, {1, 2, 5}}},
              "lse");
  expectError(block, {q, k}, {{DType::F32, os}, {DType::F32, ls}}, "");
  expectError(blockGrad, {q, k, k, o, Tensor(DType::F32, {1, 2, 3}), o},
              {{DType::F32, qs}, {DType::F32, ks}, {DType::F32, ks}}, "lse");
  expectError(Op("dtc.attention_merge"),
              {o, l, o, Tensor(DType::F32, {1, 2, 4, 3})},
              {{DType::F32, os}, {DType::F32, ls}}, "lse_b");
  // A later ring step without the ring.
  Op shifted("dtc.attention_block");
  shifted.axes({"cp"}).i("kv_shift", 1).f("scale", 0.5);
  expectError(shifted, {q, k, k}, {{DType::F32, os}, {DType::F32, ls}},
              "kv_shift");
  // Zigzag chunks are two halves: 5 rows do not split.
  Shape oddQ = {1, 2, 5, 3}, oddL = {1, 2, 5};
  Tensor q5(DType::F32, oddQ), o5(DType::F32, oddQ), l5(DType::F32, oddL);
  for (Op *op : {&block, &blockGrad})
    op->b("zigzag");
  expectError(block, {q5, k, k}, {{DType::F32, oddQ}, {DType::F32, oddL}},
              "zigzag");
  expectError(blockGrad, {q5, k, k, o5, l5, o5},
              {{DType::F32, oddQ}, {DType::F32, ks}, {DType::F32, ks}},
              "zigzag");
  expectError(
      block,
      {q, Tensor(DType::F32, {1, 2, 3, 3}), Tensor(DType::F32, {1, 2, 3, 3})},
      {{DType::F32, os}, {DType::F32, ls}}, "zigzag");
}

} // namespace
