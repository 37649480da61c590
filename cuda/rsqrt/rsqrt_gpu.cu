// Reciprocal square root on the GPU: the device's methods swept over float32 bit patterns against the
// correctly rounded result (the same reference code as the CPU study, rsqrt_common.h).
//
// Plain CUDA, no torch headers: the Python glue is rsqrt_gpu_bind.cpp, which calls the extern "C"
// launchers below with raw pointers. The file is compiled twice, without and with -use_fast_math
// (two extensions, rsqrt_gpu and rsqrt_gpu_fast): `1.0f / sqrtf(x)` and rsqrtf change under that flag.
#include <cuda_runtime.h>

#include <cstdint>

#include "rsqrt_common.h"
#include "rsqrt_gpu_api.h"

namespace {

// Method ids (keep in sync with kGpuMethodNames).
enum GpuMethod : int {
  kRsqrtf = 0,      // rsqrtf(x): CUDA Math API, 2 ulp; SASS MUFU.RSQ
  kFrsqrtRn = 1,    // __frsqrt_rn(x): IEEE round-to-nearest 1/sqrt
  kDivSqrtf = 2,    // 1.0f / sqrtf(x): IEEE sqrt and division unless -use_fast_math
  kQuake = 3,       // 0x5f3759df, no Newton step
  kQuakeNr1 = 4,    // 0x5f3759df + one classic step
  kWalczykNr1 = 5,  // 0x5f376908 + one modified step
  kNumGpuMethods = 6
};

// --8<-- [start:gpu_methods]
__device__ __forceinline__ float gpu_method(int m, float x) {
  switch (m) {
    case kRsqrtf: return rsqrtf(x);
    case kFrsqrtRn: return __frsqrt_rn(x);
    case kDivSqrtf: return 1.0f / sqrtf(x);
    case kQuake: return rsq::bit_trick(x, rsq::kQuake, 0);
    case kQuakeNr1: return rsq::bit_trick(x, rsq::kQuake, 1);
    default: return rsq::bit_trick(x, rsq::kWalczyk, 1);
  }
}
// --8<-- [end:gpu_methods]

// Global accumulators of one sweep (all unsigned 64-bit, so plain atomics apply). Doubles are stored
// by their bit patterns: for non-negative doubles the integer order is the numeric order.
struct DevStats {
  unsigned long long count, exact, nonfinite, max_ulp_int;
  unsigned long long max_ulp_bits, max_abs_rel_bits, max_pos_rel_bits, max_neg_rel_bits;
  unsigned long long worst_ulp_key, worst_rel_key;  // (float bits of the error) << 32 | ~x bits
  unsigned long long ambiguous, corrected, ties;
  unsigned long long ulp_hist[rsq::kUlpBins];
  unsigned long long rel_hist[rsq::kRelBins];
  double sum_abs_rel;
};

__global__ void sweep_kernel(int method, uint64_t lo, uint64_t stride, uint64_t total, DevStats* out) {
  unsigned long long count = 0, exact = 0, nonfinite = 0, max_ulp_int = 0, amb = 0, cor = 0, tie = 0;
  double max_ulp = 0.0, max_abs_rel = 0.0, max_pos = 0.0, max_neg = 0.0, sum_abs_rel = 0.0;
  uint32_t worst_ulp_x = 0xffffffffu, worst_rel_x = 0xffffffffu;
  unsigned int uh[rsq::kUlpBins];
  unsigned int rh[rsq::kRelBins];
  for (int j = 0; j < rsq::kUlpBins; ++j) uh[j] = 0;
  for (int j = 0; j < rsq::kRelBins; ++j) rh[j] = 0;

  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const uint32_t xb = static_cast<uint32_t>(lo + i * stride);
    const float x = rsq::u2f(xb);
    const double r = 1.0 / sqrt(rsq::f32_bits_to_f64(xb));  // not (double)x: -ftz could flush it
    int a = 0, c = 0, t = 0;
    const uint32_t cr = rsq::rsqrt_cr_bits(x, r, &a, &c, &t);
    amb += a;
    cor += c;
    tie += t;
    const float y = gpu_method(method, x);
    const uint32_t yb = rsq::f2u(y);
    count += 1;
    if ((yb & 0x7f800000u) == 0x7f800000u) {
      nonfinite += 1;
      uh[rsq::kUlpBins - 1] += 1;
      rh[rsq::kRelBins - 1] += 1;
      continue;
    }
    const int64_t dd = rsq::ordered(yb) - static_cast<int64_t>(cr);
    const unsigned long long d = static_cast<unsigned long long>(dd < 0 ? -dd : dd);
    const double diff = rsq::f32_bits_to_f64(yb) - r;
    const double rel = diff / r;
    const double arel = fabs(rel);
    const double ue = fabs(diff) * rsq::inv_ulp_of(r);
    exact += (d == 0);
    if (d > max_ulp_int) max_ulp_int = d;
    if (ue > max_ulp || (ue == max_ulp && xb < worst_ulp_x)) {
      max_ulp = ue;
      worst_ulp_x = xb;
    }
    if (arel > max_abs_rel || (arel == max_abs_rel && xb < worst_rel_x)) {
      max_abs_rel = arel;
      worst_rel_x = xb;
    }
    if (rel > max_pos) max_pos = rel;
    if (-rel > max_neg) max_neg = -rel;
    sum_abs_rel += arel;
    uh[rsq::ulp_bin(d)] += 1;
    rh[rsq::rel_bin(rel)] += 1;
  }
  if (count == 0) return;
  atomicAdd(&out->count, count);
  atomicAdd(&out->exact, exact);
  atomicAdd(&out->nonfinite, nonfinite);
  atomicAdd(&out->ambiguous, amb);
  atomicAdd(&out->corrected, cor);
  atomicAdd(&out->ties, tie);
  atomicMax(&out->max_ulp_int, max_ulp_int);
  atomicMax(&out->max_ulp_bits, rsq::d2u(max_ulp));
  atomicMax(&out->max_abs_rel_bits, rsq::d2u(max_abs_rel));
  atomicMax(&out->max_pos_rel_bits, rsq::d2u(max_pos));
  atomicMax(&out->max_neg_rel_bits, rsq::d2u(max_neg));
  atomicAdd(&out->sum_abs_rel, sum_abs_rel);
  if (worst_ulp_x != 0xffffffffu)
    atomicMax(&out->worst_ulp_key, (static_cast<unsigned long long>(rsq::f2u(static_cast<float>(max_ulp))) << 32) |
                                       static_cast<unsigned long long>(~worst_ulp_x));
  if (worst_rel_x != 0xffffffffu)
    atomicMax(&out->worst_rel_key, (static_cast<unsigned long long>(rsq::f2u(static_cast<float>(max_abs_rel))) << 32) |
                                       static_cast<unsigned long long>(~worst_rel_x));
  for (int j = 0; j < rsq::kUlpBins; ++j)
    if (uh[j]) atomicAdd(&out->ulp_hist[j], static_cast<unsigned long long>(uh[j]));
  for (int j = 0; j < rsq::kRelBins; ++j)
    if (rh[j]) atomicAdd(&out->rel_hist[j], static_cast<unsigned long long>(rh[j]));
}

__global__ void apply_kernel(int method, const float* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = gpu_method(method, x[i]);
}

}  // namespace

// ---- the C interface used by rsqrt_gpu_bind.cpp ----
// Small probe kernels, one operation each, with C names so that their SASS can be found and read
// (tests/test_rsqrt_cuda_compiles.py looks for MUFU.RSQ in them).
extern "C" __global__ void rsq_probe_rsqrtf(const float* x, float* y) { y[threadIdx.x] = rsqrtf(x[threadIdx.x]); }
extern "C" __global__ void rsq_probe_frsqrt_rn(const float* x, float* y) { y[threadIdx.x] = __frsqrt_rn(x[threadIdx.x]); }
extern "C" __global__ void rsq_probe_div_sqrtf(const float* x, float* y) { y[threadIdx.x] = 1.0f / sqrtf(x[threadIdx.x]); }

namespace {
const char* const kGpuMethodNames[kNumGpuMethods] = {"rsqrtf", "__frsqrt_rn", "1.0f/sqrtf", "quake", "quake_nr1", "walczyk_nr1"};
}

extern "C" {

int RSQ_FN(rsqrt_gpu_num_methods)() { return kNumGpuMethods; }
const char* RSQ_FN(rsqrt_gpu_method_name)(int m) { return (m >= 0 && m < kNumGpuMethods) ? kGpuMethodNames[m] : nullptr; }

// nvcc defines no macro for -use_fast_math; the loader passes RSQ_FAST=1 together with the flag, and the
// GPU test checks the effect (rsqrtf flushes subnormal inputs to zero only in the fast-math build).
int RSQ_FN(rsqrt_gpu_fast_math)() {
#if defined(RSQ_FAST) && RSQ_FAST
  return 1;
#else
  return 0;
#endif
}

// Sweeps bit patterns lo + i*stride, i < total, for one method. out_u64 receives, in order:
// count, exact, nonfinite, max_ulp_int, max_ulp, max_abs_rel, max_pos_rel, max_neg_rel (the four as
// double bit patterns), worst_ulp_key, worst_rel_key, ambiguous, corrected, ties, ulp_hist[34],
// rel_hist[52], sum_abs_rel (double bits): 100 values. Returns a cudaError_t.
int RSQ_FN(rsqrt_gpu_sweep)(int method, uint64_t lo, uint64_t stride, uint64_t total, unsigned long long* out_u64) {
  if (method < 0 || method >= kNumGpuMethods) return static_cast<int>(cudaErrorInvalidValue);
  DevStats* d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(DevStats));
  if (e != cudaSuccess) return static_cast<int>(e);
  e = cudaMemset(d, 0, sizeof(DevStats));
  int sms = 0, dev = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) {
    sweep_kernel<<<sms * 8, 256>>>(method, lo, stride, total, d);
    e = cudaGetLastError();
  }
  DevStats h{};
  if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof(DevStats), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return static_cast<int>(e);
  unsigned long long* o = out_u64;
  const unsigned long long head[13] = {h.count, h.exact, h.nonfinite, h.max_ulp_int, h.max_ulp_bits,
                                       h.max_abs_rel_bits, h.max_pos_rel_bits, h.max_neg_rel_bits,
                                       h.worst_ulp_key, h.worst_rel_key, h.ambiguous, h.corrected, h.ties};
  for (int j = 0; j < 13; ++j) *o++ = head[j];
  for (int j = 0; j < rsq::kUlpBins; ++j) *o++ = h.ulp_hist[j];
  for (int j = 0; j < rsq::kRelBins; ++j) *o++ = h.rel_hist[j];
  *o++ = rsq::d2u(h.sum_abs_rel);
  return 0;
}

// y = method(x) element-wise; x and y are device pointers.
int RSQ_FN(rsqrt_gpu_apply)(int method, const float* x, float* y, int64_t n) {
  if (method < 0 || method >= kNumGpuMethods) return static_cast<int>(cudaErrorInvalidValue);
  if (n <= 0) return 0;
  apply_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(method, x, y, n);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return static_cast<int>(e);
}

const char* RSQ_FN(rsqrt_gpu_error_string)(int e) { return cudaGetErrorString(static_cast<cudaError_t>(e)); }

}  // extern "C"
