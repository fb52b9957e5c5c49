"""fastsgemm.dask.matmul measured three ways, each in one process on the threaded scheduler.

    python benchmarks/dask_matmul.py one-gpu     [--n 32768] [--chunk 8192] [--out results/dask-h100.json]
    python benchmarks/dask_matmul.py gpus        [--n 49152] [--chunk 8192] [--out results/dask-gpus-h200x2.json]
    python benchmarks/dask_matmul.py out-of-core [--n 32768] [--chunk 8192] [--out results/dask-out-of-core-h100.json]
    python benchmarks/dask_matmul.py plot        [--out results/dask-gpus-h200x2.png]

one-gpu: CuPy chunks of two random n x n matrices on one GPU. fastsgemm.dask.matmul against one fastsgemm.sgemm
call on the whole matrices and against dask.array.matmul on the same chunks (cupy.matmul per block pair, cuBLAS
FP32, partial products summed afterwards).

gpus: the same product over CuPy chunks that all live on GPU 0, computed by fastsgemm.dask.matmul with its blocks
on GPU 0 alone, then spread over every GPU (chunks moved to GPU 1 by Dask tasks, peer to peer).

out-of-core: NumPy chunks, with fastsgemm's device memory limit set to a quarter of A, B and C together. Reports
TFLOP/s, fastsgemm's counted peak and the GPU's sampled peak (cudaMemGetInfo every 2 ms, above what the process
held before), and the copies: the bytes the graph moves, the time the tasks spent in them (a second run, each copy
timed after the GPU's earlier work has finished), and the floor those bytes would take at the pinned-memory PCIe
rate measured in the same run.

Time is wall clock from submitting the graph to every GPU being done, median of --repeats after a warm-up; each
result's first 64 rows are checked against float64.
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import numpy as np


def timed(run, repeats, finish):
    """Median seconds of run() to finish(), after one warm-up; the runs; and the last result."""
    result = run()
    finish()
    seconds = []
    for _ in range(repeats):
        del result
        start = time.perf_counter()
        result = run()
        finish()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), seconds, result


def meta_of(args, **extra):
    import dask

    import fastsgemm

    info = fastsgemm.device_info(0)
    return {"device": info["name"], "gpus": fastsgemm.device_count(), "n": args.n, "chunk": args.chunk,
            "repeats": args.repeats, "scheduler": "threads", "dask": dask.__version__,
            "fastsgemm": fastsgemm.__version__, **extra}


def device_inputs(n, seed=20261123):
    import cupy

    cupy.random.seed(seed)
    a = cupy.random.uniform(-1, 1, (n, n), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (n, n), dtype=cupy.float32)
    return a, b


def first_rows_error(rows, a, b):
    """Relative Frobenius error of a result's first rows (CuPy or NumPy) against float64, on the current GPU."""
    import cupy

    count = rows.shape[0]
    reference = cupy.asarray(a[:count], dtype=cupy.float64) @ cupy.asarray(b, dtype=cupy.float64)
    return float(cupy.linalg.norm(cupy.asarray(rows, dtype=cupy.float64) - reference) / cupy.linalg.norm(reference))


def blocks_of(array):
    """The blocks of a persisted dask array, by index, where they were made (not joined)."""
    import dask

    indices = [(i, j) for i in range(array.numblocks[0]) for j in range(array.numblocks[1])]
    return dict(zip(indices, dask.compute(*array.to_delayed().ravel(), scheduler="sync")))


def first_block_rows(blocks, columns, count=64):
    import cupy

    with cupy.cuda.Device(0):
        return cupy.concatenate([cupy.asarray(blocks[(0, j)][:count]) for j in range(columns)], axis=1)


def synchronize_all():
    import cupy

    for d in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(d):
            cupy.cuda.Device(d).synchronize()


def persisted(z):
    import dask

    (p,) = dask.persist(z, scheduler="threads")
    return p


def one_gpu(args):
    import cupy
    import dask.array as da

    import fastsgemm
    import fastsgemm.dask

    n, chunk, flops = args.n, args.chunk, 2.0 * args.n ** 3
    a, b = device_inputs(n)
    x, y = da.from_array(a, chunks=chunk, asarray=False), da.from_array(b, chunks=chunk, asarray=False)
    columns = n // chunk
    rows = []

    def free_and_sync():
        cupy.cuda.Device().synchronize()

    seconds, runs, single = timed(lambda: fastsgemm.sgemm(a, b), args.repeats, free_and_sync)
    rows.append({"path": "fastsgemm.sgemm, one call", "kernel": fastsgemm.auto_kernel(n, n, n), "seconds": seconds,
                 "runs": runs, "tflops": flops / seconds / 1e12, "error_first_rows": first_rows_error(single[:64], a, b)})
    del single
    seconds, runs, ours = timed(lambda: persisted(fastsgemm.dask.matmul(x, y, devices=[0])), args.repeats,
                                free_and_sync)
    rows.append({"path": "fastsgemm.dask.matmul", "kernel": fastsgemm.auto_kernel(chunk, chunk, chunk),
                 "seconds": seconds, "runs": runs, "tflops": flops / seconds / 1e12,
                 "error_first_rows": first_rows_error(first_block_rows(blocks_of(ours), columns), a, b)})
    del ours
    seconds, runs, theirs = timed(lambda: persisted(da.matmul(x, y)), args.repeats, free_and_sync)
    rows.append({"path": "dask.array.matmul (cupy.matmul per block, FP32)", "kernel": "cupy.matmul",
                 "seconds": seconds, "runs": runs, "tflops": flops / seconds / 1e12,
                 "error_first_rows": first_rows_error(first_block_rows(blocks_of(theirs), columns), a, b)})
    del theirs
    single_s, ours_s, theirs_s = (row["seconds"] for row in rows)
    summary = {"dask_vs_single_call": single_s / ours_s, "dask_vs_da_matmul": theirs_s / ours_s}
    for row in rows:
        print(f"{row['path']:50s} {row['kernel']:16s} {row['seconds'] * 1e3:9.1f} ms {row['tflops']:7.1f} TFLOP/s "
              f"err {row['error_first_rows']:.1e}")
    print(f"fastsgemm.dask.matmul: {summary['dask_vs_single_call']:.2f}x the single call, "
          f"{summary['dask_vs_da_matmul']:.2f}x da.matmul")
    return {"meta": meta_of(args, cupy=cupy.__version__), "rows": rows, "summary": summary}


def gpus(args):
    import cupy
    import dask.array as da

    import fastsgemm
    import fastsgemm.dask

    n, chunk, flops = args.n, args.chunk, 2.0 * args.n ** 3
    count = fastsgemm.device_count()
    with cupy.cuda.Device(0):
        a, b = device_inputs(n)
    x, y = da.from_array(a, chunks=chunk, asarray=False), da.from_array(b, chunks=chunk, asarray=False)
    columns = n // chunk
    rows = []
    for used in range(1, count + 1):
        devices = list(range(used))
        seconds, runs, z = timed(lambda: persisted(fastsgemm.dask.matmul(x, y, devices=devices)), args.repeats,
                                 synchronize_all)
        blocks = blocks_of(z)
        on = sorted({block.device.id for block in blocks.values()})
        rows.append({"gpus": used, "devices": devices, "blocks_on": on, "seconds": seconds, "runs": runs,
                     "tflops": flops / seconds / 1e12,
                     "error_first_rows": first_rows_error(first_block_rows(blocks, columns), a, b)})
        del z, blocks
        print(f"{used} GPU(s) {devices}: {seconds * 1e3:9.1f} ms {rows[-1]['tflops']:7.1f} TFLOP/s "
              f"(blocks on {on}) err {rows[-1]['error_first_rows']:.1e}")
    summary = {f"{row['gpus']}_gpus_vs_1": rows[0]["seconds"] / row["seconds"] for row in rows[1:]}
    print(summary)
    return {"meta": meta_of(args, cupy=cupy.__version__, kernel=fastsgemm.auto_kernel(chunk, chunk, chunk),
                            inputs="CuPy chunks, all on GPU 0"), "rows": rows, "summary": summary}


class MemorySampler:
    """The most device memory in use (cudaMemGetInfo, every 2 ms) above what was in use when it started."""

    def __init__(self, device=0):
        import cupy

        self.device, self.runtime = device, cupy.cuda.runtime
        with cupy.cuda.Device(device):
            free, total = self.runtime.memGetInfo()
        self.baseline, self.most = total - free, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self):
        import cupy

        with cupy.cuda.Device(self.device):
            while not self.done.is_set():
                free, total = self.runtime.memGetInfo()
                self.most = max(self.most, total - free - self.baseline)
                time.sleep(0.002)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def pinned_pcie_rate(nbytes=1 << 30, repeats=5):
    """Bytes per second of cudaMemcpy between pinned host memory and GPU 0, each way (median)."""
    import cupy

    pinned = cupy.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(pinned, dtype=np.uint8, count=nbytes)
    device = cupy.empty(nbytes, dtype=cupy.uint8)
    rates = {}
    for direction in ("to_gpu", "to_host"):
        seconds = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            if direction == "to_gpu":
                device.set(host)
            else:
                device.get(out=host)
            cupy.cuda.Device().synchronize()
            seconds.append(time.perf_counter() - start)
        rates[direction] = nbytes / statistics.median(seconds[1:])
    return rates


def out_of_core(args):
    import cupy
    import dask.array as da

    import fastsgemm
    import fastsgemm.dask

    n, chunk, flops = args.n, args.chunk, 2.0 * args.n ** 3
    with cupy.cuda.Device(0):
        a_gpu, b_gpu = device_inputs(n)
        a, b = a_gpu.get(), b_gpu.get()
        reference_rows = a_gpu[:64].astype(cupy.float64) @ b_gpu.astype(cupy.float64)
        del a_gpu, b_gpu
        cupy.get_default_memory_pool().free_all_blocks()
    budget = (a.nbytes + b.nbytes + 4 * n * n) // 4
    rates = pinned_pcie_rate()
    fastsgemm.set_device_memory_limit(budget, device=0)
    x, y = da.from_array(a, chunks=chunk), da.from_array(b, chunks=chunk)
    blocks = n // chunk
    bytes_up = (a.nbytes + b.nbytes) * blocks  # each block reads its row of x and its column of y
    bytes_down = 4 * n * n
    floor = bytes_up / rates["to_gpu"] + bytes_down / rates["to_host"]

    def run():
        return fastsgemm.dask.matmul(x, y, devices=[0]).compute(scheduler="threads")

    fastsgemm.reset_device_memory_peak(0)
    with MemorySampler(0) as sampler:
        seconds, runs, result = timed(run, args.repeats, lambda: None)
    counted_peak = fastsgemm.device_memory(0)["peak"]
    error = float(cupy.linalg.norm(cupy.asarray(result[:64], dtype=cupy.float64) - reference_rows)
                  / cupy.linalg.norm(reference_rows))
    del result

    # A second run with every copy timed on its own: the GPU's earlier work is waited for first (the copies share
    # its stream with the products), so the time is the copy's alone.
    copy_seconds = [0.0]
    original_copy, original_numpy = fastsgemm.dask._sgemm.copy, fastsgemm.DeviceArray.numpy

    def timed_copy(copy):
        def wrapper(*a, **k):
            cupy.cuda.runtime.deviceSynchronize()
            start = time.perf_counter()
            value = copy(*a, **k)
            copy_seconds[0] += time.perf_counter() - start
            return value
        return wrapper

    class TimedCopies:  # the extension module as fastsgemm.dask sees it, with copy() timed
        def __getattr__(self, name):
            return timed_copy(original_copy) if name == "copy" else getattr(fastsgemm._sgemm, name)

    fastsgemm.dask._sgemm = TimedCopies()
    fastsgemm.DeviceArray.numpy = timed_copy(original_numpy)
    try:
        start = time.perf_counter()
        run()
        instrumented = time.perf_counter() - start
    finally:
        fastsgemm.dask._sgemm, fastsgemm.DeviceArray.numpy = fastsgemm._sgemm, original_numpy
    fastsgemm.set_device_memory_limit(None)
    report = {"budget_bytes": budget, "operands_bytes": a.nbytes + b.nbytes + 4 * n * n, "seconds": seconds,
              "runs": runs, "tflops": flops / seconds / 1e12, "error_first_rows": error,
              "peak_counted_bytes": counted_peak, "peak_sampled_bytes": sampler.most,
              "bytes_to_gpu": bytes_up, "bytes_to_host": bytes_down,
              "pinned_pcie_to_gpu_bytes_per_s": rates["to_gpu"], "pinned_pcie_to_host_bytes_per_s": rates["to_host"],
              "copy_floor_seconds": floor, "instrumented_seconds": instrumented, "copy_seconds": copy_seconds[0],
              "copy_rate_bytes_per_s": (bytes_up + bytes_down) / copy_seconds[0]}
    print(f"out of core {n}^3, chunks {chunk}, budget {budget / 1e9:.2f} GB of {report['operands_bytes'] / 1e9:.2f}: "
          f"{seconds * 1e3:.0f} ms, {report['tflops']:.1f} TFLOP/s, err {error:.1e}")
    print(f"  peak counted {counted_peak / 1e9:.3f} GB, sampled {sampler.most / 1e9:.3f} GB")
    print(f"  copies: {(bytes_up + bytes_down) / 1e9:.1f} GB, {copy_seconds[0] * 1e3:.0f} ms of {instrumented * 1e3:.0f}"
          f" in the timed run ({report['copy_rate_bytes_per_s'] / 1e9:.1f} GB/s); floor at pinned PCIe "
          f"({rates['to_gpu'] / 1e9:.1f} / {rates['to_host'] / 1e9:.1f} GB/s): {floor * 1e3:.0f} ms")
    return {"meta": meta_of(args, kernel=fastsgemm.auto_kernel(chunk, chunk, chunk), inputs="NumPy chunks"),
            "report": report}


def plot(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(args.source) as f:
        data = json.load(f)
    rows = data["rows"]
    counts = [row["gpus"] for row in rows]
    figure, axes = plt.subplots(figsize=(5, 3.6))
    axes.plot(counts, [row["tflops"] for row in rows], "o-", label="fastsgemm.dask.matmul (measured)")
    axes.plot(counts, [rows[0]["tflops"] * c for c in counts], "--", color="grey", label="perfect scaling")
    axes.set_xticks(counts)
    axes.set_xlabel("GPUs")
    axes.set_ylabel("TFLOP/s")
    axes.set_title(f"{data['meta']['n']}^3 FP32-accurate, {data['meta']['device']}", fontsize=9)
    axes.legend(fontsize=8)
    axes.set_ylim(0, None)
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["one-gpu", "gpus", "out-of-core", "plot"])
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--chunk", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--source", default="benchmarks/results/dask-gpus-h200x2.json", help="plot: the gpus JSON")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.mode == "plot":
        args.out = args.out or "benchmarks/results/dask-gpus-h200x2.png"
        return plot(args)
    args.n = args.n or {"one-gpu": 32768, "gpus": 49152, "out-of-core": 32768}[args.mode]
    result = {"one-gpu": one_gpu, "gpus": gpus, "out-of-core": out_of_core}[args.mode](args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
