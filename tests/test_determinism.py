"""Determinism: the same inputs, shape and kernel give the same bits, call after call (docs/guide.md, "Determinism").

Every rung and configuration of the registry is held to it, on a small product and on a long-K one that the
rungs split into K slices (summed in slice order by one kernel, never with atomics), from host arrays and from
device arrays, and through fastsgemm.matmul on a stack. Outputs are poisoned with NaN before each call, so a
call that wrote nothing would show."""
import numpy as np
import pytest

import fastsgemm
from conftest import rung_params

REPEATS = 4
# (M, N, K): one product that fits a tile or two, and one whose K the rungs split (csrc/operands.c, K > 4096).
SHAPES = [(67, 45, 131), (129, 96, 6000)]


def same_bits(results):
    first = results[0].view(np.uint32)
    return all(np.array_equal(first, other.view(np.uint32)) for other in results[1:])


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("kernel", rung_params())
def test_repeated_calls_give_the_same_bits(kernel, shape, rng):
    m, n, k = shape
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    host_results = []
    for _ in range(REPEATS):
        out = np.full((m, n), np.nan, dtype=np.float32)
        fastsgemm.sgemm(a, b, out=out, kernel=kernel)
        host_results.append(out)
    assert not np.isnan(host_results[0]).any()
    assert same_bits(host_results)
    if not kernel.startswith("cpu"):
        da, db = fastsgemm.to_device(a), fastsgemm.to_device(b)
        device_results = []
        for _ in range(REPEATS):
            out = fastsgemm.to_device(np.full((m, n), np.nan, dtype=np.float32))
            fastsgemm.sgemm(da, db, out=out, kernel=kernel)
            device_results.append(out.numpy())
        assert not np.isnan(device_results[0]).any()
        assert same_bits(device_results)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "cublas", "tf32x3", "warptile"])
def test_stacks_give_the_same_bits_on_every_call(kernel, rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rng.standard_normal((6, 80, 300), dtype=np.float32)).cuda()
    b = torch.from_numpy(rng.standard_normal((6, 300, 50), dtype=np.float32)).cuda()
    results = []
    for _ in range(REPEATS):
        out = torch.full((6, 80, 50), float("nan"), device="cuda")
        fastsgemm.matmul(a, b, out=out, kernel=kernel)
        results.append(out.cpu().numpy())
    assert not np.isnan(results[0]).any()
    assert same_bits(results)
