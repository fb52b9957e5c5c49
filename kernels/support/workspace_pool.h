/*
 * workspace_pool.h: where the wgmma rungs' workspaces come from (host code,
 * kernels/support/workspace_pool.c). Declared for C and CUDA C++ alike.
 */
#ifndef FASTSGEMM_WORKSPACE_POOL_H
#define FASTSGEMM_WORKSPACE_POOL_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The current device's workspace pool, made on first use and kept for the
 * life of the process, and the bytes it keeps reserved between calls (a
 * larger workspace is mapped afresh each time). Safe to call from any
 * thread, and inside a stream capture: nothing is asked of the pool after it
 * is made. */
cudaError_t fsg_workspace_pool(cudaMemPool_t *pool, uint64_t *keeps);

/* Sets what `device`'s pool, if it is made, keeps between calls after its
 * device memory limit changed: a 64th of the GPU, or the limit if smaller.
 * The keeps that fsg_workspace_pool reports (what K panels are sized by) do
 * not change. */
cudaError_t fsg_workspace_pool_follow_limit(int device);

#ifdef __cplusplus
}
#endif

#endif /* FASTSGEMM_WORKSPACE_POOL_H */
