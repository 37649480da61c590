// Shared pieces of the CPU glue (rms_norm_cpu.cpp, layer_norm_cpu.cpp): row blocking, the streaming-store
// threshold, input checks and the deterministic gradient reduction. The kernels themselves do not need it.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

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
// Rows per parallel task aim at this many elements, so small inputs are not split across threads.
constexpr int64_t kGrainElems = 16384;

inline void check_x(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.device().is_cpu(), op, ": x must be a CPU tensor here, got ", x.device());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf,
              op, ": x has dtype ", x.scalar_type(), "; the fused op supports float32, bfloat16 and float16");
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dimension (the normalized one)");
  TORCH_CHECK(x.is_contiguous(), op, ": x must be contiguous (the Python wrapper makes it so)");
}

inline void check_same(const at::Tensor& t, const at::Tensor& x, const char* op, const char* name) {
  TORCH_CHECK(t.sizes() == x.sizes(), op, ": ", name, " has shape ", t.sizes(), " but x has shape ", x.sizes());
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), op, ": ", name, " has dtype ", t.scalar_type(),
              " but x has dtype ", x.scalar_type(), "; they must match");
  TORCH_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device(), " but x is on ", x.device());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

// A gain or bias: 1-D of length d, dtype x.dtype or float32, contiguous, on x's device.
inline void check_param(const c10::optional<at::Tensor>& p, const at::Tensor& x, const char* op, const char* name) {
  if (!p.has_value()) return;
  const at::Tensor& t = *p;
  TORCH_CHECK(t.dim() == 1 && t.size(0) == x.size(-1), op, ": ", name, " has shape ", t.sizes(),
              " but the normalized dimension of x has size ", x.size(-1));
  TORCH_CHECK(t.scalar_type() == x.scalar_type() || t.scalar_type() == at::kFloat, op, ": ", name,
              " has dtype ", t.scalar_type(), "; it must be x's dtype (", x.scalar_type(), ") or float32");
  TORCH_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device(), " but x is on ", x.device());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

// Gains and biases go to the kernels as float32: the conversion from bf16/fp16 is exact and done once
// per call instead of once per row. Undefined stays undefined.
inline at::Tensor as_f32(const c10::optional<at::Tensor>& p) {
  if (!p.has_value()) return at::Tensor();
  return p->scalar_type() == at::kFloat ? *p : p->to(at::kFloat);
}

inline at::Tensor stats_like(const at::Tensor& x) {  // float32, shape x.shape[:-1]
  return at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
}

// --8<-- [start:reduce]
// Sums the per-block partials part[nb][d] over blocks in block order (the same order for every column and
// every thread count) and casts the result to `out`'s dtype.
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
