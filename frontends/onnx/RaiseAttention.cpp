//===- RaiseAttention.cpp - decomposed SDPA -> dtc.attention --------------===//
//
// Exported scaled-dot-product attention is
//
//   softmax((q * s1) @ (kT * s2) [* s3] [+ mask], axis=-1) @ v
//
// with q [b, h, s, d], kT [b, h, d, t] (PyTorch transposes the [b, t, h, d]
// key reshape with perm [0, 2, 3, 1]), v [b, h, t, e], the scales splat
// constants (PyTorch splits 1/sqrt(d) into sqrt of it on each side) and the
// mask, after host evaluation, a constant that is 0 on and below the diagonal
// and -inf (or <= -1e4) above it. The key the op wants, [b, h, t, d], is kT
// with its last two dims swapped, folded into kT's own transpose. PyTorch's
// dynamo exporter (torchlib) transposes the key through 3-D instead:
// kT = reshape [b, h, d, t] of transpose [0, 2, 1] of reshape [b*h, t, d].
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Raise.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <array>
#include <cstring>
#include <map>

#include <cmath>

using namespace mlir;
using ::dtc::onnx::getSplatFloat;
namespace d = mlir::dtc;

namespace {

/// Strips `value * c`, `c * value` and `value / c` (splat c) off `value`,
/// multiplying `scale` by the factor. Needs a single use only when
/// `requireOneUse`: scaling q for attention alone is folded into the op,
/// but the unscaled q may also be read elsewhere.
Value stripScale(Value value, double &scale, bool requireOneUse) {
  while (true) {
    Operation *op = value.getDefiningOp();
    if (!op || (requireOneUse && !op->hasOneUse()))
      return value;
    if (auto mul = dyn_cast<d::MulOp>(op)) {
      if (auto c = getSplatFloat(mul.getRhs());
          c && mul.getLhs().getType() == mul.getType()) {
        scale *= *c;
        value = mul.getLhs();
        continue;
      }
      if (auto c = getSplatFloat(mul.getLhs());
          c && mul.getRhs().getType() == mul.getType()) {
        scale *= *c;
        value = mul.getRhs();
        continue;
      }
    }
    if (auto div = dyn_cast<d::DivOp>(op))
      if (auto c = getSplatFloat(div.getRhs());
          c && *c != 0 && div.getLhs().getType() == div.getType()) {
        scale /= *c;
        value = div.getLhs();
        continue;
      }
    return value;
  }
}

/// torchlib's key transpose: reshape[b, h, d, t](transpose[0, 2, 1](
/// reshape[b*h, t, d](x))) is x read as [b, h, t, d] with the last two dims
/// swapped. Returns x as [b, h, t, d] (a reshape, so GQA's repeat_kv under
/// it stays visible to RaiseGroupedQueryAttention).
std::optional<Value> untransposeFlatKey(Value kT, PatternRewriter &rewriter) {
  auto outer = kT.getDefiningOp<d::ReshapeOp>();
  if (!outer)
    return std::nullopt;
  auto transpose = outer.getInput().getDefiningOp<d::TransposeOp>();
  if (!transpose || transpose.getPermutation() != ArrayRef<int64_t>{0, 2, 1})
    return std::nullopt;
  auto inner = transpose.getInput().getDefiningOp<d::ReshapeOp>();
  if (!inner)
    return std::nullopt;
  auto kTType = cast<RankedTensorType>(kT.getType());
  auto flatType = cast<RankedTensorType>(inner.getType());
  if (kTType.getRank() != 4 || flatType.getRank() != 3)
    return std::nullopt;
  int64_t b = kTType.getDimSize(0), h = kTType.getDimSize(1),
          dd = kTType.getDimSize(2), t = kTType.getDimSize(3);
  if (flatType.getShape() != ArrayRef<int64_t>{b * h, t, dd})
    return std::nullopt;
  Value x = inner.getInput();
  auto keyType = kTType.clone({b, h, t, dd});
  if (x.getType() == keyType)
    return x;
  return d::ReshapeOp::create(rewriter, kT.getLoc(), keyType, x).getResult();
}

/// What a constant mask lets through, found by evaluating it.
enum class MaskKind { None, Causal };

/// The elementwise ops between the scores x = q.kT and the softmax:
/// softmax(f(x)) with f a chain of ops that each combine the running value
/// with constants only (scales, additive masks, masked_fill lowered to
/// x * keep + fill, select on a constant condition, ...). `ops` runs from x
/// outward; `chainOperand[i]` is the operand of ops[i] that carries x.
struct ScoreChain {
  Value scores;
  SmallVector<Operation *> ops;
  SmallVector<unsigned> chainOperand;
};

/// The ops the chain may hold: elementwise, their result the scores' shape.
bool isChainOp(Operation *op) {
  return isa<d::AddOp, d::SubOp, d::MulOp, d::DivOp, d::MaxOp, d::MinOp,
             d::NegOp, d::SelectOp>(op);
}

/// Walks back from the softmax's input through single-use chain ops whose
/// other operands are all constants and whose running operand already has
/// the result's type (constants broadcast, the scores never do).
ScoreChain findScoreChain(Value input) {
  ScoreChain chain;
  Value v = input;
  while (Operation *op = v.getDefiningOp()) {
    if (!isChainOp(op) || !op->hasOneUse())
      break;
    std::optional<unsigned> running;
    bool ok = true;
    for (OpOperand &operand : op->getOpOperands()) {
      if (matchPattern(operand.get(), m_Constant()))
        continue;
      if (running || operand.get().getType() != op->getResult(0).getType()) {
        ok = false;
        break;
      }
      running = operand.getOperandNumber();
    }
    if (!ok || !running)
      break;
    chain.ops.push_back(op);
    chain.chainOperand.push_back(*running);
    v = op->getOperand(*running);
  }
  std::reverse(chain.ops.begin(), chain.ops.end());
  std::reverse(chain.chainOperand.begin(), chain.chainOperand.end());
  chain.scores = v;
  return chain;
}

/// A constant operand, read with broadcasting: f32 in place (masks are
/// large), other types widened to doubles.
struct ConstantOperand {
  ArrayRef<float> f32;
  std::vector<double> values;
  SmallVector<int64_t> strides; ///< Per dim of the scores; 0 where broadcast.

  double at(int64_t offset) const {
    return f32.empty() ? values[offset] : f32[offset];
  }
};

/// The first column in [from, to) where `c`, read at offset + column *
/// stride, is not bitwise `value`: how far a run of equal values goes.
int64_t runEnd(const ConstantOperand &c, int64_t offset, int64_t stride,
               int64_t from, int64_t to, double value) {
  if (stride == 0 || from >= to)
    return to; // constant along the row
  if (c.f32.empty()) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    for (int64_t j = from; j < to; ++j) {
      uint64_t other;
      std::memcpy(&other, &c.values[offset + j * stride], sizeof other);
      if (other != bits)
        return j;
    }
    return to;
  }
  // The value was read from this f32 constant, so it converts back exactly.
  float narrow = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &narrow, sizeof bits);
  const float *data = c.f32.data() + offset;
  for (int64_t j = from; j < to; ++j) {
    uint32_t other;
    std::memcpy(&other, data + j * stride, sizeof other);
    if (other != bits)
      return j;
  }
  return to;
}

/// f(x) of a score chain, per score position: softmax(f(x)) equals
/// softmax(slope * x) masked where f sends every x far below any score.
struct ChainFunction {
  double slope = 0;
  MaskKind mask = MaskKind::None;
};

/// The value of chain op `op` at operands `in`.
double applyChainOp(Operation *op, ArrayRef<double> in) {
  return llvm::TypeSwitch<Operation *, double>(op)
      .Case([&](d::AddOp) { return in[0] + in[1]; })
      .Case([&](d::SubOp) { return in[0] - in[1]; })
      .Case([&](d::MulOp) { return in[0] * in[1]; })
      .Case([&](d::DivOp) { return in[0] / in[1]; })
      .Case([&](d::MaxOp) { return std::max(in[0], in[1]); })
      .Case([&](d::MinOp) { return std::min(in[0], in[1]); })
      .Case([&](d::NegOp) { return -in[0]; })
      .Case([&](d::SelectOp) { return in[0] != 0 ? in[1] : in[2]; })
      .Default([](Operation *) { return std::nan(""); });
}

/// Far below any score: -inf, a finite "large negative" fill (-1e4,
/// -1e9, finfo.min) or x * 0 + fill.
bool isMasked(double y) { return y <= -1e3; }

/// Bitwise equality: NaN constants repeat like any other value.
bool sameBits(double a, double b) {
  uint64_t u, v;
  std::memcpy(&u, &a, sizeof u);
  std::memcpy(&v, &b, sizeof v);
  return u == v;
}

/// The state of evaluateScoreChain: the chain's constants, read with
/// broadcasting, and what f was found to be so far.
class ScoreChainEvaluator {
public:
  explicit ScoreChainEvaluator(const ScoreChain &chain)
      : chain(chain), scoreType(cast<RankedTensorType>(chain.scores.getType())),
        rank(scoreType.getRank()), full(scoreType.getShape()), extent(rank, 1) {
  }

  /// Reads every op's constant operands; false if one is no constant the
  /// scores broadcast.
  bool readConstants();
  /// Evaluates f over every distinct position of the constants, recording
  /// which positions it lets through; false where softmax(slope * x)
  /// cannot express f or batches and heads hold different masks.
  bool sweep();
  /// The slope and the mask of the positions let through.
  std::optional<ChainFunction> function() const;

private:
  /// The constant operand `value`, broadcast against the scores (widening
  /// `extent` along the dims it varies).
  std::optional<ConstantOperand> readConstant(Value value);
  /// f(0), f(1), f(2) at one position of the scores, from the constants'
  /// values there (`read`, in chain order).
  std::array<double, 3> evaluate(ArrayRef<double> read) const;
  /// Classifies a freshly evaluated f: whether it masks the position, or
  /// false when softmax(slope * x) cannot express it.
  bool classify(const std::array<double, 3> &y, bool &off);
  /// Sweeps row `i` of the positions of leading (batch, head) position
  /// `lead`.
  bool sweepRow(int64_t lead, int64_t i);

  /// A constant in chain order, with its offset at the current row.
  struct Reader {
    const ConstantOperand *constant;
    int64_t offset = 0;
  };

  const ScoreChain &chain;
  RankedTensorType scoreType;
  int64_t rank;
  ArrayRef<int64_t> full;
  SmallVector<int64_t> extent;
  // Per op, its constant operands (nullopt for the running one).
  std::vector<SmallVector<std::optional<ConstantOperand>, 3>> constants;
  int64_t rows = 0, cols = 0;
  SmallVector<Reader, 4> readers;
  SmallVector<int64_t> index;
  SmallVector<double, 4> read, lastRead;
  bool haveLast = false, lastOff = false;
  std::vector<bool> through;
  std::optional<double> slope, intercept;
};

bool ScoreChainEvaluator::readConstants() {
  for (auto [op, running] : llvm::zip(chain.ops, chain.chainOperand)) {
    auto &row = constants.emplace_back();
    for (OpOperand &operand : op->getOpOperands()) {
      if (operand.getOperandNumber() == running) {
        row.push_back(std::nullopt);
        continue;
      }
      std::optional<ConstantOperand> c = readConstant(operand.get());
      if (!c)
        return false;
      row.push_back(std::move(*c));
    }
  }
  return true;
}

std::optional<ConstantOperand> ScoreChainEvaluator::readConstant(Value value) {
  DenseElementsAttr dense;
  if (!matchPattern(value, m_Constant(&dense)))
    return std::nullopt;
  auto type = cast<RankedTensorType>(dense.getType());
  if (type.getRank() > rank)
    return std::nullopt;
  ConstantOperand c;
  // A splat varies along no dim: one value, read everywhere.
  if (dense.isSplat()) {
    if (isa<FloatType>(dense.getElementType()))
      c.values.push_back(dense.getSplatValue<APFloat>().convertToDouble());
    else if (isa<IntegerType>(dense.getElementType())) {
      APInt i = dense.getSplatValue<APInt>();
      c.values.push_back(i.getBitWidth() == 1 ? i.getZExtValue()
                                              : i.getSExtValue());
    } else
      return std::nullopt;
    c.strides.assign(rank, 0);
    return c;
  }
  if (dense.getElementType().isF32()) {
    ArrayRef<char> raw = dense.getRawData();
    c.f32 = ArrayRef<float>(reinterpret_cast<const float *>(raw.data()),
                            raw.size() / sizeof(float));
  } else if (isa<FloatType>(dense.getElementType())) {
    c.values.reserve(dense.getNumElements());
    for (APFloat f : dense.getValues<APFloat>())
      c.values.push_back(f.convertToDouble());
  } else if (isa<IntegerType>(dense.getElementType())) {
    c.values.reserve(dense.getNumElements());
    for (APInt i : dense.getValues<APInt>())
      c.values.push_back(i.getBitWidth() == 1 ? i.getZExtValue()
                                              : i.getSExtValue());
  } else {
    return std::nullopt;
  }
  // Right-aligned numpy broadcasting against the scores' shape.
  c.strides.assign(rank, 0);
  int64_t stride = 1;
  for (int64_t dim = type.getRank() - 1; dim >= 0; --dim) {
    int64_t at = rank - type.getRank() + dim, size = type.getDimSize(dim);
    if (size != 1) {
      if (size != full[at])
        return std::nullopt;
      c.strides[at] = stride;
      extent[at] = full[at];
    }
    stride *= size;
  }
  return c;
}

// f depends on the position only through the constants' values there, and
// neighbouring positions mostly read the same ones (a mask is runs of 0 and
// -inf), so f is evaluated only where they change: a [4096, 4096] causal
// mask is then one load and compare per position, not three chain
// evaluations.
std::array<double, 3>
ScoreChainEvaluator::evaluate(ArrayRef<double> read) const {
  std::array<double, 3> y;
  for (int p = 0; p < 3; ++p) {
    double x = p;
    const double *next = read.data();
    for (auto [op, row] : llvm::zip(chain.ops, constants)) {
      SmallVector<double, 3> in;
      for (const std::optional<ConstantOperand> &c : row)
        in.push_back(c ? *next++ : x);
      x = applyChainOp(op, in);
    }
    y[p] = x;
  }
  return y;
}

bool ScoreChainEvaluator::classify(const std::array<double, 3> &y, bool &off) {
  off = isMasked(y[0]) && isMasked(y[1]) && isMasked(y[2]);
  if (off)
    return true;
  // Softmax sees slope * x + intercept: the slope joins the scale and a
  // common intercept cancels; both must be the same everywhere.
  double a = y[1] - y[0], b = y[0];
  auto near = [](double u, double v) {
    return std::abs(u - v) <= 1e-6 * std::max(1.0, std::abs(v));
  };
  if (!(a > 0) || !near(y[2] - y[1], a) || (slope && !near(a, *slope)) ||
      (intercept && !near(b, *intercept)))
    return false;
  slope = a;
  intercept = b;
  return true;
}

bool ScoreChainEvaluator::sweep() {
  if (rank < 2)
    return false;
  rows = extent[rank - 2];
  cols = extent[rank - 1];
  // The op applies one mask to every batch and head: a constant may be
  // stored per batch (HF's [b, 1, s, t]) but must hold the same mask in each.
  int64_t leading = 1;
  for (int64_t dim = 0; dim + 2 < rank; ++dim)
    leading *= extent[dim];
  for (auto &row : constants)
    for (const std::optional<ConstantOperand> &c : row)
      if (c)
        readers.push_back({&*c});

  index.assign(rank, 0);
  read.resize(readers.size());
  lastRead.resize(readers.size());
  through.resize(rows * cols);
  for (int64_t lead = 0; lead < leading; ++lead) {
    for (int64_t rest = lead, dim = rank - 3; dim >= 0; --dim) {
      index[dim] = rest % extent[dim];
      rest /= extent[dim];
    }
    for (int64_t i = 0; i < rows; ++i)
      if (!sweepRow(lead, i))
        return false;
  }
  return true;
}

bool ScoreChainEvaluator::sweepRow(int64_t lead, int64_t i) {
  for (Reader &r : readers) {
    r.offset = i * r.constant->strides[rank - 2];
    for (int64_t dim = 0; dim + 2 < rank; ++dim)
      r.offset += index[dim] * r.constant->strides[dim];
  }
  for (int64_t j = 0; j < cols;) {
    bool same = haveLast;
    for (auto [k, r] : llvm::enumerate(readers)) {
      read[k] = r.constant->at(r.offset + j * r.constant->strides[rank - 1]);
      same = same && sameBits(read[k], lastRead[k]);
    }
    if (!same) {
      if (!classify(evaluate(read), lastOff))
        return false;
      std::swap(read, lastRead);
      haveLast = true;
    }
    // The run of positions from j on that read the same values, so
    // get the same f.
    int64_t end = cols;
    for (auto [k, r] : llvm::enumerate(readers))
      end = std::min(end, runEnd(*r.constant, r.offset,
                                 r.constant->strides[rank - 1], j + 1, end,
                                 lastRead[k]));
    auto first = through.begin() + i * cols;
    if (lead == 0)
      std::fill(first + j, first + end, !lastOff);
    else if (std::find(first + j, first + end, lastOff) != first + end)
      return false; // another mask in another batch or head
    j = end;
  }
  return true;
}

std::optional<ChainFunction> ScoreChainEvaluator::function() const {
  if (!slope)
    return std::nullopt; // every position masked

  int64_t s = full[rank - 2], t = full[rank - 1];
  ChainFunction fn;
  fn.slope = *slope;
  bool none = llvm::all_of(through, [](bool b) { return b; });
  if (none)
    return fn;
  // Causal: key j passes query i iff j <= i, which needs the mask to vary
  // along both dims and cover the whole [s, t] square.
  if (rows != s || cols != t || s != t)
    return std::nullopt;
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < t; ++j)
      if (through[i * t + j] != (j <= i))
        return std::nullopt;
  fn.mask = MaskKind::Causal;
  return fn;
}

/// Evaluates `chain` at the probes x = 0, 1, 2 over every distinct position
/// of its constants (the scores' shape with the dims no constant varies
/// along collapsed to 1), then classifies what it lets through. Fails for
/// anything softmax(scale * q.k [causal]) cannot express: a slope that
/// varies, a non-linear f, a padding or sliding-window mask, a fully masked
/// row.
std::optional<ChainFunction> evaluateScoreChain(const ScoreChain &chain) {
  ScoreChainEvaluator evaluator(chain);
  if (!evaluator.readConstants() || !evaluator.sweep())
    return std::nullopt;
  return evaluator.function();
}

/// Every layer applies the same (uniqued) constants: each distinct chain is
/// evaluated once, not once per layer (most of a long-sequence import).
class ChainClassifier {
public:
  std::optional<ChainFunction> classify(const ScoreChain &chain) {
    std::vector<const void *> key = {
        chain.scores.getType().getAsOpaquePointer()};
    for (auto [op, running] : llvm::zip(chain.ops, chain.chainOperand)) {
      key.push_back(op->getName().getAsOpaquePointer());
      key.push_back(reinterpret_cast<const void *>(uintptr_t(running)));
      for (Value operand : op->getOperands()) {
        Attribute attr;
        if (matchPattern(operand, m_Constant(&attr)))
          key.push_back(attr.getAsOpaquePointer());
      }
    }
    auto [it, inserted] = cache.try_emplace(key, std::nullopt);
    if (inserted)
      it->second = evaluateScoreChain(chain);
    return it->second;
  }

private:
  std::map<std::vector<const void *>, std::optional<ChainFunction>> cache;
};

/// torch's guard of fully masked rows, Where(IsNaN(p), 0, p), as imported:
/// select(compare(p, p, "ne"), 0, p). Returns p when `value` is the guard
/// of a softmax that only the guard reads.
std::optional<d::SoftmaxOp> unguardedSoftmax(Value value) {
  auto select = value.getDefiningOp<d::SelectOp>();
  if (!select || !select->hasOneUse())
    return std::nullopt;
  auto softmax = select.getOnFalse().getDefiningOp<d::SoftmaxOp>();
  auto isNan = select.getCond().getDefiningOp<d::CompareOp>();
  auto zero = getSplatFloat(select.getOnTrue());
  if (!softmax || !isNan || !zero || *zero != 0 ||
      isNan.getPredicate() != "ne" || isNan.getLhs() != softmax.getResult() ||
      isNan.getRhs() != softmax.getResult() || !isNan->hasOneUse() ||
      select.getType() != softmax.getType())
    return std::nullopt;
  for (Operation *user : softmax->getUsers())
    if (user != select.getOperation() && user != isNan.getOperation())
      return std::nullopt;
  return softmax;
}

struct RaiseAttention : OpRewritePattern<d::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::MatmulOp pv,
                                PatternRewriter &rewriter) const override {
    if (pv.getTransposeLhs() || pv.getTransposeRhs())
      return failure();
    // The NaN guard only changes fully masked rows, which a mask the op
    // can express never has.
    auto softmax = pv.getLhs().getDefiningOp<d::SoftmaxOp>();
    if (!softmax || !softmax->hasOneUse())
      softmax = unguardedSoftmax(pv.getLhs()).value_or(nullptr);
    Value v = pv.getRhs();
    auto vType = cast<RankedTensorType>(v.getType());
    if (!softmax || vType.getRank() != 4 || softmax.getAxis() != 3)
      return failure();

    ScoreChain chain = findScoreChain(softmax.getInput());
    double scale = 1.0;
    bool causal = false;
    if (!chain.ops.empty()) {
      std::optional<ChainFunction> fn = chains.classify(chain);
      if (!fn)
        return failure(); // e.g. a padding or sliding-window mask
      scale = fn->slope;
      causal = fn->mask == MaskKind::Causal;
    }
    Value scores = stripScale(chain.scores, scale, /*requireOneUse=*/true);
    auto scoreType = cast<RankedTensorType>(scores.getType());
    int64_t s = scoreType.getDimSize(2), t = scoreType.getDimSize(3);
    auto qk = scores.getDefiningOp<d::MatmulOp>();
    if (!qk || !qk->hasOneUse() || qk.getTransposeLhs())
      return failure();
    Value q = stripScale(qk.getLhs(), scale, /*requireOneUse=*/false);
    Value kT = stripScale(qk.getRhs(), scale, /*requireOneUse=*/false);
    auto qType = cast<RankedTensorType>(q.getType());
    auto kType = cast<RankedTensorType>(kT.getType());
    if (qType.getRank() != 4 || kType.getRank() != 4)
      return failure();

    // Shapes as dtc.attention reads them; matmul's batch broadcasting must
    // not be doing anything attention would do differently.
    int64_t b = qType.getDimSize(0), h = qType.getDimSize(1),
            d = qType.getDimSize(3);
    int64_t g = kType.getDimSize(1);
    int64_t kd =
        qk.getTransposeRhs() ? kType.getDimSize(3) : kType.getDimSize(2);
    int64_t kt =
        qk.getTransposeRhs() ? kType.getDimSize(2) : kType.getDimSize(3);
    if (kType.getDimSize(0) != b || vType.getDimSize(0) != b || kd != d ||
        kt != t || qType.getDimSize(2) != s || vType.getDimSize(1) != g ||
        vType.getDimSize(2) != t || g == 0 || h % g != 0 ||
        (g != h && g != 1) ||
        pv.getType().getShape() != ArrayRef{b, h, s, vType.getDimSize(3)})
      return failure();

    Value key = kT;
    if (!qk.getTransposeRhs()) {
      if (auto flat = untransposeFlatKey(kT, rewriter)) {
        key = *flat;
      } else {
        // key = kT with the last two dims swapped, merged into kT's
        // transpose.
        SmallVector<int64_t> perm = {0, 1, 3, 2};
        if (auto inner = kT.getDefiningOp<d::TransposeOp>()) {
          ArrayRef<int64_t> p = inner.getPermutation();
          perm = {p[0], p[1], p[3], p[2]};
          key = inner.getInput();
        }
        key = d::TransposeOp::create(rewriter, kT.getLoc(), key, perm);
      }
    }
    rewriter.replaceOpWithNewOp<d::AttentionOp>(
        pv, pv.getType(), q, key, v, causal, rewriter.getF64FloatAttr(scale));
    return success();
  }

  // The rewrite driver is single-threaded over one function.
  mutable ChainClassifier chains;
};

} // namespace

namespace dtc::onnx {
SmallVector<Location> findUnraisedAttention(Operation *op) {
  SmallVector<Location> found;
  op->walk([&](d::MatmulOp pv) {
    if (pv.getLhs().getDefiningOp<d::SoftmaxOp>() ||
        unguardedSoftmax(pv.getLhs()))
      found.push_back(pv.getLoc());
  });
  return found;
}
} // namespace dtc::onnx

void ::dtc::onnx::populateRaiseAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseAttention>(patterns.getContext());
}
