// Run-time choice of the instruction set for the CPU kernels (the builds themselves are the vector
// structs of simd.h).
#pragma once

#include <cstdlib>
#include <cstring>

#include "simd.h"

namespace normlab_cpu {

// --8<-- [start:dispatch]
enum class Isa { scalar = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3 };

// The best instruction set this processor supports; NORMLAB_CPU_ISA=scalar|avx2|avx512 can ask for a
// lower one (read on every call, so the tests can compare all four paths in one process).
inline Isa pick_isa() {
  static const Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return __builtin_cpu_supports("avx512bf16") ? Isa::avx512bf16 : Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
    return Isa::scalar;
  }();
  Isa want = best;
  if (const char* env = std::getenv("NORMLAB_CPU_ISA")) {
    if (!std::strcmp(env, "scalar")) want = Isa::scalar;
    else if (!std::strcmp(env, "avx2")) want = Isa::avx2;
    else if (!std::strcmp(env, "avx512")) want = Isa::avx512;
  }
  return static_cast<int>(want) < static_cast<int>(best) ? want : best;
}

// The one place that lists the builds: body(V{}) runs with V the vector struct of `isa`, and the whole
// kernel that body calls is compiled for that instruction set (V::run, simd.h). A kernel is written once,
// as a template over V:  with_isa(pick_isa(), [&](auto v) { my_kernel<decltype(v)>(args); });
template <class F>
inline void with_isa(Isa isa, const F& body) {
  switch (isa) {
    case Isa::avx512bf16: Vec512Bf16::run(body); break;
    case Isa::avx512: Vec512::run(body); break;
    case Isa::avx2: Vec256::run(body); break;
    default: VecScalar::run(body); break;
  }
}
// --8<-- [end:dispatch]

}  // namespace normlab_cpu
