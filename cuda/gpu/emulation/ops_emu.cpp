// The CUDA glue (ops_cuda.cpp) compiled for the CPU emulation: the same checks, allocations and launcher
// calls, registered as the library `normlab_emu` (the schemas of cuda/ops.h) under the CPU dispatch key.
// reference_impl/ops/build.py builds it with the kernels (each .cu compiled as C++ after emu.h) and
// emu_runtime.cpp.
#define NORMLAB_EMULATION 1
#include "../ops_cuda.cpp"

TORCH_LIBRARY(normlab_emu, m) { normlab::define_ops(m); }
