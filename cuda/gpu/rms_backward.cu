// RMSNorm backward on CUDA: dx per row, dweight by per-block fp32 partial sums plus a column reduction.
//   xhat = x * rstd,  g = dy * w (llama) or dy * (1 + w) (gemma) or dy (no weight),
//   dx = rstd * (g - xhat * mean(g * xhat)),  dweight = sum over rows of dy * xhat.
#include "common.cuh"
#include "launchers.h"

namespace normlab {

// The factor dy is multiplied by to get g (the derivative of y with respect to xhat, per column).
template <typename W>
__device__ __forceinline__ float grad_factor(W wk, int convention) {
  return convention == 0 ? to_f(wk) : 1.0f + to_f(wk);
}

// --8<-- [start:rms_bwd]
// A persistent grid of `gridDim.x` blocks walks the rows (block b takes rows b, b + G, b + 2G, ...).
// Per row: one block-wide reduction for mean(g * xhat), then dx. For dweight, thread t always owns the
// same columns, so it accumulates dy * xhat for them in registers across all its block's rows and
// writes one fp32 partial row per block at the end: partial[b][col]. column_sum then adds the G partial
// rows in a fixed order. Rows too long for registers take the streaming path, which re-reads x and dy
// for the output loop and accumulates dweight in the block's own partial row in global memory (each
// column is touched by one thread only, so there is no race and no atomic).
template <typename T, typename W, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
rms_bwd_kernel(T* __restrict__ dx, float* __restrict__ partial, const T* __restrict__ dy,
               const T* __restrict__ x, const W* __restrict__ w, const float* __restrict__ rstd,
               long long rows, int d, int convention) {
  using VT = Vec<T, VEC>;
  using VW = Vec<W, VEC>;
  __shared__ float red[33];
  const int nvec = d / VEC;
  const VW* wv = reinterpret_cast<const VW*>(w);
  float* part = partial == nullptr ? nullptr : partial + static_cast<long long>(blockIdx.x) * d;

  if (nvec <= kBwdItems * static_cast<int>(blockDim.x)) {
    float acc[kBwdItems][VEC];
#pragma unroll
    for (int i = 0; i < kBwdItems; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[i][k] = 0.0f;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {  // uniform across the block
      const long long base = row * d;
      const VT* xv = reinterpret_cast<const VT*>(x + base);
      const VT* gv = reinterpret_cast<const VT*>(dy + base);
      VT* dxv = reinterpret_cast<VT*>(dx + base);
      const float r = rstd[row];
      VT xr[kBwdItems], gr[kBwdItems];
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kBwdItems; ++i) {
        const int vi = threadIdx.x + i * blockDim.x;
        if (vi < nvec) {
          xr[i] = xv[vi];
          gr[i] = gv[vi];
          VW wk;
          if (wv != nullptr) wk = wv[vi];
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float xh = to_f(xr[i].v[k]) * r;
            const float dyk = to_f(gr[i].v[k]);
            const float g = wv != nullptr ? dyk * grad_factor(wk.v[k], convention) : dyk;
            dot = fmaf(g, xh, dot);
            acc[i][k] = fmaf(dyk, xh, acc[i][k]);
          }
        }
      }
      const float m = __fdiv_rn(block_sum(dot, red), static_cast<float>(d));  // mean(g * xhat), same in every thread
#pragma unroll
      for (int i = 0; i < kBwdItems; ++i) {
        const int vi = threadIdx.x + i * blockDim.x;
        if (vi < nvec) {
          VW wk;
          if (wv != nullptr) wk = wv[vi];
          VT o;
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float xh = to_f(xr[i].v[k]) * r;
            const float dyk = to_f(gr[i].v[k]);
            const float g = wv != nullptr ? dyk * grad_factor(wk.v[k], convention) : dyk;
            o.v[k] = from_f<T>(r * (g - xh * m));
          }
          dxv[vi] = o;
        }
      }
    }
    if (part != nullptr) {
#pragma unroll
      for (int i = 0; i < kBwdItems; ++i) {
        const int vi = threadIdx.x + i * blockDim.x;
        if (vi < nvec) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) part[vi * VEC + k] = acc[i][k];
        }
      }
    }
  } else {
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
      const long long base = row * d;
      const VT* xv = reinterpret_cast<const VT*>(x + base);
      const VT* gv = reinterpret_cast<const VT*>(dy + base);
      VT* dxv = reinterpret_cast<VT*>(dx + base);
      const float r = rstd[row];
      float dot = 0.0f;
      for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
        const VT a = xv[vi];
        const VT b = gv[vi];
        VW wk;
        if (wv != nullptr) wk = wv[vi];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xh = to_f(a.v[k]) * r;
          const float dyk = to_f(b.v[k]);
          const float g = wv != nullptr ? dyk * grad_factor(wk.v[k], convention) : dyk;
          dot = fmaf(g, xh, dot);
          if (part != nullptr) part[vi * VEC + k] = fmaf(dyk, xh, part[vi * VEC + k]);
        }
      }
      const float m = __fdiv_rn(block_sum(dot, red), static_cast<float>(d));
      for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
        const VT a = xv[vi];
        const VT b = gv[vi];
        VW wk;
        if (wv != nullptr) wk = wv[vi];
        VT o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xh = to_f(a.v[k]) * r;
          const float dyk = to_f(b.v[k]);
          const float g = wv != nullptr ? dyk * grad_factor(wk.v[k], convention) : dyk;
          o.v[k] = from_f<T>(r * (g - xh * m));
        }
        dxv[vi] = o;
      }
    }
  }
}
// --8<-- [end:rms_bwd]

template <typename T, typename W>
bool bwd_vec_ok(const void* dx, const void* dy, const void* x, const void* w, int d) {
  constexpr int V = 16 / sizeof(T);
  constexpr int WB = sizeof(W) * V > 16 ? 16 : sizeof(W) * V;
  return d % V == 0 && aligned_to(dx, 16) && aligned_to(dy, 16) && aligned_to(x, 16) && aligned_to(w, WB);
}

}  // namespace normlab

using namespace normlab;

extern "C" int normlab_rms_bwd_blocks(int x_code, int w_code, const void* dx, const void* dy, const void* x,
                                      const void* w, long long rows, int d, int* blocks) {
  *blocks = 0;
  if (rows < 0 || d < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return with_types(x_code, w_code, [&](auto tx, auto tw) -> cudaError_t {
    using T = typename decltype(tx)::type;
    using W = typename decltype(tw)::type;
    constexpr int V = 16 / sizeof(T);
    if (bwd_vec_ok<T, W>(dx, dy, x, w, d))
      return persistent_blocks(rms_bwd_kernel<T, W, V>, threads_for(d / V, kBwdItems), rows, blocks);
    return persistent_blocks(rms_bwd_kernel<T, W, 1>, threads_for(d, kBwdItems), rows, blocks);
  });
}

extern "C" int normlab_rms_bwd(int x_code, int w_code, void* dx, float* dw, float* partial, int blocks,
                               const void* dy, const void* x, const void* w, const float* rstd, long long rows,
                               int d, int convention, void* stream) {
  if (rows < 0 || d < 0 || (convention != 0 && convention != 1)) return cudaErrorInvalidValue;
  if ((w == nullptr) != (dw == nullptr)) return cudaErrorInvalidValue;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_types(x_code, w_code, [&](auto tx, auto tw) -> cudaError_t {
    using T = typename decltype(tx)::type;
    using W = typename decltype(tw)::type;
    if (rows == 0) {  // an empty batch: dweight is a sum of nothing
      return dw == nullptr ? cudaSuccess : cudaMemsetAsync(dw, 0, sizeof(float) * static_cast<size_t>(d), s);
    }
    if (blocks < 1 || blocks > rows) return cudaErrorInvalidValue;
    float* part = dw == nullptr ? nullptr : partial;
    if (part != nullptr) {
      // the streaming path accumulates into the partial rows, so they start at zero
      cudaError_t e = cudaMemsetAsync(part, 0, sizeof(float) * static_cast<size_t>(blocks) * d, s);
      if (e != cudaSuccess) return e;
    }
    auto* dxp = static_cast<T*>(dx);
    auto* dyp = static_cast<const T*>(dy);
    auto* xp = static_cast<const T*>(x);
    auto* wp = static_cast<const W*>(w);
    constexpr int V = 16 / sizeof(T);
    if (bwd_vec_ok<T, W>(dx, dy, x, w, d))
      NORMLAB_LAUNCH(blocks, threads_for(d / V, kBwdItems), 0, s, rms_bwd_kernel<T, W, V>)(dxp, part, dyp, xp, wp, rstd, rows, d, convention);
    else
      NORMLAB_LAUNCH(blocks, threads_for(d, kBwdItems), 0, s, rms_bwd_kernel<T, W, 1>)(dxp, part, dyp, xp, wp, rstd, rows, d, convention);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || dw == nullptr) return e;
    return launch_column_sum<float>(dw, part, blocks, d, s);
  });
}
