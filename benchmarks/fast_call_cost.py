"""Per-call host cost of the C fast path on the products a small training step makes (issue 48).

    python benchmarks/fast_call_cost.py [--calls 2000] [--kernels auto tf32x3_mma ...] [--linear]

For each of the MLP's products (torch_step_profile.py's model: batch 256, 512 -> 1024 -> 1024 -> 10, forward and
both gradients, in the layouts fastsgemm.torch hands the C fast path), wall time over a loop of `calls` calls with
one synchronize at the end: fastsgemm._sgemm.sgemm_fast into a preallocated result, per kernel, beside torch.mm
into a preallocated result (cuBLAS, TF32 off). A loop whose time per call exceeds the GPU time of one product is
host-bound, and then the figure is the host's cost per call. The GPU time of one product (CUDA events over the
same loop) is printed beside it, so the two can be told apart.

--linear: instead, a Linear 1024 -> 1024 with a bias under torch.no_grad() at batch 1, 8 and 64, taken apart: the
layer's forward (torch.nn.Linear's and fastsgemm.torch.Linear's), fastsgemm.torch's _linear_out, the C call it
makes (linear_fast: the result made and the bias broadcast in C), sgemm_fast with the bias as C (a row stride of
zero) and with the bias added afterwards, and torch.addmm, each into a preallocated result where it takes one.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from fastsgemm import _sgemm

BATCH, SIZES = 256, (512, 1024, 1024, 10)


def products():
    """(name, a, b) in the layouts the Linear fast path passes: forward x @ W^T, dx = g @ W, dW = g^T @ x."""
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:]):
        x = torch.randn(BATCH, fan_in, device="cuda", generator=g)
        w = torch.randn(fan_out, fan_in, device="cuda", generator=g)
        dy = torch.randn(BATCH, fan_out, device="cuda", generator=g)
        rows += [(f"fwd {BATCH}x{fan_in} @ W^T({fan_in}x{fan_out})", x, w.mT),
                 (f"dx  {BATCH}x{fan_out} @ W({fan_out}x{fan_in})", dy, w),
                 (f"dW  ({fan_out}x{BATCH}) @ x({BATCH}x{fan_in})", dy.mT, x)]
    return rows


def per_call(fn, calls):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start = time.perf_counter()
    start_event.record()
    for _ in range(calls):
        fn()
    end_event.record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / calls * 1e6
    return wall, start_event.elapsed_time(end_event) / calls * 1e3


def linear(calls):
    import fastsgemm.torch as fst
    for batch in (1, 8, 64):
        theirs = torch.nn.Linear(1024, 1024, device="cuda")
        ours = fst.Linear.from_linear(theirs)
        w, b = theirs.weight.detach(), theirs.bias.detach()
        x = torch.randn(batch, 1024, device="cuda")
        out = torch.empty(batch, 1024, device="cuda")
        c = b.expand(batch, 1024)

        def separate():
            _sgemm.sgemm_fast(x, w.mT, None, out, 1.0, 0.0, "auto")
            out.add_(b)
        def linear_fast():
            if _sgemm.linear_fast(x, w, b, "auto") is NotImplemented:
                raise RuntimeError("linear_fast did not take a plain CUDA Linear")
        runs = {"torch.nn.Linear": lambda: theirs(x), "fastsgemm.torch.Linear": lambda: ours(x),
                "_linear_out": lambda: fst._linear_out(x, w, b, "auto"), "linear_fast": linear_fast,
                "sgemm_fast, bias as C": lambda: _sgemm.sgemm_fast(x, w.mT, c, out, 1.0, 1.0, "auto"),
                "sgemm_fast, then add_": separate,
                "sgemm_fast, no bias": lambda: _sgemm.sgemm_fast(x, w.mT, None, out, 1.0, 0.0, "auto"),
                "torch.addmm(out=)": lambda: torch.addmm(b, x, w.t(), out=out)}
        with torch.no_grad():
            for name, run in runs.items():
                wall, gpu = min(per_call(run, calls) for _ in range(3))
                print(f"batch {batch:3d}  {name:26s} {wall:6.1f} ({gpu:5.1f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--kernels", nargs="+", default=["auto", "tf32x3_mma", "tf32x3_regs", "tf32x3_regs:direct"])
    parser.add_argument("--linear", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; us per call, wall (GPU by events)")
    if args.linear:
        return linear(args.calls)
    for name, a, b in products():
        out = torch.empty(a.shape[0], b.shape[1], device="cuda")
        cells = []
        wall, gpu = per_call(lambda: torch.mm(a, b, out=out), args.calls)
        cells.append(f"torch.mm {wall:6.1f} ({gpu:5.1f})")
        for kernel in args.kernels:
            def call(kernel=kernel):
                if _sgemm.sgemm_fast(a, b, None, out, 1.0, 0.0, kernel) is NotImplemented:
                    raise RuntimeError(f"{kernel}: not the fast path")
            walls = []
            for _ in range(3):
                walls.append(per_call(call, args.calls))
            wall, gpu = min(walls)
            cells.append(f"{kernel} {wall:6.1f} ({gpu:5.1f})")
        print(f"{name:36s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
