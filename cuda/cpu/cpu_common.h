// Shared pieces of the CPU glue (rms_norm_cpu.cpp, layer_norm_cpu.cpp): row blocking, the streaming-store
// threshold, the argument checks (cuda/op_checks.h, shared with the CUDA glue) and the deterministic
// gradient reduction. The kernels themselves do not need it.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "../op_checks.h"
#include "simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

namespace normlab_cpu {

// Rows per block of the gradient reduction over rows. Fixed, so the partition of rows into blocks (and
// hence every rounding in dweight/dbias) depends only on the shape, never on the number of threads.
constexpr int64_t kRowBlock = 128;
// Outputs at least this large are written with non-temporal stores: they would not stay in the caches
// anyway, and bypassing them saves the read-for-ownership of every destination line.
// NORMLAB_STREAM_BYTES overrides it (bytes; read on every call, for measurements).
constexpr int64_t kStreamBytesDefault = int64_t(4) << 20;
inline int64_t stream_bytes() {
  if (const char* env = std::getenv("NORMLAB_STREAM_BYTES")) return std::atoll(env);
  return kStreamBytesDefault;
}
// --8<-- [start:stream_rule]
// Whether the memory of an output is already mapped: its first, middle and last pages (mincore). An
// allocator that hands big blocks straight back to the kernel (glibc's default above its mmap threshold,
// jemalloc's purging) gives each call fresh pages. The first store to such a page faults, and the kernel
// zeroes the page through the cache; a non-temporal store then writes the same line a second time, around
// the cache, so streaming costs more than it saves there. An unmapped page, or an error, answers false.
inline bool pages_mapped(const void* p, int64_t n) {
  if (n <= 0) return false;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (const uintptr_t at : {a, a + static_cast<uintptr_t>(n / 2), a + static_cast<uintptr_t>(n - 1)}) {
    unsigned char v = 0;
    if (mincore(reinterpret_cast<void*>(at & ~(page - 1)), page, &v) != 0 || !(v & 1)) return false;
  }
  return true;
}
// Streaming stores for an output of n bytes at p: at least the threshold, and into pages already mapped.
// Setting NORMLAB_STREAM_BYTES decides by size alone (measurements and tests force either store).
inline bool use_stream(const void* p, int64_t n) {
  if (std::getenv("NORMLAB_STREAM_BYTES")) return n >= stream_bytes();
  return n >= kStreamBytesDefault && pages_mapped(p, n);
}
// --8<-- [end:stream_rule]
// Short rows take the multi-row kernels when a row is at most kTileRowBytes long (and d <= kShortRow,
// simd.h). NORMLAB_CPU_TILE (read on every call) overrides it: 0 sends every row through the row-at-a-time
// kernels (the tests compare the two bit for bit), a positive number of bytes sets the longest tiled row.
// 512 bytes covers the QK-norm head sizes of 64 to 256 elements in both half dtypes (the benchmark's short-row
// sweep measures the other settings beside it).
constexpr int64_t kTileRowBytes = 512;
inline bool use_tiles(int64_t d, int64_t elem_size) {
  int64_t limit = kTileRowBytes;
  if (const char* env = std::getenv("NORMLAB_CPU_TILE")) limit = std::atoll(env);
  return d <= kShortRow && d * elem_size <= limit;
}
// Software prefetch of the next row in the row kernels (simd.h, prefetch_l2): on unless NORMLAB_CPU_PREFETCH=0
// (read on every call, so a measurement can show what it is worth; results are the same bits either way).
inline bool prefetch_rows() {
  const char* env = std::getenv("NORMLAB_CPU_PREFETCH");
  return !(env && env[0] == '0' && env[1] == 0);
}
// The LayerNorm forward of rows without a fused residual through ln_fwd_plain (on unless NORMLAB_CPU_PLAIN=0,
// read on every call: the tests compare both paths bit for bit, and a measurement can show what it is worth).
inline bool plain_rows() {
  const char* env = std::getenv("NORMLAB_CPU_PLAIN");
  return !(env && env[0] == '0' && env[1] == 0);
}
// Rows per parallel task aim at this many elements, so small inputs are not split across threads.
constexpr int64_t kGrainElems = 16384;

// Gains and biases go to the kernels as float32: the conversion from bf16/fp16 is exact and done once
// per call instead of once per row. Undefined stays undefined.
inline at::Tensor as_f32(const c10::optional<at::Tensor>& p) {
  if (!p.has_value()) return at::Tensor();
  return p->scalar_type() == at::kFloat ? *p : p->to(at::kFloat);
}

using namespace normlab_checks;

inline int64_t rows_of(const at::Tensor& x) { return c10::multiply_integers(x.sizes().slice(0, x.dim() - 1)); }

inline at::Tensor stats_like(const at::Tensor& x) {  // float32, shape x.shape[:-1]
  return at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
}

// --8<-- [start:reduce]
// Sums the per-block partials part[nb][d] over blocks in block order (the same order for every column and
// every thread count) into `out` (float32: the unrounded sums the op returns).
inline void reduce_blocks(at::Tensor& part, at::Tensor& out) {
  const int64_t nb = part.size(0), d = part.size(1);
  float* p = part.data_ptr<float>();
  at::parallel_for(0, d, 1024, [&](int64_t j0, int64_t j1) {
    for (int64_t b = 1; b < nb; ++b) {
      const float* row = p + b * d;
      for (int64_t j = j0; j < j1; ++j) p[j] += row[j];
    }
  });
  if (nb == 0) {
    out.zero_();
    return;
  }
  out.copy_(part[0]);
}
// --8<-- [end:reduce]

}  // namespace normlab_cpu
