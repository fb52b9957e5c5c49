"""Where a fastsgemm.torch.Linear training step spends its time (host and GPU), beside torch.nn.Linear's.

    python benchmarks/profile_layer.py [--out FILE]

For each layer of benchmarks/torch_layer.py but the GPU-bound one: the step (forward, a .sum() loss, backward)
timed as torch_layer.py times it; then cProfile over 50 steps of fastsgemm's layer (the Python functions that take
the host time), and torch.profiler over 5 (the operators, CPU and CUDA time). Then the backward's two products
alone, per call, on the gradient as the .sum() loss delivers it (every stride 0) and on a contiguous copy of it;
and the step with a contiguous gradient, and with the default memory pool keeping what it frees (CuPy sets it).
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import math
import pstats
import sys

import torch

import fastsgemm
import fastsgemm.torch as fst
from torch_layer import LAYERS as ALL_LAYERS  # benchmarks/torch_layer.py, beside this script
from torch_layer import per_call as per_call_us

# torch_layer.py's layers but the GPU-bound one (its rule: 2 x input elements x fan-out above 1e10 FLOP)
LAYERS = [layer for layer in ALL_LAYERS if 2 * math.prod(layer[1]) * layer[2] * layer[3] <= 1e10]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    with open(args.out, "w") if args.out else contextlib.nullcontext(sys.stdout) as out:
        profile(out)


def profile(out):
    """Writes every layer's figures to `out`."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    for name, batch, fan_in, fan_out in LAYERS:
        theirs = torch.nn.Linear(fan_in, fan_out, device="cuda")
        ours = fst.Linear.from_linear(theirs)
        x = torch.randn(*batch, fan_in, device="cuda", requires_grad=True)

        def step(layer):
            layer(x).sum().backward()

        print(f"== {name}", file=out)
        for label, layer in (("torch", theirs), ("fastsgemm", ours)):
            print(f"step {label:10s} {per_call_us(lambda: step(layer), 200):8.1f} us", file=out)

        profiler = cProfile.Profile()
        torch.cuda.synchronize()
        profiler.enable()
        for _ in range(50):
            step(ours)
        torch.cuda.synchronize()
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        print("-- cProfile, 50 fastsgemm steps, by own time", file=out)
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:6000], file=out)

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step(ours)
            torch.cuda.synchronize()
        print("-- torch.profiler, 5 fastsgemm steps", file=out)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=48),
              file=out)

        # The backward's products alone: dA = dC W (dC the .sum() loss's gradient, every stride 0) and
        # dW = dC^T X over the rows laid end to end, on that gradient and on a contiguous copy.
        rows = x.shape[:-1].numel()
        expanded = torch.ones(1, device="cuda").expand(rows, fan_out)
        dense = expanded.contiguous()
        flat = x.detach().reshape(rows, fan_in)
        for label, grad in (("stride-0 dC", expanded), ("contiguous dC", dense)):
            da = per_call_us(lambda: fastsgemm.matmul(grad, theirs.weight.detach()), 500)
            dw = per_call_us(lambda: fastsgemm.matmul(grad.mT, flat), 500)
            print(f"{label:14s} dA = dC W {da:8.1f} us a call   dW = dC^T X {dw:8.1f} us a call", file=out)
        print(f"torch.matmul   dA        {per_call_us(lambda: torch.matmul(expanded, theirs.weight.detach()), 500):8.1f}"
              f" us a call", file=out)

        # The step again, two ways that each remove one suspect: the gradient given contiguous (no staging copy,
        # no stream-ordered allocation in the call), and the .sum() loss with the device's default memory pool
        # told to keep what it frees (its release threshold raised), where staging allocates from it.
        seed = torch.ones(*batch, fan_out, device="cuda")
        for label, layer in (("torch", theirs), ("fastsgemm", ours)):
            us = per_call_us(lambda: layer(x).backward(seed), 200)
            print(f"step, contiguous gradient  {label:10s} {us:8.1f} us", file=out)
        try:
            import cupy
            runtime = cupy.cuda.runtime
            pool = runtime.deviceGetDefaultMemPool(torch.cuda.current_device())
            runtime.memPoolSetAttribute(pool, runtime.cudaMemPoolAttrReleaseThreshold, 1 << 30)
            print(f"step, pool keeps 1 GiB     fastsgemm  {per_call_us(lambda: step(ours), 200):8.1f} us", file=out)
            runtime.memPoolSetAttribute(pool, runtime.cudaMemPoolAttrReleaseThreshold, 0)
            print(f"step, pool keeps nothing   fastsgemm  {per_call_us(lambda: step(ours), 200):8.1f} us", file=out)
        except (ImportError, AttributeError, RuntimeError) as error:  # no CuPy, no such call, or CUDA refused it
            print(f"(the pool variant not run: {error!r})", file=out)
        print(file=out)


if __name__ == "__main__":
    main()
