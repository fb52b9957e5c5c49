"""A model of `ozaki`'s numbers on the CPU, without a GPU (issue 47): which rows its range check sends to the slow
path, and what error the integer path alone would have given on them.

    python benchmarks/ozaki_model.py [--size 256] [--k 4096] [--moduli 8] [--out ozaki-model.json]

What it models, from kernels/ladder/24_ozaki.cu:
- the bits a product may use, floor(log2(P / 4K)) for the product P of the first `moduli` moduli, split between
  A (the larger half) and B, at most 30 each;
- each row of A and column of B scaled by the power of two that puts its largest finite element in
  [2^(bits-1), 2^bits), then rounded to integers (round half to even, as rint);
- the integer product, exact (int64 here; residues and the Chinese remainder theorem on the GPU), scaled back
  and rounded to float32 once;
- scale_kernel's range check: a row or column is out of range where it holds Inf or NaN, where its rounding errors
  sum to more than kRoundingShare (4) units of 2^-bits of its sum of magnitudes, or where its elements scaled below
  one unit carry more than kLostShare (2^-30) of it.

For each of issue 47's input classes (benchmarks/ozaki_classes.py's, at a size the CPU can hold) it reports:
- the share of A's rows and B's columns the check flags;
- the relative Frobenius error against float64 and the largest error against |A| |B|, for the integer path
  alone on every row (no slow path), for what the kernel returns (flagged rows and columns as float64 dot
  products, as the slow path gives), and for NumPy's float32 product (FP32 arithmetic, a stand-in for cuBLAS
  FP32; the order of its sums differs from cuBLAS's).

The integer product is exact, so the integer path's error here is the scheme's error, which the GPU computes
exactly the same way, up to the one rounding of the result to float32.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
from pathlib import Path

import numpy as np

MODULI = [256, 255, 253, 251, 247, 241, 239, 233]  # kModuli
ROUNDING_SHARE = 4.0  # kRoundingShare
LOST_SHARE = 2.0**-30  # kLostShare


def product_bits(moduli: int, k: int) -> tuple[int, int]:
    """(bits_a, bits_b) for depth k, as run_panel derives them."""
    p = math.prod(MODULI[:moduli])
    room = p // 4 // k
    bits = room.bit_length() - 1
    return min((bits + 1) // 2, 30), min(bits // 2, 30)


def scale_rows(x: np.ndarray, bits: int, by_mass: bool | str = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of x (float32) scaled and rounded: (integers as int64, each row's shift, each row's flag).
    by_mass: the row's scale puts its sum of magnitudes, rather than its largest element, at K 2^bits (the same
    bound on the product's sums, |C| <= K 2^(bits_a + bits_b), so the same moduli hold it): a row whose mass sits
    in few elements gets log2(largest / mean) more bits. by_mass="rms": its root mean square instead, for both
    operands (|C| <= |a|_2 |b|_2 <= K 2^(bits_a + bits_b) by Cauchy-Schwarz): log2(largest / rms) more bits on
    each side."""
    x64 = x.astype(np.float64)
    finite = np.isfinite(x64)
    special = ~finite.all(axis=1)
    magnitude = np.where(finite, np.abs(x64), 0.0)
    largest = magnitude.max(axis=1)
    if by_mass == "rms":  # the root mean square: the row's 2-norm stays below sqrt(K) 2^bits
        largest = np.sqrt((magnitude ** 2).sum(axis=1) / x.shape[1])
    elif by_mass:  # the mean magnitude in place of the largest: the row's sum stays at K 2^bits at most
        largest = magnitude.sum(axis=1) / x.shape[1]
    top = np.where(largest > 0, np.floor(np.log2(np.where(largest > 0, largest, 1.0))), 0.0)
    # ilogb for float32 values: log2 of an exact power of two is exact, and floor handles the rest.
    shift = np.where(largest > 0, bits - 1 - top, 0.0).astype(np.int64)
    size = np.abs(np.where(finite, x64, 0.0)) * np.exp2(shift.astype(np.float64))[:, None]
    total = size.sum(axis=1)
    rounding = np.abs(np.rint(size) - size).sum(axis=1)
    lost = np.where(size < 1.0, size, 0.0).sum(axis=1)
    flagged = special | (rounding > ROUNDING_SHARE * 2.0**-bits * total) | (lost > LOST_SHARE * total)
    integers = np.rint(np.where(finite, x64, 0.0) * np.exp2(shift.astype(np.float64))[:, None]).astype(np.int64)
    return integers, shift, flagged


def integer_path(a: np.ndarray, b: np.ndarray, moduli: int, by_mass: bool | str = False):
    """The scheme's result on every row and column, and the flags: (C as float32, rows flagged, columns flagged,
    the largest scaled integer of A in bits)."""
    bits_a, bits_b = product_bits(moduli, a.shape[1])
    ia, sa, fa = scale_rows(a, bits_a, by_mass)
    ib, sb, fb = scale_rows(b.T, bits_b, "rms" if by_mass == "rms" else False)
    exact = ia @ ib.T  # |entries| <= K 2^(bits_a + bits_b) <= P / 4 < 2^63: exact in int64
    scaled = exact.astype(np.float64) * np.exp2(-(sa[:, None] + sb[None, :]).astype(np.float64))
    return scaled.astype(np.float32), fa, fb, int(np.abs(ia).max()).bit_length()


def pair_check(a: np.ndarray, b: np.ndarray, moduli: int, tau: float, levels: int = 6):
    """A check on the pairs, with rows and columns scaled by their root mean square: the integer path's error bound
    for each output against a lower bound of |A| |B| there. Returns (C as the integer path gives it, the outputs
    flagged, the error bound U, the lower bound L).

    U: with g_i and h_j the grid steps of A's row i and B's column j (2^-shift), rounding to nearest moves each
    element by at most half a step, so |C_ij - C'_ij| <= g_i/2 |b_j|_1 + h_j/2 |a_i|_1 + K g_i h_j / 4.
    L: |A| |B| with every magnitude rounded down to a multiple of 2^-levels of its row's (column's) largest, the
    product of two small integer matrices (on the GPU, one more INT8 product): never above |A| |B|.
    An output is flagged where U > tau L, or where its row or column holds Inf or NaN."""
    bits_a, bits_b = product_bits(moduli, a.shape[1])
    ia, sa, fa = scale_rows(a, bits_a, "rms")
    ib, sb, fb = scale_rows(b.T, bits_b, "rms")
    exact = ia @ ib.T
    scaled = (exact.astype(np.float64) * np.exp2(-(sa[:, None] + sb[None, :]).astype(np.float64))).astype(np.float32)
    a64 = np.where(np.isfinite(a), np.abs(a.astype(np.float64)), 0.0)
    b64 = np.where(np.isfinite(b), np.abs(b.astype(np.float64)), 0.0)
    # A row (column) of zeros rounds exactly: no step to move by.
    g = np.where(a64.max(axis=1) > 0, np.exp2(-sa.astype(np.float64)), 0.0)
    h = np.where(b64.max(axis=0) > 0, np.exp2(-sb.astype(np.float64)), 0.0)
    k = a.shape[1]
    bound = (g[:, None] / 2) * b64.sum(axis=0)[None, :] + (h[None, :] / 2) * a64.sum(axis=1)[:, None] \
        + k * g[:, None] * h[None, :] / 4
    unit_a = np.where(a64.max(axis=1) > 0, a64.max(axis=1), 1.0) * 2.0**-levels
    unit_b = np.where(b64.max(axis=0) > 0, b64.max(axis=0), 1.0) * 2.0**-levels
    qa = np.floor(a64 / unit_a[:, None]).astype(np.int64)  # 0 .. 2^levels
    qb = np.floor(b64 / unit_b[None, :]).astype(np.int64)
    lower = (qa @ qb).astype(np.float64) * unit_a[:, None] * unit_b[None, :]
    special = ~np.isfinite(a).all(axis=1)[:, None] | ~np.isfinite(b).all(axis=0)[None, :]
    flagged = special | (bound > tau * lower)
    return scaled, flagged, bound, lower


def high_band(x: np.ndarray, gap: float, most: int) -> np.ndarray:
    """Each row's high band, as a mask: its largest elements, in order, while each is more than 2^gap times the
    root mean square (over the row's whole depth) of the elements below it, and at most `most` of them. A row of
    ordinary data has none; a softmax row, its few dominant elements; a row with one outlier, that element."""
    m = np.where(np.isfinite(x), np.abs(x.astype(np.float64)), 0.0)
    order = np.argsort(-m, axis=1, kind="stable")
    ordered = np.take_along_axis(m, order, axis=1)
    # The squares below each position, summed from the smallest up: subtracting the top ones from the row's whole
    # sum would cancel (2^100 against ordinary squares).
    below = np.cumsum((ordered ** 2)[:, ::-1], axis=1)[:, ::-1]
    below = np.concatenate([below[:, 1:], np.zeros((x.shape[0], 1))], axis=1)[:, :most]
    rest = np.sqrt(below / x.shape[1])
    leading = np.cumprod(ordered[:, :most] > 2.0**gap * rest, axis=1).astype(bool)
    mask = np.zeros(x.shape, bool)
    np.put_along_axis(mask, order[:, :most], leading, axis=1)
    return mask & (m > 0)


def band_check(a: np.ndarray, b: np.ndarray, moduli: int, tau: float, gap: float, most: int, levels: int = 6,
               lower_from: str = "magnitudes"):
    """pair_check with each row of A and column of B split in two: its high band (high_band: few elements, kept
    exact and multiplied in double, A's high band against all of B and the rest of A against B's) and the rest, on
    the integer path scaled by the rest's own root mean square. The check bounds the integer path's error (the
    rest's rounding) against a lower bound of the whole |A| |B|: the rests' magnitudes product, each on the 1/64
    grid of its own largest element, plus the high bands' terms, exact (on the GPU, beside their products).
    lower_from="result": no magnitudes' product; the lower bound of |A| |B| is |C~| - U instead (|A| |B| >= |C| >=
    |C~| - U, C~ the result before its rounding), as a check without the magnitudes' INT8 plane would have it.
    Returns (C, the outputs flagged, U, the high bands' shares of A's and B's elements)."""
    band_a, band_b = high_band(a, gap, most), high_band(b.T, gap, most).T
    rest_a, rest_b = np.where(band_a, 0.0, a).astype(np.float32), np.where(band_b, 0.0, b).astype(np.float32)
    ints, _, bound, lower = pair_check(rest_a, rest_b, moduli, tau, levels)
    high_a, high_b = np.where(band_a, a, 0.0).astype(np.float64), np.where(band_b, b, 0.0).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        high = high_a @ b.astype(np.float64) + rest_a.astype(np.float64) @ high_b
        # the integer path's result, before its rounding to float32 (pair_check rounds it; the difference is
        # within the float32 rounding the sum gets anyway)
        result = (ints.astype(np.float64) + high).astype(np.float32)
        magnitudes = lambda x: np.where(np.isfinite(x), np.abs(x.astype(np.float64)), 0.0)  # noqa: E731
        lower = lower + np.abs(high_a) @ magnitudes(b) + magnitudes(rest_a) @ np.abs(high_b)
        if lower_from == "result":
            lower = np.maximum(np.abs(ints.astype(np.float64) + high) - bound, 0.0)
    special = ~np.isfinite(a).all(axis=1)[:, None] | ~np.isfinite(b).all(axis=0)[None, :]
    flagged = special | (bound > tau * lower)
    return result, flagged, bound, float(band_a.mean()), float(band_b.mean())


def errors(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> dict:
    finite = np.isfinite(want)
    g, w = got[finite].astype(np.float64), want[finite]
    norm = np.linalg.norm(w)
    with np.errstate(invalid="ignore", divide="ignore"):
        against_bound = np.where(bound[finite] > 0, np.abs(g - w) / bound[finite], 0.0)
    return {"relative": float(np.linalg.norm(g - w) / norm) if norm > 0 else float(np.linalg.norm(g - w)),
            "against_ab": float(np.nanmax(against_bound)) if against_bound.size else 0.0,
            "non_finite_as_float64": bool(np.array_equal(np.isnan(got), np.isnan(want))
                                          and np.array_equal(np.isinf(got), np.isinf(want)))}


def make_class(name: str, n: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """ozaki_classes.py's classes, n x k times k x n, in NumPy."""
    normal = lambda r, c, s=1.0: (rng.standard_normal((r, c)) * s).astype(np.float32)  # noqa: E731
    if name == "normal":
        return normal(n, k), normal(k, n)
    if name == "uniform [0, 1)":
        return rng.random((n, k), np.float32), rng.random((k, n), np.float32)
    if name == "softmax rows":
        logits = 3.0 * rng.standard_normal((n, k))
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32), normal(k, n)
    if name == "exponents over 2^-40 .. 2^40":
        a = (rng.choice([-1.0, 1.0], (n, k)) * (rng.random((n, k)) + 1.0) * np.exp2(rng.integers(-40, 41, (n, k))))
        return a.astype(np.float32), normal(k, n)
    if name == "one column 2^20 above the rest":
        a = (rng.random((n, k)) * 2.0 - 1.0).astype(np.float32)
        a[:, 7] *= np.float32(2.0**20)
        return a, normal(k, n)
    if name == "sixteen columns 2^20 above the rest":  # more outliers a row than a high band of four holds
        a = (rng.random((n, k)) * 2.0 - 1.0).astype(np.float32)
        a[:, 7:k:k // 16] *= np.float32(2.0**20)
        return a, normal(k, n)
    if name == "zero rows":
        a = normal(n, k)
        a[::3] = 0.0
        return a, normal(k, n)
    if name == "Inf and NaN":
        a, b = normal(n, k), normal(k, n)
        a[3, 10], a[40, 11], a[41, 12] = np.inf, -np.inf, np.nan
        b[100, 9] = np.inf
        return a, b
    if name == "cancellation to 2^-20":
        third = k // 3
        a1, b1 = normal(n, third), normal(third, n)
        a2, b2 = normal(n, k - 2 * third), normal(k - 2 * third, n)
        return (np.concatenate([a1, a1, a2 * np.float32(2.0**-20)], axis=1),
                np.concatenate([b1, -b1, b2], axis=0))
    if name == "small elements of A against large rows of B":
        # Column 5 of A near 2^-50 times the rest, row 5 of B near 2^50 times the rest: their products are as
        # large as the others, but A's small elements lie far below its rows' grids.
        a, b = normal(n, k), normal(k, n)
        a[:, 5] *= np.float32(2.0**-50)
        b[5, :] *= np.float32(2.0**50)
        return a, b
    raise KeyError(name)


CLASSES = ["normal", "uniform [0, 1)", "softmax rows", "exponents over 2^-40 .. 2^40",
           "one column 2^20 above the rest", "zero rows", "Inf and NaN", "cancellation to 2^-20",
           "small elements of A against large rows of B", "sixteen columns 2^20 above the rest"]


def class_data(name: str, index: int, args):
    """Class `name`'s operands (seeded by its index) and what every table compares with: (A, B, the float64
    product, |A| |B| in float64, NumPy's float32 product)."""
    a, b = make_class(name, args.size, args.k, np.random.default_rng([47, index]))
    with np.errstate(invalid="ignore", over="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
        ab = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        fp32 = a @ b
    return a, b, want, ab, fp32


def cell(e: dict) -> str:
    return f"{e['relative']:.1e} / {e['against_ab']:.1e}"


def write_out(args, **fields) -> None:
    """The rows as JSON at --out (if given), with the commit of the code that made them."""
    if not args.out:
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    args.out.write_text(json.dumps({"meta": {"device": "none (a NumPy model on the CPU)", "git_commit": commit},
                                    "size": args.size, "k": args.k, "moduli": args.moduli, **fields}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="M = N")
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--moduli", type=int, default=8)
    parser.add_argument("--classes", nargs="+", default=CLASSES)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pairs", type=float, metavar="TAU",
                        help="instead: the check on pairs (pair_check) with this tau, rows and columns scaled by RMS")
    parser.add_argument("--bands", type=float, metavar="TAU",
                        help="instead: the check on pairs with each row's high band taken out (band_check)")
    parser.add_argument("--gap", type=float, default=4.0, help="--bands: a high element is 2^gap times the rest's RMS")
    parser.add_argument("--most", type=int, default=4, help="--bands: at most this many high elements a row")
    parser.add_argument("--lower", choices=["magnitudes", "result"], default="magnitudes",
                        help="--bands: |A| |B|'s lower bound from the magnitudes' product (the kernel's), or from the "
                             "result itself (|C~| - U: no magnitudes' plane)")
    args = parser.parse_args()
    if args.pairs:
        pairs(args)
        return
    if args.bands:
        bands(args)
        return
    bits = product_bits(args.moduli, args.k)
    print(f"{args.size} x {args.size} x {args.k}, {args.moduli} moduli: bits {bits[0]} (A) + {bits[1]} (B)")
    print(f"{'class':<32} {'rows':>6} {'cols':>6}   {'integers alone':>19}   {'as the kernel':>19}   "
          f"{'FP32 (NumPy)':>19}   {'by mass (A bits)':>24}   {'by rms (A bits)':>24}")
    rows = []
    for index, name in enumerate(args.classes):
        a, b, want, bound, fp32 = class_data(name, index, args)
        alone, flag_a, flag_b, _ = integer_path(a, b, args.moduli)
        by_mass, _, _, top_bits = integer_path(a, b, args.moduli, by_mass=True)
        by_rms, _, _, rms_bits = integer_path(a, b, args.moduli, by_mass="rms")
        kernel = alone.copy()
        slow = flag_a[:, None] | flag_b[None, :]
        with np.errstate(invalid="ignore", over="ignore"):
            kernel[slow] = want[slow].astype(np.float32)  # the slow path's double dot, rounded once
            # The integer path cannot carry Inf or NaN: they come only from flagged rows and columns.
        row = {"class": name, "rows_flagged": float(flag_a.mean()), "cols_flagged": float(flag_b.mean()),
               "integers_alone": errors(alone, want, bound), "as_the_kernel": errors(kernel, want, bound),
               "by_mass": errors(by_mass, want, bound), "by_mass_integer_bits": top_bits,
               "by_rms": errors(by_rms, want, bound), "by_rms_integer_bits": rms_bits,
               "fp32_numpy": errors(fp32, want, bound)}
        rows.append(row)
        print(f"{name:<32} {row['rows_flagged']:6.0%} {row['cols_flagged']:6.0%}   {cell(row['integers_alone']):>19}   "
              f"{cell(row['as_the_kernel']):>19}   {cell(row['fp32_numpy']):>19}   "
              f"{cell(row['by_mass']):>19} ({top_bits})   {cell(row['by_rms']):>19} ({rms_bits})")
    write_out(args, bits=bits, rows=rows)


def pairs(args) -> None:
    """The check on pairs, per class: the outputs it flags, whether its bound held (no output's error above U), and
    the error with the flagged outputs computed exactly (as a slow or gathered path would) against FP32's."""
    print(f"{args.size} x {args.size} x {args.k}, {args.moduli} moduli, tau {args.pairs:g}")
    print(f"{'class':<45} {'flagged':>8} {'bound held':>10}   {'integers, flagged exact':>23}   {'FP32 (NumPy)':>19}")
    rows = []
    for index, name in enumerate(args.classes):
        a, b, want, ab, fp32 = class_data(name, index, args)
        got, flagged, bound, _ = pair_check(a, b, args.moduli, args.pairs)
        finite = np.isfinite(want) & ~flagged
        error = np.abs(got[finite].astype(np.float64) - want[finite])
        held = bool((error <= bound[finite] + 2.0**-24 * np.abs(want[finite])).all())  # plus the float32 rounding
        result = got.copy()
        with np.errstate(invalid="ignore", over="ignore"):
            result[flagged] = want[flagged].astype(np.float32)
        row = {"class": name, "flagged": float(flagged.mean()), "bound_held": held,
               "result": errors(result, want, ab), "fp32_numpy": errors(fp32, want, ab)}
        rows.append(row)
        print(f"{name:<45} {row['flagged']:8.2%} {str(held):>10}   {cell(row['result']):>23}   "
              f"{cell(row['fp32_numpy']):>19}")
    write_out(args, tau=args.pairs, rows=rows)


def bands(args) -> None:
    """band_check per class: the outputs flagged, the high bands' shares, and the error with the flagged outputs
    computed exactly, against FP32's."""
    print(f"{args.size} x {args.size} x {args.k}, {args.moduli} moduli, tau {args.bands:g}, gap 2^{args.gap:g}, "
          f"at most {args.most} a row, lower bound from the {args.lower}")
    print(f"{'class':<45} {'flagged':>8} {'A high':>7} {'B high':>7}   {'integers + bands, flagged exact':>31}   "
          f"{'FP32 (NumPy)':>19}")
    rows = []
    for index, name in enumerate(args.classes):
        a, b, want, ab, fp32 = class_data(name, index, args)
        got, flagged, _, high_a, high_b = band_check(a, b, args.moduli, args.bands, args.gap, args.most,
                                                     lower_from=args.lower)
        result = got.copy()
        with np.errstate(invalid="ignore", over="ignore"):
            result[flagged] = want[flagged].astype(np.float32)
        row = {"class": name, "flagged": float(flagged.mean()), "high_a": high_a, "high_b": high_b,
               "result": errors(result, want, ab), "fp32_numpy": errors(fp32, want, ab)}
        rows.append(row)
        print(f"{name:<45} {row['flagged']:8.2%} {high_a:7.3%} {high_b:7.3%}   {cell(row['result']):>31}   "
              f"{cell(row['fp32_numpy']):>19}")
    write_out(args, tau=args.bands, gap=args.gap, most=args.most, lower=args.lower, rows=rows)


if __name__ == "__main__":
    main()
