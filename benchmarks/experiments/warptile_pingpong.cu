// Experiment: two changes to rung 9's main loop, alone and together, on row-major aligned inputs,
// with cuBLAS (true FP32) timed in the same run:
//   PINGPONG: the thread's fragments are double-buffered in registers. The fragments of step p + 1
//     are loaded before the FFMAs of step p, and at the last step of a tile the next stage is
//     landed, the barrier passed and its first fragments loaded before the last FFMAs: the
//     shared-memory latency hides behind 64 (or 128) FFMAs instead of being waited for.
//   GROUPED: blocks walk the output in groups of 8 block rows, so the blocks resident at one time
//     share their panels of A and B in L2.
// Every variant sums over k in the same order, so its output must equal the shipped square shape's
// (kSquare, through the real launcher) bit for bit;
// the time is the median of 15 CUDA-event timings after 3 warm-ups, random inputs.
// (Built for sm_90a only because it borrows the grouped walk from hopper.cuh.)
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        benchmarks/experiments/warptile_pingpong.cu kernels/fill_random.cu -lcublas -o /tmp/wp && /tmp/wp
#include <cstdio>

#include <cublas_v2.h>

#include "../../kernels/09_warptile.cu"
#include "../../kernels/hopper.cuh"  // block_tile, the grouped walk over the output
#include "harness.cuh"

using namespace fsg;
using namespace fsg::warptile;

template <typename Cfg, bool PINGPONG, bool GROUPED>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) variant_kernel(fsg_gemm g) {
    using Index = int32_t;
    constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kBK = Cfg::kBK, kPad = Cfg::kPad, kThreads = Cfg::kThreads;
    constexpr int kWM = Cfg::kWM, kWN = Cfg::kWN, kQM = Cfg::kQM, kQN = Cfg::kQN, kTM = Cfg::kTM, kTN = Cfg::kTN;
    extern __shared__ float4 smem[];
    auto As = reinterpret_cast<float(*)[kBK][kBM + kPad]>(smem);
    auto Bs = reinterpret_cast<float(*)[kBK][kBN + kPad]>(reinterpret_cast<float *>(smem) + 2 * kBK * (kBM + kPad));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / Cfg::kWarpsN) * kWM, warp_col = (warp % Cfg::kWarpsN) * kWN;
    const int frag_row = warp_row + (lane / Cfg::kLanesN) * 4, frag_col = warp_col + (lane % Cfg::kLanesN) * 4;
    int tile_m = blockIdx.y, tile_n = blockIdx.x;
    if constexpr (GROUPED) fsg::hopper::block_tile<kBM, kBN, 8>(g, tile_m, tile_n);
    const Index row0 = (Index)tile_m * kBM, col0 = (Index)tile_n * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, false, false, true, Index> tiles{As, Bs, g, m, n, k, row0, col0, tid};

    float acc[kTM][kTN] = {};
    float reg_m[PINGPONG ? 2 : 1][kTM], reg_n[PINGPONG ? 2 : 1][kTN];
    auto load_fragments = [&](int stage, int p, int buf) {
#pragma unroll
        for (int q = 0; q < kQM; ++q) load4(&As[stage][p][frag_row + q * (kWM / kQM)], &reg_m[buf][4 * q]);
#pragma unroll
        for (int q = 0; q < kQN; ++q) load4(&Bs[stage][p][frag_col + q * (kWN / kQN)], &reg_n[buf][4 * q]);
    };
    auto outer_product = [&](int buf) {
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
            for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[buf][i] * reg_n[buf][j];
    };
    const Index steps = (k + kBK - 1) / kBK;
    if (steps > 0) {
        tiles.fetch(0, 0);
        tiles.land(0);
    }
    __syncthreads();
    if constexpr (PINGPONG) {
        if (steps > 0) load_fragments(0, 0, 0);
        for (Index t = 0; t < steps; ++t) {
            const int stage = (int)(t & 1);
            if (t + 1 < steps) tiles.fetch((t + 1) * kBK, stage ^ 1);
#pragma unroll
            for (int p = 0; p < kBK; ++p) {
                if (p + 1 < kBK) {
                    load_fragments(stage, p + 1, (p + 1) % 2);
                } else if (t + 1 < steps) {
                    tiles.land(stage ^ 1);
                    __syncthreads();
                    load_fragments(stage ^ 1, 0, 0);  // kBK is even: step 0 uses buffer 0
                }
                outer_product(p % 2);
            }
        }
    } else {
        for (Index t = 0; t < steps; ++t) {
            const int stage = (int)(t & 1);
            if (t + 1 < steps) tiles.fetch((t + 1) * kBK, stage ^ 1);
#pragma unroll
            for (int p = 0; p < kBK; ++p) {
                load_fragments(stage, p, 0);
                outer_product(0);
            }
            if (t + 1 < steps) tiles.land(stage ^ 1);
            __syncthreads();
        }
    }
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + frag_row + (i / 4) * (kWM / kQM) + i % 4;
        if (row >= m) continue;
#pragma unroll
        for (int q = 0; q < kQN; ++q) store_d4(g, row, col0 + frag_col + q * (kWN / kQN), &acc[i][4 * q], vec_out);
    }
}

template <typename Cfg, bool PINGPONG, bool GROUPED>
void run(const char *name, fsg_gemm g, const float *reference, float *scratch, float cublas_ms) {
    auto kernel = variant_kernel<Cfg, PINGPONG, GROUPED>;
    cudaFuncAttributes attr;
    cudaFuncGetAttributes(&attr, kernel);
    g.d = scratch;
    cudaMemset(scratch, 0xff, sizeof(float) * g.m * g.n);  // NaN: unwritten elements show
    const unsigned tiles_m = (unsigned)ceil_div(g.m, Cfg::kBM), tiles_n = (unsigned)ceil_div(g.n, Cfg::kBN);
    const dim3 grid = GROUPED ? dim3(tiles_m * tiles_n) : dim3(tiles_n, tiles_m);
    const float ms = median_ms([&] { launch_with_smem(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, 0, g); }, 15);
    const size_t differ = count_differences(scratch, reference, g.m * g.n);
    printf("%-46s %5lldx%5lldx%5lld %7.3f ms %6.2f TFLOP/s %.3fx cuBLAS  regs %3d local %3zu  differing %zu  %s\n",
           name, (long long)g.m, (long long)g.n, (long long)g.k, ms, 2.0 * g.m * g.n * g.k / ms / 1e9,
           cublas_ms / ms, attr.numRegs, attr.localSizeBytes, differ, cudaGetErrorString(cudaGetLastError()));
}

int main() {
    const int64_t shapes[][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {4095, 4097, 4093}};
    cublasHandle_t handle;
    cublasCreate(&handle);
    cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);  // true FP32, no TF32
    for (auto &s : shapes) {
        RowMajorProblem problem(s[0], s[1], s[2]);
        const fsg_gemm &g = problem.g;
        const int64_t m = g.m, n = g.n, k = g.k;
        float *ref = problem.reference, *scratch = problem.scratch;
        const float one = 1.0f, zero = 0.0f;
        // Row-major D = A B is column-major D^T = B^T A^T.
        const float cublas_ms = median_ms([&] {
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, g.b, (int)g.ldb, g.a, (int)g.lda,
                        &zero, scratch, (int)g.ldd);
        }, 15);
        printf("%-46s %5lldx%5lldx%5lld %7.3f ms %6.2f TFLOP/s\n", "cuBLAS FP32 (pedantic)", (long long)m, (long long)n,
               (long long)k, cublas_ms, 2.0 * m * n * k / cublas_ms / 1e9);
        launch<kSquare>(&g, 0);  // the reference: the 128 x 128 shape through the real launcher
        cudaDeviceSynchronize();
        using B = kSquare;
        using G = WarpTiling<128, 256, 16, 2, 4, 4, 8, 1>;
        using M = WarpTiling<128, 256, 32, 2, 4, 4, 8, 1>;
        using H = WarpTiling<256, 128, 16, 4, 2, 8, 4, 1>;
        using O = WarpTiling<128, 128, 16, 4, 2, 4, 8, 1>;
        run<B, false, false>("B 128x128x16 t8x8 2/SM", g, ref, scratch, cublas_ms);
        run<B, true, false>("B pingpong", g, ref, scratch, cublas_ms);
        run<B, false, true>("B grouped", g, ref, scratch, cublas_ms);
        run<B, true, true>("B pingpong grouped", g, ref, scratch, cublas_ms);
        run<O, true, false>("O 128x128x16 t8x8 1/SM pingpong", g, ref, scratch, cublas_ms);
        run<G, false, false>("G 128x256x16 t16x8 1/SM", g, ref, scratch, cublas_ms);
        run<G, true, false>("G pingpong", g, ref, scratch, cublas_ms);
        run<G, true, true>("G pingpong grouped", g, ref, scratch, cublas_ms);
        run<M, false, false>("M 128x256x32 t16x8 1/SM", g, ref, scratch, cublas_ms);
        run<M, true, false>("M pingpong", g, ref, scratch, cublas_ms);
        run<H, true, false>("H 256x128x16 t8x16 1/SM pingpong", g, ref, scratch, cublas_ms);
    }
    cublasDestroy(handle);
}
