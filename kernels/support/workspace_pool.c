/*
 * workspace_pool.c: not a rung. The memory the wgmma rungs (19 tf32, 20
 * tf32x3) pack their operands into comes from one stream-ordered memory pool
 * per device, made on first use and kept for the life of the process. The
 * device's default pool hands its free memory back to the driver at every
 * host synchronization, and mapping it again on the next call cost as much as
 * the GEMM itself at 1024^3 on the H100 (benchmarks/NOTES.md). This pool
 * keeps up to a 64th of the device's memory reserved between calls, so calls
 * of one shape reuse one workspace.
 */
#include <pthread.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "support/device_memory.h"
#include "support/workspace_pool.h"

#define MAX_POOLED_DEVICES 64

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaMemPool_t pools[MAX_POOLED_DEVICES]; /* by device ordinal; NULL until made */
static uint64_t pool_keeps[MAX_POOLED_DEVICES];  /* its release threshold, remembered: asking the pool for it
                                                  * would invalidate a stream capture */

static cudaError_t make_pool(int device, cudaMemPool_t *pool, uint64_t *keeps) {
    size_t free_bytes, total_bytes;
    cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
    if (err != cudaSuccess) return err;
    struct cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    err = cudaMemPoolCreate(pool, &props);
    if (err != cudaSuccess) return err;
    const uint64_t keep = total_bytes / 64, limit = fsg_memory_limit(device);
    uint64_t keeps_now = limit < keep ? limit : keep;
    err = cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &keeps_now);
    if (err != cudaSuccess) (void)cudaMemPoolDestroy(*pool);
    *keeps = keep;
    return err;
}

cudaError_t fsg_workspace_pool(cudaMemPool_t *pool, uint64_t *keeps) {
    int device;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    // Past the table (a machine with more than 64 GPUs), the device's default pool: slower, still correct. It
    // keeps nothing between calls, so no K panels either (engine/pack.cuh): the whole K, as before them.
    if (device < 0 || device >= MAX_POOLED_DEVICES) {
        *keeps = 0;
        return cudaDeviceGetDefaultMemPool(pool, device);
    }
    pthread_mutex_lock(&pools_lock);
    if (pools[device] == NULL) {
        // A first call inside a stream capture must not have these device-wide calls invalidate the capture
        // (its default mode forbids them): relaxed mode for this thread while the pool is made.
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        cudaMemPool_t made;
        uint64_t keep = 0;
        err = make_pool(device, &made, &keep);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (err == cudaSuccess) pools[device] = made, pool_keeps[device] = keep;
    }
    *pool = pools[device];
    *keeps = pool_keeps[device];
    pthread_mutex_unlock(&pools_lock);
    return err;
}

cudaError_t fsg_workspace_pool_follow_limit(int device) {
    if (device < 0 || device >= MAX_POOLED_DEVICES) return cudaSuccess;
    cudaError_t err = cudaSuccess;
    pthread_mutex_lock(&pools_lock);
    if (pools[device] != NULL) {
        const uint64_t limit = fsg_memory_limit(device);
        uint64_t keep = limit < pool_keeps[device] ? limit : pool_keeps[device];
        err = cudaMemPoolSetAttribute(pools[device], cudaMemPoolAttrReleaseThreshold, &keep);
    }
    pthread_mutex_unlock(&pools_lock);
    return err;
}
