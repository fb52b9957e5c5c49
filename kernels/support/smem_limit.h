/*
 * smem_limit.h: a kernel's dynamic shared-memory limit raised once per CUDA
 * context, not on every launch (host code, kernels/support/smem_limit.c).
 * Declared for C and CUDA C++ alike.
 */
#ifndef FASTSGEMM_SMEM_LIMIT_H
#define FASTSGEMM_SMEM_LIMIT_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Lets `kernel` (a __global__ function's address) take `bytes` of dynamic
 * shared memory in the current context: cudaFuncSetAttribute the first time
 * it needs more than it was allowed there, nothing after. The attribute
 * belongs to the kernel in one context, so what was allowed is remembered per
 * (kernel, context). Safe from any thread. Where no context is current, or
 * the driver cannot be asked which one is, it asks the runtime every time, as
 * before. */
cudaError_t fsg_allow_dynamic_smem(const void *kernel, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* FASTSGEMM_SMEM_LIMIT_H */
