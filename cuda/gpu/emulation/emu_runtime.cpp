// The few CUDA runtime calls the launchers make, answered on the host for the CPU emulation (emu.h).
// The library is linked without libcudart: these definitions are the only ones.
#include "emu.h"

namespace {
constexpr int kEmuMultiprocessors = 3;   // small, so that the persistent backward grid has few blocks
constexpr int kEmuBlocksPerMultiprocessor = 2;
}  // namespace

extern "C" {

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) {
  if (n && p) std::memset(p, value, n);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  if (attr != cudaDevAttrMultiProcessorCount) return cudaErrorInvalidValue;
  *value = kEmuMultiprocessors;
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int, size_t) {
  *n = kEmuBlocksPerMultiprocessor;
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void*, int, size_t, unsigned int) {
  *n = kEmuBlocksPerMultiprocessor;
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "error (emulated)"; }

}  // extern "C"
