//===- Runtime.cu - Stream, memory and the device error word --------------===//

#include "runtime/cuda/CudaCommon.cuh"

#include <cstdlib>
#include <mutex>

namespace dtc::cuda {

namespace {

struct State {
  bool ready = false;
  std::string error;
  cudaStream_t stream = nullptr;
  int *errorWord = nullptr;
  bool tf32 = false;
  int device = -1;
};

State &state() {
  static State s;
  return s;
}

const char *deviceErrorText(int code) {
  switch (code) {
  case kIdOutOfRange:
    return "dtc.embedding: an id is out of range of the table";
  case kLabelOutOfRange:
    return "dtc.cross_entropy: a label is out of range of the vocabulary";
  case kBadAdamStep:
    return "dtc.adamw: step must be at least 1 (1-based)";
  case kSlotOutOfRange:
    return "dtc.moe_*: a slot holds a position outside [-1, sequence)";
  case kIndexOutOfRange:
    return "dtc.gather_elements: an index is out of range of its axis";
  default:
    return "a kernel flagged an unknown error";
  }
}

} // namespace

int initializedDevice() { return state().ready ? state().device : -1; }

std::string initialize(int device) {
  static std::once_flag once;
  State &s = state();
  std::call_once(once, [&] {
    s.device = device = device < 0 ? 0 : device;
    if (cudaError_t err = cudaSetDevice(device)) {
      s.error = failure("cudaSetDevice", err);
      return;
    }
    if (cudaError_t err =
            cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking)) {
      s.error = failure("cudaStreamCreate", err);
      return;
    }
    if (cudaError_t err = cudaMalloc(&s.errorWord, sizeof(int))) {
      s.error = failure("cudaMalloc", err);
      return;
    }
    cudaMemset(s.errorWord, 0, sizeof(int));
    // Keep freed scratch in the pool instead of returning it every sync.
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      uint64_t threshold = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                              &threshold);
    }
    const char *tf32 = std::getenv("DTC_CUDA_TF32");
    s.tf32 = tf32 && std::string(tf32) == "1";
    cudaDeviceSynchronize();
    s.ready = true;
  });
  if (s.ready && device >= 0 && device != s.device)
    return "CUDA is already set up on device " + std::to_string(s.device) +
           "; this process cannot switch to device " + std::to_string(device);
  return s.ready ? std::string() : s.error;
}

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess)
    return 0;
  return n;
}

cudaStream_t computeStream() { return state().stream; }
void *stream() { return state().stream; }
int *errorWord() { return state().errorWord; }
bool tf32() { return state().tf32; }

void *allocate(size_t bytes) {
  void *p = nullptr;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky-free error
    return nullptr;
  }
  // Ordered before any kernel of the stream reads it.
  if (cudaMemsetAsync(p, 0, bytes, computeStream()) != cudaSuccess) {
    cudaFree(p);
    return nullptr;
  }
  return p;
}

void *scratchAllocate(size_t bytes) {
  void *p = nullptr;
  if (cudaMallocAsync(&p, bytes ? bytes : 1, computeStream()) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void scratchRelease(void *pointer) {
  if (pointer)
    cudaFreeAsync(pointer, computeStream());
}

void release(void *pointer) {
  if (!pointer)
    return;
  // Kernels queued on the buffer must finish first.
  cudaStreamSynchronize(computeStream());
  cudaFree(pointer);
}

std::string copy(void *dst, const void *src, size_t bytes, int kind) {
  if (!bytes || dst == src)
    return "";
  cudaMemcpyKind k = kind == 0   ? cudaMemcpyHostToDevice
                     : kind == 1 ? cudaMemcpyDeviceToHost
                                 : cudaMemcpyDeviceToDevice;
  if (cudaError_t err = cudaMemcpyAsync(dst, src, bytes, k, computeStream()))
    return failure("cudaMemcpyAsync", err);
  // Host buffers may be pageable and reused as soon as we return.
  if (kind != 2)
    if (cudaError_t err = cudaStreamSynchronize(computeStream()))
      return failure("cudaStreamSynchronize", err);
  return "";
}

std::string memsetZero(void *dst, size_t bytes) {
  if (!bytes)
    return "";
  if (cudaError_t err = cudaMemsetAsync(dst, 0, bytes, computeStream()))
    return failure("cudaMemsetAsync", err);
  return "";
}

std::string synchronize() {
  if (cudaError_t err = cudaStreamSynchronize(computeStream()))
    return failure("CUDA kernel", err);
  int code = 0;
  if (cudaError_t err =
          cudaMemcpy(&code, errorWord(), sizeof(int), cudaMemcpyDeviceToHost))
    return failure("reading the device error word", err);
  if (code != 0) {
    // On the compute stream: the default stream is not ordered with it, so
    // a plain memset could land after the next step's kernels flag an error.
    cudaMemsetAsync(errorWord(), 0, sizeof(int), computeStream());
    return deviceErrorText(code);
  }
  return "";
}

} // namespace dtc::cuda
