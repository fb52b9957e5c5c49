"""Plots from benchmark data (python -m fastsgemm.bench --out ...):

    python benchmarks/plot.py benchmarks/results/ladder-h100.json

writes <data>-gflops.png (TFLOP/s against size) and <data>-vs-cublas.png (% of cuBLAS against size),
each with two panels: the SIMT ladder (the rungs that multiply with FFMA) beside the tensor-core rungs,
so that the tensor cores' scale does not flatten the SIMT lesson. Every kernel keeps one colour and one
marker, taken from its place in the registry (fastsgemm.kernels()). Square powers of two are joined by
lines; other square sizes (768, 1000, 1536, ...) are drawn as hollow markers of the same kernel, unjoined,
so that they do not zig-zag the lines. Non-square shapes are left to the README's tables.
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import fastsgemm  # noqa: E402

MARKERS = "osD^v<>ph*XP"


def styles():
    """name -> (colour, marker) for every kernel of the registry, in registry order: one each."""
    names = [k.name for k in fastsgemm.kernels() if k.device == "cuda" and k.rung is not None]
    # Distinct hues, no grays (black and gray are cuBLAS's): tab10 without its gray, then Dark2's first six.
    colours = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7] + list(plt.get_cmap("Dark2").colors[:6])
    return {name: (colours[i % len(colours)], MARKERS[i % len(MARKERS)]) for i, name in enumerate(names)}


def panels():
    """The two panels' kernels: the SIMT rungs, and the tensor-core rungs (cuBLAS drawn on both)."""
    simt, tensor = [], []
    for k in fastsgemm.kernels():
        if k.rung is None or k.device != "cuda":
            continue
        (tensor if k.tensor_cores else simt).append(k.name)
    return simt, tensor


def load(path):
    """meta, {kernel: [(n, gflops, ratio_to_cublas)]} for the square shapes, sorted by n."""
    data = json.loads(Path(path).read_text())
    series = {}
    for r in data["rows"]:
        if "skipped" in r or not (r["M"] == r["N"] == r["K"]) or r["kernel"] == "auto":
            continue  # auto runs one of the plotted kernels (README's auto table says which)
        series.setdefault(r["kernel"], []).append((r["M"], r["gflops"], r["ratio_to_cublas"]))
    return data["meta"], {name: sorted(points) for name, points in series.items()}


def is_power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def draw(ax, name, points, value, style, **line):
    """One kernel: its powers of two joined, its other sizes as hollow, unjoined markers."""
    colour, marker = style
    even = [(n, value(p)) for n, *p in points if is_power_of_two(n)]
    odd = [(n, value(p)) for n, *p in points if not is_power_of_two(n)]
    if even:
        ax.plot(*zip(*even), color=colour, marker=marker, markersize=4, label=name, **line)
    if odd:
        ax.plot(*zip(*odd), linestyle="none", marker=marker, markersize=6, markerfacecolor="none",
                markeredgecolor=colour, label=None if even else name)


def finish(ax, title, ylabel):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M = N = K (hollow markers: sizes that are not powers of two)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


def plot(path):
    meta, series = load(path)
    device = meta["device"]
    stem = Path(path).with_suffix("")
    title = f"{device['name']}, commit {meta.get('git_commit')}, median of {meta['repeats']} CUDA-event timings"
    style = styles()
    simt, tensor = panels()
    yardstick = dict(linestyle="--", linewidth=2)
    peak = device["fp32_peak_gflops"] / 1000

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    for ax, names, extra in ((left, simt, ["cublas"]), (right, tensor, ["cublas", "cublas_tf32"])):
        for name in names:
            if name in series:
                draw(ax, name, series[name], lambda p: p[0] / 1000, style[name])
        for name in extra:
            if name in series:
                draw(ax, name, series[name], lambda p: p[0] / 1000, ("black" if name == "cublas" else "gray", "."),
                     **yardstick)
    left.axhline(peak, color="gray", linewidth=1, linestyle=":")
    left.text(min(n for n, *_ in series["cublas"]), peak * 1.02, f"FP32 peak {peak:.1f} TFLOP/s", color="gray",
              fontsize=8)
    finish(left, f"SIMT ladder (FFMA): {title}", "TFLOP/s")
    finish(right, "tensor-core rungs (TF32 inputs; tf32x3 and tf32x3_mma FP32-accurate)", "TFLOP/s")
    fig.tight_layout()
    fig.savefig(f"{stem}-gflops.png", dpi=110)
    plt.close(fig)

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    for ax, names in ((left, simt), (right, tensor)):
        for name in names:
            if name in series:
                draw(ax, name, series[name], lambda p: 100 * p[1], style[name])
        ax.axhline(100, color="black", label="cublas (true FP32)", **yardstick)
    finish(left, f"SIMT ladder against cuBLAS FP32: {title}", "% of cuBLAS (true FP32, same run)")
    finish(right, "tensor-core rungs against cuBLAS FP32", "% of cuBLAS (true FP32, same run)")
    fig.tight_layout()
    fig.savefig(f"{stem}-vs-cublas.png", dpi=110)
    plt.close(fig)
    return [f"{stem}-gflops.png", f"{stem}-vs-cublas.png"]


if __name__ == "__main__":
    for path in sys.argv[1:] or ["benchmarks/results/ladder-h100.json"]:
        print("\n".join(plot(path)))
