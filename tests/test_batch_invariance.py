"""The same bits whatever the batch (issue 47, part 4): with kernel="ozaki" (and "ozaki:lesson") a row's result
depends on that row of A and on B alone, not on the other rows of A or on how many there are.

Why it holds: each row of A is scaled by a power of two of its own, each column of B by its own; the integer
products are exact; each output is reconstructed, checked and (where the check sends it there) recomputed in double
on its own; K runs in panels of at most 16384 added in order; and the planner never cuts ozaki's K (the registry's
fill, whole_k), so nothing depends on M. Where the workspace cannot be had, or the grid would pass its limits, the
call runs tf32x3 instead (other bits), which these sizes do not provoke; the docs say so. ozaki:7 keeps the
planner's slices past K = 4096 (its accuracy needs them: registry.c), so it has the property up to K = 4096 only.

A block of 8 rows is computed alone, then inside products of M = 8 to 16384 rows at the start, the middle and the
end, with other random rows around it, from host and device arrays, in a stack of products sharing B, and with a K
long enough (20000) that a kernel under the planner's wave rule would have its K cut for small M. The block's rows
must be the same bits every time. Kernels without the property (cuBLAS, the tensor-core tf32x3 family, auto across
shapes) are not tested for it: docs/guarantees.md says why.
"""
import numpy as np
import pytest

import fastsgemm
from conftest import random_matrix

KERNELS = ["ozaki", "ozaki:lesson"]
BLOCK = 8
ROWS = [8, 9, 64, 1000, 4096, 16384]


def placements(m):
    """Where the block sits in a product of m rows: first, in the middle, last (the same place once where m = 8)."""
    return sorted({0, (m - BLOCK) // 2, m - BLOCK})


def with_block(pool, block, m, at):
    """The first m rows of `pool` with the block written over rows at .. at + 7."""
    a = pool[:m].copy()
    a[at:at + BLOCK] = block
    return a


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("k", [1000, 20000], ids=["k1000", "k20000"])
def test_a_block_of_rows_is_the_same_bits_in_any_batch(kernel, k, rng):
    n = 256
    block, b = random_matrix(rng, BLOCK, k), random_matrix(rng, k, n)
    pool = random_matrix(rng, max(ROWS), k)  # the other rows, made once
    alone = fastsgemm.sgemm(block, b, kernel=kernel).view(np.uint32)
    b_device = fastsgemm.to_device(b)
    for m in ROWS:
        for at in placements(m):
            a = with_block(pool, block, m, at)
            host = fastsgemm.sgemm(a, b, kernel=kernel)
            np.testing.assert_array_equal(host[at:at + BLOCK].view(np.uint32), alone,
                                          err_msg=f"{kernel}: rows {at}..{at + BLOCK - 1} of {m}, host arrays")
            device = fastsgemm.sgemm(fastsgemm.to_device(a), b_device, kernel=kernel).numpy()
            np.testing.assert_array_equal(device[at:at + BLOCK].view(np.uint32), alone,
                                          err_msg=f"{kernel}: rows {at}..{at + BLOCK - 1} of {m}, device arrays")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_block_of_rows_is_the_same_bits_in_a_stack(kernel, rng):
    """A stack of products sharing B (a batch of inputs through one layer), as torch CUDA tensors: fastsgemm.matmul
    runs the stack as one tall product of count x 64 rows on the device, and the block, in any product of the
    stack, gives the bits it gives alone."""
    torch = pytest.importorskip("torch")
    k, n, count, m = 1000, 256, 6, 64
    block, b = random_matrix(rng, BLOCK, k), random_matrix(rng, k, n)
    alone = fastsgemm.sgemm(block, b, kernel=kernel).view(np.uint32)
    stack = np.stack([random_matrix(rng, m, k) for _ in range(count)])
    stack[3, 20:20 + BLOCK] = block
    result = fastsgemm.matmul(torch.from_numpy(stack).cuda(), torch.from_numpy(b).cuda(), kernel=kernel)
    np.testing.assert_array_equal(result.cpu().numpy()[3, 20:20 + BLOCK].view(np.uint32), alone)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_planner_never_cuts_ozakis_k(kernel):
    """The registry says so (fill's whole_k), which is what makes M irrelevant past K = 4096 (no GPU needed); and not
    of ozaki:7, whose accuracy at a long K needs the planner's slices."""
    rung, _, config = kernel.partition(":")
    info = next(k for k in fastsgemm.kernels() if k.name == rung)
    fill = next(c for c in info.configs if c.name == config).fill if config else info.fill
    assert fill is not None and len(fill) == 5 and fill[4] is True, fill
    seven = next(c for c in next(k for k in fastsgemm.kernels() if k.name == "ozaki").configs if c.name == "7")
    assert seven.fill[4] is False, seven.fill
