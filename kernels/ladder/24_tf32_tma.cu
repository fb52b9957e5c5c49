/*
 * Rung 24, tf32_tma: rung 19's TF32 wgmma with no pack pass. The copy engine
 * rounds each operand to TF32 as it lands.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): elsewhere the launcher runs
 * rung 17 (tf32_mma), as rung 19's does.
 *
 * Where the time went. The tensor cores read an FP32 value as TF32 by dropping
 * its low 13 bits, so rung 19 rounds every operand first, in a pack pass of
 * its own: A and B read, rounded, written to a workspace and read back, all
 * through DRAM before the GEMM starts. On the H200 that pass is a fifth of the
 * call at 4096^3 (tf32 0.76x cuBLAS's TF32 GEMM there) and an eighth at 8192^3
 * (0.88x). Rounding inside the GEMM was tried three ways and lost each time
 * (rung 19's header, benchmarks/NOTES.md).
 *
 * The idea. A tensor map names the element type of the matrix it describes,
 * and TF32 is one of the types. A tensor copy through a map of type TF32
 * reads FP32 from global memory and writes each value to shared memory
 * rounded to TF32, to nearest with ties to even: measured on the H200, 2047
 * of 2048 values bit for bit, ties and signs among them, the 2048th a NaN
 * made canonical (benchmarks/harness/tma_round.cu, benchmarks/NOTES.md).
 * It is the rounding rung 19's pack pass does (cvt.rn), so the copy engine
 * does the pass's work on the way, at no cost. cuBLAS's own TF32 kernels on
 * Hopper do the same: their SASS has tensor copies and wgmma, and nothing
 * that rounds (benchmarks/results/raw/cublas-tf32-sass.txt).
 *
 * What is left is rung 23's block with no split at all:
 *   - the operand wgmma reads from shared memory (S) is one whose k is
 *     contiguous in the caller's matrix, landed by one tensor copy per stage
 *     (256 rows x 32 k, the 128-byte swizzle that is wgmma's layout);
 *   - the other (R, 128 rows) is copied as it lies. Where its k is contiguous
 *     too (A row-major, B column-major), it lies in wgmma's layout as well and
 *     wgmma reads it from shared memory; otherwise each consumer thread loads
 *     its fragments into registers (16 loads a k-tile, no rounding left to
 *     do), two sets in turn, so that a tile's loads run while the tile
 *     before's wgmmas still read the other set;
 *   - where B is row-major (numpy's default), the kernel computes D^T =
 *     B^T A^T, so that S is A, and writes each result to D transposed (rung
 *     23's orientation and epilogue).
 * One product per k-step instead of rung 23's three, so the consumers keep one
 * k-tile's wgmmas in flight while they issue the next (wait_group 1): the
 * tensor cores do not wait between tiles. Persistent grid, one block per SM:
 * the producer runs on into the next output tile while the consumers store
 * the last one, through rung 23's epilogue.
 * The products and the order of the sums are rung 19's, so the result is the
 * same, bit for bit (tests/test_tf32_tma.py).
 *
 * Measured on the H200, timed round by round against cuBLAS's TF32 GEMM
 * (benchmarks/NOTES.md, "Rung 20"): 0.98-1.11x from 4096^3 to 16384^3 in
 * every layout the copy engine takes, where rung 19 ran 0.75-1.02x.
 *
 * Tile parameters: 128 x 256 x 32 output tile (128 rows of R, 256 of S), as rung 19's: each consumer
 * warpgroup owns 64 rows of R, 128 accumulators a thread, and issues one m64n256k8 a k-step of 8 from shared
 * memory, or two m64n128k8 with R from registers (one m64n256k8 there made ptxas serialize the wgmmas: it
 * reloaded the fragments of each k-step into the same four registers). A stage holds S (32 KiB) and R
 * (16 KiB); four stages.
 *
 * Limits: the tensor copies need 16-byte aligned matrices whose leading
 * dimension and batch steps are multiples of 4 floats, and a k-contiguous
 * operand. Anything else, and wgmma-less devices, run rung 17 (tf32_mma).
 * kernel="tf32_tma" (the engine's copy) runs rung 19's packed path there
 * instead, the same numbers bit for bit, and stacks in one launch.
 * Stacks: product by product.
 */
#ifndef FASTSGEMM_LADDER_24_TF32_TMA
#define FASTSGEMM_LADDER_24_TF32_TMA

#include <cuda.h>  // CUtensorMap and the driver's tensor-map encoder, reached through the runtime

#include "common.cuh"

namespace fsg {
namespace lesson {
namespace tf32_tma {

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

/* Dynamic shared memory of a pipeline: its stages, then a full and an empty barrier per stage. */
constexpr size_t pipeline_smem_bytes(int stages, int stage_floats) {
    return (size_t)stages * stage_floats * sizeof(float) + 2 * (size_t)stages * sizeof(uint64_t);
}

constexpr int kR = 128, kS = 256;            // output tile: 128 rows of R x 256 rows of S
constexpr int kSHalves = kS / 128;           // the accumulators' halves of 128 columns (wgmma_64x256x8)
constexpr int kRFloats = kR * kBK;           // R: 128 x 32, 16 KiB
constexpr int kSFloats = kS * kBK;           // S: 256 x 32, 32 KiB
constexpr int kStageFloats = kSFloats + kRFloats;
constexpr int kStages = 4;
constexpr int kKSteps = kBK / 8;  // wgmma k-steps of 8 per k-tile
constexpr size_t kSmemBytes = pipeline_smem_bytes(kStages, kStageFloats);
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");
constexpr int kBoxRows = 32;  // a row-contiguous R comes in boxes of 32 rows x 32 k (128 bytes wide), as rung 23's
constexpr int kTile = 128;    // rung 23's output tile: the margin operand_map keeps inside an int

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

/* d (+)= A * B for a 64 x 256 x 8 tile (rung 24), as one instruction: d[0] holds columns 0-127 and d[1]
 * columns 128-255, each as wgmma_64x128x8 lays them out, so that the 128 accumulators are those of two
 * m64n128 wgmmas side by side. b: 256 rows of B^T from one descriptor (32 atoms of 8 rows). */
__device__ __forceinline__ void wgmma_64x256x8(float (&d)[2][64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
        "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
        "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "
        "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, "
        "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, "
        "%119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1;\n}\n"
        : FSG_WGMMA_ACCUMULATORS_64(d[0]), FSG_WGMMA_ACCUMULATORS_64(d[1])
        : "l"(a), "l"(b), "r"(accumulate));
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

// ---- what this rung keeps of rung 23 (copied forward) ----
/* Element (row, k) of a K-major operand tile in the 128-byte swizzle (above);
 * row is m for A, n for B. */
__device__ __forceinline__ int operand_offset(int row, int k) {
    return row * kBK + (((k / 4) ^ (row % 8)) * 4) + k % 4;
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

inline unsigned grid_z(const fsg_gemm &g, const fsg_batch &batch) {
    return batch.count > 1 ? (unsigned)batch.count : slice_count(g);
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

/* Element (r, k) of raw R's 128 x 32 tile. Along k (R's rows k-contiguous in
 * memory): one tensor box, rung 21's layout (operand_offset). Otherwise four
 * boxes of 32 rows, each 32 lines of k of 128 bytes, chunks swizzled by k % 8. */
template <bool R_ALONG_K>
__device__ __forceinline__ int raw_r_offset(int r, int k) {
    if constexpr (R_ALONG_K) return operand_offset(r, k);
    else return (r / kBoxRows) * kBoxRows * kBK + k * kBoxRows + ((((r % kBoxRows) / 4) ^ (k % 8)) * 4) + r % 4;
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

// ---- kernel ----
/* A consumer thread's fragments of R (rows k-contiguous in memory: no) for a
 * whole k-tile, in wgmma's register layout (rows row and row + 8, k col and
 * col + 4 of each k-step), as the copy engine landed them: already TF32. */
__device__ __forceinline__ void load_fragments(const float *raw_r, int row, int col, uint32_t (&a)[kKSteps][4]) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int k = 8 * ks + col + 4 * (i / 2);
            a[ks][i] = __float_as_uint(raw_r[raw_r_offset<false>(row + 8 * (i % 2), k)]);
        }
}

/* touch_registers for a whole k-tile's fragments: kept unchanged up to here, where their wgmmas are done. */
__device__ __forceinline__ void keep_fragments(uint32_t (&a)[kKSteps][4]) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) touch_registers(a[ks]);
}

/* One k-tile's products, acc += R S^T over its four k-steps, as one committed
 * wgmma group: R from this thread's fragments (a), two m64n128k8 a k-step, or,
 * where R's rows are k-contiguous and so lie in wgmma's own layout, straight
 * from shared memory (this consumer's 64 rows of r), as S always is, one
 * m64n256k8 a k-step. */
template <bool R_ALONG_K>
__device__ __forceinline__ void products(float (&acc)[2][64], const uint32_t (&a)[kKSteps][4], const float *r,
                                         const float *s) {
    wgmma_fence();  // the fragments' (and the accumulators') registers are written: wgmma may read them
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
        if constexpr (R_ALONG_K) {
            wgmma_64x256x8(acc, descriptor(r + 8 * ks), descriptor(s + 8 * ks), 1);
        } else {
#pragma unroll
            for (int j = 0; j < kSHalves; ++j)
                wgmma_64x128x8_rs(acc[j], a[ks], descriptor(s + j * 128 * kBK + 8 * ks), 1);
        }
    }
    wgmma_commit();
}

/* One block: the producer warpgroup (thread 0 issues the tensor copies), then
 * two consumer warpgroups. R_ALONG_K: R's rows are k-contiguous in memory.
 * TRANSPOSED: R is B^T and S is A (the result is D^T); otherwise R is A and
 * S is B^T. `items`: the output tiles of every slice or product. */
template <bool R_ALONG_K, bool TRANSPOSED>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32_tma_kernel(const __grid_constant__ CUtensorMap r_map, const __grid_constant__ CUtensorMap s_map,
                          fsg_gemm problem, fsg_batch batch, Operands operands, int64_t items) {
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    const StageRing ring = start_ring<kStages, kStageFloats>(smem);
    float *const stages = ring.stages;
    uint64_t *const full = ring.full, *const empty = ring.empty;
    const int tiles_r = (int)ceil_div(operands.rows_r, kR), tiles_s = (int)ceil_div(operands.rows_s, kS);
    const int tid = threadIdx.x;

    if (tid < 128) {
        registers_down<kProducerRegisters>();
        if (tid == 0)
            copy_tiles<R_ALONG_K, kStages, kStageFloats, kR, kS, kSFloats>(
                stages, full, empty, r_map, s_map, problem, batch, operands, items);
    } else {
        registers_up<kConsumerRegisters>();
        const int consumer = tid / 128 - 1, warp = (tid % 128) / 32, lane = tid % 32;
        const int row = consumer * kWgRows + warp * 16 + lane / 4, col = lane % 4;  // as rung 21's
        int64_t at = 0;  // the tile's place in the stages' sequence
        for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
            const WorkItem w = work_item(item, tiles_r, tiles_s);
            const fsg_gemm g = slice_or_product(problem, batch, w.z);
            const int count = (int)ceil_div(g.k, kBK);
            float acc[kSHalves][64] = {};  // summed from zero, as rung 19's: the same bits (a -0 sum included)
            // Across k, R's fragments come from registers, two sets, tile by tile in turn: a tile's wgmmas read
            // theirs while the next tile's are loaded into the other. `step` is written out twice (even and odd
            // tiles) so that each set stays in registers of its own. Along k there are none (products).
            uint32_t even[kKSteps][4], odd[kKSteps][4];
            auto step = [&](int t, uint32_t(&mine)[kKSteps][4], uint32_t(&other)[kKSteps][4]) {
                const int s = (int)((at + t) % kStages);
                mbarrier_wait(&full[s], (int)((at + t) / kStages) & 1);
                const float *stage = stages + s * kStageFloats, *raw_r = stage + kSFloats;
                if constexpr (!R_ALONG_K) load_fragments(raw_r, row, col, mine);
                products<R_ALONG_K>(acc, mine, raw_r + consumer * kWgRows * kBK, stage);
                wgmma_wait<1>();  // tile t - 1's group is done: its stage may be refilled, its fragments reused
                if constexpr (!R_ALONG_K) keep_fragments(other);
                if (t > 0) mbarrier_arrive(&empty[(at + t - 1) % kStages]);
            };
            for (int t = 0; t < count; t += 2) {
                step(t, even, odd);
                if (t + 1 < count) step(t + 1, odd, even);
            }
            wgmma_wait_all();
            mbarrier_arrive(&empty[(at + count - 1) % kStages]);
            at += count;
#pragma unroll
            for (int j = 0; j < kSHalves; ++j) touch(acc[j]);
            if constexpr (!R_ALONG_K) {  // read by the last wgmmas until the wait: not reused before it
                keep_fragments(even);
                keep_fragments(odd);
            }
            const int64_t row0 = (int64_t)w.tile_m * kR + consumer * kWgRows;
#pragma unroll
            for (int j = 0; j < kSHalves; ++j)
                store_output<TRANSPOSED>(g, row0, (int64_t)w.tile_n * kS + j * 128,
                                                   [&](int i) { return acc[j][i]; });
        }
    }
}

// ---- launcher ----
/* This rung on one product, a batch or split-K's slices, in rung 23's
 * orientation, with tensor maps of type TF32 (the copy engine rounds).
 * *launched stays false where it declines (rung 23's orient: no k-contiguous
 * operand, or a matrix the copy engine cannot read). */
inline cudaError_t launch(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    *launched = false;
    Orientation o;
    bool possible;
    const cudaError_t err = orient(g, batch, kR, kS, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, &o, &possible);
    if (err != cudaSuccess || !possible) return err;
    auto run = [&](auto kernel) {
        launch_with_smem(kernel, o.grid, kThreads, kSmemBytes, stream, o.r_map, o.s_map, *g, batch, o.operands,
                         o.items);
    };
    if (o.transposed) run(wgmma_tf32_tma_kernel<false, true>);
    else if (g->a_trans) run(wgmma_tf32_tma_kernel<false, false>);
    else run(wgmma_tf32_tma_kernel<true, false>);
    *launched = true;
    return cudaGetLastError();
}

}  // namespace tf32_tma
}  // namespace lesson
}  // namespace fsg

// ---- launcher ----
/* Registered as kernel="tf32_tma:lesson": one product at a time (a stack runs
 * product by product). kernel="tf32_tma" runs the engine's copy of this code
 * (kernels/engine/tf32_tma.cu), with stacks in one launch. */
extern "C" cudaError_t fsg_tf32_tma_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::lesson::tf32_tma::wgmma_else_mma_sync(g, &fsg::lesson::tf32_tma::kOneProduct, stream,
                                                      fsg::lesson::tf32_tma::launch, fsg_tf32_mma_sgemm);
}

#endif /* FASTSGEMM_LADDER_24_TF32_TMA */
