/*
 * hopper.cuh: what the Hopper (sm_90a) paths of the tensor-core rungs share:
 * wgmma and its shared-memory descriptors, mbarriers, bulk copies, setmaxnreg,
 * and the packing pass that feeds them. kernels/tf32_sm90.cu (rung 10) and
 * kernels/tf32x3_sm90.cu (rung 11) build their kernels from these; only
 * files compiled for sm_90a may include it (setup.py's FILE_ARCHS).
 *
 * Operand layout: wgmma takes TF32 operands only K-major (rows of A and of
 * B^T with k contiguous) and both rungs use its 128-byte swizzle. With a tile
 * depth of kBK = 32 a row of an operand tile (32 TF32 values) is exactly 128
 * bytes and 8 rows make a 1024-byte atom; the 16-byte chunk c of row r sits at
 * chunk position c ^ (r % 8) of its row. The XOR spreads both stores into a
 * tile and the tensor cores' reads of one k-slice over all banks. Atoms of 8
 * rows are 1024 bytes apart (the descriptor's stride byte offset); a k-step
 * of 8 moves the start address by 32 bytes, and the hardware applies the same
 * XOR.
 */
#ifndef FASTSGEMM_HOPPER_CUH
#define FASTSGEMM_HOPPER_CUH

#include <mutex>
#include <unordered_map>

#include "common.cuh"

namespace fsg {
namespace hopper {

constexpr int kBK = 32;           // tile depth: one 128-byte swizzled row of TF32 values
constexpr int kAtomBytes = 1024;  // 8 rows of 128 bytes: one swizzle atom
static_assert(kBK * 4 == 128, "the 128-byte swizzle wants rows of exactly 128 bytes");

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

/* d (+)= A * B for a 64 x 128 x 8 tile: A from descriptor a, B^T from b. With
 * accumulate == 0 the old d is ignored. */
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

/* The same for a 64 x 64 x 8 tile: half the columns, 32 accumulators a thread. */
__device__ __forceinline__ void wgmma_64x64x8(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate));
}
/* One wgmma m64nNk8 for either width, chosen by the accumulators' count (N / 2 a thread). */
__device__ __forceinline__ void wgmma_64xNx8(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    wgmma_64x128x8(d, a, b, accumulate);
}
__device__ __forceinline__ void wgmma_64xNx8(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    wgmma_64x64x8(d, a, b, accumulate);
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

/* ---- The warp-specialized block both Hopper kernels use ----
 * One producer warpgroup (a single thread of it issues the bulk copies; it
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

/* The epilogue: a consumer warpgroup's 64 x N result of wgmma m64nN (N = 128
 * unless given), whose top-left element is D(row0, col0), into D through
 * store_d. A thread's accumulator i (of N / 2) is element i % 4 of n8 block
 * i / 4 in the m16n8 fragment layout; value(i) is what to store for it. */
template <int N = 128, typename Value>
__device__ __forceinline__ void store_slice(const fsg_gemm &g, int64_t row0, int64_t col0, Value &&value) {
    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    const int64_t first_row = row0 + warp * 16 + lane / 4, first_col = col0 + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        const int64_t row = first_row + 8 * ((i % 4) / 2), col = first_col + 8 * (i / 4) + i % 2;
        if (row < g.m && col < g.n) store_d(g, row, col, value(i));
    }
}

/* ---- The packing pass both Hopper paths run first ----
 *
 * The tensor cores must see operands rounded to TF32 (rung 10) or split into
 * TF32 hi and lo parts (rung 11), K-major. Doing that inside the GEMM costs
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

/* x = hi + lo, both TF32, with round_tf32 (nearest even; rung 11's mma.sync
 * path rounds ties away). Only ties round differently, and the split is as
 * exact either way. */
__device__ __forceinline__ void split_rn(float x, uint32_t &hi, uint32_t &lo) {
    hi = round_tf32(x);
    lo = round_tf32(x - __uint_as_float(hi));
}

/* One operand for the pack kernel: `rows` rows (m for A, n for B) of `depth`
 * k, stored with k contiguous (along_k: element (row, k) at src[row * ld +
 * k]) or rows contiguous (src[k * ld + row]), packed into `tiles` tiles
 * (its row tiles times tiles_k) at dst. */
struct PackOperand {
    const float *src;
    int64_t ld, rows;
    bool along_k;
    float *dst;
    int64_t tiles;
};

/* Both operands in one launch: blocks 0 .. a.tiles - 1 pack A's tiles, the
 * rest B's (one launch fewer per call: at 1024^3 a launch's gap is a tenth of
 * the GEMM). Block `id` of an operand packs row tile id / tiles_k, k tile
 * id % tiles_k. It passes through shared memory so that the reads, in the
 * source's order, and the writes, along k, are both whole 128-byte lines; the
 * padding column keeps the transposing case free of bank conflicts. */
template <int PARTS>
__global__ void __launch_bounds__(kPackThreads) pack_kernel(PackOperand a, PackOperand b, int64_t depth,
                                                             int64_t tiles_k) {
    static_assert(PARTS == 1 || PARTS == 2, "rounded, or split into hi and lo");
    __shared__ float tile[kPackRows][kBK + 1];
    const bool is_a = blockIdx.x < a.tiles;
    const PackOperand op = is_a ? a : b;
    const int64_t id = is_a ? blockIdx.x : blockIdx.x - a.tiles;
    const int64_t row0 = id / tiles_k * kPackRows, k0 = id % tiles_k * kBK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kWarps = kPackThreads / 32;
    if (op.along_k) {
#pragma unroll
        for (int r = warp; r < kPackRows; r += kWarps) {  // a warp reads 32 k of one row
            const int64_t row = row0 + r, k = k0 + lane;
            tile[r][lane] = row < op.rows && k < depth ? op.src[row * op.ld + k] : 0.0f;
        }
    } else {
#pragma unroll
        for (int kk = warp; kk < kBK; kk += kWarps)  // a warp reads 32 rows at one k
#pragma unroll
            for (int r = lane; r < kPackRows; r += 32) {
                const int64_t row = row0 + r, k = k0 + kk;
                tile[r][kk] = row < op.rows && k < depth ? op.src[k * op.ld + row] : 0.0f;
            }
    }
    __syncthreads();
    float *out = op.dst + id * PARTS * kTileFloats;
#pragma unroll
    for (int r = warp; r < kPackRows; r += kWarps) {  // a warp writes one row: a 128-byte line, swizzled within
        const int at = operand_offset(r, lane);
        if constexpr (PARTS == 1) {
            out[at] = __uint_as_float(round_tf32(tile[r][lane]));
        } else {
            uint32_t hi, lo;
            split_rn(tile[r][lane], hi, lo);
            out[at] = __uint_as_float(hi);
            out[kTileFloats + at] = __uint_as_float(lo);
        }
    }
}

/* Where the workspaces come from: one stream-ordered memory pool per device,
 * made on first use and kept for the life of the process (inline: one
 * instance across both Hopper files). The device's default pool hands its
 * free memory back to the driver at every host synchronization, and mapping
 * it again on the next call cost as much as the GEMM itself at 1024^3 on the
 * H100 (benchmarks/NOTES.md). This pool keeps up to a 64th of the device's
 * memory reserved between calls, so calls of one shape reuse one workspace. */
inline cudaError_t workspace_pool(cudaMemPool_t *pool) {
    static std::mutex lock;
    static std::unordered_map<int, cudaMemPool_t> pools;
    int device;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const std::lock_guard<std::mutex> guard(lock);
    const auto found = pools.find(device);
    if (found != pools.end()) {
        *pool = found->second;
        return cudaSuccess;
    }
    // A first call inside a stream capture must not have these device-wide calls invalidate the capture (its
    // default mode forbids them): relaxed mode for this thread while the pool is made.
    struct RelaxedCapture {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
        ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
    } relaxed;
    size_t free_bytes, total_bytes;
    err = cudaMemGetInfo(&free_bytes, &total_bytes);
    if (err != cudaSuccess) return err;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    err = cudaMemPoolCreate(pool, &props);
    if (err != cudaSuccess) return err;
    uint64_t keep = total_bytes / 64;
    err = cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (err != cudaSuccess) {
        (void)cudaMemPoolDestroy(*pool);
        return err;
    }
    pools.emplace(device, *pool);
    return cudaSuccess;
}

/* Packs A (row_tiles_a row tiles) and B (row_tiles_b) into a workspace, calls
 * gemm(packed_a, packed_b, tiles_k) to enqueue the GEMM on `stream`, and frees
 * the workspace after it in stream order. *launched stays false, and nothing
 * is enqueued, when the packed path cannot run: k == 0 (D = beta C, nothing
 * to pack), grids past a dimension's limit, or no memory for the workspace;
 * the caller's mma.sync path takes the call then. */
template <int PARTS, typename Gemm>
cudaError_t with_packed_operands(const fsg_gemm &g, int64_t row_tiles_a, int64_t row_tiles_b, cudaStream_t stream,
                                 bool *launched, Gemm &&gemm) {
    *launched = false;
    if (g.k == 0) return cudaSuccess;
    const int64_t tiles_k = ceil_div(g.k, kBK);
    if ((row_tiles_a + row_tiles_b) * tiles_k > INT32_MAX) return cudaSuccess;  // one grid packs both
    const int64_t floats_a = row_tiles_a * tiles_k * PARTS * kTileFloats;
    const size_t bytes = (size_t)(floats_a + row_tiles_b * tiles_k * PARTS * kTileFloats) * sizeof(float);
    cudaMemPool_t pool;
    cudaError_t err = workspace_pool(&pool);
    if (err != cudaSuccess) return err;
    float *packed = nullptr;
    err = cudaMallocFromPoolAsync(reinterpret_cast<void **>(&packed), bytes, pool, stream);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // not sticky: clear it and let the path without a workspace run
        return cudaSuccess;
    }
    if (err != cudaSuccess) return err;
    *launched = true;
    const PackOperand a = {g.a, g.lda, g.m, !g.a_trans, packed, row_tiles_a * tiles_k};
    const PackOperand b = {g.b, g.ldb, g.n, g.b_trans, packed + floats_a, row_tiles_b * tiles_k};
    pack_kernel<PARTS><<<(unsigned)(a.tiles + b.tiles), kPackThreads, 0, stream>>>(a, b, g.k, tiles_k);
    gemm((const float *)packed, (const float *)(packed + floats_a), (int)tiles_k);
    err = cudaGetLastError();
    const cudaError_t freed = cudaFreeAsync(packed, stream);  // after the kernels, in stream order
    return err != cudaSuccess ? err : freed;
}

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
template <int STAGES, int STAGE_FLOATS, int BM, int BN, int PRODUCERS = 1>
__device__ __forceinline__ BlockStart start_block(float4 *smem, const fsg_gemm &g) {
    BlockStart block;
    block.stages = reinterpret_cast<float *>(smem);
    block.full = reinterpret_cast<uint64_t *>(block.stages + STAGES * STAGE_FLOATS);
    block.empty = block.full + STAGES;
    if (threadIdx.x == 0) init_stage_barriers(block.full, block.empty, STAGES, PRODUCERS, kConsumerThreads);
    __syncthreads();
    const TileCoord tile = grouped_tile<int>(blockIdx.x, (int)ceil_div(g.m, BM), (int)ceil_div(g.n, BN), kGroupRows);
    block.tile_m = tile.row;
    block.tile_n = tile.col;
    return block;
}

/* Split-K (ladder.h's k_slice, grid z): the packed k-tiles the block's slice
 * consumes, out of the tiles_k that pack the whole K for each row tile. The
 * launcher takes only a k_slice of whole tiles, so every slice starts on one. */
struct SliceTiles {
    int first, count;
};
__device__ __forceinline__ SliceTiles slice_tiles(const fsg_gemm &problem, int tiles_k) {
    if (problem.k_slice == 0) return {0, tiles_k};
    const int64_t per = problem.k_slice / kBK, first = blockIdx.z * per;
    return {(int)first, (int)(per < tiles_k - first ? per : tiles_k - first)};
}

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

/* The launcher both Hopper kernels share: kernel(g, packed_a, packed_b,
 * tiles_k) as one block per BM x BN output tile, all on grid x (so at most
 * INT32_MAX of them: past that *launched stays false), and per split-K slice
 * on grid z (slice_tiles; a k_slice that is not whole k-tiles is declined
 * too), on the operands that with_packed_operands packs in PARTS parts, over
 * the whole K. B is packed in whole block tiles, BN / kPackRows row tiles
 * each, or, for a BN narrower than a packed tile, in packed tiles that
 * kPackRows / BN blocks share; the last may be partly or all zeros. */
template <int PARTS, int BM, int BN, typename Kernel>
cudaError_t launch_on_packed(Kernel kernel, size_t smem_bytes, const fsg_gemm &g, cudaStream_t stream,
                             bool *launched) {
    static_assert(BM == kPackRows && (BN % kPackRows == 0 || kPackRows % BN == 0),
                  "block tiles are whole packed tiles, or whole parts of one");
    const int64_t tiles_m = ceil_div(g.m, BM), tiles_n = ceil_div(g.n, BN);
    if (tiles_m * tiles_n > INT32_MAX || g.k_slice % kBK != 0) {
        *launched = false;
        return cudaSuccess;
    }
    return with_packed_operands<PARTS>(g, tiles_m, ceil_div(tiles_n * BN, (int64_t)kPackRows), stream, launched,
                                       [&](const float *packed_a, const float *packed_b, int tiles_k) {
                                           const dim3 grid((unsigned)(tiles_m * tiles_n), 1, slice_count(g));
                                           launch_with_smem(kernel, grid, kThreads, smem_bytes, stream, g, packed_a,
                                                            packed_b, tiles_k);
                                       });
}

}  // namespace hopper
}  // namespace fsg

#endif  // FASTSGEMM_HOPPER_CUH
