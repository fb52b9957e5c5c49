/*
 * engine/workspace.cuh: the device memory an engine path borrows for one call
 * (the packed operands, Ozaki's slices), and the engine's one way to the
 * allocator. It comes from the current device's workspace pool, which keeps
 * memory between calls (support/workspace_pool.c), is counted against the
 * device memory limit (support/device_memory.c), and goes back in stream
 * order after the kernels that read it. Where the limit or the GPU refuses
 * it, that is no error: the path that needs no workspace runs instead.
 */
#ifndef FASTSGEMM_ENGINE_WORKSPACE_CUH
#define FASTSGEMM_ENGINE_WORKSPACE_CUH

#include <cuda_runtime.h>

#include "support/device_memory.h"
#include "support/workspace_pool.h"

namespace fsg {
namespace engine {

/* The current device's pool; `kept`: the bytes it keeps between calls (a larger workspace is mapped afresh on
 * every call); `room`: what the device memory limit still allows now. A path sizes its workspace by these. */
struct WorkspaceSource {
    cudaMemPool_t pool;
    uint64_t kept, room;
};

inline cudaError_t workspace_source(WorkspaceSource *source) {
    const cudaError_t err = fsg_workspace_pool(&source->pool, &source->kept);
    source->room = fsg_memory_room();
    return err;
}

/* `bytes` of workspace for kernels queued on `stream`, in *memory. Refused by the memory limit or by the GPU
 * (out of memory): *memory is null and the answer cudaSuccess. Any other failure is the answer. */
template <typename T>
cudaError_t take_workspace(const WorkspaceSource &source, size_t bytes, cudaStream_t stream, T **memory) {
    *memory = nullptr;
    if (fsg_memory_take(-1, bytes) != cudaSuccess) {
        char forgotten[8];
        (void)fsg_memory_refusal(forgotten, sizeof forgotten);  // the refusal's message is for the caller's errors
        return cudaSuccess;
    }
    const cudaError_t err = cudaMallocFromPoolAsync(reinterpret_cast<void **>(memory), bytes, source.pool, stream);
    if (err == cudaSuccess) return cudaSuccess;
    *memory = nullptr;
    fsg_memory_give(-1, bytes);
    if (err != cudaErrorMemoryAllocation) return err;
    (void)cudaGetLastError();  // not sticky: cleared, and the path without a workspace runs
    return cudaSuccess;
}

/* take_workspace's memory back, after the kernels queued on `stream` before this call. */
inline cudaError_t give_workspace(void *memory, size_t bytes, cudaStream_t stream) {
    const cudaError_t freed = cudaFreeAsync(memory, stream);
    if (freed == cudaSuccess) fsg_memory_give(-1, bytes);
    return freed;
}

}  // namespace engine
}  // namespace fsg

#endif  // FASTSGEMM_ENGINE_WORKSPACE_CUH
