/*
 * staging.c: large copies between pageable host memory (NumPy arrays) and the
 * GPU, through pinned buffers, several host threads and the copy engine at
 * once.
 *
 * A copy engine reads and writes only pinned (page-locked) host memory. Given
 * pageable memory, the runtime copies it through a pinned buffer of its own,
 * one piece at a time, with one host thread: 7.3 GB/s to the GPU and 16.8 GB/s
 * back on the H100 machine, against 55 GB/s for pinned memory
 * (benchmarks/NOTES.md). Here the host side of the copy is done by a few
 * threads at once into two pinned buffers that take turns: while the copy
 * engine moves one chunk, the threads fill (or empty) the other.
 *
 * The two buffers and the threads are made once per process, on first use,
 * and kept (the buffers' size is bounded: 2 x kChunkBytes). One copy uses them at a time; a copy that
 * finds them busy (another thread is staging) takes the runtime's own path
 * instead of waiting. Every copy here returns only when its bytes have arrived,
 * so the buffers are free again when it returns.
 */
#define _DEFAULT_SOURCE  // madvise, which -std=c11 alone leaves undeclared
#include "staging.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* Linux 5.14; older kernels refuse it, which only costs the speed-up */
#endif

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { kChunkBytes = 8 << 20, kMinChunkBytes = 1 << 20, kMaxThreads = 8 };
static const size_t kStagedFromBytes = (size_t)2 << 20;  // below this, the runtime's path costs as little

static pthread_mutex_t staging_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *pinned[2];  // kChunkBytes each, made under staging_lock

/* ---- host threads: one chunk's rows copied by several threads at once ---- */

typedef struct rows_job {
    unsigned char *dst;
    const unsigned char *src;  // NULL: fault dst's rows in instead of copying (fsg_prefault_host)
    size_t dst_pitch, src_pitch, width, rows;
    size_t piece_bytes;  // how much one thread takes at a time; 0 for kPieceBytes
} rows_job;

static void copy_rows(const rows_job *job, size_t first, size_t last) {
    if (job->src == NULL) {  // rows are whole pages here; errors (an older kernel) just leave the faults for later
        madvise(job->dst + first * job->dst_pitch, (last - first) * job->dst_pitch, MADV_POPULATE_WRITE);
        return;
    }
    if (job->dst_pitch == job->width && job->src_pitch == job->width) {  // one block
        memcpy(job->dst + first * job->width, job->src + first * job->width, (last - first) * job->width);
        return;
    }
    for (size_t r = first; r < last; ++r) memcpy(job->dst + r * job->dst_pitch, job->src + r * job->src_pitch, job->width);
}

/* The team of host threads that copy each chunk's rows (the calling thread
 * included). Made on the first staged copy and kept, parked on a condition
 * variable between chunks: making threads per copy cost more than the copy
 * itself at 4 MB.
 *
 * A chunk is cut into pieces of about kPieceBytes, and every thread takes
 * the next piece until none is left, so a thread the OS has put aside (NumPy's
 * BLAS threads, for one, spin for a while after each call) delays its one
 * piece, not a fixed share of the chunk. A piece is claimed with a ticket that
 * also names the chunk (generation << 32 | piece), so a thread that wakes
 * late can never take a piece of a chunk it has not read. The caller waits
 * for the chunk's pieces to be done, not for the threads. */
enum { kPieceBytes = 256 << 10 };

typedef struct team {
    int size;  // threads, the caller included
    pthread_t threads[kMaxThreads];
    pthread_mutex_t lock;
    pthread_cond_t changed;
    uint32_t generation;   // bumped for each chunk, under lock
    rows_job job;          // the chunk's rows, written under lock before generation moves
    size_t pieces, piece_rows;
    uint64_t ticket;       // generation << 32 | the next piece
    size_t done;           // pieces of this chunk finished
} team;

typedef struct member {
    team *team;
} member;

/* Takes and copies pieces of chunk `generation` (described by `job`) until
 * none is left. */
static void take_pieces(team *t, uint32_t generation, const rows_job *job, size_t pieces, size_t piece_rows) {
    for (;;) {
        uint64_t ticket = __atomic_load_n(&t->ticket, __ATOMIC_ACQUIRE);
        if ((uint32_t)(ticket >> 32) != generation || (ticket & 0xffffffffu) >= pieces) return;
        if (!__atomic_compare_exchange_n(&t->ticket, &ticket, ticket + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        const size_t first = (size_t)(ticket & 0xffffffffu) * piece_rows;
        copy_rows(job, first, first + piece_rows < job->rows ? first + piece_rows : job->rows);
        if (__atomic_add_fetch(&t->done, 1, __ATOMIC_ACQ_REL) == pieces) {
            pthread_mutex_lock(&t->lock);  // the caller may be asleep, or about to be
            pthread_cond_broadcast(&t->changed);
            pthread_mutex_unlock(&t->lock);
        }
    }
}

/* While a copy runs, the next chunk follows the last within microseconds, and
 * a thread woken from a condition variable takes tens of them to run again:
 * so both sides look for the next step for a little while (kSpins pauses,
 * some 10-30 us) before they sleep. */
enum { kSpins = 4096 };

static inline void pause_briefly(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* A member lives as long as the process (the team is kept between copies). */
static void *team_member(void *arg) {
    team *t = ((const member *)arg)->team;
    uint32_t seen = 0;
    for (;;) {
        for (int spin = 0; spin < kSpins && __atomic_load_n(&t->generation, __ATOMIC_ACQUIRE) == seen; ++spin)
            pause_briefly();
        pthread_mutex_lock(&t->lock);
        while (t->generation == seen) pthread_cond_wait(&t->changed, &t->lock);
        seen = t->generation;
        const rows_job job = t->job;
        const size_t pieces = t->pieces, piece_rows = t->piece_rows;
        pthread_mutex_unlock(&t->lock);
        take_pieces(t, seen, &job, pieces, piece_rows);
    }
}

/* FASTSGEMM_STAGING_THREADS, read once: 0 turns staging off (the runtime's
 * own path for every copy), 1..8 sets the team's size; by default half the
 * cores, at most kMaxThreads. -1 when unset or not a number in range. */
static int threads_asked(void) {
    const char *text = getenv("FASTSGEMM_STAGING_THREADS");
    if (text == NULL || *text == '\0') return -1;
    char *end;
    const long value = strtol(text, &end, 10);
    return *end == '\0' && value >= 0 && value <= kMaxThreads ? (int)value : -1;
}

static int wanted_threads(void) {
    const int asked = threads_asked();
    if (asked >= 1) return asked;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const long threads = cores / 2;  // leave the other half to the rest of the process
    return threads < 1 ? 1 : threads > kMaxThreads ? kMaxThreads : (int)threads;
}

/* Starts the team with as many threads as can be made, up to what is wanted
 * (with none, the caller copies alone). */
static void team_start(team *t, member members[kMaxThreads]) {
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->changed, NULL);
    t->generation = 0;
    t->ticket = 0;
    t->size = 1;
    const int wanted = wanted_threads();
    for (int i = 1; i < wanted; ++i) {
        members[i] = (member){.team = t};
        if (pthread_create(&t->threads[i], NULL, team_member, &members[i]) != 0) break;
        t->size = i + 1;
    }
}

/* Copies the job's rows with the whole team; returns when they are all copied. */
static void team_copy(team *t, const rows_job *job) {
    const size_t piece_bytes = job->piece_bytes > 0 ? job->piece_bytes : kPieceBytes;
    const size_t piece_rows = job->width >= piece_bytes ? 1 : piece_bytes / job->width;
    const size_t pieces = (job->rows + piece_rows - 1) / piece_rows;
    if (t->size == 1 || pieces == 1) {
        copy_rows(job, 0, job->rows);
        return;
    }
    pthread_mutex_lock(&t->lock);
    const uint32_t generation = t->generation + 1;
    t->job = *job;
    t->pieces = pieces;
    t->piece_rows = piece_rows;
    __atomic_store_n(&t->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->ticket, (uint64_t)generation << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&t->generation, generation, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->lock);
    take_pieces(t, generation, job, pieces, piece_rows);
    for (int spin = 0; spin < kSpins && __atomic_load_n(&t->done, __ATOMIC_ACQUIRE) < pieces; ++spin) pause_briefly();
    pthread_mutex_lock(&t->lock);
    while (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE) < pieces) pthread_cond_wait(&t->changed, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

static team pool;  // used under staging_lock
static member pool_members[kMaxThreads];
static bool pool_started;

/* A child made by fork() has none of the parent's threads: it starts its own
 * team (and its own pinned buffers, if CUDA works there at all). */
static void forget_after_fork(void);
static void register_fork_handler(void) { pthread_atfork(NULL, NULL, forget_after_fork); }

static void forget_after_fork(void) {
    pthread_mutex_init(&staging_lock, NULL);
    pool_started = false;
    pinned[0] = pinned[1] = NULL;
}

/* Called under staging_lock. */
static void ensure_team(void) {
    if (pool_started) return;
    static pthread_once_t registered = PTHREAD_ONCE_INIT;
    pthread_once(&registered, register_fork_handler);
    team_start(&pool, pool_members);
    pool_started = true;
}

/* FASTSGEMM_STAGING_THREADS=0, read once. */
static bool switched_off(void) {
    static int off = -1;
    if (off < 0) off = threads_asked() == 0;
    return off;
}

/* ---- the pipeline ---- */

static bool is_pageable(const void *host) {
    struct cudaPointerAttributes attributes;
    const cudaError_t err = cudaPointerGetAttributes(&attributes, host);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return false;  // let the runtime's own path say what is wrong
    }
    return attributes.type == cudaMemoryTypeUnregistered;
}

static cudaError_t ensure_buffers(void) {
    for (int i = 0; i < 2; ++i) {
        if (pinned[i] != NULL) continue;
        const cudaError_t err = cudaHostAlloc((void **)&pinned[i], kChunkBytes, cudaHostAllocPortable);
        if (err != cudaSuccess) {
            pinned[i] = NULL;
            return err;
        }
    }
    return cudaSuccess;
}

static cudaError_t to_device(unsigned char *dst, size_t dpitch, const unsigned char *src, size_t spitch,
                             size_t width, size_t height, size_t rows_per_chunk, cudaEvent_t done[2],
                             team *crew, cudaStream_t stream) {
    cudaError_t err = cudaSuccess;
    for (size_t row = 0, chunk = 0; row < height && err == cudaSuccess; row += rows_per_chunk, ++chunk) {
        const int b = (int)(chunk % 2);
        const size_t rows = height - row < rows_per_chunk ? height - row : rows_per_chunk;
        if (chunk >= 2 && (err = cudaEventSynchronize(done[b])) != cudaSuccess) break;  // its last chunk has left
        const rows_job job = {.dst = pinned[b], .src = src + row * spitch, .dst_pitch = width, .src_pitch = spitch,
                              .width = width, .rows = rows};
        team_copy(crew, &job);
        err = cudaMemcpy2DAsync(dst + row * dpitch, dpitch, pinned[b], width, width, rows, cudaMemcpyHostToDevice,
                                stream);
        if (err == cudaSuccess) err = cudaEventRecord(done[b], stream);
    }
    return err;
}

static cudaError_t to_host(unsigned char *dst, size_t dpitch, const unsigned char *src, size_t spitch, size_t width,
                           size_t height, size_t rows_per_chunk, cudaEvent_t done[2], team *crew, cudaStream_t stream) {
    const size_t chunks = (height + rows_per_chunk - 1) / rows_per_chunk;
    cudaError_t err = cudaSuccess;
    // Chunk i + 1 is on its way into one buffer while chunk i is copied out of the other.
    for (size_t chunk = 0; chunk <= chunks && err == cudaSuccess; ++chunk) {
        if (chunk < chunks) {
            const size_t row = chunk * rows_per_chunk, rows = height - row < rows_per_chunk ? height - row : rows_per_chunk;
            const int b = (int)(chunk % 2);
            err = cudaMemcpy2DAsync(pinned[b], width, src + row * spitch, spitch, width, rows, cudaMemcpyDeviceToHost,
                                    stream);
            if (err == cudaSuccess) err = cudaEventRecord(done[b], stream);
            if (err != cudaSuccess) break;
        }
        if (chunk == 0) continue;
        const size_t arrived = chunk - 1, row = arrived * rows_per_chunk;
        const size_t rows = height - row < rows_per_chunk ? height - row : rows_per_chunk;
        const int b = (int)(arrived % 2);
        if ((err = cudaEventSynchronize(done[b])) != cudaSuccess) break;
        const rows_job job = {.dst = dst + row * dpitch, .src = pinned[b], .dst_pitch = dpitch, .src_pitch = width,
                              .width = width, .rows = rows};
        team_copy(crew, &job);
    }
    return err;
}

cudaError_t fsg_staged_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                               fsg_copy_direction direction, cudaStream_t stream, bool *staged) {
    *staged = false;
    if (switched_off()) return cudaSuccess;
    const void *host = direction == FSG_TO_DEVICE ? src : dst;
    if (width * height < kStagedFromBytes || width > kChunkBytes || !is_pageable(host)) return cudaSuccess;
    if (pthread_mutex_trylock(&staging_lock) != 0) return cudaSuccess;  // busy: the runtime's path, not a wait

    cudaEvent_t done[2] = {NULL, NULL};
    cudaError_t err = ensure_buffers();
    if (err == cudaErrorMemoryAllocation) {  // no pinned memory to be had: the runtime's path still works
        cudaGetLastError();
        pthread_mutex_unlock(&staging_lock);
        return cudaSuccess;
    }
    *staged = true;
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&done[0], cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&done[1], cudaEventDisableTiming);
    if (err == cudaSuccess) {
        ensure_team();
        // Four chunks or more, so that copies on the host and on the copy engine overlap even for a few MB,
        // but not below kMinChunkBytes, where each chunk's fixed costs would show.
        size_t chunk_bytes = width * height / 4;
        chunk_bytes = chunk_bytes < kMinChunkBytes ? kMinChunkBytes : chunk_bytes > kChunkBytes ? kChunkBytes : chunk_bytes;
        const size_t rows_per_chunk = chunk_bytes / width > 0 ? chunk_bytes / width : 1;
        err = direction == FSG_TO_DEVICE
                  ? to_device(dst, dpitch, src, spitch, width, height, rows_per_chunk, done, &pool, stream)
                  : to_host(dst, dpitch, src, spitch, width, height, rows_per_chunk, done, &pool, stream);
        // The buffers must be idle before anyone else uses them, whatever happened above.
        const cudaError_t drained = cudaStreamSynchronize(stream);
        if (err == cudaSuccess) err = drained;
    }
    for (int i = 0; i < 2; ++i)
        if (done[i] != NULL) cudaEventDestroy(done[i]);
    pthread_mutex_unlock(&staging_lock);
    return err;
}

void fsg_prefault_host(void *ptr, size_t bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uintptr_t first = ((uintptr_t)ptr + page - 1) / page * page, last = ((uintptr_t)ptr + bytes) / page * page;
    if (switched_off() || bytes < kStagedFromBytes || last <= first || !is_pageable(ptr)) return;
    if (pthread_mutex_trylock(&staging_lock) != 0) return;  // the team is busy: the copy will fault them in itself
    ensure_team();
    // Pieces of 2 MiB: with transparent huge pages one fault fills a whole one, and two threads on one would wait.
    const rows_job job = {.dst = (unsigned char *)first, .src = NULL, .dst_pitch = page, .width = page,
                          .rows = (last - first) / page, .piece_bytes = (size_t)2 << 20};
    team_copy(&pool, &job);
    pthread_mutex_unlock(&staging_lock);
}
