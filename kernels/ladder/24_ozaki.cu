/*
 * Rung 24, ozaki: FP32-accurate products on the INT8 tensor cores, by exact
 * integer arithmetic in residues. The last rung, and another road to FP32
 * accuracy than the TF32 splits of rungs 18-23: the INT8 tensor cores.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): elsewhere the launcher runs
 * rung 20 (tf32x3), which runs rung 18 where wgmma is not had.
 *
 * The idea. The H100's tensor cores multiply 8-bit integers four times as
 * fast as TF32 values, and exactly: s8 x s8 products summed in s32 lose
 * nothing. So turn the FP32 product into integer products:
 *   1. Scale. Each row i of A is multiplied by a power of two 2^sa_i that puts
 *      its largest element just under 2^bits_a, and rounded to an integer A';
 *      each column j of B likewise, with bits_b (scale_kernel, slice_kernel).
 *      Every element keeps bits_a bits below its row's largest: the rounding
 *      error of A' is at most 2^-bits_a of that largest element, about FP32's
 *      own unit when bits_a is 24. The exact integer product C' = A' B' then
 *      differs from 2^sa_i 2^sb_j (A B)_ij by no more than those roundings make.
 *   2. Split into residues. C' is far too wide for s32, but it is known
 *      exactly once it is known modulo n pairwise coprime moduli m_1 .. m_n
 *      whose product P exceeds 2 |C'| (the Chinese remainder theorem). With
 *      moduli up to 256, A' mod m_t and B' mod m_t are 8-bit integers in the
 *      symmetric range (-128 .. 127), and the n products (A' mod m_t)(B' mod
 *      m_t), each exact in s32, are n INT8 GEMMs (gemm_kernel).
 *   3. Recombine. Each GEMM's sums are reduced mod m_t to residues; C' is the
 *      one integer of magnitude below P / 2 with those residues, found in
 *      64-bit integer arithmetic with a double-precision quotient
 *      (reconstruct_kernel), and scaled back by 2^-(sa_i + sb_j) into FP32.
 *
 * How many bits. |C'_ij| <= K 2^bits_a 2^bits_b, which must stay below P / 4
 * (a margin that keeps the quotient's rounding safe): so bits_a + bits_b is
 * log2(P / 4K), rounded down. Eight moduli (P about 2^63.6) give 49 bits at
 * K = 4096 (25 + 24), 47 at K = 16384; seven (P about 2^55.7) give 41 at K =
 * 4096. K is cut into panels of at most kPanelK so that each panel keeps
 * those bits; panels add onto D in FP32.
 *
 * What it cannot represent. An element r binades below its row's largest
 * keeps only bits_a - r bits. In an ordinary row the small elements weigh
 * little and the row's error stays near 2^-bits_a of its magnitude; but a row
 * of A (column of B) whose small elements carry its weight (an outlier among
 * small values, a softmax row, exponents spread wide: its rounding errors sum
 * to more than kRoundingShare units of 2^-bits of its magnitude, or it loses
 * more than kLostShare of its magnitude outright), or that
 * holds an Inf or a NaN, is out of range: its outputs are computed instead by
 * dot products in double (reconstruct_kernel's other branch,
 * fix_columns_kernel), which give IEEE Inf and NaN as numpy.matmul does and
 * FP32 accuracy at any exponent range, at the speed of a naive kernel for
 * those rows. So the rung's speed depends on the data, and auto does not run
 * it (registry.c).
 *
 * Tile parameters: the GEMM is rung 19's pipeline on 8-bit data. A packed
 * tile is 128 rows x 128 k of int8: 16 KiB, rows of 128 bytes in the same
 * 128-byte swizzle, so rung 19's descriptors and bulk copies serve as they
 * are; a wgmma k-step is 32 values (32 bytes) instead of 8. The grid is
 * persistent, one block an SM; its work items are one 128 x 256 output tile
 * under one modulus each. A block's producer streams its items' k-tiles as one
 * sequence; the consumers reset their accumulators at each item's first
 * k-step and write its residues after its last.
 *
 * Limits: sm_90a; a workspace of about n (M + N) K + n M N bytes per panel;
 * a call whose workspace cannot be had runs tf32x3. Split-K's slices (a
 * small output, a long K) run one after another, each a product of its own.
 * This launcher is kernel="ozaki:lesson". kernel="ozaki" (and "ozaki:7",
 * seven moduli) run the engine's scheme (kernels/engine/ozaki.cu): rows scaled
 * by their 2-norm, and a check of each output's error bound in place of the
 * rows out of range, so that the double path takes only the outputs that need
 * it.
 *
 * Stacks: product by product, one call of the whole scheme each (its
 * workspace and passes are a product's).
 * Next: at 16384^3 the GEMM is most of the call, its tensor pipe busy 93% of
 * its cycles (87.6% at 8192^3), and called back to back it holds the board at
 * its 700 W cap with the SM clock near 1.47 GHz (benchmarks/NOTES.md, "The
 * persistent grid"). What is left there is energy: fewer joules an operation
 * (reading A from shared memory once a k-step instead of twice did not help)
 * or fewer operations. Outside the GEMM, the scale pass reads each operand
 * twice and the slice pass (8 integer residues an element) is
 * instruction-bound.
 */
#ifndef FASTSGEMM_LADDER_24_OZAKI
#define FASTSGEMM_LADDER_24_OZAKI

#include "common.cuh"
#include "support/device_memory.h"  // the workspace is counted against fastsgemm's memory limit

namespace fsg {
namespace lesson {
namespace ozaki {

// ---- the moduli ----
constexpr int kMaxModuli = 8;
/* Pairwise coprime (2^8, 3 5 17, 11 23, 251, 13 19, 241, 239, 233), each at most 256, so that a residue in the
 * symmetric range fits an int8; the largest such, so that n of them reach the widest P. */
constexpr int kModuli[kMaxModuli] = {256, 255, 253, 251, 247, 241, 239, 233};

/* What the kernels need to know of the first `count` moduli. */
struct Moduli {
    int count;
    int m[kMaxModuli];
    double inverse[kMaxModuli];   // 1 / m_t, for the GEMM's reduction of its sums
    uint64_t weight[kMaxModuli];  // (P / m_t) ((P / m_t)^-1 mod m_t): 1 mod m_t, 0 mod every other modulus
    float fraction[kMaxModuli];   // weight_t / P in float, the quotient's terms
    uint64_t product;             // P
    uint64_t offsets;             // 128 sum_t weight_t (mod 2^64): residues + 128 are bytes 0..255
};

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

/* The tensor cores must see operands rounded to TF32 (rung 19) or split into
 * TF32 hi and lo parts (rung 20), K-major. Doing that inside the GEMM costs
 * the producer threads a pass over shared memory, or a proxy fence per
 * thread per tile (benchmarks/NOTES.md). Instead one small kernel (both
 * operands, one launch) reads each once, in whatever layout it has, and
 * writes ready operand tiles to a workspace: kPackRows rows (m or n) x kBK
 * k, in the operand layout above, zeros past the matrix's edges, PARTS parts
 * per tile (the rounded value; or hi, then lo) one after the other. Row tile r's tiles follow each other
 * along k, so a block reads its operands as one contiguous run, and a stage
 * of the GEMM arrives by plain bulk copies: no tensor maps, no edge cases,
 * any alignment of the caller's matrices. */
constexpr int kPackRows = 128;                // rows (m or n) of one packed tile
constexpr int kTileFloats = kPackRows * kBK;  // one part of one packed tile: 16 KiB
constexpr uint32_t kTileBytes = kTileFloats * sizeof(float);
constexpr int kPackThreads = 256;

constexpr int kBM = 128, kBN = 256;              // block tile: one packed tile of A, two of B, as rung 19's
constexpr int kKTile = 128;                      // k of one packed int8 tile: a 128-byte row
constexpr int kBTiles = kBN / kPackRows;
constexpr int kStageFloats = (1 + kBTiles) * kTileFloats;  // 48 KiB, counted in floats as the pipeline counts
constexpr int kStages = 4;
constexpr size_t kSmemBytes = pipeline_smem_bytes(kStages, kStageFloats);
constexpr int kKSteps = kKTile / 32;             // wgmma k-steps of 32 per tile
constexpr int64_t kPanelK = 16384;               // the deepest panel: 47 bits of eight moduli
static_assert(kPackRows * kKTile == (int)kTileBytes, "an int8 tile has the bytes of a TF32 tile");
static_assert(kPanelK * 128 * 128 < ((int64_t)1 << 31), "a panel's s32 sums of residue products cannot overflow");

constexpr int kScaleThreads = 256;
constexpr int kSliceK = 32;  // k a slice block converts: kPackRows x kSliceK floats, as rung 19's pack pass reads

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
 * constraint c: "+f" for FP32 accumulators, "+r" for the s32 ones of the INT8 wgmma (rung 24). */
#define FSG_WGMMA_ACCUMULATORS_64_AS(c, d)                                                                       \
    c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]), c(d[8]), c(d[9]), c(d[10]), c(d[11]),   \
        c(d[12]), c(d[13]), c(d[14]), c(d[15]), c(d[16]), c(d[17]), c(d[18]), c(d[19]), c(d[20]), c(d[21]),       \
        c(d[22]), c(d[23]), c(d[24]), c(d[25]), c(d[26]), c(d[27]), c(d[28]), c(d[29]), c(d[30]), c(d[31]),       \
        c(d[32]), c(d[33]), c(d[34]), c(d[35]), c(d[36]), c(d[37]), c(d[38]), c(d[39]), c(d[40]), c(d[41]),       \
        c(d[42]), c(d[43]), c(d[44]), c(d[45]), c(d[46]), c(d[47]), c(d[48]), c(d[49]), c(d[50]), c(d[51]),       \
        c(d[52]), c(d[53]), c(d[54]), c(d[55]), c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]), c(d[61]),       \
        c(d[62]), c(d[63])
#define FSG_WGMMA_ACCUMULATORS_64(d) FSG_WGMMA_ACCUMULATORS_64_AS("+f", d)

/* d (+)= A * B for a 64 x 128 x 32 tile of signed 8-bit integers, summed exactly in s32 (rung 24): A from
 * descriptor a, B^T from b, both K-major in the 128-byte swizzle. A row of such a tile is 128 values, 128
 * bytes, so the layout, the descriptors and a k-step's 32-byte move are those of a TF32 tile of 32. The
 * integer form takes no scale or transpose operands. */
__device__ __forceinline__ void wgmma_64x128x32_s8(uint32_t (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p;\n}\n"
        : FSG_WGMMA_ACCUMULATORS_64_AS("+r", d)
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

/* A contiguous copy of `bytes` (a multiple of 16, both addresses 16-byte
 * aligned) from global to shared memory by the copy engine, completing on bar. */
__device__ __forceinline__ void bulk_load(float *dst, const float *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_address(dst)),
                 "l"(src), "r"(bytes), "r"(smem_address(bar))
                 : "memory");
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
 * product (or split-K slice by slice: grid z's meaning; rung 24: modulus by modulus), each product's output
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

/* The producer's side of the stage ring, for one thread: for each of
 * tiles_k tiles, wait until its stage's previous tile has been read (empty),
 * announce the stage's bytes (full) and have copy(t, stage, bar) issue the
 * bulk copies that fill the stage, completing on bar. */
template <int STAGES, int STAGE_FLOATS, typename Copy>
__device__ __forceinline__ void produce_stages(float *stages, uint64_t *full, uint64_t *empty, int tiles_k,
                                               Copy &&copy) {
    for (int t = 0; t < tiles_k; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) mbarrier_wait(&empty[s], (t / STAGES - 1) & 1);  // tile t - STAGES is read
        mbarrier_arrive_expect(&full[s], STAGE_FLOATS * sizeof(float));
        copy(t, stages + s * STAGE_FLOATS, &full[s]);
    }
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

// ---- pass 1: each row's scale ----
/* The rows (m of A, n of B^T) of one operand over `depth` k: element (row, k) at src[row * ld + k] when
 * along_k, else at src[k * ld + row]. */
struct Rows {
    const float *src;
    int64_t ld, rows;
    bool along_k;
};

/* How much rounding to the integer grid a row may take before it is out of range: its rounding errors,
 * summed, may reach kRoundingShare units of the grid's last bit (2^-bits) of its sum of magnitudes. An
 * ordinary row takes 0.7 (uniform data) to 1.7 (normal data) such units: a quarter unit per element, against
 * elements a fifth to a half of the largest. A row whose small elements carry its weight, so that they keep
 * few bits (an outlier among small values, a softmax row, exponents spread wide), takes more. */
constexpr double kRoundingShare = 4.0;
/* And how much of its magnitude it may lose outright, in elements scaled below one unit of the grid: 2^-30,
 * far below FP32's own unit. Where the bits are many (26 each at K = 512) a row whose exponents spread over
 * 2^80 rounds most of its elements exactly, and its rounding share can stay under kRoundingShare; but its
 * elements lost outright weigh far more than this. */
constexpr double kLostShare = 0x1p-30;

/* The rows' sums over one lane's share of k, then over the lanes of a row: a warp's (along k: shuffles) or,
 * across k, the 8 warps' of a block (through shared memory, the total back to every warp). */
struct RowScan {
    bool along_k;
    int warp, lane;
};
template <typename T, typename Combine>
__device__ __forceinline__ T whole_row(const RowScan &scan, T mine, Combine combine, T (&across)[8][32]) {
    if (scan.along_k) {
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) mine = combine(mine, __shfl_xor_sync(0xffffffffu, mine, offset));
        return mine;
    }
    __syncthreads();  // the previous use of `across` is over
    across[scan.warp][scan.lane] = mine;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < 8; ++w) mine = w == 0 ? across[0][scan.lane] : combine(mine, across[w][scan.lane]);
    return mine;
}

/* Rows of A, then of B: shift[row] = bits - 1 - (exponent of the row's largest finite element), so that
 * scaling by 2^shift puts that element in [2^(bits-1), 2^bits). out_of_range[row] = 1 where the row holds an
 * Inf or a NaN, or where its scaled elements' rounding errors sum to more than kRoundingShare 2^-bits of their
 * sum of magnitudes, or those scaled below one unit to more than kLostShare of it. Two passes over the row (the second mostly from L2): the largest, then the sums. A row
 * along k is one warp's; rows across k are one lane's each, 32 to a block, the block's 8 warps taking every
 * 8th k. */
template <int = 0>  // a template, as every kernel of a rung file that a later rung may include
__global__ void __launch_bounds__(kScaleThreads) scale_kernel(Rows a, Rows b, int64_t depth, int bits_a,
                                                              int bits_b, int *shift, uint8_t *out_of_range) {
    static_assert(kScaleThreads == 8 * 32, "rows across k: 8 warps");
    __shared__ float largest_of[8][32];
    __shared__ double sum_of[8][32];
    const int64_t blocks_a = a.along_k ? ceil_div(a.rows, (int64_t)8) : ceil_div(a.rows, (int64_t)32);
    const bool is_a = blockIdx.x < blocks_a;
    const Rows op = is_a ? a : b;
    const int64_t block = is_a ? blockIdx.x : blockIdx.x - blocks_a;
    const int bits = is_a ? bits_a : bits_b;
    const int64_t first = is_a ? 0 : a.rows;  // b's rows follow a's in shift and out_of_range
    const RowScan scan = {op.along_k, (int)threadIdx.x / 32, (int)threadIdx.x % 32};
    // This thread's row, and its share of k: every 32nd along k, every 8th across.
    const int64_t row = op.along_k ? block * 8 + scan.warp : block * 32 + scan.lane;
    const int64_t k_first = op.along_k ? scan.lane : scan.warp, k_step = op.along_k ? 32 : 8;
    const int64_t k_pitch = op.along_k ? 1 : op.ld, row_pitch = op.along_k ? op.ld : 1;  // (row, k): row_pitch row + k_pitch k
    const float *src = op.src + (row < op.rows ? row : 0) * row_pitch;
    const int64_t end = row < op.rows ? depth : 0;

    float largest = 0.0f;
    bool special = false;
    for (int64_t k = k_first; k < end; k += k_step) {
        const float x = src[k * k_pitch];
        if (isfinite(x)) largest = fmaxf(largest, fabsf(x));
        else special = true;
    }
    largest = whole_row(scan, largest, [](float x, float y) { return fmaxf(x, y); }, largest_of);
    special = whole_row(scan, (float)special, [](float x, float y) { return fmaxf(x, y); }, largest_of) != 0.0f;
    const int top = largest > 0.0f ? ilogbf(largest) : 0;
    const int row_shift = largest > 0.0f ? bits - 1 - top : 0;
    const double scale = __longlong_as_double((int64_t)(1023 + row_shift) << 52);  // 2^row_shift, as slice_kernel's
    // Of the scaled elements: their sizes, what rounding to integers moves them, and the sizes below one unit.
    double total = 0.0, rounding = 0.0, lost = 0.0;
    for (int64_t k = k_first; k < end; k += k_step) {
        const double size = fabs((double)src[k * k_pitch]) * scale;
        if (size < INFINITY) {
            total += size;
            rounding += fabs(rint(size) - size);
            if (size < 1.0) lost += size;
        }
    }
    const auto add = [](double x, double y) { return x + y; };
    total = whole_row(scan, total, add, sum_of);
    rounding = whole_row(scan, rounding, add, sum_of);
    lost = whole_row(scan, lost, add, sum_of);
    if (row >= op.rows || (op.along_k ? scan.lane : scan.warp) != 0) return;
    shift[first + row] = row_shift;
    out_of_range[first + row] =
        special || rounding > kRoundingShare * ldexp(1.0, -bits) * total || lost > kLostShare * total;
}

// ---- pass 2: the scaled integers' residues, packed ----
/* 1.5 2^52: a double below 2^51 in magnitude plus this rounds to an integer (to nearest, ties to even), which the
 * low word of the sum's bits then holds in two's complement. */
constexpr double kRoundingMagic = 6755399441055744.0;

/* The residue of v modulo M in the symmetric range (its low byte is the 8-bit integer stored): for M = 256, v's
 * own low byte (-128 .. 127); for odd M, v - M rint(v / M) (-(M - 1) / 2 .. (M - 1) / 2), the quotient by one
 * fused multiply-add in double. v / M is never a half-integer for odd M, and |v| < 2^31 keeps the product's
 * error far below the 1 / (2M) between v / M and the nearest half-integer: the rounding is the right one. */
template <int M>
__device__ __forceinline__ int symmetric_residue(int v, double v_exact) {
    if constexpr (M == 256) {
        return v;
    } else {
        const int quotient = __double2loint(fma(v_exact, 1.0 / M, kRoundingMagic));
        return v - quotient * M;
    }
}

/* Four residues' low bytes in one word, by byte permutations. */
__device__ __forceinline__ uint32_t pack_bytes(int b0, int b1, int b2, int b3) {
    return __byte_perm(__byte_perm(b0, b1, 0x0040), __byte_perm(b2, b3, 0x0040), 0x5410);
}

/* Moduli FIRST .. COUNT - 1 of 16 scaled integers (v, and the same as doubles): four words of 16 bytes per
 * modulus, at dst, dst + plane, and so on. */
template <int FIRST, int COUNT>
__device__ __forceinline__ void store_residues(const int (&v)[16], const double (&v_exact)[16], char *dst,
                                               int64_t plane) {
    if constexpr (FIRST < COUNT) {
        constexpr int m = kModuli[FIRST];
        uint4 word;
        uint32_t *part = &word.x;
#pragma unroll
        for (int q = 0; q < 4; ++q)
            part[q] = pack_bytes(symmetric_residue<m>(v[4 * q], v_exact[4 * q]),
                                 symmetric_residue<m>(v[4 * q + 1], v_exact[4 * q + 1]),
                                 symmetric_residue<m>(v[4 * q + 2], v_exact[4 * q + 2]),
                                 symmetric_residue<m>(v[4 * q + 3], v_exact[4 * q + 3]));
        *reinterpret_cast<uint4 *>(dst) = word;
        store_residues<FIRST + 1, COUNT>(v, v_exact, dst + plane, plane);
    }
}

/* One operand for the slice kernel: its rows, its shifts (from scale_kernel), and where its packed residues
 * go: `plane` bytes per modulus, row tile r's k tile t at (r * tiles_k + t) * kTileBytes. */
struct SliceOperand {
    Rows rows;
    const int *shift;
    char *dst;
    int64_t row_tiles, plane;
};

/* Both operands in one launch, A's blocks first: a block converts kPackRows rows x kSliceK k (read through
 * shared memory as rung 19's pack pass reads, coalesced in either layout) and a thread writes 16 k of one row,
 * a 16-byte chunk of its 128-byte row, once per modulus. Rows and k past the matrix are zeros. */
/* kPackRows rows x kSliceK k of an operand from (row0, k0) into shared memory, zeros past its edges: along k,
 * a warp reads a row's 32 k; across k, a warp reads 32 rows of one k (coalesced either way). */
__device__ __forceinline__ void load_slice(float (&tile)[kPackRows][kSliceK + 1], const Rows &src, int64_t row0,
                                           int64_t k0, int64_t depth) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kWarps = kPackThreads / 32;
    if (src.along_k) {
#pragma unroll 4
        for (int r = warp; r < kPackRows; r += kWarps) {
            const int64_t row = row0 + r, k = k0 + lane;
            tile[r][lane] = row < src.rows && k < depth ? src.src[row * src.ld + k] : 0.0f;
        }
    } else {
#pragma unroll 4
        for (int kk = warp; kk < kSliceK; kk += kWarps)
#pragma unroll
            for (int r = lane; r < kPackRows; r += 32) {
                const int64_t row = row0 + r, k = k0 + kk;
                tile[r][kk] = row < src.rows && k < depth ? src.src[k * src.ld + row] : 0.0f;
            }
    }
}

template <int MODULI>
__global__ void __launch_bounds__(kPackThreads) slice_kernel(SliceOperand a, SliceOperand b, int64_t depth,
                                                             int64_t tiles_k) {
    __shared__ float tile[kPackRows][kSliceK + 1];
    const int64_t slices_k = tiles_k * (kKTile / kSliceK);
    const int64_t blocks_a = a.row_tiles * slices_k;
    const bool is_a = blockIdx.x < blocks_a;
    const SliceOperand op = is_a ? a : b;
    const int64_t id = is_a ? blockIdx.x : blockIdx.x - blocks_a;
    const int64_t row0 = id / slices_k * kPackRows, k0 = id % slices_k * kSliceK;
    const Rows &src = op.rows;
    load_slice(tile, src, row0, k0, depth);
    __syncthreads();
    static_assert(kPackThreads == kPackRows * kSliceK / 16, "one 16-byte chunk of output per thread");
    const int r = threadIdx.x / 2, half = threadIdx.x % 2;
    const int64_t row = row0 + r;
    // 2^shift as a double: exact, and wide enough for any float's shift (|shift| < 300).
    const double scale = row < src.rows ? __longlong_as_double((int64_t)(1023 + op.shift[row]) << 52) : 0.0;
    int v[16];
    double v_exact[16];
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const float x = tile[r][16 * half + u];
        // rint(x 2^shift), |v| <= 2^bits: exact in an int and in a double; a conversion instruction would cost a
        // quarter-rate pipe.
        const double rounded = (isfinite(x) ? (double)x * scale : 0.0) + kRoundingMagic;
        v[u] = __double2loint(rounded);
        v_exact[u] = rounded - kRoundingMagic;
    }
    const int chunk = (int)(k0 % kKTile) / 16 + half;  // 16-byte chunk of the 128-byte row
    char *dst = op.dst + (row0 / kPackRows * tiles_k + k0 / kKTile) * (int64_t)kTileBytes + r * kKTile +
                ((chunk ^ (r % 8)) * 16);
    store_residues<0, MODULI>(v, v_exact, dst, op.plane);
}

// ---- pass 3: n INT8 GEMMs, their sums reduced to residues ----
/* x mod m in the symmetric range (|x| < 2^30): the nearest multiple of m by a double-precision quotient, exact
 * here (m odd has no ties; m = 256 has ties, and its 128 is the same residue as -128). */
__device__ __forceinline__ int reduce(int x, int m, double inverse) {
    const int r = x - m * __double2int_rn((double)x * inverse);
    return r > 127 ? r - m : r;
}

/* Rung 19's block on packed int8 tiles, on a persistent grid: one block per SM, each taking the work items
 * (an output tile under one modulus: items = moduli x tiles, modulus by modulus, each modulus's tiles in
 * start_block's order) gridDim.x apart. The producer streams the k-tiles of the block's items as one
 * sequence, so that the next item's tiles arrive while the consumers finish the last; the consumers start
 * each item's sums afresh and, after its last k-tile, write their sums' residues to that modulus's plane of
 * `residues` (row-major, ldr bytes a row, plane_r bytes a plane). With a block per tile running every
 * modulus (the first version), the last of the tiles' waves ran part-empty: 15.5 waves at 8192^3, 62.1 at
 * 16384^3; items are eight times finer. */
template <int = 0>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(fsg_gemm g, const char *packed_a, const char *packed_b, int tiles_k, int64_t plane_a,
                int64_t plane_b, int8_t *residues, int64_t ldr, int64_t plane_r, Moduli moduli) {
    extern __shared__ __align__(1024) float4 smem[];
    const auto [stages, full, empty] = start_ring<kStages, kStageFloats>(smem);
    const int tiles_m = (int)ceil_div(g.m, (int64_t)kBM), tiles_n = (int)ceil_div(g.n, (int64_t)kBN);
    const int64_t items = (int64_t)tiles_m * tiles_n * moduli.count;
    // The block's j-th item is blockIdx.x + j gridDim.x; the k-tiles of all of them, in sequence.
    const int count = (int)ceil_div(items - blockIdx.x, (int64_t)gridDim.x) * tiles_k;
    auto item_of = [&](int t) { return work_item(blockIdx.x + (int64_t)(t / tiles_k) * gridDim.x, tiles_m, tiles_n); };
    const int tid = threadIdx.x, warpgroup = tid / 128;
    if (warpgroup == 0) {
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            // The item's tiles, found once an item: its divisions, done for every copy, held the copies back
            // (the IMMA pipe fell from 87% to 71% busy at 8192^3).
            int k_tile = 0;
            const char *a_tiles = nullptr, *b_tiles = nullptr;
            auto copy = [&](int t, float *stage, uint64_t *bar) {
                if (k_tile == 0) {
                    const WorkItem w = item_of(t);  // w.z: the modulus
                    a_tiles = packed_a + w.z * plane_a + (int64_t)w.tile_m * tiles_k * kTileBytes;
                    b_tiles = packed_b + w.z * plane_b + (int64_t)w.tile_n * kBTiles * tiles_k * kTileBytes;
                }
                const char *a = a_tiles + (int64_t)k_tile * kTileBytes, *b = b_tiles + (int64_t)k_tile * kTileBytes;
                if (++k_tile == tiles_k) k_tile = 0;
                bulk_load(stage, reinterpret_cast<const float *>(a), kTileBytes, bar);
#pragma unroll
                for (int j = 0; j < kBTiles; ++j)
                    bulk_load(stage + (1 + j) * kTileFloats,
                              reinterpret_cast<const float *>(b + (int64_t)j * tiles_k * kTileBytes), kTileBytes, bar);
            };
            produce_stages<kStages, kStageFloats>(stages, full, empty, count, copy);
        }
        return;
    }
    registers_up<kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    uint32_t acc[kBTiles][64];  // s32 sums, as the instruction's registers take them
    const int warp = (tid % 128) / 32, lane = tid % 32;
    for (int t = 0, k_tile = 0; t < count; ++t) {
        const int s = t % kStages;
        mbarrier_wait(&full[s], (t / kStages) & 1);
        const float *a = stages + s * kStageFloats + consumer * kWgRows * kBK;  // 64 rows of 128 bytes
        const float *b = stages + s * kStageFloats + kTileFloats;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {  // 32 bytes along each 128-byte row, as a TF32 k-step of 8
            const uint64_t da = descriptor(a + 8 * ks);
#pragma unroll
            for (int j = 0; j < kBTiles; ++j)
                wgmma_64x128x32_s8(acc[j], da, descriptor(b + j * kTileFloats + 8 * ks), k_tile > 0 || ks > 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (t > 0) mbarrier_arrive(&empty[(t - 1) % kStages]);
        if (++k_tile < tiles_k) continue;
        // The item's last k-tile: its sums, reduced, into its modulus's plane.
        k_tile = 0;
        wgmma_wait_all();
#pragma unroll
        for (int j = 0; j < kBTiles; ++j) touch_registers(acc[j]);
        const WorkItem w = item_of(t);
        const int modulus = (int)w.z;
        const int64_t first_row = (int64_t)w.tile_m * kBM + consumer * kWgRows + warp * 16 + lane / 4;
        const int64_t first_col = (int64_t)w.tile_n * kBN + 2 * (lane % 4);
        const int m = moduli.m[modulus];
        const double inverse = moduli.inverse[modulus];
        int8_t *plane = residues + modulus * plane_r;
#pragma unroll
        for (int j = 0; j < kBTiles; ++j)
#pragma unroll
            for (int i = 0; i < 64; i += 2) {  // accumulators i, i + 1: columns col, col + 1 of one row
                const int64_t row = first_row + 8 * ((i % 4) / 2), col = first_col + j * kPackRows + 8 * (i / 4);
                if (row < g.m && col < g.n) {  // col + 1 < ldr always: ldr is even, col is even
                    const char2 pair = make_char2((char)reduce((int)acc[j][i], m, inverse),
                                                  (char)reduce((int)acc[j][i + 1], m, inverse));
                    *reinterpret_cast<char2 *>(plane + row * ldr + col) = pair;
                }
            }
    }
}

// ---- pass 4: the Chinese remainder theorem, and the rows out of range ----
/* Element (i, j) of A and of B, in the fsg_gemm's layouts. */
__device__ __forceinline__ float a_at(const fsg_gemm &g, int64_t i, int64_t p) {
    return g.a_trans ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
}
__device__ __forceinline__ float b_at(const fsg_gemm &g, int64_t p, int64_t j) {
    return g.b_trans ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j];
}

constexpr int kReconstructThreads = 256;

/* A dot product in double: float products are exact there, the sum is rounded once more at the end, and
 * Inf and NaN follow IEEE arithmetic as FP32's do. */
__device__ __forceinline__ float dot_in_double(const fsg_gemm &g, int64_t i, int64_t j) {
    double sum = 0.0;
    for (int64_t p = 0; p < g.k; ++p) sum = fma((double)a_at(g, i, p), (double)b_at(g, p, j), sum);
    return (float)sum;
}

constexpr int kColumnsPerThread = 8;  // one 8-byte load per modulus brings a thread's eight residues (ldr: x16)
constexpr int kRowsPerThread = 4;     // rows a thread walks, its columns' shifts and flags read once for them

/* The eight residues of one modulus, each + 128 (0..255), as the low byte of 2^23 + residue + 128 in float bits:
 * a byte permutation puts it there, and one subtraction gives the residue as a float or as an integer, where a
 * conversion instruction per residue would cost a quarter-rate pipe. */
__device__ __forceinline__ uint32_t biased_residue(uint2 offset_bytes, int c) {
    const uint32_t word = c < 4 ? offset_bytes.x : offset_bytes.y;
    return __byte_perm(word, 0x4B000000u, 0x7540 | (c % 4));  // bytes: the residue's, 0, 0, 0x4B
}
constexpr uint32_t kFloatOf2To23 = 0x4B000000u;

/* C'_ij of column c of eight from its residues (each + 128, a byte of bytes[t] per modulus), as below. */
template <int MODULI>
__device__ __forceinline__ int64_t recombined(const uint2 (&bytes)[MODULI], int c, const Moduli &moduli) {
    uint64_t s = 0 - moduli.offsets;
    float quotient = 0.0f;
#pragma unroll
    for (int t = 0; t < MODULI; ++t) {
        const uint32_t bits = biased_residue(bytes[t], c);
        s += (uint64_t)(bits - kFloatOf2To23) * moduli.weight[t];
        quotient = fmaf(__uint_as_float(bits) - 8388736.0f, moduli.fraction[t], quotient);  // 2^23 + 128
    }
    return (int64_t)(s - (uint64_t)(int64_t)__float2int_rn(quotient) * moduli.product);
}

/* D(i, j) = alpha C'_ij 2^-(sa_i + sb_j) + beta C(i, j), C' recovered from its residues r_t:
 *   S = sum_t r_t weight_t is congruent to C' modulo P, and C' = S - P round(S / P), since |C'| < P / 4;
 *   S / P = sum_t r_t fraction_t, which a float sum of at most 8 terms of at most 128 gets to within 2^-10,
 *   and the distance to the nearest half-integer is at least 1/4: it rounds to the right integer;
 *   S - P round(S / P), in 64-bit integers that wrap modulo 2^64, is exact, since |C'| < 2^63. S is summed
 *   as sum_t (r_t + 128) weight_t - 128 sum_t weight_t: an unsigned byte times a 64-bit weight is two
 *   multiply-adds.
 * A thread takes eight columns of kRowsPerThread rows, a block 2048 columns; the grid's y walks the rows. A row
 * of A out of range is dot products in double instead (each thread its eight columns in turn, A's row shared);
 * a column of B out of range is left to fix_columns_kernel, whose threads run down the column. Eight whole
 * columns of a row-major D with no C are stored as two 16-byte vectors. */
template <int MODULI>
__global__ void __launch_bounds__(kReconstructThreads)
    reconstruct_kernel(fsg_gemm g, const int8_t *residues, int64_t ldr, int64_t plane_r, Moduli moduli,
                       const int *shift, const uint8_t *out_of_range) {
    const int64_t j0 = ((int64_t)blockIdx.x * kReconstructThreads + threadIdx.x) * kColumnsPerThread;
    if (j0 >= g.n) return;
    int column_shift[kColumnsPerThread];
    bool column_done[kColumnsPerThread];  // past the edge, or left to fix_columns_kernel
#pragma unroll
    for (int c = 0; c < kColumnsPerThread; ++c) {
        const bool inside = j0 + c < g.n;
        column_done[c] = !inside || out_of_range[g.m + j0 + c];
        column_shift[c] = inside ? shift[g.m + j0 + c] : 0;
    }
    bool whole_vectors = g.c == nullptr && g.ldd % 4 == 0 && reinterpret_cast<uintptr_t>(g.d) % 16 == 0;
#pragma unroll
    for (int c = 0; c < kColumnsPerThread; ++c) whole_vectors &= !column_done[c];
    for (int64_t i = blockIdx.y; i < g.m; i += gridDim.y) {
        if (out_of_range[i]) {
            for (int64_t j = j0; j < j0 + kColumnsPerThread && j < g.n; ++j) store_d(g, i, j, dot_in_double(g, i, j));
            continue;
        }
        uint2 bytes[MODULI];  // residues + 128 of columns j0 .. j0 + 7, a byte each, per modulus
#pragma unroll
        for (int t = 0; t < MODULI; ++t) {
            const uint2 raw = *reinterpret_cast<const uint2 *>(residues + t * plane_r + i * ldr + j0);
            bytes[t] = make_uint2(raw.x ^ 0x80808080u, raw.y ^ 0x80808080u);
        }
        const int row_shift = 1023 - shift[i];
        float values[kColumnsPerThread];
#pragma unroll
        for (int c = 0; c < kColumnsPerThread; ++c) {
            const int64_t exact = recombined<MODULI>(bytes, c, moduli);
            // 2^-(sa_i + sb_j), built from its exponent: |sa_i + sb_j| < 400, a normal double.
            const double unscale = __longlong_as_double((int64_t)(row_shift - column_shift[c]) << 52);
            values[c] = (float)((double)exact * unscale);
        }
        if (whole_vectors) {
            float4 *d = reinterpret_cast<float4 *>(g.d + i * g.ldd + j0);
            d[0] = make_float4(g.alpha * values[0], g.alpha * values[1], g.alpha * values[2], g.alpha * values[3]);
            d[1] = make_float4(g.alpha * values[4], g.alpha * values[5], g.alpha * values[6], g.alpha * values[7]);
        } else {
#pragma unroll
            for (int c = 0; c < kColumnsPerThread; ++c)
                if (!column_done[c]) store_d(g, i, j0 + c, values[c]);
        }
    }
}

/* The columns of B out of range, one block each, its threads down the column (A's rows each read along k
 * through L1, B's column shared), skipping the rows reconstruct_kernel computed. Blocks of other columns
 * return at once. */
template <int = 0>
__global__ void __launch_bounds__(kReconstructThreads)
    fix_columns_kernel(fsg_gemm g, const uint8_t *out_of_range) {
    const int64_t j = blockIdx.x;
    if (!out_of_range[g.m + j]) return;
    for (int64_t i = threadIdx.x; i < g.m; i += kReconstructThreads)
        if (!out_of_range[i]) store_d(g, i, j, dot_in_double(g, i, j));
}

// ---- the launcher ----
/* The first n moduli, and their recombination constants. */
inline Moduli moduli_of(int n) {
    Moduli mod = {};
    mod.count = n;
    mod.product = 1;
    for (int t = 0; t < n; ++t) mod.product *= (uint64_t)kModuli[t];
    for (int t = 0; t < n; ++t) {
        const int m = kModuli[t];
        const uint64_t others = mod.product / (uint64_t)m;
        const int left = (int)(others % (uint64_t)m);
        int y = 1;
        while (left * y % m != 1) ++y;  // others^-1 mod m, by trial: m <= 256
        mod.m[t] = m;
        mod.inverse[t] = 1.0 / m;
        mod.weight[t] = others * (uint64_t)y;  // < P, since y < m
        mod.fraction[t] = (float)((double)y / m);
        mod.offsets += 128 * mod.weight[t];
    }
    return mod;
}

/* bits_a + bits_b for a depth k: the largest b with k 2^b <= P / 4. */
inline int product_bits(const Moduli &mod, int64_t k) {
    const uint64_t room = mod.product / 4 / (uint64_t)k;
    int bits = -1;
    for (uint64_t x = room; x != 0; x >>= 1) ++bits;
    return bits;
}

inline int64_t round_up(int64_t x, int64_t to) { return ceil_div(x, to) * to; }

/* The workspace of one panel of depth `depth` (at most kPanelK) of an m x n product, carved in order. */
struct Workspace {
    int64_t tiles_k, row_tiles_a, row_tiles_b, plane_a, plane_b, ldr, plane_r, bytes;
    int64_t at_b, at_residues, at_shift, at_flags;
};
inline Workspace workspace_of(int moduli, int64_t m, int64_t n, int64_t depth) {
    Workspace w;
    w.tiles_k = ceil_div(depth, (int64_t)kKTile);
    w.row_tiles_a = ceil_div(m, (int64_t)kBM);
    w.row_tiles_b = ceil_div(n, (int64_t)kBN) * kBTiles;
    w.plane_a = w.row_tiles_a * w.tiles_k * kTileBytes;
    w.plane_b = w.row_tiles_b * w.tiles_k * kTileBytes;
    w.ldr = round_up(n, 16);
    w.plane_r = round_up(m * w.ldr, 256);
    w.at_b = moduli * w.plane_a;
    w.at_residues = w.at_b + moduli * w.plane_b;
    w.at_shift = w.at_residues + moduli * w.plane_r;
    w.at_flags = w.at_shift + round_up((m + n) * (int64_t)sizeof(int), 256);
    w.bytes = w.at_flags + round_up(m + n, 256);
    return w;
}

/* One panel (g.k <= kPanelK, g.k_slice == 0): the four passes. */
template <int MODULI>
void run_panel(const fsg_gemm &g, const Moduli &mod, char *base, int sms, cudaStream_t stream) {
    const Workspace w = workspace_of(MODULI, g.m, g.n, g.k);
    const int bits = product_bits(mod, g.k);
    const int bits_a = (bits + 1) / 2 < 30 ? (bits + 1) / 2 : 30, bits_b = bits / 2 < 30 ? bits / 2 : 30;
    int *shift = reinterpret_cast<int *>(base + w.at_shift);
    uint8_t *out_of_range = reinterpret_cast<uint8_t *>(base + w.at_flags);
    int8_t *residues = reinterpret_cast<int8_t *>(base + w.at_residues);
    const Rows a = {g.a, g.lda, g.m, !g.a_trans}, b = {g.b, g.ldb, g.n, g.b_trans};
    const int64_t scale_blocks = (a.along_k ? ceil_div(g.m, (int64_t)8) : ceil_div(g.m, (int64_t)32)) +
                                 (b.along_k ? ceil_div(g.n, (int64_t)8) : ceil_div(g.n, (int64_t)32));
    scale_kernel<><<<(unsigned)scale_blocks, kScaleThreads, 0, stream>>>(a, b, g.k, bits_a, bits_b, shift,
                                                                       out_of_range);
    const SliceOperand slice_a = {a, shift, base, w.row_tiles_a, w.plane_a};
    const SliceOperand slice_b = {b, shift + g.m, base + w.at_b, w.row_tiles_b, w.plane_b};
    const int64_t slices_k = w.tiles_k * (kKTile / kSliceK);
    slice_kernel<MODULI><<<(unsigned)((w.row_tiles_a + w.row_tiles_b) * slices_k), kPackThreads, 0, stream>>>(
        slice_a, slice_b, g.k, w.tiles_k);
    const int64_t items = w.row_tiles_a * ceil_div(g.n, (int64_t)kBN) * MODULI;  // gemm_kernel's, one block an SM
    const dim3 grid((unsigned)(items < sms ? items : sms));
    launch_with_smem(gemm_kernel<>, grid, kThreads, kSmemBytes, stream, g, (const char *)base,
                     (const char *)(base + w.at_b), (int)w.tiles_k, w.plane_a, w.plane_b, residues, w.ldr, w.plane_r,
                     mod);
    const int64_t row_groups = ceil_div(g.m, (int64_t)kRowsPerThread);
    const dim3 rows_grid((unsigned)ceil_div(g.n, (int64_t)(kReconstructThreads * kColumnsPerThread)),
                         (unsigned)(row_groups < 65535 ? row_groups : 65535));
    reconstruct_kernel<MODULI><<<rows_grid, kReconstructThreads, 0, stream>>>(g, residues, w.ldr, w.plane_r, mod,
                                                                             shift, out_of_range);
    fix_columns_kernel<><<<(unsigned)g.n, kReconstructThreads, 0, stream>>>(g, out_of_range);
}

/* Split-K's slice z of g (ladder.h's k_slice) as a problem of its own. */
inline fsg_gemm slice_problem(const fsg_gemm &g, int64_t z) {
    fsg_gemm s = g;
    const int64_t k0 = z * g.k_slice;
    s.a += g.a_trans ? k0 * g.lda : k0;
    s.b += g.b_trans ? k0 : k0 * g.ldb;
    s.k = g.k - k0 < g.k_slice ? g.k - k0 : g.k_slice;
    s.d += z * g.m * g.ldd;
    s.k_slice = 0;
    return s;
}

/* The whole call: split-K's slices one after another (each its own problem), each in panels of at most
 * kPanelK, panel p > 0 adding onto D. *launched stays false, with nothing enqueued, where this path cannot
 * run: k == 0, a grid past its limit (the slice pass's blocks, or a block's k-tiles past an int), no
 * workspace. */
template <int MODULI>
cudaError_t launch(const fsg_gemm *problem, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    *launched = false;
    const fsg_gemm &g = *problem;
    if (g.k == 0 || batch.count > 1) return cudaSuccess;
    const int64_t slices = g.k_slice > 0 ? ceil_div(g.k, g.k_slice) : 1;
    const int64_t deepest = g.k_slice > 0 ? g.k_slice : g.k;
    const int64_t panel_k = deepest < kPanelK ? deepest : kPanelK;
    const Workspace w = workspace_of(MODULI, g.m, g.n, panel_k);
    const int64_t slice_blocks = (w.row_tiles_a + w.row_tiles_b) * w.tiles_k * (kKTile / kSliceK);
    const int64_t gemm_items = w.row_tiles_a * (w.row_tiles_b / kBTiles) * MODULI;
    if (slice_blocks > INT32_MAX || g.n > INT32_MAX || gemm_items * w.tiles_k > INT32_MAX)  // a block's k-tiles: an int
        return cudaSuccess;
    const Moduli mod = moduli_of(MODULI);
    int sms;
    cudaError_t err = current_sm_count(&sms);
    if (err != cudaSuccess) return err;
    // The workspace, on the call's stream for the call, counted against fastsgemm's memory limit (the engine keeps a
    // pool); where it cannot be had, tf32x3 runs instead.
    if (fsg_memory_take(-1, (uint64_t)w.bytes) != cudaSuccess) {
        char forgotten[8];
        (void)fsg_memory_refusal(forgotten, sizeof forgotten);  // not this call's error
        return cudaSuccess;
    }
    char *base = nullptr;
    err = cudaMallocAsync(reinterpret_cast<void **>(&base), (size_t)w.bytes, stream);
    if (err != cudaSuccess) {
        fsg_memory_give(-1, (uint64_t)w.bytes);
        if (err != cudaErrorMemoryAllocation) return err;
        (void)cudaGetLastError();  // out of memory is not sticky: cleared
        return cudaSuccess;
    }
    *launched = true;
    for (int64_t z = 0; z < slices && err == cudaSuccess; ++z) {
        const fsg_gemm whole = g.k_slice > 0 ? slice_problem(g, z) : g;
        for (int64_t k0 = 0; k0 < whole.k && err == cudaSuccess; k0 += kPanelK) {
            fsg_gemm panel = whole;
            panel.a += whole.a_trans ? k0 * whole.lda : k0;
            panel.b += whole.b_trans ? k0 : k0 * whole.ldb;
            panel.k = whole.k - k0 < kPanelK ? whole.k - k0 : kPanelK;
            if (k0 > 0) {  // onto the panels before
                panel.c = whole.d;
                panel.ldc = whole.ldd;
                panel.beta = 1.0f;
            }
            run_panel<MODULI>(panel, mod, base, sms, stream);
            err = cudaGetLastError();
        }
    }
    const cudaError_t freed = cudaFreeAsync(base, stream);  // after the last panel, in stream order
    if (freed == cudaSuccess) fsg_memory_give(-1, (uint64_t)w.bytes);
    return err != cudaSuccess ? err : freed;
}

}  // namespace ozaki
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file alone) ----
/* Eight moduli: 47-49 bits of the scaled operands between them. tf32x3 where this path cannot run. Registered as
 * kernel="ozaki:lesson"; kernel="ozaki" runs the engine's scheme (kernels/engine/ozaki.cu). */
extern "C" cudaError_t fsg_ozaki_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::lesson::ozaki::wgmma_else_mma_sync(g, &fsg::lesson::ozaki::kOneProduct, stream,
                                                   fsg::lesson::ozaki::launch<8>, fsg_tf32x3_lesson_sgemm);
}

#endif /* FASTSGEMM_LADDER_24_OZAKI */
