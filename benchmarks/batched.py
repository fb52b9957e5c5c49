"""Batched products against torch.matmul in FP32 (TF32 off), in one run on one GPU.

    python benchmarks/batched.py --out benchmarks/results/batched-h100.json

For each stack shape, fastsgemm.matmul (auto, and the kernels named with --kernels) and torch.matmul take
the same random CUDA tensors. Each method is timed as a loop of --calls calls with one pair of CUDA events
around the whole loop (so host time that keeps the GPU waiting counts, and no timing call sits between two
products), after a warm-up of at least --warmup-seconds (the GPU's clocks are up before the first figure).
The methods take turns, one loop each per round in a new (seeded) order each round, and the median of
--rounds rounds is kept; the ratio is torch's median over fastsgemm's. Each result is checked once
against float64 on the host.

Why a loop and not a pair of events around each call: recording an event from Python costs host time, and
two of them between consecutive calls make a 25 us product wait on the host (64 x 256^3 on the H100: 28 us a
call in a loop, 52 us with events around each; torch.matmul's 50 us kernel hid them:
benchmarks/NOTES.md, "Timing a stack").

Where A, B and the result have the same shape (after broadcasting), the run also times torch.add(a, b, out=out):
no products, but the same bytes read and written as the product's, once each. It is the streaming floor a
product of these stacks would have to approach on this GPU (a measured reference, not the memory's peak), timed
the same way and in the same rounds.
"""
import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import fastsgemm
from fastsgemm.bench import git_commit

CASES = [  # (name, A shape, B shape)
    ("256 x 128^3", (256, 128, 128), (256, 128, 128)),
    ("64 x 256^3", (64, 256, 256), (64, 256, 256)),
    ("8 x 1024^3", (8, 1024, 1024), (8, 1024, 1024)),
    ("32 x 1024^3, B broadcast", (32, 1024, 1024), (1024, 1024)),
]
STREAMING_FLOOR = "torch.add (the same bytes)"  # readme_tables.py and harness/kernel_gaps.py read rows by this name


def warm_up(call, seconds):
    """Calls `call`, keeping the GPU busy, until `seconds` of wall clock have passed: its clocks leave their idle
    state."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            call()
        torch.cuda.synchronize()


def time_loop(call, calls):
    """Milliseconds per call over a loop of `calls` calls, one pair of CUDA events around the loop."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        call()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / calls


def time_methods(methods, warmup_seconds, rounds, calls, seed):
    """{method: median milliseconds per call}: each method warmed up, then `rounds` rounds in which every method
    times a loop of `calls` calls (time_loop)."""
    for call in methods.values():
        warm_up(call, warmup_seconds)
    times = {method: [] for method in methods}
    order, shuffler = list(methods), random.Random(seed)
    for _ in range(rounds):
        # The methods take turns, so that a drift in clocks or heat falls on all of them, in a new order each
        # round, so that none always follows the same one: in a fixed order (or one merely rotated), auto, always
        # next after torch.matmul, ran 6-9% faster at 8 x 1024^3 than tf32x3_inplace, the same kernel
        # (benchmarks/NOTES.md, "Timing a stack").
        shuffler.shuffle(order)
        for method in order:
            times[method].append(time_loop(methods[method], calls))
    return {method: statistics.median(samples) for method, samples in times.items()}


def same_bytes_as_product(a, b, out):
    """Whether torch.add(a, b, out=out) reads and writes what a @ b into out does: a and b broadcast to out's shape
    (square products; a broadcast operand read once a product, as the product reads it)."""
    try:
        return torch.broadcast_shapes(a.shape, b.shape) == out.shape
    except RuntimeError:  # shapes that do not broadcast: a product of non-square matrices
        return False


def relative_error(result, a, b):
    expected = np.matmul(a.double().cpu().numpy(), b.double().cpu().numpy())
    return float(np.linalg.norm(result.double().cpu().numpy() - expected) / np.linalg.norm(expected))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="*", default=["tf32x3", "tf32x3:128x64", "tf32x3:direct", "tf32x3_regs",
                                                           "tf32x3_regs:4steps", "tf32x3_regs:direct", "tf32x3_inplace",
                                                           "cublas"])
    parser.add_argument("--calls", type=int, default=200, help="calls in one timed loop")
    parser.add_argument("--rounds", type=int, default=15, help="timed loops of each method; the median is kept")
    parser.add_argument("--warmup-seconds", type=float, default=0.5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False  # torch's FP32 matmul in true FP32, as cuBLAS FP32
    generator = torch.Generator(device="cuda").manual_seed(20261123)
    rows = []
    for case_index, (name, shape_a, shape_b) in enumerate(CASES):
        a = torch.rand(shape_a, device="cuda", generator=generator) * 2 - 1
        b = torch.rand(shape_b, device="cuda", generator=generator) * 2 - 1
        out = torch.empty(torch.matmul(a, b).shape, device="cuda")
        batch = max(shape_a[0], shape_b[0] if len(shape_b) == 3 else 1)
        flop = 2.0 * batch * shape_a[-2] * shape_a[-1] * shape_b[-1]
        methods = {"torch.matmul": lambda: torch.matmul(a, b, out=out)}
        if same_bytes_as_product(a, b, out):
            methods[STREAMING_FLOOR] = lambda: torch.add(a, b, out=out)
        for kernel in ["auto", *args.kernels]:
            methods[f"fastsgemm {kernel}"] = lambda kernel=kernel: fastsgemm.matmul(a, b, out=out, kernel=kernel)
        medians = time_methods(methods, args.warmup_seconds, args.rounds, args.calls, seed=case_index)
        torch_ms = medians["torch.matmul"]
        for method in methods:
            ms = medians[method]
            if method == STREAMING_FLOOR:  # no product, so no FLOP/s and no error
                rows.append({"case": name, "method": method, "ms": ms, "tflops": None,
                             "ratio_to_torch": torch_ms / ms, "error": None})
                print(f"{name:28s} {method:30s} {ms:9.4f} ms {torch_ms / ms:23.2f}x", flush=True)
                continue
            kernel = method.removeprefix("fastsgemm ")
            result = torch.matmul(a, b) if method == "torch.matmul" else fastsgemm.matmul(a, b, kernel=kernel)
            rows.append({"case": name, "method": method, "ms": ms, "tflops": flop / ms / 1e9,
                         "ratio_to_torch": torch_ms / ms, "error": relative_error(result, a, b)})
            row = rows[-1]
            print(f"{row['case']:28s} {row['method']:30s} {row['ms']:9.4f} ms {row['tflops']:7.1f} TFLOP/s "
                  f"{row['ratio_to_torch']:5.2f}x  error {row['error']:.1e}", flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
            "git_commit": git_commit(),  # $FASTSGEMM_GIT_COMMIT where the copy's .git is older than its tree
            "calls": args.calls, "rounds": args.rounds, "warmup_seconds": args.warmup_seconds,
            "timing": "CUDA events around a loop of calls, median of the rounds, the methods in a shuffled order "
                      "each round; torch.matmul with TF32 off"}
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
