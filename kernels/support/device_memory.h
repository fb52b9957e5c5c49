/*
 * device_memory.h: the device memory fastsgemm itself holds, counted per GPU,
 * and the limit a user may put on it (kernels/support/device_memory.c).
 * Declared for C and CUDA C++ alike.
 */
#ifndef FASTSGEMM_DEVICE_MEMORY_H
#define FASTSGEMM_DEVICE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { FSG_MAX_COUNTED_DEVICES = 64 };
#define FSG_NO_LIMIT UINT64_MAX

/* Counts `bytes` about to be allocated on `device` (-1: the current device),
 * or refuses them with cudaErrorMemoryAllocation when they would take the
 * device past its limit; a refusal is remembered for this thread's next
 * error message (fsg_memory_refusal). Every take that succeeds is matched by
 * one fsg_memory_give of the same bytes once the memory is freed. Devices past
 * FSG_MAX_COUNTED_DEVICES are neither counted nor limited. */
cudaError_t fsg_memory_take(int device, uint64_t bytes);
void fsg_memory_give(int device, uint64_t bytes);

/* How many more bytes the current device's limit allows now (FSG_NO_LIMIT
 * where there is none). Another thread may take them first: a planner that
 * sizes its request by this still checks fsg_memory_take's answer. */
uint64_t fsg_memory_room(void);

/* The limit of `device` (FSG_NO_LIMIT: none), or of every device for -1. */
void fsg_memory_set_limit(int device, uint64_t limit);
uint64_t fsg_memory_limit(int device);

/* In use now and the most in use since the last reset (or since start). */
void fsg_memory_counts(int device, uint64_t *in_use, uint64_t *peak);
void fsg_memory_reset_peak(int device);

/* Describes, into buf, the last refusal of this thread and forgets it; 0 when
 * there was none since the last call. */
int fsg_memory_refusal(char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* FASTSGEMM_DEVICE_MEMORY_H */
