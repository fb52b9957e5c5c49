"""Where one `ozaki` call's time goes, pass by pass (issue 47): the GPU time of each kernel of the call, from
torch.profiler, for each kernel name given, on normal data or on the input classes named (ozaki_classes.py's).

    python benchmarks/ozaki_passes.py [--sizes 4096 16384] [--kernels ozaki ozaki:lesson ozaki:7]
                                      [--classes normal "softmax rows"] [--calls 3] [--out ozaki-passes.json]

Operands are made on the GPU with torch (seeded), M = N = K = size: standard normal, or the class. Each kernel is called
twice first (the workspace, the handles), then --calls times under the profiler into one preallocated result;
each pass's time is its kernels' device time summed over those calls, divided by --calls. The kernels are named as
the profiler names them, shortened to the function's own name (scale_kernel, slice_kernel, gemm_kernel,
reconstruct_kernel, ...).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import fastsgemm
from fastsgemm.bench import git_commit
from ozaki_classes import CLASSES, make_class  # beside this file: issue 47's input classes


def short(name: str) -> str:
    """A kernel's own name, from the profiler's demangled signature."""
    head = name.split("(")[0]
    head = re.sub(r"<.*", "", head)
    return head.split("::")[-1] or name[:40]


def passes(kernel: str, a, b, out, calls: int) -> dict:
    for _ in range(2):
        fastsgemm.sgemm(a, b, out=out, kernel=kernel)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fastsgemm.sgemm(a, b, out=out, kernel=kernel)
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            micros = getattr(event, "device_time_total", None)
            if micros is None:
                micros = event.cuda_time_total
            times[short(event.name)] = times.get(short(event.name), 0.0) + micros / 1000.0 / calls
    return dict(sorted(times.items(), key=lambda item: -item[1]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--kernels", nargs="+", default=["ozaki", "ozaki:lesson", "ozaki:7"])
    parser.add_argument("--classes", nargs="+", default=["normal"], choices=CLASSES,
                        help="input classes, as ozaki_classes.py makes them (default: normal data only)")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for n in args.sizes:
        for name in args.classes:
            g = torch.Generator(device="cuda").manual_seed(1)
            if name == "normal":  # as before there were classes: the same operands, the same figures
                a = torch.randn(n, n, device="cuda", generator=g)
                b = torch.randn(n, n, device="cuda", generator=g)
            else:
                a, b = make_class(name, n, g)
            out = torch.empty(n, n, device="cuda")
            for kernel in args.kernels:
                ms = passes(kernel, a, b, out, args.calls)
                rows.append({"size": n, "class": name, "kernel": kernel, "total_ms": sum(ms.values()),
                             "passes_ms": ms})
                print(f"{n:6d} {name[:20]:20s} {kernel:14s} total {sum(ms.values()):9.3f} ms: "
                      + ", ".join(f"{pass_name} {t:.3f}" for pass_name, t in ms.items()), flush=True)
            del a, b, out
            torch.cuda.empty_cache()
    if args.out:
        meta = {"device": torch.cuda.get_device_name(), "fastsgemm_commit": git_commit(), "torch": torch.__version__,
                "passes_ms": "each kernel's device time in one call (torch.profiler), the mean over --calls calls"}
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
