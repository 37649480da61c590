// Device helpers shared by every CUDA kernel of the library: dtype conversions, vector types, the
// per-row reciprocal RMS, and the block-wide sum. No torch header is included here on purpose: nvcc then
// compiles each .cu file in seconds, and the torch glue lives in ops_cuda.cpp.
#pragma once

#include <cstdint>
#include <type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Every kernel launch goes through this macro: NORMLAB_LAUNCH(grid, block, smem, stream, kernel)(args).
// With nvcc it is the usual triple-chevron launch; the CPU emulation of the kernels
// (cuda/gpu/emulation/emu.h, used by tests/test_cuda_build.py) defines it first to run the same launchers
// on host threads.
#ifndef NORMLAB_LAUNCH
#define NORMLAB_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#endif

namespace normlab {

// Type codes shared with the C++ glue (ops_cuda.cpp); -1 means "no tensor".
enum DTypeCode : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Every sum is accumulated in fp32; inputs and outputs keep the tensor's dtype. The conversions round to
// nearest even, as PyTorch's .to() does.
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// N consecutive elements moved as one access. With sizeof(T)*N == 16 this is a 128-bit load or store
// (LDG.E.128 / STG.E.128); wider groups (8 fp32 weights next to 8 bf16 inputs) are split into 16-byte
// accesses, so the pointer only ever needs min(16, sizeof(T)*N)-byte alignment, which the host checks.
template <typename T, int N>
struct alignas(sizeof(T) * N > 16 ? 16 : sizeof(T) * N) Vec {
  T v[N];
};

// Columns of a row handled by one thread in the register-resident paths, and the block-size cap.
constexpr int kMaxThreads = 512;
constexpr int kFwdItems = 8;  // forward: up to 8 vectors per thread stay in registers
constexpr int kBwdItems = 4;  // backward holds x, dy and the dweight accumulators: fewer vectors

// --8<-- [start:row_rstd]
// 1/sqrt(mean(x^2) + eps) with eps inside the square root. The division and __frsqrt_rn are correctly
// rounded (IEEE round-to-nearest); it runs once per row, so the exact instruction costs nothing measurable
// against the row's memory traffic, and it keeps the error inside the tolerance policy's two roundings.
__device__ __forceinline__ float row_rstd(float sum_sq, int d, float eps) {
  return __frsqrt_rn(__fdiv_rn(sum_sq, static_cast<float>(d)) + eps);
}
// --8<-- [end:row_rstd]

// A row's fp32 sum of squares outside the normal range: it overflowed (elements above about 1.8e19) or
// underflowed to zero or subnormals (elements below about 1e-19). Such rows take a wide second pass
// (wide_rms_rstd, wide_ln_stats); every other row pays this one comparison.
__device__ __forceinline__ bool sum_out_of_range(float s) { return !(s >= 1.17549435e-38f && s <= 3.40282347e38f); }

// The wide pass of RMSNorm for the rare rows above: thread 0 sums the row's squares in double (which
// holds the square of every float), every thread receives 1 / sqrt(sum / d + eps) in double, or 0 when
// the fp32 result stands (a row with Inf or NaN, which propagate as before, or all zeros). The condition
// is uniform over the block (it tests a block_sum result), so every thread calls it: it has barriers.
template <typename T>
__device__ double wide_rms_rstd(const T* row, int d, float eps) {
  __shared__ double result;
  if (threadIdx.x == 0) {
    double ss = 0.0, bad = 0.0;
    for (int j = 0; j < d; ++j) {
      const double v = to_f(row[j]);
      bad += v - v;  // NaN once an element is Inf or NaN
      ss += v * v;
    }
    result = (bad == 0.0 && ss > 0.0) ? 1.0 / sqrt(ss / d + static_cast<double>(eps)) : 0.0;
  }
  __syncthreads();
  const double r = result;
  __syncthreads();  // everyone has read it before a later row's thread 0 writes it again
  return r;
}

// The same over the float32 sums x + res (the "fp32" residual contract), formed element by element. Inlined:
// the caller's registers then hold the row's float32 sums across it without a call's spills.
template <typename T>
__device__ __forceinline__ double wide_rms_rstd_of_sum(const T* x, const T* res, int d, float eps) {
  __shared__ double result;
  if (threadIdx.x == 0) {
    double ss = 0.0, bad = 0.0;
    for (int j = 0; j < d; ++j) {
      const double v = to_f(x[j]) + to_f(res[j]);
      bad += v - v;
      ss += v * v;
    }
    result = (bad == 0.0 && ss > 0.0) ? 1.0 / sqrt(ss / d + static_cast<double>(eps)) : 0.0;
  }
  __syncthreads();
  const double r = result;
  __syncthreads();
  return r;
}

// The residual add fused into a forward (RMSNorm version 5, LayerNorm), one vector at a time.
// h = round_to_T(float(x) + float(res)), the new residual stream.
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> add_round(const Vec<T, VEC>& a, const Vec<T, VEC>& b) {
  Vec<T, VEC> h;
#pragma unroll
  for (int k = 0; k < VEC; ++k) h.v[k] = from_f<T>(to_f(a.v[k]) + to_f(b.v[k]));
  return h;
}

// The vector of the row that is normalized: x itself, h = round_T(x + res) (the "hf" residual contract),
// or, with FP32_SUM (the "fp32" contract), the float32 sum s = x + res, kept in fp32 registers.
template <typename T, int VEC, bool FP32_SUM>
using RowVec = Vec<std::conditional_t<FP32_SUM, float, T>, VEC>;

// Vector vi of that row. With a residual and STORE it also stores the new residual stream, round_T(x + res),
// into hv[vi] (both contracts store the same bits there); without STORE it recomputes the vector only.
template <typename T, int VEC, bool RESIDUAL, bool FP32_SUM, bool STORE = true>
__device__ __forceinline__ RowVec<T, VEC, FP32_SUM> row_vec(const Vec<T, VEC>* xv, const Vec<T, VEC>* rv,
                                                           Vec<T, VEC>* hv, int vi) {
  static_assert(RESIDUAL || !FP32_SUM, "the fp32 contract concerns the residual add only");
  if constexpr (!RESIDUAL) {
    return xv[vi];
  } else if constexpr (FP32_SUM) {
    const Vec<T, VEC> a = xv[vi], b = rv[vi];
    Vec<float, VEC> s;
    Vec<T, VEC> h;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      s.v[k] = to_f(a.v[k]) + to_f(b.v[k]);
      h.v[k] = from_f<T>(s.v[k]);
    }
    if constexpr (STORE) hv[vi] = h;
    return s;
  } else {
    const Vec<T, VEC> h = add_round(xv[vi], rv[vi]);
    if constexpr (STORE) hv[vi] = h;
    return h;
  }
}

// The same for LayerNorm: mean and rstd in double (rstd 0 when the fp32 result stands: Inf or NaN in the
// row, or a constant row whose float32 sum is finite; a constant row whose sum overflows, a row of 1e38s,
// is done here, since its float32 mean is Inf). With res (the "fp32" residual contract) the row is the float32 sum row + res.
template <typename T>
__device__ double wide_ln_stats(const T* row, int d, float eps, double* mean, const T* res = nullptr) {
  __shared__ double result[2];
  auto at = [&](int j) -> float { return res != nullptr ? to_f(row[j]) + to_f(res[j]) : to_f(row[j]); };
  if (threadIdx.x == 0) {
    double s = 0.0, bad = 0.0;
    for (int j = 0; j < d; ++j) {
      const double v = at(j);
      bad += v - v;
      s += v;
    }
    const double mu = s / d;
    double q = 0.0;
    for (int j = 0; j < d; ++j) {
      const double c = at(j) - mu;
      q += c * c;
    }
    result[0] = mu;
    const bool fp32_stands = q == 0.0 && fabs(s) < 1.7014117331926443e38;  // half of float32's maximum
    result[1] = (bad == 0.0 && !fp32_stands) ? 1.0 / sqrt(q / d + static_cast<double>(eps)) : 0.0;
  }
  __syncthreads();
  *mean = result[0];
  const double r = result[1];
  __syncthreads();
  return r;
}

// --8<-- [start:warp_sum]
// Sum over the first `lanes` lanes of the calling warp (1 <= lanes <= 32); the result is in lane 0.
// A block whose size is not a multiple of 32 has a partial last warp: its missing lanes must not be
// named in the shuffle mask, and values "read" from them are undefined, so each step adds the partner's
// value only when the partner exists. Lane 0's dependency tree only ever reads existing lanes.
__device__ __forceinline__ float warp_sum(float v, int lanes) {
  const unsigned mask = lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(mask, v, offset);
    if (lane + offset < lanes) v += other;
  }
  return v;
}
// --8<-- [end:warp_sum]

// --8<-- [start:group_sum]
// Sum over a group of `lanes` consecutive lanes (lanes a power of two <= 32, groups aligned to it) of a
// warp whose 32 lanes all call this; every lane of the group gets the group's sum. The shuffle tree is
// warp_sum's restricted to the group (a step adds the partner only when it is in the same group), and the
// first lane of the group then hands its total to the others.
__device__ __forceinline__ float group_sum(float v, int lanes) {
  const int lane = threadIdx.x & 31;
  const int g = lane & (lanes - 1);
  for (int offset = lanes >> 1; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(0xffffffffu, v, offset);
    if (g + offset < lanes) v += other;
  }
  return __shfl_sync(0xffffffffu, v, lane - g);
}
// --8<-- [end:group_sum]

// --8<-- [start:block_sum]
// Sum of v over every thread of the block, returned to every thread. Any blockDim.x from 1 to 1024.
// Step 1: each warp reduces its own lanes with shuffles (no shared memory, no barrier).
// Step 2: lane 0 of each warp parks its partial in red[warp]; after a barrier warp 0 reduces those
//         (at most 32) partials the same way and parks the total in red[32].
// Step 3: a second barrier, then everyone reads red[32].
// Two barriers are enough even when the function is called again at once: a later call writes red[w]
// only after this call's second barrier (when warp 0 has finished reading red[0..31]) and writes red[32]
// only after its own first barrier (when every thread has read this call's red[32]).
// The order of the additions depends only on blockDim.x, so the result is deterministic.
__device__ __forceinline__ float block_sum(float v, float* red /* 33 floats of shared memory */) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  const int lanes_here = min(32, static_cast<int>(blockDim.x) - warp * 32);
  v = warp_sum(v, lanes_here);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nwarps ? red[lane] : 0.0f;
    t = warp_sum(t, lanes_here);  // warp 0 has min(32, blockDim.x) lanes
    if (lane == 0) red[32] = t;
  }
  __syncthreads();
  return red[32];
}
// --8<-- [end:block_sum]

// The same for two sums at once (LayerNorm backward needs sum(g) and sum(g * xhat)).
__device__ __forceinline__ float2 block_sum2(float2 v, float2* red /* 33 float2 of shared memory */) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  const int lanes_here = min(32, static_cast<int>(blockDim.x) - warp * 32);
  v.x = warp_sum(v.x, lanes_here);
  v.y = warp_sum(v.y, lanes_here);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float2 t = lane < nwarps ? red[lane] : make_float2(0.0f, 0.0f);
    t.x = warp_sum(t.x, lanes_here);
    t.y = warp_sum(t.y, lanes_here);
    if (lane == 0) red[32] = t;
  }
  __syncthreads();
  return red[32];
}

// Rows that fit one warp's registers (at most 32 * kFwdItems vectors) run several to a block of
// kRowThreads threads (rms_fwd_rows): each row gets `lanes` threads, its vector count rounded up to a
// power of two, at most 32. Depends on the row length only (batch invariance).
constexpr int kRowThreads = 128;
inline bool fits_one_warp(int nvec) { return nvec <= 32 * kFwdItems; }
inline int lanes_for(int nvec) {
  int lanes = 1;
  while (lanes < 32 && lanes < nvec) lanes <<= 1;
  return lanes;
}

// Block size for the register-resident kernels: enough warps that `items` vectors per thread cover
// the row's `nvec` vectors, at least one warp; rows longer than kMaxThreads * items use kMaxThreads
// threads and the streaming path. Depends on the row length only, never on the number of rows, so a
// row's result does not depend on the batch it came in (batch invariance).
inline int threads_for(int nvec, int items) {
  if (nvec > kMaxThreads * items) return kMaxThreads;
  const int needed = (nvec + items - 1) / items;
  const int warps = (needed + 31) / 32;
  return warps < 1 ? 32 : warps * 32;
}

// --8<-- [start:column_sum]
// Second stage of the deterministic dweight/dbias reduction: the backward kernels leave one fp32 partial
// row per block (partial[b][col], b < blocks); this kernel adds them per column in the fixed order
// b = 0, 1, ..., blocks - 1 and stores the sum as O (the ops use O = float: they return the unrounded
// fp32 sums, cuda/ops.h). No atomics: repeated runs are bit-identical. Thread col reads partial[b][col]:
// consecutive threads read consecutive addresses.
template <typename O>
__global__ void column_sum(O* __restrict__ out, const float* __restrict__ partial, int blocks, int d) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= d) return;
  float s = 0.0f;
  for (int b = 0; b < blocks; ++b) s += partial[static_cast<long long>(b) * d + col];
  out[col] = from_f<O>(s);
}
// --8<-- [end:column_sum]

template <typename O>
cudaError_t launch_column_sum(O* out, const float* partial, int blocks, int d, cudaStream_t s) {
  if (d == 0) return cudaSuccess;
  NORMLAB_LAUNCH((d + 255) / 256, 256, 0, s, column_sum<O>)(out, partial, blocks, d);
  return cudaGetLastError();
}

// Each backward block handles at least this many rows (when there are enough rows), which bounds the
// partial buffers' extra traffic (2 x blocks x d x 4 bytes) against the rows' own traffic.
constexpr long long kRowsPerPartial = 8;

// Blocks for a persistent backward launch: as many as can be resident at once on the device, at most
// one per kRowsPerPartial rows. Deterministic for a given device, kernel, row count and width.
template <typename K>
cudaError_t persistent_blocks(K kernel, int threads, long long rows, int* blocks) {
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  if (e != cudaSuccess) return e;
  long long g = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  const long long cap = (rows + kRowsPerPartial - 1) / kRowsPerPartial;
  if (g > cap) g = cap;
  if (g > rows) g = rows;
  *blocks = static_cast<int>(g);
  return cudaSuccess;
}

// Host-side type dispatch: calls f(Tag<T>{}, Tag<W>{}) for the input dtype T and the weight dtype W
// (the input's dtype or fp32; without a weight W = T and the pointer is null). Five (T, W) pairs exist.
template <typename T> struct Tag { using type = T; };

template <typename F>
cudaError_t with_types(int x_code, int w_code, F&& f) {
  switch (x_code) {
    case kF32:
      if (w_code == -1 || w_code == kF32) return f(Tag<float>{}, Tag<float>{});
      break;
    case kF16:
      if (w_code == kF32) return f(Tag<__half>{}, Tag<float>{});
      if (w_code == -1 || w_code == kF16) return f(Tag<__half>{}, Tag<__half>{});
      break;
    case kBF16:
      if (w_code == kF32) return f(Tag<__nv_bfloat16>{}, Tag<float>{});
      if (w_code == -1 || w_code == kBF16) return f(Tag<__nv_bfloat16>{}, Tag<__nv_bfloat16>{});
      break;
    default:
      break;
  }
  return cudaErrorInvalidValue;
}

// Calls f(Tag<T>{}) for one dtype code.
template <typename F>
cudaError_t with_type(int code, F&& f) {
  switch (code) {
    case kF32: return f(Tag<float>{});
    case kF16: return f(Tag<__half>{});
    case kBF16: return f(Tag<__nv_bfloat16>{});
    default: return cudaErrorInvalidValue;
  }
}

// The kernels index rows by blockIdx.x: at most 2^31 - 1 of them per launch.
constexpr long long kMaxGrid = 2147483647LL;

inline bool aligned_to(const void* p, int bytes) {
  return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(bytes) == 0;
}

}  // namespace normlab
