/*
 * Rung 19, tf32: Hopper's wgmma, fed by a packing pass and bulk copies, on
 * operands rounded to TF32.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): the launcher runs it on
 * devices of compute capability 9.0 and runs rung 17 (tf32_mma) on any
 * other device, and where this path declines (k == 0, a split that is not
 * whole k-tiles, a workspace that cannot be had).
 *
 * Rung 17's mma.sync kernel runs far short of cuBLAS's TF32 speed on the
 * H100: every lane loads its fragments from shared memory into registers
 * before each MMA, and those loads, not the tensor cores, set the pace.
 * wgmma, issued by a warpgroup (4 warps), reads both operands straight from
 * shared memory and runs asynchronously; what remains is to bring the tiles
 * there, rounded, as fast as the tensor cores eat them. Four pieces do that,
 * each in its own section below:
 *   1. The pack pass (pack_kernel): rounding to TF32 cannot happen inside the
 *      GEMM cheaply (benchmarks/NOTES.md: rounding in shared memory doubled
 *      its traffic; rounding in registers stalled on a fence per thread). So
 *      a small kernel reads each operand once, in whatever layout it has,
 *      rounds every element to nearest (cvt.rn) and writes it to a workspace
 *      as ready operand tiles: 128 rows (m, or n for B) x 32 k, k contiguous,
 *      in wgmma's 128-byte swizzle, zeros past the edges. A tile is 16 KiB of
 *      contiguous memory.
 *   2. Bulk copies (cp.async.bulk): the copy engine moves a whole packed tile
 *      from global to shared memory on one thread's request, with no address
 *      work and no registers, and reports its bytes to an mbarrier.
 *   3. An mbarrier ring: kStages stages, each with a `full` barrier (its
 *      bytes have landed) and an `empty` one (the wgmmas have finished
 *      reading it), so that the copies of later tiles run while earlier ones
 *      are multiplied.
 *   4. Warp specialization: one producer warpgroup, of which a single thread
 *      issues the copies (the others hand their registers to the consumers
 *      with setmaxnreg), and two consumer warpgroups that do nothing but
 *      wgmma.
 *
 * What changed from rung 18: everything but the split (which this rung does
 * not do: it rounds) and the epilogue. The mma.sync kernel and its cp.async
 * tiles are gone; the Hopper instructions are wrapped once each below.
 *
 * Tile parameters: 128 x 256 x 32 block tile: each consumer warpgroup owns 64
 * rows and issues two m64n128k8 per k-step of 8, 128 accumulators a thread.
 * A stage brings one packed tile of A and two of B, 48 KiB, for twice the
 * FLOPs of a 128 x 128 tile's 32 KiB. The consumers keep one tile's wgmma
 * group in flight while they issue the next (wait_group 1). The sums stay in
 * the tensor core's FP32 accumulators, as in rung 17 and cuBLAS's TF32 mode.
 * Blocks walk the output in groups of kGroupRows block rows (rung 4's
 * order), so the blocks resident together share their tiles in L2.
 *
 * Limits: sm_90a only (elsewhere rung 17 runs); a workspace of (m + n) x k
 * floats, rounded up to whole tiles, allocated on the call's stream for the
 * call and counted against fastsgemm's device memory limit (where it cannot
 * be had, rung 17 runs); 4 x 48 KiB stages, one block an SM. Split-K slices
 * on grid z as every rung. Stacks: product by product, a pack pass and a
 * GEMM each.
 * The workspace comes from the device's default stream-ordered pool, which
 * hands its memory back at each synchronization: a call after one maps it
 * afresh, which the engine's own pool (kernels/support/workspace_pool.c)
 * avoids, so this lesson's times include that where the caller synchronizes.
 * Next: rung 20 buys FP32 accuracy back on this pipeline, as rung 18 did on
 * rung 17's.
 */
#ifndef FASTSGEMM_LADDER_19_TF32
#define FASTSGEMM_LADDER_19_TF32

#include "common.cuh"
#include "support/device_memory.h"  // the workspace is counted against fastsgemm's memory limit

namespace fsg {
namespace lesson {
namespace tf32 {

// ---- tile parameters ----
constexpr int kBK = 32;                           // tile depth: 32 TF32 values make one 128-byte swizzled row
constexpr int kTileRows = 128;                    // rows (m or n) of one packed tile
constexpr int kTileFloats = kTileRows * kBK;      // one packed tile: 16 KiB
constexpr uint32_t kTileBytes = kTileFloats * sizeof(float);
constexpr int kBM = 128, kBN = 256;               // block tile: one packed tile of A, two of B
constexpr int kBTiles = kBN / kTileRows;
constexpr int kStageFloats = (1 + kBTiles) * kTileFloats;  // A, then B's tiles: 48 KiB
constexpr int kStages = 4;
constexpr int kProducerThreads = 128, kConsumerThreads = 256;  // one warpgroup, two
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kWgRows = 64;                                     // rows of D per consumer warpgroup
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;  // 128 x 40 + 256 x 232 <= 384 x 168
constexpr int kGroupRows = 8;
constexpr int kPackThreads = 256;
constexpr size_t kSmemBytes = (size_t)kStages * kStageFloats * sizeof(float) + 2 * kStages * sizeof(uint64_t);
static_assert(kBK * sizeof(float) == 128, "the 128-byte swizzle wants rows of exactly 128 bytes");

// ---- the Hopper instructions, each wrapped once ----
/* A pointer into shared memory as the 32-bit shared-window address PTX takes. */
__device__ __forceinline__ uint32_t smem_address(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Element (row, k) of a packed tile: rows of 128 bytes; 16-byte chunk c of row
 * r at chunk position c ^ (r % 8). 8 rows make a 1024-byte swizzle atom. The
 * XOR spreads the pack pass's stores and the tensor cores' reads of one
 * k-step over all banks. */
__device__ __forceinline__ int operand_offset(int row, int k) {
    return row * kBK + (((k / 4) ^ (row % 8)) * 4) + k % 4;
}

/* wgmma's shared-memory descriptor of a K-major tile in the 128-byte swizzle:
 * the start address and the atoms' stride (1024 bytes), both in 16-byte
 * units, and swizzle mode 1 in bits 62-63. A k-step of 8 moves the start by
 * 32 bytes; the hardware applies the same XOR as operand_offset. */
__device__ __forceinline__ uint64_t descriptor(const float *smem) {
    const uint32_t address = smem_address(smem);
    return (uint64_t)((address & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

/* d += A * B for a 64 x 128 x 8 tile, A and B^T from descriptors: 64
 * accumulators a thread (accumulate == 0: the old d is ignored). It runs
 * asynchronously: d may be read only after a wgmma_wait. */
__device__ __forceinline__ void wgmma_64x128x8(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/* Waits until at most N committed wgmma groups of this warpgroup are still running. */
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
/* Tells the compiler the asynchronous wgmmas may have changed d: no read of d moves above the wait. */
__device__ __forceinline__ void touch(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* mbarriers: a phase completes when `count` arrivals have come and the bytes
 * announced by expect_tx have landed; a waiter names the phase by its parity. */
__device__ __forceinline__ void mbarrier_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
/* Arrives, and tells the barrier that `bytes` more will land by bulk copies before its phase completes. */
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t *bar, int parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_address(bar)), "r"(parity)
            : "memory");
}

/* `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to
 * shared memory by the copy engine, reported to bar as they land. */
__device__ __forceinline__ void bulk_load(float *dst, const float *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_address(dst)),
                 "l"(src), "r"(bytes), "r"(smem_address(bar))
                 : "memory");
}

/* setmaxnreg: the producer warpgroup gives registers up, the consumers take them. */
template <int N>
__device__ __forceinline__ void registers_down() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void registers_up() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

/* x rounded to TF32, to nearest even (one F2FP instruction on Hopper). */
__device__ __forceinline__ float round_tf32(float x) {
    uint32_t r;
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

// ---- kernel: the pack pass ----
/* One operand: `rows` rows (m for A, n for B) of `depth` k, stored with k
 * contiguous (along_k: element (row, k) at src[row * ld + k]) or rows
 * contiguous (src[k * ld + row]), into packed tiles at dst: row tile r's
 * tiles_k tiles one after another, so a block reads its operand as one
 * contiguous run. Block id packs row tile id / tiles_k, k-tile id % tiles_k.
 * It passes through shared memory so that both the reads, in the source's
 * order, and the writes, along k, are whole 128-byte lines; the padding
 * column keeps the transposing case free of bank conflicts. */
static __global__ void __launch_bounds__(kPackThreads) pack_kernel(const float *src, int64_t ld, int64_t rows, bool along_k,
                                                             int64_t depth, int64_t tiles_k, float *dst) {
    __shared__ float tile[kTileRows][kBK + 1];
    const int64_t id = blockIdx.x, row0 = id / tiles_k * kTileRows, k0 = id % tiles_k * kBK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kWarps = kPackThreads / 32;
    if (along_k) {
        for (int r = warp; r < kTileRows; r += kWarps) {  // a warp reads 32 k of one row
            const int64_t row = row0 + r, k = k0 + lane;
            tile[r][lane] = row < rows && k < depth ? src[row * ld + k] : 0.0f;
        }
    } else {
        for (int kk = warp; kk < kBK; kk += kWarps)  // a warp reads 32 rows at one k
            for (int r = lane; r < kTileRows; r += 32) {
                const int64_t row = row0 + r, k = k0 + kk;
                tile[r][kk] = row < rows && k < depth ? src[k * ld + row] : 0.0f;
            }
    }
    __syncthreads();
    float *out = dst + id * kTileFloats;
    for (int r = warp; r < kTileRows; r += kWarps)  // a warp writes one row: a 128-byte line, swizzled within
        out[operand_offset(r, lane)] = round_tf32(tile[r][lane]);
}

// ---- kernel: the GEMM ----
/* D = alpha A B + beta C from the packed operands, one block per 128 x 256
 * output tile: A's row tile holds tiles_k tiles, one per k-tile, and so does
 * each of B's. A split-K block (grid z) takes its slice's run of them and
 * its own D (common.cuh's this_slice). */
static __global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32_kernel(fsg_gemm problem, const float *packed_a, const float *packed_b, int tiles_k) {
    const fsg_gemm g = this_slice(problem);
    const int64_t slice_tiles = problem.k_slice / kBK;  // 0: K whole (k_slice may be past k: one slice)
    const int per_slice = slice_tiles > 0 && slice_tiles < tiles_k ? (int)slice_tiles : tiles_k;
    const int first = blockIdx.z * per_slice, count = per_slice < tiles_k - first ? per_slice : tiles_k - first;

    // Shared memory: the stages, then a full and an empty barrier per stage. Swizzle atoms want 1024-byte alignment.
    extern __shared__ __align__(1024) float4 smem[];
    float *stages = reinterpret_cast<float *>(smem);
    uint64_t *full = reinterpret_cast<uint64_t *>(stages + kStages * kStageFloats), *empty = full + kStages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(&full[s], 1);                  // the producer's arrival (and the stage's bytes)
            mbarrier_init(&empty[s], kConsumerThreads);  // every consumer thread, once its wgmmas have read it
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();

    // This block's output tile, in groups of kGroupRows block rows walked column by column (rung 4's order).
    const int tiles_m = (int)ceil_div(g.m, kBM), tiles_n = (int)ceil_div(g.n, kBN), id = blockIdx.x;
    const int per_group = kGroupRows * tiles_n, group_row = id / per_group * kGroupRows;
    const int group_rows = tiles_m - group_row < kGroupRows ? tiles_m - group_row : kGroupRows;
    const int tile_m = group_row + id % per_group % group_rows, tile_n = id % per_group / group_rows;

    const int tid = threadIdx.x, warpgroup = tid / 128;
    if (warpgroup == 0) {
        // Producer: one thread, three bulk copies a stage; the rest of the warpgroup only gives its registers up.
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            const float *a = packed_a + ((int64_t)tile_m * tiles_k + first) * kTileFloats;
            const float *b = packed_b + ((int64_t)tile_n * kBTiles * tiles_k + first) * kTileFloats;
            for (int t = 0; t < count; ++t) {
                const int s = t % kStages;
                if (t >= kStages) mbarrier_wait(&empty[s], (t / kStages - 1) & 1);  // tile t - kStages is read
                mbarrier_arrive_expect(&full[s], kStageFloats * sizeof(float));
                float *stage = stages + s * kStageFloats;
                bulk_load(stage, a + (int64_t)t * kTileFloats, kTileBytes, &full[s]);
                for (int j = 0; j < kBTiles; ++j)
                    bulk_load(stage + (1 + j) * kTileFloats, b + ((int64_t)j * tiles_k + t) * kTileFloats,
                              kTileBytes, &full[s]);
            }
        }
    } else {
        // Consumers: 64 rows of the block tile each, nothing but wgmma.
        registers_up<kConsumerRegisters>();
        const int consumer = warpgroup - 1;
        float acc[kBTiles][64] = {};
        for (int t = 0; t < count; ++t) {
            const int s = t % kStages;
            mbarrier_wait(&full[s], (t / kStages) & 1);
            const float *a = stages + s * kStageFloats + consumer * kWgRows * kBK;
            const float *b = stages + s * kStageFloats + kTileFloats;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kBK / 8; ++ks) {  // k-steps of 8: 32 bytes along each 128-byte row
                const uint64_t da = descriptor(a + 8 * ks);
#pragma unroll
                for (int j = 0; j < kBTiles; ++j)
                    wgmma_64x128x8(acc[j], da, descriptor(b + j * kTileFloats + 8 * ks), 1);
            }
            wgmma_commit();
            wgmma_wait<1>();  // tile t - 1's group has finished: its stage may be refilled
            if (t > 0) mbarrier_arrive(&empty[(t - 1) % kStages]);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int j = 0; j < kBTiles; ++j) touch(acc[j]);

        // The epilogue. Accumulator i of an m64n128 result is element i % 4 of n8 block i / 4 in mma.sync's
        // m16n8 layout: warp w of the warpgroup holds rows 16 w .. 16 w + 15.
        const int warp = (tid % 128) / 32, lane = tid % 32;
        const int64_t row = (int64_t)tile_m * kBM + consumer * kWgRows + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < kBTiles; ++j) {
            const int64_t col = (int64_t)tile_n * kBN + j * kTileRows + 2 * (lane % 4);
#pragma unroll
            for (int i = 0; i < 64; ++i) {
                const int64_t r = row + 8 * ((i % 4) / 2), c = col + 8 * (i / 4) + i % 2;
                if (r < g.m && c < g.n) store_d(g, r, c, acc[j][i]);
            }
        }
    }
}

// ---- launcher ----
/* The pack pass and the GEMM, on a workspace allocated on the stream for the
 * call. *launched stays false (and nothing is enqueued) where this path
 * cannot run: k == 0 (D = beta C: nothing to multiply), a split that is not
 * whole k-tiles, grids past their limits, or no memory for the workspace. */
inline cudaError_t launch(const fsg_gemm *g, cudaStream_t stream, bool *launched) {
    *launched = false;
    const int64_t tiles_m = ceil_div(g->m, kBM), tiles_n = ceil_div(g->n, kBN), tiles_k = ceil_div(g->k, kBK);
    const int64_t row_tiles_b = tiles_n * kBTiles;  // B packed in whole block tiles; the last may be zeros
    if (g->k == 0 || g->k_slice % kBK != 0 || tiles_m * tiles_n > INT32_MAX ||
        (tiles_m + row_tiles_b) * tiles_k > INT32_MAX)
        return cudaSuccess;
    const size_t floats_a = (size_t)(tiles_m * tiles_k) * kTileFloats;
    const size_t bytes = (floats_a + (size_t)(row_tiles_b * tiles_k) * kTileFloats) * sizeof(float);
    if (fsg_memory_take(-1, bytes) != cudaSuccess) {
        char forgotten[8];
        (void)fsg_memory_refusal(forgotten, sizeof forgotten);  // not this call's error: rung 17 runs instead
        return cudaSuccess;
    }
    float *packed = nullptr;
    cudaError_t err = cudaMallocAsync(reinterpret_cast<void **>(&packed), bytes, stream);
    if (err != cudaSuccess) {
        fsg_memory_give(-1, bytes);
        if (err != cudaErrorMemoryAllocation) return err;
        (void)cudaGetLastError();  // out of memory is not sticky: cleared, and rung 17 runs instead
        return cudaSuccess;
    }
    *launched = true;
    pack_kernel<<<(unsigned)(tiles_m * tiles_k), kPackThreads, 0, stream>>>(g->a, g->lda, g->m, !g->a_trans, g->k,
                                                                          tiles_k, packed);
    pack_kernel<<<(unsigned)(row_tiles_b * tiles_k), kPackThreads, 0, stream>>>(g->b, g->ldb, g->n, g->b_trans, g->k,
                                                                              tiles_k, packed + floats_a);
    const dim3 grid((unsigned)(tiles_m * tiles_n), 1, slice_count(*g));
    launch_with_smem(wgmma_tf32_kernel, grid, kThreads, kSmemBytes, stream, *g, (const float *)packed,
                     (const float *)(packed + floats_a), (int)tiles_k);
    err = cudaGetLastError();
    const cudaError_t freed = cudaFreeAsync(packed, stream);  // after the GEMM, in stream order
    if (freed == cudaSuccess) fsg_memory_give(-1, bytes);
    return err != cudaSuccess ? err : freed;
}

}  // namespace tf32
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file alone) ----
/* kernel="tf32:lesson": this path on compute capability 9.0 (the one its code
 * is built for, sm_90a) unless it declines the call; rung 17 otherwise.
 * kernel="tf32" runs the engine's copy (kernels/engine/tf32.cuh), with stacks
 * in one launch and K panels where the workspace is short. */
extern "C" cudaError_t fsg_tf32_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    int device, major, minor;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    if (major == 9 && minor == 0) {
        bool launched = false;
        err = fsg::lesson::tf32::launch(g, stream, &launched);
        if (err != cudaSuccess || launched) return err;
    }
    return fsg_tf32_mma_sgemm(g, stream);
}

#endif /* FASTSGEMM_LADDER_19_TF32 */
