"""python -m fastsgemm.tune: measure which kernel is fastest for each shape class on this GPU, and write
the table that kernel="auto" reads.

    python -m fastsgemm.tune                          # default shapes; this GPU's entry in the shipped table
    python -m fastsgemm.tune --output my-tuning.json  # elsewhere; then FASTSGEMM_TUNING=my-tuning.json
    python -m fastsgemm.tune --sizes 4096 1000x1000x64 --repeats 30

Candidates are every FP32-accurate CUDA kernel: each rung that keeps FP32 accuracy in its own
configuration and in every other one it was built with (fastsgemm.kernels()[i].configs), and cuBLAS.
TF32 rungs are never candidates: auto promises FP32 accuracy. Each candidate is timed with
fastsgemm.benchmark (CUDA events, median of --repeats after warm-up, random inputs) and checked against
cuBLAS; one whose error is above the FP32 bound cannot win. The table keeps every candidate's median
so the choice can be audited; other GPUs' entries in the file are left as they are.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import fastsgemm

from . import _tuning
from ._registry import ERROR_BOUND, auto_candidates, parse_kernel
from .bench import SLOW_RUNG_LIMIT, git_commit, parse_shape, progress

# Squares at every power of two, and between them from 256 up to 4096, where the best tile changes with how
# the blocks fall on the SMs (auto takes the measured shape nearest in log scale).
SQUARES = [[n] * 3 for n in (64, 128, 256, 384, 512, 768, 1024, 1280, 1536, 2048, 3072, 4096, 8192, 16384)]
# Beyond the squares: sizes that are not multiples of 4 (no 16-byte loads), tall-and-skinny and wide
# results, a small K (little work per output) and long K with small and large results (the ladder's rungs
# split K > 4096 into slices for accuracy, all in one launch, then sum them in order).
OTHER_SHAPES = [
    [1000, 1000, 1000],
    [4095, 4097, 4093],
    [32768, 256, 2048],
    [65536, 64, 1024],
    [256, 32768, 2048],
    [8192, 8192, 256],
    [64, 64, 8192],
    [256, 256, 16384],
    [512, 512, 16384],
    [128, 128, 65536],
    [1024, 1024, 32768],
    [4096, 4096, 16384],
]
DEFAULT_SHAPES = SQUARES + OTHER_SHAPES


def candidates() -> list[str]:
    """Every kernel auto may run (FP32-accurate CUDA rungs and their configurations), cuBLAS first."""
    return ["cublas", *(name for name in auto_candidates() if name != "cublas")]


def measure(shape, names, repeats, warmup, on_progress):
    """{kernel: median ms} at one shape, for the candidates that are fast enough to time there and accurate."""
    m, n, k = shape
    times = {}
    for name in names:
        on_progress(f"{m}x{n}x{k} {name}")
        if m * n * k > SLOW_RUNG_LIMIT.get(name.partition(":")[0], float("inf")):
            continue
        if max(m, n) > parse_kernel(name).max_dim:
            continue
        row = fastsgemm.benchmark(name, m, n, k, repeats=repeats, warmup=warmup)
        if row["rel_error"] is not None and not row["rel_error"] <= ERROR_BOUND["fp32"]:
            print(f"\n{name} at {m}x{n}x{k}: error {row['rel_error']:.1e} against cuBLAS; not a candidate",
                  file=sys.stderr)
            continue
        times[name] = row["median_ms"]
    return times


# cuBLAS's own host time per call (14-20 us at 64^3 to 512^3 on the H100, `bench --overhead`) is not in the
# kernel timings the table compares, and fastsgemm's kernels launch in 2-4 us: so where a kernel takes less than
# CUBLAS_HOST_BOUND_MS, cuBLAS wins a shape only when its kernel is more than CUBLAS_MARGIN faster than the
# fastest of ours. At 512^3 the two measured within 4% of each other, and a whole call through cuBLAS took
# 25.8 us against tf32x3_mma's 20.
CUBLAS_MARGIN = 1.05
CUBLAS_HOST_BOUND_MS = 0.05


def choose(times: dict) -> str:
    """The kernel auto runs at a shape, from {kernel: median ms}: the fastest, unless that is cuBLAS, at a shape
    whose call its host time can dominate, by less than CUBLAS_MARGIN over the fastest of fastsgemm's own."""
    best = min(times, key=times.get)
    ours = {name: ms for name, ms in times.items() if name != "cublas"}
    if best == "cublas" and ours and times["cublas"] < CUBLAS_HOST_BOUND_MS:
        own_best = min(ours, key=ours.get)
        if ours[own_best] <= times["cublas"] * CUBLAS_MARGIN:
            return own_best
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=parse_shape, default=None,
                        help="N (square) or MxNxK (default: 14 squares from 64 to 16384 and 12 other shapes)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output", type=Path, default=_tuning.SHIPPED_TABLE,
                        help="the table to write this GPU's entry into (default: the package's own)")
    args = parser.parse_args(argv)
    if not fastsgemm.cuda_available():
        print("no usable CUDA device: nothing to tune", file=sys.stderr)
        return 1
    info = fastsgemm.device_info()
    shapes = args.sizes or DEFAULT_SHAPES
    names = candidates()
    total, done = len(shapes) * len(names), 0

    def on_progress(label):
        nonlocal done
        done += 1
        progress(done, total, label)

    entries = []
    for shape in shapes:
        times = measure(shape, names, args.repeats, args.warmup, on_progress)
        best = choose(times)
        m, n, k = shape
        entries.append({"M": m, "N": n, "K": k, "kernel": best,
                        "median_ms": {name: round(ms, 5) for name, ms in sorted(times.items(), key=lambda x: x[1])}})

    print(f"\n{info['name']} (compute capability {'.'.join(map(str, info['compute_capability']))})")
    print(f"{'shape':>18} {'chosen':<22} {'GFLOP/s':>9} {'runner-up':<22} {'x slower':>9} {'x cuBLAS':>9}")
    for e in entries:
        chosen_ms, flops = e["median_ms"][e["kernel"]], 2.0 * e["M"] * e["N"] * e["K"]
        others = [(name, ms) for name, ms in e["median_ms"].items() if name != e["kernel"]]
        second = others[0] if others else ("-", chosen_ms)
        print(f"{e['M']}x{e['N']}x{e['K']:<6} {e['kernel']:<22} {flops / chosen_ms / 1e6:9.0f} {second[0]:<22} "
              f"{second[1] / chosen_ms:9.3f} {e['median_ms']['cublas'] / chosen_ms:9.3f}")

    table = _tuning.read_table(args.output)
    table["devices"][info["name"]] = {
        "compute_capability": list(info["compute_capability"]),
        "measured": {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": git_commit(),
                     "repeats": args.repeats, "warmup": args.warmup, "sm_count": info["sm_count"]},
        "shapes": entries,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {len(entries)} shapes for {info['name']} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
