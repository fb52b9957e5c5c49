/*
 * staging.h: large host <-> device copies of pageable host memory through
 * pinned buffers and several host threads (csrc/staging.c).
 */
#ifndef FASTSGEMM_STAGING_H
#define FASTSGEMM_STAGING_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

typedef enum fsg_copy_direction { FSG_TO_DEVICE, FSG_TO_HOST } fsg_copy_direction;

/* cudaMemcpy2D's contract (pitches and width in bytes), for one pageable host
 * side and one device side. Sets *staged and returns once every byte has
 * arrived (the stream is synchronised) when it took the copy; leaves *staged
 * false and does nothing when the copy is better left to the runtime: small,
 * rows wider than a staging buffer, host memory already pinned, the buffers in
 * use by another thread, or no pinned memory to be had. */
cudaError_t fsg_staged_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                               fsg_copy_direction direction, cudaStream_t stream, bool *staged);

/* Faults in, writable and without changing them, the pages of host memory
 * [ptr, ptr + bytes) that a copy from the GPU is about to fill, with the
 * staging threads, while the GPU works. A new NumPy result's pages are
 * otherwise faulted in and zeroed one by one by the copy that fills them.
 * Does nothing for small or pinned memory, when the threads are busy, or
 * where the kernel lacks MADV_POPULATE_WRITE (Linux 5.14). */
void fsg_prefault_host(void *ptr, size_t bytes);

#endif /* FASTSGEMM_STAGING_H */
