//===- CudaOps.h - The CUDA backend's device functions ----------*- C++ -*-===//
//
// The launch functions of the CUDA kernels (runtime/cuda/*.cu), on raw
// device pointers and shapes. nvcc compiles the .cu files and never sees
// LLVM's headers; the KernelCall adapters (CudaKernels.cpp, host compiler)
// check operands and call these. Every function queues work on the
// backend's compute stream and returns "" on success, else what failed.
// Errors only a kernel can see (an id out of range) set a device error word
// that synchronize() reports.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CUDA_CUDAOPS_H
#define DTC_RUNTIME_CUDA_CUDAOPS_H

#include "runtime/core/Predicate.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtc::cuda {

/// The numbers of program.proto's DType.
enum DTypeCode : int {
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kF64 = 4,
  kI64 = 5,
  kI32 = 6,
  kI8 = 7,
  kBool = 8,
};

/// Dimensions the strided kernels take after collapsing.
constexpr int kMaxRank = 8;

struct Layout {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  /// Per operand, in elements; 0 on broadcast dimensions.
  int64_t strides[3][kMaxRank] = {};
};

/// Device errors a kernel can flag (the error word holds the first).
enum DeviceError : int {
  kNoDeviceError = 0,
  kIdOutOfRange = 1,
  kLabelOutOfRange = 2,
  kBadAdamStep = 3,
  kSlotOutOfRange = 4,
  kIndexOutOfRange = 5,
};

//===--- runtime (Runtime.cu) ---------------------------------------------===//

/// Makes `device` current and creates the stream, the cuBLASLt handle and
/// its workspace (once per process; a later call naming another device is
/// an error). -1: whichever device is set up already, else device 0.
std::string initialize(int device = -1);
/// The device initialize() set up, or -1.
int initializedDevice();
int deviceCount();
/// Zeroed device memory, or nullptr.
void *allocate(size_t bytes);
void release(void *pointer);
/// kind: 0 host to device, 1 device to host (waits), 2 device to device.
std::string copy(void *dst, const void *src, size_t bytes, int kind);
std::string memsetZero(void *dst, size_t bytes);
/// Waits for the stream; reports a fault or the device error word (reset).
std::string synchronize();
/// Stream-ordered scratch for the adapters (nullptr when out of memory).
void *scratchAllocate(size_t bytes);
void scratchRelease(void *pointer);
/// The compute stream as a cudaStream_t.
void *stream();
/// Uses TF32 tensor cores for f32 GEMMs (DTC_CUDA_TF32=1 at initialize).
bool tf32();

//===--- elementwise (Elementwise.cu) -------------------------------------===//

enum class Unary {
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Tanh,
  Erf,
  Sigmoid,
  Softplus,
  Relu,
  Silu,
  GeluErf,
  GeluTanh,
};
std::string unary(Unary op, int dtype, const void *in, void *out, int64_t n);

enum class Binary { Add, Sub, Mul, Div, Max, Min, Pow };
/// out (outDtype) = op(a, b) broadcast by `layout` (strides[0] a, [1] b);
/// operands of another dtype convert to the result's.
std::string binary(Binary op, int outDtype, const void *a, int aDtype,
                   const void *b, int bDtype, void *out, const Layout &layout);

using runtime::Predicate;
std::string compare(Predicate pred, int dtype, const void *a, const void *b,
                    uint8_t *out, const Layout &layout);
/// Bitwise select of `elemSize`-byte elements (strides[0] on, [1] off,
/// [2] cond).
std::string select(const uint8_t *cond, const void *onTrue, const void *onFalse,
                   void *out, int elemSize, const Layout &layout);
std::string cast(int srcDtype, const void *src, int dstDtype, void *dst,
                 int64_t n);

enum class ActivationGrad { GeluErf, GeluTanh, Silu };
std::string activationGrad(ActivationGrad op, int dtype, const void *x,
                           int dyDtype, const void *dy, int outDtype, void *out,
                           int64_t n);

//===--- data movement (DataMovement.cu) ----------------------------------===//

/// out[i] = in[offset(i)] with strides[0] of `layout` (elements of
/// elemSize bytes), out contiguous.
std::string gather(const void *in, void *out, int elemSize,
                   const Layout &layout);
/// out zeroed, then out[offset(i)] = in[i] with strides[0] (injective).
std::string scatter(const void *in, void *out, size_t outBytes, int elemSize,
                    const Layout &layout);
/// Rows of `chunk` bytes, `outer` of them, into rows of `outRow` bytes at
/// `offset`.
std::string copy2d(const void *in, void *out, size_t chunk, size_t outRow,
                   size_t offset, int64_t outer);
/// `height` rows of `width` bytes from rows `srcPitch` apart to rows
/// `dstPitch` apart.
std::string copyPitched(const void *src, size_t srcPitch, void *dst,
                        size_t dstPitch, size_t width, int64_t height);
/// A lookup of `count` ids into table rows [firstId, firstId + rows) of
/// `wholeRows` (dtc.embedding: all of them; dtc.embedding_shard: this
/// rank's); ids outside [0, wholeRows) flag kIdOutOfRange.
struct Lookup {
  int64_t count = 0, dim = 0, rows = 0, firstId = 0, wholeRows = 0;
  bool ids64 = true;
};
/// out [count, dim] = the ids' rows, zeros for ids outside the shard.
std::string embedding(const Lookup &l, const void *table, int elemSize,
                      const void *ids, void *out);
/// out [rows, dim] = the sum of the dy rows by id (out of any float dtype);
/// ids outside the shard add nothing.
std::string embeddingGrad(const Lookup &l, const void *dy, int dyDtype,
                          const void *ids, void *out, int outDtype);
/// dtc.gather_elements over `l.elements()` elements: data element
/// (o, index, i) for indices element (o, j, i) (ElementLookup,
/// runtime/core/Embedding.h); indices outside [-size, size) flag
/// kIndexOutOfRange.
struct ElementLookup {
  int64_t outer = 1, count = 1, size = 1, inner = 1;
  bool ids64 = true;
};
std::string gatherElements(const ElementLookup &l, const void *data,
                           int elemSize, const void *indices, void *out);
/// Its gradient: zeros of the data shape (any float dtype), each dy element
/// added at its index.
std::string gatherElementsGrad(const ElementLookup &l, const void *dy,
                               int dyDtype, const void *indices, void *out,
                               int outDtype);
/// dtc.zigzag_order: `outer` runs of 2 * parts pieces of `pieceBytes`; piece
/// p of each run is piece p / 2 (p even) or 2 * parts - 1 - p / 2 (p odd) of
/// the input's run, or the reverse with `inverse`. `in` may be `out`.
std::string zigzagOrder(const void *in, void *out, size_t pieceBytes,
                        int64_t outer, int64_t parts, bool inverse);

//===--- reductions, norms, losses (Reduce.cu, Norm.cu) -------------------===//

enum class Reduce { Sum, Mean, Max };
/// [outer, count, inner] -> [outer, inner], dtype in and out.
std::string reduce(Reduce kind, int dtype, const void *in, void *out,
                   int64_t outer, int64_t count, int64_t inner);
/// dtc.cumsum over [outer, length, inner] along the middle dim, dtype in and
/// out (floats accumulate in f32, f64 in f64, integers in i64).
std::string cumSum(int dtype, const void *in, void *out, int64_t outer,
                   int64_t length, int64_t inner, bool exclusive, bool reverse);
/// dtc.selective_scan: a, x [batch, channels, length, state], c [batch,
/// length, state] -> y [batch, channels, length], one dtype throughout
/// (f32 accumulation), state at most 256.
std::string selectiveScan(int dtype, const void *a, const void *x,
                          const void *c, void *y, int64_t batch,
                          int64_t channels, int64_t length, int64_t state);
/// dtc.selective_scan_grad: (a, x, c, dy) -> (da, dx, dc); da's buffer holds
/// the recomputed states until the backward pass overwrites them.
std::string selectiveScanGrad(int dtype, const void *a, const void *x,
                              const void *c, const void *dy, void *da, void *dx,
                              void *dc, int64_t batch, int64_t channels,
                              int64_t length, int64_t state);
std::string softmax(int dtype, const void *in, void *out, int64_t outer,
                    int64_t size, int64_t inner);
std::string softmaxGrad(int yDtype, const void *y, int dyDtype, const void *dy,
                        int outDtype, void *out, int64_t outer, int64_t size,
                        int64_t inner);
/// layer_norm (bias may be null) or rms_norm over rows of `n`.
std::string norm(bool rms, int dtype, const void *x, int wDtype, const void *w,
                 int bDtype, const void *b, int outDtype, void *out,
                 int64_t rows, int64_t n, double eps);
/// dx, dw and (layer_norm) db.
std::string normGrad(bool rms, int xDtype, const void *x, int wDtype,
                     const void *w, int dyDtype, const void *dy, int dxDtype,
                     void *dx, int dwDtype, void *dw, int dbDtype, void *db,
                     int64_t rows, int64_t n, double eps);
std::string crossEntropy(int dtype, const void *logits, const void *labels,
                         bool labels64, int outDtype, void *out, int64_t rows,
                         int64_t vocab, int64_t ignore);
std::string crossEntropyGrad(int dtype, const void *logits, const void *labels,
                             bool labels64, int gradDtype, const void *gradLoss,
                             int outDtype, void *out, int64_t rows,
                             int64_t vocab, int64_t ignore);

/// The vocabulary-parallel loss (runtime/core/LossShards.h): `rows` rows
/// of `vocab` logits, ids [firstId, firstId + vocab) of `wholeVocab`;
/// stats hold 3 f32 per row and shard.
struct LossShard {
  int64_t rows = 0, vocab = 0, shards = 1, firstId = 0, wholeVocab = 0;
  int64_t ignore = -100;
};
/// dtc.cross_entropy_stats: stats [rows, 3].
std::string crossEntropyStats(const LossShard &s, int dtype, const void *logits,
                              const void *labels, bool labels64, float *stats);
/// dtc.cross_entropy_from_stats: the mean loss from stats [rows, 3 shards].
std::string crossEntropyFromStats(const LossShard &s, const float *stats,
                                  const void *labels, bool labels64,
                                  int outDtype, void *out);
/// dtc.cross_entropy_shard_grad: this shard's [rows, vocab] gradient.
std::string crossEntropyShardGrad(const LossShard &s, int dtype,
                                  const void *logits, const void *labels,
                                  bool labels64, const float *stats,
                                  int gradDtype, const void *gradLoss,
                                  int outDtype, void *out);

//===--- attention (Attention.cu) -----------------------------------------===//

/// Global sequence positions of a chunk's rows: row i < half is at
/// start0 + i, the others at start1 + i - half (a zigzag chunk's two
/// halves). The causal mask compares these; dtc.attention's rows are at
/// 0, 1, ...
struct RowPositions {
  int64_t start0 = 0, start1 = 0, half = INT64_MAX;
};

struct AttentionShape {
  int64_t batch, heads, groups, s, t, d, e;
  float scale;
  bool causal;
  RowPositions queryAt, keyAt;
};
/// Largest head dim (d and e) the kernels take.
constexpr int64_t kMaxHeadDim = 128;
std::string attention(const AttentionShape &shape, int qDtype, const void *q,
                      int kDtype, const void *k, int vDtype, const void *v,
                      int outDtype, void *out);
std::string attentionGrad(const AttentionShape &shape, int qDtype,
                          const void *q, int kDtype, const void *k, int vDtype,
                          const void *v, int dyDtype, const void *dy,
                          int dqDtype, void *dq, int dkDtype, void *dk,
                          int dvDtype, void *dv);
/// dtc.attention_block: attention over this key chunk, plus each query
/// row's log-sum-exp (scaled scores, max included) into lse [b, h, s]; a
/// row that sees no key gets output 0 and lse -inf.
std::string attentionBlock(const AttentionShape &shape, int qDtype,
                           const void *q, int kDtype, const void *k, int vDtype,
                           const void *v, int outDtype, void *out, int lseDtype,
                           void *lse);
/// dtc.attention_block_grad: attentionGrad's passes restricted to this key
/// chunk, with the row statistics taken from the merged output `o` and
/// `lse` instead of recomputed.
std::string attentionBlockGrad(const AttentionShape &shape, int qDtype,
                               const void *q, int kDtype, const void *k,
                               int vDtype, const void *v, int oDtype,
                               const void *o, int lseDtype, const void *lse,
                               int dyDtype, const void *dy, int dqDtype,
                               void *dq, int dkDtype, void *dk, int dvDtype,
                               void *dv);
/// dtc.attention_merge over `rows` rows of `width`: the online-softmax merge
/// of two blocks (rows where both lse are -inf: 0 and -inf). The results
/// may alias the operands.
std::string attentionMerge(int64_t rows, int64_t width, int aDtype,
                           const void *a, int lseADtype, const void *lseA,
                           int bDtype, const void *b, int lseBDtype,
                           const void *lseB, int outDtype, void *out,
                           int lseDtype, void *lse);

//===--- optimizer (Optimizer.cu) -----------------------------------------===//

struct AdamW {
  double beta1, beta2, eps, weightDecay;
  /// Device scalars (any float dtype): lr, step, grad_scale.
  const void *lr, *step, *gradScale;
  int lrDtype, stepDtype, gradScaleDtype;
};
std::string adamw(const AdamW &hyper, int64_t n, int pDtype, const void *p,
                  int gDtype, const void *g, int mDtype, const void *m,
                  int vDtype, const void *v, void *pOut, void *mOut,
                  void *vOut);

//===--- mixture of experts (Moe.cu) --------------------------------------===//

/// dtc.moe_route's attributes over logits [batch, positions, experts].
struct MoeRoute {
  int64_t batch, positions, experts, topK, capacity;
  bool sigmoid, normalize;
};
/// gates [b, s, E], slots [b, E, C] and aux [b]; `stats` (device, nullable)
/// gets [b, E + 1] doubles: each sequence's choices per expert before drops,
/// then its auxiliary loss (dtc run's routing figures).
std::string moeRoute(const MoeRoute &r, int logitsDtype, const void *logits,
                     int gatesDtype, void *gates, int64_t *slots, int auxDtype,
                     void *aux, double *stats);
/// d logits [b, s, E] from the gates' and the auxiliary loss's gradients.
std::string moeRouteGrad(const MoeRoute &r, int logitsDtype, const void *logits,
                         int gatesGradDtype, const void *gatesGrad,
                         int auxGradDtype, const void *auxGrad, int outDtype,
                         void *out);

/// A slots tensor [batch, experts, capacity] (i64 or i32) of positions in
/// sequences of `positions` tokens, -1 for an empty slot, and the hidden
/// size of the rows it moves. Out-of-range slots flag kSlotOutOfRange.
struct MoeSlots {
  int64_t batch, positions, experts, capacity, hidden;
  int dtype;
  const void *data;
};
/// dtc.moe_dispatch: out [b, E, C, h] = the token rows of x [b, s, h].
std::string moeDispatch(const MoeSlots &slots, int xDtype, const void *x,
                        int outDtype, void *out);
/// out [b, s, h] = the sum over each token's slots of rows [b, E, C, h]
/// weighted by gates [b, s, E] (dtc.moe_combine), or unweighted with null
/// gates (dtc.moe_dispatch_grad).
std::string moeGatherSum(const MoeSlots &slots, int rowsDtype, const void *rows,
                         int gatesDtype, const void *gates, int outDtype,
                         void *out);
/// dtc.moe_combine_grad: dRows [b, E, C, h] and dGates [b, s, E].
std::string moeCombineGrad(const MoeSlots &slots, int rowsDtype,
                           const void *rows, int gatesDtype, const void *gates,
                           int dyDtype, const void *dy, int dRowsDtype,
                           void *dRows, int dGatesDtype, void *dGates);

//===--- convolution and pooling (ConvPool.cu) ----------------------------===//

/// The spatial dims of a conv or pool window: input and output extents,
/// kernel, strides, dilations and begin pads, as runtime/core/Window.h
/// reads and checks them (end pads only shape the output).
struct Window {
  int rank = 0;
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, kernel[kMaxRank] = {};
  int64_t stride[kMaxRank] = {}, dilation[kMaxRank] = {},
          padBegin[kMaxRank] = {};
};
/// input [batch, channels, in...], weight [filters, channels / groups,
/// kernel...], result [batch, filters, out...].
struct Conv {
  int64_t batch = 0, channels = 0, filters = 0, groups = 1;
  Window window;
};
/// dtc.conv; bias (nullable) has `filters` elements.
std::string conv(const Conv &c, int xDtype, const void *x, int wDtype,
                 const void *w, int biasDtype, const void *bias, int outDtype,
                 void *out);
/// dtc.conv_grad_input: out [batch, channels, in...] from dy and weight.
std::string convGradInput(const Conv &c, int dyDtype, const void *dy,
                          int wDtype, const void *w, int outDtype, void *out);
/// dtc.conv_grad_weight: out [filters, channels / groups, kernel...] from
/// the input and dy.
std::string convGradWeight(const Conv &c, int xDtype, const void *x,
                           int dyDtype, const void *dy, int outDtype,
                           void *out);
/// dtc.max_pool or dtc.avg_pool over `planes` (batch * channels) planes.
std::string pool(bool max, bool includePad, const Window &w, int64_t planes,
                 int xDtype, const void *x, int outDtype, void *out);
/// dtc.max_pool_grad: each window's gradient to its first maximum.
std::string maxPoolGrad(const Window &w, int64_t planes, int xDtype,
                        const void *x, int dyDtype, const void *dy,
                        int outDtype, void *out);
/// dtc.avg_pool_grad: each window's gradient spread over its divisor.
std::string avgPoolGrad(const Window &w, int64_t planes, bool includePad,
                        int dyDtype, const void *dy, int outDtype, void *out);

//===--- GEMM (Gemm.cu, cuBLASLt) -----------------------------------------===//

/// Row-major C[b] = op(A[b]) op(B[b]) for b < batch, batch strides in
/// elements (0 broadcasts). A and B share a dtype (f32, bf16, f16); C is
/// any of those; accumulation is f32.
struct Gemm {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int abDtype = kF32, cDtype = kF32;
  const void *a = nullptr, *b = nullptr;
  void *c = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t strideA = 0, strideB = 0, strideC = 0;
};
std::string gemm(const Gemm &g);

} // namespace dtc::cuda

#endif // DTC_RUNTIME_CUDA_CUDAOPS_H
