/*
 * Rung 23, tf32x3_inplace: rung 21's three products with no pack pass. Both
 * operands arrive raw by tensor copies; the one wgmma reads from shared memory
 * is split there, in place, and the other in the consumers' registers.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): elsewhere the launcher runs
 * rung 18 (tf32x3_mma), as rungs 20 and 21 do.
 *
 * Where the time went. Rung 21 packs B (hi and lo, in wgmma's K-major tiles)
 * in a pass of its own: B read, 2 x B written and read back, through DRAM,
 * before the GEMM starts. For a stack of small products that pass is a third
 * of the call (8 x 1024^3: 25 of 191 us on the H200). Its direct path has no
 * pack pass, but its producer warps copy and split B chunk by chunk, with
 * the address work of every chunk, and those instructions set its pace (81
 * TFLOP/s at 4096^3 against 125 packed; benchmarks/NOTES.md).
 *
 * The idea. wgmma wants its shared-memory operand K-major; the register
 * operand may lie any way, since each thread loads its own fragment. So:
 *   - The operand in shared memory (S) is one whose k is contiguous in the
 *     caller's matrix. The copy engine lands its 128 x 32 tile in the
 *     128-byte swizzle, which is already wgmma's operand layout. Three split
 *     warps then rewrite that tile in place: each 16-byte chunk read once,
 *     hi written back where it was, lo into a second tile at the same
 *     offset. No transpose and no address work: split thread p takes chunks
 *     p, p + 96, ... of 16 KiB.
 *   - The other operand (R) is split in the consumers' registers as rung 21
 *     splits A: read raw from the copy engine's tile, in whatever layout
 *     the caller's matrix has.
 *   - Which is which: B^T is S where B is column-major (k contiguous); where
 *     B is row-major (numpy's default, with A row-major too), the kernel
 *     computes D^T = B^T A^T instead: S is A, R is B, and the epilogue
 *     writes each result to D transposed. A column-major A with a
 *     row-major B has no k-contiguous operand: rung 18 runs it.
 * DRAM sees each operand tile once per use and nothing written but D. The
 * split, the products and the order of the sums are rung 20's (the two
 * corrections are added in rung 20's order in either orientation), so the
 * result is the same, bit for bit, as tf32x3's (tests/test_inplace.py).
 *
 * The block: a producer warpgroup (one thread issues the tensor copies, as
 * far ahead as the stages allow; three warps split); two consumer
 * warpgroups as rung 21's (64 rows of
 * R each, m64n128k8 with R's fragments from registers). Three barriers a
 * stage: `landed` (the copies' bytes), `full` (S split) and `empty` (the
 * consumers' wgmmas are done with the stage). Persistent grid: one block per
 * SM, each taking the output tiles of every product or split-K slice
 * gridDim.x apart; the copies and splits run on into the next tile while the
 * consumers store the last one.
 *
 * Tile parameters: 128 x 128 x 32 output tile; a stage holds S (hi after the
 * split), S lo and raw R, 48 KiB; four stages.
 *
 * Limits: the tensor copies need 16-byte aligned matrices whose leading
 * dimension and batch steps are multiples of 4 floats, and a k-contiguous
 * operand. Anything else, and wgmma-less devices, run rung 18
 * (tf32x3_mma). kernel="tf32x3_inplace" (the engine's copy) runs rung 21's
 * direct path there instead (the same numbers, bit for bit, with alpha 1 and
 * beta 0), and stacks in one launch on the persistent grid, a shared operand
 * read where it lies. Stacks here: product by product.
 * Launch: overlapped with the kernel before it in the stream (a programmatic
 * dependent launch, below; a plain one while the stream captures a CUDA
 * graph). Back-to-back stacks of 256 products of 128^3 went from 23.9 to
 * 23.2 us a call on the H100, 64 x 256^3 from 28.2 to 27.0
 * (benchmarks/NOTES.md, "Stacks on the H100").
 */
#ifndef FASTSGEMM_LADDER_23_TF32X3_INPLACE
#define FASTSGEMM_LADDER_23_TF32X3_INPLACE

#include <cuda.h>  // CUtensorMap and the driver's tensor-map encoder, reached through the runtime

#include "common.cuh"

namespace fsg {
namespace lesson {
namespace tf32x3_inplace {

// ---- tile parameters ----
constexpr int kBK = 32;           // tile depth: one 128-byte swizzled row of TF32 values
constexpr int kAtomBytes = 1024;  // 8 rows of 128 bytes: one swizzle atom
static_assert(kBK * 4 == 128, "the 128-byte swizzle wants rows of exactly 128 bytes");

/* One producer warpgroup (a single thread of it issues the bulk copies; it
 * keeps 40 registers) and two consumer warpgroups that own 64 rows of the
 * block tile each and do nothing but wgmma: 128 x 40 + 256 x 232 registers
 * fit the 384 x 168 the block starts with. Blocks walk the output in groups
 * of kGroupRows block rows (start_block, below). */
constexpr int kProducerThreads = 128, kConsumerThreads = 256;  // one warpgroup, two
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kWgRows = 64;  // rows of D per consumer warpgroup
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
constexpr int kGroupRows = 8;

constexpr int kTile = 128;                     // output tile: 128 rows of R x 128 rows of S
constexpr int kPartFloats = kTile * kBK;       // one 128 x 32 tile of FP32: 16 KiB
constexpr int kStageFloats = 3 * kPartFloats;  // S (hi once split), S lo, raw R
constexpr int kStages = 4;
constexpr int kSplitThreads = 96;          // warps 1-3 of the producer warpgroup (warp 0: the copies)
constexpr int kStepsAtOnce = 2;            // R's fragments of two k-steps held at once, as rung 21's
constexpr int kBoxRows = 32;               // a row-contiguous R comes in boxes of 32 rows x 32 k (128 bytes wide)
constexpr int kKSteps = kBK / 8;  // wgmma k-steps of 8 per k-tile

// ---- the Hopper instructions and the pipeline's pieces (copied forward from the rungs before) ----

struct TileCoord {
    int row, col;
};

template <typename Int>
__host__ __device__ inline TileCoord grouped_tile(Int id, Int tiles_m, Int tiles_n, Int group) {
    const Int per_group = group * tiles_n, first = id / per_group * group;
    const Int rows = tiles_m - first < group ? tiles_m - first : group;
    return {(int)(first + id % per_group % rows), (int)(id % per_group / rows)};
}

/* A pointer into shared memory as the 32-bit shared-window address PTX instructions take. */
__device__ __forceinline__ uint32_t smem_address(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* The shared-memory matrix descriptor of wgmma for a K-major operand in the
 * 128-byte swizzle: start address and the atoms' stride in 16-byte units,
 * swizzle mode 1 in bits 62-63 (the leading byte offset is unused there). */
__device__ __forceinline__ uint64_t descriptor(const float *smem) {
    const uint32_t address = smem_address(smem);
    return (uint64_t)((address & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(kAtomBytes >> 4) << 32) | (1ull << 62);
}

/* The 64 accumulators of an m64n128 wgmma as inline-assembly operands %0 .. %63, read and written, with
 * constraint c: "+f" for FP32 accumulators, "+r" for the s32 ones of the INT8 wgmma (rung 22). */
#define FSG_WGMMA_ACCUMULATORS_64_AS(c, d)                                                                       \
    c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]), c(d[8]), c(d[9]), c(d[10]), c(d[11]),   \
        c(d[12]), c(d[13]), c(d[14]), c(d[15]), c(d[16]), c(d[17]), c(d[18]), c(d[19]), c(d[20]), c(d[21]),       \
        c(d[22]), c(d[23]), c(d[24]), c(d[25]), c(d[26]), c(d[27]), c(d[28]), c(d[29]), c(d[30]), c(d[31]),       \
        c(d[32]), c(d[33]), c(d[34]), c(d[35]), c(d[36]), c(d[37]), c(d[38]), c(d[39]), c(d[40]), c(d[41]),       \
        c(d[42]), c(d[43]), c(d[44]), c(d[45]), c(d[46]), c(d[47]), c(d[48]), c(d[49]), c(d[50]), c(d[51]),       \
        c(d[52]), c(d[53]), c(d[54]), c(d[55]), c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]), c(d[61]),       \
        c(d[62]), c(d[63])
#define FSG_WGMMA_ACCUMULATORS_64(d) FSG_WGMMA_ACCUMULATORS_64_AS("+f", d)

/* d (+)= A * B for a 64 x 128 x 8 tile with A from registers (rung 21): a
 * thread's a[4] is its fragment of the warpgroup's 64 x 8 A, laid out as
 * mma.sync's m16n8k8 A per warp (warp w takes rows 16 w .. 16 w + 15; lane l
 * holds rows l / 4 and l / 4 + 8 at k = l % 4 and l % 4 + 4:
 * a[0] (r, k), a[1] (r + 8, k), a[2] (r, k + 4), a[3] (r + 8, k + 4)).
 * The instruction runs asynchronously and reads a[] while it runs: the caller
 * keeps them unchanged until its wgmma_wait (touch_registers). */
__device__ __forceinline__ void wgmma_64x128x8_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : FSG_WGMMA_ACCUMULATORS_64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/* Waits until at most N committed wgmma groups of this warpgroup are still running. */
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }
/* Tells the compiler the asynchronous wgmma may have changed d: no read of d moves above the wait. */
template <int SIZE>
__device__ __forceinline__ void touch(float (&d)[SIZE]) {
#pragma unroll
    for (int i = 0; i < SIZE; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* The same for a 64 x 64 x 8 tile: half the columns, 32 accumulators a thread. */
__device__ __forceinline__ void wgmma_64x64x8_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
/* One wgmma m64nNk8 with A from registers for either width, chosen by the accumulators' count (N / 2 a thread). */
__device__ __forceinline__ void wgmma_64xNx8_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    wgmma_64x128x8_rs(d, a, b, accumulate);
}
__device__ __forceinline__ void wgmma_64xNx8_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    wgmma_64x64x8_rs(d, a, b, accumulate);
}

/* Keeps registers an asynchronous wgmma reads (its A fragment) alive and
 * unchanged up to this point: the compiler sees them used here, after the
 * caller's wgmma_wait, and so cannot give them to other values before. */
template <int SIZE>
__device__ __forceinline__ void touch_registers(uint32_t (&r)[SIZE]) {
#pragma unroll
    for (int i = 0; i < SIZE; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

/* mbarriers in shared memory: a phase completes when `count` arrivals have
 * come (and, for a copy's barrier, the bytes it expects have landed); waiters
 * name the phase by its parity (0, 1, 0, ...). An arrive releases this
 * thread's earlier writes, a completed wait acquires them. */
__device__ __forceinline__ void mbarrier_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
/* Arrives and tells the barrier that `bytes` more will land by bulk copies before its phase can complete. */
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ bool mbarrier_try_wait(uint64_t *bar, int parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbarrier_wait(uint64_t *bar, int parity) {
    while (!mbarrier_try_wait(bar, parity)) {
    }
}
/* The two barriers of each of `stages` pipeline stages, by one thread before
 * the block's first __syncthreads: full[s] completes on `producers` arrivals
 * (one producer thread's, plus the bytes of the stage's bulk copies; or every
 * thread of a producer that writes the stage itself), empty[s] on an arrival
 * from every consumer thread after its wgmmas have read the stage. */
__device__ __forceinline__ void init_stage_barriers(uint64_t *full, uint64_t *empty, int stages, int producers,
                                                    int consumers) {
    for (int s = 0; s < stages; ++s) {
        mbarrier_init(&full[s], producers);
        mbarrier_init(&empty[s], consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
}
/* Orders this thread's ordinary stores to shared memory before later reads by
 * the async proxy (wgmma): a producer that writes operand tiles itself runs
 * it before it arrives on the stage's full barrier. */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Hands registers from the producer warpgroup to the consumers (sm_90a). */
template <int N>
__device__ __forceinline__ void registers_down() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void registers_up() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

/* Element (row, k) of a K-major operand tile in the 128-byte swizzle (above);
 * row is m for A, n for B. */
__device__ __forceinline__ int operand_offset(int row, int k) {
    return row * kBK + (((k / 4) ^ (row % 8)) * 4) + k % 4;
}

/* x rounded to TF32, to nearest even, by Hopper's own conversion: one F2FP
 * instruction (cvt.rna, which the mma.sync paths use, compiles to a compare
 * and two integer ones). */
__device__ __forceinline__ uint32_t round_tf32(float x) {
    uint32_t r;
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* A box of a 3-D tensor (a tensor map made on the host, passed as a
 * __grid_constant__ kernel parameter) from global to shared memory by the
 * copy engine, at element coordinates (x, y, z), x the contiguous one;
 * elements outside the tensor arrive as zeros. Completes on bar. */
__device__ __forceinline__ void tensor_load_3d(float *dst, const void *map, int x, int y, int z, uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(smem_address(dst)),
        "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_address(bar))
        : "memory");
}

/* Dynamic shared memory of a pipeline: its stages, then a full and an empty barrier per stage. */
constexpr size_t pipeline_smem_bytes(int stages, int stage_floats) {
    return (size_t)stages * stage_floats * sizeof(float) + 2 * (size_t)stages * sizeof(uint64_t);
}

/* Where a consumer warpgroup's 64 x N result of wgmma m64nN (N = 128 unless
 * given) lies, its top-left element at (row0, col0): visit(i, row, col) for
 * each of the thread's accumulators. Accumulator i (of N / 2) is element
 * i % 4 of n8 block i / 4 in the m16n8 fragment layout. */
template <int N = 128, typename Visit>
__device__ __forceinline__ void for_each_accumulator(int64_t row0, int64_t col0, Visit &&visit) {
    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    const int64_t first_row = row0 + warp * 16 + lane / 4, first_col = col0 + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) visit(i, first_row + 8 * ((i % 4) / 2), first_col + 8 * (i / 4) + i % 2);
}
/* for_each_accumulator's position of accumulator 0 (the others lie at fixed offsets from it). Not used by
 * for_each_accumulator itself: written that way, nvcc allocated rung 21's direct kernel's registers otherwise. */
struct Position {
    int64_t row, col;
};
__device__ __forceinline__ Position first_accumulator(int64_t row0, int64_t col0) {
    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    return {row0 + warp * 16 + lane / 4, col0 + 2 * (lane % 4)};
}

/* The epilogue: that result, whose top-left element is D(row0, col0), into D
 * through store_d; value(i) is what to store for accumulator i. */
template <int N = 128, typename Value>
__device__ __forceinline__ void store_slice(const fsg_gemm &g, int64_t row0, int64_t col0, Value &&value) {
    for_each_accumulator<N>(row0, col0, [&](int i, int64_t row, int64_t col) {
        if (row < g.m && col < g.n) store_d(g, row, col, value(i));
    });
}

/* What both Hopper kernels do first, every thread of the block: carve the
 * dynamic shared memory (STAGES stages of STAGE_FLOATS floats, then a full
 * and an empty barrier per stage: pipeline_smem_bytes), have thread 0
 * initialise the barriers (full: PRODUCERS arrivals) before the block's first
 * __syncthreads, and find the block's output tile (BM x BN). Blocks take the
 * tiles in groups of kGroupRows block rows, column by column inside a group,
 * so that the blocks resident together share their A and B tiles in L2
 * instead of each wave sweeping all of B. */
struct BlockStart {
    float *stages;
    uint64_t *full, *empty;
    int tile_m, tile_n;
};
struct StageRing {
    float *stages;
    uint64_t *full, *empty;
};
template <int STAGES, int STAGE_FLOATS, int PRODUCERS = 1>
__device__ __forceinline__ StageRing start_ring(float4 *smem) {
    StageRing ring;
    ring.stages = reinterpret_cast<float *>(smem);
    ring.full = reinterpret_cast<uint64_t *>(ring.stages + STAGES * STAGE_FLOATS);
    ring.empty = ring.full + STAGES;
    if (threadIdx.x == 0) init_stage_barriers(ring.full, ring.empty, STAGES, PRODUCERS, kConsumerThreads);
    __syncthreads();
    return ring;
}
template <int STAGES, int STAGE_FLOATS, int BM, int BN, int PRODUCERS = 1>
__device__ __forceinline__ BlockStart start_block(float4 *smem, const fsg_gemm &g) {
    const StageRing ring = start_ring<STAGES, STAGE_FLOATS, PRODUCERS>(smem);
    const TileCoord tile = grouped_tile<int>(blockIdx.x, (int)ceil_div(g.m, BM), (int)ceil_div(g.n, BN), kGroupRows);
    return {ring.stages, ring.full, ring.empty, tile.row, tile.col};
}

/* A persistent grid (one block per SM, each taking items gridDim.x apart) numbers its work items product by
 * product (or split-K slice by slice: grid z's meaning; rung 22: modulus by modulus), each product's output
 * tiles in start_block's order. */
struct WorkItem {
    int64_t z;
    int tile_m, tile_n;
};
__device__ __forceinline__ WorkItem work_item(int64_t item, int tiles_m, int tiles_n) {
    const int64_t per_product = (int64_t)tiles_m * tiles_n, z = item / per_product;
    const TileCoord tile = grouped_tile<int>((int)(item - z * per_product), tiles_m, tiles_n, kGroupRows);
    return {z, tile.row, tile.col};
}

/* Grid z is either split-K's slices or a batch's products (ladder.h's
 * fsg_batch; never both). The block's own problem: its K-slice (common.cuh's
 * this_slice) or its product, A, B, C and D moved on by the batch's steps.
 * The SIMT rungs, which run a batch product by product, keep this_slice
 * alone. kOneProduct: the batch of an ordinary call. */
constexpr fsg_batch kOneProduct = {1, 0, 0, 0, 0};

inline unsigned grid_z(const fsg_gemm &g, const fsg_batch &batch) {
    return batch.count > 1 ? (unsigned)batch.count : slice_count(g);
}

__device__ __forceinline__ fsg_gemm slice_or_product(const fsg_gemm &problem, const fsg_batch &batch, int64_t z) {
    // One chain of offsets from the kernel's parameters, with no branch between two copies of the problem: with
    // one (an early `return this_slice(problem)`), nvcc lost that D and C are global memory and stored the
    // epilogue with generic ST.E in place of STG.E, and tf32x3 ran 2-3% slower at 2048^3-4096^3.
    const bool in_batch = batch.count > 1;  // then k_slice is 0: the launchers refuse both at once
    const int64_t slice = in_batch ? 0 : z, product = in_batch ? z : 0;
    const int64_t k0 = slice * problem.k_slice;
    fsg_gemm g = problem;
    g.a += (problem.a_trans ? k0 * problem.lda : k0) + product * batch.step_a;
    g.b += (problem.b_trans ? k0 : k0 * problem.ldb) + product * batch.step_b;
    if (g.c != nullptr) g.c += product * batch.step_c;
    g.k = problem.k_slice > 0 && problem.k - k0 > problem.k_slice ? problem.k_slice : problem.k - k0;
    g.d += slice * problem.m * problem.ldd + product * batch.step_d;
    return g;
}
__device__ __forceinline__ fsg_gemm this_slice_or_product(const fsg_gemm &problem, const fsg_batch &batch) {
    return slice_or_product(problem, batch, blockIdx.z);
}

/* x = hi + lo, both TF32, with round_tf32 (nearest even; rung 18's mma.sync
 * path rounds ties away). Only ties round differently, and the split is as
 * exact either way. */
__device__ __forceinline__ void split_rn(float x, uint32_t &hi, uint32_t &lo) {
    hi = round_tf32(x);
    lo = round_tf32(x - __uint_as_float(hi));
}

/* The split product's sum: the main term plus the corrections, except where the main term is Inf or NaN, which
 * is then the answer (rung 18's header says why). */
__device__ __forceinline__ float combine(float main, float corrections) {
    return isfinite(main) ? main + corrections : main;
}

/* The launcher of the wgmma rungs (19 tf32, 20 tf32x3): their wgmma path
 * (sm90) on compute capability 9.0, the one its code is built for (sm_90a),
 * unless it declines the call (it leaves *launched false when its workspace
 * or grid cannot be had); the mma.sync rung of the same math (17 tf32_mma,
 * 18 tf32x3_mma) otherwise, which runs a batch product by product. */
inline cudaError_t wgmma_else_mma_sync(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream,
                                       cudaError_t (*sm90)(const fsg_gemm *, const fsg_batch &, cudaStream_t, bool *),
                                       cudaError_t (*mma_sync)(const fsg_gemm *, cudaStream_t)) {
    if (batch->count > 1 && g->k_slice != 0) return cudaErrorInvalidValue;  // grid z is one or the other
    int device, major, minor;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    if (major == 9 && minor == 0) {
        bool launched = false;
        err = sm90(g, *batch, stream, &launched);
        if (err != cudaSuccess || launched) return err;
    }
    return fsg_each_product(g, batch, stream, mma_sync);
}

// ---- from rung 21: A's (here R's) fragments split in registers, the three products from them, the tensor-map encoder ----
/* A consumer thread's share of k-steps first_step .. first_step + STEPS - 1
 * of a raw tile whose k is contiguous (it lies as a packed tile does: 16-byte
 * chunk c of row r at position c ^ (r % 8)), split as the pack pass splits
 * (hi + lo, both TF32), in wgmma's register layout: the thread's rows are row
 * and row + 8, its k col and col + 4 of each k-step. One XOR and an add a
 * value, worked out here rather than 8 addresses kept across the main loop:
 * those spilled to local memory. */
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
            split_rn(a_row[((chunk * 4) ^ swizzle) + (i % 2) * 8 * kBK], hi[j][i], lo[j][i]);
        }
}

/* Rung 20's three products on STEPS k-steps (first_step on) of a stage, A
 * from this thread's fragments, B hi and lo (BN rows, K-major) from shared
 * memory: part (+)= hi_a hi_b (afresh at the tile's first k-step), corr +=
 * lo_a hi_b + hi_a lo_b, in rung 20's order; issued, then waited for. The
 * fragments are kept unchanged until the wait: the wgmmas read them as they run.
 * LO_B_FIRST adds the two corrections the other way round: rung 23 multiplies
 * B^T A^T, where its register operand is B, and so keeps rung 20's order. */
template <int STEPS, int HALF_BN, bool LO_B_FIRST = false>
__device__ __forceinline__ void three_products(float (&part)[HALF_BN], float (&corr)[HALF_BN],
                                               uint32_t (&a_hi)[STEPS][4], uint32_t (&a_lo)[STEPS][4],
                                               const float *b_hi, const float *b_lo, int first_step) {
    wgmma_fence();  // the fragments' registers are written: wgmma may read them
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
        const int ks = first_step + j;
        const uint64_t db = descriptor(b_hi + 8 * ks);
        wgmma_64xNx8_rs(part, a_hi[j], db, ks > 0);
        if constexpr (LO_B_FIRST) {
            wgmma_64xNx8_rs(corr, a_hi[j], descriptor(b_lo + 8 * ks), 1);
            wgmma_64xNx8_rs(corr, a_lo[j], db, 1);
        } else {
            wgmma_64xNx8_rs(corr, a_lo[j], db, 1);
            wgmma_64xNx8_rs(corr, a_hi[j], descriptor(b_lo + 8 * ks), 1);
        }
    }
    wgmma_commit();
    wgmma_wait_all();
    touch(corr);
    touch(part);
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {  // read by the wgmmas until the wait: not reused before it
        touch_registers(a_hi[j]);
        touch_registers(a_lo[j]);
    }
}

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

struct Layout {
    static constexpr size_t kRingBytes = pipeline_smem_bytes(kStages, kStageFloats);  // stages, full, empty
    static constexpr size_t kSmemBytes = kRingBytes + kStages * sizeof(uint64_t);     // then `landed`
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");
};

// ---- overlapped launches ----
/* A stack of small products takes about 20 us on the H100, and a few of them
 * are the launch: the gap between one kernel's end and the next one's start,
 * and the next block's set-up. A programmatic dependent launch takes them off
 * the critical path of back-to-back calls: the next kernel is launched while
 * this one runs, its blocks set up shared memory and barriers as SMs free
 * up, and only then wait for this grid to finish (griddepcontrol.wait: the
 * previous grid complete and its memory visible). Nothing global is touched
 * before the wait, so the products read what the kernel before wrote and
 * write nothing it still reads. */
__device__ __forceinline__ void wait_for_previous_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void allow_next_grid() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* kernel<<<grid, threads, smem, stream>>>(args...) as a programmatic dependent
 * launch: it may start before the previous kernel in the stream ends (its
 * blocks wait for it: wait_for_previous_grid). A stream that is capturing a
 * CUDA graph gets a plain launch: a graph already spares most of the gap
 * between kernels, and CUDA versions before 12.3 do not record the
 * overlapped kind in a graph. */
template <typename... Params, typename... Args>
cudaError_t launch_overlapped(void (*kernel)(Params...), dim3 grid, int threads, size_t smem, cudaStream_t stream,
                              const Args &...args) {
    cudaError_t err = fsg_allow_dynamic_smem(reinterpret_cast<const void *>(kernel), smem);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (err == cudaSuccess) err = cudaStreamIsCapturing(stream, &capture);
    if (err != cudaSuccess) return err;
    cudaLaunchAttribute overlap[1];
    overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = overlap;
    config.numAttrs = capture == cudaStreamCaptureStatusNone ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, args...);
}

// ---- kernel ----
/* Element (r, k) of raw R's 128 x 32 tile. Along k (R's rows k-contiguous in
 * memory): one tensor box, rung 21's layout (operand_offset). Otherwise four
 * boxes of 32 rows, each 32 lines of k of 128 bytes, chunks swizzled by k % 8. */
template <bool R_ALONG_K>
__device__ __forceinline__ int raw_r_offset(int r, int k) {
    if constexpr (R_ALONG_K) return operand_offset(r, k);
    else return (r / kBoxRows) * kBoxRows * kBK + k * kBoxRows + ((((r % kBoxRows) / 4) ^ (k % 8)) * 4) + r % 4;
}

/* A consumer thread's fragments of R for k-steps first_step .. + STEPS - 1,
 * split as the pack pass splits (hi + lo = R, both TF32), in wgmma's register
 * layout: rows row and row + 8, k col and col + 4 of each k-step. Along k it is
 * rung 21's code; across, a row-contiguous R puts the thread's rows r and r + 8
 * in one box (r % 32 < 24), and k % 8 is col or col + 4, so the four bases are
 * fixed and each k-step moves them by 8 lines. A warp's 32 reads meet 16
 * banks there (two lines of k share the chunk positions): a two-way conflict. */
template <bool R_ALONG_K, int STEPS>
__device__ __forceinline__ void split_r_fragments(const float *raw_r, int row, int col, int first_step,
                                                  uint32_t (&hi)[STEPS][4], uint32_t (&lo)[STEPS][4]) {
    if constexpr (R_ALONG_K) {
        split_fragments<STEPS>(raw_r, row, col, first_step, hi, lo);
    } else {
        // k % 8 is col + 4 (i / 2) at every k-step, so a k-step moves each of the four offsets by 8 lines of k:
        // written so, the four are loop-invariant sums that ptxas keeps (or recomputes) cheaply. Written as
        // raw_r_offset(r, k) of the whole k, the k-loop held 274 instructions an iteration, not 232
        // (benchmarks/sass_loops.py).
        const float *first = raw_r + 8 * kBoxRows * first_step;
#pragma unroll
        for (int j = 0; j < STEPS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                split_rn(first[raw_r_offset<false>(row + 8 * (i % 2), col + 4 * (i / 2)) + 8 * kBoxRows * j],
                         hi[j][i], lo[j][i]);
    }
}

/* The split warps' share of a stage: S's 128 x 32 tile, as the copy engine
 * landed it, rewritten in place as hi, with lo at the same offset of s_lo.
 * Split thread p takes 16-byte chunks p, p + 96, ...: a warp's reads and
 * writes are 512 contiguous bytes, all banks. */
__device__ __forceinline__ void split_in_place(float *s, float *s_lo, int p) {
    constexpr int kChunks = kPartFloats / 4;
#pragma unroll
    for (int j = 0; j < (kChunks + kSplitThreads - 1) / kSplitThreads; ++j) {
        if (p + kSplitThreads * j >= kChunks) break;
        const int at = 4 * (p + kSplitThreads * j);
        const float4 x = *reinterpret_cast<const float4 *>(s + at);
        uint32_t h[4], l[4];
        split_rn(x.x, h[0], l[0]);
        split_rn(x.y, h[1], l[1]);
        split_rn(x.z, h[2], l[2]);
        split_rn(x.w, h[3], l[3]);
        *reinterpret_cast<uint4 *>(s + at) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4 *>(s_lo + at) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

/* What the kernel needs of the orientation: R and S's tensor maps (x is each
 * matrix's contiguous direction, z the product), and which of them are the
 * products' own (a coordinate z per product) rather than shared. */
struct Operands {
    int64_t rows_r, rows_s;  // the output tile grid: rows of R x rows of S
    bool own_r, own_s;
};

/* The consumers' epilogue for one 64 x 128 slice of an output tile whose
 * top-left element is O(row0, col0), O = R S^T: O is D, or D^T where the
 * kernel runs transposed (each result then goes to D(col, row), with C read
 * there too).
 * A slice wholly inside D with no C (beta 0) is stored from one pointer at
 * fixed offsets: about 3 instructions a value, where store_d's bounds, C and
 * 64-bit address arithmetic took 23. For a stack of 128^3 products (four
 * k-tiles a tile) the generic epilogue took a third of the consumers' time
 * (benchmarks/NOTES.md).
 * Not transposed, a thread's two results in adjacent columns go out as one
 * 8-byte store where the address allows, so that a warp's store fills whole
 * 32-byte sectors instead of every other 4 bytes of them twice: 32.4 -> 24.4
 * us a call for 256 products of 128^3 with B column-major on the H100, 88 ->
 * 60 us for attention's Q K^T over 96 heads of 512 x 64 (benchmarks/NOTES.md,
 * "Paired stores"). Transposed, a warp's store already writes whole 32-byte
 * runs (eight rows of O are eight adjacent floats of D). */
template <bool TRANSPOSED, typename Value>
__device__ __forceinline__ void store_output(const fsg_gemm &g, int64_t row0, int64_t col0, Value &&value) {
    const int64_t rows = TRANSPOSED ? g.n : g.m, cols = TRANSPOSED ? g.m : g.n;
    if (g.c == nullptr && row0 + kWgRows <= rows && col0 + kTile <= cols) {
        const int64_t row_step = TRANSPOSED ? 1 : g.ldd, col_step = TRANSPOSED ? g.ldd : 1;  // O's steps in D
        const Position first = first_accumulator(row0, col0);
        float *corner = g.d + first.row * row_step + first.col * col_step;
        if constexpr (!TRANSPOSED) {
            // The pairs lie a multiple of 8 floats from the corner, so an aligned corner aligns them all; an even
            // ldd gives every lane's corner the same alignment, so that the warp takes one branch.
            if (reinterpret_cast<uintptr_t>(corner) % 8 == 0 && g.ldd % 2 == 0) {
#pragma unroll
                for (int i = 0; i < kTile / 2; i += 2)
                    *reinterpret_cast<float2 *>(corner + 8 * ((i % 4) / 2) * g.ldd + 8 * (i / 4)) =
                        make_float2(g.alpha * value(i), g.alpha * value(i + 1));
                return;
            }
        }
#pragma unroll
        for (int i = 0; i < kTile / 2; ++i)  // accumulator i: 8 ((i % 4) / 2) rows and 8 (i / 4) + i % 2 columns on
            corner[8 * ((i % 4) / 2) * row_step + (8 * (i / 4) + i % 2) * col_step] = g.alpha * value(i);
    } else if constexpr (TRANSPOSED) {
        for_each_accumulator<kTile>(row0, col0, [&](int i, int64_t row, int64_t col) {
            if (col < g.m && row < g.n) store_d(g, col, row, value(i));
        });
    } else {
        store_slice<kTile>(g, row0, col0, value);
    }
}

/* The copy thread of a block (this rung's and rung 24's): tile q of the block's
 * sequence (its items' k-tiles, one after another) into stage q % STAGES,
 * once the consumers are done with tile q - STAGES there (empty): S's
 * S_ROWS x 32 box at the stage's start, R's R_ROWS rows at R_AT (one box along
 * k, or boxes of kBoxRows rows across it), both completing on landed. */
template <bool R_ALONG_K, int STAGES, int STAGE_FLOATS, int R_ROWS, int S_ROWS, int R_AT>
__device__ __forceinline__ void copy_tiles(float *stages, uint64_t *landed, uint64_t *empty, const CUtensorMap &r_map,
                                           const CUtensorMap &s_map, const fsg_gemm &problem, const fsg_batch &batch,
                                           const Operands &operands, int64_t items) {
    const int tiles_r = (int)ceil_div(operands.rows_r, R_ROWS), tiles_s = (int)ceil_div(operands.rows_s, S_ROWS);
    const bool in_batch = batch.count > 1;
    int64_t q = 0;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const WorkItem w = work_item(item, tiles_r, tiles_s);
        const int count = (int)ceil_div(slice_or_product(problem, batch, w.z).k, kBK);
        const int product = in_batch ? (int)w.z : 0, r0 = w.tile_m * R_ROWS, s0 = w.tile_n * S_ROWS;
        const int r_product = operands.own_r ? product : 0, s_product = operands.own_s ? product : 0;
        const int64_t k0 = in_batch ? 0 : w.z * problem.k_slice;  // a split-K slice's first k
        for (int t = 0; t < count; ++t, ++q) {
            const int s = (int)(q % STAGES), k = (int)(k0 + (int64_t)t * kBK);
            if (q >= STAGES) mbarrier_wait(&empty[s], (int)(q / STAGES - 1) & 1);
            float *stage = stages + s * STAGE_FLOATS, *raw_r = stage + R_AT;
            mbarrier_arrive_expect(&landed[s], (S_ROWS + R_ROWS) * kBK * sizeof(float));
            tensor_load_3d(stage, &s_map, k, s0, s_product, &landed[s]);
            if constexpr (R_ALONG_K) {
                tensor_load_3d(raw_r, &r_map, k, r0, r_product, &landed[s]);
            } else {
#pragma unroll
                for (int box = 0; box < R_ROWS / kBoxRows; ++box)
                    tensor_load_3d(raw_r + box * kBoxRows * kBK, &r_map, r0 + box * kBoxRows, k, r_product,
                                   &landed[s]);
            }
        }
    }
}

/* One block: the producer warpgroup (thread 0 the copies, warps 1-3 the
 * split), then two consumer warpgroups. R_ALONG_K: R's rows are k-contiguous in memory.
 * TRANSPOSED: R is B^T and S is A (the result is D^T); otherwise R is A and
 * S is B^T. `items`: the output tiles of every slice or product. */
template <bool R_ALONG_K, bool TRANSPOSED>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32x3_inplace_kernel(const __grid_constant__ CUtensorMap r_map, const __grid_constant__ CUtensorMap s_map,
                                fsg_gemm problem, fsg_batch batch, Operands operands, int64_t items) {
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    uint64_t *landed = reinterpret_cast<uint64_t *>(reinterpret_cast<char *>(smem) + Layout::kRingBytes);
    if (threadIdx.x == 0)  // before start_ring's fence and __syncthreads
        for (int s = 0; s < kStages; ++s) mbarrier_init(&landed[s], 1);
    const StageRing ring = start_ring<kStages, kStageFloats, kSplitThreads>(smem);
    // Launched overlapped (see the launcher): everything above touched only shared memory and the parameters;
    // from here on the block reads and writes global memory, so it waits until the kernel before it in the
    // stream has finished and its writes are visible. Without an overlapped launch the wait returns at once.
    wait_for_previous_grid();
    float *const stages = ring.stages;
    uint64_t *const full = ring.full, *const empty = ring.empty;
    const int tiles_r = (int)ceil_div(operands.rows_r, kTile), tiles_s = (int)ceil_div(operands.rows_s, kTile);
    const int tid = threadIdx.x;
    auto depth_tiles = [&](int64_t z) { return (int)ceil_div(slice_or_product(problem, batch, z).k, kBK); };

    if (tid < 128) {
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            // The copies, on a thread of their own, so that they run as far ahead as the stages allow while the
            // split warps wait for bytes.
            copy_tiles<R_ALONG_K, kStages, kStageFloats, kTile, kTile, 2 * kPartFloats>(
                stages, landed, empty, r_map, s_map, problem, batch, operands, items);
            // Every copy is issued: the next kernel in the stream may be launched. Its blocks start on the SMs
            // this grid leaves free (at once on idle ones, where the grid is smaller than the GPU) and wait
            // (above) until this grid has finished.
            allow_next_grid();
        } else if (tid >= 32) {
            // The split: each tile as soon as its bytes have landed.
            int64_t at = 0;
            for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
                const int count = depth_tiles(work_item(item, tiles_r, tiles_s).z);
                for (int t = 0; t < count; ++t, ++at) {
                    const int s = (int)(at % kStages);
                    mbarrier_wait(&landed[s], (int)(at / kStages) & 1);
                    float *stage = stages + s * kStageFloats;
                    split_in_place(stage, stage + kPartFloats, tid - 32);
                    fence_proxy_async();  // these stores, before the consumers' wgmmas read them
                    mbarrier_arrive(&full[s]);
                }
            }
        }
    } else {
        registers_up<kConsumerRegisters>();
        const int consumer = tid / 128 - 1, warp = (tid % 128) / 32, lane = tid % 32;
        const int row = consumer * kWgRows + warp * 16 + lane / 4, col = lane % 4;  // as rung 21's
        int64_t at = 0;  // the tile's place in the stages' sequence
        for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
            const WorkItem w = work_item(item, tiles_r, tiles_s);
            const fsg_gemm g = slice_or_product(problem, batch, w.z);
            const int count = (int)ceil_div(g.k, kBK);
            float corr[64] = {}, main[64] = {}, part[64];  // as rung 21's
            for (int t = 0; t < count; ++t, ++at) {
                const int s = (int)(at % kStages), parity = (int)(at / kStages) & 1;
                mbarrier_wait(&full[s], parity);
                mbarrier_wait(&landed[s], parity);  // R's bytes: done already (S's split waited on it)
                const float *s_hi = stages + s * kStageFloats, *s_lo = s_hi + kPartFloats;
                const float *raw_r = s_lo + kPartFloats;
#pragma unroll
                for (int half = 0; half < kKSteps / kStepsAtOnce; ++half) {
                    uint32_t r_hi[kStepsAtOnce][4], r_lo[kStepsAtOnce][4];
                    split_r_fragments<R_ALONG_K>(raw_r, row, col, half * kStepsAtOnce, r_hi, r_lo);
                    three_products<kStepsAtOnce, 64, TRANSPOSED>(part, corr, r_hi, r_lo, s_hi, s_lo,
                                                                             half * kStepsAtOnce);
                }
                mbarrier_arrive(&empty[s]);
#pragma unroll
                for (int i = 0; i < 64; ++i) main[i] += part[i];
            }
            store_output<TRANSPOSED>(g, (int64_t)w.tile_m * kTile + consumer * kWgRows, (int64_t)w.tile_n * kTile,
                                     [&](int i) { return combine(main[i], corr[i]); });
        }
    }
}

// ---- launcher ----
/* A tensor map of one operand: `along` elements in its contiguous direction,
 * `across` lines of ld floats, `products` matrices `step` floats apart (1
 * where the products share it), boxes of box_along x box_across in the
 * 128-byte swizzle, zeros outside. False where the copy engine cannot read it
 * so: an address or a stride that is not a multiple of 16 bytes, coordinates
 * past an int, or no encoder. `type`: FP32 as it lies, or TF32 (rounded to
 * nearest as the copy lands: rung 24). */
inline bool operand_map(const float *p, int64_t ld, int64_t along, int64_t across, int64_t products, int64_t step,
                        int box_along, int box_across, CUtensorMap *map,
                        CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32) {
    const int64_t limit = INT32_MAX - kTile;  // the largest coordinate a tile may start at, and its box's reach
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || ld % 4 != 0 || ld < along ||
        (products > 1 && (step <= 0 || step % 4 != 0)) || along > limit || across > limit || products > INT32_MAX)
        return false;
    const EncodeTiled encode = encode_tiled();
    if (encode == nullptr) return false;
    const cuuint64_t sizes[3] = {(cuuint64_t)along, (cuuint64_t)across, (cuuint64_t)products};
    const cuuint64_t line = (cuuint64_t)ld * sizeof(float);
    const cuuint64_t strides[2] = {line, products > 1 ? (cuuint64_t)step * sizeof(float) : line};
    const cuuint32_t box[3] = {(cuuint32_t)box_along, (cuuint32_t)box_across, 1}, unit[3] = {1, 1, 1};
    return encode(map, type, 3, const_cast<float *>(p), sizes, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* How a call runs on this rung's block (and rung 24's): which operand wgmma
 * reads from shared memory (S, k-contiguous in the caller's matrix) and which
 * from registers (R), their tensor maps (R in tiles of r_rows rows, S of
 * s_rows, elements of `type`), and the persistent grid: one block per SM,
 * or per output tile where there are fewer. */
struct Orientation {
    bool transposed;  // B row-major (so A too): S is A, R is B^T, the result D^T
    Operands operands;
    CUtensorMap r_map, s_map;
    int64_t items;  // the output tiles of every slice or product
    dim3 grid;
};

/* False where the call cannot run so: k == 0, no k-contiguous operand, a
 * matrix the copy engine cannot read (operand_map), or a grid past an int. */
inline cudaError_t orient(const fsg_gemm *g, const fsg_batch &batch, int r_rows, int s_rows, CUtensorMapDataType type,
                          Orientation *o, bool *possible) {
    *possible = false;
    if (g->k == 0 || (g->a_trans && !g->b_trans) || g->k_slice % kBK != 0 || batch.count > kFsgMaxBatch)
        return cudaSuccess;
    o->transposed = !g->b_trans;  // B row-major: then A is row-major (above), and S is A
    const bool in_batch = batch.count > 1;
    const bool own_a = in_batch && batch.step_a != 0, own_b = in_batch && batch.step_b != 0;
    const int64_t products_a = own_a ? batch.count : 1, products_b = own_b ? batch.count : 1;
    bool mapped;
    if (o->transposed) {  // S = A (k contiguous), R = B^T: B row-major, its rows of n contiguous
        o->operands = {g->n, g->m, own_b, own_a};
        mapped = operand_map(g->a, g->lda, g->k, g->m, products_a, batch.step_a, kBK, s_rows, &o->s_map, type) &&
                 operand_map(g->b, g->ldb, g->n, g->k, products_b, batch.step_b, kBoxRows, kBK, &o->r_map, type);
    } else {  // S = B^T (B column-major: k contiguous), R = A either way
        o->operands = {g->m, g->n, own_a, own_b};
        mapped = operand_map(g->b, g->ldb, g->k, g->n, products_b, batch.step_b, kBK, s_rows, &o->s_map, type) &&
                 (g->a_trans
                      ? operand_map(g->a, g->lda, g->m, g->k, products_a, batch.step_a, kBoxRows, kBK, &o->r_map, type)
                      : operand_map(g->a, g->lda, g->k, g->m, products_a, batch.step_a, kBK, r_rows, &o->r_map, type));
    }
    const int64_t tiles = ceil_div(o->operands.rows_r, r_rows) * ceil_div(o->operands.rows_s, s_rows);
    // operand_map keeps a kTile-row tile's coordinates inside an int; a larger tile needs its own margin.
    if (!mapped || tiles > INT32_MAX || o->operands.rows_r > INT32_MAX - r_rows ||
        o->operands.rows_s > INT32_MAX - s_rows)
        return cudaSuccess;
    int sms;
    cudaError_t err = current_sm_count(&sms);
    if (err != cudaSuccess) return err;
    o->items = tiles * grid_z(*g, batch);
    o->grid = dim3((unsigned)(o->items < sms ? o->items : sms));
    *possible = true;
    return cudaSuccess;
}

/* This rung on one product, a batch or split-K's slices. *launched stays
 * false where it declines (orient's reasons). */
inline cudaError_t launch(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    *launched = false;
    Orientation o;
    bool possible;
    const cudaError_t err = orient(g, batch, kTile, kTile, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, &o, &possible);
    if (err != cudaSuccess || !possible) return err;
    auto run = [&](auto kernel) {
        return launch_overlapped(kernel, o.grid, kThreads, Layout::kSmemBytes, stream, o.r_map, o.s_map, *g, batch,
                                 o.operands, o.items);
    };
    const cudaError_t launch_err = o.transposed ? run(wgmma_tf32x3_inplace_kernel<false, true>)
                                   : g->a_trans ? run(wgmma_tf32x3_inplace_kernel<false, false>)
                                                : run(wgmma_tf32x3_inplace_kernel<true, false>);
    *launched = true;
    const cudaError_t last = cudaGetLastError();  // read, which also clears it, either way
    return launch_err != cudaSuccess ? launch_err : last;
}

}  // namespace tf32x3_inplace
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file alone) ----
/* Registered as kernel="tf32x3_inplace:lesson": one product at a time (a stack runs
 * product by product). kernel="tf32x3_inplace" runs the engine's copy of this code
 * (kernels/engine/tf32x3_inplace.cuh), with stacks in one launch. */
extern "C" cudaError_t fsg_tf32x3_inplace_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::lesson::tf32x3_inplace::wgmma_else_mma_sync(g, &fsg::lesson::tf32x3_inplace::kOneProduct, stream,
                                                            fsg::lesson::tf32x3_inplace::launch,
                                                            fsg_tf32x3_mma_sgemm);
}

#endif /* FASTSGEMM_LADDER_23_TF32X3_INPLACE */
