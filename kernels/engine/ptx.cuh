/*
 * engine/ptx.cuh: the Hopper (sm_90a) instructions the wgmma rungs (19 tf32,
 * 20 tf32x3, 21 tf32x3_regs) are built from, each wrapped once: wgmma (A from
 * shared memory or registers) and its shared-memory descriptors, mbarriers,
 * bulk and tensor copies, setmaxnreg, the TF32 conversion. Only
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
#ifndef FASTSGEMM_ENGINE_PTX_CUH
#define FASTSGEMM_ENGINE_PTX_CUH

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
        : FSG_WGMMA_ACCUMULATORS_64(d)
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

/* d (+)= A * B for a 64 x 128 x 8 tile with A from registers (rung 21): a
 * thread's a[4] is its fragment of the warpgroup's 64 x 8 A, laid out as
 * mma.sync's m16n8k8 A per warp (warp w takes rows 16 w .. 16 w + 15; lane l
 * holds rows l / 4 and l / 4 + 8 at k = l % 4 and l % 4 + 4:
 * a[0] (r, k), a[1] (r + 8, k), a[2] (r, k + 4), a[3] (r + 8, k + 4)).
 * The instruction runs asynchronously and reads a[] while it runs: the caller
 * keeps them unchanged until its wgmma_wait (touch_registers). */
__device__ __forceinline__ void wgmma_64x128x8_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : FSG_WGMMA_ACCUMULATORS_64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

/* d (+)= A * B for a 64 x 256 x 8 tile (tf32_tma), as one instruction: d[0] holds columns 0-127 and d[1]
 * columns 128-255, each as wgmma_64x128x8 lays them out, so that the 128 accumulators are those of two
 * m64n128 wgmmas side by side. b: 256 rows of B^T from one descriptor (32 atoms of 8 rows). */
__device__ __forceinline__ void wgmma_64x256x8(float (&d)[2][64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
        "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
        "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "
        "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, "
        "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, "
        "%119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1;\n}\n"
        : FSG_WGMMA_ACCUMULATORS_64(d[0]), FSG_WGMMA_ACCUMULATORS_64(d[1])
        : "l"(a), "l"(b), "r"(accumulate));
}

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

/* The same for a 64 x 64 x 8 tile: half the columns, 32 accumulators a thread. */
__device__ __forceinline__ void wgmma_64x64x8_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
/* One wgmma m64nNk8 with A from registers for either width, chosen by the accumulators' count (N / 2 a thread). */
__device__ __forceinline__ void wgmma_64xNx8_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    wgmma_64x128x8_rs(d, a, b, accumulate);
}
__device__ __forceinline__ void wgmma_64xNx8_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    wgmma_64x64x8_rs(d, a, b, accumulate);
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

/* A contiguous copy of `bytes` (a multiple of 16, both addresses 16-byte
 * aligned) from global to shared memory by the copy engine, completing on bar. */
__device__ __forceinline__ void bulk_load(float *dst, const float *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_address(dst)),
                 "l"(src), "r"(bytes), "r"(smem_address(bar))
                 : "memory");
}

/* A box of a 3-D tensor (a tensor map made on the host, passed as a
 * __grid_constant__ kernel parameter) from global to shared memory by the
 * copy engine, at element coordinates (x, y, z), x the contiguous one;
 * elements outside the tensor arrive as zeros. Completes on bar. */
__device__ __forceinline__ void tensor_load_3d(float *dst, const void *map, int x, int y, int z, uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(smem_address(dst)),
        "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_address(bar))
        : "memory");
}

}  // namespace hopper
}  // namespace fsg

#endif  // FASTSGEMM_ENGINE_PTX_CUH
