"""Plots from benchmark data (python -m fastsgemm.bench --out ...):

    python benchmarks/plot.py benchmarks/results/ladder-h100.json

writes <data>-gflops.png (GFLOP/s against size, log2 axis, one line per rung, cuBLAS dashed,
the FP32 peak as a horizontal line) and <data>-vs-cublas.png (% of cuBLAS against size).
Square shapes are plotted against N; other shapes are left to the table.
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    data = json.loads(Path(path).read_text())
    series = {}
    for r in data["rows"]:
        if "skipped" in r or not (r["M"] == r["N"] == r["K"]) or r["kernel"] == "auto":
            continue  # auto runs one of the plotted kernels (README's auto table says which)
        series.setdefault(r["kernel"], []).append((r["M"], r["gflops"], r["ratio_to_cublas"]))
    order = [r["kernel"] for r in data["rows"]]
    names = sorted(series, key=order.index)
    return data["meta"], {name: sorted(series[name]) for name in names}


def finish(fig, ax, title, ylabel, path):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M = N = K")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(path):
    meta, series = load(path)
    device = meta["device"]
    stem = Path(path).with_suffix("")
    title = f"{device['name']}, commit {meta.get('git_commit')}: median of {meta['repeats']} CUDA-event timings"

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for name, points in series.items():
        n, gflops, _ = zip(*points)
        if name.startswith("cublas"):  # the yardsticks: FP32 black, TF32 gray
            style = dict(color="black" if name == "cublas" else "gray", linestyle="--", linewidth=2)
        else:
            style = dict(marker="o", markersize=3)
        ax.plot(n, [g / 1000 for g in gflops], label=name, **style)
    ax.axhline(device["fp32_peak_gflops"] / 1000, color="gray", linewidth=1, linestyle=":")
    ax.text(min(min(p[0] for p in pts) for pts in series.values()), device["fp32_peak_gflops"] / 1000 * 1.02,
            f"FP32 peak {device['fp32_peak_gflops'] / 1000:.1f} TFLOP/s", color="gray", fontsize=8)
    finish(fig, ax, title, "TFLOP/s", f"{stem}-gflops.png")

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for name, points in series.items():
        if name.startswith("cublas"):  # cuBLAS TF32 (7x) would flatten the ladder; it is in the first plot
            continue
        n, _, ratio = zip(*points)
        ax.plot(n, [100 * r for r in ratio], label=name, marker="o", markersize=3)
    ax.axhline(100, color="black", linestyle="--", linewidth=2, label="cublas")
    finish(fig, ax, title, "% of cuBLAS (true FP32, same run)", f"{stem}-vs-cublas.png")
    return [f"{stem}-gflops.png", f"{stem}-vs-cublas.png"]


if __name__ == "__main__":
    for path in sys.argv[1:] or ["benchmarks/results/ladder-h100.json"]:
        print("\n".join(plot(path)))
