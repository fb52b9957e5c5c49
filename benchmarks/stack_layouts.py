"""Stacks whose B is a transposed view (column-major products: attention's Q K^T, x @ W.mT) beside row-major ones,
fastsgemm against torch.matmul (FP32, TF32 off), timed as benchmarks/batched.py times its stacks.

    python benchmarks/stack_layouts.py [--kernels auto tf32x3_inplace] [--out FILE.json]

Each case: a warm-up of 0.5 s a method, then 15 rounds of a loop of 200 calls between CUDA events, the methods in
a shuffled order each round; the median per call. Each method's error against float64 is recorded once, from a
call of its own (not a timed one).
"""
from __future__ import annotations

import argparse
import json

import torch

import fastsgemm
from batched import relative_error, time_methods  # benchmarks/batched.py, beside this script
from fastsgemm.bench import git_commit

# (name, A shape, B's shape before the transpose, whether B is given as a transposed view)
CASES = [
    ("256 x 128^3, B row-major", (256, 128, 128), (256, 128, 128), False),
    ("256 x 128^3, B column-major", (256, 128, 128), (256, 128, 128), True),
    ("64 x 256^3, B column-major", (64, 256, 256), (64, 256, 256), True),
    ("Q K^T, 96 heads x 512 x 64", (96, 512, 64), (96, 512, 64), True),
    ("Q K^T, 32 heads x 2048 x 64", (32, 2048, 64), (32, 2048, 64), True),
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="*", default=["auto", "tf32x3_inplace"])
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    generator = torch.Generator(device="cuda").manual_seed(20261127)
    rows = []
    for name, shape_a, shape_b, transposed in CASES:
        a = torch.rand(shape_a, device="cuda", generator=generator) * 2 - 1
        b = torch.rand(shape_b, device="cuda", generator=generator) * 2 - 1
        b = b.mT if transposed else b
        out = torch.empty(torch.matmul(a, b).shape, device="cuda")
        methods = {"torch.matmul": lambda: torch.matmul(a, b, out=out)}
        for kernel in args.kernels:
            methods[f"fastsgemm {kernel}"] = lambda kernel=kernel: fastsgemm.matmul(a, b, out=out, kernel=kernel)
        medians = time_methods(methods, warmup_seconds=0.5, rounds=15, calls=200, seed=len(rows))
        torch_us = medians["torch.matmul"] * 1e3
        for method in methods:
            us = medians[method] * 1e3
            kernel = method.removeprefix("fastsgemm ")
            result = torch.matmul(a, b) if method == "torch.matmul" else fastsgemm.matmul(a, b, kernel=kernel)
            error = relative_error(result, a, b)
            rows.append({"case": name, "method": method, "us": us, "ratio_to_torch": torch_us / us, "error": error})
            print(f"{name:32s} {method:26s} {us:8.1f} us  {torch_us / us:5.2f}x  error {error:.1e}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "git_commit": git_commit(),
                    "calls": 200, "rounds": 15, "warmup_seconds": 0.5}
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
