// Experiment: sweep rung 9's tile shapes (fsg::warptile::WarpTiling) on row-major, aligned inputs.
// Each configuration's output must equal the default's bit for bit (all sum over k in the same
// order); its time is the median of 15 CUDA-event timings after 3 warm-ups, random inputs.
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels benchmarks/experiments/warptile_configs.cu \
//        kernels/fill_random.cu -o /tmp/wc && /tmp/wc
#include <cstdio>

#include "../../kernels/09_warptile.cu"
#include "harness.cuh"

using namespace fsg::warptile;

template <typename Cfg>
void run(const char *name, fsg_gemm g, float *reference, float *scratch) {
    auto kernel = warptile_sgemm_kernel<Cfg, int32_t, false, false, true>;
    cudaFuncAttributes attr;
    cudaFuncGetAttributes(&attr, kernel);
    g.d = scratch;
    cudaMemset(scratch, 0xff, sizeof(float) * g.m * g.n);  // NaN: unwritten elements show
    const dim3 grid((unsigned)fsg::ceil_div(g.n, Cfg::kBN), (unsigned)fsg::ceil_div(g.m, Cfg::kBM));
    const float ms = median_ms([&] { fsg::launch_with_smem(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, 0, g); }, 15);
    const size_t differ = count_differences(scratch, reference, g.m * g.n);
    printf("%-44s %5lldx%5lldx%5lld %8.3f ms %7.2f TFLOP/s  regs %3d local %3zu  differing %zu  %s\n", name,
           (long long)g.m, (long long)g.n, (long long)g.k, ms, 2.0 * g.m * g.n * g.k / ms / 1e9, attr.numRegs,
           attr.localSizeBytes, differ, cudaGetErrorString(cudaGetLastError()));
}

int main() {
    const int64_t shapes[][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {4095, 4097, 4093}};
    for (auto &s : shapes) {
        RowMajorProblem problem(s[0], s[1], s[2]);
        const fsg_gemm &g = problem.g;
        float *ref = problem.reference, *scratch = problem.scratch;
        launch<kSquare>(&g, 0);  // the reference: the 128 x 128 shape through the real launcher
        cudaDeviceSynchronize();
        run<WarpTiling<128, 128, 8, 4, 2, 4, 8, 2>>("A 128x128x8 w32x64 l4x8 t8x8", g, ref, scratch);
        run<WarpTiling<128, 128, 16, 4, 2, 4, 8, 2>>("B 128x128x16 w32x64 l4x8 t8x8 (square)", g, ref, scratch);
        run<WarpTiling<128, 128, 8, 2, 4, 8, 4, 2>>("C 128x128x8 w64x32 l8x4 t8x8", g, ref, scratch);
        run<WarpTiling<128, 128, 16, 2, 4, 8, 4, 2>>("D 128x128x16 w64x32 l8x4 t8x8", g, ref, scratch);
        run<WarpTiling<128, 256, 8, 2, 4, 4, 8, 1>>("E 128x256x8 w64x64 l4x8 t16x8", g, ref, scratch);
        run<WarpTiling<256, 128, 8, 4, 2, 8, 4, 1>>("F 256x128x8 w64x64 l8x4 t8x16", g, ref, scratch);
        run<WarpTiling<128, 256, 16, 2, 4, 4, 8, 1>>("G 128x256x16 w64x64 l4x8 t16x8", g, ref, scratch);
        run<WarpTiling<256, 128, 16, 4, 2, 8, 4, 1>>("H 256x128x16 w64x64 l8x4 t8x16", g, ref, scratch);
        run<WarpTiling<128, 128, 8, 4, 2, 4, 8, 1>>("I 128x128x8 w32x64 l4x8 t8x8, 1 block/SM", g, ref, scratch);
        run<WarpTiling<128, 128, 8, 2, 2, 8, 4, 1>>("J 128x128x8 4 warps w64x64 l8x4 t8x16", g, ref, scratch);
        run<WarpTiling<64, 128, 16, 2, 4, 4, 8, 3>>("K 64x128x16 w32x32 l4x8 t8x4, 3 blocks/SM", g, ref, scratch);
        run<WarpTiling<128, 128, 32, 4, 2, 4, 8, 2>>("L 128x128x32 w32x64 l4x8 t8x8", g, ref, scratch);
        run<WarpTiling<128, 256, 32, 2, 4, 4, 8, 1>>("M 128x256x32 w64x64 l4x8 t16x8", g, ref, scratch);
        run<WarpTiling<128, 128, 16, 4, 2, 4, 8, 1>>("O 128x128x16 w32x64 l4x8 t8x8, 1 block/SM", g, ref, scratch);
        run<WarpTiling<256, 128, 32, 4, 2, 8, 4, 1>>("P 256x128x32 w64x64 l8x4 t8x16", g, ref, scratch);
    }
}
