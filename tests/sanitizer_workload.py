"""A small workload for compute-sanitizer: every CUDA rung and configuration on odd shapes, with
misaligned views (offset pointers, odd leading dimensions), both layouts and
alpha/beta, on device arrays. Exits non-zero on a wrong result.

    compute-sanitizer --tool memcheck python tests/sanitizer_workload.py [--large]

--large adds 4095 x 4097 x 4093 (slow under racecheck). tests/test_sanitizer.py runs every tool.
"""
import gc
import sys

import numpy as np

import fastsgemm

SHAPES = [(1, 1, 1), (17, 33, 65), (130, 67, 257), (5, 129, 3)]


def run(cupy, shapes):
    """Every CUDA rung on every shape and view; returns the number of wrong results."""
    rng = np.random.default_rng(5)
    failures = 0
    kernels = [(name, k.precision) for k in fastsgemm.kernels() if k.device == "cuda"
               for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs))]
    for name, precision in kernels:
        for m, n, kk in shapes:
            A = rng.standard_normal((m, kk), dtype=np.float32)
            B = rng.standard_normal((kk, n), dtype=np.float32)
            C = rng.standard_normal((m, n), dtype=np.float32)
            ref = 0.5 * (A.astype(np.float64) @ B) + 2.0 * C
            # Views one element into padded buffers: not 16-byte aligned, leading dimensions odd.
            a_base = cupy.zeros((m + 1, kk + 3), cupy.float32)
            a_base[1:, 1:] = cupy.asarray(np.pad(A, ((0, 0), (0, 2))))
            b_base = cupy.zeros((n + 1, kk + 1), cupy.float32)  # B stored column-major
            b_base[1:, 1:] = cupy.asarray(B.T)
            views = {
                "row-major aligned": (cupy.asarray(A), cupy.asarray(B)),
                "offset and column-major": (a_base[1:, 1 : kk + 1], b_base[1:, 1:].T),
            }
            for label, (a, b) in views.items():
                out = fastsgemm.sgemm(a, b, cupy.asarray(C), alpha=0.5, beta=2.0, kernel=name)
                got = cupy.asnumpy(out)
                error = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                if not error < fastsgemm._api.ERROR_BOUND[precision]:
                    failures += 1
                    print(f"FAILED {name} {m}x{n}x{kk} {label}: relative error {error:.2e}")
    cupy.cuda.Device().synchronize()
    return failures


def main():
    import cupy

    shapes = SHAPES + ([(4095, 4097, 4093)] if "--large" in sys.argv else [])
    failures = run(cupy, shapes)  # every array it made is gone when it returns...
    gc.collect()  # ...including any held only by reference cycles
    cupy.get_default_memory_pool().free_all_blocks()  # CuPy's cached blocks are not leaks of ours
    print(f"sanitizer workload: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
