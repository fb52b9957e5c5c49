"""What fastsgemm.torch costs a PyTorch model: torch.nn.Linear against fastsgemm.torch.Linear, per call and per
training step, eager and compiled (issue 48's benchmark).

    python benchmarks/torch_layer.py [--out benchmarks/results/torch-layer-h100.json] [--compile] [--rounds 5]

In one process, on random float32 CUDA tensors, TF32 off (torch's default, made sure). Each case builds the torch
model and the same model with fastsgemm.torch.Linear sharing its initial weights, and times them in turn, round
after round (torch, fastsgemm, torch, fastsgemm, ...); the figure is each one's median over the rounds and the
ratio is torch's time over fastsgemm's (above 1: fastsgemm is faster). A round is wall clock over a loop with one
synchronize at the end, after a warm-up.

  - inference: a Linear's forward under torch.no_grad(), per call (Linear 1024 -> 1024 at batch 1, 8 and 64; and
    the layers below);
  - layer steps: forward and backward of one Linear (x.sum() as the loss), for 256 -> 256 on (64, 256),
    1024 -> 1024 on (8, 128, 1024) and 4096 -> 4096 on (4096, 4096). Beside the small ones runs a control: a
    Linear whose product is torch's own addmm inside a Python torch.autograd.Function, the least any Python-level
    autograd Function costs, whatever its product (fastsgemm.torch's eager backward is such a Function);
  - the MLP step: 512 -> 1024 -> 1024 -> 10 with GELU, batch 256, cross entropy, SGD with momentum;
  - the transformer MLP block: Linear 1024 -> 4096, GELU, Linear 4096 -> 1024 on (8, 512, 1024), forward and
    backward;
  - with --compile, the MLP step, the block and the 256 layer's step again with torch.compile(model), in its
    default mode and in mode="reduce-overhead" (CUDA graphs).
Writes the rows (with the device, torch's version and the module imported) to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch

import fastsgemm.torch as fst

INFERENCE_BATCHES = (1, 8, 64)
# (name, batch shape of the input, in features, out features, loop length)
LAYERS = [("Linear 256->256 on (64, 256)", (64,), 256, 256, 200),
          ("Linear 1024->1024 on (8, 128, 1024)", (8, 128), 1024, 1024, 200),
          ("Linear 4096->4096 on (4096, 4096)", (4096,), 4096, 4096, 10)]


class _AddmmFunction(torch.autograd.Function):
    """torch's own products inside a Python autograd Function: what the Python layer of autograd costs alone."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t() @ x, grad.sum(0)


class PythonFunctionLinear(torch.nn.Linear):
    """The control: torch.nn.Linear's numbers, through a Python autograd Function (2-D inputs with a bias only)."""

    def forward(self, x):
        return _AddmmFunction.apply(x, self.weight, self.bias)


def swapped(model: torch.nn.Module, make) -> torch.nn.Module:
    """A copy of `model` in which every torch.nn.Linear is make(layer), sharing nothing: same initial weights."""
    import copy
    other = copy.deepcopy(model)
    for name, child in list(other.named_modules()):
        for attr, sub in list(child.named_children()):
            if type(sub) is torch.nn.Linear:
                setattr(child, attr, make(sub))
    return other


def to_fastsgemm(layer):
    return fst.Linear.from_linear(layer)


def to_control(layer):
    made = PythonFunctionLinear(layer.in_features, layer.out_features, device="meta")
    made.weight, made.bias = layer.weight, layer.bias
    return made


def loop_time(run, calls):
    """Microseconds a call: wall clock over `calls` calls, one synchronize at the end."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def compare(runs: dict, calls: int, rounds: int, warmup: int = 3) -> dict:
    """{name: median us a call} over `rounds` rounds, the runs alternated within each round."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(loop_time(run, calls))
    return {name: statistics.median(t) for name, t in times.items()}


def train_step(model, batches, loss_fn, graphs=False):
    """One SGD step a call. graphs: the model is compiled with CUDA graphs, and each step starts a new replay
    (torch.compiler.cudagraph_mark_step_begin), as a training loop under mode="reduce-overhead" does."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    state = {"i": 0}

    def step():
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
    return step


def backward_step(model, x, graphs=False):
    """forward and backward of model on x with x.sum() as the loss (no optimizer; gradients accumulate, but under
    CUDA graphs each step starts them afresh); graphs as in train_step."""
    grads = [*model.parameters(), x]

    def step():
        if graphs:
            # A gradient accumulated across replays would read the last replay's outputs, which the next replay
            # overwrites: start each step's gradients afresh, as zero_grad(set_to_none=True) does.
            for tensor in grads:
                tensor.grad = None
            torch.compiler.cudagraph_mark_step_begin()
        model(x).sum().backward()
    return step


def mlp():
    torch.manual_seed(0)
    sizes = (512, 1024, 1024, 10)
    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(torch.nn.Linear(a, b, device="cuda"))
        if i < len(sizes) - 2:
            layers.append(torch.nn.GELU())
    generator = torch.Generator(device="cuda").manual_seed(1)
    batches = [(torch.randn(256, 512, device="cuda", generator=generator),
                torch.randint(0, 10, (256,), device="cuda", generator=generator)) for _ in range(8)]
    return torch.nn.Sequential(*layers), batches


def block():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096, device="cuda"), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024, device="cuda"))
    return model, torch.randn(8, 512, 1024, device="cuda", requires_grad=True)


def row(case, kind, times, baseline="torch", subject="fastsgemm"):
    """One result, printed as soon as it is measured (a run cut short still shows what it had)."""
    made = {"case": case, "kind": kind, "us": times, "ratio": times[baseline] / times[subject]}
    cells = ", ".join(f"{k} {v:.1f} us" for k, v in times.items())
    print(f"{case:52s} {kind:40s} {cells} ({made['ratio']:.2f}x)", flush=True)
    return made


def eager_rows(rounds, rows):
    """Appends the eager cases' results to rows, each as it is measured."""
    for batch in INFERENCE_BATCHES:
        theirs = torch.nn.Linear(1024, 1024, device="cuda")
        ours = to_fastsgemm(theirs)
        x = torch.randn(batch, 1024, device="cuda")
        with torch.no_grad():
            times = compare({"torch": lambda: theirs(x), "fastsgemm": lambda: ours(x)}, 2000, rounds)
        rows.append(row(f"Linear 1024->1024, batch {batch}", "inference, per call", times))
    for name, batch, fan_in, fan_out, steps in LAYERS:
        theirs = torch.nn.Linear(fan_in, fan_out, device="cuda")
        ours = to_fastsgemm(theirs)
        x = torch.randn(*batch, fan_in, device="cuda")
        with torch.no_grad():
            times = compare({"torch": lambda: theirs(x), "fastsgemm": lambda: ours(x)}, steps * 10, rounds)
        rows.append(row(name, "inference, per call", times))
        xg = x.clone().requires_grad_()
        runs = {"torch": backward_step(theirs, xg), "fastsgemm": backward_step(ours, xg)}
        if len(batch) == 1 and fan_in <= 1024:
            runs["Python Function around addmm"] = backward_step(to_control(theirs), xg)
        rows.append(row(name, "forward and backward, per step", compare(runs, steps, rounds)))
    model, batches = mlp()
    loss = torch.nn.CrossEntropyLoss()
    times = compare({"torch": train_step(model, batches, loss),
                     "fastsgemm": train_step(swapped(model, to_fastsgemm), batches, loss),
                     "Python Function around addmm": train_step(swapped(model, to_control), batches, loss)},
                    200, rounds, warmup=20)
    rows.append(row("MLP 512->1024->1024->10, GELU, batch 256, SGD", "training step", times))
    model, x = block()
    times = compare({"torch": backward_step(model, x), "fastsgemm": backward_step(swapped(model, to_fastsgemm), x)},
                    10, rounds)
    rows.append(row("MLP block 1024->4096->1024, GELU, on (8, 512, 1024)", "forward and backward, per step", times))


def compiled_rows(rounds, rows):
    """Appends the compiled cases' results to rows, each as it is measured."""
    for mode in ("default", "reduce-overhead"):
        def compiled(model):
            return torch.compile(model, mode=None if mode == "default" else mode)
        model, batches = mlp()
        loss = torch.nn.CrossEntropyLoss()
        graphs = mode == "reduce-overhead"
        runs = {"torch": train_step(compiled(model), batches, loss, graphs),
                "fastsgemm": train_step(compiled(swapped(model, to_fastsgemm)), batches, loss, graphs)}
        rows.append(row("MLP 512->1024->1024->10, GELU, batch 256, SGD", f"training step, compiled ({mode})",
                        compare(runs, 200, rounds, warmup=20)))
        model, x = block()
        runs = {"torch": backward_step(compiled(model), x, graphs),
                "fastsgemm": backward_step(compiled(swapped(model, to_fastsgemm)), x, graphs)}
        rows.append(row("MLP block 1024->4096->1024, GELU, on (8, 512, 1024)",
                        f"forward and backward, compiled ({mode})", compare(runs, 10, rounds, warmup=5)))
        layer = torch.nn.Linear(256, 256, device="cuda")
        x = torch.randn(64, 256, device="cuda", requires_grad=True)
        runs = {"torch": backward_step(compiled(layer), x, graphs),
                "fastsgemm": backward_step(compiled(to_fastsgemm(layer)), x, graphs)}
        rows.append(row("Linear 256->256 on (64, 256)", f"forward and backward, compiled ({mode})",
                        compare(runs, 200, rounds, warmup=5)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="also the compiled cases")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"fastsgemm.torch from {fst.__file__}; {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    try:
        eager_rows(args.rounds, rows)
        if args.compile:
            compiled_rows(args.rounds, rows)
    except KeyboardInterrupt:  # a run cut short (timeout -s INT) keeps the cases it finished: eager_rows' at least
        print("interrupted: writing what was measured", flush=True)
    if args.out and rows:
        # FASTSGEMM_GIT_COMMIT where the tree's copy of .git is older than the tree (the device tool's copies).
        commit = os.environ.get("FASTSGEMM_GIT_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).parent).stdout.strip()
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tf32": False,
                "fastsgemm_commit": commit, "fastsgemm_torch": fst.__file__, "rounds": args.rounds,
                "ratio": "torch's median time over fastsgemm's (above 1: fastsgemm is faster)"}
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
