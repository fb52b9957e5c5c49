"""python -m fastsgemm: show the device, check every rung against float64
NumPy on a few awkward shapes, and time each rung once from the host.

Runs anywhere: without a GPU it checks the cpu rung and says why the rest is
skipped. Exits non-zero if any check fails.
"""
import sys
import time

import numpy as np

import fastsgemm

CHECK_SHAPES = [(1, 1, 1), (17, 33, 65), (127, 131, 137), (500, 3, 700)]
TIMING_SIZE = 1024
TOLERANCE = 1e-5


def relative_error(result, reference):
    return float(np.linalg.norm(result - reference) / np.linalg.norm(reference))


def main() -> int:
    print(f"fastsgemm {fastsgemm.__version__}")
    if fastsgemm.cuda_available():
        info = fastsgemm.device_info()
        major, minor = info["compute_capability"]
        print(
            f"device: {info['name']} (sm_{major}{minor}, {info['sm_count']} SMs, {info['sm_clock_mhz']} MHz, "
            f"FP32 peak {info['fp32_peak_gflops'] / 1000:.1f} TFLOP/s)"
        )
        rungs = fastsgemm.kernels()
    else:
        print(f"device: none usable ({fastsgemm._api._cuda_status()[1]})")
        print("        only the host rung runs; the CUDA rungs are skipped")
        rungs = [k for k in fastsgemm.kernels() if k.device == "cpu"]

    rng = np.random.default_rng(0)
    failures = 0
    print(f"\ncheck against float64 NumPy (relative Frobenius error, must be <= {TOLERANCE:g}):")
    for k in rungs:
        worst = 0.0
        for m, n, kk in CHECK_SHAPES:
            A = rng.standard_normal((m, kk), dtype=np.float32)
            B = rng.standard_normal((kk, n), dtype=np.float32)
            worst = max(worst, relative_error(fastsgemm.sgemm(A, B, kernel=k.name), A.astype(np.float64) @ B))
        ok = worst <= TOLERANCE
        failures += not ok
        print(f"  {k.name:<12} worst {worst:.2e}  {'ok' if ok else 'FAILED'}")

    n = TIMING_SIZE
    A = rng.standard_normal((n, n), dtype=np.float32)
    B = rng.standard_normal((n, n), dtype=np.float32)
    print(f"\none host call at {n}^3, NumPy in and out (GPU rungs include the transfers; median of 5):")
    print(f"  {'kernel':<12} {'ms':>9} {'GFLOP/s':>9}")
    for name, run in [("numpy", lambda: A @ B)] + [(k.name, lambda k=k: fastsgemm.sgemm(A, B, kernel=k.name)) for k in rungs]:
        run()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        ms = float(np.median(times)) * 1e3
        print(f"  {name:<12} {ms:9.2f} {2 * n**3 / ms / 1e6:9.1f}")
    print("\nkernel timings on device memory, with CUDA events and cuBLAS beside them: benchmarks/")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
