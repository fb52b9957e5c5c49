"""How ozaki's time and error depend on the data (issue 47's first measurement): each input class at large sizes,
`ozaki` and `ozaki:7` beside `tf32x3_regs` and cuBLAS FP32, in one process.

    python benchmarks/ozaki_classes.py [--sizes 4096 16384] [--shapes 4096x4096x16384] [--kernels ozaki ozaki:7 ...]
                                       [--classes ...] [--out benchmarks/results/ozaki-classes-h100.json]

Operands are made on the GPU with torch (seeded), M = N = K = size (or --shapes), B standard normal unless the class says
otherwise. The classes (A's, unless named):
  normal (A and B), uniform [0, 1) (A and B), softmax rows (of 3 x standard normal logits), exponents uniform over
  2^-40 .. 2^40 (random signs and mantissas), one outlier column (A uniform in [-1, 1), column 7 times 2^20), zero
  rows (every third), Inf and NaN (three of them in A, one Inf in B), cancellation (A = [A1, A1, 2^-20 A2] against
  B = [B1; -B1; B2]: what is left is 2^-20 of the terms), subnormal results (A ~ 1e-30, B ~ 1e-10), and A's column 5
  2^-50 times the rest against B's row 5 2^50 times the rest (their products as large as the others), and six
  outlier columns of A, 2^50 down to 2^25 above the rest.
Time: CUDA events around each call into a preallocated result on torch's current stream, after one warm-up call;
the median of --repeats calls, or of one where a call takes over a second (ozaki's slow path at 16384^3 takes
seconds). Error against float64 (torch's float64 product on the GPU): the relative Frobenius error over the finite
elements, and the largest |C - C64| / (|A| |B|), the measure FP32 GEMM's bound is stated against; for the Inf and
NaN class also whether Inf and NaN fall where float64 puts them. Each row has the time's ratio to cuBLAS FP32 and
to the same kernel on normal data of the same size (issue 47's bound: ozaki within 1.5x of its normal-data time).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import fastsgemm
from fastsgemm.bench import git_commit

KERNELS = ["ozaki", "ozaki:7", "tf32x3_regs", "cublas"]


def normal(g, rows, cols, scale=1.0):
    return torch.randn(rows, cols, device="cuda", generator=g) * scale


def spread_exponents(g, rows, cols, span=40):
    mantissa = torch.rand(rows, cols, device="cuda", generator=g) + 1.0
    sign = torch.randint(0, 2, (rows, cols), device="cuda", generator=g) * 2.0 - 1.0
    exponent = torch.randint(-span, span + 1, (rows, cols), device="cuda", generator=g).float()
    return sign * mantissa * torch.exp2(exponent)


def make_class(name, m, n, k, g):
    """(A, B), float32 on the GPU, A m x k and B k x n."""
    if name == "normal":
        return normal(g, m, k), normal(g, k, n)
    if name == "uniform [0, 1)":
        return torch.rand(m, k, device="cuda", generator=g), torch.rand(k, n, device="cuda", generator=g)
    if name == "softmax rows":
        return torch.softmax(3.0 * normal(g, m, k), dim=1), normal(g, k, n)
    if name == "exponents over 2^-40 .. 2^40":
        return spread_exponents(g, m, k), normal(g, k, n)
    if name == "one column 2^20 above the rest":
        a = torch.rand(m, k, device="cuda", generator=g) * 2.0 - 1.0
        a[:, 7] *= 2.0**20
        return a, normal(g, k, n)
    if name == "zero rows":
        a = normal(g, m, k)
        a[::3] = 0.0
        return a, normal(g, k, n)
    if name == "Inf and NaN":
        a, b = normal(g, m, k), normal(g, k, n)
        a[3, 10], a[40, 11], a[41, 12] = float("inf"), float("-inf"), float("nan")
        b[100, 9] = float("inf")
        return a, b
    if name == "cancellation to 2^-20":
        third = k // 3
        a1, b1 = normal(g, m, third), normal(g, third, n)
        a2, b2 = normal(g, m, k - 2 * third), normal(g, k - 2 * third, n)
        return torch.cat([a1, a1, a2 * 2.0**-20], dim=1), torch.cat([b1, -b1, b2], dim=0)
    if name == "subnormal results":
        return normal(g, m, k, 1e-30), normal(g, k, n, 1e-10)
    if name == "small elements of A against large rows of B":
        # benchmarks/ozaki_model.py: A's small column meets B's large row, and their products matter.
        a, b = normal(g, m, k), normal(g, k, n)
        a[:, 5] *= 2.0**-50
        b[5, :] *= 2.0**50
        return a, b
    if name == "six graded outliers a row":
        # 2^50 .. 2^25 above the rest side by side: the engine's high band holds four, two stay with the rest
        a = torch.rand(m, k, device="cuda", generator=g) * 2.0 - 1.0
        for column, power in zip(range(7, 13), range(50, 24, -5)):
            a[:, column] *= 2.0**power
        return a, normal(g, k, n)
    raise KeyError(name)


CLASSES = ["normal", "uniform [0, 1)", "softmax rows", "exponents over 2^-40 .. 2^40", "one column 2^20 above the rest",
           "zero rows", "Inf and NaN", "cancellation to 2^-20", "subnormal results",
           "small elements of A against large rows of B", "six graded outliers a row"]


def time_ms(kernel, a, b, out, repeats):
    fastsgemm.sgemm(a, b, out=out, kernel=kernel)  # warm-up: the workspace, the handles, auto's choice
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fastsgemm.sgemm(a, b, out=out, kernel=kernel)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        if times[-1] > 1000.0:  # seconds a call: one is enough
            break
    return statistics.median(times)


def errors(got, exact, scale):
    finite = torch.isfinite(exact)
    error = (got.double() - exact).abs()
    result = {"rel_error": float(torch.linalg.norm(error[finite]) / torch.linalg.norm(exact[finite])),
              "vs_abs_product": float((error[finite] / scale[finite].clamp_min(1e-300)).max())}
    if not finite.all():
        result["nonfinite_as_float64"] = bool(torch.equal(torch.isnan(got), torch.isnan(exact)) and
                                              torch.equal(torch.isposinf(got), torch.isposinf(exact)) and
                                              torch.equal(torch.isneginf(got), torch.isneginf(exact)))
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384], help="square sizes: M = N = K")
    parser.add_argument("--shapes", nargs="+", default=[], metavar="MxNxK",
                        help="other shapes, after the sizes (row 'size' holds 'MxNxK')")
    parser.add_argument("--kernels", nargs="+", default=KERNELS)
    parser.add_argument("--classes", nargs="+", default=CLASSES, choices=CLASSES)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    shapes = [(n, n, n, n) for n in args.sizes] + [
        (s, *(int(x) for x in s.split("x"))) for s in args.shapes]
    try:
        for label, m, n, k in shapes:
            g = torch.Generator(device="cuda").manual_seed(47)
            for name in args.classes:
                a, b = make_class(name, m, n, k, g)
                exact = a.double() @ b.double()
                scale = a.double().abs() @ b.double().abs()
                out = torch.empty(m, n, device="cuda")
                for kernel in args.kernels:
                    out.fill_(float("nan"))
                    ms = time_ms(kernel, a, b, out, args.repeats)
                    row = {"size": label, "class": name, "kernel": kernel, "ms": ms, **errors(out, exact, scale)}
                    rows.append(row)
                    print(f"{str(label):>16s} {name:32s} {kernel:12s} {ms:10.3f} ms  rel {row['rel_error']:.2e}  "
                          f"vs |A||B| {row['vs_abs_product']:.2e}", flush=True)
                del a, b, exact, scale, out
                torch.cuda.empty_cache()
    except KeyboardInterrupt:  # a run cut short (timeout -s INT) keeps what it measured
        print("interrupted: writing what was measured", flush=True)
    for row in rows:
        cublas = next((r["ms"] for r in rows if (r["size"], r["class"], r["kernel"]) ==
                       (row["size"], row["class"], "cublas")), None)
        normal_time = next((r["ms"] for r in rows if (r["size"], r["class"], r["kernel"]) ==
                            (row["size"], "normal", row["kernel"])), None)
        row["x_cublas"] = cublas / row["ms"] if cublas else None
        row["x_own_normal_time"] = row["ms"] / normal_time if normal_time else None
    if args.out and rows:
        meta = {"device": torch.cuda.get_device_name(), "fastsgemm_commit": git_commit(), "torch": torch.__version__,
                "x_cublas": "cuBLAS FP32's time over this kernel's (above 1: faster than cuBLAS)",
                "x_own_normal_time": "this kernel's time over its own on normal data of the same size"}
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
