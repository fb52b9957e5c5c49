// Experiment: sweep the tensor-core rungs' tile shapes (fsg::tensorcore::MmaTiling) on row-major,
// aligned inputs, for both math policies (tf32's RoundOnce, tf32x3's SplitThree). Every
// configuration of one policy sums over k in the same order, so its output must equal the
// shipped configuration's bit for bit; the time is the median of 15 CUDA-event timings after 3
// warm-ups, random inputs.
// (Built for sm_90a because rungs 10 and 11 call their wgmma paths, kernels/tf32_sm90.cu and
// kernels/tf32x3_sm90.cu; the sweep and its references are the mma.sync paths.)
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels benchmarks/experiments/tensorcore_configs.cu \
//        kernels/tf32_sm90.cu kernels/tf32x3_sm90.cu kernels/fill_random.cu -o /tmp/tc && /tmp/tc
#include <cstdio>

#include "../../kernels/10_tf32.cu"
#include "../../kernels/11_tf32x3.cu"
#include "harness.cuh"

using fsg::tensorcore::MmaTiling;
using fsg::tensorcore::mma_sgemm_kernel;

template <typename Cfg, template <typename> class Math>
void run(const char *name, fsg_gemm g, const float *reference, float *scratch) {
    auto kernel = mma_sgemm_kernel<Cfg, Math<Cfg>, int32_t, false, false, true>;
    cudaFuncAttributes attr;
    cudaFuncGetAttributes(&attr, kernel);
    g.d = scratch;
    cudaMemset(scratch, 0xff, sizeof(float) * g.m * g.n);  // NaN: unwritten elements show
    const dim3 grid((unsigned)fsg::ceil_div(g.n, Cfg::kBN), (unsigned)fsg::ceil_div(g.m, Cfg::kBM));
    constexpr size_t smem = Cfg::template smem_bytes<false, false>();
    const float ms = median_ms([&] { fsg::launch_with_smem(kernel, grid, Cfg::kThreads, smem, 0, g); }, 15);
    const size_t differ = count_differences(scratch, reference, g.m * g.n);
    printf("%-40s %5lldx%5lldx%5lld %8.3f ms %7.2f TFLOP/s  regs %3d local %3zu  differing %zu  %s\n", name,
           (long long)g.m, (long long)g.n, (long long)g.k, ms, 2.0 * g.m * g.n * g.k / ms / 1e9, attr.numRegs,
           attr.localSizeBytes, differ, cudaGetErrorString(cudaGetLastError()));
}

int main() {
    using fsg::tf32::RoundOnce;
    using fsg::tf32x3::SplitThree;
    const int64_t shapes[][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {4095, 4097, 4093}};
    for (auto &s : shapes) {
        RowMajorProblem problem(s[0], s[1], s[2]);
        fsg_gemm g = problem.g;
        float *ref1 = problem.reference, *scratch = problem.scratch, *ref3;
        cudaMalloc(&ref3, sizeof(float) * g.m * g.n);
        fsg_tf32_mma_sync_sgemm(&g, 0);  // the references: the shipped mma.sync configurations
        g.d = ref3;
        fsg::tensorcore::launch<fsg::tf32x3::Tiling, SplitThree<fsg::tf32x3::Tiling>>(&g, 0);  // mma.sync path
        cudaDeviceSynchronize();
        run<MmaTiling<128, 128, 32, 2, 4, 3, 1>, RoundOnce>("tf32 128x128x32 w64x32 s3 (shipped)", g, ref1, scratch);
        run<MmaTiling<128, 128, 32, 2, 4, 4, 1>, RoundOnce>("tf32 128x128x32 w64x32 s4", g, ref1, scratch);
        run<MmaTiling<128, 128, 16, 2, 4, 4, 1>, RoundOnce>("tf32 128x128x16 w64x32 s4", g, ref1, scratch);
        run<MmaTiling<128, 128, 32, 2, 2, 3, 1>, RoundOnce>("tf32 128x128x32 w64x64 s3 4 warps", g, ref1, scratch);
        run<MmaTiling<128, 256, 32, 2, 4, 3, 1>, RoundOnce>("tf32 128x256x32 w64x64 s3", g, ref1, scratch);
        run<MmaTiling<256, 128, 32, 4, 2, 3, 1>, RoundOnce>("tf32 256x128x32 w64x64 s3", g, ref1, scratch);
        run<MmaTiling<128, 128, 32, 2, 4, 3, 2>, RoundOnce>("tf32 128x128x32 w64x32 s3 2 blocks", g, ref1, scratch);
        run<MmaTiling<128, 64, 32, 4, 2, 3, 1>, SplitThree>("x3 128x64x32 w32x32 s3 (shipped)", g, ref3, scratch);
        run<MmaTiling<128, 64, 32, 4, 2, 4, 1>, SplitThree>("x3 128x64x32 w32x32 s4", g, ref3, scratch);
        run<MmaTiling<128, 64, 16, 4, 2, 4, 1>, SplitThree>("x3 128x64x16 w32x32 s4", g, ref3, scratch);
        run<MmaTiling<64, 128, 32, 2, 4, 3, 1>, SplitThree>("x3 64x128x32 w32x32 s3", g, ref3, scratch);
        run<MmaTiling<128, 128, 32, 4, 4, 3, 1>, SplitThree>("x3 128x128x32 w32x32 s3 16 warps", g, ref3, scratch);
        run<MmaTiling<128, 128, 16, 4, 4, 4, 1>, SplitThree>("x3 128x128x16 w32x32 s4 16 warps", g, ref3, scratch);
        run<MmaTiling<64, 64, 32, 2, 2, 3, 2>, SplitThree>("x3 64x64x32 w32x32 s3 2 blocks", g, ref3, scratch);
        cudaFree(ref3);
    }
}
