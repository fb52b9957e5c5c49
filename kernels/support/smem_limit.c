/*
 * smem_limit.c: fsg_allow_dynamic_smem (smem_limit.h).
 *
 * Every wgmma kernel takes more than the 48 KiB of dynamic shared memory a
 * kernel may use without asking, and each launch used to ask again
 * (cudaFuncSetAttribute): host time on every call, where the answer only
 * changes the first time in a context. A table remembers what each kernel was
 * allowed in each context. Contexts are named by the driver's context ID
 * (cuCtxGetId), which is never reused within a process, unlike a context's
 * handle: a caller that destroys its own context and creates another at the
 * same address gets a key of its own, and the limit asked for again.
 * Not handled: a device reset (cudaDeviceReset) under a primary context
 * fastsgemm retains, which fastsgemm's other per-context state (cuBLAS
 * handles, workspace pools) does not survive either.
 */
#include "support/smem_limit.h"

#include <pthread.h>
#include <stdint.h>

#include <cuda.h>

enum { kSlots = 4096, kProbes = 64 }; /* kernels x contexts (about 200 kernels ask today); a key's slot is among
                                       * kProbes from its hash, or it is not remembered (asked every time) */

typedef struct {
    const void *kernel; /* NULL: an empty slot */
    unsigned long long context; /* cuCtxGetId's */
    size_t bytes;       /* what it was allowed there */
} allowance;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static allowance slots[kSlots];

typedef CUresult (*context_get_fn)(CUcontext *);
typedef CUresult (*context_id_fn)(CUcontext, unsigned long long *);
static context_get_fn context_get; /* cuCtxGetCurrent and cuCtxGetId, looked up once (under the lock) */
static context_id_fn context_id;
static int looked_up;

static size_t slot_of(const void *kernel, unsigned long long context) {
    const uint64_t key = (uint64_t)(uintptr_t)kernel * 0x9E3779B97F4A7C15ull ^ (uint64_t)context;
    return (size_t)((key ^ (key >> 29)) % kSlots);
}

/* The slot of (kernel, context), or the empty one where it would go; NULL when none is within kProbes of its hash
 * (a full table: asked every time, as before). Under the lock. */
static allowance *find(const void *kernel, unsigned long long context) {
    size_t i = slot_of(kernel, context);
    for (int probes = 0; probes < kProbes; ++probes, i = (i + 1) % kSlots) {
        allowance *a = &slots[i];
        if (a->kernel == NULL || (a->kernel == kernel && a->context == context)) return a;
    }
    return NULL;
}

cudaError_t fsg_allow_dynamic_smem(const void *kernel, size_t bytes) {
    pthread_mutex_lock(&lock);
    if (!looked_up) {
        void *get = NULL, *id = NULL;
        enum cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            get = NULL;
        if (cudaGetDriverEntryPointByVersion("cuCtxGetId", &id, 12000, cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            id = NULL;
        if (get == NULL || id == NULL) (void)cudaGetLastError(); /* a failed lookup is not the caller's error */
        context_get = (context_get_fn)get;
        context_id = (context_id_fn)id;
        looked_up = 1;
    }
    CUcontext current = NULL;
    unsigned long long context = 0; /* 0: not known, so not remembered */
    if (context_get != NULL && context_id != NULL && context_get(&current) == CUDA_SUCCESS && current != NULL &&
        context_id(current, &context) != CUDA_SUCCESS)
        context = 0;
    allowance *a = context != 0 ? find(kernel, context) : NULL;
    if (a != NULL && a->kernel != NULL && a->bytes >= bytes) {
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
    }
    // Asked under the lock (once per kernel and context), so that two threads asking for different sizes cannot
    // leave the smaller one set while the table records the larger.
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (err == cudaSuccess && a != NULL) {
        a->kernel = kernel;
        a->context = context;
        a->bytes = bytes;
    }
    pthread_mutex_unlock(&lock);
    return err;
}
