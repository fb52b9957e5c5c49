/*
 * Rung 22, tf32x3_inplace: rung 21's three products with no pack pass. Both
 * operands arrive raw by tensor copies; the one wgmma reads from shared memory
 * is split there, in place, and the other in the consumers' registers, as
 * rung 21 splits A.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): on other devices the
 * launcher runs rung 18 (tf32x3_mma), as rung 21's does.
 *
 * The idea. Rung 21 still packs B in a pass of its own: B read, hi and lo
 * written, and read back by the GEMM, through DRAM, before the GEMM starts.
 * For a stack of small products that pass is a large share of the call
 * (benchmarks/NOTES.md). wgmma wants its shared-memory operand K-major, and
 * the copy engine already lands a k-contiguous tile in the 128-byte swizzle,
 * which is that layout. So the split can happen where the tile lands:
 *   - The operand in shared memory (S) is one whose k is contiguous in the
 *     caller's matrix. A 128 x 32 box of it comes by tensor copy, FP32, and
 *     three warps of the producer warpgroup, idle in rung 21, rewrite it in
 *     place: each 16-byte chunk read once, hi written back where it was, lo
 *     into a second tile at the same offset. No transpose and no address
 *     work: split thread p takes chunks p, p + 96, ... of the 16 KiB.
 *   - The other operand (R) is split in the consumers' registers, as rung 21
 *     splits A, from a raw tile in whatever layout the caller's matrix has.
 *   - Which is which: B^T is S where B is column-major (k contiguous); where
 *     B is row-major (numpy's default, with A row-major too), the kernel
 *     computes D^T = B^T A^T instead: S is A, R is B^T, and the epilogue
 *     writes each result to D transposed. A column-major A with a row-major
 *     B has no k-contiguous operand: rung 18 runs it.
 * DRAM sees each operand tile once per use, and nothing is written but D.
 *
 * The change from rung 21:
 *   - No pack pass and no workspace.
 *   - A stage holds S (hi once split), S lo and raw R: 48 KiB, four stages,
 *     as rung 21's.
 *   - Three barriers a stage: `landed` (the copies' bytes), `full` (S split:
 *     96 arrivals) and `empty` (the consumers are done with the stage).
 *   - R whose rows are not k-contiguous (B^T of a row-major B, or a
 *     column-major A) comes in four boxes of 32 rows, each 32 lines of k;
 *     raw_r_offset finds an element there.
 *   - The split, the products and the order of the sums are rung 20's (the
 *     two corrections are added in rung 20's order in either orientation), so
 *     the result is tf32x3's, bit for bit (tests/test_inplace.py).
 *
 * Tile parameters: rung 21's 128 x 128 x 32 block tile, two consumer
 * warpgroups of 64 rows and 192 accumulators a thread.
 *
 * Limits: the tensor copies need 16-byte aligned matrices whose leading
 * dimension is a multiple of 4 floats, and a k-contiguous operand. Anything
 * else, and wgmma-less devices, run rung 18 (tf32x3_mma). The engine's copy
 * (kernel="tf32x3_inplace") runs rung 21's direct path there instead (the
 * same numbers, bit for bit, with alpha 1 and beta 0), takes the output
 * tiles on a persistent grid launched overlapped with the kernel before it,
 * and runs a stack in one launch, a shared operand read where it lies.
 * Stacks here: product by product.
 *
 * Next: one product on TF32 tiles that the copy engine rounds as they land
 * (rung 23): nothing left to split at all.
 */
#ifndef FASTSGEMM_LADDER_22_TF32X3_INPLACE
#define FASTSGEMM_LADDER_22_TF32X3_INPLACE

#include <cuda.h>  // CUtensorMap and the driver's tensor-map encoder, reached through the runtime

#include "common.cuh"

namespace fsg {
namespace lesson {
namespace tf32x3_inplace {

// ---- tile parameters ----
constexpr int kBK = 32;                        // tile depth: 32 TF32 values make one 128-byte swizzled row
constexpr int kTile = 128;                     // output tile: 128 rows of R x 128 rows of S
constexpr int kPartFloats = kTile * kBK;       // one 128 x 32 tile of FP32: 16 KiB
constexpr int kStageFloats = 3 * kPartFloats;  // S (hi once split), S lo, raw R: 48 KiB
constexpr int kStages = 4;
constexpr int kKSteps = kBK / 8;  // wgmma k-steps of 8 per k-tile
constexpr int kStepsAtOnce = 2;   // k-steps whose R fragments are held at once, as rung 21's
constexpr int kBoxRows = 32;      // an R whose rows are not k-contiguous comes in boxes of 32 rows x 32 k
constexpr int kProducerThreads = 128, kConsumerThreads = 256;  // one warpgroup, two
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kSplitThreads = 96;                               // warps 1-3 of the producer (warp 0: the copies)
constexpr int kWgRows = 64;                                     // rows of R per consumer warpgroup
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;  // 128 x 40 + 256 x 232 <= 384 x 168
constexpr int kGroupRows = 8;
constexpr size_t kSmemBytes = (size_t)kStages * kStageFloats * sizeof(float) + 3 * kStages * sizeof(uint64_t);
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

/* d += A * B for a 64 x 128 x 8 tile, A from registers and B^T from a
 * descriptor: 64 accumulators a thread (accumulate == 0: the old d is
 * ignored), run asynchronously (d may be read only after a wgmma_wait). A
 * thread's a[4] is its fragment of the warpgroup's 64 x 8 A in mma.sync's m16n8k8 layout (warp w: rows 16 w ..
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

/* Orders this thread's ordinary stores to shared memory before the async
 * proxy's reads of it (wgmma reads its operands through that proxy). */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

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

// ---- kernel: the GEMM ----
/* Element (r, k) of raw R's 128 x 32 tile. Along k (R's rows k-contiguous in
 * memory): one tensor box, rung 21's layout (operand_offset). Otherwise four
 * boxes of 32 rows, each 32 lines of k of 128 bytes, chunks swizzled by k % 8. */
template <bool R_ALONG_K>
__device__ __forceinline__ int raw_r_offset(int r, int k) {
    if constexpr (R_ALONG_K) return operand_offset(r, k);
    else return (r / kBoxRows) * kBoxRows * kBK + k * kBoxRows + ((((r % kBoxRows) / 4) ^ (k % 8)) * 4) + r % 4;
}

/* A consumer thread's share of k-steps first_step .. first_step + STEPS - 1
 * of a raw R tile, split as rung 20's pack pass splits (hi + lo = R, both
 * TF32), in wgmma's register layout: the thread's rows are row and row + 8,
 * its k col and col + 4 of each k-step. Along k it is rung 21's code. Across,
 * the thread's rows r and r + 8 lie in one box, and k % 8 is col or col + 4
 * at every k-step, so the four offsets are fixed and each k-step moves them
 * by 8 lines of k. */
template <bool R_ALONG_K, int STEPS>
__device__ __forceinline__ void split_fragments(const float *raw_r, int row, int col, int first_step,
                                                uint32_t (&hi)[STEPS][4], uint32_t (&lo)[STEPS][4]) {
    if constexpr (R_ALONG_K) {
        const float *r_row = raw_r + row * kBK + col;  // this thread's row of the tile, at its k in chunk 0
        int swizzle = (row % 8) * 4;                   // the swizzle's XOR on the row's float offsets
        asm volatile("" : "+r"(swizzle));              // made here, each time: not hoisted into a live register
#pragma unroll
        for (int j = 0; j < STEPS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int chunk = 2 * (first_step + j) + i / 2;
                split(r_row[((chunk * 4) ^ swizzle) + (i % 2) * 8 * kBK], hi[j][i], lo[j][i]);
            }
    } else {
        const float *first = raw_r + 8 * kBoxRows * first_step;
#pragma unroll
        for (int j = 0; j < STEPS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                split(first[raw_r_offset<false>(row + 8 * (i % 2), col + 4 * (i / 2)) + 8 * kBoxRows * j], hi[j][i],
                      lo[j][i]);
    }
}

/* Rung 20's three products on STEPS k-steps (first_step on) of a stage, R
 * from this thread's fragments, S hi and lo from shared memory: part (+)=
 * hi_r hi_s (afresh at the tile's first k-step), corr += the two cross
 * terms; issued, then waited for. Rung 20 adds lo_a hi_b before hi_a lo_b:
 * where R is A that is lo_r hi_s first, and where the kernel runs transposed
 * (R is B^T) hi_r lo_s first (LO_S_FIRST), so that the sums are rung 20's. */
template <int STEPS, bool LO_S_FIRST>
__device__ __forceinline__ void three_products(float (&part)[64], float (&corr)[64], uint32_t (&r_hi)[STEPS][4],
                                               uint32_t (&r_lo)[STEPS][4], const float *s_hi, const float *s_lo,
                                               int first_step) {
    wgmma_fence();  // the fragments' registers are written: wgmma may read them
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
        const int ks = first_step + j;
        const uint64_t ds = descriptor(s_hi + 8 * ks);
        wgmma_64x128x8_rs(part, r_hi[j], ds, ks > 0);
        if constexpr (LO_S_FIRST) {
            wgmma_64x128x8_rs(corr, r_hi[j], descriptor(s_lo + 8 * ks), 1);
            wgmma_64x128x8_rs(corr, r_lo[j], ds, 1);
        } else {
            wgmma_64x128x8_rs(corr, r_lo[j], ds, 1);
            wgmma_64x128x8_rs(corr, r_hi[j], descriptor(s_lo + 8 * ks), 1);
        }
    }
    wgmma_commit();
    wgmma_wait<0>();
    touch(corr);
    touch(part);
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {  // read by the wgmmas until the wait: not reused before it
        touch_registers(r_hi[j]);
        touch_registers(r_lo[j]);
    }
}

/* The split warps' share of a stage: S's 128 x 32 tile, as the copy engine
 * landed it, rewritten in place as hi, with lo at the same offset of s_lo.
 * Split thread p takes 16-byte chunks p, p + 96, ...: a warp's reads and
 * writes are 512 contiguous bytes, all banks. */
__device__ __forceinline__ void split_in_place(float *s, float *s_lo, int p) {
    constexpr int kChunks = kPartFloats / 4;
    for (int c = p; c < kChunks; c += kSplitThreads) {
        const float4 x = *reinterpret_cast<const float4 *>(s + 4 * c);
        uint32_t h[4], l[4];
        split(x.x, h[0], l[0]);
        split(x.y, h[1], l[1]);
        split(x.z, h[2], l[2]);
        split(x.w, h[3], l[3]);
        *reinterpret_cast<uint4 *>(s + 4 * c) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4 *>(s_lo + 4 * c) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

/* O = R S^T, one block per 128 x 128 output tile: O is D, or D^T where the
 * kernel runs TRANSPOSED (R is B^T and S is A). r_map and s_map are R's and
 * S's tensor maps (x the contiguous direction). R_ALONG_K: R's rows are
 * k-contiguous in memory (one box a k-tile), else four boxes of 32 rows. A
 * split-K block (grid z) takes its slice's run of k-tiles and its own D. */
template <bool R_ALONG_K, bool TRANSPOSED>
static __global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32x3_inplace_kernel(const __grid_constant__ CUtensorMap r_map, const __grid_constant__ CUtensorMap s_map,
                                fsg_gemm problem, int tiles_k) {
    const fsg_gemm g = this_slice(problem);
    const int64_t slice_tiles = problem.k_slice / kBK;  // 0: K whole (k_slice may be past k: one slice)
    const int per_slice = slice_tiles > 0 && slice_tiles < tiles_k ? (int)slice_tiles : tiles_k;
    const int first = blockIdx.z * per_slice, count = per_slice < tiles_k - first ? per_slice : tiles_k - first;

    // Shared memory: the stages, then a landed, a full and an empty barrier per stage. Swizzle atoms want
    // 1024-byte alignment.
    extern __shared__ __align__(1024) float4 smem[];
    float *stages = reinterpret_cast<float *>(smem);
    uint64_t *landed = reinterpret_cast<uint64_t *>(stages + kStages * kStageFloats);
    uint64_t *full = landed + kStages, *empty = full + kStages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(&landed[s], 1);                // the copy thread's arrival (and the stage's bytes)
            mbarrier_init(&full[s], kSplitThreads);      // every split thread, once S is split
            mbarrier_init(&empty[s], kConsumerThreads);  // every consumer thread, once its wgmmas have read it
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();

    // This block's output tile, in groups of kGroupRows block rows walked column by column (rung 4's order).
    const int64_t rows_r = TRANSPOSED ? g.n : g.m, rows_s = TRANSPOSED ? g.m : g.n;
    const int tiles_r = (int)ceil_div(rows_r, kTile), tiles_s = (int)ceil_div(rows_s, kTile), id = blockIdx.x;
    const int per_group = kGroupRows * tiles_s, group_row = id / per_group * kGroupRows;
    const int group_rows = tiles_r - group_row < kGroupRows ? tiles_r - group_row : kGroupRows;
    const int tile_r = group_row + id % per_group % group_rows, tile_s = id % per_group / group_rows;

    const int tid = threadIdx.x, warpgroup = tid / 128;
    if (warpgroup == 0) {
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            // The copies: S's box and R's box (or boxes) a stage, as far ahead as the stages allow.
            for (int t = 0; t < count; ++t) {
                const int s = t % kStages, k = (first + t) * kBK;
                if (t >= kStages) mbarrier_wait(&empty[s], (t / kStages - 1) & 1);  // tile t - kStages is read
                mbarrier_arrive_expect(&landed[s], 2 * kPartFloats * sizeof(float));
                float *stage = stages + s * kStageFloats, *raw_r = stage + 2 * kPartFloats;
                tensor_load_2d(stage, &s_map, k, tile_s * kTile, &landed[s]);
                if constexpr (R_ALONG_K) {
                    tensor_load_2d(raw_r, &r_map, k, tile_r * kTile, &landed[s]);
                } else {
#pragma unroll
                    for (int box = 0; box < kTile / kBoxRows; ++box)
                        tensor_load_2d(raw_r + box * kBoxRows * kBK, &r_map, tile_r * kTile + box * kBoxRows, k,
                                       &landed[s]);
                }
            }
        } else if (tid >= 32) {
            // The split: each stage's S as soon as its bytes have landed.
            for (int t = 0; t < count; ++t) {
                const int s = t % kStages;
                mbarrier_wait(&landed[s], (t / kStages) & 1);
                float *stage = stages + s * kStageFloats;
                split_in_place(stage, stage + kPartFloats, tid - 32);
                fence_proxy_async();  // these stores, before the consumers' wgmmas read them
                mbarrier_arrive(&full[s]);
            }
        }
    } else {
        // Consumers: 64 rows of R each; R's fragments split in registers, two k-steps at a time.
        registers_up<kConsumerRegisters>();
        const int consumer = warpgroup - 1, warp = (tid % 128) / 32, lane = tid % 32;
        // This thread's rows of R (and of wgmma's A fragment): row and row + 8; its k: col and col + 4 of each k-step.
        const int frag_row = consumer * kWgRows + warp * 16 + lane / 4, frag_col = lane % 4;
        float corr[64] = {};  // the corrections, summed by the tensor core
        float main[64] = {};  // the main term's running sum (FADD)
        float part[64];       // this tile's main term, out of the tensor core
        for (int t = 0; t < count; ++t) {
            const int s = t % kStages, parity = (t / kStages) & 1;
            mbarrier_wait(&full[s], parity);
            mbarrier_wait(&landed[s], parity);  // R's bytes: landed already (the split waited for them)
            const float *s_hi = stages + s * kStageFloats, *s_lo = s_hi + kPartFloats, *raw_r = s_lo + kPartFloats;
#pragma unroll
            for (int half = 0; half < kKSteps / kStepsAtOnce; ++half) {
                uint32_t r_hi[kStepsAtOnce][4], r_lo[kStepsAtOnce][4];
                split_fragments<R_ALONG_K>(raw_r, frag_row, frag_col, half * kStepsAtOnce, r_hi, r_lo);
                three_products<kStepsAtOnce, TRANSPOSED>(part, corr, r_hi, r_lo, s_hi, s_lo, half * kStepsAtOnce);
            }
            mbarrier_arrive(&empty[s]);  // this stage's reads are done: the copy thread may refill it
#pragma unroll
            for (int i = 0; i < 64; ++i) main[i] += part[i];
        }

        // The epilogue, as rung 21's: accumulator i is element (8 ((i % 4) / 2), 8 (i / 4) + i % 2) from the
        // thread's first. Transposed, O(r, c) is D(c, r).
        const int64_t row = (int64_t)tile_r * kTile + consumer * kWgRows + warp * 16 + lane / 4;
        const int64_t col = (int64_t)tile_s * kTile + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            const int64_t r = row + 8 * ((i % 4) / 2), c = col + 8 * (i / 4) + i % 2;
            if (r < rows_r && c < rows_s) {
                if (TRANSPOSED) store_d(g, c, r, combine(main[i], corr[i]));
                else store_d(g, r, c, combine(main[i], corr[i]));
            }
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

/* A tensor map of one operand: `along` elements in its contiguous direction,
 * `across` lines of ld floats, boxes of box_along x box_across in the
 * 128-byte swizzle, zeros outside. False, and no map, where the copy engine
 * cannot read it so: an address or a stride that is not a multiple of 16
 * bytes, coordinates past an int, or no encoder. */
inline bool operand_map(const float *p, int64_t ld, int64_t along, int64_t across, int box_along, int box_across,
                        CUtensorMap *map) {
    const int64_t limit = INT32_MAX - kTile;  // the largest coordinate a tile may start at, and its box's reach
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || ld % 4 != 0 || ld < along || along > limit || across > limit)
        return false;
    const EncodeTiled encode = encode_tiled();
    if (encode == nullptr) return false;
    const cuuint64_t sizes[2] = {(cuuint64_t)along, (cuuint64_t)across};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * sizeof(float)};
    const cuuint32_t box[2] = {(cuuint32_t)box_along, (cuuint32_t)box_across}, unit[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float *>(p), sizes, strides, box, unit,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The GEMM in the orientation the layouts allow. *launched stays false (and
 * nothing is enqueued) where this path cannot run: k == 0 (D = beta C:
 * nothing to multiply), a split that is not whole k-tiles, no k-contiguous
 * operand (A column-major and B row-major), a matrix the copy engine cannot
 * read (operand_map), or grids past their limits. */
inline cudaError_t launch(const fsg_gemm *g, cudaStream_t stream, bool *launched) {
    *launched = false;
    if (g->k == 0 || g->k_slice % kBK != 0 || (g->a_trans && !g->b_trans)) return cudaSuccess;
    const bool transposed = !g->b_trans;  // B row-major (so A too): S is A, R is B^T, the result D^T
    CUtensorMap r_map, s_map;
    bool mapped;
    if (transposed)  // S = A (k contiguous); R = B^T, whose rows (B's columns) are contiguous across k
        mapped = operand_map(g->a, g->lda, g->k, g->m, kBK, kTile, &s_map) &&
                 operand_map(g->b, g->ldb, g->n, g->k, kBoxRows, kBK, &r_map);
    else  // S = B^T (B column-major: k contiguous); R = A, along k or across it
        mapped = operand_map(g->b, g->ldb, g->k, g->n, kBK, kTile, &s_map) &&
                 (g->a_trans ? operand_map(g->a, g->lda, g->m, g->k, kBoxRows, kBK, &r_map)
                             : operand_map(g->a, g->lda, g->k, g->m, kBK, kTile, &r_map));
    const int64_t rows_r = transposed ? g->n : g->m, rows_s = transposed ? g->m : g->n;
    const int64_t tiles = ceil_div(rows_r, kTile) * ceil_div(rows_s, kTile), tiles_k = ceil_div(g->k, kBK);
    if (!mapped || tiles > INT32_MAX || tiles_k > INT32_MAX / kBK) return cudaSuccess;
    *launched = true;
    const dim3 grid((unsigned)tiles, 1, slice_count(*g));
    auto run = [&](auto kernel) {
        launch_with_smem(kernel, grid, kThreads, kSmemBytes, stream, r_map, s_map, *g, (int)tiles_k);
    };
    if (transposed) run(wgmma_tf32x3_inplace_kernel<false, true>);
    else if (g->a_trans) run(wgmma_tf32x3_inplace_kernel<false, false>);
    else run(wgmma_tf32x3_inplace_kernel<true, false>);
    return cudaGetLastError();
}

}  // namespace tf32x3_inplace
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file alone) ----
/* kernel="tf32x3_inplace:lesson": this path on compute capability 9.0 (the
 * one its code is built for, sm_90a) unless it declines the call; rung 18
 * otherwise. kernel="tf32x3_inplace" runs the engine's copy
 * (kernels/engine/tf32x3_inplace.cuh), with stacks in one launch on a
 * persistent grid and rung 21's direct path where this one declines. */
extern "C" cudaError_t fsg_tf32x3_inplace_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    int device, major, minor;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    if (major == 9 && minor == 0) {
        bool launched = false;
        err = fsg::lesson::tf32x3_inplace::launch(g, stream, &launched);
        if (err != cudaSuccess || launched) return err;
    }
    return fsg_tf32x3_mma_sgemm(g, stream);
}

#endif /* FASTSGEMM_LADDER_22_TF32X3_INPLACE */
