"""Where a training step's time goes, with torch.nn.Linear and with fastsgemm.torch.Linear (issue 48's first look).

    python benchmarks/torch_step_profile.py [--out DIR] [--steps 200] [--time-only]

The model is the issue's MLP: 512 -> 1024 -> 1024 -> 10 with GELU, batch 256, SGD with momentum, float32 with
TF32 off (torch's default, made sure). Both models start from the same weights and see the same batches.

  1. Step time: wall clock of `steps` steps with one synchronize at the end, the two models alternated over
     five rounds; the median of each, and the ratio torch / fastsgemm (above 1: fastsgemm is faster).
  2. GPU time per step: torch.profiler's CUDA kernel times over 20 steps, per kernel name, divided by 20. The
     profiler routes fastsgemm's products through its torch.library operator (fastsgemm.torch does so whenever
     the profiler is on), which changes the host's work, not the kernels.
  3. Host time per step, for the plain eager path fastsgemm takes without the profiler: cProfile over `steps`
     steps, the functions with the most time of their own, per step.
GPU time well under the step time means the step waits on the host. Writes DIR/torch-step-profile.json and
prints the tables.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import time
from pathlib import Path

import torch

import fastsgemm.torch as fst
from fastsgemm import _sgemm

SIZES = (512, 1024, 1024, 10)
BATCH = 256


def make_model(linear):
    torch.manual_seed(0)
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(SIZES, SIZES[1:])):
        layers.append(linear(fan_in, fan_out, device="cuda"))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.GELU())
    return torch.nn.Sequential(*layers)


def trainer(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    state = {"i": 0}

    def step():
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


def timed(step, steps):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e6


def gpu_time(step, steps=20):
    """us of CUDA kernels per step, per kernel name (most first), from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name] = kernels.get(event.name, 0.0) + event.device_time / steps
    return dict(sorted(kernels.items(), key=lambda kv: -kv[1]))


def host_profile(step, steps, top=25):
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, name), (calls, _, own, total, _) in stats.stats.items():
        rows.append({"function": f"{Path(path).name}:{line}({name})", "calls_per_step": calls / steps,
                     "own_us_per_step": own / steps * 1e6, "total_us_per_step": total / steps * 1e6})
    rows.sort(key=lambda r: -r["own_us_per_step"])
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
    return rows[:top], text.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--time-only", action="store_true", help="the step times alone (part 1)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    generator = torch.Generator(device="cuda").manual_seed(1)
    batches = [(torch.randn(BATCH, SIZES[0], device="cuda", generator=generator),
                torch.randint(0, SIZES[-1], (BATCH,), device="cuda", generator=generator)) for _ in range(8)]
    steps = {"torch": trainer(make_model(torch.nn.Linear), batches),
             "fastsgemm": trainer(make_model(fst.Linear), batches)}
    for step in steps.values():  # warm-up: auto's choices, handles, the allocator
        for _ in range(20):
            step()
    rounds = {name: [] for name in steps}
    for _ in range(5):
        for name, step in steps.items():
            rounds[name].append(timed(step, args.steps))
    step_us = {name: statistics.median(times) for name, times in rounds.items()}
    print(f"step: torch {step_us['torch']:.1f} us, fastsgemm {step_us['fastsgemm']:.1f} us "
          f"({step_us['torch'] / step_us['fastsgemm']:.2f}x); rounds {rounds}; fastsgemm.torch from {fst.__file__}")
    if args.time_only:
        return
    gpu = {name: gpu_time(step) for name, step in steps.items()}
    host = {name: host_profile(step, args.steps) for name, step in steps.items()}
    for name in steps:
        total = sum(gpu[name].values())
        print(f"\n{name}: GPU kernels {total:.1f} us a step of {step_us[name]:.1f} us")
        for kernel, us in list(gpu[name].items())[:12]:
            print(f"  {us:8.1f} us  {kernel[:110]}")
        rows, _ = host[name]
        print(f"{name}: host functions by own time, us a step")
        for row in rows[:20]:
            print(f"  {row['own_us_per_step']:8.1f} own {row['total_us_per_step']:8.1f} total "
                  f"{row['calls_per_step']:5.1f} calls  {row['function'][:90]}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        # FASTSGEMM_GIT_COMMIT where the tree's copy of .git is older than the tree (the device tool's copies).
        commit = os.environ.get("FASTSGEMM_GIT_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tf32": False,
                "fastsgemm_commit": commit, "model": f"MLP {SIZES} GELU, batch {BATCH}, SGD momentum 0.9",
                "steps": args.steps, "built_for": _sgemm.build_info()}
        result = {"meta": meta, "step_us": step_us, "rounds_us": rounds, "gpu_us_per_step": gpu,
                  "host_top": {name: host[name][0] for name in steps},
                  "host_cumulative": {name: host[name][1] for name in steps}}
        (args.out / "torch-step-profile.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
