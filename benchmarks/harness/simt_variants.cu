// benchmarks/harness/simt_variants: the SIMT variants measured for issue 21's third item (a SIMT rung past
// cuBLAS FP32; benchmarks/NOTES.md, "Past cuBLAS on the FMA pipe?"), timed against cuBLAS FP32 (pedantic math)
// and rung 14 in the same run, in interleaved rounds so that clock drift touches all alike.
//     benchmarks/harness/build_simt.sh && benchmarks/harness/simt_variants ['word|word' in the names] [repeats] [size]
// An experiment, not a rung: row-major A (m x k), B (k x n) and D, every size a multiple of every tile, no C.
// Each variant's output is compared with cuBLAS's (every 7th element, relative to |ref| + 1) after a NaN poison.
//
// The kernel (exp_kernel) is a template over the block tile (BM x BN x BK), a ring of STAGES shared-memory
// stages, the warp grid and lane grid (thread tiles of 4 x 4 quarters, as rung 16), fragments double-buffered
// in registers (rung 14), one barrier per k-tile, and:
//   - how A reaches shared memory, transposed: by 4-byte cp.async copies (one element each, so the copy engine
//     transposes), or through registers (A_THROUGH_REGISTERS: LDG.128 two tiles ahead, four STS.32 at the end
//     of the tile before); B always by 16-byte cp.async;
//   - ORDER, the order of the outer product's FFMAs in the source: 0 rows outer, 1 columns outer, 2 two-by-two
//     blocks in a snake, 3 column pairs outer with rows in a snake, 4 row pairs outer with columns in a snake,
//     5 row quads outer, column pairs inner, rows two FFMAs at a time, every other pair from the quad's middle.
// The "rung10 oN" variants are rung 14's own kernel (its loader, bounds and all) given ORDER 0 (its own,
// RowByRow), 2 (rung 15's snake of blocks) or 5 as its OuterProduct (a copy of rung 14's kernel with that
// parameter: the lesson itself has one order).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <random>
#include <cmath>
#include <string>
#include <cublas_v2.h>
#include "ladder.h"
#include "ladder/15_reuse.cu"  // rung 14's tile, loads and pipeline (rung 15 keeps them whole), and rung 15's order

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

__device__ __forceinline__ void cp4(float *dst, const float *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp16(float *dst, const float *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_pending() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int BM_, int BN_, int BK_, int STAGES_, int WARPS_M_, int WARPS_N_, int LANES_M_, int ORDER_, bool A_THROUGH_REGISTERS_ = false,
          bool WALK_ = false, bool SPREAD_ = false>
struct Cfg {
    static constexpr bool A_THROUGH_REGISTERS = A_THROUGH_REGISTERS_;
    static constexpr bool WALK = WALK_;  // global addresses walked in registers that live across the loop
    // The tile boundary's work spread over the k-steps (three stages, A through registers): B's copies for tile
    // t + 2 at step 1, A's stores for t + 1 at step 3, A's loads for t + 2 at step 5; the boundary keeps only the
    // wait and the barrier.
    static constexpr bool SPREAD = SPREAD_;
    static_assert(!SPREAD || (STAGES_ == 3 && A_THROUGH_REGISTERS_ && BK_ >= 8), "SPREAD: three stages, A in registers");
    static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int LANES_M = LANES_M_, LANES_N = 32 / LANES_M_, ORDER = ORDER_;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, TM = WM / LANES_M, TN = WN / LANES_N;
    static constexpr int QM = TM / 4, QN = TN / 4, THREADS = WARPS_M * WARPS_N * 32, PAD = 4;
    static constexpr int A_FLOATS = BK * (BM + PAD), B_FLOATS = BK * (BN + PAD);
    static constexpr size_t SMEM = (size_t)STAGES * (A_FLOATS + B_FLOATS) * 4;
    static_assert((BM * BK) % THREADS == 0 && (BN * BK) % (4 * THREADS) == 0, "whole copies");
};

// ORDER 5, shared by both kernels: see exp_kernel's fma.
template <int TM, int TN>
__device__ __forceinline__ void reuse_order_fma(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
#pragma unroll
    for (int quad = 0; quad < TM; quad += 4)
#pragma unroll
        for (int pair = 0; pair < TN; pair += 2)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = quad + ((pair / 2) % 2 ? (r + 2) % 4 : r);
                acc[i][pair] = fmaf(a[i], b[pair], acc[i][pair]);
                acc[i][pair + 1] = fmaf(a[i], b[pair + 1], acc[i][pair + 1]);
            }
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) exp_kernel(int m, int n, int k, const float *__restrict__ a,
                                                          const float *__restrict__ b, float *__restrict__ d) {
    extern __shared__ float4 smem4[];
    float *smem = reinterpret_cast<float *>(smem4);
    constexpr int BM = C::BM, BN = C::BN, BK = C::BK, S = C::STAGES, T = C::THREADS;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int warp_row = (warp / C::WARPS_N) * C::WM, warp_col = (warp % C::WARPS_N) * C::WN;
    const int frag_row = warp_row + (lane / C::LANES_N) * 4, frag_col = warp_col + (lane % C::LANES_N) * 4;
    auto As = [&](int s) { return smem + s * C::A_FLOATS; };                       // [BK][BM + PAD]
    auto Bs = [&](int s) { return smem + S * C::A_FLOATS + s * C::B_FLOATS; };      // [BK][BN + PAD]
    // A: each thread copies (BM * BK / T) elements, consecutive threads along k, transposed into As.
    const float *a_src = a + (size_t)row0 * k;
    const float *b_src = b + col0;
    // WALK: each copy's source address, set once and advanced a tile at a time (tiles are fetched in order).
    constexpr int kBCopies = BN * BK / (4 * T), kAWalks = C::A_THROUGH_REGISTERS ? BM * BK / (4 * T) : 1;
    const float *b_walk[kBCopies], *a_walk[kAWalks];
#pragma unroll
    for (int i = 0; i < kBCopies; ++i) {
        const int e = tid + i * T;
        b_walk[i] = b_src + (size_t)(e / (BN / 4)) * n + (e % (BN / 4)) * 4;
    }
#pragma unroll
    for (int i = 0; i < kAWalks; ++i) {
        const int e = tid + i * T;
        a_walk[i] = a_src + (size_t)(e / (BK / 4)) * k + (e % (BK / 4)) * 4;
    }
    auto issue = [&](int tile, int s) {
        const int k0 = tile * BK;
#pragma unroll
        for (int i = 0; i < BM * BK / T; ++i) {
            if constexpr (C::A_THROUGH_REGISTERS) break;
            const int e = tid + i * T, r = e / BK, p = e % BK;
            cp4(As(s) + p * (BM + C::PAD) + r, a_src + (size_t)r * k + k0 + p);
        }
#pragma unroll
        for (int i = 0; i < BN * BK / (4 * T); ++i) {
            const int e = tid + i * T, p = e / (BN / 4), c = (e % (BN / 4)) * 4;
            if constexpr (C::WALK) {
                cp16(Bs(s) + p * (BN + C::PAD) + c, b_walk[i]);
                b_walk[i] += (size_t)BK * n;
            } else {
                cp16(Bs(s) + p * (BN + C::PAD) + c, b_src + (size_t)(k0 + p) * n + c);
            }
        }
    };
    const int tiles = k / BK;
    constexpr int kAVec = C::A_THROUGH_REGISTERS ? BM * BK / (4 * T) : 1;
    float4 a_regs[kAVec];
    auto a_fetch = [&](int tile) {
#pragma unroll
        for (int i = 0; i < kAVec; ++i) {
            const int e = tid + i * T, r = e / (BK / 4), p = (e % (BK / 4)) * 4;
            if constexpr (C::WALK) {
                a_regs[i] = *reinterpret_cast<const float4 *>(a_walk[i]);
                a_walk[i] += BK;
            } else {
                a_regs[i] = *reinterpret_cast<const float4 *>(a_src + (size_t)r * k + tile * BK + p);
            }
        }
    };
    auto a_store = [&](int s) {
#pragma unroll
        for (int i = 0; i < kAVec; ++i) {
            const int e = tid + i * T, r = e / (BK / 4), p = (e % (BK / 4)) * 4;
            float *dst = As(s) + p * (BM + C::PAD) + r;
            dst[0] = a_regs[i].x; dst[BM + C::PAD] = a_regs[i].y; dst[2 * (BM + C::PAD)] = a_regs[i].z; dst[3 * (BM + C::PAD)] = a_regs[i].w;
        }
    };
    constexpr int kFirstCopies = C::SPREAD ? S - 1 : S;  // SPREAD issues tile t + 2's copies during tile t
#pragma unroll
    for (int s = 0; s < kFirstCopies; ++s) {
        if (s < tiles) issue(s, s);
        commit();
    }
    if constexpr (C::A_THROUGH_REGISTERS) {
        a_fetch(0);
        a_store(0);
        if (1 < tiles) a_fetch(1);
    }
    float acc[C::TM][C::TN] = {};
    float fa[2][C::TM], fb[2][C::TN];
    auto load = [&](int s, int p, int buf) {
#pragma unroll
        for (int q = 0; q < C::QM; ++q)
            *reinterpret_cast<float4 *>(&fa[buf][4 * q]) =
                *reinterpret_cast<const float4 *>(As(s) + p * (BM + C::PAD) + frag_row + q * (C::WM / C::QM));
#pragma unroll
        for (int q = 0; q < C::QN; ++q)
            *reinterpret_cast<float4 *>(&fb[buf][4 * q]) =
                *reinterpret_cast<const float4 *>(Bs(s) + p * (BN + C::PAD) + frag_col + q * (C::WN / C::QN));
    };
    auto fma = [&](int buf) {
        if constexpr (C::ORDER == 0) {
#pragma unroll
            for (int i = 0; i < C::TM; ++i)
#pragma unroll
                for (int j = 0; j < C::TN; ++j) acc[i][j] = fmaf(fa[buf][i], fb[buf][j], acc[i][j]);
        } else if constexpr (C::ORDER == 1) {
#pragma unroll
            for (int j = 0; j < C::TN; ++j)
#pragma unroll
                for (int i = 0; i < C::TM; ++i) acc[i][j] = fmaf(fa[buf][i], fb[buf][j], acc[i][j]);
        } else if constexpr (C::ORDER == 3) {
            // column pairs outer, rows inner in a snake: each row's two FFMAs share a, each pair's rows share b
#pragma unroll
            for (int jj = 0; jj < C::TN; jj += 2)
#pragma unroll
                for (int ii = 0; ii < C::TM; ++ii) {
                    const int i = (jj / 2) % 2 ? C::TM - 1 - ii : ii;
                    acc[i][jj] = fmaf(fa[buf][i], fb[buf][jj], acc[i][jj]);
                    acc[i][jj + 1] = fmaf(fa[buf][i], fb[buf][jj + 1], acc[i][jj + 1]);
                }
        } else if constexpr (C::ORDER == 4) {
            // row pairs outer, columns inner in a snake
#pragma unroll
            for (int ii = 0; ii < C::TM; ii += 2)
#pragma unroll
                for (int jj = 0; jj < C::TN; ++jj) {
                    const int j = (ii / 2) % 2 ? C::TN - 1 - jj : jj;
                    acc[ii][j] = fmaf(fa[buf][ii], fb[buf][j], acc[ii][j]);
                    acc[ii + 1][j] = fmaf(fa[buf][ii + 1], fb[buf][j], acc[ii + 1][j]);
                }
        } else if constexpr (C::ORDER == 5) {
            // quads of rows (one LDS.128 each) outer, column pairs inner; within a pair, row by row, two FFMAs a
            // row, and every other pair walks its quad's rows from the middle (2, 3, 0, 1): each FFMA then reads
            // at most one register that neither of the two before it read in the same operand slot
            reuse_order_fma<C::TM, C::TN>(acc, fa[buf], fb[buf]);
        } else {
            // 2 x 2 blocks walked in a snake: inside a block, and from one pair of rows to the next, each FFMA
            // shares one operand with the one before.
#pragma unroll
            for (int i2 = 0; i2 < C::TM; i2 += 2)
#pragma unroll
                for (int jj = 0; jj < C::TN; jj += 2) {
                    const int j2 = (i2 / 2) % 2 ? C::TN - 2 - jj : jj;
                    acc[i2][j2] = fmaf(fa[buf][i2], fb[buf][j2], acc[i2][j2]);
                    acc[i2][j2 + 1] = fmaf(fa[buf][i2], fb[buf][j2 + 1], acc[i2][j2 + 1]);
                    acc[i2 + 1][j2 + 1] = fmaf(fa[buf][i2 + 1], fb[buf][j2 + 1], acc[i2 + 1][j2 + 1]);
                    acc[i2 + 1][j2] = fmaf(fa[buf][i2 + 1], fb[buf][j2], acc[i2 + 1][j2]);
                }
        }
    };
    wait_pending<kFirstCopies - 1>();
    __syncthreads();
    load(0, 0, 0);
    if constexpr (C::SPREAD) {
        for (int t = 0; t < tiles; ++t) {
            const int s = t % S;
#pragma unroll
            for (int p = 0; p < BK; ++p) {
                if (p + 1 < BK) {
                    load(s, p + 1, (p + 1) % 2);
                } else if (t + 1 < tiles) {
                    wait_pending<1>();  // B of tile t + 1 (tile t + 2's, issued at step 1, may still fly)
                    __syncthreads();    // tile t + 1 visible; every thread done reading stage s
                    load((t + 1) % S, 0, 0);
                }
                // Stage (t + 2) % 3 was last read in tile t - 1 and stage (t + 1) % 3 in tile t - 2: both past a
                // barrier, so their copies and stores need not wait for the end of this tile.
                if (p == 1) {
                    if (t + 2 < tiles) issue(t + 2, (t + 2) % S);
                    commit();
                }
                if (p == 3 && t + 1 < tiles) a_store((t + 1) % S);
                if (p == 5 && t + 2 < tiles) a_fetch(t + 2);
                fma(p % 2);
            }
        }
    } else {
    for (int t = 0; t < tiles; ++t) {
        const int s = t % S;
#pragma unroll
        for (int p = 0; p < BK; ++p) {
            if (p + 1 < BK) {
                load(s, p + 1, (p + 1) % 2);
            } else if (t + 1 < tiles) {
                if constexpr (C::A_THROUGH_REGISTERS) a_store((t + 1) % S);
                wait_pending<S - 2>();
                __syncthreads();  // tile t + 1 visible; every thread done reading stage s
                if (t + S < tiles) issue(t + S, s);
                commit();
                if constexpr (C::A_THROUGH_REGISTERS) { if (t + 2 < tiles) a_fetch(t + 2); }
                load((t + 1) % S, 0, 0);
            }
            fma(p % 2);
        }
    }
    }
#pragma unroll
    for (int i = 0; i < C::TM; ++i) {
        const int row = row0 + frag_row + (i / 4) * (C::WM / C::QM) + i % 4;
#pragma unroll
        for (int q = 0; q < C::QN; ++q)
            *reinterpret_cast<float4 *>(d + (size_t)row * n + col0 + frag_col + q * (C::WN / C::QN)) =
                make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
    }
}

// Order 5 as an OuterProduct for rung 14's kernel (kernels/ladder/14_regbuffer.cu).
struct QuadsThenPairs {
    template <int TM, int TN>
    static __device__ __forceinline__ void add(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
        reuse_order_fma<TM, TN>(acc, a, b);
    }
};

typedef void (*runner)(int, int, int, const float *, const float *, float *, cudaStream_t);
template <class C>
void run(int m, int n, int k, const float *a, const float *b, float *d, cudaStream_t st) {
    static bool once = false;
    if (!once) {
        CK(cudaFuncSetAttribute(exp_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
        once = true;
    }
    exp_kernel<C><<<dim3(n / C::BN, m / C::BM), C::THREADS, C::SMEM, st>>>(m, n, k, a, b, d);
}

static cublasHandle_t handle;
static void run_cublas(int m, int n, int k, const float *a, const float *b, float *d, cudaStream_t st) {
    float one = 1.f, zero = 0.f;
    cublasSetStream(handle, st);
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, n, a, k, &zero, d, n);
}
static void run_rung10(int m, int n, int k, const float *a, const float *b, float *d, cudaStream_t st) {
    fsg_gemm g{};
    g.m = m; g.n = n; g.k = k; g.alpha = 1.f; g.beta = 0.f;
    g.a = a; g.lda = k; g.b = b; g.ldb = n; g.d = d; g.ldd = n;
    CK(fsg_regbuffer_sgemm(&g, st));
}

// Rung 14's kernel as kernels/ladder/14_regbuffer.cu has it (rung 15's file holds the same tile, loads and
// pipeline), with its FFMAs in the order OuterProduct writes them: the lesson has one order, this copy any.
namespace r10 {
using namespace fsg;
using namespace fsg::reuse;
template <typename OuterProduct, typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads, 1) r10_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    extern __shared__ float4 smem[];  // float4: 16-byte alignment for the LDS.128 and cp.async
    auto As = reinterpret_cast<float(*)[kBK][kBM + kPad]>(smem);  // As[stage][p][r] = A(row0 + r, k0 + p)
    auto Bs = reinterpret_cast<float(*)[kBK][kBN + kPad]>(reinterpret_cast<float *>(smem) + 2 * kBK * (kBM + kPad));
    const int tid = threadIdx.x;
    const int frag_row = (tid / kThreadCols) * 4, frag_col = (tid % kThreadCols) * 4;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    // Rung 12's stages: fetch() starts the next tiles' journey, land() completes it.
    TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, A_TRANS, B_TRANS, VEC, Index> tiles{As, Bs, g, m, n, k,
                                                                                         row0, col0, tid};

    float acc[kTM][kTN] = {};
    float reg_m[kFragmentBuffers<Index>][kTM], reg_n[kFragmentBuffers<Index>][kTN];
    pipelined_k_loop<kBK, kFragmentBuffers<Index>>(
        tiles, k,
        [&](int stage, int p, int buf) {
#pragma unroll
            for (int q = 0; q < kQuartersM; ++q) load4(&As[stage][p][q * (kBM / kQuartersM) + frag_row], &reg_m[buf][4 * q]);
#pragma unroll
            for (int q = 0; q < kQuartersN; ++q) load4(&Bs[stage][p][q * (kBN / kQuartersN) + frag_col], &reg_n[buf][4 * q]);
        },
        [&](int buf) { OuterProduct::add(acc, reg_m[buf], reg_n[buf]); });
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + (i / 4) * (kBM / kQuartersM) + frag_row + i % 4;
        if (row >= m) continue;
#pragma unroll
        for (int q = 0; q < kQuartersN; ++q)
            store_d4(g, row, col0 + q * (kBN / kQuartersN) + frag_col, &acc[i][4 * q], vec_out);
    }
}
}  // namespace r10

struct RowByRow {  // rung 14's order
    template <int TM, int TN>
    static __device__ __forceinline__ void add(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
};
struct SnakeOfBlocks {  // rung 15's order
    template <int TM, int TN>
    static __device__ __forceinline__ void add(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
        fsg::reuse::outer_product(acc, a, b);
    }
};

template <typename OuterProduct>
static void run_r10_order(int m, int n, int k, const float *a, const float *b, float *d, cudaStream_t st) {
    fsg_gemm g{};
    g.m = m; g.n = n; g.k = k; g.alpha = 1.f; g.beta = 0.f;
    g.a = a; g.lda = k; g.b = b; g.ldb = n; g.d = d; g.ldd = n;
    // Row-major A and B, aligned, 32-bit indices: the instantiation the sizes timed here run.
    auto kernel = r10::r10_kernel<OuterProduct, int, false, false, true>;
    const dim3 grid((unsigned)fsg::ceil_div(g.n, r10::kBN), (unsigned)fsg::ceil_div(g.m, r10::kBM), 1);
    fsg::launch_with_smem(kernel, grid, r10::kThreads, r10::kSmemBytes, st, g);
    CK(cudaGetLastError());
}

// A variant runs when `only` is null or empty or one of its '|'-separated words is in its name; cuBLAS and rung 14,
// the first two, run always (every ratio is to cuBLAS in the same run, rung 14 is the baseline).
static bool selected(const char *name, const char *only) {
    if (!only || !*only) return true;
    std::string words(only);
    size_t start = 0;
    while (start <= words.size()) {
        const size_t end = std::min(words.find('|', start), words.size());
        if (end > start && strstr(name, words.substr(start, end - start).c_str())) return true;
        start = end + 1;
    }
    return false;
}

struct Variant { const char *name; runner f; };
#define V(NAME, ...) {NAME, run<Cfg<__VA_ARGS__>>}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : nullptr;
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    std::vector<int> sizes = {4096, 8192};
    if (argc > 3) sizes = {atoi(argv[3])};
    cublasCreate(&handle);
    cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);
    std::vector<Variant> vs = {
        {"cublas", run_cublas},
        {"rung10", run_rung10},
        {"rung10 o0", run_r10_order<RowByRow>},       // rung 14 itself, instantiated here
        {"rung10 o2", run_r10_order<SnakeOfBlocks>},  // rung 15
        {"rung10 o5", run_r10_order<QuadsThenPairs>},
        // BM, BN, BK, STAGES, WARPS_M, WARPS_N, LANES_M, ORDER
        V("regA 128x256x16 s2 16x8 o2", 128, 256, 16, 2, 2, 4, 4, 2, true),
        V("regA 128x256x16 s2 16x8 o5", 128, 256, 16, 2, 2, 4, 4, 5, true),
        V("regA 128x256x16 s3 16x8 o5", 128, 256, 16, 3, 2, 4, 4, 5, true),
        V("regA 256x128x16 s2 8x16 o5", 256, 128, 16, 2, 4, 2, 8, 5, true),
        V("regA 256x128x8 s3 8x16 o5", 256, 128, 8, 3, 4, 2, 8, 5, true),
        V("256x128x8 s3 8x16 o5", 256, 128, 8, 3, 4, 2, 8, 5),
        V("regA walk 128x256x16 s2 o2", 128, 256, 16, 2, 2, 4, 4, 2, true, true),
        V("regA spread 128x256x16 o2", 128, 256, 16, 3, 2, 4, 4, 2, true, false, true),
        V("regA spread 128x256x16 o0", 128, 256, 16, 3, 2, 4, 4, 0, true, false, true),
        V("regA spread 128x256x8 o2", 128, 256, 8, 3, 2, 4, 4, 2, true, false, true),
        V("regA walk 128x256x16 s3 o2", 128, 256, 16, 3, 2, 4, 4, 2, true, true),
        V("regA walk 128x256x8 s3 o2", 128, 256, 8, 3, 2, 4, 4, 2, true, true),
        V("regA 128x256x16 s3 16x8 o2", 128, 256, 16, 3, 2, 4, 4, 2, true),
        V("regA 128x256x16 s2 16x8 o3", 128, 256, 16, 2, 2, 4, 4, 3, true),
        V("regA 128x256x16 s2 16x8 o4", 128, 256, 16, 2, 2, 4, 4, 4, true),
        V("regA 128x256x32 s2 16x8 o2", 128, 256, 32, 2, 2, 4, 4, 2, true),
        V("regA 128x256x8 s3 16x8 o2", 128, 256, 8, 3, 2, 4, 4, 2, true),
        V("regA 128x256x8 s2 16x8 o2", 128, 256, 8, 2, 2, 4, 4, 2, true),
        V("regA 256x128x16 s2 8x16 o3", 256, 128, 16, 2, 4, 2, 8, 3, true),
        V("regA 256x128x16 s2 8x16 o2", 256, 128, 16, 2, 4, 2, 8, 2, true),
        V("128x256x16 s2 16x8 o0", 128, 256, 16, 2, 2, 4, 4, 0),
        V("128x256x16 s3 16x8 o0", 128, 256, 16, 3, 2, 4, 4, 0),
        V("128x256x8 s3 16x8 o0", 128, 256, 8, 3, 2, 4, 4, 0),
        V("128x256x8 s4 16x8 o0", 128, 256, 8, 4, 2, 4, 4, 0),
        V("256x128x8 s3 8x16 o0", 256, 128, 8, 3, 4, 2, 8, 0),
        V("256x128x8 s3 16x8 o0", 256, 128, 8, 3, 4, 2, 4, 0),
        V("256x128x16 s3 8x16 o0", 256, 128, 16, 3, 4, 2, 8, 0),
        V("256x128x8 s4 8x16 o0", 256, 128, 8, 4, 4, 2, 8, 0),
        V("256x128x8 s3 8x16 o1", 256, 128, 8, 3, 4, 2, 8, 1),
        V("256x128x8 s3 8x16 o2", 256, 128, 8, 3, 4, 2, 8, 2),
        V("128x256x8 s3 16x8 o2", 128, 256, 8, 3, 2, 4, 4, 2),
        V("128x256x16 s3 16x8 o2", 128, 256, 16, 3, 2, 4, 4, 2),
    };
    cudaStream_t st; CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int size : sizes) {
        const int m = size, n = size, k = size;
        std::vector<float> ha((size_t)m * k), hb((size_t)k * n);
        std::mt19937 rng(size);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (auto &x : ha) x = u(rng);
        for (auto &x : hb) x = u(rng);
        float *da, *db, *dd, *dref;
        CK(cudaMalloc(&da, ha.size() * 4)); CK(cudaMalloc(&db, hb.size() * 4));
        CK(cudaMalloc(&dd, (size_t)m * n * 4)); CK(cudaMalloc(&dref, (size_t)m * n * 4));
        CK(cudaMemcpy(da, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
        run_cublas(m, n, k, da, db, dref, st);
        std::vector<float> ref((size_t)m * n), out((size_t)m * n);
        CK(cudaMemcpy(ref.data(), dref, ref.size() * 4, cudaMemcpyDeviceToHost));
        double cub = 0;
        // Interleaved rounds: each variant timed once per round, so clock drift touches all alike.
        std::vector<std::vector<float>> times(vs.size());
        for (size_t v = 0; v < vs.size(); ++v) {
            if (v > 1 && !selected(vs[v].name, only)) continue;
            CK(cudaMemset(dd, 0xff, (size_t)m * n * 4));  // NaN poison
            vs[v].f(m, n, k, da, db, dd, st);
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            CK(cudaMemcpy(out.data(), dd, out.size() * 4, cudaMemcpyDeviceToHost));
            // The worst relative difference, NaN (an element the kernel did not write) counted as a failure:
            // std::max would drop it.
            double worst = 0;
            for (size_t i = 0; i < out.size(); i += 7) {
                const double e = fabs((double)out[i] - ref[i]) / (fabs(ref[i]) + 1.0);
                if (!(e <= worst)) worst = e;
            }
            if (!(worst < 1e-4)) printf("WRONG %s at %d: %g\n", vs[v].name, size, worst);
            for (int w = 0; w < 2; ++w) vs[v].f(m, n, k, da, db, dd, st);
        }
        for (int r = 0; r < reps; ++r)
            for (size_t v = 0; v < vs.size(); ++v) {
                if (v > 1 && !selected(vs[v].name, only)) continue;
                CK(cudaEventRecord(e0, st));
                vs[v].f(m, n, k, da, db, dd, st);
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
                times[v].push_back(ms);
            }
        for (size_t v = 0; v < vs.size(); ++v) {
            if (times[v].empty()) continue;
            std::sort(times[v].begin(), times[v].end());
            const double ms = times[v][times[v].size() / 2], tf = 2.0 * m * n * (double)k / ms / 1e9;
            if (v == 0) cub = tf;
            printf("%5d  %-26s %8.3f ms  %6.2f TFLOP/s  %.3fx cuBLAS\n", size, vs[v].name, ms, tf, tf / cub);
        }
        fflush(stdout);
        cudaFree(da); cudaFree(db); cudaFree(dd); cudaFree(dref);
    }
    return 0;
}
