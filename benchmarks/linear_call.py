"""What one no-grad call of a Linear layer costs, torch.nn.Linear against fastsgemm.torch.Linear (issue 48's inference
target), and where fastsgemm's time goes.

    python benchmarks/linear_call.py compare LABEL OUT.json   # the two layers alternated, per call
    python benchmarks/linear_call.py pieces OUT.json          # each piece of fastsgemm's call alone

Under torch.no_grad(), on random float32 CUDA tensors, TF32 off, for batches of 1, 8 and 64 through 1024 -> 1024 and
16 through 4096 -> 4096. A figure is wall clock over a loop of calls (3000; 500 at 4096) with one synchronize at the
end, after a warm-up.
  - compare: torch's layer and fastsgemm's, sharing weights, alternated round by round (9 rounds), the median of
    each and torch's over fastsgemm's (above 1: fastsgemm is faster); fastsgemm's result is checked against
    fastsgemm.torch's generic no-grad product (the same bits). For a before/after claim, run it on both builds in
    one device call, the builds alternated (benchmarks/branch_ab.sh builds both).
  - pieces: the layer, its forward without the module call, _linear_out, _sgemm.linear_fast with kernel "auto",
    "cublas" and "tf32x3_mma:thin", sgemm_fast into a given result, F.linear, torch.addmm(out=), new_empty and
    torch.empty (7 rounds each), and the GPU's own time for fastsgemm's product: a CUDA graph of 100 calls.
Writes the rows, with the device and the module imported, to OUT.json.
"""
from __future__ import annotations

import json
import statistics
import sys

import torch
import torch.nn.functional as F

import fastsgemm.torch as fst
from fastsgemm import _sgemm
from torch_layer import loop_time as per_call  # beside this file: wall clock over a loop, one synchronize

CASES = [(1, 1024, 1024, 3000), (8, 1024, 1024, 3000), (64, 1024, 1024, 3000), (16, 4096, 4096, 500)]


def layers(batch: int, fin: int, fout: int):
    torch_layer = torch.nn.Linear(fin, fout, device="cuda")
    return torch_layer, fst.Linear.from_linear(torch_layer), torch.randn(batch, fin, device="cuda")


def compare(label: str) -> list:
    rows = []
    for batch, fin, fout, calls in CASES:
        torch_layer, ours, x = layers(batch, fin, fout)
        for layer in (torch_layer, ours):
            for _ in range(300):
                layer(x)
        theirs_us, ours_us = [], []
        for _ in range(9):
            theirs_us.append(per_call(lambda: torch_layer(x), calls))
            ours_us.append(per_call(lambda: ours(x), calls))
        if not torch.equal(ours(x), fst._linear_out(x, torch_layer.weight, torch_layer.bias, "auto")):
            raise AssertionError(f"{batch} x {fin} -> {fout}: the layer's result is not the generic product's")
        row = {"shape": [batch, fin, fout], "torch_us": statistics.median(theirs_us),
               "fastsgemm_us": statistics.median(ours_us), "rounds": {"torch": theirs_us, "fastsgemm": ours_us}}
        row["ratio"] = row["torch_us"] / row["fastsgemm_us"]
        rows.append(row)
        print(f"{label:>8} {batch:>3} x {fin} -> {fout}: torch {row['torch_us']:7.2f} us, fastsgemm "
              f"{row['fastsgemm_us']:7.2f} us, ratio {row['ratio']:.3f}", flush=True)
    return rows


def graph_us(call, calls: int = 100) -> float:
    """The GPU's time a call: a CUDA graph of `calls` calls, replayed 7 times, the median."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(7):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def pieces() -> list:
    rows = []
    for batch, fin, fout, calls in CASES:
        torch_layer, ours, x = layers(batch, fin, fout)
        w, b = torch_layer.weight.detach(), torch_layer.bias.detach()
        wt, out = w.t(), torch.empty(batch, fout, device="cuda")
        cases = {
            "torch.nn.Linear(x)": lambda: torch_layer(x),
            "fastsgemm.torch.Linear(x)": lambda: ours(x),
            "its forward(x)": lambda: ours.forward(x),
            "fst._linear_out": lambda: fst._linear_out(x, w, b, "auto"),
            "_sgemm.linear_fast auto": lambda: _sgemm.linear_fast(x, w, b, "auto"),
            "_sgemm.linear_fast cublas": lambda: _sgemm.linear_fast(x, w, b, "cublas"),
            "_sgemm.linear_fast tf32x3_mma:thin": lambda: _sgemm.linear_fast(x, w, b, "tf32x3_mma:thin"),
            "_sgemm.sgemm_fast(out=) auto": lambda: _sgemm.sgemm_fast(x, wt, None, out, 1.0, 0.0, "auto"),
            "F.linear": lambda: F.linear(x, w, b),
            "torch.addmm(out=)": lambda: torch.addmm(b, x, wt, out=out),
            "x.new_empty": lambda: x.new_empty((batch, fout)),
            "torch.empty": lambda: torch.empty((batch, fout), device="cuda"),
        }
        with torch.no_grad():
            for name, call in cases.items():
                for _ in range(300):
                    call()
                us = statistics.median(per_call(call, calls) for _ in range(7))
                rows.append({"shape": [batch, fin, fout], "case": name, "us": us})
                print(f"{batch:>3} x {fin} -> {fout}  {name:<36} {us:8.2f} us", flush=True)
            us = graph_us(lambda: _sgemm.sgemm_fast(x, wt, None, out, 1.0, 0.0, "auto"))
        rows.append({"shape": [batch, fin, fout], "case": "GPU time of fastsgemm's product (auto)", "us": us})
        print(f"{batch:>3} x {fin} -> {fout}  {'GPU time of the product (auto)':<36} {us:8.2f} us", flush=True)
    return rows


def main(argv: list[str]) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    if len(argv) == 3 and argv[0] == "compare":
        label, out_path = argv[1], argv[2]
        with torch.no_grad():
            rows = compare(label)
    elif len(argv) == 2 and argv[0] == "pieces":
        label, out_path = "pieces", argv[1]
        rows = pieces()
    else:
        sys.exit(__doc__.split("\n\n")[1])
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "label": label,
            "module": fst.__file__}
    with open(out_path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
