// RMSNorm forward, versions 4, 5 and 6: the kernels behind normlab::rms_norm_fwd on CUDA tensors.
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

// add_round, RowVec and row_vec (the row with the residual added) are in common.cuh.

// x * r: in fp32, or (the wide pass, R = double) in double rounded once to fp32.
__device__ __forceinline__ float scaled(float v, float r) { return v * r; }
__device__ __forceinline__ float scaled(float v, double r) { return static_cast<float>(static_cast<double>(v) * r); }

// The output vector: llama rounds x * rstd to T before the weight, gemma multiplies by (1 + w) in fp32.
// The input a holds T or, under the fp32 residual contract, the float32 sum; the output is T either way.
template <typename T, typename W, int VEC, typename R = float, typename A = T>
__device__ __forceinline__ Vec<T, VEC> normalize(const Vec<A, VEC>& a, R r, const Vec<W, VEC>* wv, int vi,
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

// The block-wide pass in double (wide_rms_rstd) for the row at x + base: over the stored h with the "hf"
// residual contract, over x without a residual, over the float32 sums x + res with the "fp32" contract.
template <typename T, bool RESIDUAL, bool FP32_SUM>
__device__ __forceinline__ double wide_row_rstd(const T* x, const T* res, const T* h_out, long long base, int d,
                                                float eps) {
  if constexpr (FP32_SUM) return wide_rms_rstd_of_sum(x + base, res + base, d, eps);
  else return wide_rms_rstd(RESIDUAL ? h_out + base : x + base, d, eps);
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
// re-read of h. With FP32_SUM (the "fp32" residual contract) the registers hold the float32 sum
// s = x + res instead, the statistic and y come from s, and h_out still receives round_T(s).
template <typename T, typename W, int VEC, bool RESIDUAL, bool FP32_SUM = false>
__global__ void __launch_bounds__(kMaxThreads)
rms_fwd_v45(T* __restrict__ y, T* __restrict__ h_out, float* __restrict__ rstd, const T* __restrict__ x,
            const T* __restrict__ res, const W* __restrict__ w, int d, float eps, int convention) {
  using VT = Vec<T, VEC>;
  using VW = Vec<W, VEC>;
  using RT = RowVec<T, VEC, FP32_SUM>;
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
    RT reg[kFwdItems];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kFwdItems; ++i) {
      const int vi = threadIdx.x + i * blockDim.x;
      if (vi < nvec) {
        reg[i] = row_vec<T, VEC, RESIDUAL, FP32_SUM>(xv, rv, hv, vi);
        ss = add_squares(reg[i], ss);
      }
    }
    const float tot = block_sum(ss, red);
    // a sum that overflowed or underflowed: the row again in double (rare; 0 when fp32 stands)
    const double rw = sum_out_of_range(tot) ? wide_row_rstd<T, RESIDUAL, FP32_SUM>(x, res, h_out, base, d, eps) : 0.0;
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
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x)
      ss = add_squares(row_vec<T, VEC, RESIDUAL, FP32_SUM>(xv, rv, hv, vi), ss);
    const float tot = block_sum(ss, red);
    const double rw = sum_out_of_range(tot) ? wide_row_rstd<T, RESIDUAL, FP32_SUM>(x, res, h_out, base, d, eps) : 0.0;
    const float r = rw > 0.0 ? static_cast<float>(rw) : row_rstd(tot, d, eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
      RT a;  // fp32 contract: s again from x and res; otherwise h (or x) as stored
      if constexpr (FP32_SUM) a = row_vec<T, VEC, RESIDUAL, FP32_SUM, false>(xv, rv, nullptr, vi);
      else if constexpr (RESIDUAL) a = hv[vi];
      else a = xv[vi];
      yv[vi] = rw > 0.0 ? normalize<T, W, VEC>(a, rw, wv, vi, convention) : normalize<T, W, VEC>(a, r, wv, vi, convention);
    }
  }
}
// --8<-- [end:v45]

// The wide pass of version 6 for a row of its group (rare: a sum that overflowed or underflowed): every lane
// of the group walks the whole row in double, in element order like version 4's wide pass, recomputing h
// from x and the residual instead of reading what the other lanes stored (no barrier or warp sync needed).
// Returns 1 / sqrt(sum / d + eps), or 0 when the fp32 result stands (Inf or NaN in the row, or all zeros).
// The fp32 contract's variant is inlined (group_wide_rstd_inline), so the lanes' float32 sums stay in
// registers across it without a call's spills.
template <typename T, int VEC, bool RESIDUAL, bool FP32_SUM>
__device__ __forceinline__ double group_wide_rstd_inline(const Vec<T, VEC>* xv, const Vec<T, VEC>* rv, int nvec,
                                                         int d, float eps) {
  double ss = 0.0, bad = 0.0;
  for (int vi = 0; vi < nvec; ++vi) {
    const RowVec<T, VEC, FP32_SUM> a = row_vec<T, VEC, RESIDUAL, FP32_SUM, false>(xv, rv, nullptr, vi);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const double v = to_f(a.v[k]);
      bad += v - v;
      ss += v * v;
    }
  }
  return (bad == 0.0 && ss > 0.0) ? 1.0 / sqrt(ss / d + static_cast<double>(eps)) : 0.0;
}

template <typename T, int VEC, bool RESIDUAL>
__device__ double group_wide_rstd_call(const Vec<T, VEC>* xv, const Vec<T, VEC>* rv, int nvec, int d, float eps) {
  return group_wide_rstd_inline<T, VEC, RESIDUAL, false>(xv, rv, nvec, d, eps);
}

template <typename T, int VEC, bool RESIDUAL, bool FP32_SUM>
__device__ __forceinline__ double group_wide_rstd(const Vec<T, VEC>* xv, const Vec<T, VEC>* rv, int nvec, int d,
                                                  float eps) {
  if constexpr (FP32_SUM) return group_wide_rstd_inline<T, VEC, RESIDUAL, true>(xv, rv, nvec, d, eps);
  else return group_wide_rstd_call<T, VEC, RESIDUAL>(xv, rv, nvec, d, eps);
}

// --8<-- [start:rows]
// Version 6: several short rows per block (QK-norm's heads of 64-256 elements, any row of at most
// 32 * kFwdItems vectors). Over version 4, which gives such a row a block of one warp:
//  - a multiprocessor of compute capability 9 holds at most 32 resident blocks (cuda_occupancy.h), so
//    one-warp blocks give it at most 32 warps; a block of kRowThreads threads here carries kRowThreads /
//    lanes rows;
//  - a row of fewer than 32 vectors (a bf16 head of 128 is 16) leaves lanes of version 4's warp idle;
//    here each row gets `lanes` threads, its vector count rounded up to a power of two (at most 32),
//    so a warp holds 32 / lanes rows;
//  - the row's sum stays inside its group of lanes (group_sum: shuffles, no shared memory, no barrier).
// Lane g of a group owns the vectors g, g + lanes, ... like thread g of version 4, and group_sum adds in
// warp_sum's order (version 4's surplus lanes only add zeros), so both versions give the same bits.
// ITEMS, the vectors a lane can hold, is 1 for rows of at most 32 vectors (every head size above): the
// kernel then needs registers for one vector per lane, not kFwdItems, and more warps fit a multiprocessor.
// FP32_SUM: the "fp32" residual contract, as in version 5.
template <typename T, typename W, int VEC, bool RESIDUAL, int ITEMS, bool FP32_SUM = false>
__global__ void __launch_bounds__(kRowThreads)
rms_fwd_rows(T* __restrict__ y, T* __restrict__ h_out, float* __restrict__ rstd, const T* __restrict__ x,
             const T* __restrict__ res, const W* __restrict__ w, long long rows, int d, int lanes, float eps,
             int convention) {
  using VT = Vec<T, VEC>;
  using VW = Vec<W, VEC>;
  const int g = threadIdx.x & (lanes - 1);
  const long long row = static_cast<long long>(blockIdx.x) * (kRowThreads / lanes) + threadIdx.x / lanes;
  const bool live = row < rows;  // a group past the last row still joins its warp's shuffles
  const long long base = live ? row * d : 0;
  const int nvec = live ? d / VEC : 0;
  const VT* xv = reinterpret_cast<const VT*>(x + base);
  VT* yv = reinterpret_cast<VT*>(y + base);
  const VW* wv = reinterpret_cast<const VW*>(w);
  const VT* rv = nullptr;
  VT* hv = nullptr;
  if constexpr (RESIDUAL) {
    rv = reinterpret_cast<const VT*>(res + base);
    hv = reinterpret_cast<VT*>(h_out + base);
  }
  RowVec<T, VEC, FP32_SUM> reg[ITEMS]{};  // (zero-initialized: g++ cannot see that only the vectors < nvec are read)
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int vi = g + i * lanes;
    if (vi < nvec) {
      reg[i] = row_vec<T, VEC, RESIDUAL, FP32_SUM>(xv, rv, hv, vi);
      ss = add_squares(reg[i], ss);
    }
  }
  const float tot = group_sum(ss, lanes);
  // a sum that overflowed or underflowed: the row again in double (rare; 0 when fp32 stands). That branch
  // reads the row again from memory, so the registers holding it are free there and the common path keeps
  // its register budget.
  const double rw = (live && sum_out_of_range(tot)) ? group_wide_rstd<T, VEC, RESIDUAL, FP32_SUM>(xv, rv, nvec, d, eps) : 0.0;
  if (rw > 0.0) {
    if (g == 0) rstd[row] = static_cast<float>(rw);
    for (int vi = g; vi < nvec; vi += lanes)
      yv[vi] = normalize<T, W, VEC>(row_vec<T, VEC, RESIDUAL, FP32_SUM, false>(xv, rv, nullptr, vi), rw, wv, vi, convention);
    return;
  }
  const float r = row_rstd(tot, d, eps);
  if (live && g == 0) rstd[row] = r;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int vi = g + i * lanes;
    if (vi < nvec) yv[vi] = normalize<T, W, VEC>(reg[i], r, wv, vi, convention);
  }
}
// --8<-- [end:rows]

// Row layouts: kAuto (the op: version 6 for rows that fit one warp, version 4/5 otherwise), kOneRow
// (version 4's one row per block), kRows (version 6; invalid for a row that does not fit one warp).
enum Layout : int { kAuto = 0, kOneRow = 4, kRows = 6 };

// FP32_SUM (the "fp32" residual contract) applies to the launches with a residual only.
template <typename T, typename W, int VEC, bool FP32_SUM>
cudaError_t launch_fwd(int layout, T* y, T* h, float* rstd, const T* x, const T* res, const W* w, long long rows,
                       int d, float eps, int convention, cudaStream_t s) {
  const int nvec = d / VEC;
  if (layout == kRows && !fits_one_warp(nvec)) return cudaErrorInvalidValue;
  if (layout == kRows || (layout == kAuto && fits_one_warp(nvec))) {
    const int lanes = lanes_for(nvec);
    const long long per_block = kRowThreads / lanes;
    const unsigned grid = static_cast<unsigned>((rows + per_block - 1) / per_block);
    if (nvec <= 32) {  // one vector per lane at most
      if (res != nullptr)
        NORMLAB_LAUNCH(grid, kRowThreads, 0, s, rms_fwd_rows<T, W, VEC, true, 1, FP32_SUM>)(y, h, rstd, x, res, w, rows, d, lanes, eps, convention);
      else
        NORMLAB_LAUNCH(grid, kRowThreads, 0, s, rms_fwd_rows<T, W, VEC, false, 1>)(y, h, rstd, x, res, w, rows, d, lanes, eps, convention);
    } else if (res != nullptr) {
      NORMLAB_LAUNCH(grid, kRowThreads, 0, s, rms_fwd_rows<T, W, VEC, true, kFwdItems, FP32_SUM>)(y, h, rstd, x, res, w, rows, d, lanes, eps, convention);
    } else {
      NORMLAB_LAUNCH(grid, kRowThreads, 0, s, rms_fwd_rows<T, W, VEC, false, kFwdItems>)(y, h, rstd, x, res, w, rows, d, lanes, eps, convention);
    }
    return cudaGetLastError();
  }
  const int threads = threads_for(nvec, kFwdItems);
  const unsigned grid = static_cast<unsigned>(rows);
  if (res != nullptr)
    NORMLAB_LAUNCH(grid, threads, 0, s, rms_fwd_v45<T, W, VEC, true, FP32_SUM>)(y, h, rstd, x, res, w, d, eps, convention);
  else
    NORMLAB_LAUNCH(grid, threads, 0, s, rms_fwd_v45<T, W, VEC, false>)(y, h, rstd, x, res, w, d, eps, convention);
  return cudaGetLastError();
}

// Checks the arguments, picks the vector width from d and the pointers' alignment, and launches.
// convention: 0 llama, 1 gemma, plus 2 for the "fp32" residual contract (cuda/ops.h).
cudaError_t rms_fwd_any(int layout, int x_code, int w_code, void* y, void* h_out, float* rstd, const void* x,
                        const void* res, const void* w, long long rows, int d, float eps, int convention,
                        cudaStream_t s) {
  if (rows < 0 || rows > kMaxGrid || d < 0 || convention < 0 || convention > 3) return cudaErrorInvalidValue;
  if ((res == nullptr) != (h_out == nullptr)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const bool fp32_sum = (convention & 2) != 0 && res != nullptr;  // without a residual the contracts agree
  convention &= 1;
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
    if (fp32_sum) {
      if (vec_ok) return launch_fwd<T, W, V, true>(layout, yp, hp, rstd, xp, rp, wp, rows, d, eps, convention, s);
      return launch_fwd<T, W, 1, true>(layout, yp, hp, rstd, xp, rp, wp, rows, d, eps, convention, s);
    }
    if (vec_ok) return launch_fwd<T, W, V, false>(layout, yp, hp, rstd, xp, rp, wp, rows, d, eps, convention, s);
    return launch_fwd<T, W, 1, false>(layout, yp, hp, rstd, xp, rp, wp, rows, d, eps, convention, s);
  });
}

}  // namespace normlab

using namespace normlab;

extern "C" int normlab_rms_fwd(int x_code, int w_code, void* y, void* h_out, float* rstd, const void* x,
                               const void* res, const void* w, long long rows, int d, float eps,
                               int convention, void* stream) {
  return rms_fwd_any(kAuto, x_code, w_code, y, h_out, rstd, x, res, w, rows, d, eps, convention,
                     static_cast<cudaStream_t>(stream));
}

extern "C" int normlab_rms_fwd_layout(int layout, int x_code, int w_code, void* y, float* rstd, const void* x,
                                      const void* w, long long rows, int d, float eps, int convention,
                                      void* stream) {
  if ((layout != kOneRow && layout != kRows) || (convention != 0 && convention != 1)) return cudaErrorInvalidValue;
  return rms_fwd_any(layout, x_code, w_code, y, nullptr, rstd, x, nullptr, w, rows, d, eps, convention,
                     static_cast<cudaStream_t>(stream));
}
