/*
 * engine/ozaki.cu: the production ozaki (kernel="ozaki", and "ozaki:7" with
 * seven moduli): rung 24's integer scheme with a scaling and a range check
 * whose cost does not depend on the data.
 *
 * Rung 24 scales each row of A (column of B) by its largest element and sends
 * a whole row to dot products in double when its rounding weighs too much
 * against the row's own mass. Two things go wrong with that (issue 47,
 * benchmarks/NOTES.md "Ozaki's range check, modelled on the CPU"):
 *   - most rows of softmax outputs, of exponents spread wide, of data with one
 *     outlier column, and of cancelling sums are flagged, though the integers
 *     would have been accurate, and the double path is 70-460x slower;
 *   - a small element of A that meets a large row of B is lost on A's grid
 *     (and B's other elements on B's), and no check on a row alone sees it:
 *     the result is silently 0.
 * Here:
 *   1. Scale by the 2-norm. Each row of A and column of B gets the power of two
 *      that puts its 2-norm just under 2^(bits + h), h = floor(log2(K) / 2).
 *      By Cauchy-Schwarz |C'| <= |a'|_2 |b'|_2 <= K 2^(bits_a + bits_b), the
 *      same bound as the lesson's largest-element scaling, so the same moduli
 *      hold the sums; but a row whose mass is spread keeps more bits. Every
 *      integer stays below 2^31 (an element is at most its row's 2-norm).
 *   2. Check each output, not each row. The rounding to integers moves a'_ik by
 *      e_ik (|e| <= 1/2) and b'_kj by f_kj; the integer product then differs
 *      from the scaled exact one by at most
 *        U_ij = min(max|e_i| |b'_j|_1, sum|e_i| max|b'_j|) + (the same with a and b
 *               swapped) + min(max|e_i| sum|f_j|, sum|e_i| max|f_j|),
 *      from per-row and per-column sums the scale pass makes. Against it, a
 *      lower bound of (|A| |B|)_ij: each |a'_ik| rounded down to a multiple of
 *      1/64 of its row's largest (0 .. 64, an int8), each |b'_kj| likewise, and
 *      their product on the INT8 tensor cores as one more plane of the GEMM
 *      (its sums kept as floor(log2)). An output whose bound exceeds
 *      kTolerance times that lower bound, or whose row or column holds more
 *      Inf and NaN than its band (3.) takes, is a dot product in double; every
 *      other output is within
 *      kTolerance |A| |B| of the exact one before its final rounding.
 *   3. Take out each row's high band. A row's (column's) few elements far above
 *      the rest (up to four, each more than 16 times the RMS of those below it:
 *      a softmax row's dominant entries, an outlier, a column of B's one huge
 *      element, and its Inf and NaN, as the largest of all) leave the integer
 *      path: the rest is scaled by its own 2-norm,
 *      and the band's products are added in double to each output's integer
 *      value before its one rounding, their magnitudes to its lower bound. On
 *      the classes above, the CPU model flags no output then (benchmarks/
 *      NOTES.md, "A high band, modelled").
 *   4. Sum the outputs that leave after the reconstruction, not in it. It lists
 *      them; then, where any is listed, an operand that does not lie along K
 *      is copied once so that it does, and each listed output is a dot
 *      product in double over whole sectors (pass 4b, below).
 * What it costs over the lesson: one more INT8 plane (9 GEMM planes for 8
 * moduli), a square and a few sums per element in the scale pass, a few
 * multiplies per output in the reconstruction, and from K = 2048 one to
 * three launches of blocks that find nothing listed and stop. The share of outputs flagged
 * bounds the rest: none on normal, uniform, spread-exponent, zero-row and
 * cancelling data in the CPU model, under 1% (K = 4096) of softmax rows, 22%
 * with one outlier column, all of them where A's small elements meet B's large
 * rows.
 * Limits as the lesson's: sm_90a (tf32x3 elsewhere, or where the workspace
 * cannot be had), K in panels of at most 16384, split-K's slices and stacks
 * one product at a time.
 */
#include "engine/ozaki_int8.cuh"  // the moduli, the residues, the INT8 pipeline

namespace fsg {
namespace engine {
namespace ozaki {

using namespace ::fsg::hopper;
namespace int8 = ::fsg::hopper::ozaki;

/* An output keeps the integer path where its error bound is at most this share of its (|A| |B|) lower bound.
 * Eight moduli: 2^-18, 64 units of FP32's 2^-24, against FP32's own worst case of K units. Seven moduli carry 8
 * bits fewer, so that at 2^-18 ordinary data would leave the integers too (their bound is near 2^-18 there):
 * 2^-15, within FP32's worst case from K = 512 up, never auto's (near-fp32). */
template <int MODULI>
constexpr float kTolerance = MODULI >= 8 ? 0x1p-18f : 0x1p-15f;
constexpr int kSteps = 64;  // the magnitudes' grid: multiples of 1/64 of the row's largest

/* What the check needs of one row of A or column of B, in its scaled units (x' = x 2^shift). */
struct RowFacts {
    float rounding_max;  // max |rint(x') - x'|, at most 1/2; 0 where every element is an integer; NaN where the
                         // row holds an Inf or a NaN outside its band
    float rounding_sum;  // sum |rint(x') - x'| (rounded up)
    float mass;          // sum |x'| (rounded up)
    float largest;       // max |x'|: below 2^31, exact
};

// ---- pass 1: each row's high band, scale and facts ----
/* A row's high band: its largest elements, in order, while each is more than kBandGap times the root mean square
 * (over the whole depth) of the row's elements below it, at most kBand of them. They leave the integer path and
 * are multiplied in double in the reconstruction; the rest is scaled by its own 2-norm. Ordinary rows have none;
 * a softmax row has its few dominant elements, a row with an outlier that element, and a column of B whose one
 * element meets A's tiny ones (the small-elements class) that element (benchmarks/NOTES.md, "A high band,
 * modelled"). */
constexpr int kBand = 4;
constexpr double kBandGap = 16.0;

/* A row's band as the kernels pass it: k (panel-relative; -1 past its count) and the element, per row. */
struct Band {
    int4 k;
    float4 x;
};

/* The kBand largest magnitudes one thread (or a whole row) has seen, largest first, and their k (-1: none). */
struct Top {
    float v[kBand];
    int k[kBand];
};
__device__ __forceinline__ Top no_top() {
    Top t;
#pragma unroll
    for (int u = 0; u < kBand; ++u) t.v[u] = 0.0f, t.k[u] = -1;
    return t;
}
/* m at k into the list, where it belongs (a chain of compare-and-swaps: no dynamic index into registers). */
__device__ __forceinline__ void offer(Top &t, float m, int k) {
#pragma unroll
    for (int u = 0; u < kBand; ++u)
        if (m > t.v[u]) {
            const float v = t.v[u];
            const int kk = t.k[u];
            t.v[u] = m, t.k[u] = k;
            m = v, k = kk;
        }
}
/* The first element off the list. */
__device__ __forceinline__ void pop(Top &t) {
#pragma unroll
    for (int u = 0; u + 1 < kBand; ++u) t.v[u] = t.v[u + 1], t.k[u] = t.k[u + 1];
    t.v[kBand - 1] = 0.0f, t.k[kBand - 1] = -1;
}

/* The row's kBand largest, from every thread's list, in every thread of the row. Along k a row is one warp's:
 * kBand rounds of a warp-wide largest head (lowest lane on ties), the winner popping it. Across k a row is one
 * lane's in each of the 8 warps: the lists meet in shared memory and warp 0 merges them. */
__device__ __forceinline__ Top whole_row_top(const int8::RowScan &scan, Top mine, float (&v)[8][32][kBand],
                                             int (&k)[8][32][kBand]) {
    Top row = no_top();
    if (scan.along_k) {
#pragma unroll
        for (int u = 0; u < kBand; ++u) {
            float best = mine.v[0];
            int from = scan.lane;
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) {
                const float other = __shfl_xor_sync(0xffffffffu, best, offset);
                const int other_lane = __shfl_xor_sync(0xffffffffu, from, offset);
                if (other > best || (other == best && other_lane < from)) best = other, from = other_lane;
            }
            row.v[u] = best;
            row.k[u] = __shfl_sync(0xffffffffu, mine.k[0], from);
            if (scan.lane == from) pop(mine);
        }
        return row;
    }
    __syncthreads();  // the previous use of the shared arrays is over
    static_assert(kBand == 4, "a list is one float4 and one int4 in shared memory");
    *reinterpret_cast<float4 *>(v[scan.warp][scan.lane]) = make_float4(mine.v[0], mine.v[1], mine.v[2], mine.v[3]);
    *reinterpret_cast<int4 *>(k[scan.warp][scan.lane]) = make_int4(mine.k[0], mine.k[1], mine.k[2], mine.k[3]);
    __syncthreads();
    if (scan.warp == 0) {
        for (int w = 0; w < 8; ++w)
            for (int u = 0; u < kBand; ++u) offer(row, v[w][scan.lane][u], k[w][scan.lane][u]);
        *reinterpret_cast<float4 *>(v[0][scan.lane]) = make_float4(row.v[0], row.v[1], row.v[2], row.v[3]);
        *reinterpret_cast<int4 *>(k[0][scan.lane]) = make_int4(row.k[0], row.k[1], row.k[2], row.k[3]);
    }
    __syncthreads();
    const float4 vs = *reinterpret_cast<const float4 *>(v[0][scan.lane]);
    const int4 ks = *reinterpret_cast<const int4 *>(k[0][scan.lane]);
    row.v[0] = vs.x, row.v[1] = vs.y, row.v[2] = vs.z, row.v[3] = vs.w;
    row.k[0] = ks.x, row.k[1] = ks.y, row.k[2] = ks.z, row.k[3] = ks.w;
    return row;
}

__device__ __forceinline__ bool in(const int4 &set, int k) { return k == set.x || k == set.y || k == set.z || k == set.w; }

/* As the lesson's scale_kernel, with the high band: shift[row] puts the rest's 2-norm in [2^(top - 1), 2^top)
 * (top = bits + h, at most 31, from the launcher), facts[row] are the rest's, band[row] the band. Two passes over
 * the row where it can have no band (the second mostly from L2): its largest finite element, the squares of its
 * finite elements and how many are not finite; then the rest's facts. Where it can (an element not finite, or
 * the largest more than kBandGap times the RMS of the others), two more between them: its kBand largest (Inf and
 * NaN as the largest of all), then the squares of all but those, which decide the band. The squares below the
 * largest are summed without them there, not as the whole sum minus theirs: an element of 2^50 would cancel
 * every other square. Inf and NaN join the band, so that their products are IEEE arithmetic in double beside
 * the integers; a row with more of them than the band holds leaves the integers (a NaN rounding_max). */
template <int = 0>  // a template, so that no kernel of this file has a strong symbol of its own (as the lesson's)
__global__ void __launch_bounds__(int8::kScaleThreads, 4)
    scale_kernel(int8::Rows a, int8::Rows b, int64_t depth, int top_a, int top_b, int *shift, RowFacts *facts,
                 Band *band, unsigned long long *deferred_count) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *deferred_count = 0;  // the panel's double-path list starts empty
    static_assert(int8::kScaleThreads == 8 * 32, "rows across k: 8 warps");
    __shared__ double sum_of[8][32];
    __shared__ __align__(16) float top_v[8][32][kBand];
    __shared__ __align__(16) int top_k[8][32][kBand];
    const int64_t blocks_a = a.along_k ? ceil_div(a.rows, (int64_t)8) : ceil_div(a.rows, (int64_t)32);
    const bool is_a = blockIdx.x < blocks_a;
    const int8::Rows op = is_a ? a : b;
    const int64_t block = is_a ? blockIdx.x : blockIdx.x - blocks_a;
    const int top = is_a ? top_a : top_b;
    const int64_t first = is_a ? 0 : a.rows;  // b's rows follow a's
    const int8::RowScan scan = {op.along_k, (int)threadIdx.x / 32, (int)threadIdx.x % 32};
    const int64_t row = op.along_k ? block * 8 + scan.warp : block * 32 + scan.lane;
    const int64_t k_first = op.along_k ? scan.lane : scan.warp, k_step = op.along_k ? 32 : 8;
    const int64_t k_pitch = op.along_k ? 1 : op.ld, row_pitch = op.along_k ? op.ld : 1;
    const float *src = op.src + (row < op.rows ? row : 0) * row_pitch;
    const int64_t end = row < op.rows ? depth : 0;
    const auto add = [](double x, double y) { return x + y; };
    const auto larger = [](double x, double y) { return fmax(x, y); };

    // 1. The largest finite magnitude, the finite elements' squares (in double: a float's square, subnormal or
    //    near the largest, is a normal double), and how many elements are Inf or NaN.
    float largest_finite = 0.0f, nonfinite = 0.0f;
    double squares = 0.0;
#pragma unroll 8
    for (int64_t k = k_first; k < end; k += k_step) {
        const float x = src[k * k_pitch];
        if (isfinite(x)) {
            largest_finite = fmaxf(largest_finite, fabsf(x));
            squares = fma((double)x, (double)x, squares);
        } else {
            nonfinite += 1.0f;  // exact: at most 16384 a panel
        }
    }
    const double largest = int8::whole_row(scan, (double)largest_finite, larger, sum_of);
    squares = int8::whole_row(scan, squares, add, sum_of);
    nonfinite = (float)int8::whole_row(scan, (double)nonfinite, add, sum_of);

    // 2. Whether a band can exist. Without Inf and NaN, the largest is the band's first only while it stands
    //    kBandGap above the RMS of the rest; the margin of 2^-20 covers the roundings of the two ways of summing
    //    the others' squares (here the whole sum less the largest's, which cannot cancel much where the test
    //    fails: the largest's square is then at most 256 / depth of the others'), so that no row whose band the
    //    exact test below would start is skipped. Across k a row's lanes span the block: it decides as one.
    const double others = fmax(squares - largest * largest, 0.0);
    bool maybe = nonfinite > 0.0f || largest > kBandGap * sqrt(others / (double)depth) * (1.0 - 0x1p-20);
    if (!op.along_k) maybe = __syncthreads_or(maybe) != 0;
    int4 in_band = make_int4(-1, -1, -1, -1);
    double rest_squares = squares;
    float band_nonfinite = 0.0f;  // Inf and NaN the band holds
    if (maybe) {
        // 2a. The largest kBand magnitudes, Inf and NaN first.
        Top mine = no_top();
    #pragma unroll 8
    for (int64_t k = k_first; k < end; k += k_step) {
            const float x = src[k * k_pitch];
            offer(mine, isfinite(x) ? fabsf(x) : INFINITY, (int)k);
        }
        const Top largest_four = whole_row_top(scan, mine, top_v, top_k);
        const int4 candidates = make_int4(largest_four.k[0], largest_four.k[1], largest_four.k[2], largest_four.k[3]);
        // 2b. The squares of the others, and the band: each candidate in turn while it is not finite or stands
        //     kBandGap above the RMS of the finite elements below it.
        double below = 0.0;
    #pragma unroll 8
    for (int64_t k = k_first; k < end; k += k_step) {
            const float x = src[k * k_pitch];
            if (isfinite(x) && !in(candidates, (int)k)) below = fma((double)x, (double)x, below);
        }
        below = int8::whole_row(scan, below, add, sum_of);
        double under[kBand];  // the finite squares below candidate u
        double running = below;
#pragma unroll
        for (int u = kBand - 1; u >= 0; --u) {
            under[u] = running;
            const double v = largest_four.v[u];
            if (v < INFINITY) running = fma(v, v, running);
        }
        int count = 0;
        bool going = true;
#pragma unroll
        for (int u = 0; u < kBand; ++u) {
            const float v = largest_four.v[u];
            going = going && v > 0.0f && (v == INFINITY || (double)v > kBandGap * sqrt(under[u] / (double)depth));
            if (going) {
                ++count;
                rest_squares = under[u];
                band_nonfinite += v == INFINITY ? 1.0f : 0.0f;
            }
        }
        in_band = make_int4(count > 0 ? largest_four.k[0] : -1, count > 1 ? largest_four.k[1] : -1,
                            count > 2 ? largest_four.k[2] : -1, count > 3 ? largest_four.k[3] : -1);
    }
    const double norm = sqrt(rest_squares);
    const int row_shift = norm > 0.0 ? top - 1 - ilogb(norm) : 0;
    const double scale = __longlong_as_double((int64_t)(1023 + row_shift) << 52);  // 2^row_shift

    // 3. The rest's facts.
    double mass = 0.0, rounding_sum = 0.0, rounding_max = 0.0, rest_largest = 0.0;
#pragma unroll 8
    for (int64_t k = k_first; k < end; k += k_step) {
        const float x = src[k * k_pitch];
        if (isfinite(x) && !in(in_band, (int)k)) {
            const double size = fabs((double)x) * scale;  // exact: a float times a power of two
            const double moved = fabs(rint(size) - size);
            mass += size;
            rounding_sum += moved;
            rounding_max = fmax(rounding_max, moved);
            rest_largest = fmax(rest_largest, size);
        }
    }
    mass = int8::whole_row(scan, mass, add, sum_of);
    rounding_sum = int8::whole_row(scan, rounding_sum, add, sum_of);
    rounding_max = int8::whole_row(scan, rounding_max, larger, sum_of);
    rest_largest = int8::whole_row(scan, rest_largest, larger, sum_of);
    if (row >= op.rows || (op.along_k ? scan.lane : scan.warp) != 0) return;
    shift[first + row] = row_shift;
    // The sums were rounded on the way (relative 2^-52 each); rounding up to float covers them many times over.
    facts[first + row] = {nonfinite > band_nonfinite ? __int_as_float(0x7fffffff) : __double2float_ru(rounding_max),
                          __double2float_ru(rounding_sum * (1.0 + 0x1p-40)), __double2float_ru(mass * (1.0 + 0x1p-40)),
                          (float)rest_largest};
    const auto element = [&](int k) { return k >= 0 ? src[(int64_t)k * k_pitch] : 0.0f; };
    band[first + row] = {in_band, make_float4(element(in_band.x), element(in_band.y), element(in_band.z),
                                              element(in_band.w))};
}

// ---- pass 2: the residues, and the magnitudes' plane ----
struct SliceOperand {
    int8::SliceOperand base;  // rows, shifts, where the planes go and their pitch
    const RowFacts *facts;      // this operand's rows' facts
    const Band *band;           // and their high bands, which the planes hold as zeros
};

/* The lesson's slice_kernel for the rows' rests (their high bands as zeros), writing one more plane after the
 * moduli's: floor(64 |x'| / max|x'|) of each element of the rest (0 .. 64; 0 for Inf and NaN, whose rows are
 * flagged whole). */
template <int MODULI>
__global__ void __launch_bounds__(kPackThreads) slice_kernel(SliceOperand a, SliceOperand b, int64_t depth,
                                                             int64_t tiles_k) {
    __shared__ float tile[kPackRows][int8::kSliceK + 1];
    constexpr int kSliceK = int8::kSliceK;
    const int64_t slices_k = tiles_k * (int8::kKTile / kSliceK);
    const int64_t blocks_a = a.base.row_tiles * slices_k;
    const bool is_a = blockIdx.x < blocks_a;
    const SliceOperand op = is_a ? a : b;
    const int64_t id = is_a ? blockIdx.x : blockIdx.x - blocks_a;
    const int64_t row0 = id / slices_k * kPackRows, k0 = id % slices_k * kSliceK;
    const int8::Rows &src = op.base.rows;
    int8::load_slice(tile, src, row0, k0, depth);
    __syncthreads();
    static_assert(kPackThreads == kPackRows * kSliceK / 16, "one 16-byte chunk of output per thread");
    const int r = threadIdx.x / 2, half = threadIdx.x % 2;
    const int64_t row = row0 + r;
    const double scale = row < src.rows ? __longlong_as_double((int64_t)(1023 + op.base.shift[row]) << 52) : 0.0;
    const float largest = row < src.rows ? op.facts[row].largest : 0.0f;
    const int4 in_band = row < src.rows ? op.band[row].k : make_int4(-1, -1, -1, -1);
    const double steps = largest > 0.0f ? kSteps / (double)largest : 0.0;
    int v[16], magnitude[16];
    double v_exact[16];
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const float x = tile[r][16 * half + u];
        const bool kept = isfinite(x) && !in(in_band, (int)(k0 + 16 * half + u));
        const double scaled = kept ? (double)x * scale : 0.0;
        const double rounded = scaled + int8::kRoundingMagic;  // rint, |x'| < 2^31
        v[u] = __double2loint(rounded);
        v_exact[u] = rounded - int8::kRoundingMagic;
        // rint(q - 1/2) <= floor(q) for q = 64 |x'| / max|x'| in 0 .. 64 (a lower bound is all the check needs), by
        // the same rounding trick: a conversion instruction would cost a quarter-rate pipe.
        magnitude[u] = __double2loint(fma(fabs(scaled), steps, -0.5) + int8::kRoundingMagic);
    }
    const int chunk = (int)(k0 % int8::kKTile) / 16 + half;
    char *dst = op.base.dst + (row0 / kPackRows * tiles_k + k0 / int8::kKTile) * (int64_t)kTileBytes +
                r * int8::kKTile + ((chunk ^ (r % 8)) * 16);
    int8::store_residues<0, MODULI>(v, v_exact, dst, op.base.plane);
    uint4 word;
    uint32_t *part = &word.x;
#pragma unroll
    for (int q = 0; q < 4; ++q)
        part[q] = int8::pack_bytes(magnitude[4 * q], magnitude[4 * q + 1], magnitude[4 * q + 2], magnitude[4 * q + 3]);
    *reinterpret_cast<uint4 *>(dst + MODULI * op.base.plane) = word;
}

// ---- pass 3: the INT8 GEMMs, one plane more ----
/* floor(log2(s)) of a magnitudes' sum (0 <= s < 2^27), -1 for 0: the lower bound's exponent, in a byte. */
__device__ __forceinline__ int magnitude_exponent(int s) { return s > 0 ? 31 - __clz(s) : -1; }

/* The lesson's gemm_kernel over moduli.count + 1 planes: plane moduli.count is the magnitudes', whose sums are
 * stored as magnitude_exponent instead of residues. */
template <int = 0>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(fsg_gemm g, const char *packed_a, const char *packed_b, int tiles_k, int64_t plane_a,
                int64_t plane_b, int8_t *residues, int64_t ldr, int64_t plane_r, int8::Moduli moduli) {
    extern __shared__ __align__(1024) float4 smem[];
    constexpr int kStages = int8::kStages, kStageFloats = int8::kStageFloats, kBTiles = int8::kBTiles;
    const auto [stages, full, empty] = start_ring<kStages, kStageFloats>(smem);
    const int tiles_m = (int)ceil_div(g.m, (int64_t)int8::kBM), tiles_n = (int)ceil_div(g.n, (int64_t)int8::kBN);
    const int planes = moduli.count + 1;
    const int64_t items = (int64_t)tiles_m * tiles_n * planes;
    const int count = (int)ceil_div(items - blockIdx.x, (int64_t)gridDim.x) * tiles_k;
    auto item_of = [&](int t) { return work_item(blockIdx.x + (int64_t)(t / tiles_k) * gridDim.x, tiles_m, tiles_n); };
    const int tid = threadIdx.x, warpgroup = tid / 128;
    if (warpgroup == 0) {
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            int k_tile = 0;
            const char *a_tiles = nullptr, *b_tiles = nullptr;
            auto copy = [&](int t, float *stage, uint64_t *bar) {
                if (k_tile == 0) {
                    const WorkItem w = item_of(t);  // w.z: the plane
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
    uint32_t acc[kBTiles][64];
    const int warp = (tid % 128) / 32, lane = tid % 32;
    for (int t = 0, k_tile = 0; t < count; ++t) {
        const int s = t % kStages;
        mbarrier_wait(&full[s], (t / kStages) & 1);
        const float *a = stages + s * kStageFloats + consumer * kWgRows * kBK;
        const float *b = stages + s * kStageFloats + kTileFloats;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < int8::kKSteps; ++ks) {
            const uint64_t da = descriptor(a + 8 * ks);
#pragma unroll
            for (int j = 0; j < kBTiles; ++j)
                wgmma_64x128x32_s8(acc[j], da, descriptor(b + j * kTileFloats + 8 * ks), k_tile > 0 || ks > 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (t > 0) mbarrier_arrive(&empty[(t - 1) % kStages]);
        if (++k_tile < tiles_k) continue;
        k_tile = 0;
        wgmma_wait_all();
#pragma unroll
        for (int j = 0; j < kBTiles; ++j) touch_registers(acc[j]);
        const WorkItem w = item_of(t);
        const int plane_index = (int)w.z;
        const bool magnitudes = plane_index == moduli.count;
        const int64_t first_row = (int64_t)w.tile_m * int8::kBM + consumer * kWgRows + warp * 16 + lane / 4;
        const int64_t first_col = (int64_t)w.tile_n * int8::kBN + 2 * (lane % 4);
        const int m = magnitudes ? 1 : moduli.m[plane_index];
        const double inverse = magnitudes ? 1.0 : moduli.inverse[plane_index];
        int8_t *plane = residues + plane_index * plane_r;
#pragma unroll
        for (int j = 0; j < kBTiles; ++j)
#pragma unroll
            for (int i = 0; i < 64; i += 2) {
                const int64_t row = first_row + 8 * ((i % 4) / 2), col = first_col + j * kPackRows + 8 * (i / 4);
                if (row < g.m && col < g.n) {
                    const int x0 = (int)acc[j][i], x1 = (int)acc[j][i + 1];
                    const char2 pair =
                        magnitudes ? make_char2((char)magnitude_exponent(x0), (char)magnitude_exponent(x1))
                                   : make_char2((char)int8::reduce(x0, m, inverse), (char)int8::reduce(x1, m, inverse));
                    *reinterpret_cast<char2 *>(plane + row * ldr + col) = pair;
                }
            }
    }
}

// ---- pass 4: the Chinese remainder theorem, and the check ----
/* 2^e as a float, for -126 <= e <= 127: built from its exponent bits (ldexpf handles every case, slowly). */
__device__ __forceinline__ float power_of_two(int e) { return __int_as_float((e + 127) << 23); }

/* The error bound U_ij (above) from a row's facts and a column's, or from upper bounds of a column's. */
__device__ __forceinline__ float error_bound(const RowFacts &a, float b_rounding_max, float b_rounding_sum,
                                             float b_mass, float b_largest) {
    return fminf(a.rounding_max * b_mass, a.rounding_sum * b_largest) +
           fminf(b_rounding_max * a.mass, b_rounding_sum * a.largest) +
           fminf(a.rounding_max * b_rounding_sum, a.rounding_sum * b_rounding_max);
}

/* Whether a bound U stays within `tolerance` of the lower bound of (|A'| |B'|)_ij: |a'_ik| >= q_ik largest_a / 64
 * and |b'_kj| likewise, so (|A'| |B'|)_ij >= largest_a largest_b 2^exponent / 4096; 1 - 2^-16 covers the
 * magnitudes' own rounding (a truncation of a product rounded once). An exponent of -1: no lower bound. */
__device__ __forceinline__ bool within(float bound, float a_largest, float b_largest, int exponent, float tolerance) {
    if (bound == 0.0f) return true;  // every element on its grid: the integers are exact
    if (exponent < 0) return false;
    return bound <= tolerance * (a_largest * b_largest * power_of_two(exponent - 12) * (1.0f - 0x1p-16f));
}

/* Whether output (i, j) leaves the integer path: its row or column holds Inf or NaN outside its band (a NaN
 * rounding_max), or its error bound exceeds `tolerance` times the lower bound of (|A'| |B'|)_ij. */
__device__ __forceinline__ bool leaves_integers(const RowFacts &a, const RowFacts &b, int exponent, float tolerance) {
    if (isnan(a.rounding_max) || isnan(b.rounding_max)) return true;  // Inf or NaN: IEEE arithmetic, in double
    return !within(error_bound(a, b.rounding_max, b.rounding_sum, b.mass, b.largest), a.largest, b.largest, exponent,
                   tolerance);
}

/* The exponent byte of column c of eight, sign-extended. */
__device__ __forceinline__ int exponent_of(uint2 exponents, int c) {
    return (int)(int8_t)(((c < 4 ? exponents.x : exponents.y) >> (8 * (c % 4))) & 0xFFu);
}

template <typename V4, typename T>
__device__ __forceinline__ T part(const V4 &v, int t) {
    return t == 0 ? v.x : t == 1 ? v.y : t == 2 ? v.z : v.w;
}

/* Output (i, j)'s high-band terms, in double: A's band of row i against B's column j (all of it), and the rest of
 * A's row i against B's band of column j (an element in both bands is counted once, in A's). `sum` gets their sum,
 * `size` their magnitudes' (the bands' share of (|A| |B|)_ij, exact for the lower bound). */
__device__ __forceinline__ void band_terms(const fsg_gemm &g, int64_t i, int64_t j, const Band &row,
                                           const Band &column, double &sum, double &size) {
#pragma unroll
    for (int t = 0; t < kBand; ++t) {
        const int k = part<int4, int>(row.k, t);
        if (k >= 0) {
            const double p = (double)part<float4, float>(row.x, t) * (double)int8::b_at(g, k, j);
            sum += p;
            size += fabs(p);
        }
    }
#pragma unroll
    for (int t = 0; t < kBand; ++t) {
        const int k = part<int4, int>(column.k, t);
        if (k >= 0 && !in(row.k, k)) {
            const double p = (double)int8::a_at(g, i, k) * (double)part<float4, float>(column.x, t);
            sum += p;
            size += fabs(p);
        }
    }
}

// ---- pass 4b: the outputs that leave the integers, after the reconstruction ----
/* Summed where it is found, an output that leaves the integers reads a column of B across its rows: with B
 * row-major, a 32-byte sector for each of its K floats. At K = 16384 on softmax rows, 0.07% of the outputs of
 * ozaki:7 did, and the reconstruction took 80 ms of the call's 130 (benchmarks/NOTES.md, "The double path by the
 * whole warp"). So from K = kDeferFromK the reconstruction lists them, and after it, where any is listed,
 * the operands that do not lie along K are copied once so that they do (transpose_kernel), and deferred_kernel
 * sums each listed output with a warp, from whole sectors. The copies take the INT8 planes of A and B, which
 * the GEMM pass has finished with, and so does the list where the planes hold it beside them; where they may
 * not, the list has a region of its own (workspace_of). Below kDeferFromK each is summed where it is found. */
constexpr int64_t kDeferFromK = 2048;  // pass 4b for depths from here; below, a listed sum is short anyway
struct DeferredList {
    unsigned long long *count;  // entries listed (zeroed by scale_kernel); with capacity 0 (K < kDeferFromK) none
                                // is, and every output that leaves is summed in place
    int4 *list;                 // (i, j0, leave, 0): row i's columns j0 + c for each bit c of leave
    int64_t capacity;
};
struct Deferred {
    DeferredList listed;
    const float *a_rows;  // row i of A at a_rows + i * lda_k, along K (A itself, or its copy)
    const float *b_columns;  // column j of B at b_columns + j * ldb_k
    int64_t lda_k, ldb_k;
};

/* dst[c * ld_dst + r] = src[r * ld_src + c] for an r x c matrix, by 32 x 32 tiles through shared memory, in a
 * grid that loops over the tiles; nothing at all where no output is listed. */
template <int = 0>
__global__ void __launch_bounds__(256) transpose_kernel(const float *src, int64_t ld_src, int64_t rows,
                                                        int64_t cols, float *dst, int64_t ld_dst,
                                                        const unsigned long long *count) {
    if (*count == 0) return;
    __shared__ float tile[32][33];
    const int64_t tiles_c = ceil_div(cols, (int64_t)32), tiles = ceil_div(rows, (int64_t)32) * tiles_c;
    const int x = threadIdx.x % 32, y = threadIdx.x / 32;  // 8 rows of 32 threads
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int64_t r0 = t / tiles_c * 32, c0 = t % tiles_c * 32;
        for (int dy = y; dy < 32; dy += 8)
            if (r0 + dy < rows && c0 + x < cols) tile[dy][x] = src[(r0 + dy) * ld_src + c0 + x];
        __syncthreads();
        for (int dy = y; dy < 32; dy += 8)
            if (c0 + dy < cols && r0 + x < rows) dst[(c0 + dy) * ld_dst + r0 + x] = tile[x][dy];
        __syncthreads();
    }
}

/* Each listed output's dot product in double, a warp an entry (a row's up to eight outputs, one after another):
 * lane l sums the products p = l, l + 32, ... from A's row and B's column, both along K, so that a warp's loads
 * are 128 contiguous bytes of each; a butterfly of shuffles adds the 32 sums, and lane 0 stores. The order of
 * the sums depends on K alone, as does whether an output comes here (every listed output fits the list: see
 * workspace_of), so a row's bits do not depend on the other rows. */
template <int = 0>
__global__ void __launch_bounds__(256) deferred_kernel(fsg_gemm g, Deferred deferred) {
    const unsigned long long listed = *deferred.listed.count;
    const int64_t capacity = deferred.listed.capacity;
    const int64_t total = listed < (unsigned long long)capacity ? (int64_t)listed : capacity;
    const int lane = (int)threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; e < total; e += warps) {
        const int4 entry = deferred.listed.list[e];
        const float *a = deferred.a_rows + entry.x * deferred.lda_k;
        for (unsigned leave = (unsigned)entry.z; leave != 0; leave &= leave - 1) {
            const int64_t j = (int64_t)entry.y + __ffs(leave) - 1;
            const float *b = deferred.b_columns + j * deferred.ldb_k;
            double sum = 0.0;
            for (int64_t p = lane; p < g.k; p += 32) sum = fma((double)a[p], (double)b[p], sum);
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
            if (lane == 0) store_d(g, entry.x, j, (float)sum);
        }
    }
}

/* The lesson's reconstruct_kernel, with the check per output in place of the rows and columns out of range, and
 * the high bands' terms added to the integers' value before its one rounding to float: an output that leaves the
 * integer path is a dot product in double (pass 4b, above; below K = 2048 in the thread that owns it). A thread checks its eight columns of a row
 * at once first, against the columns' facts folded (the largest of each, the smallest largest element, the
 * smallest exponent) and without the bands' share of the lower bound: where that passes, so does each output;
 * only where it fails are the columns' own facts read (from L1). Read for every row, they made the kernel 4-5x the
 * lesson's (a 16-byte load per output at a 128-byte stride across the warp); held in registers for all eight
 * columns, they spilled. Rows and columns without a band (ordinary data) pay one test a row. */
template <int MODULI>
__global__ void __launch_bounds__(int8::kReconstructThreads, 3)  // 80 registers: three blocks an SM, as before the bands
    reconstruct_kernel(fsg_gemm g, const int8_t *residues, int64_t ldr, int64_t plane_r, int8::Moduli moduli,
                       const int *shift, const RowFacts *facts, const Band *band, DeferredList deferred) {
    constexpr int kColumns = int8::kColumnsPerThread;
    constexpr float kTol = kTolerance<MODULI>;
    const int64_t j0 = ((int64_t)blockIdx.x * int8::kReconstructThreads + threadIdx.x) * kColumns;
    if (j0 >= g.n) return;
    const int columns = g.n - j0 < kColumns ? (int)(g.n - j0) : kColumns;
    const RowFacts *column = facts + g.m + j0;
    const int *column_shift = shift + g.m + j0;
    const Band *column_band = band + g.m + j0;
    float b_rounding_max = 0.0f, b_rounding_sum = 0.0f, b_mass = 0.0f, b_largest = 0.0f, b_smallest = INFINITY;
    bool b_special = false;
    unsigned column_bands = 0;  // bit c: column c has a band
    for (int c = 0; c < columns; ++c) {
        const RowFacts f = column[c];
        b_special |= isnan(f.rounding_max);
        b_rounding_max = fmaxf(b_rounding_max, f.rounding_max);
        b_rounding_sum = fmaxf(b_rounding_sum, f.rounding_sum);
        b_mass = fmaxf(b_mass, f.mass);
        b_largest = fmaxf(b_largest, f.largest);
        b_smallest = fminf(b_smallest, f.largest);
        column_bands |= (column_band[c].k.x >= 0 ? 1u : 0u) << c;
    }
    const bool whole_vectors = columns == kColumns && g.c == nullptr && g.ldd % 4 == 0 &&
                               reinterpret_cast<uintptr_t>(g.d) % 16 == 0;
    for (int64_t i = blockIdx.y; i < g.m; i += gridDim.y) {
        const RowFacts row = facts[i];
        const Band row_band = band[i];
        const bool bands = column_bands != 0 || row_band.k.x >= 0;
        uint2 bytes[MODULI];
#pragma unroll
        for (int t = 0; t < MODULI; ++t) {
            const uint2 raw = *reinterpret_cast<const uint2 *>(residues + t * plane_r + i * ldr + j0);
            bytes[t] = make_uint2(raw.x ^ 0x80808080u, raw.y ^ 0x80808080u);
        }
        const uint2 exponents = *reinterpret_cast<const uint2 *>(residues + MODULI * plane_r + i * ldr + j0);
        unsigned leave = 0;  // bit c: column c leaves the integers
        bool all_stay = false;
        if (!b_special && !isnan(row.rounding_max)) {
            int smallest_exponent = 127;
            for (int c = 0; c < columns; ++c) smallest_exponent = min(smallest_exponent, exponent_of(exponents, c));
            all_stay = within(error_bound(row, b_rounding_max, b_rounding_sum, b_mass, b_largest), row.largest,
                              b_smallest, smallest_exponent, kTol);
        }
        if (!all_stay && !bands)
            for (int c = 0; c < columns; ++c)
                if (leaves_integers(row, column[c], exponent_of(exponents, c), kTol)) leave |= 1u << c;
        const int row_shift = 1023 - shift[i];
        float values[kColumns];
#pragma unroll
        for (int c = 0; c < kColumns; ++c) {
            const int64_t exact = int8::recombined<MODULI>(bytes, c, moduli);
            const int both = c < columns ? row_shift - column_shift[c] : 1023;  // 1023 - (sa_i + sb_j)
            const double unscale = __longlong_as_double((int64_t)both << 52);
            double value = (double)exact * unscale;
            if (bands && c < columns) {
                double sum = 0.0, size = 0.0;
                // a column without a band is not read: with softmax rows as A, only the rows have bands
                const Band column_c = (column_bands >> c) & 1u ? column_band[c] : Band{make_int4(-1, -1, -1, -1), {}};
                band_terms(g, i, j0 + c, row_band, column_c, sum, size);
                value += sum;
                if (!all_stay) {  // the check with the bands' share of the lower bound, in scaled units
                    const RowFacts f = column[c];
                    const double scaled_size = size * __longlong_as_double((int64_t)(2046 - both) << 52);
                    const int exponent = exponent_of(exponents, c);
                    const double rest =
                        exponent < 0 ? 0.0 : (double)row.largest * f.largest * power_of_two(exponent - 12);
                    const float bound = error_bound(row, f.rounding_max, f.rounding_sum, f.mass, f.largest);
                    // 1 - 2^-16 covers the magnitudes' truncation and the roundings of the bound and of the sums
                    if (isnan(row.rounding_max) || isnan(f.rounding_max) ||
                        (bound != 0.0f && (double)bound > (double)kTol * (rest + scaled_size) * (1.0 - 0x1p-16)))
                        leave |= 1u << c;
                }
            }
            values[c] = (float)value;
        }
        if (whole_vectors && leave == 0) {
            float4 *d = reinterpret_cast<float4 *>(g.d + i * g.ldd + j0);
            d[0] = make_float4(g.alpha * values[0], g.alpha * values[1], g.alpha * values[2], g.alpha * values[3]);
            d[1] = make_float4(g.alpha * values[4], g.alpha * values[5], g.alpha * values[6], g.alpha * values[7]);
        } else {  // the integers' outputs first, so that no value waits in a register through a dot product
#pragma unroll
            for (int c = 0; c < kColumns; ++c)
                if (c < columns && !((leave >> c) & 1u)) store_d(g, i, j0 + c, values[c]);
            if (leave != 0) {  // to deferred_kernel's list, or (K < kDeferFromK: no list) summed here
                const unsigned long long at = deferred.capacity > 0 ? atomicAdd(deferred.count, 1ull) : ~0ull;
                if (at < (unsigned long long)deferred.capacity)
                    deferred.list[at] = make_int4((int)i, (int)j0, (int)leave, 0);
                else
                    for (; leave != 0; leave &= leave - 1) {
                        const int c = __ffs(leave) - 1;
                        store_d(g, i, j0 + c, int8::dot_in_double(g, i, j0 + c));
                    }
            }
        }
    }
}

// ---- the launcher ----
/* One panel's workspace: the lesson's with one plane more of each, the facts, pass 4b's count, and its list where
 * the spent planes may not hold it. */
struct Workspace {
    int64_t tiles_k, row_tiles_a, row_tiles_b, plane_a, plane_b, ldr, plane_r, bytes;
    int64_t at_b, at_residues, at_shift, at_facts, at_band, at_count;
    int64_t at_list, list_bytes;  // pass 4b's list: its own region at at_list, or (-1) in the planes
};
inline Workspace workspace_of(int moduli, int64_t m, int64_t n, int64_t depth, int64_t shallowest_deferred) {
    const int planes = moduli + 1;
    Workspace w;
    w.tiles_k = ceil_div(depth, (int64_t)int8::kKTile);
    w.row_tiles_a = ceil_div(m, (int64_t)int8::kBM);
    w.row_tiles_b = ceil_div(n, (int64_t)int8::kBN) * int8::kBTiles;
    w.plane_a = w.row_tiles_a * w.tiles_k * kTileBytes;
    w.plane_b = w.row_tiles_b * w.tiles_k * kTileBytes;
    w.ldr = int8::round_up(n, 16);
    w.plane_r = int8::round_up(m * w.ldr, 256);
    w.at_b = planes * w.plane_a;
    w.at_residues = w.at_b + planes * w.plane_b;
    w.at_shift = w.at_residues + planes * w.plane_r;
    w.at_facts = w.at_shift + int8::round_up((m + n) * (int64_t)sizeof(int), 256);
    w.at_band = w.at_facts + int8::round_up((m + n) * (int64_t)sizeof(RowFacts), 256);
    w.at_count = w.at_band + int8::round_up((m + n) * (int64_t)sizeof(Band), 256);
    w.bytes = w.at_count + 256;  // the double-path list's count; the copies in the planes (pass 4b)
    // The list holds every thread-row the reconstruction can list (m x ceil(n / 8)), so that no output of a
    // deferred panel is summed in place in another order. Beside the copies (4 bytes an element of A and B,
    // where the planes hold 8 or more) a panel of depth k keeps at least 4 (m + n) k bytes of its planes: the
    // list goes there unless the call's shallowest deferred panel (0: none) might not hold it. Every panel of a
    // call takes the same decision, and its own region lies within the deepest panel's allocation.
    w.list_bytes = m * ceil_div(n, (int64_t)8) * 16;
    const bool own = shallowest_deferred > 0 && w.list_bytes + 256 > 4 * (m + n) * shallowest_deferred;
    w.at_list = own ? w.bytes : -1;
    if (w.at_list >= 0) w.bytes += int8::round_up(w.list_bytes, 256);
    return w;
}

/* The exponent bound of the scaled 2-norms, A's and B's: bits_a + h and bits_b + h with bits_a + bits_b the
 * product's bits and 2^(2h) <= depth, so that |C'| <= 2^(top_a + top_b) <= depth 2^bits <= P / 4; each at most
 * 31, so that every integer fits an int. */
inline void norm_tops(const int8::Moduli &mod, int64_t depth, int *top_a, int *top_b) {
    const int bits = int8::product_bits(mod, depth);
    int h = 0;
    while (((int64_t)1 << (2 * (h + 1))) <= depth) ++h;
    *top_a = (bits + 1) / 2 + h < 31 ? (bits + 1) / 2 + h : 31;
    *top_b = bits / 2 + h < 31 ? bits / 2 + h : 31;
}

template <int MODULI>
void run_panel(const fsg_gemm &g, const int8::Moduli &mod, char *base, int sms, int64_t shallowest_deferred,
               cudaStream_t stream) {
    const Workspace w = workspace_of(MODULI, g.m, g.n, g.k, shallowest_deferred);
    int top_a, top_b;
    norm_tops(mod, g.k, &top_a, &top_b);
    int *shift = reinterpret_cast<int *>(base + w.at_shift);
    RowFacts *facts = reinterpret_cast<RowFacts *>(base + w.at_facts);
    Band *band = reinterpret_cast<Band *>(base + w.at_band);
    int8_t *residues = reinterpret_cast<int8_t *>(base + w.at_residues);
    const int8::Rows a = {g.a, g.lda, g.m, !g.a_trans}, b = {g.b, g.ldb, g.n, g.b_trans};
    const int64_t scale_blocks = (a.along_k ? ceil_div(g.m, (int64_t)8) : ceil_div(g.m, (int64_t)32)) +
                                 (b.along_k ? ceil_div(g.n, (int64_t)8) : ceil_div(g.n, (int64_t)32));
    // Pass 4b's copies, in the planes [0, at_residues) once the GEMM pass is done with them: A's (where its rows
    // do not lie along K), B's (where its columns do not), then the list unless it has its own region. Rows of
    // 32 floats' multiple: a warp's loads in deferred_kernel start on 128-byte lines.
    const int64_t ld_k = int8::round_up(g.k, 32);
    Deferred deferred;
    deferred.listed.count = reinterpret_cast<unsigned long long *>(base + w.at_count);
    float *copies = reinterpret_cast<float *>(base);
    float *a_copy = g.a_trans ? copies : nullptr;
    float *b_copy = g.b_trans ? nullptr : copies + (g.a_trans ? g.m * ld_k : 0);
    deferred.a_rows = a_copy != nullptr ? a_copy : g.a;
    deferred.lda_k = a_copy != nullptr ? ld_k : g.lda;
    deferred.b_columns = b_copy != nullptr ? b_copy : g.b;
    deferred.ldb_k = b_copy != nullptr ? ld_k : g.ldb;
    const int64_t copied = ((a_copy != nullptr ? g.m : 0) + (b_copy != nullptr ? g.n : 0)) * ld_k * (int64_t)sizeof(float);
    const int64_t list_at = int8::round_up(copied, 256);  // the planes hold 8 bytes or more an element of A and B
    deferred.listed.list = reinterpret_cast<int4 *>(base + (w.at_list >= 0 ? w.at_list : list_at));
    // Below kDeferFromK an output summed in place costs little, less than pass 4b's launches on a small call: no
    // list (capacity 0), no launches.
    const bool defer = g.k >= kDeferFromK;
    deferred.listed.capacity = defer ? w.list_bytes / (int64_t)sizeof(int4) : 0;
    ::fsg::engine::ozaki::scale_kernel<><<<(unsigned)scale_blocks, int8::kScaleThreads, 0, stream>>>(
        a, b, g.k, top_a, top_b, shift, facts, band, deferred.listed.count);
    const SliceOperand slice_a = {{a, shift, base, w.row_tiles_a, w.plane_a}, facts, band};
    const SliceOperand slice_b = {{b, shift + g.m, base + w.at_b, w.row_tiles_b, w.plane_b}, facts + g.m, band + g.m};
    const int64_t slices_k = w.tiles_k * (int8::kKTile / int8::kSliceK);
    ::fsg::engine::ozaki::slice_kernel<MODULI><<<(unsigned)((w.row_tiles_a + w.row_tiles_b) * slices_k), kPackThreads, 0, stream>>>(
        slice_a, slice_b, g.k, w.tiles_k);
    const int64_t items = w.row_tiles_a * ceil_div(g.n, (int64_t)int8::kBN) * (MODULI + 1);
    const dim3 grid((unsigned)(items < sms ? items : sms));
    launch_with_smem(::fsg::engine::ozaki::gemm_kernel<>, grid, kThreads, int8::kSmemBytes, stream, g, (const char *)base,
                     (const char *)(base + w.at_b), (int)w.tiles_k, w.plane_a, w.plane_b, residues, w.ldr, w.plane_r,
                     mod);
    const int64_t row_groups = ceil_div(g.m, (int64_t)int8::kRowsPerThread);
    const dim3 rows_grid((unsigned)ceil_div(g.n, (int64_t)(int8::kReconstructThreads * int8::kColumnsPerThread)),
                         (unsigned)(row_groups < 65535 ? row_groups : 65535));
    ::fsg::engine::ozaki::reconstruct_kernel<MODULI><<<rows_grid, int8::kReconstructThreads, 0, stream>>>(
        g, residues, w.ldr, w.plane_r, mod, shift, facts, band, deferred.listed);
    // Pass 4b: a few launches of empty blocks where no output left the integers
    if (!defer) return;
    if (a_copy != nullptr)  // A is stored k-major (column-major): its transpose has A's rows along K
        ::fsg::engine::ozaki::transpose_kernel<><<<(unsigned)(4 * sms), 256, 0, stream>>>(g.a, g.lda, g.k, g.m, a_copy,
                                                                                         ld_k, deferred.listed.count);
    if (b_copy != nullptr)  // B row-major: its transpose has B's columns along K
        ::fsg::engine::ozaki::transpose_kernel<><<<(unsigned)(4 * sms), 256, 0, stream>>>(g.b, g.ldb, g.k, g.n, b_copy,
                                                                                         ld_k, deferred.listed.count);
    ::fsg::engine::ozaki::deferred_kernel<><<<(unsigned)(4 * sms), 256, 0, stream>>>(g, deferred);
}

/* The whole call, as the lesson's launch: split-K's slices one after another, each in panels of at most
 * kPanelK adding onto D. *launched stays false, with nothing enqueued, where this path cannot run. */
template <int MODULI>
cudaError_t launch(const fsg_gemm *problem, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    *launched = false;
    const fsg_gemm &g = *problem;
    if (g.k == 0 || batch.count > 1) return cudaSuccess;
    const int64_t slices = g.k_slice > 0 ? ceil_div(g.k, g.k_slice) : 1;
    const int64_t deepest = g.k_slice > 0 ? g.k_slice : g.k;
    const int64_t panel_k = deepest < int8::kPanelK ? deepest : int8::kPanelK;
    // The shallowest panel pass 4b runs on (0: none), which decides where its list goes (workspace_of)
    int64_t shallowest_deferred = 0;
    for (int64_t z = 0; z < slices; ++z) {
        const int64_t depth = g.k_slice > 0 ? int8::slice_problem(g, z).k : g.k;
        for (int64_t k0 = 0; k0 < depth; k0 += int8::kPanelK) {
            const int64_t k = depth - k0 < int8::kPanelK ? depth - k0 : int8::kPanelK;
            if (k >= kDeferFromK && (shallowest_deferred == 0 || k < shallowest_deferred)) shallowest_deferred = k;
        }
    }
    const Workspace w = workspace_of(MODULI, g.m, g.n, panel_k, shallowest_deferred);
    const int64_t slice_blocks = (w.row_tiles_a + w.row_tiles_b) * w.tiles_k * (int8::kKTile / int8::kSliceK);
    const int64_t gemm_items = w.row_tiles_a * (w.row_tiles_b / int8::kBTiles) * (MODULI + 1);
    if (slice_blocks > INT32_MAX || g.m > INT32_MAX || g.n > INT32_MAX || gemm_items * w.tiles_k > INT32_MAX)
        return cudaSuccess;
    const int8::Moduli mod = int8::moduli_of(MODULI);
    int sms;
    cudaError_t err = current_sm_count(&sms);
    if (err != cudaSuccess) return err;
    WorkspaceSource source;
    err = workspace_source(&source);
    if (err != cudaSuccess) return err;
    char *base;
    err = take_workspace(source, (size_t)w.bytes, stream, &base);
    if (err != cudaSuccess || base == nullptr) return err;  // no workspace: tf32x3 runs instead
    *launched = true;
    for (int64_t z = 0; z < slices && err == cudaSuccess; ++z) {
        const fsg_gemm whole = g.k_slice > 0 ? int8::slice_problem(g, z) : g;
        for (int64_t k0 = 0; k0 < whole.k && err == cudaSuccess; k0 += int8::kPanelK) {
            fsg_gemm panel = whole;
            panel.a += whole.a_trans ? k0 * whole.lda : k0;
            panel.b += whole.b_trans ? k0 : k0 * whole.ldb;
            panel.k = whole.k - k0 < int8::kPanelK ? whole.k - k0 : int8::kPanelK;
            if (k0 > 0) {  // onto the panels before
                panel.c = whole.d;
                panel.ldc = whole.ldd;
                panel.beta = 1.0f;
            }
            ::fsg::engine::ozaki::run_panel<MODULI>(panel, mod, base, sms, shallowest_deferred, stream);
            err = cudaGetLastError();
        }
    }
    const cudaError_t freed = give_workspace(base, (size_t)w.bytes, stream);
    return err != cudaSuccess ? err : freed;
}

}  // namespace ozaki
}  // namespace engine
}  // namespace fsg

/* Eight moduli: kernel="ozaki". tf32x3 where this path cannot run. */
extern "C" cudaError_t fsg_ozaki_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, &fsg::hopper::kOneProduct, stream, fsg::engine::ozaki::launch<8>,
                                            fsg_tf32x3_sgemm);
}

/* Seven moduli: kernel="ozaki:7", 8 bits fewer between the scaled operands, an eighth less INT8 work. */
extern "C" cudaError_t fsg_ozaki_7_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, &fsg::hopper::kOneProduct, stream, fsg::engine::ozaki::launch<7>,
                                            fsg_tf32x3_sgemm);
}
