// A CPU emulation of the parts of the CUDA execution model that the kernels in cuda/gpu use, so that the
// real kernels and launchers run on host threads in `make test` (tests/test_cuda_build.py), without a GPU.
//
// It is compiled with g++ as C++ (`-x c++ -include emu.h`) in place of nvcc. Modelled:
//  - a launch runs its blocks one after another; each block's threads are real std::threads, so
//    __syncthreads() is a std::barrier over the block and races between threads of a block are real;
//  - __shared__ variables are `static`: one copy, shared by the threads of the (single) running block;
//  - __shfl_down_sync and __shfl_sync exchange values through a per-warp buffer between two warp
//    barriers, with the CUDA rules: the mask must name exactly the lanes that call it (checked: a wrong mask aborts), a
//    source lane past the warp returns the caller's value, and a lane that does not exist in a partial
//    warp returns NaN (undefined on a GPU), so a kernel that used it would produce NaN;
//  - __frsqrt_rn and __fdiv_rn are computed in double and rounded (correctly rounded, as on the GPU);
//  - device memory is host memory: pointers, offsets and alignment are the real ones, so the launchers'
//    choice of vector width and path is exercised as it is on a GPU.
// Not modelled: the weaker memory ordering of a GPU between barriers, timing, occupancy (a fixed
// multiprocessor count and blocks per multiprocessor stand in for the device's).
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static

namespace emu {

struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

struct Warp {
  int lanes = 32;
  std::unique_ptr<std::barrier<>> bar;
  float buf[32];
};

struct Block {
  std::unique_ptr<std::barrier<>> bar;
  std::vector<Warp> warps;
};

inline thread_local Dim t_idx, b_idx, b_dim, g_dim;
inline thread_local Block* t_block = nullptr;

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "CUDA emulation: %s\n", what);
  std::abort();
}

inline void syncthreads() { t_block->bar->arrive_and_wait(); }

// Every lane of the warp publishes v; each gets lane src's value. A lane that does not exist in a
// partial warp yields NaN (undefined on a GPU).
inline float exchange(unsigned mask, float v, int src) {
  const int lane = static_cast<int>(t_idx.x & 31u), warp = static_cast<int>(t_idx.x >> 5);
  Warp& w = t_block->warps[warp];
  const unsigned full = w.lanes >= 32 ? 0xffffffffu : ((1u << w.lanes) - 1u);
  if (mask != full) fail("warp shuffle mask does not name exactly the lanes of the warp");
  w.buf[lane] = v;
  w.bar->arrive_and_wait();
  const float r = src >= w.lanes ? NAN : w.buf[src];
  w.bar->arrive_and_wait();  // nobody overwrites buf before every lane has read it
  return r;
}

// __shfl_down_sync: a source lane past the warp returns the caller's own value.
inline float shfl_down(unsigned mask, float v, int offset) {
  const int src = static_cast<int>(t_idx.x & 31u) + offset;
  const float r = exchange(mask, v, src >= 32 ? 0 : src);
  return src >= 32 ? v : r;
}

// __shfl_sync: lane src (modulo the warp size, as in CUDA).
inline float shfl_idx(unsigned mask, float v, int src) { return exchange(mask, v, src & 31); }

inline float frsqrt_rn(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }
inline float fdiv_rn(float a, float b) { return a / b; }

// Runs kernel(args...) for every block of the grid, blocks one after another, threads in parallel.
template <typename... P>
struct Launch {
  unsigned long long grid;
  unsigned block;
  void (*kernel)(P...);

  template <typename... A>
  void operator()(A&&... args) const {
    if (block < 1 || block > 1024) fail("block size out of range");
    for (unsigned long long b = 0; b < grid; ++b) {
      Block blk;
      blk.bar = std::make_unique<std::barrier<>>(static_cast<std::ptrdiff_t>(block));
      const int nwarps = static_cast<int>((block + 31) / 32);
      blk.warps.resize(nwarps);
      for (int w = 0; w < nwarps; ++w) {
        blk.warps[w].lanes = std::min(32, static_cast<int>(block) - 32 * w);
        blk.warps[w].bar = std::make_unique<std::barrier<>>(blk.warps[w].lanes);
      }
      std::vector<std::thread> threads;
      threads.reserve(block);
      for (unsigned t = 0; t < block; ++t) {
        threads.emplace_back([&, t, b] {
          t_idx.x = t;
          b_idx.x = static_cast<unsigned>(b);
          b_dim.x = block;
          g_dim.x = static_cast<unsigned>(grid);
          t_block = &blk;
          kernel(static_cast<P>(args)...);
        });
      }
      for (auto& th : threads) th.join();
    }
  }
};

template <typename... P>
Launch<P...> launch_of(unsigned long long grid, unsigned block, size_t /*smem*/, cudaStream_t /*stream*/,
                       void (*kernel)(P...)) {
  return Launch<P...>{grid, block, kernel};
}

}  // namespace emu

using std::min;  // CUDA device code has a global min(int, int)

#define threadIdx ::emu::t_idx
#define blockIdx ::emu::b_idx
#define blockDim ::emu::b_dim
#define gridDim ::emu::g_dim
#define __syncthreads() ::emu::syncthreads()
#define __shfl_down_sync(mask, v, offset) ::emu::shfl_down(mask, v, offset)
#define __shfl_sync(mask, v, src) ::emu::shfl_idx(mask, v, src)
#define __frsqrt_rn(x) ::emu::frsqrt_rn(x)
#define __fdiv_rn(a, b) ::emu::fdiv_rn(a, b)
#define NORMLAB_LAUNCH(grid, block, smem, stream, ...) \
  ::emu::launch_of(grid, block, smem, stream, &__VA_ARGS__)
