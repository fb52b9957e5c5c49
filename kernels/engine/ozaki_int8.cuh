/*
 * engine/ozaki_int8.cuh: the INT8 Ozaki pipeline that kernel="ozaki" (engine/ozaki.cu) is built on: the moduli,
 * the row scaling to integers, the residues, the persistent INT8 wgmma GEMM over every modulus, the
 * reconstruction by the Chinese remainder theorem, and the panels and workspace of one call. The idea is rung 22's
 * lesson (kernels/ladder/22_ozaki.cu), whose code this was when the engine took it; engine/ozaki.cu adds the
 * error check against a product of magnitudes and the double-precision fallback for the outputs that fail it.
 * Built for sm_90a only.
 */
#ifndef FASTSGEMM_ENGINE_OZAKI_INT8_CUH
#define FASTSGEMM_ENGINE_OZAKI_INT8_CUH

#include "engine/pack.cuh"  // the Hopper machinery: PTX, the pipeline, the pack pass (shared, for now)

namespace fsg {
namespace hopper {
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
    engine::WorkspaceSource source;
    err = engine::workspace_source(&source);
    if (err != cudaSuccess) return err;
    char *base;
    err = engine::take_workspace(source, (size_t)w.bytes, stream, &base);
    if (err != cudaSuccess || base == nullptr) return err;  // no workspace: tf32x3 runs instead
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
    const cudaError_t freed = engine::give_workspace(base, (size_t)w.bytes, stream);
    return err != cudaSuccess ? err : freed;
}

}  // namespace ozaki
}  // namespace hopper
}  // namespace fsg

#endif  // FASTSGEMM_ENGINE_OZAKI_INT8_CUH
