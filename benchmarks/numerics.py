"""Relative error against float64 as K grows, for every rung and cuBLAS.

    python benchmarks/numerics.py [--out benchmarks/results/numerics-h100.json] [--plot error-vs-k.png]

M = N = 256, K from 256 to 65536, standard-normal inputs (seed 0), error = Frobenius norm of
(C - C64) / norm of C64. GPU rungs need a GPU. Past K = 4096 the ladder rungs run split-K (csrc/operands.c).
The plot (log-log, error against K) shows cpu, cuBLAS FP32 and TF32, the top SIMT rung and the tensor-core rungs.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

import fastsgemm

KS = [256, 1024, 4096, 16384, 65536]
NUMERIC_CONFIGS = {"ozaki"}  # rungs whose configurations change the arithmetic, not only the tiles


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="write a PNG of error against K (needs matplotlib)")
    args = parser.parse_args(argv)
    # Every rung, and every configuration of a rung whose configurations differ in their numbers (ozaki's
    # moduli); the others' configurations tile the same sums differently.
    names = [name for k in fastsgemm.kernels() if k.device == "cpu" or fastsgemm.cuda_available()
             for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs if k.name in NUMERIC_CONFIGS))]
    rng = np.random.default_rng(0)
    rows = []
    for k in KS:
        A = rng.standard_normal((256, k), dtype=np.float32)
        B = rng.standard_normal((k, 256), dtype=np.float32)
        exact = A.astype(np.float64) @ B.astype(np.float64)
        for name in names:
            got = fastsgemm.sgemm(A, B, kernel=name).astype(np.float64)
            rows.append({"K": k, "kernel": name, "rel_error": float(np.linalg.norm(got - exact) / np.linalg.norm(exact))})
    print(f"{'K':>7} " + " ".join(f"{n:>12}" for n in names))
    for k in KS:
        cells = {r["kernel"]: r["rel_error"] for r in rows if r["K"] == k}
        print(f"{k:>7} " + " ".join(f"{cells[n]:12.2e}" if n in cells else f"{'-':>12}" for n in names))
    if args.out:
        args.out.write_text(json.dumps({"M": 256, "N": 256, "rows": rows}, indent=1))
    if args.plot:
        plot(rows, args.plot)
    return 0


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = ["cpu", "warptile", "cublas", "cublas_tf32", "tf32", "tf32x3", "ozaki", "ozaki:7"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in shown:
        points = [(r["K"], r["rel_error"]) for r in rows if r["kernel"] == name]
        if points:
            style = dict(linestyle="--", color="black" if name == "cublas" else "gray") if name.startswith("cublas") else {}
            ax.plot(*zip(*points), marker="o", label=name, **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K (M = N = 256)")
    ax.set_ylabel("relative error against float64")
    ax.set_title("Error as K grows: FP32, TF32, split TF32 (tf32x3) and INT8 residues (ozaki)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
