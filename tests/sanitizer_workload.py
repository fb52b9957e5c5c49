"""A small workload for compute-sanitizer: every CUDA rung and configuration on odd shapes, with
misaligned views (offset pointers, odd leading dimensions), both layouts and
alpha/beta, on device arrays. Exits non-zero on a wrong result.

    compute-sanitizer --tool memcheck python tests/sanitizer_workload.py [--large | --large-only] [--kernels K ...]

--large adds 4095 x 4097 x 4093 (slow under racecheck: --large-only with --kernels runs it one kernel
at a time). tests/test_sanitizer.py runs every tool.
"""
import gc
import sys

import numpy as np

import fastsgemm
import fastsgemm.testing

LARGE = (4095, 4097, 4093)
# Every kind of block LARGE has, in few blocks: 255 and 257 leave the remainders 4095 and 4097 leave for every
# block tile (32 to 256: full tiles, a last row of tiles 2^j - 1 tall, a last column 1 wide), and K is LARGE's.
# A block's shared-memory traffic depends only on which kind it is and on K, and racecheck checks shared
# memory within blocks, so this is LARGE's racecheck at 1/256 of the work (LARGE itself takes over 9 minutes
# a rung under racecheck).
SAME_BLOCKS_AS_LARGE = (255, 257, 4093)
# Leading dimensions that are multiples of 4 with partial tiles on every side: the row-major view of this one
# takes the paths for 16-byte-aligned matrices (the vector loads of the SIMT rungs among them).
ALIGNED = (130, 68, 260)
SHAPES = [(1, 1, 1), (17, 33, 65), (130, 67, 257), (5, 129, 3), ALIGNED, SAME_BLOCKS_AS_LARGE]


def run(cupy, shapes, only=None):
    """Every CUDA kernel (or those named in `only`) on every shape and view; returns the number of wrong
    results."""
    rng = np.random.default_rng(5)
    failures = 0
    kernels = [(name, k.precision) for k in fastsgemm.kernels() if k.device == "cuda"
               for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs))]
    unknown = sorted(set(only or ()) - {name for name, _ in kernels})
    if unknown:  # a misspelt name must not pass as a clean run of nothing
        raise SystemExit(f"unknown kernels: {', '.join(unknown)}")
    chosen = [kernel for kernel in kernels if only is None or kernel[0] in only]
    print(f"sanitizer workload: {len(chosen)} kernels x {len(shapes)} shapes x 2 views: "
          + " ".join(name for name, _ in chosen))
    for name, precision in chosen:
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
                if not error < fastsgemm.testing.ERROR_BOUND[precision]:
                    failures += 1
                    print(f"FAILED {name} {m}x{n}x{kk} {label}: relative error {error:.2e}")
    cupy.cuda.Device().synchronize()
    return failures


def main():
    import argparse

    import cupy

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large", action="store_true", help=f"add {LARGE[0]}x{LARGE[1]}x{LARGE[2]}")
    parser.add_argument("--large-only", action="store_true", help="that shape alone")
    parser.add_argument("--kernels", nargs="+", default=None, help="these kernels only (default: every CUDA one)")
    args = parser.parse_args()
    shapes = [LARGE] if args.large_only else SHAPES + ([LARGE] if args.large else [])
    failures = run(cupy, shapes, args.kernels)  # every array it made is gone when it returns...
    gc.collect()  # ...including any held only by reference cycles
    cupy.get_default_memory_pool().free_all_blocks()  # CuPy's cached blocks are not leaks of ours
    print(f"sanitizer workload: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
