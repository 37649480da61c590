// RMSNorm forward, teaching versions 1 to 3. Each one is correct for every hidden size; what changes is
// how the work of one row is spread over threads. Versions 4 and 5 are in rms_forward.cu.
//   y = x * rstd (* weight),  rstd = 1 / sqrt(mean(x^2) + eps),  convention 0 = llama, 1 = gemma.
#include "common.cuh"
#include "launchers.h"

namespace normlab {

// The output element, shared by every version so that only the parallel structure differs.
// llama: the normalized value is rounded to x's dtype, then multiplied by the weight (one more rounding);
// gemma: x * rstd * (1 + w) in fp32, rounded once. Without a weight both are round(x * rstd).
template <typename T, typename W>
__device__ __forceinline__ T rms_out(float xv, float r, const W* w, int j, int convention) {
  if (w == nullptr) return from_f<T>(xv * r);
  const float wj = to_f(w[j]);
  if (convention == 0) return from_f<T>(to_f(from_f<T>(xv * r)) * wj);
  return from_f<T>(xv * r * (1.0f + wj));
}

// --8<-- [start:v1]
// Version 1: one thread per row. The simplest correct kernel: each thread walks its row twice (sum of
// squares, then the output). Neighbouring threads read addresses d elements apart, so a warp's 32 loads
// touch 32 different cache lines (uncoalesced), and a 4096-row batch keeps only 4096 threads busy.
template <typename T, typename W>
__global__ void rms_fwd_v1(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                           const W* __restrict__ w, long long rows, int d, float eps, int convention) {
  const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* xr = x + row * d;
  T* yr = y + row * d;
  float ss = 0.0f;
  for (int j = 0; j < d; ++j) {
    const float v = to_f(xr[j]);
    ss = fmaf(v, v, ss);
  }
  const float r = row_rstd(ss, d, eps);
  rstd[row] = r;
  for (int j = 0; j < d; ++j) yr[j] = rms_out<T, W>(to_f(xr[j]), r, w, j, convention);
}
// --8<-- [end:v1]

// --8<-- [start:v2]
// Version 2: one block per row, shared-memory tree reduction. Thread t sums elements t, t + B, t + 2B, ...
// so a warp reads 32 consecutive elements (coalesced). The B partial sums meet in shared memory and are
// halved log2(B) times, with a barrier after each step. Needs B to be a power of two (checked on the
// host): with B = 96 the halvings go 48, 24, 12, 6, 3, 1, and after s = 3 three partials are left of which
// s = 1 adds only two.
template <typename T, typename W>
__global__ void rms_fwd_v2(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                           const W* __restrict__ w, int d, float eps, int convention) {
  __shared__ float buf[1024];  // one partial per thread (blocks of at most 1024 threads)
  const long long row = blockIdx.x;
  const int t = threadIdx.x;
  const T* xr = x + row * d;
  T* yr = y + row * d;
  float ss = 0.0f;
  for (int j = t; j < d; j += blockDim.x) {
    const float v = to_f(xr[j]);
    ss = fmaf(v, v, ss);
  }
  buf[t] = ss;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();  // every step reads what the previous one wrote
  }
  const float r = row_rstd(buf[0], d, eps);  // buf is not written again: no barrier needed after this
  if (t == 0) rstd[row] = r;
  for (int j = t; j < d; j += blockDim.x) yr[j] = rms_out<T, W>(to_f(xr[j]), r, w, j, convention);
}
// --8<-- [end:v2]

// --8<-- [start:v3]
// Version 3: one block per row, warp-shuffle reduction across warps (block_sum in common.cuh). Each warp
// reduces its 32 partials in registers with __shfl_down_sync, lane 0 of every warp leaves one value in
// shared memory, and warp 0 reduces those. Two barriers instead of log2(B) + 1, no power-of-two
// restriction: any B from 1 to 1024 is correct, including a partial last warp. The row is still read
// twice from global memory (once for the sum, once for the output).
template <typename T, typename W>
__global__ void rms_fwd_v3(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                           const W* __restrict__ w, int d, float eps, int convention) {
  __shared__ float red[33];
  const long long row = blockIdx.x;
  const T* xr = x + row * d;
  T* yr = y + row * d;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = to_f(xr[j]);
    ss = fmaf(v, v, ss);
  }
  const float r = row_rstd(block_sum(ss, red), d, eps);  // every thread gets the same total
  if (threadIdx.x == 0) rstd[row] = r;
  for (int j = threadIdx.x; j < d; j += blockDim.x) yr[j] = rms_out<T, W>(to_f(xr[j]), r, w, j, convention);
}
// --8<-- [end:v3]

}  // namespace normlab

using namespace normlab;

extern "C" int normlab_rms_fwd_step(int version, int block, int x_code, int w_code, void* y, float* rstd,
                                    const void* x, const void* w, long long rows, int d, float eps,
                                    int convention, void* stream) {
  if (rows < 0 || d < 0 || (convention != 0 && convention != 1)) return cudaErrorInvalidValue;
  if (block < 0 || block > 1024) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_types(x_code, w_code, [&](auto tx, auto tw) -> cudaError_t {
    using T = typename decltype(tx)::type;
    using W = typename decltype(tw)::type;
    T* yp = static_cast<T*>(y);
    const T* xp = static_cast<const T*>(x);
    const W* wp = static_cast<const W*>(w);
    if (version == 1) {
      const int b = block ? block : 128;
      const long long grid = (rows + b - 1) / b;
      if (grid > kMaxGrid) return cudaErrorInvalidValue;
      NORMLAB_LAUNCH(static_cast<unsigned>(grid), b, 0, s, rms_fwd_v1<T, W>)(yp, rstd, xp, wp, rows, d, eps, convention);
    } else if (version == 2) {
      const int b = block ? block : 256;
      if ((b & (b - 1)) != 0) return cudaErrorInvalidValue;  // the tree needs a power of two
      if (rows > kMaxGrid) return cudaErrorInvalidValue;
      NORMLAB_LAUNCH(static_cast<unsigned>(rows), b, 0, s, rms_fwd_v2<T, W>)(yp, rstd, xp, wp, d, eps, convention);
    } else if (version == 3) {
      const int b = block ? block : 256;
      if (rows > kMaxGrid) return cudaErrorInvalidValue;
      NORMLAB_LAUNCH(static_cast<unsigned>(rows), b, 0, s, rms_fwd_v3<T, W>)(yp, rstd, xp, wp, d, eps, convention);
    } else {
      return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  });
}

extern "C" const char* normlab_cuda_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
