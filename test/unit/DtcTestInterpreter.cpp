//===- DtcTestInterpreter.cpp - Reference evaluation of dtc IR ------------===//
//
// TEST-ONLY; see the header. Clarity over speed: every op is a loop nest
// over flat indices, in double precision.
//
//===----------------------------------------------------------------------===//

#include "DtcTestInterpreter.h"

#include "dialects/dtc/DtcOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using ::dtc::test::RefTensor;
namespace d = mlir::dtc;

namespace {

int64_t product(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Multi-index of flat index `flat` in `shape`.
SmallVector<int64_t> unflatten(int64_t flat, ArrayRef<int64_t> shape) {
  SmallVector<int64_t> idx(shape.size());
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

/// Flat index in `shape` of the result index `idx` under numpy broadcasting.
int64_t broadcastIndex(ArrayRef<int64_t> idx, ArrayRef<int64_t> shape) {
  int64_t offset = idx.size() - shape.size(), flat = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    flat = flat * shape[i] + (shape[i] == 1 ? 0 : idx[offset + i]);
  return flat;
}

RefTensor make(ArrayRef<int64_t> shape) {
  RefTensor t;
  t.shape.assign(shape.begin(), shape.end());
  t.data.assign(product(shape), 0.0);
  return t;
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

bool isInt(Value v) {
  return isa<IntegerType>(cast<RankedTensorType>(v.getType()).getElementType());
}

RefTensor fromAttr(DenseElementsAttr attr) {
  RefTensor t = make(attr.getType().getShape());
  int64_t i = 0;
  if (isa<FloatType>(attr.getElementType())) {
    for (APFloat v : attr.getValues<APFloat>())
      t.data[i++] = v.convertToDouble();
  } else if (attr.getElementType().isInteger(1)) {
    for (bool v : attr.getValues<bool>())
      t.data[i++] = v;
  } else {
    for (APInt v : attr.getValues<APInt>())
      t.data[i++] = static_cast<double>(v.getSExtValue());
  }
  return t;
}

class Interpreter {
public:
  explicit Interpreter(const ::dtc::test::ParameterMap &params)
      : params(params) {}

  llvm::Error run(Operation *op);
  llvm::DenseMap<Value, RefTensor> env;

private:
  const RefTensor &get(Value v) { return env.find(v)->second; }
  llvm::Error error(Operation *op, const llvm::Twine &message) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    os << op->getLoc();
    return llvm::createStringError(op->getName().getStringRef() + " at " + loc +
                                   ": " + message);
  }

  RefTensor binary(Operation *op, double (*f)(double, double)) {
    Value result = op->getResult(0);
    RefTensor out = make(shapeOf(result));
    const RefTensor &a = get(op->getOperand(0)), &b = get(op->getOperand(1));
    for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
      auto idx = unflatten(i, out.shape);
      out.data[i] = f(a.data[broadcastIndex(idx, a.shape)],
                      b.data[broadcastIndex(idx, b.shape)]);
    }
    if (isInt(result))
      for (double &v : out.data)
        v = std::trunc(v);
    return out;
  }
  RefTensor unary(Operation *op, double (*f)(double)) {
    RefTensor out = get(op->getOperand(0));
    for (double &v : out.data)
      v = f(v);
    return out;
  }
  RefTensor matmul(d::MatmulOp op);
  RefTensor conv(d::ConvOp op);
  RefTensor pool(Operation *op, ArrayRef<int64_t> kernel,
                 ArrayRef<int64_t> strides, ArrayRef<int64_t> dilations,
                 ArrayRef<int64_t> pads, int kind);
  RefTensor reduce(Operation *op, ArrayRef<int64_t> dims, int kind);
  RefTensor softmax(const RefTensor &x, int64_t axis);
  RefTensor norm(const RefTensor &x, const RefTensor &w, const RefTensor *b,
                 int64_t axis, double eps, bool rms);
  llvm::Expected<RefTensor> attention(d::AttentionOp op);

  const ::dtc::test::ParameterMap &params;
};

// Direct N-d convolution: zero padding, groups, strides, dilations.
RefTensor Interpreter::conv(d::ConvOp op) {
  const RefTensor &x = get(op.getInput()), &w = get(op.getWeight());
  const RefTensor *b = op.getBias() ? &get(op.getBias()) : nullptr;
  RefTensor out = make(shapeOf(op.getResult()));
  int64_t k = x.shape.size() - 2, groups = op.getGroups();
  int64_t cPerGroup = w.shape[1], fPerGroup = w.shape[0] / groups;
  ArrayRef<int64_t> strides = op.getStrides(), dilations = op.getDilations(),
                    pads = op.getPads();
  SmallVector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  int64_t window = product(kernel);
  auto xStrides = stridesOf(x.shape), wStrides = stridesOf(w.shape);
  for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
    auto idx = unflatten(i, out.shape);
    int64_t n = idx[0], f = idx[1], g = f / fPerGroup;
    double sum = b ? b->data[f] : 0.0;
    for (int64_t c = 0; c < cPerGroup; ++c) {
      for (int64_t t = 0; t < window; ++t) {
        auto tap = unflatten(t, kernel);
        int64_t xFlat = n * xStrides[0] + (g * cPerGroup + c) * xStrides[1];
        int64_t wFlat = f * wStrides[0] + c * wStrides[1];
        bool inside = true;
        for (int64_t s = 0; s < k; ++s) {
          int64_t pos =
              idx[2 + s] * strides[s] + tap[s] * dilations[s] - pads[s];
          if (pos < 0 || pos >= x.shape[2 + s]) {
            inside = false;
            break;
          }
          xFlat += pos * xStrides[2 + s];
          wFlat += tap[s] * wStrides[2 + s];
        }
        if (inside)
          sum += x.data[xFlat] * w.data[wFlat];
      }
    }
    out.data[i] = sum;
  }
  return out;
}

// Window pooling; padding is never part of a window. kind: 0 max, 1 average
// over the taps inside the input, 2 average over the whole kernel
// (count_include_pad).
RefTensor Interpreter::pool(Operation *op, ArrayRef<int64_t> kernel,
                            ArrayRef<int64_t> strides,
                            ArrayRef<int64_t> dilations, ArrayRef<int64_t> pads,
                            int kind) {
  const RefTensor &x = get(op->getOperand(0));
  RefTensor out = make(shapeOf(op->getResult(0)));
  int64_t k = kernel.size(), window = product(kernel);
  auto xStrides = stridesOf(x.shape);
  for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
    auto idx = unflatten(i, out.shape);
    double acc = kind == 0 ? -INFINITY : 0.0;
    int64_t count = 0;
    for (int64_t t = 0; t < window; ++t) {
      auto tap = unflatten(t, kernel);
      int64_t xFlat = idx[0] * xStrides[0] + idx[1] * xStrides[1];
      bool inside = true;
      for (int64_t s = 0; s < k && inside; ++s) {
        int64_t pos = idx[2 + s] * strides[s] + tap[s] * dilations[s] - pads[s];
        inside = pos >= 0 && pos < x.shape[2 + s];
        xFlat += pos * xStrides[2 + s];
      }
      if (!inside)
        continue;
      ++count;
      acc = kind == 0 ? std::max(acc, x.data[xFlat]) : acc + x.data[xFlat];
    }
    out.data[i] = kind == 0 ? acc : acc / (kind == 2 ? window : count);
  }
  return out;
}

RefTensor Interpreter::matmul(d::MatmulOp op) {
  const RefTensor &a = get(op.getLhs()), &b = get(op.getRhs());
  RefTensor out = make(shapeOf(op.getResult()));
  int64_t ra = a.shape.size(), rb = b.shape.size(), ro = out.shape.size();
  int64_t m = out.shape[ro - 2], n = out.shape[ro - 1];
  int64_t k = op.getTransposeLhs() ? a.shape[ra - 2] : a.shape[ra - 1];
  ArrayRef<int64_t> aBatch = ArrayRef(a.shape).drop_back(2),
                    bBatch = ArrayRef(b.shape).drop_back(2),
                    oBatch = ArrayRef(out.shape).drop_back(2);
  for (int64_t batch = 0, e = product(oBatch); batch < e; ++batch) {
    auto idx = unflatten(batch, oBatch);
    int64_t aBase =
        broadcastIndex(idx, aBatch) * a.shape[ra - 2] * a.shape[ra - 1];
    int64_t bBase =
        broadcastIndex(idx, bBatch) * b.shape[rb - 2] * b.shape[rb - 1];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          double x = op.getTransposeLhs() ? a.data[aBase + p * m + i]
                                          : a.data[aBase + i * k + p];
          double y = op.getTransposeRhs() ? b.data[bBase + j * k + p]
                                          : b.data[bBase + p * n + j];
          sum += x * y;
        }
        out.data[(batch * m + i) * n + j] = sum;
      }
  }
  return out;
}

/// kind: 0 sum, 1 mean, 2 max.
RefTensor Interpreter::reduce(Operation *op, ArrayRef<int64_t> dims, int kind) {
  const RefTensor &x = get(op->getOperand(0));
  SmallVector<int64_t> kept(x.shape.begin(), x.shape.end());
  int64_t count = 1;
  for (int64_t dim : dims) {
    count *= kept[dim];
    kept[dim] = 1;
  }
  RefTensor acc = make(kept);
  if (kind == 2)
    std::fill(acc.data.begin(), acc.data.end(),
              -std::numeric_limits<double>::infinity());
  for (int64_t i = 0, e = x.data.size(); i < e; ++i) {
    int64_t slot = broadcastIndex(unflatten(i, x.shape), kept);
    acc.data[slot] = kind == 2 ? std::max(acc.data[slot], x.data[i])
                               : acc.data[slot] + x.data[i];
  }
  if (kind == 1)
    for (double &v : acc.data)
      v /= count;
  acc.shape.assign(shapeOf(op->getResult(0)).begin(),
                   shapeOf(op->getResult(0)).end());
  return acc;
}

RefTensor Interpreter::softmax(const RefTensor &x, int64_t axis) {
  RefTensor out = x;
  int64_t size = x.shape[axis];
  int64_t inner = product(ArrayRef(x.shape).drop_front(axis + 1));
  int64_t outer = product(ArrayRef(x.shape).take_front(axis));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t i) -> double & {
        return out.data[(o * size + i) * inner + in];
      };
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t i = 0; i < size; ++i)
        mx = std::max(mx, at(i));
      for (int64_t i = 0; i < size; ++i)
        sum += (at(i) = std::exp(at(i) - mx));
      for (int64_t i = 0; i < size; ++i)
        at(i) /= sum;
    }
  return out;
}

RefTensor Interpreter::norm(const RefTensor &x, const RefTensor &w,
                            const RefTensor *b, int64_t axis, double eps,
                            bool rms) {
  RefTensor out = x;
  int64_t inner = product(ArrayRef(x.shape).drop_front(axis));
  for (int64_t o = 0, e = x.data.size() / inner; o < e; ++o) {
    const double *row = &x.data[o * inner];
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t i = 0; i < inner; ++i)
        mean += row[i];
      mean /= inner;
    }
    for (int64_t i = 0; i < inner; ++i)
      var += (row[i] - mean) * (row[i] - mean);
    var /= inner;
    for (int64_t i = 0; i < inner; ++i)
      out.data[o * inner + i] =
          (row[i] - mean) / std::sqrt(var + eps) * w.data[i] +
          (b ? b->data[i] : 0.0);
  }
  return out;
}

llvm::Expected<RefTensor> Interpreter::attention(d::AttentionOp op) {
  const RefTensor &q = get(op.getQuery()), &k = get(op.getKey()),
                  &v = get(op.getValue());
  int64_t B = q.shape[0], H = q.shape[1], S = q.shape[2], D = q.shape[3];
  int64_t G = k.shape[1], T = k.shape[2], E = v.shape[3];
  double scale = op.getEffectiveScale();
  RefTensor out = make({B, H, S, E});
  std::vector<double> p(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      int64_t g = h / (H / G);
      for (int64_t s = 0; s < S; ++s) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t t = 0; t < T; ++t) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i)
            dot += q.data[((b * H + h) * S + s) * D + i] *
                   k.data[((b * G + g) * T + t) * D + i];
          p[t] = op.getCausal() && t > s
                     ? -std::numeric_limits<double>::infinity()
                     : dot * scale;
          mx = std::max(mx, p[t]);
        }
        for (int64_t t = 0; t < T; ++t)
          sum += (p[t] = std::exp(p[t] - mx));
        for (int64_t e = 0; e < E; ++e) {
          double acc = 0;
          for (int64_t t = 0; t < T; ++t)
            acc += p[t] / sum * v.data[((b * G + g) * T + t) * E + e];
          out.data[((b * H + h) * S + s) * E + e] = acc;
        }
      }
    }
  return out;
}

llvm::Error Interpreter::run(Operation *op) {
  auto set = [&](RefTensor t) {
    env[op->getResult(0)] = std::move(t);
    return llvm::Error::success();
  };
  auto gelu = [](double x) {
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  };
  auto geluTanh = [](double x) {
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  return llvm::TypeSwitch<Operation *, llvm::Error>(op)
      .Case([&](d::ConstantOp c) {
        return set(fromAttr(cast<DenseElementsAttr>(c.getValue())));
      })
      .Case([&](d::ParameterOp p) -> llvm::Error {
        auto it = params.find(p.getName().str());
        if (it == params.end())
          return error(op, "no value for parameter " + p.getName());
        if (ArrayRef<int64_t>(it->second.shape) != shapeOf(p.getResult()))
          return error(op, "parameter shape mismatch");
        return set(it->second);
      })
      .Case([&](d::AddOp) {
        return set(binary(op, [](double a, double b) { return a + b; }));
      })
      .Case([&](d::SubOp) {
        return set(binary(op, [](double a, double b) { return a - b; }));
      })
      .Case([&](d::MulOp) {
        return set(binary(op, [](double a, double b) { return a * b; }));
      })
      .Case([&](d::DivOp) {
        return set(binary(op, [](double a, double b) { return a / b; }));
      })
      .Case([&](d::MaxOp) {
        return set(
            binary(op, [](double a, double b) { return std::max(a, b); }));
      })
      .Case([&](d::MinOp) {
        return set(
            binary(op, [](double a, double b) { return std::min(a, b); }));
      })
      .Case([&](d::PowOp) {
        return set(
            binary(op, [](double a, double b) { return std::pow(a, b); }));
      })
      .Case([&](d::CompareOp c) -> llvm::Error {
        using Fn = double (*)(double, double);
        Fn f =
            llvm::StringSwitch<Fn>(c.getPredicate())
                .Case("eq", [](double a, double b) -> double { return a == b; })
                .Case("ne", [](double a, double b) -> double { return a != b; })
                .Case("lt", [](double a, double b) -> double { return a < b; })
                .Case("le", [](double a, double b) -> double { return a <= b; })
                .Case("gt", [](double a, double b) -> double { return a > b; })
                .Case("ge", [](double a, double b) -> double { return a >= b; })
                .Default(nullptr);
        if (!f)
          return error(op, "unknown predicate " + c.getPredicate());
        return set(binary(op, f));
      })
      .Case([&](d::SelectOp) {
        RefTensor out = make(shapeOf(op->getResult(0)));
        const RefTensor &c = get(op->getOperand(0)),
                        &a = get(op->getOperand(1)),
                        &b = get(op->getOperand(2));
        for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
          auto idx = unflatten(i, out.shape);
          out.data[i] = c.data[broadcastIndex(idx, c.shape)] != 0
                            ? a.data[broadcastIndex(idx, a.shape)]
                            : b.data[broadcastIndex(idx, b.shape)];
        }
        return set(std::move(out));
      })
      .Case(
          [&](d::NegOp) { return set(unary(op, [](double x) { return -x; })); })
      .Case([&](d::AbsOp) {
        return set(unary(op, [](double x) { return std::fabs(x); }));
      })
      .Case([&](d::ExpOp) {
        return set(unary(op, [](double x) { return std::exp(x); }));
      })
      .Case([&](d::LogOp) {
        return set(unary(op, [](double x) { return std::log(x); }));
      })
      .Case([&](d::SqrtOp) {
        return set(unary(op, [](double x) { return std::sqrt(x); }));
      })
      .Case([&](d::RsqrtOp) {
        return set(unary(op, [](double x) { return 1 / std::sqrt(x); }));
      })
      .Case([&](d::ReciprocalOp) {
        return set(unary(op, [](double x) { return 1 / x; }));
      })
      .Case([&](d::TanhOp) {
        return set(unary(op, [](double x) { return std::tanh(x); }));
      })
      .Case([&](d::ErfOp) {
        return set(unary(op, [](double x) { return std::erf(x); }));
      })
      .Case([&](d::SigmoidOp) {
        return set(unary(op, [](double x) { return 1 / (1 + std::exp(-x)); }));
      })
      .Case([&](d::SoftplusOp) {
        return set(unary(op, [](double x) { return std::log1p(std::exp(x)); }));
      })
      .Case([&](d::ReluOp) {
        return set(unary(op, [](double x) { return x > 0 ? x : 0.0; }));
      })
      .Case([&](d::SiluOp) {
        return set(unary(op, [](double x) { return x / (1 + std::exp(-x)); }));
      })
      .Case([&](d::GeluOp g) {
        return set(g.getApproximateTanh() ? unary(op, geluTanh)
                                          : unary(op, gelu));
      })
      .Case([&](d::CastOp c) {
        RefTensor t = get(c.getInput());
        Type to = c.getTo();
        if (to.isInteger(1))
          for (double &v : t.data)
            v = v != 0;
        else if (isa<IntegerType>(to))
          for (double &v : t.data)
            v = std::trunc(v);
        return set(std::move(t));
      })
      .Case([&](d::MatmulOp m) { return set(matmul(m)); })
      .Case([&](d::ConvOp c) { return set(conv(c)); })
      .Case([&](d::MaxPoolOp p) {
        return set(pool(op, p.getKernelShape(), p.getStrides(),
                        p.getDilations(), p.getPads(), 0));
      })
      .Case([&](d::AvgPoolOp p) {
        return set(pool(op, p.getKernelShape(), p.getStrides(),
                        p.getDilations(), p.getPads(),
                        p.getCountIncludePad() ? 2 : 1));
      })
      .Case([&](d::ReduceSumOp r) { return set(reduce(op, r.getDims(), 0)); })
      .Case([&](d::ReduceMeanOp r) { return set(reduce(op, r.getDims(), 1)); })
      .Case([&](d::ReduceMaxOp r) { return set(reduce(op, r.getDims(), 2)); })
      .Case([&](d::SoftmaxOp s) {
        return set(softmax(get(s.getInput()), s.getAxis()));
      })
      .Case([&](d::LayerNormOp n) {
        return set(norm(get(n.getInput()), get(n.getWeight()),
                        n.getBias() ? &get(n.getBias()) : nullptr, n.getAxis(),
                        n.getEpsilon().convertToDouble(), false));
      })
      .Case([&](d::RmsNormOp n) {
        return set(norm(get(n.getInput()), get(n.getWeight()), nullptr,
                        n.getAxis(), n.getEpsilon().convertToDouble(), true));
      })
      .Case([&](d::ReshapeOp r) {
        RefTensor t = get(r.getInput());
        t.shape.assign(shapeOf(r.getResult()).begin(),
                       shapeOf(r.getResult()).end());
        return set(std::move(t));
      })
      .Case([&](d::TransposeOp tr) {
        const RefTensor &x = get(tr.getInput());
        RefTensor out = make(shapeOf(tr.getResult()));
        auto strides = stridesOf(x.shape);
        ArrayRef<int64_t> perm = tr.getPermutation();
        for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
          auto idx = unflatten(i, out.shape);
          int64_t src = 0;
          for (size_t dim = 0; dim < perm.size(); ++dim)
            src += idx[dim] * strides[perm[dim]];
          out.data[i] = x.data[src];
        }
        return set(std::move(out));
      })
      .Case([&](d::ConcatOp c) {
        RefTensor out = make(shapeOf(c.getResult()));
        int64_t axis = c.getAxis();
        for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
          auto idx = unflatten(i, out.shape);
          for (Value input : c.getInputs()) {
            const RefTensor &x = get(input);
            if (idx[axis] < x.shape[axis]) {
              int64_t src = 0;
              for (size_t dim = 0; dim < idx.size(); ++dim)
                src = src * x.shape[dim] + idx[dim];
              out.data[i] = x.data[src];
              break;
            }
            idx[axis] -= x.shape[axis];
          }
        }
        return set(std::move(out));
      })
      .Case([&](d::SliceOp s) {
        const RefTensor &x = get(s.getInput());
        RefTensor out = make(shapeOf(s.getResult()));
        auto strides = stridesOf(x.shape);
        for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
          auto idx = unflatten(i, out.shape);
          int64_t src = 0;
          for (size_t dim = 0; dim < idx.size(); ++dim)
            src += (s.getStarts()[dim] + idx[dim] * s.getStrides()[dim]) *
                   strides[dim];
          out.data[i] = x.data[src];
        }
        return set(std::move(out));
      })
      .Case([&](d::EmbeddingOp emb) -> llvm::Error {
        const RefTensor &table = get(emb.getTable()), &ids = get(emb.getIds());
        int64_t rows = table.shape[0], dim = table.shape[1];
        RefTensor out = make(shapeOf(emb.getResult()));
        for (size_t i = 0; i < ids.data.size(); ++i) {
          int64_t row = static_cast<int64_t>(ids.data[i]);
          if (row < 0 || row >= rows)
            return error(op, "id out of range");
          for (int64_t j = 0; j < dim; ++j)
            out.data[i * dim + j] = table.data[row * dim + j];
        }
        return set(std::move(out));
      })
      .Case([&](d::GatherElementsOp g) -> llvm::Error {
        const RefTensor &data = get(g.getData()),
                        &indices = get(g.getIndices());
        int64_t axis = g.getAxis(), size = data.shape[axis];
        auto strides = stridesOf(data.shape);
        RefTensor out = make(shapeOf(g.getResult()));
        for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
          auto idx = unflatten(i, out.shape);
          int64_t k = static_cast<int64_t>(indices.data[i]);
          if (k < -size || k >= size)
            return error(op, "index out of range");
          idx[axis] = k < 0 ? k + size : k;
          int64_t src = 0;
          for (size_t dim = 0; dim < idx.size(); ++dim)
            src += idx[dim] * strides[dim];
          out.data[i] = data.data[src];
        }
        return set(std::move(out));
      })
      .Case([&](d::CumSumOp c) {
        const RefTensor &x = get(c.getInput());
        int64_t axis = c.getAxis(), n = x.shape[axis];
        int64_t stride = stridesOf(x.shape)[axis];
        RefTensor out = make(x.shape);
        for (int64_t i = 0, e = out.data.size(); i < e; ++i) {
          int64_t k = unflatten(i, x.shape)[axis];
          // out[k] sums x[j] for j <= k (>= k reversed), k itself unless
          // exclusive.
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            bool before = c.getReverse() ? j > k : j < k;
            if (before || (j == k && !c.getExclusive()))
              sum += x.data[i + (j - k) * stride];
          }
          out.data[i] = sum;
        }
        return set(std::move(out));
      })
      .Case([&](d::AttentionOp a) -> llvm::Error {
        auto out = attention(a);
        if (!out)
          return out.takeError();
        return set(std::move(*out));
      })
      .Case([&](d::CrossEntropyOp ce) {
        const RefTensor &logits = get(ce.getLogits()),
                        &labels = get(ce.getLabels());
        int64_t v = logits.shape.back();
        double total = 0;
        int64_t count = 0;
        for (size_t i = 0; i < labels.data.size(); ++i) {
          int64_t label = static_cast<int64_t>(labels.data[i]);
          if (label == static_cast<int64_t>(ce.getIgnoreIndex()))
            continue;
          const double *row = &logits.data[i * v];
          double mx = *std::max_element(row, row + v), sum = 0;
          for (int64_t j = 0; j < v; ++j)
            sum += std::exp(row[j] - mx);
          total += mx + std::log(sum) - row[label];
          ++count;
        }
        RefTensor out = make({});
        out.data[0] = total / count;
        return set(std::move(out));
      })
      .Default([&](Operation *) {
        return error(op, "the test interpreter does not implement this op");
      });
}

} // namespace

namespace dtc::test {
llvm::Expected<std::vector<RefTensor>> interpret(func::FuncOp func,
                                                 ArrayRef<RefTensor> args,
                                                 const ParameterMap &params) {
  Interpreter interp(params);
  Block &body = func.getBody().front();
  if (args.size() != body.getNumArguments())
    return llvm::createStringError("wrong number of arguments");
  for (auto [arg, value] : llvm::zip(body.getArguments(), args)) {
    if (ArrayRef<int64_t>(value.shape) != shapeOf(arg))
      return llvm::createStringError("argument shape mismatch");
    interp.env[arg] = value;
  }
  for (Operation &op : body.without_terminator())
    if (llvm::Error err = interp.run(&op))
      return std::move(err);
  std::vector<RefTensor> results;
  for (Value v : body.getTerminator()->getOperands())
    results.push_back(interp.env.find(v)->second);
  return results;
}
} // namespace dtc::test
