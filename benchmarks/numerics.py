"""Relative error against float64 as K grows, for every rung and cuBLAS; then the FP32-accurate paths on inputs
that test how they round.

    python benchmarks/numerics.py [--out benchmarks/results/numerics-h100.json] [--plot error-vs-k.png]

As K grows: M = N = 256, K from 256 to 65536, standard-normal inputs (seed 0), error = Frobenius norm of
(C - C64) / norm of C64. GPU rungs need a GPU. Past K = 4096 the ladder rungs run split-K (csrc/operands.c).
The plot (log-log, error against K) shows cpu, cuBLAS FP32 and TF32, the top SIMT rung and the tensor-core rungs.

By input class (INPUT_CLASSES, seed 1): cuBLAS FP32, tf32x3 and ozaki's configurations, each error twice: the
Frobenius one above, and the largest |C - C64| / (|A| |B|), what FP32 GEMM's error bound is stated against (the
measure that stays meaningful where the result cancels). The Inf and NaN class records instead whether the
result's Inf and NaN are numpy.matmul's (float64), element for element, and its finite elements' largest error
against |A| |B|.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

import fastsgemm
from fastsgemm.bench import git_commit

KS = [256, 1024, 4096, 16384, 65536]
NUMERIC_CONFIGS = {"ozaki"}  # rungs whose configurations change the arithmetic, not only the tiles
CLASS_KERNELS = ["cublas", "tf32x3", "ozaki", "ozaki:7"]


def normal(rng, rows, cols):
    return rng.standard_normal((rows, cols), dtype=np.float32)


def spread_exponents(rng, rows, cols, span=40):
    """Random signs and mantissas, each element's exponent uniform over 2^-span .. 2^span."""
    mantissa = rng.uniform(1.0, 2.0, (rows, cols)) * rng.choice([-1.0, 1.0], (rows, cols))
    return (mantissa * 2.0 ** rng.integers(-span, span + 1, (rows, cols))).astype(np.float32)


def outlier_column(rng):
    A = rng.uniform(-1, 1, (256, 4096)).astype(np.float32)
    A[:, 7] *= 1024  # one column of A 2^10 times the rest: every row's scale set by one element
    return A, normal(rng, 4096, 256)


def softmax_rows(rng):
    logits = 3 * rng.standard_normal((256, 4096))
    A = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (A / A.sum(axis=1, keepdims=True)).astype(np.float32), normal(rng, 4096, 256)


def cancelling(rng):
    """A1 B1 - A1 B1 + 2^-20 A2 B2: what is left after the large terms cancel is 2^-20 of their size."""
    A1, B1, A2, B2 = normal(rng, 256, 1536), normal(rng, 1536, 256), normal(rng, 256, 1024), normal(rng, 1024, 256)
    return np.hstack([A1, A1, A2 * np.float32(2.0**-20)]), np.vstack([B1, -B1, B2])


def with_inf_and_nan(rng):
    A, B = normal(rng, 256, 4096), normal(rng, 4096, 256)
    A[3, 10], A[40, 11], A[41, 12] = np.inf, -np.inf, np.nan
    B[10, 5] = 0.0  # Inf * 0: NaN at (3, 5)
    B[100, 9], B[200, 30] = -np.inf, np.nan  # column 9 of the result infinite (NaN where it meets A's Inf), 30 NaN
    return A, B


INPUT_CLASSES = {  # name: (A, B) from a generator
    "normal, K = 4096": lambda rng: (normal(rng, 256, 4096), normal(rng, 4096, 256)),
    "uniform [0, 1), K = 4096": lambda rng: (rng.random((256, 4096), dtype=np.float32),
                                              rng.random((4096, 256), dtype=np.float32)),
    "exponents over 2^-40 .. 2^40": lambda rng: (spread_exponents(rng, 256, 1024), spread_exponents(rng, 1024, 256)),
    "one column of A 1024x the rest": outlier_column,
    "softmax rows of A": softmax_rows,
    "cancellation to 2^-20": cancelling,
    "long K (128 x 128 x 262144)": lambda rng: (normal(rng, 128, 262144), normal(rng, 262144, 128)),
    "Inf and NaN": with_inf_and_nan,
}


def class_errors(kernels):
    """Each input class's errors for each kernel (the module docstring says which)."""
    rng = np.random.default_rng(1)
    rows = []
    for name, make in INPUT_CLASSES.items():
        A, B = make(rng)
        A64, B64 = A.astype(np.float64), B.astype(np.float64)
        with np.errstate(invalid="ignore"):  # Inf - Inf and Inf * 0 in the Inf and NaN class, as numpy gives them
            exact = A64 @ B64
            scale = np.abs(A64) @ np.abs(B64)
        del A64, B64  # the long-K class's float64 copies are half a gigabyte
        finite = np.isfinite(exact)
        scale = np.where(scale > 0, scale, 1.0)
        for kernel in kernels:
            got = fastsgemm.sgemm(A, B, kernel=kernel).astype(np.float64)
            row = {"class": name, "kernel": kernel}
            with np.errstate(invalid="ignore"):  # Inf - Inf where the result is infinite, as numpy's is
                error = np.abs(got - exact)
            if finite.all():
                row["rel_error"] = float(np.linalg.norm(error) / np.linalg.norm(exact))
                row["vs_abs_product"] = float(np.max(error / scale))
            else:
                row["nonfinite_as_numpy"] = bool(np.array_equal(np.isnan(got), np.isnan(exact))
                                                 and np.array_equal(np.isposinf(got), np.isposinf(exact))
                                                 and np.array_equal(np.isneginf(got), np.isneginf(exact)))
                row["finite_vs_abs_product"] = float(np.max(error[finite] / scale[finite]))
            rows.append(row)
    return rows


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
    classes = class_errors([n for n in CLASS_KERNELS if n in names]) if fastsgemm.cuda_available() else []
    for row in classes:
        figures = (f"Inf/NaN as numpy: {row['nonfinite_as_numpy']}, the finite against |A| |B|: {row['finite_vs_abs_product']:.2e}"
                   if "nonfinite_as_numpy" in row else
                   f"{row['rel_error']:.2e}  against |A| |B|: {row['vs_abs_product']:.2e}")
        print(f"{row['class']:34s} {row['kernel']:8s} {figures}")
    if args.out:
        meta = {"device": fastsgemm.device_info()["name"] if fastsgemm.cuda_available() else "cpu only",
                "git_commit": git_commit()}  # $FASTSGEMM_GIT_COMMIT where the copy's .git is older than its tree
        args.out.write_text(json.dumps({"meta": meta, "M": 256, "N": 256, "rows": rows, "classes": classes}, indent=1))
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
