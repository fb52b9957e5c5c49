/*
 * engine/ozaki_int8.cuh: the pieces of rung 24's INT8 Ozaki scheme that kernel="ozaki" (engine/ozaki.cu) is built
 * from: the moduli and their recombination constants, the rows' scans, the scaled integers' residues and their
 * packing, the symmetric reduction, the reconstruction's residue reads, the dot product in double, and split-K's
 * slices. Taken from the lesson (kernels/ladder/24_ozaki.cu) as it stood; the lesson's own passes and launcher
 * stay there, and engine/ozaki.cu has its own, with the error check against a product of magnitudes and the
 * double-precision fallback for the outputs that fail it. Built for sm_90a only.
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

// ---- pass 3: n INT8 GEMMs, their sums reduced to residues ----
/* x mod m in the symmetric range (|x| < 2^30): the nearest multiple of m by a double-precision quotient, exact
 * here (m odd has no ties; m = 256 has ties, and its 128 is the same residue as -128). */
__device__ __forceinline__ int reduce(int x, int m, double inverse) {
    const int r = x - m * __double2int_rn((double)x * inverse);
    return r > 127 ? r - m : r;
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

// ---- the moduli, the bits and the slices of a call ----
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

}  // namespace ozaki
}  // namespace hopper
}  // namespace fsg

#endif  // FASTSGEMM_ENGINE_OZAKI_INT8_CUH
