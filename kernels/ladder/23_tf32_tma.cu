/*
 * Rung 23, tf32_tma: rung 22's block with no split at all. The copy engine
 * rounds each operand to TF32 as it lands, and the consumers run rung 19's
 * one product a k-step.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): on other devices the
 * launcher runs rung 17 (tf32_mma), as rung 19's does.
 *
 * The idea. The tensor cores read an FP32 value as TF32 by dropping its low
 * 13 bits, so rung 19 rounds every operand first, in a pack pass of its own:
 * A and B read, rounded, written and read back through DRAM before the GEMM
 * starts. A tensor map names the element type of the matrix it describes,
 * and TF32 is one of the types: a tensor copy through a map of type TF32
 * reads FP32 from global memory and writes each value to shared memory
 * rounded to TF32, to nearest with ties to even, as rung 19's pack pass does
 * (cvt.rn; checked value by value on the H200: benchmarks/harness/tma_round.cu,
 * benchmarks/NOTES.md). So the copy engine does the pass's work on the way.
 *
 * The change from rung 22:
 *   - Both tensor maps are of type TF32, and nothing is split: no split warps
 *     and no lo tile, and the copies complete `full` themselves (rung 21's two
 *     barriers a stage). A stage holds S and raw R, 32 KiB.
 *   - Each consumer thread loads its R fragments as they lie (already TF32)
 *     and issues one wgmma a k-step into one accumulator, summed from zero
 *     over the whole K, as rung 19 does: the same products in the same order,
 *     so the result is rung 19's, bit for bit (tests/test_tf32_tma.py).
 *   - The epilogue stores the accumulators: there is nothing to combine.
 *
 * Tile parameters: rung 22's 128 x 128 x 32 block tile; 64 accumulators a
 * consumer thread.
 *
 * Limits: rung 22's (16-byte aligned matrices whose leading dimension is a
 * multiple of 4 floats, and a k-contiguous operand). Anything else, and
 * wgmma-less devices, run rung 17 (tf32_mma). The engine's copy
 * (kernel="tf32_tma") takes a 128 x 256 tile, reads an R whose k is
 * contiguous straight from shared memory, keeps one k-tile's wgmmas in flight
 * while it issues the next, runs on a persistent grid, and runs rung 19's
 * packed path where this one declines, the same numbers bit for bit.
 * Stacks here: product by product.
 *
 * Next: the INT8 tensor cores, and a different scheme for FP32 accuracy
 * (rung 24, ozaki).
 */
#ifndef FASTSGEMM_LADDER_23_TF32_TMA
#define FASTSGEMM_LADDER_23_TF32_TMA

#include <cuda.h>  // CUtensorMap and the driver's tensor-map encoder, reached through the runtime

#include "common.cuh"

namespace fsg {
namespace lesson {
namespace tf32_tma {

// ---- tile parameters ----
constexpr int kBK = 32;                        // tile depth: 32 TF32 values make one 128-byte swizzled row
constexpr int kTile = 128;                     // output tile: 128 rows of R x 128 rows of S
constexpr int kPartFloats = kTile * kBK;       // one 128 x 32 tile: 16 KiB
constexpr int kStageFloats = 2 * kPartFloats;  // S, raw R: 32 KiB
constexpr int kStages = 4;
constexpr int kKSteps = kBK / 8;  // wgmma k-steps of 8 per k-tile
constexpr int kStepsAtOnce = 2;   // k-steps whose R fragments are held at once, as rung 22's
constexpr int kBoxRows = 32;      // an R whose rows are not k-contiguous comes in boxes of 32 rows x 32 k
constexpr int kProducerThreads = 128, kConsumerThreads = 256;  // one warpgroup, two
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kWgRows = 64;                                     // rows of R per consumer warpgroup
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;  // 128 x 40 + 256 x 232 <= 384 x 168
constexpr int kGroupRows = 8;
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

// ---- kernel: the GEMM ----
/* Element (r, k) of raw R's 128 x 32 tile. Along k (R's rows k-contiguous in
 * memory): one tensor box, rung 21's layout (operand_offset). Otherwise four
 * boxes of 32 rows, each 32 lines of k of 128 bytes, chunks swizzled by k % 8. */
template <bool R_ALONG_K>
__device__ __forceinline__ int raw_r_offset(int r, int k) {
    if constexpr (R_ALONG_K) return operand_offset(r, k);
    else return (r / kBoxRows) * kBoxRows * kBK + k * kBoxRows + ((((r % kBoxRows) / 4) ^ (k % 8)) * 4) + r % 4;
}

/* A consumer thread's fragments of k-steps first_step .. first_step + STEPS
 * - 1 of a raw R tile, as the copy engine landed them (already TF32), in
 * wgmma's register layout: rows row and row + 8, k col and col + 4 of each
 * k-step. Where rung 22 split each value, this only loads it. */
template <bool R_ALONG_K, int STEPS>
__device__ __forceinline__ void load_fragments(const float *raw_r, int row, int col, int first_step,
                                               uint32_t (&a)[STEPS][4]) {
#pragma unroll
    for (int j = 0; j < STEPS; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
            a[j][i] = __float_as_uint(raw_r[raw_r_offset<R_ALONG_K>(row + 8 * (i % 2), 8 * (first_step + j) + col +
                                                                                       4 * (i / 2))]);
}

/* Rung 19's one product on STEPS k-steps (first_step on) of a stage: acc +=
 * R S^T, R from this thread's fragments, S from shared memory; issued, then
 * waited for. The fragments are kept unchanged until the wait: the wgmmas
 * read them as they run. */
template <int STEPS>
__device__ __forceinline__ void products(float (&acc)[64], uint32_t (&a)[STEPS][4], const float *s, int first_step) {
    wgmma_fence();  // the fragments' registers are written: wgmma may read them
#pragma unroll
    for (int j = 0; j < STEPS; ++j) wgmma_64x128x8_rs(acc, a[j], descriptor(s + 8 * (first_step + j)), 1);
    wgmma_commit();
    wgmma_wait<0>();
    touch(acc);
#pragma unroll
    for (int j = 0; j < STEPS; ++j) touch_registers(a[j]);  // read by the wgmmas until the wait
}

/* O = R S^T, one block per 128 x 128 output tile, in rung 22's orientation:
 * O is D, or D^T where the kernel runs TRANSPOSED (R is B^T and S is A).
 * r_map and s_map are R's and S's tensor maps, of type TF32. R_ALONG_K: R's
 * rows are k-contiguous in memory (one box a k-tile), else four boxes of 32
 * rows. A split-K block (grid z) takes its slice's run of k-tiles and its own D. */
template <bool R_ALONG_K, bool TRANSPOSED>
static __global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32_tma_kernel(const __grid_constant__ CUtensorMap r_map, const __grid_constant__ CUtensorMap s_map,
                          fsg_gemm problem, int tiles_k) {
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
            mbarrier_init(&full[s], 1);                  // the copy thread's arrival (and the stage's bytes)
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
            // The copies: S's box and R's box (or boxes) a stage, rounded to TF32 as they land.
            for (int t = 0; t < count; ++t) {
                const int s = t % kStages, k = (first + t) * kBK;
                if (t >= kStages) mbarrier_wait(&empty[s], (t / kStages - 1) & 1);  // tile t - kStages is read
                mbarrier_arrive_expect(&full[s], kStageFloats * sizeof(float));
                float *stage = stages + s * kStageFloats, *raw_r = stage + kPartFloats;
                tensor_load_2d(stage, &s_map, k, tile_s * kTile, &full[s]);
                if constexpr (R_ALONG_K) {
                    tensor_load_2d(raw_r, &r_map, k, tile_r * kTile, &full[s]);
                } else {
#pragma unroll
                    for (int box = 0; box < kTile / kBoxRows; ++box)
                        tensor_load_2d(raw_r + box * kBoxRows * kBK, &r_map, tile_r * kTile + box * kBoxRows, k,
                                       &full[s]);
                }
            }
        }
    } else {
        // Consumers: 64 rows of R each; R's fragments loaded into registers, two k-steps at a time.
        registers_up<kConsumerRegisters>();
        const int consumer = warpgroup - 1, warp = (tid % 128) / 32, lane = tid % 32;
        // This thread's rows of R (and of wgmma's A fragment): row and row + 8; its k: col and col + 4 of each k-step.
        const int frag_row = consumer * kWgRows + warp * 16 + lane / 4, frag_col = lane % 4;
        float acc[64] = {};  // summed from zero over the whole K, as rung 19's: the same bits (a -0 sum included)
        for (int t = 0; t < count; ++t) {
            const int s = t % kStages;
            mbarrier_wait(&full[s], (t / kStages) & 1);
            const float *s_tile = stages + s * kStageFloats, *raw_r = s_tile + kPartFloats;
#pragma unroll
            for (int half = 0; half < kKSteps / kStepsAtOnce; ++half) {
                uint32_t a[kStepsAtOnce][4];
                load_fragments<R_ALONG_K>(raw_r, frag_row, frag_col, half * kStepsAtOnce, a);
                products(acc, a, s_tile, half * kStepsAtOnce);
            }
            mbarrier_arrive(&empty[s]);  // this stage's reads are done: the copy thread may refill it
        }

        // The epilogue, as rung 22's: accumulator i is element (8 ((i % 4) / 2), 8 (i / 4) + i % 2) from the
        // thread's first. Transposed, O(r, c) is D(c, r).
        const int64_t row = (int64_t)tile_r * kTile + consumer * kWgRows + warp * 16 + lane / 4;
        const int64_t col = (int64_t)tile_s * kTile + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            const int64_t r = row + 8 * ((i % 4) / 2), c = col + 8 * (i / 4) + i % 2;
            if (r < rows_r && c < rows_s) {
                if (TRANSPOSED) store_d(g, c, r, acc[i]);
                else store_d(g, r, c, acc[i]);
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
 * 128-byte swizzle, zeros outside, each element rounded to TF32 as it lands
 * (the type TF32: the pack pass's rounding). False, and no map, where the
 * copy engine cannot read it so: an address or a stride that is not a multiple of 16
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
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, 2, const_cast<float *>(p), sizes, strides, box, unit,
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
    if (transposed) run(wgmma_tf32_tma_kernel<false, true>);
    else if (g->a_trans) run(wgmma_tf32_tma_kernel<false, false>);
    else run(wgmma_tf32_tma_kernel<true, false>);
    return cudaGetLastError();
}

}  // namespace tf32_tma
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file alone) ----
/* kernel="tf32_tma:lesson": this path on compute capability 9.0 (the one
 * its code is built for, sm_90a) unless it declines the call; rung 17
 * otherwise. kernel="tf32_tma" runs the engine's copy
 * (kernels/engine/tf32_tma.cu), with stacks in one launch on a persistent
 * grid and rung 19's packed path where this one declines. */
extern "C" cudaError_t fsg_tf32_tma_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    int device, major, minor;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    if (major == 9 && minor == 0) {
        bool launched = false;
        err = fsg::lesson::tf32_tma::launch(g, stream, &launched);
        if (err != cudaSuccess || launched) return err;
    }
    return fsg_tf32_mma_sgemm(g, stream);
}

#endif /* FASTSGEMM_LADDER_23_TF32_TMA */
