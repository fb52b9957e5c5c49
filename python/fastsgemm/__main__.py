"""python -m fastsgemm: show the device, say which kernel kernel="auto" runs
at a few sizes and why, check every rung against float64 NumPy on a few
awkward shapes, time the ladder at one size beside cuBLAS, and say where to go
next.

Runs anywhere: without a GPU it checks the cpu rung and says why the rest is
skipped. Exits non-zero if any check fails.
"""
import sys
import time

import numpy as np

import fastsgemm
from fastsgemm._cuda_setup import build_info, runs_on

CHECK_SHAPES = [(1, 1, 1), (17, 33, 65), (127, 131, 137), (500, 3, 700)]
AUTO_SIZES = [64, 512, 2048, 8192]
TIMING_SIZE = 2048


def relative_error(result, reference):
    return float(np.linalg.norm(result - reference) / np.linalg.norm(reference))


def main() -> int:
    print(f"fastsgemm {fastsgemm.__version__}")
    build = build_info()
    if build is not None:
        print(f"built for: {', '.join('sm_' + a for a in build['archs'])}, and PTX of {build['ptx']} "
              f"({build['why']})")
    if fastsgemm.cuda_available():
        info = fastsgemm.device_info()
        major, minor = info["compute_capability"]
        print(
            f"device: {info['name']} (sm_{major}{minor}, {info['sm_count']} SMs, {info['sm_clock_mhz']} MHz, "
            f"FP32 peak {info['fp32_peak_gflops'] / 1000:.1f} TFLOP/s)"
        )
        if build is not None and not runs_on(build, (major, minor)):
            print(f"  this build has no code for sm_{major}{minor}: reinstall with FASTSGEMM_CUDA_ARCHS=native here "
                  "(docs/install.md); the CUDA rungs fail until then")
        rungs = fastsgemm.kernels()
    else:
        print(f"device: none usable ({fastsgemm._api.cuda_status()[1]})")
        print("        only the host rung runs; the CUDA rungs are skipped")
        rungs = [k for k in fastsgemm.kernels() if k.device == "cpu"]

    print('\nkernel="auto" (the default) at a few sizes:')
    if fastsgemm.cuda_available():
        for n in AUTO_SIZES:
            print(f"  {n}^3: {fastsgemm.auto_kernel(n, n, n)}: {fastsgemm.auto_reason(n, n, n)}")
    else:
        print("  every size: cpu, the host rung, since no GPU is usable (with one warning saying so)")

    rng = np.random.default_rng(0)
    failures = 0
    width = max(len(k.name) for k in rungs)
    bounds = fastsgemm._registry.ERROR_BOUND
    print(f"\ncheck against float64 NumPy (relative Frobenius error, must be <= {bounds['fp32']:g}, "
          f"or {bounds['tf32']:g} for the rungs that round to TF32):")
    for k in rungs:
        worst = 0.0
        for m, n, kk in CHECK_SHAPES:
            A = rng.standard_normal((m, kk), dtype=np.float32)
            B = rng.standard_normal((kk, n), dtype=np.float32)
            worst = max(worst, relative_error(fastsgemm.sgemm(A, B, kernel=k.name), A.astype(np.float64) @ B))
        ok = worst <= bounds[k.precision]
        failures += not ok
        print(f"  {k.name:<{width}} worst {worst:.2e}  {'ok' if ok else 'FAILED'}")

    if fastsgemm.cuda_available():
        n = TIMING_SIZE
        print(f"\nthe ladder at {n}^3 on device memory (CUDA events, median of 10, random inputs):")
        print(f"  {'kernel':<{width}} {'ms':>9} {'GFLOP/s':>9} {'% of cuBLAS':>12}")
        rows = [fastsgemm.benchmark(k.name, n, n, n, repeats=10, warmup=2, check=False) for k in rungs if k.device == "cuda"]
        base = next(r for r in rows if r["kernel"] == "cublas")["gflops"]
        for r in rows:
            print(f"  {r['kernel']:<{width}} {r['median_ms']:9.3f} {r['gflops']:9.0f} {100 * r['gflops'] / base:11.1f}%")
    else:
        n = 256
        A = rng.standard_normal((n, n), dtype=np.float32)
        B = rng.standard_normal((n, n), dtype=np.float32)
        cpu = fastsgemm.benchmark("cpu", n, n, n, repeats=10, warmup=2, check=False)
        start = time.perf_counter()
        for _ in range(10):
            A @ B
        numpy_ms = (time.perf_counter() - start) * 100
        print(f"\nthe cpu rung at {n}^3 (median of 10): {cpu['median_ms']:.2f} ms, {cpu['gflops']:.1f} GFLOP/s; "
              f"numpy.matmul (multi-threaded BLAS): {numpy_ms:.2f} ms")
        print("the CUDA rungs need a GPU: none is usable here")
    print("\nnext:")
    print("  a first hour in a notebook: examples/quickstart.ipynb")
    print("  the ladder rung by rung, each idea and the counter that proves it: kernels/ladder/README.md")
    print("  the API, several GPUs, PyTorch and Dask: docs/guide.md")
    print("  time kernels against cuBLAS over sizes: python -m fastsgemm.bench --quick (--help for more)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
