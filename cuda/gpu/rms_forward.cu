// RMSNorm forward, versions 4 and 5: the kernel behind normlab::rms_norm_fwd on CUDA tensors.
#include "common.cuh"
#include "launchers.h"

namespace normlab {

// Sum of squares of one vector, accumulated into ss in element order.
template <typename T, int VEC>
__device__ __forceinline__ float add_squares(const Vec<T, VEC>& a, float ss) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float v = to_f(a.v[k]);
    ss = fmaf(v, v, ss);
  }
  return ss;
}

// h = round_to_T(float(x) + float(res)), the new residual stream.
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> add_round(const Vec<T, VEC>& a, const Vec<T, VEC>& b) {
  Vec<T, VEC> h;
#pragma unroll
  for (int k = 0; k < VEC; ++k) h.v[k] = from_f<T>(to_f(a.v[k]) + to_f(b.v[k]));
  return h;
}

// x * r: in fp32, or (the wide pass, R = double) in double rounded once to fp32.
__device__ __forceinline__ float scaled(float v, float r) { return v * r; }
__device__ __forceinline__ float scaled(float v, double r) { return static_cast<float>(static_cast<double>(v) * r); }

// The output vector: llama rounds x * rstd to T before the weight, gemma multiplies by (1 + w) in fp32.
template <typename T, typename W, int VEC, typename R = float>
__device__ __forceinline__ Vec<T, VEC> normalize(const Vec<T, VEC>& a, R r, const Vec<W, VEC>* wv, int vi,
                                                 int convention) {
  Vec<T, VEC> out;
  if (wv == nullptr) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = from_f<T>(scaled(to_f(a.v[k]), r));
    return out;
  }
  const Vec<W, VEC> wk = wv[vi];
  if (convention == 0) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = from_f<T>(to_f(from_f<T>(scaled(to_f(a.v[k]), r))) * to_f(wk.v[k]));
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = from_f<T>(scaled(to_f(a.v[k]), r) * (1.0f + to_f(wk.v[k])));
  }
  return out;
}

// --8<-- [start:v45]
// Version 4: 128-bit vectorized loads, row kept in registers. Over version 3:
//  - each access moves VEC = 16 / sizeof(T) elements (8 bf16/fp16 or 4 fp32) in one instruction, so a
//    warp moves 512 contiguous bytes per load instead of 64 or 128;
//  - each thread keeps its (up to kFwdItems) vectors of the row in registers between the reduction and
//    the output loop: the row is read from global memory once instead of twice;
//  - the block size follows the row length (threads_for), so short rows do not leave warps idle.
// The host picks VEC = 16 / sizeof(T) only when d is a multiple of it and every pointer is 16-byte
// aligned (the weight to min(16, VEC * sizeof(W))); otherwise VEC = 1: the same code with scalar
// accesses, correct for any offset view and any d. Rows longer than kMaxThreads * kFwdItems vectors
// (e.g. 65536 bf16 or 32768 fp32) do not fit in registers: the streaming branch re-reads the row in
// the output loop (a row the block read a moment ago, so the second read should mostly come from L2).
// Version 5 (below, RESIDUAL = true) fuses the residual add: h = x + res is formed on the fly, written
// once to h_out, normalized from registers, so the pre-norm residual stream costs one read of x and of
// res and one write of h and of y, instead of an extra elementwise kernel's read-read-write plus a
// re-read of h.
template <typename T, typename W, int VEC, bool RESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
rms_fwd_v45(T* __restrict__ y, T* __restrict__ h_out, float* __restrict__ rstd, const T* __restrict__ x,
            const T* __restrict__ res, const W* __restrict__ w, int d, float eps, int convention) {
  using VT = Vec<T, VEC>;
  using VW = Vec<W, VEC>;
  __shared__ float red[33];
  const long long base = static_cast<long long>(blockIdx.x) * d;
  const int nvec = d / VEC;  // the host guarantees d % VEC == 0
  const VT* xv = reinterpret_cast<const VT*>(x + base);
  VT* yv = reinterpret_cast<VT*>(y + base);
  const VW* wv = reinterpret_cast<const VW*>(w);  // null without a weight
  const VT* rv = nullptr;
  VT* hv = nullptr;
  if constexpr (RESIDUAL) {
    rv = reinterpret_cast<const VT*>(res + base);
    hv = reinterpret_cast<VT*>(h_out + base);
  }
  if (nvec <= kFwdItems * static_cast<int>(blockDim.x)) {
    // Register path: thread t owns vectors t, t + B, ..., t + (kFwdItems - 1) B. The loop is unrolled,
    // so reg[i] is indexed by constants and stays in registers (no local memory).
    VT reg[kFwdItems];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kFwdItems; ++i) {
      const int vi = threadIdx.x + i * blockDim.x;
      if (vi < nvec) {
        VT a = xv[vi];
        if constexpr (RESIDUAL) {
          a = add_round(a, rv[vi]);
          hv[vi] = a;
        }
        reg[i] = a;
        ss = add_squares(a, ss);
      }
    }
    const float tot = block_sum(ss, red);
    // a sum that overflowed or underflowed: the row again in double (rare; 0 when fp32 stands)
    const double rw = sum_out_of_range(tot) ? wide_rms_rstd(RESIDUAL ? h_out + base : x + base, d, eps) : 0.0;
    const float r = rw > 0.0 ? static_cast<float>(rw) : row_rstd(tot, d, eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
#pragma unroll
    for (int i = 0; i < kFwdItems; ++i) {
      const int vi = threadIdx.x + i * blockDim.x;
      if (vi < nvec)
        yv[vi] = rw > 0.0 ? normalize<T, W, VEC>(reg[i], rw, wv, vi, convention)
                          : normalize<T, W, VEC>(reg[i], r, wv, vi, convention);
    }
  } else {
    // Streaming path for rows too long for registers: the second loop reads the row again (x, or the h
    // this same thread wrote, so no barrier is needed for it).
    float ss = 0.0f;
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
      VT a = xv[vi];
      if constexpr (RESIDUAL) {
        a = add_round(a, rv[vi]);
        hv[vi] = a;
      }
      ss = add_squares(a, ss);
    }
    const float tot = block_sum(ss, red);
    const double rw = sum_out_of_range(tot) ? wide_rms_rstd(RESIDUAL ? h_out + base : x + base, d, eps) : 0.0;
    const float r = rw > 0.0 ? static_cast<float>(rw) : row_rstd(tot, d, eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
      VT a;
      if constexpr (RESIDUAL) a = hv[vi]; else a = xv[vi];
      yv[vi] = rw > 0.0 ? normalize<T, W, VEC>(a, rw, wv, vi, convention) : normalize<T, W, VEC>(a, r, wv, vi, convention);
    }
  }
}
// --8<-- [end:v45]

template <typename T, typename W, int VEC>
cudaError_t launch_fwd(T* y, T* h, float* rstd, const T* x, const T* res, const W* w, long long rows, int d,
                       float eps, int convention, cudaStream_t s) {
  const int threads = threads_for(d / VEC, kFwdItems);
  const unsigned grid = static_cast<unsigned>(rows);
  if (res != nullptr)
    NORMLAB_LAUNCH(grid, threads, 0, s, rms_fwd_v45<T, W, VEC, true>)(y, h, rstd, x, res, w, d, eps, convention);
  else
    NORMLAB_LAUNCH(grid, threads, 0, s, rms_fwd_v45<T, W, VEC, false>)(y, h, rstd, x, res, w, d, eps, convention);
  return cudaGetLastError();
}

}  // namespace normlab

using namespace normlab;

extern "C" int normlab_rms_fwd(int x_code, int w_code, void* y, void* h_out, float* rstd, const void* x,
                               const void* res, const void* w, long long rows, int d, float eps,
                               int convention, void* stream) {
  if (rows < 0 || rows > kMaxGrid || d < 0 || (convention != 0 && convention != 1)) return cudaErrorInvalidValue;
  if ((res == nullptr) != (h_out == nullptr)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_types(x_code, w_code, [&](auto tx, auto tw) -> cudaError_t {
    using T = typename decltype(tx)::type;
    using W = typename decltype(tw)::type;
    constexpr int V = 16 / sizeof(T);
    constexpr int WB = sizeof(W) * V > 16 ? 16 : sizeof(W) * V;
    const bool vec_ok = d % V == 0 && aligned_to(x, 16) && aligned_to(y, 16) && aligned_to(res, 16) &&
                        aligned_to(h_out, 16) && aligned_to(w, WB);
    auto* yp = static_cast<T*>(y);
    auto* hp = static_cast<T*>(h_out);
    auto* xp = static_cast<const T*>(x);
    auto* rp = static_cast<const T*>(res);
    auto* wp = static_cast<const W*>(w);
    if (vec_ok) return launch_fwd<T, W, V>(yp, hp, rstd, xp, rp, wp, rows, d, eps, convention, s);
    return launch_fwd<T, W, 1>(yp, hp, rstd, xp, rp, wp, rows, d, eps, convention, s);
  });
}
