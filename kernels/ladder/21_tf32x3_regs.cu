/*
 * Rung 21, tf32x3_regs: rung 20's three products with A split in the
 * consumers' registers, so that only B is packed.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): on other devices the
 * launcher runs rung 18 (tf32x3_mma), as rung 20's does.
 *
 * The idea. Rung 20's pack pass reads A and B and writes hi and lo of both:
 * (MK + KN) x 12 bytes through DRAM before the GEMM starts. Only B has to be
 * in shared memory for wgmma; A may come from registers. So here the copy
 * engine brings A's tiles raw, in FP32, and each consumer thread loads its own
 * fragment of them, splits it into hi and lo with the same two roundings as
 * the pack pass, and hands both to wgmma from registers. Only B is packed:
 * KN x 12 bytes. Where A is the large operand that is most of the pack pass:
 * a stack of 32 products (1024 x 1024) @ (1024 x 1024) with B shared runs as
 * one 32768 x 1024 x 1024 product, whose A is 128 MiB and its B 4 MiB.
 *
 * The change from rung 20:
 *   - A's k-tile arrives by one tensor copy (cp.async.bulk.tensor) from the
 *     caller's matrix: a 128 x 32 box of FP32 in the same 128-byte swizzle
 *     as a packed tile, zeros outside the matrix (the tensor map, made on the
 *     host through the driver's cuTensorMapEncodeTiled, gives the copy engine
 *     the shape and strides; no edge code).
 *   - Only B goes through the pack pass.
 *   - A stage holds raw A (16 KiB) and packed B hi and lo (32 KiB): 48 KiB
 *     against rung 20's 64, so the ring is four stages deep, not three.
 *   - A consumer thread reads 16 values of A per k-tile (rows r and r + 8,
 *     k = c and c + 4 of each k-step of 8, wgmma's register layout). The
 *     swizzle puts the 8 rows a warp's lanes read at one k (rows r, r + 1,
 *     ..., r + 7) in 8 different 16-byte chunks of their 128-byte rows: no
 *     bank conflicts.
 *   - The products, the order of the sums and the split are rung 20's, so
 *     the result is the same, bit for bit (tests/test_tensorcore.py).
 *
 * Tile parameters: 128 x 128 x 32 block tile, as rung 20's: each consumer
 * warpgroup owns 64 rows and keeps 192 accumulators a thread (the main
 * term's running sum, this tile's main term, the corrections) plus A's
 * fragment registers, hi and lo of two k-steps at a time (16): within the 232
 * registers a thread that the block can give, once the fragments' addresses
 * are worked out where they are used (split_fragments).
 *
 * Limits: the tensor copy needs A row-major (k contiguous), 16-byte aligned,
 * with lda a multiple of 4 floats. Anything else, a call whose B workspace
 * cannot be had, and wgmma-less devices run rung 18 (tf32x3_mma). The
 * engine's copy (kernel="tf32x3_regs") runs rung 20's packed path there
 * instead, the same numbers bit for bit, and a stack in one launch (products
 * on grid z, every product's B packed in one pass, a shared B once). Stacks
 * here: product by product. A workspace of 2 n k floats, from the default
 * pool as in rung 19.
 *
 * Next: B still passes through DRAM three times (read, packed, read back).
 * The direct path takes the pack pass away, but its producers' split of B
 * still sets its pace (slower at 4096^3 than the packed path;
 * benchmarks/NOTES.md).
 */
#ifndef FASTSGEMM_LADDER_21_TF32X3_REGS
#define FASTSGEMM_LADDER_21_TF32X3_REGS

#include <cuda.h>  // CUtensorMap and the driver's tensor-map encoder, reached through the runtime

#include "common.cuh"
#include "support/device_memory.h"  // the workspace is counted against fastsgemm's memory limit

namespace fsg {
namespace lesson {
namespace tf32x3_regs {

// ---- tile parameters ----
constexpr int kBK = 32;                           // tile depth: 32 TF32 values make one 128-byte swizzled row
constexpr int kTileRows = 128;                    // rows (m or n) of one packed tile
constexpr int kTileFloats = kTileRows * kBK;      // one packed tile: 16 KiB
constexpr uint32_t kTileBytes = kTileFloats * sizeof(float);
constexpr int kBM = 128, kBN = 128;               // block tile: one tensor box of A, one packed tile of B
constexpr int kAFloats = kBM * kBK;               // raw A: 128 rows x 32 k, FP32, 16 KiB
constexpr int kStageFloats = kAFloats + 2 * kTileFloats;  // raw A, B hi, B lo: 48 KiB
constexpr int kStages = 4;
constexpr int kKSteps = kBK / 8;  // wgmma k-steps of 8 per k-tile
constexpr int kStepsAtOnce = 2;   // k-steps whose A fragments are held at once (below)
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
/* The same with A from registers: a thread's a[4] is its fragment of the
 * warpgroup's 64 x 8 A in mma.sync's m16n8k8 layout (warp w: rows 16 w ..
 * 16 w + 15; lane l: rows l / 4 and l / 4 + 8 at k = l % 4 and l % 4 + 4:
 * a[0] (r, k), a[1] (r + 8, k), a[2] (r, k + 4), a[3] (r + 8, k + 4)). The
 * instruction reads a[] while it runs: they stay unchanged until the wait. */
__device__ __forceinline__ void wgmma_64x128x8_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
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

/* Keeps registers an asynchronous wgmma reads (its A fragment) alive and unchanged up to this point. */
template <int SIZE>
__device__ __forceinline__ void touch_registers(uint32_t (&r)[SIZE]) {
#pragma unroll
    for (int i = 0; i < SIZE; ++i) asm volatile("" : "+r"(r[i])::"memory");
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

/* A box of a 2-D tensor (a tensor map made on the host, passed as a
 * __grid_constant__ kernel parameter) from global to shared memory by the
 * copy engine, at element coordinates (x, y), x the contiguous one; elements
 * outside the tensor arrive as zeros. Reported to bar as they land. */
__device__ __forceinline__ void tensor_load_2d(float *dst, const void *map, int x, int y, uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(smem_address(dst)),
        "l"(map), "r"(x), "r"(y), "r"(smem_address(bar))
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

/* x = hi + lo, both TF32 (rung 18's split, rounding to nearest even). */
__device__ __forceinline__ void split(float x, float &hi, float &lo) {
    hi = round_tf32(x);
    lo = round_tf32(x - hi);
}
__device__ __forceinline__ void split(float x, uint32_t &hi, uint32_t &lo) {
    float h, l;
    split(x, h, l);
    hi = __float_as_uint(h);
    lo = __float_as_uint(l);
}

/* The split product's sum: main term plus corrections, except where the main
 * term is Inf or NaN, which is then the answer (rung 18's header says why). */
__device__ __forceinline__ float combine(float main, float corrections) {
    return isfinite(main) ? main + corrections : main;
}

// ---- kernel: the pack pass ----
/* One operand: `rows` rows (m for A, n for B) of `depth` k, stored with k
 * contiguous (along_k: element (row, k) at src[row * ld + k]) or rows
 * contiguous (src[k * ld + row]), split into packed tiles at dst: row tile
 * r's tiles_k tiles one after another, each a hi tile and then a lo tile, so a
 * block reads its operand as one contiguous run. Block id packs row tile id /
 * tiles_k, k-tile id % tiles_k.
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
    float *out = dst + id * 2 * kTileFloats;
    for (int r = warp; r < kTileRows; r += kWarps) {  // a warp writes one row: a 128-byte line, swizzled within
        const int at = operand_offset(r, lane);
        split(tile[r][lane], out[at], out[kTileFloats + at]);
    }
}

// ---- kernel: the GEMM ----
/* A consumer thread's share of k-steps first_step .. first_step + STEPS - 1
 * of a raw A tile, split as the pack pass splits (hi + lo = A, both TF32), in
 * wgmma's register layout: the thread's rows are row and row + 8, its k col
 * and col + 4 of each k-step. Element (r, k) of the tile lies as in a packed
 * tile (operand_offset): chunk c = k / 4 of row r at position c ^ (r % 8).
 * One XOR and an add a value, worked out here rather than 8 addresses kept
 * across the main loop: those spilled to local memory. */
template <int STEPS>
__device__ __forceinline__ void split_fragments(const float *raw_a, int row, int col, int first_step,
                                                uint32_t (&hi)[STEPS][4], uint32_t (&lo)[STEPS][4]) {
    const float *a_row = raw_a + row * kBK + col;  // this thread's row of the tile, at its k in chunk 0
    int swizzle = (row % 8) * 4;                   // the swizzle's XOR on the row's float offsets
    asm volatile("" : "+r"(swizzle));              // made here, each time: not hoisted into a live register
#pragma unroll
    for (int j = 0; j < STEPS; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int chunk = 2 * (first_step + j) + i / 2;
            split(a_row[((chunk * 4) ^ swizzle) + (i % 2) * 8 * kBK], hi[j][i], lo[j][i]);
        }
}

/* Rung 20's three products on STEPS k-steps (first_step on) of a stage, A
 * from this thread's fragments, B hi and lo from shared memory: part (+)=
 * hi_a hi_b (afresh at the tile's first k-step), corr += lo_a hi_b + hi_a
 * lo_b, in rung 20's order; issued, then waited for. */
template <int STEPS>
__device__ __forceinline__ void three_products(float (&part)[64], float (&corr)[64], uint32_t (&a_hi)[STEPS][4],
                                               uint32_t (&a_lo)[STEPS][4], const float *b_hi, const float *b_lo,
                                               int first_step) {
    wgmma_fence();  // the fragments' registers are written: wgmma may read them
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
        const int ks = first_step + j;
        const uint64_t db = descriptor(b_hi + 8 * ks);
        wgmma_64x128x8_rs(part, a_hi[j], db, ks > 0);
        wgmma_64x128x8_rs(corr, a_lo[j], db, 1);
        wgmma_64x128x8_rs(corr, a_hi[j], descriptor(b_lo + 8 * ks), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    touch(corr);
    touch(part);
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {  // read by the wgmmas until the wait: not reused before it
        touch_registers(a_hi[j]);
        touch_registers(a_lo[j]);
    }
}

/* D = alpha A B + beta C, one block per 128 x 128 output tile: A's k-tiles by
 * tensor copies from the caller's matrix (a_map: x = k, y = row of A), B's
 * from the packed B, whose row tile holds tiles_k tiles (hi, then lo). A
 * split-K block (grid z) takes its slice's run of k-tiles and its own D. */
static __global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32x3_regs_kernel(const __grid_constant__ CUtensorMap a_map, fsg_gemm problem, const float *packed_b,
                             int tiles_k) {
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
        // Producer: one thread, a tensor copy of A and a bulk copy of B's hi and lo a stage.
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            const float *b = packed_b + ((int64_t)tile_n * tiles_k + first) * 2 * kTileFloats;
            for (int t = 0; t < count; ++t) {
                const int s = t % kStages;
                if (t >= kStages) mbarrier_wait(&empty[s], (t / kStages - 1) & 1);  // tile t - kStages is read
                mbarrier_arrive_expect(&full[s], kStageFloats * sizeof(float));
                float *stage = stages + s * kStageFloats;
                tensor_load_2d(stage, &a_map, (first + t) * kBK, tile_m * kBM, &full[s]);  // raw A
                bulk_load(stage + kAFloats, b + (int64_t)t * 2 * kTileFloats, 2 * kTileBytes, &full[s]);
            }
        }
    } else {
        // Consumers: 64 rows of the block tile each; A's fragments split in registers, two k-steps at a time.
        registers_up<kConsumerRegisters>();
        const int consumer = warpgroup - 1, warp = (tid % 128) / 32, lane = tid % 32;
        // This thread's rows of A (and of wgmma's A fragment): row and row + 8; its k: col and col + 4 of each k-step.
        const int frag_row = consumer * kWgRows + warp * 16 + lane / 4, frag_col = lane % 4;
        float corr[64] = {};  // the corrections, summed by the tensor core
        float main[64] = {};  // the main term's running sum (FADD)
        float part[64];       // this tile's main term, out of the tensor core
        for (int t = 0; t < count; ++t) {
            const int s = t % kStages;
            mbarrier_wait(&full[s], (t / kStages) & 1);
            const float *a = stages + s * kStageFloats;
            const float *b_hi = a + kAFloats, *b_lo = b_hi + kTileFloats;
            // A wait between the two halves of the tile, while the other consumer's wgmmas keep the tensor cores busy.
#pragma unroll
            for (int half = 0; half < kKSteps / kStepsAtOnce; ++half) {
                uint32_t a_hi[kStepsAtOnce][4], a_lo[kStepsAtOnce][4];
                split_fragments(a, frag_row, frag_col, half * kStepsAtOnce, a_hi, a_lo);
                three_products(part, corr, a_hi, a_lo, b_hi, b_lo, half * kStepsAtOnce);
            }
            mbarrier_arrive(&empty[s]);  // this stage's reads are done: the producer may refill it
            // The other consumer's wgmmas keep the tensor cores busy while these FADDs run.
#pragma unroll
            for (int i = 0; i < 64; ++i) main[i] += part[i];
        }

        // The epilogue. Accumulator i of an m64n128 result is element i % 4 of n8 block i / 4 in mma.sync's
        // m16n8 layout: warp w of the warpgroup holds rows 16 w .. 16 w + 15.
        const int64_t row = (int64_t)tile_m * kBM + consumer * kWgRows + warp * 16 + lane / 4;
        const int64_t col = (int64_t)tile_n * kBN + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            const int64_t r = row + 8 * ((i % 4) / 2), c = col + 8 * (i / 4) + i % 2;
            if (r < g.m && c < g.n) store_d(g, r, c, combine(main[i], corr[i]));
        }
    }
}

// ---- launcher ----
using EncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled, found once through the runtime (the
 * extension links no driver library); null where the driver lacks it. */
inline EncodeTiled encode_tiled() {
    static const EncodeTiled found = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult status;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status) !=
                cudaSuccess ||
            status != cudaDriverEntryPointSuccess)
            fn = nullptr;
        if (fn == nullptr) (void)cudaGetLastError();  // a failed query is not the caller's error: not left pending
        return reinterpret_cast<EncodeTiled>(fn);
    }();
    return found;
}

/* A's tensor map: x = k (contiguous), y = row, boxes of 32 k x 128 rows in
 * the 128-byte swizzle, zeros outside. False, and no map, where the copy
 * engine cannot read A so: A column-major, an address or a stride it cannot
 * take (16-byte multiples), coordinates past an int, or no encoder. */
inline bool a_tensor_map(const fsg_gemm &g, CUtensorMap *map) {
    if (g.a_trans || reinterpret_cast<uintptr_t>(g.a) % 16 != 0 || g.lda % 4 != 0 || g.k > INT32_MAX ||
        g.m > INT32_MAX - kBM)
        return false;
    const EncodeTiled encode = encode_tiled();
    if (encode == nullptr) return false;
    const cuuint64_t sizes[2] = {(cuuint64_t)g.k, (cuuint64_t)g.m};
    const cuuint64_t strides[1] = {(cuuint64_t)g.lda * sizeof(float)};
    const cuuint32_t box[2] = {kBK, kBM}, unit[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float *>(g.a), sizes, strides, box, unit,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* B's pack pass and the GEMM, on a workspace allocated on the stream for the
 * call. *launched stays false (and nothing is enqueued) where this path
 * cannot run: k == 0 (D = beta C: nothing to multiply), a split that is not
 * whole k-tiles, grids past their limits, A the copy engine cannot read
 * (a_tensor_map), or no memory for the workspace. */
inline cudaError_t launch(const fsg_gemm *g, cudaStream_t stream, bool *launched) {
    *launched = false;
    const int64_t tiles_m = ceil_div(g->m, kBM), tiles_n = ceil_div(g->n, kBN), tiles_k = ceil_div(g->k, kBK);
    CUtensorMap a_map;
    if (g->k == 0 || g->k_slice % kBK != 0 || tiles_m * tiles_n > INT32_MAX || tiles_n * tiles_k > INT32_MAX ||
        tiles_k > INT32_MAX / kBK || !a_tensor_map(*g, &a_map))
        return cudaSuccess;
    const size_t bytes = (size_t)(tiles_n * tiles_k) * 2 * kTileFloats * sizeof(float);  // B's hi and lo
    if (fsg_memory_take(-1, bytes) != cudaSuccess) {
        char forgotten[8];
        (void)fsg_memory_refusal(forgotten, sizeof forgotten);  // not this call's error: rung 18 runs instead
        return cudaSuccess;
    }
    float *packed = nullptr;
    cudaError_t err = cudaMallocAsync(reinterpret_cast<void **>(&packed), bytes, stream);
    if (err != cudaSuccess) {
        fsg_memory_give(-1, bytes);
        if (err != cudaErrorMemoryAllocation) return err;
        (void)cudaGetLastError();  // out of memory is not sticky: cleared, and rung 18 runs instead
        return cudaSuccess;
    }
    *launched = true;
    pack_kernel<<<(unsigned)(tiles_n * tiles_k), kPackThreads, 0, stream>>>(g->b, g->ldb, g->n, g->b_trans, g->k,
                                                                          tiles_k, packed);
    const dim3 grid((unsigned)(tiles_m * tiles_n), 1, slice_count(*g));
    launch_with_smem(wgmma_tf32x3_regs_kernel, grid, kThreads, kSmemBytes, stream, a_map, *g, (const float *)packed,
                     (int)tiles_k);
    err = cudaGetLastError();
    const cudaError_t freed = cudaFreeAsync(packed, stream);  // after the GEMM, in stream order
    if (freed == cudaSuccess) fsg_memory_give(-1, bytes);
    return err != cudaSuccess ? err : freed;
}

}  // namespace tf32x3_regs
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file alone) ----
/* kernel="tf32x3_regs:lesson": this path on compute capability 9.0 (the one
 * its code is built for, sm_90a) unless it declines the call; rung 18
 * otherwise. kernel="tf32x3_regs" runs the engine's copy
 * (kernels/engine/tf32x3_regs.cuh), with stacks in one launch and rung 20's
 * packed path where A cannot be read by tensor copies. */
extern "C" cudaError_t fsg_tf32x3_regs_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    int device, major, minor;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    if (major == 9 && minor == 0) {
        bool launched = false;
        err = fsg::lesson::tf32x3_regs::launch(g, stream, &launched);
        if (err != cudaSuccess || launched) return err;
    }
    return fsg_tf32x3_mma_sgemm(g, stream);
}

#endif /* FASTSGEMM_LADDER_21_TF32X3_REGS */
