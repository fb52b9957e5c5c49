/*
 * workspace_pool.h: where the wgmma rungs' workspaces come from (host code,
 * kernels/support/workspace_pool.c). Declared for C and CUDA C++ alike.
 */
#ifndef FASTSGEMM_WORKSPACE_POOL_H
#define FASTSGEMM_WORKSPACE_POOL_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The current device's workspace pool, made on first use and kept for the
 * life of the process. Safe to call from any thread. */
cudaError_t fsg_workspace_pool(cudaMemPool_t *pool);

#ifdef __cplusplus
}
#endif

#endif /* FASTSGEMM_WORKSPACE_POOL_H */
