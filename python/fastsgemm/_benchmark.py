"""fastsgemm.benchmark: time one rung on one shape, the way the ladder is measured.

CUDA rungs run on device buffers filled with uniform random numbers (never
zeros), timed with a pair of CUDA events around each launch, all launches
queued back to back after a warm-up. When one set of inputs fits in twice the
L2 cache, several sets are rotated so that the timing is not of the cache.
The result of the first set is checked once against cuBLAS.
"""
from __future__ import annotations

import math
import numbers
import statistics
import time

import numpy as np

from . import _sgemm
from ._api import auto_choice_on, device_info, resolve_kernel
from ._registry import INDEX, REGISTRY, Kernel
from ._device_array import DeviceArray, matrix_core

MAX_INPUT_SETS = 8


def random_device_matrix(rows, cols, seed, device):
    matrix = DeviceArray.empty((rows, cols), device=device)
    _sgemm.fill_uniform(matrix.ptr, rows * cols, seed, None)
    return matrix


def _relative_error(result, reference):
    result, reference = result.astype(np.float64), reference.astype(np.float64)
    norm = np.linalg.norm(reference)
    return float(np.linalg.norm(result - reference) / (norm if norm > 0 else 1.0))


def _integer(name, value, least):
    """value as an int, or TypeError (not an integer; bool is not one here) or ValueError (below `least`) naming
    the argument and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value!r}")
    return int(value)


def _real_number(name, value):
    """value as a float, or TypeError naming the argument and the value (bool is a number here, as in sgemm)."""
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    return float(value)


def benchmark(kernel, M, N, K, *, count=1, repeats=20, warmup=5, alpha=1.0, beta=0.0, check=True, seed=0):
    """Times `kernel` on an M x N x K problem, or on a stack of `count` of them; returns a plain dict.

    kernel is a rung, "rung:config" or "auto". A stack (count > 1) is what fastsgemm.matmul runs for a
    (count, M, K) @ (count, K, N) pair of C-ordered device arrays: one call of the C core, one launch on the
    kernels that take a batch; it has no alpha, beta or C. Keys: kernel (as given; "auto" stays "auto"),
    picked (the kernel that ran: what auto chose for this shape and count), M, N, K, count, median_ms, min_ms,
    max_ms, gflops (at the median, over the whole stack), repeats, warmup, input_sets, rel_error and
    error_reference: the relative Frobenius error of the result against cuBLAS for GPU rungs, against float64
    NumPy for the cpu rung (None when check=False or for cuBLAS itself). The cpu rung is timed from the host
    with a wall clock on host arrays.
    """
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a string naming a rung or \"auto\", got {kernel!r} ({type(kernel).__name__})")
    # Checked here, before any work: a wrong type would otherwise surface as a comparison error deep inside.
    M, N, K, count = _integer("M", M, 1), _integer("N", N, 1), _integer("K", K, 1), _integer("count", count, 1)
    repeats, warmup, seed = _integer("repeats", repeats, 1), _integer("warmup", warmup, 0), _integer("seed", seed, 0)
    alpha, beta = _real_number("alpha", alpha), _real_number("beta", beta)
    if not isinstance(check, (bool, np.bool_)):
        raise TypeError(f"check must be True or False, got {check!r} ({type(check).__name__})")
    check = bool(check)
    if count > 1 and (alpha != 1.0 or beta != 0.0):
        raise ValueError(f"a stack of products (count={count}) is timed as matmul runs it: alpha 1 and beta 0, "
                         f"got alpha={alpha}, beta={beta}")
    choice = resolve_kernel(kernel, on_device=False) or auto_choice_on(None, M, N, K, count)
    flops = 2.0 * M * N * K * count
    if REGISTRY[choice.rung].device == "cpu":
        if count > 1:
            raise ValueError(f"the cpu rung is timed on one product, not a stack (count={count})")
        times, sets, error = _time_host(choice, M, N, K, repeats, warmup, alpha, beta, check, seed)
    else:
        times, sets, error = _time_device(choice, M, N, K, count, repeats, warmup, alpha, beta, check, seed)
    median = statistics.median(times)
    return {
        "kernel": kernel if kernel == "auto" else choice.name,
        "picked": choice.name,
        "M": M,
        "N": N,
        "K": K,
        "count": count,
        "median_ms": median,
        "min_ms": min(times),
        "max_ms": max(times),
        "gflops": flops / (median * 1e6),
        "repeats": repeats,
        "warmup": warmup,
        "input_sets": sets,
        "rel_error": error,
        "error_reference": None if error is None else ("float64" if REGISTRY[choice.rung].device == "cpu" else "cublas"),
    }


def _time_device(choice, M, N, K, count, repeats, warmup, alpha, beta, check, seed):
    """A stack's products lie end to end in one allocation per operand, as C-ordered (count, rows, cols) arrays."""
    info = device_info()
    device = info["device"]
    set_bytes = 4 * count * (M * K + K * N + M * N * (2 if beta != 0.0 else 1))
    sets = 1 if set_bytes >= 2 * info["l2_cache_bytes"] else min(MAX_INPUT_SETS, math.ceil(2 * info["l2_cache_bytes"] / set_bytes))
    steps = (M * K, K * N, M * N)
    arrays = []
    for s in range(sets):
        a = random_device_matrix(count * M, K, seed * 1000 + 4 * s, device)
        b = random_device_matrix(count * K, N, seed * 1000 + 4 * s + 1, device)
        c = random_device_matrix(M, N, seed * 1000 + 4 * s + 2, device) if beta != 0.0 else None
        out = random_device_matrix(count * M, N, seed * 1000 + 4 * s + 3, device)
        arrays.append((a, b, c, out))

    def first_products(group):  # each operand's first matrix: its stack's others follow at `steps`
        a, b, c, out = group
        return (_first(a, M), _first(b, K), matrix_core(c) if c is not None else None, _first(out, M))

    core = [first_products(group) + ((count, *steps) if count > 1 else ()) for group in arrays]
    times = _sgemm.time_gemm(choice, core, alpha, beta, warmup, repeats, None)

    error = None
    if check and choice.name != "cublas":
        a, b, c, _ = arrays[0]
        mine = DeviceArray.empty((count * M, N), device=device)
        reference = DeviceArray.empty((count * M, N), device=device)
        for target, kernel in ((mine, choice), (reference, Kernel(INDEX["cublas"], -1))):
            if count > 1:
                _sgemm.gemm_batch(kernel, _first(a, M), _first(b, K), _first(target, M), count, *steps, None)
            else:
                c_core = matrix_core(c) if c is not None else None
                _sgemm.gemm(kernel, matrix_core(a), matrix_core(b), c_core, matrix_core(target), alpha, beta, None)
        error = _relative_error(mine.numpy(), reference.numpy())
    return times, sets, error


def _first(stack, rows):
    """The first `rows` rows of a row-major device matrix, as the C core takes an operand."""
    pointer, _, cols, row_stride, col_stride = matrix_core(stack)
    return (pointer, rows, cols, row_stride, col_stride)


def _time_host(choice, M, N, K, repeats, warmup, alpha, beta, check, seed):
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = rng.uniform(-1, 1, (M, N)).astype(np.float32) if beta != 0.0 else None
    out = np.empty((M, N), np.float32)
    times = []
    for r in range(warmup + repeats):
        start = time.perf_counter()
        _sgemm.gemm(choice, A, B, C, out, alpha, beta, None)
        if r >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    error = None
    if check:
        reference = alpha * (A.astype(np.float64) @ B)
        if C is not None:
            reference += beta * C
        error = _relative_error(out, reference)  # against float64: no cuBLAS on the host
    return times, 1, error
