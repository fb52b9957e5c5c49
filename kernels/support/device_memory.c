/*
 * device_memory.c: not a rung. The device memory fastsgemm itself holds, per
 * GPU, and an optional limit on it.
 *
 * Every allocation fastsgemm makes on a GPU is counted here before it is made
 * and uncounted when it is freed: DeviceBuffers (DeviceArray, staged host
 * operands' results), the temporaries of operands copied into a kernel's
 * layout, the wgmma rungs' packed workspaces and the cuBLAS handles'
 * workspaces. Memory that callers own (CuPy's or PyTorch's arrays, results
 * made in their frameworks) is theirs, not counted. With a limit set, an
 * allocation that would go past it is refused before the driver is asked:
 * the call raises MemoryError naming the limit, or, for a packed workspace,
 * takes K panels that fit (kernels/engine/pack.cuh) or the path that needs
 * none. fastsgemm.dask relies on this to stream host chunks through a GPU
 * whose budget is smaller than the operands.
 *
 * Stream-ordered frees are uncounted when they are queued: the memory goes
 * back to its pool, in stream order, for the next allocation on that stream.
 */
#include "support/device_memory.h"

#include <pthread.h>
#include <stdio.h>

typedef struct {
    int limited;     // zero (no limit) until a limit is set
    uint64_t limit;  // when limited
    uint64_t in_use;
    uint64_t peak;
} device_count;

static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;
static device_count counts[FSG_MAX_COUNTED_DEVICES];

static _Thread_local struct {
    int refused;
    int device;
    uint64_t asked, in_use, limit;
} last_refusal;

static int resolve(int device) {
    if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return device < FSG_MAX_COUNTED_DEVICES ? device : -1;
}

cudaError_t fsg_memory_take(int device, uint64_t bytes) {
    device = resolve(device);
    if (device < 0) return cudaSuccess;
    cudaError_t result = cudaSuccess;
    pthread_mutex_lock(&counts_lock);
    device_count *c = &counts[device];
    if (c->limited && (bytes > c->limit || c->in_use > c->limit - bytes)) {
        last_refusal.refused = 1;
        last_refusal.device = device;
        last_refusal.asked = bytes;
        last_refusal.in_use = c->in_use;
        last_refusal.limit = c->limit;
        result = cudaErrorMemoryAllocation;
    } else {
        c->in_use += bytes;
        if (c->in_use > c->peak) c->peak = c->in_use;
    }
    pthread_mutex_unlock(&counts_lock);
    return result;
}

void fsg_memory_give(int device, uint64_t bytes) {
    device = resolve(device);
    if (device < 0) return;
    pthread_mutex_lock(&counts_lock);
    counts[device].in_use -= bytes < counts[device].in_use ? bytes : counts[device].in_use;
    pthread_mutex_unlock(&counts_lock);
}

uint64_t fsg_memory_room(void) {
    const int device = resolve(-1);
    if (device < 0) return FSG_NO_LIMIT;
    pthread_mutex_lock(&counts_lock);
    const device_count c = counts[device];
    pthread_mutex_unlock(&counts_lock);
    if (!c.limited) return FSG_NO_LIMIT;
    return c.in_use < c.limit ? c.limit - c.in_use : 0;
}

void fsg_memory_set_limit(int device, uint64_t limit) {
    pthread_mutex_lock(&counts_lock);
    for (int d = 0; d < FSG_MAX_COUNTED_DEVICES; ++d)
        if (device < 0 || d == device) {
            counts[d].limited = limit != FSG_NO_LIMIT;
            counts[d].limit = limit;
        }
    pthread_mutex_unlock(&counts_lock);
}

uint64_t fsg_memory_limit(int device) {
    if (device < 0 || device >= FSG_MAX_COUNTED_DEVICES) return FSG_NO_LIMIT;
    pthread_mutex_lock(&counts_lock);
    const uint64_t limit = counts[device].limited ? counts[device].limit : FSG_NO_LIMIT;
    pthread_mutex_unlock(&counts_lock);
    return limit;
}

void fsg_memory_counts(int device, uint64_t *in_use, uint64_t *peak) {
    *in_use = *peak = 0;
    if (device < 0 || device >= FSG_MAX_COUNTED_DEVICES) return;
    pthread_mutex_lock(&counts_lock);
    *in_use = counts[device].in_use;
    *peak = counts[device].peak;
    pthread_mutex_unlock(&counts_lock);
}

void fsg_memory_reset_peak(int device) {
    if (device < 0 || device >= FSG_MAX_COUNTED_DEVICES) return;
    pthread_mutex_lock(&counts_lock);
    counts[device].peak = counts[device].in_use;
    pthread_mutex_unlock(&counts_lock);
}

int fsg_memory_refusal(char *buf, size_t size) {
    if (!last_refusal.refused) return 0;
    last_refusal.refused = 0;
    snprintf(buf, size,
             "fastsgemm's device memory limit on cuda:%d is %llu bytes; %llu are in use and %llu more were asked "
             "(fastsgemm.set_device_memory_limit)",
             last_refusal.device, (unsigned long long)last_refusal.limit, (unsigned long long)last_refusal.in_use,
             (unsigned long long)last_refusal.asked);
    return 1;
}
