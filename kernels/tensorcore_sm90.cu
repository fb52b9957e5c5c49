/*
 * The Hopper path of rung 11 (tf32x3): wgmma, built for sm_90a only
 * (setup.py's FILE_ARCHS). Its launcher calls it on devices of compute
 * capability 9.0 and keeps the mma.sync path for Ampere and Ada.
 *
 * mma.sync is a warp's instruction and feeds the tensor cores from registers
 * that every lane loads from shared memory first. Hopper's wgmma is issued by
 * a warpgroup (4 warps, 128 threads), reads its operands straight from shared
 * memory through descriptors and runs asynchronously: a 64 x 128 x 8 product
 * per instruction while the threads do something else. On the H100 the
 * mma.sync kernels reach about 140 TFLOP/s of TF32; cuBLAS's wgmma kernels 400.
 *
 * wgmma takes TF32 operands only "K-major": rows of A (m) and of B^T (n) with
 * k contiguous, in 8-row x 16-byte core matrices. So each tile goes through
 * two places in shared memory:
 *   1. staging: cp.async brings the tile in its global layout (the same
 *      loaders as the mma.sync path, kernels/tensorcore.cuh), S stages deep;
 *   2. operands: the threads split each value into hi and lo and write both
 *      K-major, core matrix by core matrix, into one of two operand buffers.
 *      This pass also transposes B when it is row-major, so every layout
 *      takes the same route.
 * The conversion of tile t + 1 runs while the tensor cores work on tile t.
 * (Rung 10 stays on mma.sync on Hopper too: the same kernel with one rounded
 * copy and one product per tile measured 106 TFLOP/s at 4096^3 against
 * mma.sync's 143; benchmarks/NOTES.md.)
 *
 * Operand layout, wgmma's 128-byte swizzle: with BK = 32 a row of an operand
 * tile (32 TF32 values) is exactly 128 bytes, and 8 rows make a 1024-byte
 * atom; the 16-byte chunk c of row r sits at chunk position c ^ (r % 8) of its
 * row. The XOR spreads both the conversion's stores and the tensor cores'
 * reads of one k-slice over all banks. Atoms of 8 rows are 1024 bytes apart
 * (the descriptor's stride byte offset); a k-step of 8 moves the start
 * address by 32 bytes, and the hardware applies the same XOR.
 *
 * The sums follow rung 11: the main term hi_a hi_b of each BK-deep tile
 * comes out of the tensor core into a temporary and is added to the running
 * sum with FP32 FADDs (round to nearest); the corrections accumulate inside.
 *
 * Block tile 128 x 128 x 32, two warpgroups of 64 x 128 (m64n128k8, 64
 * accumulators per thread and set). Limits: m <= 65535 * 128.
 */
#include "tensorcore.cuh"

namespace fsg {
namespace hopper {

using tensorcore::SmemTile;

constexpr int kBM = 128, kBN = 128, kBK = 32, kThreads = 256;
constexpr int kWgRows = 64;                           // rows of D per warpgroup
constexpr int kAtomBytes = 1024;                      // 8 rows of 128 bytes: one swizzle atom
static_assert(kBK * 4 == 128, "the 128-byte swizzle wants rows of exactly 128 bytes");
constexpr int kOperandFloats = kBM * kBK;             // one K-major operand tile (A or B, BM == BN)

/* The shared-memory matrix descriptor of wgmma for a K-major operand in the
 * 128-byte swizzle: start address and the atoms' stride in 16-byte units,
 * swizzle mode 1 in bits 62-63 (the leading byte offset is unused there). */
__device__ __forceinline__ uint64_t descriptor(const float *smem) {
    const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
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

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Shared memory written by ordinary stores, read next by wgmma (the async proxy). */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Tells the compiler the asynchronous wgmma may have changed d: no read of d moves above the wait. */
__device__ __forceinline__ void touch(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* One operand tile (kBM rows, kBK deep) from staging into K-major core
 * matrices, split into hi and lo. value_at(row, k) is the staged element's
 * offset; ALONG_K says k is contiguous there, so four consecutive k are one
 * 16-byte read. */
template <bool ALONG_K, typename Offset>
__device__ __forceinline__ void convert_tile(const float *staged, Offset value_at, float *hi, float *lo, int tid) {
    constexpr int kChunks = kBM * kBK / 4;  // four k of one row each
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
        const int chunk = tid + i * kThreads, row = chunk % kBM, k4 = chunk / kBM;
        float v[4];
        if constexpr (ALONG_K) {
            load4(staged + value_at(row, 4 * k4), v);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = staged[value_at(row, 4 * k4 + e)];
        }
        const int to = row * 32 + ((k4 ^ (row % 8)) * 4);  // row of 32 floats, chunk swizzled
        uint32_t h[4], l[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) tensorcore::split(v[e], h[e], l[e]);
        *reinterpret_cast<uint4 *>(hi + to) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4 *>(lo + to) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

constexpr int kStages = 2;  // staging depth: what shared memory leaves after the operand buffers
constexpr int kSets = 4;    // operand tiles per buffer: A hi, B hi, A lo, B lo

template <bool A_TRANS, bool B_TRANS>
constexpr size_t smem_bytes() {
    return sizeof(float) * ((size_t)kStages * (SmemTile<kBM, kBK, A_TRANS, false>::kFloats +
                                               SmemTile<kBK, kBN, B_TRANS, true>::kFloats) +
                            2 * kSets * kOperandFloats);
}

template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads, 1) wgmma_tf32x3_kernel(fsg_gemm g) {
    using TileA = SmemTile<kBM, kBK, A_TRANS, false>;
    using TileB = SmemTile<kBK, kBN, B_TRANS, true>;
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    float *const operands = reinterpret_cast<float *>(smem);  // [2][kSets][kOperandFloats], 16-byte aligned
    float *const a_stages = operands + 2 * kSets * kOperandFloats;
    float *const b_stages = a_stages + kStages * TileA::kFloats;
    // Operand set s of buffer b: 0 A hi, 1 B hi, 2 A lo, 3 B lo.
    auto operand = [&](int buffer, int set) { return operands + (buffer * kSets + set) * kOperandFloats; };

    const int tid = threadIdx.x, warpgroup = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    const Index steps = (k + kBK - 1) / kBK;

    auto fetch = [&](Index t) {  // tile t into staging slot t % kStages; always one commit group
        if (t < steps) {
            const int slot = (int)(t % kStages);
            float *as = a_stages + slot * TileA::kFloats, *bs = b_stages + slot * TileB::kFloats;
            copy_tile_async<kBM, kBK, kThreads, A_TRANS, VEC, Index>(
                g.a, g.lda, m, k, row0, t * kBK, tid, [&](int r, int c) { return as + TileA::offset(r, c); });
            copy_tile_async<kBK, kBN, kThreads, B_TRANS, VEC, Index>(
                g.b, g.ldb, k, n, t * kBK, col0, tid, [&](int r, int c) { return bs + TileB::offset(r, c); });
        }
        cp_async_commit();
    };
    auto convert = [&](Index t) {  // staged tile t into operand buffer t % 2
        const int slot = (int)(t % kStages), buffer = (int)(t & 1);
        const float *as = a_stages + slot * TileA::kFloats, *bs = b_stages + slot * TileB::kFloats;
        convert_tile<TileA::kAlongK>(as, [](int row, int kk) { return TileA::offset(row, kk); }, operand(buffer, 0),
                                     operand(buffer, 2), tid);
        convert_tile<TileB::kAlongK>(bs, [](int row, int kk) { return TileB::offset(kk, row); }, operand(buffer, 1),
                                     operand(buffer, 3), tid);
        fence_proxy_async();
    };

    float corr[64] = {};  // the corrections, summed by the tensor core
    float main[64] = {};  // the main term's running sum (FADD)
    float part[64];       // this tile's main term, out of the tensor core

    for (int s = 0; s < kStages; ++s) fetch(s);
    if (steps > 0) {
        cp_async_wait<kStages - 1>();
        __syncthreads();
        convert(0);
        __syncthreads();
    }
    for (Index t = 0; t < steps; ++t) {
        const int buffer = (int)(t & 1);
        const float *a_hi = operand(buffer, 0) + warpgroup * kWgRows * kBK;
        const float *b_hi = operand(buffer, 1);
        const float *a_lo = operand(buffer, 2) + warpgroup * kWgRows * kBK;
        const float *b_lo = operand(buffer, 3);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < kBK / 8; ++s) {  // k-steps of 8: 32 bytes along each 128-byte row
            const uint64_t da = descriptor(a_hi + 8 * s), db = descriptor(b_hi + 8 * s);
            wgmma_64x128x8(part, da, db, s > 0);
            wgmma_64x128x8(corr, descriptor(a_lo + 8 * s), db, 1);
            wgmma_64x128x8(corr, da, descriptor(b_lo + 8 * s), 1);
        }
        wgmma_commit();

        // While the tensor cores work: the next tile lands and is converted into the other buffer.
        fetch(t + kStages);  // into the slot tile t left (converted before the last barrier)
        cp_async_wait<kStages - 1>();
        __syncthreads();
        if (t + 1 < steps) convert(t + 1);

        wgmma_wait_all();
        touch(corr);
        touch(part);
#pragma unroll
        for (int i = 0; i < 64; ++i) main[i] += part[i];
        __syncthreads();  // buffer t + 1 is complete; buffer t and slot t + 1 are free
    }

    // Accumulator i of a thread: n8 block i / 4, element i % 4 of the m16n8 fragment layout.
    const int group = lane / 4, quad = lane % 4;
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        const Index row = row0 + warpgroup * kWgRows + warp * 16 + group + 8 * ((i % 4) / 2);
        const Index col = col0 + 8 * (i / 4) + 2 * quad + i % 2;
        if (row < m && col < n) store_d(g, row, col, tensorcore::combine(main[i], corr[i]));
    }
}

cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        constexpr size_t kSmem = smem_bytes<kA, kB>();
        auto kernel = vec ? wgmma_tf32x3_kernel<I, kA, kB, true> : wgmma_tf32x3_kernel<I, kA, kB, false>;
        launch_with_smem(kernel, grid, kThreads, kSmem, stream, *g);
    });
}

}  // namespace hopper
}  // namespace fsg

extern "C" cudaError_t fsg_tf32x3_sgemm_sm90(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::launch(g, stream);
}
