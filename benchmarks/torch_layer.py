"""What fastsgemm.torch costs a PyTorch model: Linear and matmul against torch's own, per call and per step.

    python benchmarks/torch_layer.py [--out benchmarks/results/torch-layer-h100.json]

In one process, on random float32 CUDA tensors, TF32 off (torch's default, made sure):
  - per call: wall clock over 2000 forward calls with one synchronize at the end (no grad), median of 5 rounds;
    what a small layer costs, where Python and launch overhead dominate;
  - per step: wall clock of forward + backward of the layer, 200 steps, one synchronize, median of 5 rounds.
Each pair runs in the same process and the same loop shape, and the ratio is torch's time over fastsgemm's
(above 1: fastsgemm is faster).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import fastsgemm
import fastsgemm.torch as fst

# (name, batch shape of the input, in features, out features)
LAYERS = [("Linear 256->256 on (64, 256)", (64,), 256, 256),
          ("Linear 1024->1024 on (8, 128, 1024)", (8, 128), 1024, 1024),
          ("Linear 4096->4096 on (4096, 4096)", (4096,), 4096, 4096)]
MATMULS = [64, 128, 1024]


def per_call(run, calls, rounds=5):
    """Median microseconds a call over `rounds` loops of `calls` calls, one synchronize a loop."""
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    print(f"fastsgemm.torch from {fst.__file__}")
    rows = []
    for name, batch, fan_in, fan_out in LAYERS:
        theirs = torch.nn.Linear(fan_in, fan_out, device="cuda")
        ours = fst.Linear.from_linear(theirs)
        x = torch.randn(*batch, fan_in, device="cuda")
        big = 2 * x.numel() * fan_out > 1e10  # GPU-bound: fewer calls do
        calls = 20 if big else 2000
        steps = 10 if big else 200
        with torch.no_grad():
            forward = {"torch": per_call(lambda: theirs(x), calls), "fastsgemm": per_call(lambda: ours(x), calls)}
        xg = x.clone().requires_grad_()

        def step(layer):
            return lambda: layer(xg).sum().backward()

        training = {"torch": per_call(step(theirs), steps), "fastsgemm": per_call(step(ours), steps)}
        rows.append({"case": name, "forward_us": forward, "forward_ratio": forward["torch"] / forward["fastsgemm"],
                     "step_us": training, "step_ratio": training["torch"] / training["fastsgemm"]})
    for n in MATMULS:
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        calls = 2000 if n <= 256 else 200
        times = {"torch.matmul": per_call(lambda: torch.matmul(a, b), calls),
                 "fastsgemm.torch.matmul": per_call(lambda: fst.matmul(a, b), calls),
                 "fastsgemm.matmul": per_call(lambda: fastsgemm.matmul(a, b), calls)}
        rows.append({"case": f"matmul {n}^3", "forward_us": times,
                     "forward_ratio": times["torch.matmul"] / times["fastsgemm.torch.matmul"]})
    for row in rows:
        cells = ", ".join(f"{k} {v:.1f} us" for k, v in row["forward_us"].items())
        line = f"{row['case']:40s} forward: {cells} ({row['forward_ratio']:.2f}x)"
        if "step_us" in row:
            line += (f"; step: torch {row['step_us']['torch']:.1f} us, fastsgemm {row['step_us']['fastsgemm']:.1f} us "
                     f"({row['step_ratio']:.2f}x)")
        print(line)
    if args.out:
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tf32": False,
                "fastsgemm_torch": fst.__file__}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
