"""Old build against new, on one GPU: the speed check of the lessons-and-engine restructuring (issue 46).

Two builds of fastsgemm (the old main built in place in another tree, the new one installed) are timed in turn,
each round a fresh process per build, rounds alternated (base, new, base, new, ...), so that clock and
temperature drift falls on both alike:

    # one round of one build: every kernel name and configuration the restructuring touched, and two controls
    PYTHONPATH=.base/python python benchmarks/engine_ab.py time --label base --out /tmp/base-1.json
    python benchmarks/engine_ab.py time --label new --out /tmp/new-1.json
    # the table: each (name, shape)'s median over rounds, new against base
    python benchmarks/engine_ab.py compare /tmp/*-?.json --out benchmarks/results/engine-ab-h100.json

`time` uses fastsgemm.benchmark (CUDA events around each launch on device memory, warm-up first, the median of
the repeats, uniform random inputs made on the GPU) at 4096^3, 8192^3, 4095x4097x4093 and 256^3, and a stack of
64 products of 256^3 for the kernels that run a stack in one launch. With --overhead it also times whole calls
(python -m fastsgemm.bench --overhead: wall time over a loop, one synchronize at the end) at 64^3 and 128^3 on
torch, CuPy and DeviceArray operands. Each output names the module it imported, so a run that picked up the wrong
build shows it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4095, 4097, 4093), (256, 256, 256)]
STACK = (64, 256, 256, 256)  # count, M, N, K
CONTROLS = ["regbuffer", "cublas"]  # sources the restructuring leaves alone: they show the drift between processes
TOUCHED = ("14_", "15_", "16_", "17_", "18_", "19_", "20_")  # the rungs whose machinery moved into kernels/engine/


def touched_names(fastsgemm) -> list[str]:
    names = []
    for k in fastsgemm.kernels():
        if Path(k.source).name.startswith(TOUCHED) or k.name in CONTROLS:
            names += [k.name, *(f"{k.name}:{c.name}" for c in k.configs)]
        else:  # a configuration that moved into the engine, and its rung's own kernel beside it
            moved = [f"{k.name}:{c.name}" for c in k.configs if c.source.startswith("kernels/engine/")]
            names += [k.name, *moved] if moved else []
    return names


def time_round(label: str, out: Path, repeats: int, overhead: bool, only: list[str] | None) -> None:
    import fastsgemm

    started = time.time()
    batched = {k.name for k in fastsgemm.kernels() if k.batched}
    rows = []
    for name in only or touched_names(fastsgemm):
        for m, n, k in SHAPES:
            r = fastsgemm.benchmark(name, m, n, k, repeats=repeats, warmup=3, check=False)
            rows.append({"kernel": name, "shape": f"{m}x{n}x{k}", "median_ms": r["median_ms"]})
        if name.partition(":")[0] in batched:
            count, m, n, k = STACK
            r = fastsgemm.benchmark(name, m, n, k, count=count, repeats=repeats, warmup=3, check=False)
            rows.append({"kernel": name, "shape": f"{count}x{m}x{n}x{k}", "median_ms": r["median_ms"]})
    calls = []
    if overhead:
        with tempfile.TemporaryDirectory() as folder:
            base = Path(folder) / "overhead"
            subprocess.run([sys.executable, "-m", "fastsgemm.bench", "--overhead", "--sizes", "64", "128",
                            "--kernels", "auto", "--calls", "2000", "--out", str(base)], check=True,
                           stdout=subprocess.DEVNULL)
            calls = json.loads(base.with_suffix(".json").read_text())
    out.write_text(json.dumps({"label": label, "started": started, "module": fastsgemm.__file__, "device": fastsgemm.device_info()["name"],
                               "commit": os.environ.get("FASTSGEMM_GIT_COMMIT"), "rows": rows, "overhead": calls},
                              indent=1))


def compare(paths: list[Path], out: Path | None) -> None:
    runs = sorted((json.loads(p.read_text()) for p in paths), key=lambda run: run["started"])  # in the order run
    labels = sorted({r["label"] for r in runs})
    if labels != ["base", "new"]:
        sys.exit(f"compare needs rounds labelled base and new, got {labels}")
    times: dict = {}
    for run in runs:
        for row in run["rows"]:
            times.setdefault((row["kernel"], row["shape"]), {}).setdefault(run["label"], []).append(row["median_ms"])
    table = []
    for (kernel, shape), by in times.items():
        if set(by) != {"base", "new"}:  # timed in one build's rounds only (--kernels differed): nothing to compare
            continue
        base, new = statistics.median(by["base"]), statistics.median(by["new"])
        table.append({"kernel": kernel, "shape": shape, "base_ms": base, "new_ms": new, "new_speed": base / new,
                      "rounds": {label: by[label] for label in ("base", "new")}})
    table.sort(key=lambda r: r["new_speed"])
    print(f"{'kernel':<24} {'shape':<18} {'base ms':>9} {'new ms':>9} {'new speed':>9}")
    for r in table:
        print(f"{r['kernel']:<24} {r['shape']:<18} {r['base_ms']:9.4f} {r['new_ms']:9.4f} {r['new_speed']:9.3f}")
    calls: dict = {}
    for run in runs:
        for row in (run["overhead"] or {}).get("rows", []):
            key = (row["M"], row["operands"], row["path"], row["out"])
            calls.setdefault(key, {}).setdefault(run["label"], []).append(row["us_per_call"])
    per_call = []
    for (size, operands, path, with_out), by in sorted(calls.items(), key=str):
        if set(by) == {"base", "new"}:
            base, new = statistics.median(by["base"]), statistics.median(by["new"])
            per_call.append({"size": size, "operands": operands, "path": path, "out": with_out, "base_us": base,
                             "new_us": new, "new_minus_base_us": new - base, "rounds": by})
    if per_call:
        print(f"\n{'per call':<10} {'operands':<12} {'path':<18} {'out':<5} {'base us':>8} {'new us':>8} {'diff':>6}")
        for r in per_call:
            print(f"{r['size']:<10} {r['operands']:<12} {r['path']:<18} {str(r['out']):<5} {r['base_us']:8.2f} "
                  f"{r['new_us']:8.2f} {r['new_minus_base_us']:6.2f}")
    result = {"modules": sorted({(r["label"], r["module"]) for r in runs}), "devices": sorted({r["device"] for r in runs}),
              "commits": {r["label"]: r["commit"] for r in runs}, "order": [r["label"] for r in runs],
              "table": table, "per_call": per_call}
    if out is not None:
        out.write_text(json.dumps(result, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("time", help="one round of one build")
    t.add_argument("--label", choices=["base", "new"], required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--repeats", type=int, default=20)
    t.add_argument("--overhead", action="store_true", help="also time whole calls at 64^3 and 128^3")
    t.add_argument("--kernels", nargs="+", help="these names only (default: every name the restructuring touched)")
    c = sub.add_parser("compare", help="the table over rounds")
    c.add_argument("runs", nargs="+", type=Path)
    c.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.command == "time":
        time_round(args.label, args.out, args.repeats, args.overhead, args.kernels)
    else:
        compare(args.runs, args.out)


if __name__ == "__main__":
    main()
