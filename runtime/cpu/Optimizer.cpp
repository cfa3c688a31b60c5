//===- Optimizer.cpp - Optimizer update kernels ---------------------------===//
//
// dtc.adamw: PyTorch's AdamW step, elementwise. The lowering may give each
// result the buffer of the operand it replaces (an in-place update), so an
// element's inputs are all read before its outputs are written, and nothing
// is read at another index.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"

#include "runtime/core/Optimizer.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <cmath>
#include <string>

namespace dtc::runtime::cpu {

namespace {

/// A square root, a division and about ten multiply-adds per element.
constexpr int64_t kWorkAdamW = 16;

/// Writes `value` at `index` of a float tensor of any float dtype.
inline void storeFloat(const TensorRef &t, int64_t index, float value) {
  switch (t.dtype) {
  case DType::F32:
    t.as<float>()[index] = value;
    return;
  case DType::F64:
    t.as<double>()[index] = value;
    return;
  case DType::BF16:
    t.as<uint16_t>()[index] = floatToBF16(value);
    return;
  case DType::F16:
    t.as<uint16_t>()[index] = floatToHalf(value);
    return;
  default:
    return;
  }
}

llvm::Error adamwKernel(const KernelCall &call) {
  llvm::Expected<AdamWConfig> config = readAdamW(call);
  if (!config)
    return config.takeError();
  const TensorRef &param = call.input(0), &grad = call.input(1),
                  &expAvg = call.input(2), &expAvgSq = call.input(3);
  double lr = loadAsFloat(call.input(4), 0);
  double step = loadAsFloat(call.input(5), 0);
  float gradScale = loadAsFloat(call.input(6), 0);
  if (!(step >= 1))
    return call.error("step must be at least 1 (1-based), got " +
                      llvm::Twine(std::to_string(step)));
  double beta1 = config->beta1, beta2 = config->beta2;
  double eps = config->epsilon, weightDecay = config->weightDecay;
  // PyTorch's form: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
  float decay = static_cast<float>(1.0 - lr * weightDecay);
  float stepSize = static_cast<float>(lr / (1.0 - std::pow(beta1, step)));
  float sqrtBc2 = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)));
  float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  float e = static_cast<float>(eps);
  const TensorRef &newParam = call.output(0), &newExpAvg = call.output(1),
                  &newExpAvgSq = call.output(2);
  int64_t n = param.numElements();
  bool allF32 = param.dtype == DType::F32 && grad.dtype == DType::F32 &&
                expAvg.dtype == DType::F32 && expAvgSq.dtype == DType::F32;
  auto update = [&](float p, float g, float m, float v, float &pOut,
                    float &mOut, float &vOut) {
    g *= gradScale;
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    pOut = p * decay - stepSize * m / (std::sqrt(v) / sqrtBc2 + e);
    mOut = m;
    vOut = v;
  };
  if (allF32) {
    const float *pp = param.f32(), *gp = grad.f32(), *mp = expAvg.f32(),
                *vp = expAvgSq.f32();
    float *po = newParam.f32(), *mo = newExpAvg.f32(), *vo = newExpAvgSq.f32();
    parallelFor(n, kWorkAdamW, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float p, m, v;
        update(pp[i], gp[i], mp[i], vp[i], p, m, v);
        po[i] = p;
        mo[i] = m;
        vo[i] = v;
      }
    });
    return llvm::Error::success();
  }
  parallelFor(n, kWorkAdamW, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float p, m, v;
      update(loadAsFloat(param, i), loadAsFloat(grad, i),
             loadAsFloat(expAvg, i), loadAsFloat(expAvgSq, i), p, m, v);
      storeFloat(newParam, i, p);
      storeFloat(newExpAvg, i, m);
      storeFloat(newExpAvgSq, i, v);
    }
  });
  return llvm::Error::success();
}

} // namespace

void registerOptimizerKernels(KernelRegistry &registry) {
  registry.add("dtc.adamw", adamwKernel);
}

} // namespace dtc::runtime::cpu
