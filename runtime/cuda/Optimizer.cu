//===- Optimizer.cu - dtc.adamw -------------------------------------------===//
//
// runtime/cpu/Optimizer.cpp's AdamW step. The scalars (lr, step,
// grad_scale) stay on the device: every thread reads them, so the step
// never waits for the host. Each element's inputs are read before its
// outputs are written (the results may alias their operands).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

namespace dtc::cuda {

namespace {

struct Coefficients {
  float decay, stepSize, sqrtBc2, gradScale;
};

__device__ Coefficients coefficients(const AdamW &h) {
  double lr = loadF(h.lr, h.lrDtype, 0);
  double step = loadF(h.step, h.stepDtype, 0);
  Coefficients c;
  c.decay = static_cast<float>(1.0 - lr * h.weightDecay);
  c.stepSize = static_cast<float>(lr / (1.0 - pow(h.beta1, step)));
  c.sqrtBc2 = static_cast<float>(sqrt(1.0 - pow(h.beta2, step)));
  c.gradScale = loadF(h.gradScale, h.gradScaleDtype, 0);
  return c;
}

__global__ void adamwKernel(AdamW h, int64_t n, int pDtype, const void *p,
                            int gDtype, const void *g, int mDtype,
                            const void *m, int vDtype, const void *v,
                            void *pOut, void *mOut, void *vOut, int *error) {
  __shared__ Coefficients shared;
  __shared__ bool badStep;
  if (threadIdx.x == 0) {
    shared = coefficients(h);
    badStep = !(loadF(h.step, h.stepDtype, 0) >= 1.0f);
    if (blockIdx.x == 0 && badStep)
      flagError(error, kBadAdamStep);
  }
  __syncthreads();
  // Like the CPU kernel, a bad step writes nothing (the update is in place).
  if (badStep)
    return;
  Coefficients c = shared;
  float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2);
  float eps = static_cast<float>(h.eps);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float pv = loadF(p, pDtype, i), gv = loadF(g, gDtype, i) * c.gradScale;
    float mv = loadF(m, mDtype, i), vv = loadF(v, vDtype, i);
    mv = b1 * mv + (1.0f - b1) * gv;
    vv = b2 * vv + (1.0f - b2) * gv * gv;
    pv = pv * c.decay - c.stepSize * mv / (sqrtf(vv) / c.sqrtBc2 + eps);
    storeF(pOut, pDtype, i, pv);
    storeF(mOut, mDtype, i, mv);
    storeF(vOut, vDtype, i, vv);
  }
}

} // namespace

std::string adamw(const AdamW &hyper, int64_t n, int pDtype, const void *p,
                  int gDtype, const void *g, int mDtype, const void *m,
                  int vDtype, const void *v, void *pOut, void *mOut,
                  void *vOut) {
  if (n == 0)
    return "";
  adamwKernel<<<blocksFor(n), 256, 0, computeStream()>>>(
      hyper, n, pDtype, p, gDtype, g, mDtype, m, vDtype, v, pOut, mOut, vOut,
      errorWord());
  return launched("adamw kernel");
}

} // namespace dtc::cuda
