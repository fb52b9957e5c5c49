"""Batched products against torch.matmul in FP32 (TF32 off), in one run on one GPU.

    python benchmarks/batched.py --out benchmarks/results/batched-h200.json

For each stack shape, fastsgemm.matmul (auto, and the kernels named with --kernels) and torch.matmul take
the same random CUDA tensors. Each call is timed with a pair of CUDA events around it (so host time that
keeps the GPU waiting counts), after a warm-up, and the median of --repeats calls is kept; the ratio is
torch's median over fastsgemm's. Each result is checked once against float64 on the host.
"""
import argparse
import json
import platform
import statistics
import sys
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


def time_calls(call, repeats, warmup):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, stop in pairs:
        start.record()
        call()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(stop) for start, stop in pairs)


def relative_error(result, a, b):
    expected = np.matmul(a.double().cpu().numpy(), b.double().cpu().numpy())
    return float(np.linalg.norm(result.double().cpu().numpy() - expected) / np.linalg.norm(expected))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="*", default=["tf32x3", "tf32x3:128x64", "tf32x3:direct", "tf32x3_regs",
                                                           "tf32x3_regs:4steps", "tf32x3_regs:direct", "tf32x3_inplace",
                                                           "cublas"])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False  # torch's FP32 matmul in true FP32, as cuBLAS FP32
    generator = torch.Generator(device="cuda").manual_seed(20261123)
    rows = []
    for name, shape_a, shape_b in CASES:
        a = torch.rand(shape_a, device="cuda", generator=generator) * 2 - 1
        b = torch.rand(shape_b, device="cuda", generator=generator) * 2 - 1
        out = torch.empty(torch.matmul(a, b).shape, device="cuda")
        batch = max(shape_a[0], shape_b[0] if len(shape_b) == 3 else 1)
        flop = 2.0 * batch * shape_a[-2] * shape_a[-1] * shape_b[-1]
        torch_ms = time_calls(lambda: torch.matmul(a, b, out=out), args.repeats, args.warmup)
        rows.append({"case": name, "method": "torch.matmul", "ms": torch_ms, "tflops": flop / torch_ms / 1e9,
                     "ratio_to_torch": 1.0, "error": relative_error(torch.matmul(a, b), a, b)})
        for kernel in ["auto", *args.kernels]:
            ms = time_calls(lambda: fastsgemm.matmul(a, b, out=out, kernel=kernel), args.repeats, args.warmup)
            error = relative_error(fastsgemm.matmul(a, b, kernel=kernel), a, b)
            rows.append({"case": name, "method": f"fastsgemm {kernel}", "ms": ms, "tflops": flop / ms / 1e9,
                         "ratio_to_torch": torch_ms / ms, "error": error})
        for row in rows[-1 - len(args.kernels) - 1:]:
            print(f"{row['case']:28s} {row['method']:22s} {row['ms']:9.4f} ms {row['tflops']:7.1f} TFLOP/s "
                  f"{row['ratio_to_torch']:5.2f}x  error {row['error']:.1e}", flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
            "git_commit": git_commit(),  # $FASTSGEMM_GIT_COMMIT where the copy's .git is older than its tree
            "repeats": args.repeats, "warmup": args.warmup,
            "timing": "CUDA events around each call, median; torch.matmul with TF32 off"}
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
