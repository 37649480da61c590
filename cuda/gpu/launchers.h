// Raw-pointer entry points of the CUDA kernels, shared by the .cu files and the torch glue
// (ops_cuda.cpp). Every function returns a cudaError_t as int (0 = success) and enqueues its work on the
// given stream (a cudaStream_t passed as void*). Dtype codes: 0 fp32, 1 fp16, 2 bf16; -1 = no tensor.
// All tensors are contiguous; x has `rows` rows of `d` elements.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// RMSNorm forward, teaching versions 1-3 (version 4 and 5 are normlab_rms_fwd). block = threads per
// block, 0 for the version's default. y: rows*d of x's dtype; rstd: rows fp32.
int normlab_rms_fwd_step(int version, int block, int x_code, int w_code, void* y, float* rstd,
                         const void* x, const void* w, long long rows, int d, float eps, int convention,
                         void* stream);

// RMSNorm forward: the op. Rows that fit one warp's registers run several to a block (version 6), longer
// rows one to a block (version 4, res == nullptr; version 5, fused residual add: h_out receives x + res).
int normlab_rms_fwd(int x_code, int w_code, void* y, void* h_out, float* rstd, const void* x,
                    const void* res, const void* w, long long rows, int d, float eps, int convention,
                    void* stream);

// RMSNorm forward without a residual in a chosen row layout: 4 = one row per block (version 4), 6 = several
// rows per block (version 6; cudaErrorInvalidValue for a row of more than 32 * 8 vectors).
int normlab_rms_fwd_layout(int layout, int x_code, int w_code, void* y, float* rstd, const void* x,
                           const void* w, long long rows, int d, float eps, int convention, void* stream);

// Number of row-partial sums the backward kernels produce for dweight (and dbias): the caller
// allocates `*blocks` x d floats for each partial buffer. 0 when rows == 0.
int normlab_rms_bwd_blocks(int x_code, int w_code, const void* dx, const void* dy, const void* x,
                           const void* w, long long rows, int d, int* blocks);
int normlab_ln_bwd_blocks(int x_code, int w_code, const void* dx, const void* dy, const void* x,
                          const void* w, long long rows, int d, int* blocks);

// RMSNorm backward: dx (x's dtype) and, when w != nullptr, dw (d floats: the fp32 sum) through
// `partial` (blocks x d fp32, from normlab_rms_bwd_blocks). Deterministic: no atomics anywhere.
int normlab_rms_bwd(int x_code, int w_code, void* dx, float* dw, float* partial, int blocks,
                    const void* dy, const void* x, const void* w, const float* rstd, long long rows,
                    int d, int convention, void* stream);

// LayerNorm forward: y, mean and rstd (fp32, one per row). w and b may be null; they share w_code.
// res and h_out: both null, or the residual and the buffer for h = round_x(x + res); contract 0 ("hf",
// normalize h) or 2 ("fp32", normalize the float32 sum x + res).
int normlab_ln_fwd(int x_code, int w_code, void* y, void* h_out, float* mean, float* rstd, const void* x,
                   const void* res, const void* w, const void* b, long long rows, int d, float eps, int contract,
                   void* stream);

// LayerNorm backward: dx; dw when w != nullptr (via partial_w); db always (via partial_b). dw and db are
// d floats each (the fp32 sums); both partial buffers hold blocks x d fp32.
int normlab_ln_bwd(int x_code, int w_code, void* dx, float* dw, float* db, float* partial_w,
                   float* partial_b, int blocks, const void* dy, const void* x, const void* w,
                   const float* mean, const float* rstd, long long rows, int d, void* stream);

const char* normlab_cuda_error_string(int code);

#ifdef __cplusplus
}
#endif
