// Reciprocal square root on the CPU: every method of the study, an exhaustive error sweep against the
// correctly rounded result, throughput timing, and an RMSNorm row loop to time the rsqrt's share.
//
// Built without -march flags so the library loads on any x86-64: functions that use AVX/FMA or AVX-512
// carry target attributes and run only when the CPU reports the feature at run time (cpuid, via
// __builtin_cpu_supports); otherwise the method is reported unavailable. -ffp-contract=off is required
// (set by the loader): the classic Newton step must not be fused into an FMA behind our back.
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#define RSQ_X86 1
#include <immintrin.h>
#else
#define RSQ_X86 0
#endif

#include "rsqrt_common.h"

namespace {

using ArrayFn = void (*)(const float*, float*, int64_t);
using ScalarFn = float (*)(float);

// ------------------------------------------------------------------------------------------------
// Run-time feature detection. RSQRT_DISABLE_ISA="avx512,avx" hides features (to test the
// "unavailable" path on a machine that has them); it never enables anything.
// ------------------------------------------------------------------------------------------------
bool env_disables(const char* isa) {
  const char* v = std::getenv("RSQRT_DISABLE_ISA");
  if (!v) return false;
  std::string s = std::string(",") + v + ",";
  return s.find(std::string(",") + isa + ",") != std::string::npos;
}

bool has_sse() {
#if RSQ_X86
  return !env_disables("sse");  // SSE/SSE2 are part of x86-64
#else
  return false;
#endif
}
bool has_avx_fma() {
#if RSQ_X86
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma") && !env_disables("avx");
#else
  return false;
#endif
}
bool has_avx2_fma() {
#if RSQ_X86
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !env_disables("avx");
#else
  return false;
#endif
}
bool has_avx512() {
#if RSQ_X86
  return __builtin_cpu_supports("avx512f") && !env_disables("avx512");
#else
  return false;
#endif
}

// ------------------------------------------------------------------------------------------------
// Newton steps on a scalar estimate y of 1/sqrt(x), h = x/2.
//   classic:    y * (1.5 - (h*y)*y)                       (Quake's form; 1.5 - t cancels)
//   rearranged: y + y * (0.5 - (h*y)*y)                   (SSE path: separate roundings)
//   fma:        fma(y, fma(-(h*y), y, 0.5), y)            (AVX and AVX-512 paths)
// ------------------------------------------------------------------------------------------------
enum Form { kExact = 0, kRaw = 1, kClassic = 2, kRearranged = 3, kFma = 4 };

// --8<-- [start:newton_scalar]
inline float nr_classic(float x, float y) {
  const float h = 0.5f * x;
  return y * (1.5f - (h * y) * y);
}
inline float nr_rearranged(float x, float y) {
  const float h = 0.5f * x;
  const float e = 0.5f - (h * y) * y;
  return y + y * e;
}
inline float nr_fma(float x, float y) {
  const float h = 0.5f * x;
  const float e = std::fmaf(-(h * y), y, 0.5f);
  return std::fmaf(y, e, y);
}
// --8<-- [end:newton_scalar]

template <int FORM, int STEPS>
inline float refine_scalar(float x, float y) {
  for (int s = 0; s < STEPS; ++s) {
    if (FORM == kClassic) y = nr_classic(x, y);
    if (FORM == kRearranged) y = nr_rearranged(x, y);
    if (FORM == kFma) y = nr_fma(x, y);
  }
  return y;
}

// ---- 1.0f / sqrtf(x), plain C++ (the compiler may vectorize the loop with SSE2: same IEEE ops) ----
__attribute__((noinline)) float libm_scalar(float x) { return 1.0f / std::sqrt(x); }
void libm_array(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / std::sqrt(x[i]);
}

#if RSQ_X86
// ---- SSE: RSQRTPS / RSQRTSS ----
// --8<-- [start:sse_rsqrt]
template <int FORM, int STEPS>
__m128 sse_refine(__m128 x, __m128 y) {
  const __m128 h = _mm_mul_ps(_mm_set1_ps(0.5f), x);
  for (int s = 0; s < STEPS; ++s) {
    const __m128 hyy = _mm_mul_ps(_mm_mul_ps(h, y), y);
    if (FORM == kClassic) y = _mm_mul_ps(y, _mm_sub_ps(_mm_set1_ps(1.5f), hyy));
    if (FORM == kRearranged) y = _mm_add_ps(y, _mm_mul_ps(y, _mm_sub_ps(_mm_set1_ps(0.5f), hyy)));
  }
  return y;
}
// --8<-- [end:sse_rsqrt]
template <int FORM, int STEPS>
__attribute__((noinline)) float sse_scalar(float x) {
  if (FORM == kExact) return _mm_cvtss_f32(_mm_div_ss(_mm_set_ss(1.0f), _mm_sqrt_ss(_mm_set_ss(x))));
  const float y = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x)));
  return refine_scalar<FORM, STEPS>(x, y);
}
template <int FORM, int STEPS>
void sse_array(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    __m128 r;
    if (FORM == kExact) r = _mm_div_ps(_mm_set1_ps(1.0f), _mm_sqrt_ps(v));
    else r = sse_refine<FORM, STEPS>(v, _mm_rsqrt_ps(v));
    _mm_storeu_ps(y + i, r);
  }
  for (; i < n; ++i) y[i] = sse_scalar<FORM, STEPS>(x[i]);
}

// ---- AVX (+FMA for the fused step): VRSQRTPS ymm ----
template <int FORM, int STEPS>
__attribute__((target("avx,fma"))) __m256 avx_refine(__m256 x, __m256 y) {
  const __m256 h = _mm256_mul_ps(_mm256_set1_ps(0.5f), x);
  for (int s = 0; s < STEPS; ++s) {
    const __m256 hy = _mm256_mul_ps(h, y);
    if (FORM == kClassic) y = _mm256_mul_ps(y, _mm256_sub_ps(_mm256_set1_ps(1.5f), _mm256_mul_ps(hy, y)));
    if (FORM == kFma) y = _mm256_fmadd_ps(y, _mm256_fnmadd_ps(hy, y, _mm256_set1_ps(0.5f)), y);
  }
  return y;
}
template <int FORM, int STEPS>
__attribute__((target("avx,fma"), noinline)) float avx_scalar(float x) {
  if (FORM == kExact) return _mm_cvtss_f32(_mm_div_ss(_mm_set_ss(1.0f), _mm_sqrt_ss(_mm_set_ss(x))));
  const float y = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x)));  // VEX-encoded VRSQRTSS
  return refine_scalar<FORM, STEPS>(x, y);
}
template <int FORM, int STEPS>
__attribute__((target("avx,fma"))) void avx_array(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 r;
    if (FORM == kExact) r = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_sqrt_ps(v));
    else r = avx_refine<FORM, STEPS>(v, _mm256_rsqrt_ps(v));
    _mm256_storeu_ps(y + i, r);
  }
  for (; i < n; ++i) y[i] = avx_scalar<FORM, STEPS>(x[i]);
}

// ---- AVX-512F: VRSQRT14PS zmm ----
// --8<-- [start:avx512_rsqrt]
template <int FORM, int STEPS>
__attribute__((target("avx512f"))) __m512 avx512_refine(__m512 x, __m512 y) {
  const __m512 h = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
  for (int s = 0; s < STEPS; ++s) {
    const __m512 hy = _mm512_mul_ps(h, y);
    if (FORM == kClassic) y = _mm512_mul_ps(y, _mm512_sub_ps(_mm512_set1_ps(1.5f), _mm512_mul_ps(hy, y)));
    if (FORM == kFma) y = _mm512_fmadd_ps(y, _mm512_fnmadd_ps(hy, y, _mm512_set1_ps(0.5f)), y);
  }
  return y;
}
// --8<-- [end:avx512_rsqrt]
template <int FORM, int STEPS>
__attribute__((target("avx512f"), noinline)) float avx512_scalar(float x) {
  if (FORM == kExact) return _mm_cvtss_f32(_mm_div_ss(_mm_set_ss(1.0f), _mm_sqrt_ss(_mm_set_ss(x))));
  const float y = _mm_cvtss_f32(_mm_rsqrt14_ss(_mm_setzero_ps(), _mm_set_ss(x)));  // VRSQRT14SS
  return refine_scalar<FORM, STEPS>(x, y);
}
template <int FORM, int STEPS>
__attribute__((target("avx512f"))) void avx512_array(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 r;
    if (FORM == kExact) r = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(v));
    else r = avx512_refine<FORM, STEPS>(v, _mm512_rsqrt14_ps(v));
    _mm512_storeu_ps(y + i, r);
  }
  if (i < n) {  // masked tail: same instruction, lanes past n are neither read nor written
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    __m512 r;
    if (FORM == kExact) r = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(v));
    else r = avx512_refine<FORM, STEPS>(v, _mm512_rsqrt14_ps(v));
    _mm512_mask_storeu_ps(y + i, k, r);
  }
}
#endif  // RSQ_X86

// ---- bit tricks (plain C++; the array loop may be auto-vectorized: same IEEE ops) ----
template <int WHICH, int STEPS>
__attribute__((noinline)) float trick_scalar(float x) {
  constexpr rsq::BitTrick t = WHICH == 0 ? rsq::kQuake : (WHICH == 1 ? rsq::kLomont : rsq::kWalczyk);
  return rsq::bit_trick(x, t, STEPS);
}
template <int WHICH, int STEPS>
void trick_array(const float* x, float* y, int64_t n) {
  constexpr rsq::BitTrick t = WHICH == 0 ? rsq::kQuake : (WHICH == 1 ? rsq::kLomont : rsq::kWalczyk);
  for (int64_t i = 0; i < n; ++i) y[i] = rsq::bit_trick(x[i], t, STEPS);
}

// ------------------------------------------------------------------------------------------------
// The method registry.
// ------------------------------------------------------------------------------------------------
struct Method {
  std::string name, family, form, isa, expr;
  int steps;
  double seed_bound;  // documented |relative error| bound of the hardware seed, or -1
  bool (*available)();
  ArrayFn array;
  ScalarFn scalar;
};

bool always() { return true; }

const double kRsqrtpsBound = 1.5 * std::ldexp(1.0, -12);  // Intel SDM Vol. 2B, RSQRTPS
const double kRsqrt14Bound = std::ldexp(1.0, -14);        // Intel SDM Vol. 2C, VRSQRT14PS

std::vector<Method> build_registry() {
  std::vector<Method> m;
  m.push_back({"libm_div_sqrt", "libm", "exact", "baseline", "1.0f / sqrtf(x)", 0, -1, always, libm_array, libm_scalar});
#if RSQ_X86
  const char* steps_txt[] = {"", " + 1 Newton step", " + 2 Newton steps"};
  (void)steps_txt;
  // SSE
  m.push_back({"sse_div_sqrt", "sse", "exact", "sse", "_mm_div_ps(1, _mm_sqrt_ps(x))", 0, -1, has_sse, sse_array<kExact, 0>, sse_scalar<kExact, 0>});
  m.push_back({"sse_rsqrt", "sse", "raw", "sse", "_mm_rsqrt_ps(x)", 0, kRsqrtpsBound, has_sse, sse_array<kRaw, 0>, sse_scalar<kRaw, 0>});
  m.push_back({"sse_rsqrt_nr1", "sse", "classic", "sse", "y*(1.5 - (x/2*y)*y), 1 step", 1, kRsqrtpsBound, has_sse, sse_array<kClassic, 1>, sse_scalar<kClassic, 1>});
  m.push_back({"sse_rsqrt_nr2", "sse", "classic", "sse", "y*(1.5 - (x/2*y)*y), 2 steps", 2, kRsqrtpsBound, has_sse, sse_array<kClassic, 2>, sse_scalar<kClassic, 2>});
  m.push_back({"sse_rsqrt_nr1_rearranged", "sse", "rearranged", "sse", "y + y*(0.5 - (x/2*y)*y), 1 step", 1, kRsqrtpsBound, has_sse, sse_array<kRearranged, 1>, sse_scalar<kRearranged, 1>});
  m.push_back({"sse_rsqrt_nr2_rearranged", "sse", "rearranged", "sse", "y + y*(0.5 - (x/2*y)*y), 2 steps", 2, kRsqrtpsBound, has_sse, sse_array<kRearranged, 2>, sse_scalar<kRearranged, 2>});
  // AVX
  m.push_back({"avx_div_sqrt", "avx", "exact", "avx+fma", "_mm256_div_ps(1, _mm256_sqrt_ps(x))", 0, -1, has_avx_fma, avx_array<kExact, 0>, avx_scalar<kExact, 0>});
  m.push_back({"avx_rsqrt", "avx", "raw", "avx+fma", "_mm256_rsqrt_ps(x)", 0, kRsqrtpsBound, has_avx_fma, avx_array<kRaw, 0>, avx_scalar<kRaw, 0>});
  m.push_back({"avx_rsqrt_nr1", "avx", "classic", "avx+fma", "y*(1.5 - (x/2*y)*y), 1 step", 1, kRsqrtpsBound, has_avx_fma, avx_array<kClassic, 1>, avx_scalar<kClassic, 1>});
  m.push_back({"avx_rsqrt_nr2", "avx", "classic", "avx+fma", "y*(1.5 - (x/2*y)*y), 2 steps", 2, kRsqrtpsBound, has_avx_fma, avx_array<kClassic, 2>, avx_scalar<kClassic, 2>});
  m.push_back({"avx_rsqrt_nr1_fma", "avx", "fma", "avx+fma", "fma(y, fma(-(x/2*y), y, 0.5), y), 1 step", 1, kRsqrtpsBound, has_avx_fma, avx_array<kFma, 1>, avx_scalar<kFma, 1>});
  m.push_back({"avx_rsqrt_nr2_fma", "avx", "fma", "avx+fma", "fma(y, fma(-(x/2*y), y, 0.5), y), 2 steps", 2, kRsqrtpsBound, has_avx_fma, avx_array<kFma, 2>, avx_scalar<kFma, 2>});
  // AVX-512
  m.push_back({"avx512_div_sqrt", "avx512", "exact", "avx512f", "_mm512_div_ps(1, _mm512_sqrt_ps(x))", 0, -1, has_avx512, avx512_array<kExact, 0>, avx512_scalar<kExact, 0>});
  m.push_back({"avx512_rsqrt14", "avx512", "raw", "avx512f", "_mm512_rsqrt14_ps(x)", 0, kRsqrt14Bound, has_avx512, avx512_array<kRaw, 0>, avx512_scalar<kRaw, 0>});
  m.push_back({"avx512_rsqrt14_nr1", "avx512", "classic", "avx512f", "y*(1.5 - (x/2*y)*y), 1 step", 1, kRsqrt14Bound, has_avx512, avx512_array<kClassic, 1>, avx512_scalar<kClassic, 1>});
  m.push_back({"avx512_rsqrt14_nr2", "avx512", "classic", "avx512f", "y*(1.5 - (x/2*y)*y), 2 steps", 2, kRsqrt14Bound, has_avx512, avx512_array<kClassic, 2>, avx512_scalar<kClassic, 2>});
  m.push_back({"avx512_rsqrt14_nr1_fma", "avx512", "fma", "avx512f", "fma(y, fma(-(x/2*y), y, 0.5), y), 1 step", 1, kRsqrt14Bound, has_avx512, avx512_array<kFma, 1>, avx512_scalar<kFma, 1>});
  m.push_back({"avx512_rsqrt14_nr2_fma", "avx512", "fma", "avx512f", "fma(y, fma(-(x/2*y), y, 0.5), y), 2 steps", 2, kRsqrt14Bound, has_avx512, avx512_array<kFma, 2>, avx512_scalar<kFma, 2>});
#endif
  m.push_back({"quake", "quake", "bit_trick", "baseline", "0x5f3759df - (i >> 1)", 0, -1, always, trick_array<0, 0>, trick_scalar<0, 0>});
  m.push_back({"quake_nr1", "quake", "bit_trick", "baseline", "0x5f3759df, y*(1.5 - (x/2*y)*y), 1 step", 1, -1, always, trick_array<0, 1>, trick_scalar<0, 1>});
  m.push_back({"quake_nr2", "quake", "bit_trick", "baseline", "0x5f3759df, y*(1.5 - (x/2*y)*y), 2 steps", 2, -1, always, trick_array<0, 2>, trick_scalar<0, 2>});
  m.push_back({"lomont", "lomont", "bit_trick", "baseline", "0x5f375a86 - (i >> 1)", 0, -1, always, trick_array<1, 0>, trick_scalar<1, 0>});
  m.push_back({"lomont_nr1", "lomont", "bit_trick", "baseline", "0x5f375a86, y*(1.5 - (x/2*y)*y), 1 step", 1, -1, always, trick_array<1, 1>, trick_scalar<1, 1>});
  m.push_back({"lomont_nr2", "lomont", "bit_trick", "baseline", "0x5f375a86, y*(1.5 - (x/2*y)*y), 2 steps", 2, -1, always, trick_array<1, 2>, trick_scalar<1, 2>});
  m.push_back({"walczyk", "walczyk", "bit_trick", "baseline", "0x5f376908 - (i >> 1)", 0, -1, always, trick_array<2, 0>, trick_scalar<2, 0>});
  m.push_back({"walczyk_nr1", "walczyk", "bit_trick", "baseline", "0x5f376908, y*(1.50087896 - (x/2*y)*y), 1 step", 1, -1, always, trick_array<2, 1>, trick_scalar<2, 1>});
  m.push_back({"walczyk_nr2", "walczyk", "bit_trick", "baseline", "0x5f376908, then c = 1.50087896, 1.50000057, 2 steps", 2, -1, always, trick_array<2, 2>, trick_scalar<2, 2>});
  return m;
}

const std::vector<Method>& registry() {
  static const std::vector<Method> r = build_registry();
  return r;
}

const Method& find_method(const std::string& name) {
  for (const auto& m : registry())
    if (m.name == name) return m;
  std::string known;
  for (const auto& m : registry()) known += " " + m.name;
  throw std::invalid_argument("unknown rsqrt method '" + name + "'; known:" + known);
}

const Method& available_method(const std::string& name) {
  const Method& m = find_method(name);
  if (!m.available())
    throw std::runtime_error("rsqrt method '" + name + "' needs " + m.isa +
                             ", which this CPU does not report (or RSQRT_DISABLE_ISA hides it)");
  return m;
}

// ------------------------------------------------------------------------------------------------
// Python-facing element-wise application (array path and scalar path).
// ------------------------------------------------------------------------------------------------
torch::Tensor check_f32(const torch::Tensor& x) {
  TORCH_CHECK_TYPE(x.scalar_type() == torch::kFloat32, "x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor, got ", x.device());
  return x.contiguous();
}

torch::Tensor apply(const std::string& name, const torch::Tensor& x_in) {
  const Method& m = available_method(name);
  auto x = check_f32(x_in);
  auto y = torch::empty_like(x);
  m.array(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

torch::Tensor apply_scalar(const std::string& name, const torch::Tensor& x_in) {
  const Method& m = available_method(name);
  auto x = check_f32(x_in);
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = m.scalar(xp[i]);
  return y;
}

// Correctly rounded 1/sqrt(x) for any float32 (IEEE special cases for the rest).
torch::Tensor reference(const torch::Tensor& x_in) {
  auto x = check_f32(x_in);
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = xp[i];
    if (std::isnan(v) || v < 0.0f) yp[i] = std::numeric_limits<float>::quiet_NaN();
    else if (v == 0.0f) yp[i] = std::copysign(std::numeric_limits<float>::infinity(), v);
    else if (std::isinf(v)) yp[i] = 0.0f;
    else {
      int a = 0, c = 0, t = 0;
      yp[i] = rsq::u2f(rsq::rsqrt_cr_bits(v, 1.0 / std::sqrt(static_cast<double>(v)), &a, &c, &t));
    }
  }
  return y;
}

// ------------------------------------------------------------------------------------------------
// The sweep: every bit pattern lo, lo+stride, ... < hi (all positive finite floats), each method's
// output against the correctly rounded result; statistics per group (0: normal, 1: subnormal input).
// ------------------------------------------------------------------------------------------------
struct Stats {
  int64_t count = 0, exact = 0, nonfinite = 0, max_ulp_int = 0;
  double max_ulp = 0.0, max_abs_rel = 0.0, sum_abs_rel = 0.0;
  double min_rel = std::numeric_limits<double>::infinity(), max_rel = -std::numeric_limits<double>::infinity();
  uint32_t worst_ulp_x = 0, worst_rel_x = 0;
  int64_t ulp_hist[rsq::kUlpBins] = {};
  int64_t rel_hist[rsq::kRelBins] = {};
  void merge(const Stats& o) {
    count += o.count;
    exact += o.exact;
    nonfinite += o.nonfinite;
    max_ulp_int = std::max(max_ulp_int, o.max_ulp_int);
    if (o.max_ulp > max_ulp || (o.max_ulp == max_ulp && o.worst_ulp_x < worst_ulp_x)) {
      max_ulp = o.max_ulp;
      worst_ulp_x = o.worst_ulp_x;
    }
    if (o.max_abs_rel > max_abs_rel || (o.max_abs_rel == max_abs_rel && o.worst_rel_x < worst_rel_x)) {
      max_abs_rel = o.max_abs_rel;
      worst_rel_x = o.worst_rel_x;
    }
    min_rel = std::min(min_rel, o.min_rel);
    max_rel = std::max(max_rel, o.max_rel);
    sum_abs_rel += o.sum_abs_rel;
    for (int i = 0; i < rsq::kUlpBins; ++i) ulp_hist[i] += o.ulp_hist[i];
    for (int i = 0; i < rsq::kRelBins; ++i) rel_hist[i] += o.rel_hist[i];
  }
};

struct RefCounters {
  int64_t ambiguous = 0, corrected = 0, ties = 0;
  std::vector<uint32_t> corrected_x;  // inputs where double-then-round is wrong (capped)
  void merge(const RefCounters& o) {
    ambiguous += o.ambiguous;
    corrected += o.corrected;
    ties += o.ties;
    for (uint32_t v : o.corrected_x)
      if (corrected_x.size() < 256) corrected_x.push_back(v);
  }
};

constexpr int kBlock = 2048;

// The hot loop of the sweep, in passes that the compiler can vectorize: one pass computes every
// element's errors into scratch arrays (non-negative doubles kept as bit patterns, whose integer order
// is their numeric order, so maxima are integer maxima), then simple reductions and the histograms
// (four interleaved copies, so runs of equal bins do not serialize on one counter).
struct Scratch {
  std::vector<uint64_t> ue, arel, pos, neg, d;
  std::vector<uint8_t> ub, rb, bad;
  explicit Scratch(int n) : ue(n), arel(n), pos(n), neg(n), d(n), ub(n), rb(n), bad(n) {}
};

template <int DUMMY>
inline void accumulate_impl(Stats& s, const float* x, const float* y, const uint32_t* cr, const double* r,
                            const double* invr, const double* invulp, int n, Scratch& w) {
  uint64_t* __restrict ue = w.ue.data();
  uint64_t* __restrict arel = w.arel.data();
  uint64_t* __restrict pos = w.pos.data();
  uint64_t* __restrict neg = w.neg.data();
  uint64_t* __restrict dist = w.d.data();
  uint8_t* __restrict ub = w.ub.data();
  uint8_t* __restrict rb = w.rb.data();
  uint8_t* __restrict bad = w.bad.data();
  int64_t nbad = 0, exact = 0;
  // pass 1: distances and errors (two short loops vectorize where one long one does not)
  for (int i = 0; i < n; ++i) {
    const float yv = y[i];
    const uint32_t yb = rsq::f2u(yv);
    const uint32_t b = (yb & 0x7f800000u) == 0x7f800000u;  // NaN or infinity
    const int64_t dd = rsq::ordered(yb) - static_cast<int64_t>(cr[i]);
    const uint64_t d = static_cast<uint64_t>(dd < 0 ? -dd : dd);
    const double diff = static_cast<double>(yv) - r[i];
    const uint64_t keep = b ? 0ull : ~0ull;  // integer masks: no speculated floating-point selects
    nbad += b;
    exact += (b == 0) & (d == 0);
    bad[i] = static_cast<uint8_t>(b);
    dist[i] = d & keep;
    ue[i] = rsq::d2u(std::fabs(diff) * invulp[i]) & keep;
    pos[i] = rsq::d2u(diff * invr[i]) & keep;  // the signed relative error, for now
  }
  // pass 2: split the signed error, bins
  for (int i = 0; i < n; ++i) {
    const uint64_t relb = pos[i];
    const uint64_t arb = relb & 0x7fffffffffffffffull;
    const bool negative = (relb >> 63) != 0;
    arel[i] = arb;
    pos[i] = negative ? 0 : arb;
    neg[i] = negative ? arb : 0;
    // a bad element has dist = 0 and relb = 0 (bins 0), so adding bad * last bin selects the NaN/inf bin
    ub[i] = static_cast<uint8_t>(rsq::ulp_bin(dist[i]) + bad[i] * (rsq::kUlpBins - 1));
    rb[i] = static_cast<uint8_t>(rsq::rel_bin(rsq::u2d(relb)) + bad[i] * (rsq::kRelBins - 1));
  }
  uint64_t m_ue = 0, m_ar = 0, m_pos = 0, m_neg = 0, m_d = 0;
  for (int i = 0; i < n; ++i) {
    m_ue = ue[i] > m_ue ? ue[i] : m_ue;
    m_ar = arel[i] > m_ar ? arel[i] : m_ar;
    m_pos = pos[i] > m_pos ? pos[i] : m_pos;
    m_neg = neg[i] > m_neg ? neg[i] : m_neg;
    m_d = dist[i] > m_d ? dist[i] : m_d;
  }
  double sum4[4] = {0.0, 0.0, 0.0, 0.0};
  for (int i = 0; i < n; ++i) sum4[i & 3] += rsq::u2d(arel[i]);
  const double max_ulp = rsq::u2d(m_ue), max_abs_rel = rsq::u2d(m_ar);
  if (max_ulp > s.max_ulp) {  // first input reaching the new maximum
    for (int i = 0; i < n; ++i)
      if (ue[i] == m_ue) {
        s.worst_ulp_x = rsq::f2u(x[i]);
        break;
      }
    s.max_ulp = max_ulp;
  }
  if (max_abs_rel > s.max_abs_rel) {
    for (int i = 0; i < n; ++i)
      if (arel[i] == m_ar) {
        s.worst_rel_x = rsq::f2u(x[i]);
        break;
      }
    s.max_abs_rel = max_abs_rel;
  }
  int32_t uh[4][rsq::kUlpBins] = {}, rh[4][rsq::kRelBins] = {};
  for (int i = 0; i < n; ++i) {
    uh[i & 3][ub[i]] += 1;
    rh[i & 3][rb[i]] += 1;
  }
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < rsq::kUlpBins; ++j) s.ulp_hist[j] += uh[k][j];
    for (int j = 0; j < rsq::kRelBins; ++j) s.rel_hist[j] += rh[k][j];
  }
  const int64_t finite = n - nbad;
  s.count += n;
  s.exact += exact;
  s.nonfinite += nbad;
  s.max_ulp_int = std::max<int64_t>(s.max_ulp_int, static_cast<int64_t>(m_d));
  if (finite > 0) {
    // the extreme signed errors: the largest positive one, else the smallest-magnitude non-positive one
    double lo = -rsq::u2d(m_neg), hi = rsq::u2d(m_pos);
    if (m_neg == 0 || m_pos == 0) {  // all errors on one side (or zero): find the exact extreme
      double mn = std::numeric_limits<double>::infinity(), mx = -mn;
      for (int i = 0; i < n; ++i) {
        if (bad[i]) continue;
        const double e = pos[i] ? rsq::u2d(pos[i]) : -rsq::u2d(neg[i]);
        mn = e < mn ? e : mn;
        mx = e > mx ? e : mx;
      }
      lo = mn;
      hi = mx;
    }
    s.min_rel = std::min(s.min_rel, lo);
    s.max_rel = std::max(s.max_rel, hi);
  }
  s.sum_abs_rel += (sum4[0] + sum4[1]) + (sum4[2] + sum4[3]);
}

void accumulate_generic(Stats& s, const float* x, const float* y, const uint32_t* cr, const double* r,
                        const double* invr, const double* invulp, int n, Scratch& w) {
  accumulate_impl<0>(s, x, y, cr, r, invr, invulp, n, w);
}
#if RSQ_X86
// The same code compiled for AVX2 / AVX-512 (contraction is off: every operation rounds as in the
// generic build, and the passes hold no floating-point reductions whose order could change).
__attribute__((target("avx2"))) void accumulate_avx2(Stats& s, const float* x, const float* y, const uint32_t* cr,
                                                     const double* r, const double* invr, const double* invulp, int n,
                                                     Scratch& w) {
  accumulate_impl<1>(s, x, y, cr, r, invr, invulp, n, w);
}
__attribute__((target("avx512f,avx512cd,avx512vl,avx512dq,avx512bw"))) void accumulate_avx512(
    Stats& s, const float* x, const float* y, const uint32_t* cr, const double* r, const double* invr,
    const double* invulp, int n, Scratch& w) {
  accumulate_impl<2>(s, x, y, cr, r, invr, invulp, n, w);
}
#endif

void accumulate(Stats& s, const float* x, const float* y, const uint32_t* cr, const double* r, const double* invr,
                const double* invulp, int n, Scratch& w) {
#if RSQ_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                             __builtin_cpu_supports("avx512bw");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return accumulate_avx512(s, x, y, cr, r, invr, invulp, n, w);
  if (avx2) return accumulate_avx2(s, x, y, cr, r, invr, invulp, n, w);
#endif
  accumulate_generic(s, x, y, cr, r, invr, invulp, n, w);
}

// Input groups: x >= 2^-125 ("normal"), [2^-126, 2^-125) ("lowest_normal_binade": x/2 underflows, which
// costs the Newton step its accuracy), and subnormal x.
constexpr int kGroups = 3;
constexpr int kNormal = 0, kSubnormal = 1, kLowest = 2;
const char* const kGroupNames[kGroups] = {"normal", "subnormal", "lowest_normal_binade"};

// One worker: elements [i0, i1) of the pattern sequence lo + i*stride.
void sweep_worker(const std::vector<const Method*>& ms, uint64_t lo, uint64_t stride, int64_t i0, int64_t i1,
                  std::vector<Stats>& stats /* [method*kGroups + group] */, RefCounters& ref) {
  std::vector<float> x(kBlock), y(kBlock);
  std::vector<uint32_t> cr(kBlock);
  std::vector<double> r(kBlock), invr(kBlock), invulp(kBlock);
  Scratch w(kBlock);
  for (int64_t b = i0; b < i1; b += kBlock) {
    const int n = static_cast<int>(std::min<int64_t>(kBlock, i1 - b));
    // Patterns increase with i: the block's first nsub elements are subnormal, the next ones up to
    // nlow lie in [2^-126, 2^-125) (the lowest normal binade, where x/2 is subnormal), the rest above.
    int nsub = 0, nlow = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t bits = static_cast<uint32_t>(lo + static_cast<uint64_t>(b + i) * stride);
      x[i] = rsq::u2f(bits);
      if (bits < 0x00800000u) nsub = i + 1;
      if (bits < 0x01000000u) nlow = i + 1;
      r[i] = 1.0 / std::sqrt(rsq::f32_bits_to_f64(bits));
      invr[i] = 1.0 / r[i];
      invulp[i] = rsq::inv_ulp_of(r[i]);
      int a = 0, c = 0, t = 0;
      cr[i] = rsq::rsqrt_cr_bits(x[i], r[i], &a, &c, &t);
      ref.ambiguous += a;
      ref.corrected += c;
      ref.ties += t;
      if (c && ref.corrected_x.size() < 256) ref.corrected_x.push_back(bits);
    }
    const int seg[4] = {0, nsub, nlow, n};
    const int group_of_seg[3] = {kSubnormal, kLowest, kNormal};
    for (size_t k = 0; k < ms.size(); ++k) {
      ms[k]->array(x.data(), y.data(), n);
      for (int g = 0; g < 3; ++g) {
        const int a = seg[g], e = seg[g + 1];
        if (e > a)
          accumulate(stats[kGroups * k + group_of_seg[g]], x.data() + a, y.data() + a, cr.data() + a, r.data() + a,
                     invr.data() + a, invulp.data() + a, e - a, w);
      }
    }
  }
}

py::dict stats_dict(const Stats& s) {
  py::dict d;
  d["count"] = s.count;
  d["exact"] = s.exact;
  d["nonfinite"] = s.nonfinite;
  d["max_ulp_int"] = s.max_ulp_int;
  d["max_ulp"] = s.max_ulp;
  d["max_abs_rel"] = s.max_abs_rel;
  d["min_rel"] = s.min_rel;
  d["max_rel"] = s.max_rel;
  d["sum_abs_rel"] = s.sum_abs_rel;
  d["worst_ulp_x"] = s.worst_ulp_x;
  d["worst_rel_x"] = s.worst_rel_x;
  d["ulp_hist"] = std::vector<int64_t>(s.ulp_hist, s.ulp_hist + rsq::kUlpBins);
  d["rel_hist"] = std::vector<int64_t>(s.rel_hist, s.rel_hist + rsq::kRelBins);
  return d;
}

py::dict sweep(const std::vector<std::string>& names, uint64_t lo, uint64_t hi, uint64_t stride, int threads) {
  TORCH_CHECK_VALUE(lo >= 1 && hi <= 0x7f800000ull && lo < hi,
                    "sweep range must lie in [1, 0x7f800000) (positive finite floats), got [", lo, ", ", hi, ")");
  TORCH_CHECK_VALUE(stride >= 1, "stride must be >= 1, got ", stride);
  std::vector<const Method*> ms;
  for (const auto& n : names) ms.push_back(&available_method(n));
  const int64_t total = static_cast<int64_t>((hi - lo + stride - 1) / stride);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, total / kBlock)));
  std::vector<std::vector<Stats>> st(threads, std::vector<Stats>(kGroups * ms.size()));
  std::vector<RefCounters> refs(threads);
  {
    py::gil_scoped_release release;
    std::vector<std::thread> pool;
    const int64_t per = (total + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      const int64_t i0 = t * per, i1 = std::min<int64_t>(total, i0 + per);
      pool.emplace_back([&, t, i0, i1] {
        if (i0 < i1) sweep_worker(ms, lo, stride, i0, i1, st[t], refs[t]);
      });
    }
    for (auto& th : pool) th.join();
  }
  for (int t = 1; t < threads; ++t) {
    for (size_t k = 0; k < st[0].size(); ++k) st[0][k].merge(st[t][k]);
    refs[0].merge(refs[t]);
  }
  py::dict out;
  py::dict per_method;
  for (size_t k = 0; k < ms.size(); ++k) {
    py::dict g;
    for (int j = 0; j < kGroups; ++j) g[kGroupNames[j]] = stats_dict(st[0][kGroups * k + j]);
    per_method[py::str(ms[k]->name)] = g;
  }
  out["methods"] = per_method;
  out["inputs"] = total;
  out["ambiguous"] = refs[0].ambiguous;
  out["corrected"] = refs[0].corrected;
  out["ties"] = refs[0].ties;
  out["corrected_x"] = refs[0].corrected_x;
  return out;
}

// Signed relative error envelope over bit patterns [lo, hi) in nbins equal bins: (min, max) per bin.
std::tuple<torch::Tensor, torch::Tensor> profile(const std::string& name, uint64_t lo, uint64_t hi, int64_t nbins) {
  TORCH_CHECK_VALUE(lo >= 1 && hi <= 0x7f800000ull && lo < hi && nbins >= 1 && static_cast<uint64_t>(nbins) <= hi - lo,
                    "profile needs 1 <= lo < hi <= 0x7f800000 and 1 <= nbins <= hi - lo");
  const Method& m = available_method(name);
  auto mn = torch::full({nbins}, std::numeric_limits<double>::infinity(), torch::kFloat64);
  auto mx = torch::full({nbins}, -std::numeric_limits<double>::infinity(), torch::kFloat64);
  double* pmn = mn.data_ptr<double>();
  double* pmx = mx.data_ptr<double>();
  const uint64_t span = hi - lo;
  std::vector<float> x(kBlock), y(kBlock);
  for (uint64_t b = lo; b < hi; b += kBlock) {
    const int n = static_cast<int>(std::min<uint64_t>(kBlock, hi - b));
    for (int i = 0; i < n; ++i) x[i] = rsq::u2f(static_cast<uint32_t>(b + i));
    m.array(x.data(), y.data(), n);
    for (int i = 0; i < n; ++i) {
      const double r = 1.0 / std::sqrt(static_cast<double>(x[i]));
      const double e = (static_cast<double>(y[i]) - r) / r;
      const int64_t bin = static_cast<int64_t>((b + i - lo) * static_cast<uint64_t>(nbins) / span);
      if (e < pmn[bin]) pmn[bin] = e;
      if (e > pmx[bin]) pmx[bin] = e;
    }
  }
  return {mn, mx};
}

// ------------------------------------------------------------------------------------------------
// Timing (single thread). Best of `reps` runs, each long enough to dwarf the clock's resolution.
// ------------------------------------------------------------------------------------------------
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double throughput_ns(const std::string& name, int64_t n, int64_t inner, int reps) {
  TORCH_CHECK_VALUE(n >= 1 && inner >= 1 && reps >= 1, "throughput needs n, inner, reps >= 1");
  const Method& m = available_method(name);
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f + static_cast<float>(i % 4093) * 0.37f;  // normal inputs
  double best = 1e30;
  py::gil_scoped_release release;
  m.array(x.data(), y.data(), n);  // warm up
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    for (int64_t k = 0; k < inner; ++k) m.array(x.data(), y.data(), n);
    best = std::min(best, (now_s() - t0) / static_cast<double>(n * inner));
  }
  volatile float sink = y[n / 2];
  (void)sink;
  return best * 1e9;
}

// An RMSNorm forward row loop, y = x * rsqrt(mean(x^2) + eps) * w, fp32, AVX2+FMA, one thread.
// variant 0: r = 1.0f/sqrtf(ms + eps); 1: RSQRTSS raw; 2: RSQRTSS + one classic Newton step;
// 3: r = ms + eps (no rsqrt at all: the time of everything else).
#if RSQ_X86
template <int VARIANT>
__attribute__((target("avx2,fma"))) void rms_rows(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * d;
    float* yr = y + row * d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= d; j += 32) {
      const __m256 v0 = _mm256_loadu_ps(xr + j), v1 = _mm256_loadu_ps(xr + j + 8);
      const __m256 v2 = _mm256_loadu_ps(xr + j + 16), v3 = _mm256_loadu_ps(xr + j + 24);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
      a2 = _mm256_fmadd_ps(v2, v2, a2);
      a3 = _mm256_fmadd_ps(v3, v3, a3);
    }
    const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    float ss = _mm_cvtss_f32(s4);
    for (; j < d; ++j) ss += xr[j] * xr[j];
    const float ms = ss / static_cast<float>(d) + eps;
    float r;
    if (VARIANT == 0) r = 1.0f / std::sqrt(ms);
    if (VARIANT == 1) r = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(ms)));
    if (VARIANT == 2) r = nr_classic(ms, _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(ms))));
    if (VARIANT == 3) r = ms;
    const __m256 rv = _mm256_set1_ps(r);
    j = 0;
    for (; j + 8 <= d; j += 8)
      _mm256_storeu_ps(yr + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + j), rv), _mm256_loadu_ps(w + j)));
    for (; j < d; ++j) yr[j] = xr[j] * r * w[j];
  }
}
#endif

// ns per row of the RMSNorm row loop for each variant (rows x d floats). The four variants run
// interleaved on the same buffers, best of reps each, so drift in the machine's load hits all alike.
std::vector<double> rmsnorm_row_ns(int64_t d, int64_t rows, int reps) {
  TORCH_CHECK_VALUE(d >= 1 && rows >= 1 && reps >= 1, "rmsnorm_row_ns needs d, rows, reps >= 1");
#if RSQ_X86
  TORCH_CHECK(has_avx2_fma(), "the RMSNorm row loop needs AVX2 and FMA, which this CPU does not report");
  std::vector<float> x(rows * d), y(rows * d), w(d);
  for (int64_t i = 0; i < rows * d; ++i) x[i] = static_cast<float>((i * 7919) % 2001) * 1e-3f - 1.0f;
  for (int64_t j = 0; j < d; ++j) w[j] = 1.0f + static_cast<float>(j % 7) * 0.01f;
  using Fn = void (*)(const float*, const float*, float*, int64_t, int64_t, float);
  const Fn fns[4] = {rms_rows<0>, rms_rows<1>, rms_rows<2>, rms_rows<3>};
  std::vector<double> best(4, 1e30);
  py::gil_scoped_release release;
  for (int v = 0; v < 4; ++v) fns[v](x.data(), w.data(), y.data(), rows, d, 1e-6f);  // warm up
  for (int r = 0; r < reps; ++r) {
    for (int v = 0; v < 4; ++v) {
      const double t0 = now_s();
      fns[v](x.data(), w.data(), y.data(), rows, d, 1e-6f);
      best[v] = std::min(best[v], now_s() - t0);
    }
  }
  volatile float sink = y[rows * d / 2];
  (void)sink;
  for (auto& b : best) b = b / static_cast<double>(rows) * 1e9;
  return best;
#else
  TORCH_CHECK(false, "the RMSNorm row loop is x86-64 only");
  return {};
#endif
}

// ns per element of the rsqrt alone on a vector of positive floats, one thread: exact (1/sqrtf, the
// scalar code of the row loop) or RSQRTSS (+ one step). Compared with ns per row above.
double scalar_rsqrt_ns(int variant, int64_t n, int reps) {
  TORCH_CHECK_VALUE(variant >= 0 && variant <= 2 && n >= 1 && reps >= 1, "bad scalar_rsqrt_ns arguments");
#if RSQ_X86
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.25f + static_cast<float>(i % 1009) * 0.01f;
  double best = 1e30;
  py::gil_scoped_release release;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    if (variant == 0)
      for (int64_t i = 0; i < n; ++i) y[i] = sse_scalar<kExact, 0>(x[i]);
    if (variant == 1)
      for (int64_t i = 0; i < n; ++i) y[i] = sse_scalar<kRaw, 0>(x[i]);
    if (variant == 2)
      for (int64_t i = 0; i < n; ++i) y[i] = sse_scalar<kClassic, 1>(x[i]);
    best = std::min(best, now_s() - t0);
  }
  volatile float sink = y[n / 2];
  (void)sink;
  return best / static_cast<double>(n) * 1e9;
#else
  TORCH_CHECK(false, "x86-64 only");
  return 0.0;
#endif
}

py::list method_list() {
  py::list out;
  for (const auto& m : registry()) {
    py::dict d;
    d["name"] = m.name;
    d["family"] = m.family;
    d["form"] = m.form;
    d["isa"] = m.isa;
    d["expr"] = m.expr;
    d["steps"] = m.steps;
    d["seed_bound"] = m.seed_bound;
    d["available"] = m.available();
    out.append(d);
  }
  return out;
}

py::dict cpu_features() {
  py::dict d;
#if RSQ_X86
  __builtin_cpu_init();
  d["x86_64"] = true;
  d["sse2"] = static_cast<bool>(__builtin_cpu_supports("sse2"));
  d["avx"] = static_cast<bool>(__builtin_cpu_supports("avx"));
  d["avx2"] = static_cast<bool>(__builtin_cpu_supports("avx2"));
  d["fma"] = static_cast<bool>(__builtin_cpu_supports("fma"));
  d["avx512f"] = static_cast<bool>(__builtin_cpu_supports("avx512f"));
  d["mxcsr"] = static_cast<int64_t>(_mm_getcsr());  // FTZ = bit 15, DAZ = bit 6
#else
  d["x86_64"] = false;
#endif
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Reciprocal square root methods, exhaustive float32 sweep and timing (see reference_impl/rsqrt.py)";
  m.def("methods", &method_list, "every method with its ISA, form, Newton steps and availability on this CPU");
  m.def("cpu_features", &cpu_features);
  m.def("apply", &apply, "array (SIMD) path of a method on a float32 CPU tensor");
  m.def("apply_scalar", &apply_scalar, "scalar path of a method, one element at a time");
  m.def("reference", &reference, "correctly rounded 1/sqrt(x) for float32 (IEEE special values elsewhere)");
  m.def("sweep", &sweep, py::arg("names"), py::arg("lo"), py::arg("hi"), py::arg("stride") = 1, py::arg("threads") = 0);
  m.def("profile", &profile);
  m.def("f32_bits_to_f64", [](const std::vector<uint32_t>& bits) {
    std::vector<double> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = rsq::f32_bits_to_f64(bits[i]);
    return out;
  }, "the float with the given bits, widened to double from the bits (used by the sweeps)");
  m.def("exact_above", [](float x, double m) {
    int tie = 0;
    const bool above = rsq::rsqrt_above(x, m, &tie);
    return std::make_pair(above, tie != 0);
  }, "(1/sqrt(x) > m, 1/sqrt(x) == m) decided in exact integer arithmetic (m: at most 27 significant bits)");
  m.def("throughput_ns", &throughput_ns);
  m.def("rmsnorm_row_ns", &rmsnorm_row_ns, "ns/row for variants exact, rsqrtss, rsqrtss+nr1, none");
  m.def("scalar_rsqrt_ns", &scalar_rsqrt_ns);
}
