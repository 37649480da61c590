// Compiles the kernel text of NL_KERNEL_FILE once per instruction set, each copy in its own namespace
// inside a `#pragma GCC target(...)` region, so no -m flag applies to the whole library and it loads on any
// x86-64; cpu_common.h picks one build at run time. The including file defines NL_KERNEL_FILE (its own
// name) and guards its kernel text with `#ifdef NL_KERNEL_BODY`.
// --8<-- [start:foreach_isa]
#define NL_KERNEL_BODY
#define NL_ISA 512
#define NL_BF16_NATIVE 1
namespace normlab_cpu::isa512bf16 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")
#include "simd.h"
#include NL_KERNEL_FILE
#pragma GCC pop_options
}  // namespace normlab_cpu::isa512bf16
#undef NL_BF16_NATIVE
#define NL_BF16_NATIVE 0
namespace normlab_cpu::isa512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#include "simd.h"
#include NL_KERNEL_FILE
#pragma GCC pop_options
}  // namespace normlab_cpu::isa512
#undef NL_BF16_NATIVE
#undef NL_ISA
#define NL_ISA 256
namespace normlab_cpu::isa256 {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "simd.h"
#include NL_KERNEL_FILE
#pragma GCC pop_options
}  // namespace normlab_cpu::isa256
#undef NL_ISA
#define NL_ISA 0
namespace normlab_cpu::isa0 {
#include "simd.h"
#include NL_KERNEL_FILE
}  // namespace normlab_cpu::isa0
#undef NL_ISA
#undef NL_KERNEL_BODY
// --8<-- [end:foreach_isa]
