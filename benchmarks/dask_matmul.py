"""fastsgemm.dask.matmul against one fastsgemm.sgemm call and against dask.array.matmul, on CuPy chunks, one GPU.

    python benchmarks/dask_matmul.py [--n 32768] [--chunk 8192] [--repeats 3] [--out benchmarks/results/dask-h100.json]

All three compute the same n^3 product of random float32 matrices in one process: the single call on the whole
CuPy matrices, and the two Dask graphs over chunk x chunk blocks of them on the threaded scheduler, persisted (the
blocks stay on the GPU, as a Dask user keeps them). Time is wall clock from submitting to the GPU being done
(cupy synchronize), median of --repeats after a warm-up; each result's first 64 rows are checked against float64.
da.matmul runs cupy.matmul per block pair, which is cuBLAS in FP32, and sums the partial products afterwards.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import cupy
import dask
import dask.array as da
import numpy as np

import fastsgemm
import fastsgemm.dask


def timed(run, repeats):
    """Median seconds of run() to a finished GPU, after one warm-up; and the last result."""
    result = run()
    cupy.cuda.Device().synchronize()
    seconds = []
    for _ in range(repeats):
        del result
        cupy.get_default_memory_pool().free_all_blocks()
        start = time.perf_counter()
        result = run()
        cupy.cuda.Device().synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), seconds, result


def first_rows_error(rows, a, b, count=64):
    """Relative Frobenius error of a result's first rows against float64."""
    reference = a[:count].astype(cupy.float64) @ b.astype(cupy.float64)
    return float(cupy.linalg.norm(rows.astype(cupy.float64) - reference) / cupy.linalg.norm(reference))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=32768)
    parser.add_argument("--chunk", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n, chunk = args.n, args.chunk
    flops = 2.0 * n ** 3

    cupy.random.seed(20261123)
    a = cupy.random.uniform(-1, 1, (n, n), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (n, n), dtype=cupy.float32)
    x = da.from_array(a, chunks=chunk, asarray=False)
    y = da.from_array(b, chunks=chunk, asarray=False)

    def first_rows(blocks):
        return cupy.concatenate([blocks[(0, j)] for j in range(n // chunk)], axis=1)[:64]

    def persisted(z):
        (p,) = dask.persist(z, scheduler="threads")
        return p

    def blocks_of(p):
        return {(i, j): block for (i, j), block in zip(
            [(i, j) for i in range(p.numblocks[0]) for j in range(p.numblocks[1])],
            dask.compute(*p.to_delayed().ravel(), scheduler="sync"))}

    rows = []
    seconds, runs, single = timed(lambda: fastsgemm.sgemm(a, b), args.repeats)
    rows.append({"path": "fastsgemm.sgemm, one call", "kernel": fastsgemm.auto_kernel(n, n, n), "seconds": seconds,
                 "runs": runs, "tflops": flops / seconds / 1e12, "error_first_rows": first_rows_error(single[:64], a, b)})
    del single
    seconds, runs, ours = timed(lambda: persisted(fastsgemm.dask.matmul(x, y)), args.repeats)
    rows.append({"path": "fastsgemm.dask.matmul", "kernel": fastsgemm.auto_kernel(chunk, chunk, chunk),
                 "seconds": seconds, "runs": runs, "tflops": flops / seconds / 1e12,
                 "error_first_rows": first_rows_error(first_rows(blocks_of(ours)), a, b)})
    del ours
    seconds, runs, theirs = timed(lambda: persisted(da.matmul(x, y)), args.repeats)
    rows.append({"path": "dask.array.matmul (cupy.matmul per block, FP32)", "kernel": "cupy.matmul",
                 "seconds": seconds, "runs": runs, "tflops": flops / seconds / 1e12,
                 "error_first_rows": first_rows_error(first_rows(blocks_of(theirs)), a, b)})
    del theirs

    single_s, ours_s, theirs_s = (row["seconds"] for row in rows)
    summary = {"dask_vs_single_call": single_s / ours_s, "dask_vs_da_matmul": theirs_s / ours_s}
    info = fastsgemm.device_info()
    meta = {"device": info["name"], "n": n, "chunk": chunk, "repeats": args.repeats, "scheduler": "threads",
            "dask": dask.__version__, "cupy": cupy.__version__, "fastsgemm": fastsgemm.__version__}
    for row in rows:
        print(f"{row['path']:50s} {row['kernel']:16s} {row['seconds'] * 1e3:9.1f} ms {row['tflops']:7.1f} TFLOP/s "
              f"err {row['error_first_rows']:.1e}")
    print(f"fastsgemm.dask.matmul: {summary['dask_vs_single_call']:.2f}x the single call, "
          f"{summary['dask_vs_da_matmul']:.2f}x da.matmul")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
