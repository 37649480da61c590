// LayerNorm forward and backward on CUDA, built like the best RMSNorm kernels (vectorized loads, row in
// registers, block_sum, persistent backward with deterministic partial sums), so the two layers can be
// compared on equal footing. y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), biased variance.
#include "common.cuh"
#include "launchers.h"

namespace normlab {

// LayerNorm backward keeps two accumulators per column (dweight and dbias): with 4 vectors per thread
// the bf16 kernel needs more than the 128 registers a 512-thread block allows and spills; 3 do not.
constexpr int kLnBwdItems = 3;

template <typename T, int VEC>
__device__ __forceinline__ float add_values(const Vec<T, VEC>& a, float s) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += to_f(a.v[k]);
  return s;
}

// (x, sum) -> sum of (x - mean) and of (x - mean)^2: the correction of the mean and the second moment.
template <typename T, int VEC>
__device__ __forceinline__ float2 add_centred(const Vec<T, VEC>& a, float mean, float2 s) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float c = to_f(a.v[k]) - mean;
    s.x += c;
    s.y = fmaf(c, c, s.y);
  }
  return s;
}

// ((x - mean) - c) * r in fp32 (x - mean is exact for x near the mean, c the mean's correction), or, in the
// wide pass (R = double, c = 0, mean in double), (x - mean) * r in double rounded once to fp32.
template <typename M>
__device__ __forceinline__ float centred(float v, M mean, float c, float r) { return ((v - mean) - c) * r; }
__device__ __forceinline__ float centred(float v, double mean, float, double r) {
  return static_cast<float>((static_cast<double>(v) - mean) * r);
}

// a holds T or, under the fp32 residual contract, the float32 sums; the output is T either way.
template <typename T, typename W, int VEC, typename M = float, typename R = float, typename A = T>
__device__ __forceinline__ Vec<T, VEC> ln_out(const Vec<A, VEC>& a, M mean, float c, R r, const Vec<W, VEC>* wv,
                                              const Vec<W, VEC>* bv, int vi) {
  Vec<T, VEC> out;
  Vec<W, VEC> wk{}, bk{};  // initialized: g++ (the emulation) cannot see that the guards below match
  if (wv != nullptr) wk = wv[vi];
  if (bv != nullptr) bk = bv[vi];
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    float v = centred(to_f(a.v[k]), mean, c, r);
    if (wv != nullptr) v *= to_f(wk.v[k]);
    if (bv != nullptr) v += to_f(bk.v[k]);
    out.v[k] = from_f<T>(v);
  }
  return out;
}

// --8<-- [start:ln_fwd]
// The RMSNorm version 4 structure with a two-pass variance: the mean m first, then, from the row held in
// registers, c = mean(x - m) (the correction of the rounded mean) and q = mean((x - m)^2) in one
// reduction (no cancellation, no extra memory traffic): mean = m + c, var = q - c^2. One more block
// reduction than RMSNorm, and two subtractions per element. Long rows stream and read x three times.
// A sum that overflowed or underflowed sends the row through wide_ln_stats (double) instead. (One block per
// multiprocessor at least, as for the backward: otherwise ptxas squeezes the fp16 instance into 64 registers
// and spills.) RESIDUAL fuses the residual add as RMSNorm version 5 does: h = round_T(x + res) goes to
// h_out and is normalized; with FP32_SUM (the "fp32" residual contract) the registers hold the float32
// sums s = x + res, statistics and y come from s, and h_out still receives round_T(s).
template <typename T, typename W, int VEC, bool RESIDUAL = false, bool FP32_SUM = false>
__global__ void __launch_bounds__(kMaxThreads, 1)
ln_fwd_kernel(T* __restrict__ y, T* __restrict__ h_out, float* __restrict__ mean_out, float* __restrict__ rstd_out,
              const T* __restrict__ x, const T* __restrict__ res, const W* __restrict__ w, const W* __restrict__ b,
              int d, float eps) {
  using VT = Vec<T, VEC>;
  using VW = Vec<W, VEC>;
  __shared__ float red[33];
  __shared__ float2 red2[33];
  const long long base = static_cast<long long>(blockIdx.x) * d;
  const int nvec = d / VEC;
  const VT* xv = reinterpret_cast<const VT*>(x + base);
  const VT* rv = RESIDUAL ? reinterpret_cast<const VT*>(res + base) : nullptr;
  VT* hv = RESIDUAL ? reinterpret_cast<VT*>(h_out + base) : nullptr;
  VT* yv = reinterpret_cast<VT*>(y + base);
  const VW* wv = reinterpret_cast<const VW*>(w);
  const VW* bv = reinterpret_cast<const VW*>(b);
  const float fd = static_cast<float>(d);
  // (c, var, rstd) from the two sums, or the wide pass's double mean and rstd (wr > 0) for a rare row
  float c = 0.0f, r = 0.0f;
  double wmean = 0.0, wr = 0.0;
  auto stats = [&](float mean, float2 tot) {
    // (the barriers of the block sums have made every thread's h_out stores visible to thread 0)
    if (sum_out_of_range(tot.y) || !(fabsf(mean) <= 3.40282347e38f))
      wr = FP32_SUM ? wide_ln_stats(x + base, d, eps, &wmean, res + base)
                    : wide_ln_stats(RESIDUAL ? h_out + base : x + base, d, eps, &wmean);
    c = __fdiv_rn(tot.x, fd);
    r = wr > 0.0 ? static_cast<float>(wr) : __frsqrt_rn(fmaxf(__fdiv_rn(tot.y, fd) - c * c, 0.0f) + eps);
    if (threadIdx.x == 0) {
      mean_out[blockIdx.x] = wr > 0.0 ? static_cast<float>(wmean) : mean + c;
      rstd_out[blockIdx.x] = r;
    }
  };
  if (nvec <= kFwdItems * static_cast<int>(blockDim.x)) {
    RowVec<T, VEC, FP32_SUM> reg[kFwdItems];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kFwdItems; ++i) {
      const int vi = threadIdx.x + i * blockDim.x;
      if (vi < nvec) {
        reg[i] = row_vec<T, VEC, RESIDUAL, FP32_SUM>(xv, rv, hv, vi);
        s = add_values(reg[i], s);
      }
    }
    const float mean = __fdiv_rn(block_sum(s, red), fd);
    float2 cs = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < kFwdItems; ++i) {
      const int vi = threadIdx.x + i * blockDim.x;
      if (vi < nvec) cs = add_centred(reg[i], mean, cs);
    }
    stats(mean, block_sum2(cs, red2));
#pragma unroll
    for (int i = 0; i < kFwdItems; ++i) {
      const int vi = threadIdx.x + i * blockDim.x;
      if (vi < nvec)
        yv[vi] = wr > 0.0 ? ln_out<T, W, VEC>(reg[i], wmean, 0.0f, wr, wv, bv, vi)
                          : ln_out<T, W, VEC>(reg[i], mean, c, r, wv, bv, vi);
    }
  } else {
    // the row again: h as this thread stored it ("hf"), or s formed again from x and res ("fp32")
    auto again = [&](int vi) -> RowVec<T, VEC, FP32_SUM> {
      if constexpr (RESIDUAL && !FP32_SUM) return hv[vi];
      else return row_vec<T, VEC, RESIDUAL, FP32_SUM, false>(xv, rv, hv, vi);
    };
    float s = 0.0f;
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x)
      s = add_values(row_vec<T, VEC, RESIDUAL, FP32_SUM>(xv, rv, hv, vi), s);
    const float mean = __fdiv_rn(block_sum(s, red), fd);
    float2 cs = make_float2(0.0f, 0.0f);
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) cs = add_centred(again(vi), mean, cs);
    stats(mean, block_sum2(cs, red2));
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x)
      yv[vi] = wr > 0.0 ? ln_out<T, W, VEC>(again(vi), wmean, 0.0f, wr, wv, bv, vi)
                        : ln_out<T, W, VEC>(again(vi), mean, c, r, wv, bv, vi);
  }
}
// --8<-- [end:ln_fwd]

// --8<-- [start:ln_bwd]
// As rms_bwd_kernel, with xhat = (x - mean) * rstd, two row reductions done together (block_sum2:
// sum(g) and sum(g * xhat)), and two accumulators per column: dweight (dy * xhat) and dbias (dy).
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// (The explicit minimum of one block per multiprocessor stops ptxas from squeezing the fp32 instance
// into 64 registers, which spilled.)
template <typename T, typename W, int VEC>
__global__ void __launch_bounds__(kMaxThreads, 1)
ln_bwd_kernel(T* __restrict__ dx, float* __restrict__ part_w, float* __restrict__ part_b, const T* __restrict__ dy,
              const T* __restrict__ x, const W* __restrict__ w, const float* __restrict__ mean,
              const float* __restrict__ rstd, long long rows, int d) {
  using VT = Vec<T, VEC>;
  using VW = Vec<W, VEC>;
  __shared__ float2 red[33];
  const int nvec = d / VEC;
  const float fd = static_cast<float>(d);
  const VW* wv = reinterpret_cast<const VW*>(w);
  float* pw = part_w == nullptr ? nullptr : part_w + static_cast<long long>(blockIdx.x) * d;
  float* pb = part_b + static_cast<long long>(blockIdx.x) * d;  // dbias is always produced

  if (nvec <= kLnBwdItems * static_cast<int>(blockDim.x)) {
    float acc_w[kLnBwdItems][VEC], acc_b[kLnBwdItems][VEC];
#pragma unroll
    for (int i = 0; i < kLnBwdItems; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc_w[i][k] = acc_b[i][k] = 0.0f;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
      const long long base = row * d;
      const VT* xv = reinterpret_cast<const VT*>(x + base);
      const VT* gv = reinterpret_cast<const VT*>(dy + base);
      VT* dxv = reinterpret_cast<VT*>(dx + base);
      const float mu = mean[row], r = rstd[row];
      VT xr[kLnBwdItems], gr[kLnBwdItems];
      float2 sums = make_float2(0.0f, 0.0f);  // (sum g, sum g * xhat)
#pragma unroll
      for (int i = 0; i < kLnBwdItems; ++i) {
        const int vi = threadIdx.x + i * blockDim.x;
        if (vi < nvec) {
          xr[i] = xv[vi];
          gr[i] = gv[vi];
          VW wk;
          if (wv != nullptr) wk = wv[vi];
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float xh = (to_f(xr[i].v[k]) - mu) * r;
            const float dyk = to_f(gr[i].v[k]);
            const float g = wv != nullptr ? dyk * to_f(wk.v[k]) : dyk;
            sums.x += g;
            sums.y = fmaf(g, xh, sums.y);
            acc_w[i][k] = fmaf(dyk, xh, acc_w[i][k]);
            acc_b[i][k] += dyk;
          }
        }
      }
      const float2 tot = block_sum2(sums, red);
      const float mg = __fdiv_rn(tot.x, fd), mgx = __fdiv_rn(tot.y, fd);
#pragma unroll
      for (int i = 0; i < kLnBwdItems; ++i) {
        const int vi = threadIdx.x + i * blockDim.x;
        if (vi < nvec) {
          VW wk;
          if (wv != nullptr) wk = wv[vi];
          VT o;
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float xh = (to_f(xr[i].v[k]) - mu) * r;
            const float dyk = to_f(gr[i].v[k]);
            const float g = wv != nullptr ? dyk * to_f(wk.v[k]) : dyk;
            o.v[k] = from_f<T>(r * (g - mg - xh * mgx));
          }
          dxv[vi] = o;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kLnBwdItems; ++i) {
      const int vi = threadIdx.x + i * blockDim.x;
      if (vi < nvec) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          if (pw != nullptr) pw[vi * VEC + k] = acc_w[i][k];
          pb[vi * VEC + k] = acc_b[i][k];
        }
      }
    }
  } else {
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
      const long long base = row * d;
      const VT* xv = reinterpret_cast<const VT*>(x + base);
      const VT* gv = reinterpret_cast<const VT*>(dy + base);
      VT* dxv = reinterpret_cast<VT*>(dx + base);
      const float mu = mean[row], r = rstd[row];
      float2 sums = make_float2(0.0f, 0.0f);
      for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
        const VT a = xv[vi];
        const VT b = gv[vi];
        VW wk;
        if (wv != nullptr) wk = wv[vi];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xh = (to_f(a.v[k]) - mu) * r;
          const float dyk = to_f(b.v[k]);
          const float g = wv != nullptr ? dyk * to_f(wk.v[k]) : dyk;
          sums.x += g;
          sums.y = fmaf(g, xh, sums.y);
          if (pw != nullptr) pw[vi * VEC + k] = fmaf(dyk, xh, pw[vi * VEC + k]);
          pb[vi * VEC + k] += dyk;
        }
      }
      const float2 tot = block_sum2(sums, red);
      const float mg = __fdiv_rn(tot.x, fd), mgx = __fdiv_rn(tot.y, fd);
      for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
        const VT a = xv[vi];
        const VT b = gv[vi];
        VW wk;
        if (wv != nullptr) wk = wv[vi];
        VT o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xh = (to_f(a.v[k]) - mu) * r;
          const float dyk = to_f(b.v[k]);
          const float g = wv != nullptr ? dyk * to_f(wk.v[k]) : dyk;
          o.v[k] = from_f<T>(r * (g - mg - xh * mgx));
        }
        dxv[vi] = o;
      }
    }
  }
}
// --8<-- [end:ln_bwd]

template <typename T, typename W>
bool ln_vec_ok(const void* a, const void* b, const void* c, const void* w, const void* bias, int d) {
  constexpr int V = 16 / sizeof(T);
  constexpr int WB = sizeof(W) * V > 16 ? 16 : sizeof(W) * V;
  return d % V == 0 && aligned_to(a, 16) && aligned_to(b, 16) && aligned_to(c, 16) && aligned_to(w, WB) &&
         aligned_to(bias, WB);
}

template <typename T, typename W, bool RESIDUAL, bool FP32_SUM>
void ln_fwd_launch(bool vec, unsigned grid, cudaStream_t s, T* y, T* h_out, float* mean, float* rstd, const T* x,
                   const T* res, const W* w, const W* b, int d, float eps) {
  constexpr int V = 16 / sizeof(T);
  if (vec)
    NORMLAB_LAUNCH(grid, threads_for(d / V, kFwdItems), 0, s, ln_fwd_kernel<T, W, V, RESIDUAL, FP32_SUM>)(
        y, h_out, mean, rstd, x, res, w, b, d, eps);
  else
    NORMLAB_LAUNCH(grid, threads_for(d, kFwdItems), 0, s, ln_fwd_kernel<T, W, 1, RESIDUAL, FP32_SUM>)(
        y, h_out, mean, rstd, x, res, w, b, d, eps);
}

}  // namespace normlab

using namespace normlab;

// contract: 0 ("hf") or 2 ("fp32"), the residual contract when res is given (cuda/ops.h).
extern "C" int normlab_ln_fwd(int x_code, int w_code, void* y, void* h_out, float* mean, float* rstd, const void* x,
                              const void* res, const void* w, const void* b, long long rows, int d, float eps,
                              int contract, void* stream) {
  if (rows < 0 || rows > kMaxGrid || d < 0) return cudaErrorInvalidValue;
  if ((res == nullptr) != (h_out == nullptr) || (contract != 0 && contract != 2)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_types(x_code, w_code, [&](auto tx, auto tw) -> cudaError_t {
    using T = typename decltype(tx)::type;
    using W = typename decltype(tw)::type;
    constexpr int V = 16 / sizeof(T);
    auto* yp = static_cast<T*>(y);
    auto* hp = static_cast<T*>(h_out);
    auto* xp = static_cast<const T*>(x);
    auto* rp = static_cast<const T*>(res);
    auto* wp = static_cast<const W*>(w);
    auto* bp = static_cast<const W*>(b);
    const unsigned grid = static_cast<unsigned>(rows);
    const bool vec = ln_vec_ok<T, W>(x, y, nullptr, w, b, d) && aligned_to(res, 16) && aligned_to(h_out, 16) &&
                     d % V == 0;
    if (res == nullptr)
      ln_fwd_launch<T, W, false, false>(vec, grid, s, yp, hp, mean, rstd, xp, rp, wp, bp, d, eps);
    else if (contract == 2)
      ln_fwd_launch<T, W, true, true>(vec, grid, s, yp, hp, mean, rstd, xp, rp, wp, bp, d, eps);
    else
      ln_fwd_launch<T, W, true, false>(vec, grid, s, yp, hp, mean, rstd, xp, rp, wp, bp, d, eps);
    return cudaGetLastError();
  });
}

extern "C" int normlab_ln_bwd_blocks(int x_code, int w_code, const void* dx, const void* dy, const void* x,
                                     const void* w, long long rows, int d, int* blocks) {
  *blocks = 0;
  if (rows < 0 || d < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return with_types(x_code, w_code, [&](auto tx, auto tw) -> cudaError_t {
    using T = typename decltype(tx)::type;
    using W = typename decltype(tw)::type;
    constexpr int V = 16 / sizeof(T);
    if (ln_vec_ok<T, W>(dx, dy, x, w, nullptr, d))
      return persistent_blocks(ln_bwd_kernel<T, W, V>, threads_for(d / V, kLnBwdItems), rows, blocks);
    return persistent_blocks(ln_bwd_kernel<T, W, 1>, threads_for(d, kLnBwdItems), rows, blocks);
  });
}

extern "C" int normlab_ln_bwd(int x_code, int w_code, void* dx, float* dw, float* db, float* partial_w,
                              float* partial_b, int blocks, const void* dy, const void* x, const void* w,
                              const float* mean, const float* rstd, long long rows, int d, void* stream) {
  if (rows < 0 || d < 0 || db == nullptr) return cudaErrorInvalidValue;
  if ((w == nullptr) != (dw == nullptr)) return cudaErrorInvalidValue;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_types(x_code, w_code, [&](auto tx, auto tw) -> cudaError_t {
    using T = typename decltype(tx)::type;
    using W = typename decltype(tw)::type;
    const size_t n = static_cast<size_t>(d);
    if (rows == 0) {
      cudaError_t e = cudaMemsetAsync(db, 0, sizeof(float) * n, s);
      if (e != cudaSuccess || dw == nullptr) return e;
      return cudaMemsetAsync(dw, 0, sizeof(float) * n, s);
    }
    if (blocks < 1 || blocks > rows || partial_b == nullptr) return cudaErrorInvalidValue;
    float* pw = dw == nullptr ? nullptr : partial_w;
    if (dw != nullptr && pw == nullptr) return cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(partial_b, 0, sizeof(float) * blocks * n, s);
    if (e == cudaSuccess && pw != nullptr) e = cudaMemsetAsync(pw, 0, sizeof(float) * blocks * n, s);
    if (e != cudaSuccess) return e;
    auto* dxp = static_cast<T*>(dx);
    auto* dyp = static_cast<const T*>(dy);
    auto* xp = static_cast<const T*>(x);
    auto* wp = static_cast<const W*>(w);
    constexpr int V = 16 / sizeof(T);
    if (ln_vec_ok<T, W>(dx, dy, x, w, nullptr, d))
      NORMLAB_LAUNCH(blocks, threads_for(d / V, kLnBwdItems), 0, s, ln_bwd_kernel<T, W, V>)(dxp, pw, partial_b, dyp, xp, wp, mean, rstd, rows, d);
    else
      NORMLAB_LAUNCH(blocks, threads_for(d, kLnBwdItems), 0, s, ln_bwd_kernel<T, W, 1>)(dxp, pw, partial_b, dyp, xp, wp, mean, rstd, rows, d);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    e = launch_column_sum<float>(db, partial_b, blocks, d, s);
    if (e != cudaSuccess || dw == nullptr) return e;
    return launch_column_sum<float>(dw, pw, blocks, d, s);
  });
}
