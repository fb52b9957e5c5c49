"""python -m fastsgemm.tune: measure which kernel is fastest for each shape class on this GPU, and write
the table that kernel="auto" reads.

    python -m fastsgemm.tune                          # default shapes; this GPU's entry in the shipped table
    python -m fastsgemm.tune --output my-tuning.json  # elsewhere; then FASTSGEMM_TUNING=my-tuning.json
    python -m fastsgemm.tune --sizes 4096 1000x1000x64 --repeats 30
    python -m fastsgemm.tune --stacks 256x128x128x128 --merge  # re-time one stack, keep the rest
    python -m fastsgemm.tune --sizes 16384 --kernels tf32x3_regs ozaki --merge  # these against cuBLAS only

Candidates are every FP32-accurate CUDA kernel: each rung that keeps FP32 accuracy in its own
configuration and in every other one it was built with (fastsgemm.kernels()[i].configs), and cuBLAS.
TF32 rungs are never candidates: auto promises FP32 accuracy. Each candidate is timed with
fastsgemm.benchmark (CUDA events, median of --repeats after warm-up, random inputs) and checked against
cuBLAS; one whose error is above the FP32 bound cannot win. The table keeps every candidate's median
so the choice can be audited; other GPUs' entries in the file are left as they are.

Stacks of products (fastsgemm.matmul on (count, M, K) @ (count, K, N)) are timed as stacks, with the kernels
that run a stack in one launch (fastsgemm.kernels()[i].batched and cuBLAS's strided-batched call): a stack of
many small products fills the GPU in another way than one product of the same total size, so the nearest
single product is a poor guide to it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import fastsgemm

from . import _tuning
from ._registry import ERROR_BOUND, auto_candidates, batched_candidates, parse_kernel
from .bench import SLOW_RUNG_LIMIT, git_commit, parse_shape, progress

# Squares at every power of two, and between them from 256 up to 4096, where the best tile changes with how
# the blocks fall on the SMs (auto takes the measured shape nearest in log scale).
SQUARES = [[n] * 3 for n in (64, 128, 256, 384, 512, 768, 1024, 1280, 1536, 2048, 3072, 4096, 8192, 16384)]
# Beyond the squares: sizes that are not multiples of 4 (no 16-byte loads), tall-and-skinny and wide
# results, a small K (little work per output) and long K with small and large results (the ladder's rungs
# split K > 4096 into slices for accuracy, all in one launch, then sum them in order); thin results, as a small
# batch through a layer makes (a few rows, or a few columns in its backward), whose few blocks leave most SMs
# idle unless K is cut (the engine's thin configurations); and a training step's products through Linear layers
# (fastsgemm.torch): the weight's gradient g^T x, whose K is the batch's rows, and the input's, g W, for a
# 512 -> 1024 -> 1024 MLP on a batch of 256, a 256-wide layer on 64 rows, and a transformer block's 4096 -> 1024.
OTHER_SHAPES = [
    [1, 1024, 1024],
    [8, 1024, 1024],
    [64, 1024, 1024],
    [16, 4096, 4096],
    [1024, 8, 1024],
    [256, 1024, 512],
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
    [1024, 1024, 256],
    [1024, 512, 256],
    [256, 512, 1024],
    [256, 256, 64],
    [1024, 4096, 4096],
]
DEFAULT_SHAPES = SQUARES + OTHER_SHAPES
# Stacks, as count x M x N x K: many small products, a few mid-sized ones, and attention's two products (scores
# Q K^T, 64-wide heads, and their weighted sum of values) at two sequence lengths.
DEFAULT_STACKS = [
    [1024, 64, 64, 64],
    [256, 128, 128, 128],
    [64, 256, 256, 256],
    [16, 512, 512, 512],
    [8, 1024, 1024, 1024],
    [96, 512, 512, 64],
    [96, 512, 64, 512],
    [32, 2048, 2048, 64],
    [32, 2048, 64, 2048],
]


def parse_stack(text):
    """--stacks: countxMxNxK, each a positive integer."""
    parts = text.lower().split("x")
    if len(parts) != 4 or not all(p.isascii() and p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"a stack is countxMxNxK in positive integers, got {text!r}")
    return [int(p) for p in parts]


def candidates() -> list[str]:
    """Every kernel auto may run (FP32-accurate CUDA rungs and their configurations), cuBLAS first."""
    return ["cublas", *(name for name in auto_candidates() if name != "cublas")]


def stack_candidates() -> list[str]:
    """The candidates that run a stack in one launch, cuBLAS first."""
    return [name for name in candidates() if name in batched_candidates()]


def measure(shape, names, repeats, warmup, on_progress, count=1):
    """{kernel: median ms} at one shape (a stack of `count` of them), for the candidates that are fast enough to
    time there and accurate."""
    m, n, k = shape
    label = f"{count}x{m}x{n}x{k}" if count > 1 else f"{m}x{n}x{k}"
    times = {}
    for name in names:
        on_progress(f"{label} {name}")
        if count * m * n * k > SLOW_RUNG_LIMIT.get(name.partition(":")[0], float("inf")):
            continue
        if max(m, n) > parse_kernel(name).max_dim:
            continue
        row = fastsgemm.benchmark(name, m, n, k, count=count, repeats=repeats, warmup=warmup)
        if row["rel_error"] is not None and not row["rel_error"] <= ERROR_BOUND["fp32"]:
            print(f"\n{name} at {label}: error {row['rel_error']:.1e} against cuBLAS; not a candidate",
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


def _key(entry) -> tuple:
    return (entry.get("count", 1), entry["M"], entry["N"], entry["K"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", type=parse_shape, default=None,
                        help=f"N (square) or MxNxK (default, when neither --sizes nor --stacks is given: "
                             f"{len(SQUARES)} squares from 64 to 16384 and {len(OTHER_SHAPES)} other shapes)")
    parser.add_argument("--stacks", nargs="*", type=parse_stack, default=None,
                        help=f"stacks as countxMxNxK (default, when neither is given: {len(DEFAULT_STACKS)} stacks)")
    parser.add_argument("--merge", action="store_true",
                        help="keep this GPU's other measured shapes in the table, replacing only those measured now")
    parser.add_argument("--kernels", nargs="+", default=None,
                        help="time these candidates only (cuBLAS always): at large shapes the SIMT rungs, many times "
                             "slower than the tensor-core kernels, take minutes and cannot win")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output", type=Path, default=_tuning.SHIPPED_TABLE,
                        help="the table to write this GPU's entry into (default: the package's own)")
    args = parser.parse_args(argv)
    # Naming either kind times only what is named: the defaults are for a run that names neither.
    named = args.sizes is not None or args.stacks is not None
    shapes = (args.sizes or []) if named else DEFAULT_SHAPES
    stacks = (args.stacks or []) if named else DEFAULT_STACKS
    if not shapes and not stacks:
        parser.error("nothing to measure: --sizes and --stacks are both empty")
    names, stack_names = candidates(), stack_candidates()
    if args.kernels is not None:
        unknown = sorted(set(args.kernels) - set(names))
        if unknown:
            parser.error(f"--kernels names what auto cannot run: {', '.join(unknown)} "
                         f"(its candidates: {', '.join(names)})")
        names = ["cublas", *(name for name in names if name in args.kernels and name != "cublas")]
        stack_names = [name for name in stack_names if name in names]
    table = _tuning.read_table(args.output)  # unreadable: ValueError now, before the measuring
    if not fastsgemm.cuda_available():
        print("no usable CUDA device: nothing to tune", file=sys.stderr)
        return 1
    info = fastsgemm.device_info()
    total, done = len(shapes) * len(names) + len(stacks) * len(stack_names), 0

    def on_progress(label):
        nonlocal done
        done += 1
        progress(done, total, label)

    entries = []
    work = [(1, shape, names) for shape in shapes] + [(stack[0], stack[1:], stack_names) for stack in stacks]
    for count, shape, kernels in work:
        times = measure(shape, kernels, args.repeats, args.warmup, on_progress, count)
        if not times:
            print(f"\nno candidate could be timed at {'x'.join(map(str, [count, *shape]))}; left out of the table",
                  file=sys.stderr)
            continue
        m, n, k = shape
        entries.append({**({"count": count} if count > 1 else {}), "M": m, "N": n, "K": k, "kernel": choose(times),
                        "median_ms": {name: round(ms, 5) for name, ms in sorted(times.items(), key=lambda x: x[1])}})

    print(f"\n{info['name']} (compute capability {'.'.join(map(str, info['compute_capability']))})")
    print(f"{'shape':>22} {'chosen':<22} {'GFLOP/s':>9} {'runner-up':<22} {'x slower':>9} {'x cuBLAS':>9}")
    for e in entries:
        count = e.get("count", 1)
        chosen_ms, flops = e["median_ms"][e["kernel"]], 2.0 * count * e["M"] * e["N"] * e["K"]
        others = [(name, ms) for name, ms in e["median_ms"].items() if name != e["kernel"]]
        second = others[0] if others else ("-", chosen_ms)
        shape = ("x".join(map(str, _key(e))) if count > 1 else f"{e['M']}x{e['N']}x{e['K']}")
        cublas = e["median_ms"].get("cublas")
        print(f"{shape:>22} {e['kernel']:<22} {flops / chosen_ms / 1e6:9.0f} {second[0]:<22} "
              f"{second[1] / chosen_ms:9.3f} {(cublas / chosen_ms if cublas else float('nan')):9.3f}")

    measured = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": git_commit(),
                "repeats": args.repeats, "warmup": args.warmup, "sm_count": info["sm_count"]}
    shapes_out, kept = entries, 0
    previous = table["devices"].get(info["name"], {})
    if args.merge and previous:
        # The earlier shapes keep their places (auto takes the first of two equally near ones); a re-measured one
        # is replaced where it stood, and new ones follow.
        now = {_key(e): e for e in entries}
        shapes_out = [now.pop(_key(e), e) for e in previous.get("shapes", [])]
        kept = len(shapes_out) - (len(entries) - len(now))
        shapes_out += list(now.values())
        measured["kept_from"] = previous.get("measured")
    table["devices"][info["name"]] = {"compute_capability": list(info["compute_capability"]), "measured": measured,
                                      "shapes": shapes_out}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {len(entries)} shapes (and kept {kept}) for {info['name']} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
