// The device shim: the only lines in which the CUDA glue (ops_cuda.cpp) differs between the GPU build and
// its CPU emulation (emulation/ops_emu.cpp defines NORMLAB_EMULATION). Four things differ: where outputs
// are allocated, which stream the launchers get, the device guard, and the device the ops accept. Every
// other line of the glue is compiled, and warned about, in both builds (tests/ops/test_cuda_build.py
// fails if a second #ifdef on the emulation appears in cuda/gpu).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAGuard.h>  // declarations only: the emulation never calls them
#include <c10/cuda/CUDAStream.h>

#include <cmath>

namespace normlab_shim {
#ifdef NORMLAB_EMULATION
#define NL_LIBRARY normlab_emu
#define NL_DISPATCH_KEY CPU
constexpr c10::DeviceType kDevice = c10::DeviceType::CPU;
struct DeviceGuard { explicit DeviceGuard(c10::Device) {} };
inline void* stream_of(const at::Tensor&) { return nullptr; }
// Outputs start as NaN, so an element a kernel forgets to write fails the tests.
inline at::Tensor new_tensor(at::IntArrayRef shape, const at::TensorOptions& o) { return at::full(shape, NAN, o); }
#else
#define NL_LIBRARY normlab
#define NL_DISPATCH_KEY CUDA
constexpr c10::DeviceType kDevice = c10::DeviceType::CUDA;
using DeviceGuard = c10::cuda::CUDAGuard;
inline void* stream_of(const at::Tensor& x) { return c10::cuda::getCurrentCUDAStream(x.device().index()).stream(); }
inline at::Tensor new_tensor(at::IntArrayRef shape, const at::TensorOptions& o) { return at::empty(shape, o); }
#endif
}  // namespace normlab_shim
