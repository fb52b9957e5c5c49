"""python -m fastsgemm.bench: time the ladder against cuBLAS over sizes.

    python -m fastsgemm.bench                       # square 128 .. 16384, every rung
    python -m fastsgemm.bench --quick               # three shapes, under a minute
    python -m fastsgemm.bench --sizes 4096 8192 4095x4097x4093 --kernels naive tile2d
    python -m fastsgemm.bench --out benchmarks/results/h100
    python -m fastsgemm.bench --end-to-end          # whole Python calls, beside NumPy, CuPy, torch
    python -m fastsgemm.bench --overhead            # per-call wall time, 64^3 .. 1024^3, beside torch and CuPy

Every row is checked once against cuBLAS; cuBLAS (true FP32) is always timed
in the same run and each rung's ratio to it is reported. kernel="auto" is
timed too (unless --kernels leaves it out), and the run ends with what it
picked at each shape against the fastest FP32-accurate rung measured. The SM clock is
sampled through NVML while each row is timed (FFMA-dense kernels may run below
the maximum clock), and the FP32 peak at that clock is reported beside it.
Results go to <out>.json and <out>.csv with the GPU, driver, CUDA and git commit.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

import fastsgemm
from fastsgemm._registry import REGISTRY, parse_kernel

# Rungs too slow to time at every size: the largest M*N*K each is timed at (the table says so).
SLOW_RUNG_LIMIT = {"cpu": 512**3, "naive": 4096**3, "coalesced": 8192**3, "smem": 8192**3}
DEFAULT_SIZES = [[n] * 3 for n in (128, 256, 512, 1024, 2048, 4096, 8192, 16384)]
QUICK_SIZES = [[1024] * 3, [4096] * 3, [4095, 4097, 4093]]  # under a minute on an H100, all rungs


def progress(done, total, label):
    """A one-line progress bar on stderr (redrawn in place on a terminal)."""
    width = 30
    filled = width * done // max(total, 1)
    end = "\n" if done == total or not sys.stderr.isatty() else ""
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40}", end=end, file=sys.stderr, flush=True)


# Arguments are checked as argparse reads them (these types) or right after (check_arguments): a mistake gives
# usage and a one-line error with exit status 2, before any GPU work, on machines without a GPU too.


def parse_shape(text):
    """--sizes: N (square) or MxNxK, each a positive integer."""
    parts = text.lower().split("x")
    if len(parts) not in (1, 3) or not all(re.fullmatch("[0-9]+", p) for p in parts):
        raise argparse.ArgumentTypeError(f"a size is N or MxNxK in positive integers, got {text!r}")
    dims = [int(p) for p in parts]
    if min(dims) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1 in every dimension, got {text!r}")
    return dims * 3 if len(dims) == 1 else dims


def integer_at_least(least):
    """An argparse type: an integer >= least."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {least}, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}, got {text!r}")
        return value

    return parse


def kernel_name(text):
    """--kernels: a rung, "rung:config" or "auto", as fastsgemm.sgemm takes it."""
    try:
        parse_kernel(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def check_arguments(parser, args):
    """What no single argument's type can check: combinations, and where --out would be written."""
    if args.overhead or args.end_to_end:
        mode = "--overhead" if args.overhead else "--end-to-end"
        for name in args.kernels or []:
            choice = parse_kernel(name)
            if choice is not None and REGISTRY[choice.rung].device != "cuda":
                parser.error(f"argument --kernels: {name!r} runs on the host and {mode} times it on device arrays; "
                             f"leave it out or time it without {mode}")
    if args.out is not None:
        if args.out.name in ("", ".."):
            parser.error(f"argument --out: {str(args.out)!r} names no file (results go to <out>.json and <out>.csv)")
        for suffix in (".json", ".csv"):
            if args.out.with_suffix(suffix).is_dir():
                parser.error(f"argument --out: {str(args.out.with_suffix(suffix))!r} is a directory")
        for parent in (args.out.parent, *args.out.parent.parents):
            if parent.exists():
                if not parent.is_dir():
                    parser.error(f"argument --out: {str(parent)!r} is not a directory")
                break


class ClockSampler:
    """Samples the SM clock through NVML in a background thread, if NVML is there."""

    def __init__(self, device):
        self.samples, self._stop, self._thread = [], threading.Event(), None
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(device)
            self._read = lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        except Exception:  # no NVML: the clock column stays empty
            self._read = None

    def __enter__(self):
        if self._read is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(self._read())
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def median(self):
        return round(statistics.median(self.samples)) if self.samples else None


def git_commit():
    """$FASTSGEMM_GIT_COMMIT when set (a copied work tree, whose .git, if any, may be older than the tree), else
    the checkout's commit."""
    if os.environ.get("FASTSGEMM_GIT_COMMIT"):
        return os.environ["FASTSGEMM_GIT_COMMIT"]
    try:
        root = Path(__file__).resolve().parents[2]
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except Exception:
        commit = ""
    return commit or None


def _median_wall_ms(call, repeats, warmup=2):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _median_event_ms(call, repeats, events, warmup=2):
    """GPU time between an event before and after a whole Python call: includes its overhead."""
    make_event, synchronize = events
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start, stop = make_event(), make_event()
        start.record()
        call()
        stop.record()
        times.append(synchronize(start, stop))
    return statistics.median(times)


def end_to_end(sizes, kernels, repeats):
    """Whole calls as a notebook makes them: host arrays (transfers included) and device arrays
    (call overhead included), beside numpy.matmul and, where installed, CuPy and torch."""
    rows = []
    rng = np.random.default_rng(0)
    cupy = torch = None
    try:
        import cupy
    except ImportError:
        pass
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # the FP32 baseline, never TF32
    except ImportError:
        pass
    for m, n, k in sizes:
        A = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        B = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        paths = {"numpy.matmul (host)": lambda: np.matmul(A, B)}
        for name in kernels:
            paths[f"fastsgemm {name} (host arrays)"] = lambda name=name: fastsgemm.sgemm(A, B, kernel=name)
        if cupy is not None:
            paths["cupy round trip (host)"] = lambda: cupy.asnumpy(cupy.asarray(A) @ cupy.asarray(B))
        if torch is not None:
            paths["torch round trip (host)"] = lambda: (torch.from_numpy(A).cuda() @ torch.from_numpy(B).cuda()).cpu().numpy()
        if cupy is not None:
            # The copy floor: A and B up and D down from pinned host memory, nothing else (what staging aims at).
            pinned = [cupy.cuda.alloc_pinned_memory(x.nbytes) for x in (A, B)]
            pinned_A, pinned_B = (np.frombuffer(p, np.float32, x.size).reshape(x.shape) for p, x in zip(pinned, (A, B)))
            pinned_A[...], pinned_B[...] = A, B
            d_A, d_B, d_D = (cupy.empty(shape, cupy.float32) for shape in ((m, k), (k, n), (m, n)))
            pinned_D = np.frombuffer(cupy.cuda.alloc_pinned_memory(m * n * 4), np.float32, m * n).reshape(m, n)

            def copy_floor():
                d_A.set(pinned_A)
                d_B.set(pinned_B)
                d_D.get(out=pinned_D)

            paths["copy floor: pinned A, B up, D down"] = copy_floor
        for label, call in paths.items():
            # NumPy's BLAS threads spin for about 0.1 s after each call, on every core: a path timed right after
            # numpy.matmul would share the host with them. Each path starts on a quiet host instead.
            time.sleep(0.25)
            rows.append({"M": m, "N": n, "K": k, "path": label, "ms": _median_wall_ms(call, repeats), "timer": "wall"})
        device = {}
        if cupy is not None:
            a, b = cupy.asarray(A), cupy.asarray(B)
            events = (cupy.cuda.Event, lambda s, e: (e.synchronize(), cupy.cuda.get_elapsed_time(s, e))[1])
            for name in kernels:
                device[f"fastsgemm {name} (cupy arrays)"] = (lambda name=name: fastsgemm.sgemm(a, b, kernel=name), events)
            device["cupy.matmul"] = (lambda: a @ b, events)
        if torch is not None:
            ta, tb = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
            tevents = (lambda: torch.cuda.Event(enable_timing=True), lambda s, e: (e.synchronize(), s.elapsed_time(e))[1])
            for name in kernels:
                device[f"fastsgemm {name} (torch tensors)"] = (lambda name=name: fastsgemm.sgemm(ta, tb, kernel=name), tevents)
            device["torch.matmul"] = (lambda: ta @ tb, tevents)
        for label, (call, events) in device.items():
            rows.append({"M": m, "N": n, "K": k, "path": label, "ms": _median_event_ms(call, repeats, events), "timer": "cuda events"})
    print(f"\n{'shape':>16} {'path':<42} {'ms':>10} {'GFLOP/s':>9}  timer")
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        print(f"{shape:>16} {r['path']:<42} {r['ms']:10.3f} {2 * r['M'] * r['N'] * r['K'] / r['ms'] / 1e6:9.1f}  {r['timer']}")
    return rows


OVERHEAD_SIZES = [[n] * 3 for n in (64, 128, 256, 512, 1024)]


def per_call(sizes, kernels, calls, rounds):
    """Per-call cost as a loop in a notebook sees it: `calls` calls back to back, one synchronize at the end, wall
    clock over the loop divided by `calls`; the median of `rounds` such loops. fastsgemm on torch tensors, CuPy
    arrays and DeviceArrays, with and without out=, beside torch.matmul and cupy.matmul in the same run, and each
    fastsgemm kernel's own GPU time (CUDA events around launches queued back to back: fastsgemm.benchmark)."""
    rng = np.random.default_rng(0)
    frameworks = {}
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # the FP32 baseline, never TF32
        frameworks["torch"] = (lambda x: torch.from_numpy(x).cuda(), lambda shape: torch.empty(shape, device="cuda"),
                               torch.cuda.synchronize, lambda a, b, out=None: torch.matmul(a, b, out=out))
    except ImportError:
        pass
    try:
        import cupy

        frameworks["cupy"] = (cupy.asarray, lambda shape: cupy.empty(shape, cupy.float32),
                              cupy.cuda.Device().synchronize, lambda a, b, out=None: cupy.matmul(a, b, out=out))
    except ImportError:
        pass
    frameworks["fastsgemm"] = (fastsgemm.to_device, fastsgemm.DeviceArray.empty,
                               lambda: fastsgemm._sgemm.synchronize(0), None)

    def loop_us(call, synchronize):
        for _ in range(max(10, calls // 20)):  # warm-up: module loads, handles, caches
            call()
        synchronize()
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            synchronize()
            samples.append((time.perf_counter() - start) * 1e6 / calls)
        return statistics.median(samples)

    rows = []
    for m, n, k in sizes:
        A = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        B = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        gpu_us = {}
        for name in kernels:
            timed = fastsgemm.benchmark(name, m, n, k, repeats=50, warmup=10, check=False)
            gpu_us[name] = (timed["picked"], 1e3 * timed["median_ms"])
        for label, (to_device, empty, synchronize, matmul) in frameworks.items():
            a, b, o = to_device(A), to_device(B), empty((m, n))
            paths = {}
            for name in kernels:
                paths[(f"fastsgemm {name}", False)] = lambda name=name: fastsgemm.sgemm(a, b, kernel=name)
                paths[(f"fastsgemm {name}", True)] = lambda name=name: fastsgemm.sgemm(a, b, out=o, kernel=name)
            if matmul is not None:
                paths[(f"{label}.matmul", False)] = lambda: matmul(a, b)
                paths[(f"{label}.matmul", True)] = lambda: matmul(a, b, out=o)
            for (path, with_out), call in paths.items():
                name = path.removeprefix("fastsgemm ")
                picked, kernel_us = gpu_us.get(name, (None, None))
                rows.append({"M": m, "N": n, "K": k, "operands": label, "path": path, "out": with_out,
                             "us_per_call": loop_us(call, synchronize), "picked": picked, "kernel_gpu_us": kernel_us,
                             "calls": calls, "rounds": rounds})
    print(f"\n{'shape':>14} {'operands':<10} {'path':<22} {'out=':<5} {'us/call':>8} {'kernel GPU us':>13} "
          f"{'x framework':>11}  picked")
    for r in rows:
        baseline = next((b for b in rows if (b["M"], b["operands"], b["out"]) == (r["M"], r["operands"], r["out"])
                         and b["path"].endswith(".matmul")), None)
        ratio = f"{baseline['us_per_call'] / r['us_per_call']:.2f}" if baseline else "-"
        kernel = f"{r['kernel_gpu_us']:.1f}" if r["kernel_gpu_us"] is not None else "-"
        print(f"{r['M']}x{r['N']}x{r['K']:>5} {r['operands']:<10} {r['path']:<22} {str(r['out']):<5} "
              f"{r['us_per_call']:8.1f} {kernel:>13} {ratio:>11}  {r['picked'] or ''}")
    return rows


def auto_verdicts(rows):
    """For each shape with an "auto" row: what auto ran, and its speed against the fastest FP32-accurate
    kernel timed at that shape in the same run (TF32 rungs excluded: auto promises FP32 accuracy)."""
    precision = {k.name: k.precision for k in fastsgemm.kernels()}
    verdicts = []
    shapes = dict.fromkeys((r["M"], r["N"], r["K"]) for r in rows)
    for shape in shapes:
        timed = [r for r in rows if (r["M"], r["N"], r["K"]) == shape and "skipped" not in r]
        auto = next((r for r in timed if r["kernel"] == "auto"), None)
        others = [r for r in timed if r["kernel"] != "auto" and precision.get(r["kernel"]) == "fp32"]
        if auto is None or not others:
            continue
        fastest = max(others, key=lambda r: r["gflops"])
        verdicts.append({"shape": "x".join(map(str, shape)), "picked": auto["picked"], "auto_gflops": auto["gflops"],
                         "fastest": fastest["kernel"], "fastest_gflops": fastest["gflops"],
                         "ratio": auto["gflops"] / fastest["gflops"]})
    return verdicts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=parse_shape, default=None,
                        help="N (square) or MxNxK, e.g. 4096 4095x4097x4093 (default: square 128 .. 16384)")
    parser.add_argument("--quick", action="store_true", help="three shapes, fewer repeats: under a minute")
    parser.add_argument("--kernels", nargs="+", type=kernel_name, default=None,
                        help="rungs to time (default: all GPU rungs)")
    parser.add_argument("--repeats", type=integer_at_least(1), default=20)
    parser.add_argument("--warmup", type=integer_at_least(0), default=5)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.csv")
    parser.add_argument("--end-to-end", action="store_true",
                        help="time whole Python calls (host arrays with transfers, device arrays with call overhead) "
                             "beside numpy.matmul, CuPy and torch, instead of kernels alone")
    parser.add_argument("--overhead", action="store_true",
                        help="per-call wall time of whole Python calls (a loop, one sync at the end) on torch, CuPy "
                             "and DeviceArray operands, with and without out=, beside torch.matmul and cupy.matmul")
    parser.add_argument("--calls", type=integer_at_least(1), default=2000,
                        help="calls per timed loop in --overhead (default 2000)")
    args = parser.parse_args(argv)
    check_arguments(parser, args)

    sizes = args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.quick:
        args.repeats, args.warmup = min(args.repeats, 10), min(args.warmup, 2)
    if not fastsgemm.cuda_available():
        print("no usable CUDA device: nothing to time", file=sys.stderr)
        return 1
    info = fastsgemm.device_info()
    if args.overhead:
        rows = per_call(args.sizes or OVERHEAD_SIZES, args.kernels or ["auto", "cublas"], args.calls, 5)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            meta = {"device": info, "git_commit": git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        return 0
    if args.end_to_end:
        e2e_sizes = args.sizes or [[64] * 3, [256] * 3, [1024] * 3, [4096] * 3]
        rows = end_to_end(e2e_sizes, args.kernels or ["auto", "warptile"], min(args.repeats, 20))
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            meta = {"device": info, "git_commit": git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        return 0
    names = args.kernels or [k.name for k in fastsgemm.kernels() if k.device == "cuda" and k.name != "cublas"] + ["auto"]
    lanes = info["fp32_lanes_per_sm"] * info["sm_count"] * 2
    rows = []
    total, done = len(sizes) * (1 + len(names)), 0
    for m, n, k in sizes:
        shape_rows = []
        for name in ["cublas", *names]:
            done += 1
            progress(done, total, f"{m}x{n}x{k} {name}")
            if m * n * k > SLOW_RUNG_LIMIT.get(name, float("inf")):
                rows.append({"kernel": name, "M": m, "N": n, "K": k, "skipped": "too slow at this size"})
                continue
            with ClockSampler(info["device"]) as clock:
                row = fastsgemm.benchmark(name, m, n, k, repeats=args.repeats, warmup=args.warmup,
                                          alpha=args.alpha, beta=args.beta)
            row["sm_clock_mhz"] = clock.median()
            row["peak_gflops_at_clock"] = lanes * row["sm_clock_mhz"] / 1000 if row["sm_clock_mhz"] else None
            shape_rows.append(row)
        base = next(r for r in shape_rows if r["kernel"] == "cublas")
        for row in shape_rows:
            row["ratio_to_cublas"] = row["gflops"] / base["gflops"]
        rows.extend(shape_rows)

    print(f"\n{info['name']}, {info['sm_count']} SMs, FP32 peak {info['fp32_peak_gflops']:.0f} GFLOP/s at {info['sm_clock_mhz']} MHz")
    print(f"{'shape':>18} {'kernel':<14} {'ms':>9} {'GFLOP/s':>9} {'x cuBLAS':>9} {'SM MHz':>7} {'% peak@clk':>10} {'rel.err':>9}")
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "skipped" in r:
            print(f"{shape:>18} {r['kernel']:<14} {'(' + r['skipped'] + ')':>40}")
            continue
        peak = f"{100 * r['gflops'] / r['peak_gflops_at_clock']:.1f}" if r["peak_gflops_at_clock"] else "-"
        err = f"{r['rel_error']:.1e}" if r["rel_error"] is not None else "-"
        print(f"{shape:>18} {r['kernel']:<14} {r['median_ms']:9.3f} {r['gflops']:9.0f} {r['ratio_to_cublas']:9.3f} "
              f"{r['sm_clock_mhz'] or '-':>7} {peak:>10} {err:>9}")
    verdicts = auto_verdicts(rows)
    if verdicts:
        print(f"\n{'shape':>18} {'auto ran':<22} {'GFLOP/s':>9} {'fastest FP32 rung':<18} {'GFLOP/s':>9} {'auto/fastest':>12}")
        for v in verdicts:
            print(f"{v['shape']:>18} {v['picked']:<22} {v['auto_gflops']:9.0f} {v['fastest']:<18} "
                  f"{v['fastest_gflops']:9.0f} {v['ratio']:12.3f}")

    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"device": info, "git_commit": git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "repeats": args.repeats, "warmup": args.warmup, "alpha": args.alpha, "beta": args.beta}
        args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        fields = ["M", "N", "K", "kernel", "picked", "median_ms", "min_ms", "max_ms", "gflops", "ratio_to_cublas",
                  "sm_clock_mhz", "peak_gflops_at_clock", "rel_error", "error_reference", "input_sets", "skipped"]
        with args.out.with_suffix(".csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
