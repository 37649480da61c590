// The C interface between rsqrt_gpu.cu (plain CUDA) and rsqrt_gpu_bind.cpp (torch glue).
// The same sources build two extensions, without and with -use_fast_math; RSQ_FAST=1 (set for the
// second) renames the symbols so the two libraries never resolve each other's functions.
#pragma once
#include <cstdint>

#if defined(RSQ_FAST) && RSQ_FAST
#define RSQ_FN(name) name##_fast
#else
#define RSQ_FN(name) name
#endif

#define RSQ_GPU_SWEEP_VALUES 100

extern "C" {
int RSQ_FN(rsqrt_gpu_num_methods)();
const char* RSQ_FN(rsqrt_gpu_method_name)(int m);
int RSQ_FN(rsqrt_gpu_fast_math)();
int RSQ_FN(rsqrt_gpu_sweep)(int method, uint64_t lo, uint64_t stride, uint64_t total, unsigned long long* out_u64);
int RSQ_FN(rsqrt_gpu_apply)(int method, const float* x, float* y, int64_t n);
const char* RSQ_FN(rsqrt_gpu_error_string)(int e);
}
