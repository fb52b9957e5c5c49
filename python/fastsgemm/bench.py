"""python -m fastsgemm.bench: time the ladder against cuBLAS over sizes.

    python -m fastsgemm.bench                       # square 128 .. 8192
    python -m fastsgemm.bench --sizes 4096 8192 4095x4097x4093 --kernels naive tile2d
    python -m fastsgemm.bench --out benchmarks/results/h100

Every row is checked once against cuBLAS; cuBLAS (true FP32) is always timed
in the same run and each rung's ratio to it is reported. The SM clock is
sampled through NVML while each row is timed (FFMA-dense kernels may run below
the maximum clock), and the FP32 peak at that clock is reported beside it.
Results go to <out>.json and <out>.csv with the GPU, driver, CUDA and git commit.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import fastsgemm

# Rungs too slow to time at every size: the largest M*N*K each is timed at.
SLOW_RUNG_LIMIT = {"cpu": 512**3, "naive": 4096**3}


def parse_shape(text):
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        return parts * 3
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"a size is N or MxNxK, got {text!r}")
    return parts


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
    """The checkout's commit, or $FASTSGEMM_GIT_COMMIT where there is no git (a copied work tree)."""
    try:
        root = Path(__file__).resolve().parents[2]
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except Exception:
        commit = ""
    return commit or os.environ.get("FASTSGEMM_GIT_COMMIT") or None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=parse_shape, default=[[n] * 3 for n in (128, 256, 512, 1024, 2048, 4096, 8192)])
    parser.add_argument("--kernels", nargs="+", default=None, help="rungs to time (default: all GPU rungs)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.csv")
    args = parser.parse_args(argv)

    if not fastsgemm.cuda_available():
        print("no usable CUDA device: nothing to time", file=sys.stderr)
        return 1
    info = fastsgemm.device_info()
    names = args.kernels or [k.name for k in fastsgemm.kernels() if k.device == "cuda" and k.name != "cublas"]
    lanes = info["fp32_lanes_per_sm"] * info["sm_count"] * 2
    rows = []
    for m, n, k in args.sizes:
        shape_rows = []
        for name in ["cublas", *names]:
            if m * n * k > SLOW_RUNG_LIMIT.get(name, float("inf")):
                rows.append({"kernel": name, "M": m, "N": n, "K": k, "skipped": "too slow at this size"})
                continue
            with ClockSampler(info["device"]) as clock:
                row = fastsgemm.benchmark(name, m, n, k, repeats=args.repeats, warmup=args.warmup,
                                          alpha=args.alpha, beta=args.beta)
            row["sm_clock_mhz"] = clock.median()
            row["peak_gflops_at_clock"] = lanes * row["sm_clock_mhz"] / 1000 if row["sm_clock_mhz"] else None
            shape_rows.append(row)
            print(f"  {m}x{n}x{k} {name}: {row['gflops']:.0f} GFLOP/s", file=sys.stderr, flush=True)
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

    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"device": info, "git_commit": git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "repeats": args.repeats, "warmup": args.warmup, "alpha": args.alpha, "beta": args.beta}
        args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        fields = ["M", "N", "K", "kernel", "median_ms", "min_ms", "max_ms", "gflops", "ratio_to_cublas",
                  "sm_clock_mhz", "peak_gflops_at_clock", "rel_error", "error_reference", "input_sets", "skipped"]
        with args.out.with_suffix(".csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
