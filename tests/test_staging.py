"""Large NumPy operands cross to the GPU and back through pinned buffers and several host threads
(csrc/staging.c). The results must be those of any other path: exact copies, every layout, several threads
at once (one stages, the others take the runtime's path), and chunk edges that fall mid-matrix."""
import threading

import numpy as np
import pytest

import fastsgemm
from conftest import random_matrix

pytestmark = pytest.mark.gpu


def reference(A, B):
    return A.astype(np.float64) @ B.astype(np.float64)


def check(got, A, B):
    expected = reference(A, B)
    error = np.linalg.norm(got - expected) / np.linalg.norm(expected)
    assert error < 1e-5, error


@pytest.mark.parametrize("layout", ["row", "col", "padded", "padded col"])
def test_large_host_operands_in_every_layout(rng, layout):
    # 2100 x 1500 floats is 12.6 MB: two chunks of 8 MiB and a part, so chunk edges fall inside the matrix.
    A, B = random_matrix(rng, 2100, 1500), random_matrix(rng, 1500, 1300)

    def laid_out(x):
        if layout == "row":
            return x
        if layout == "col":
            return np.asfortranarray(x)
        if layout == "padded":
            base = np.full((x.shape[0], x.shape[1] + 7), np.nan, np.float32)
            base[:, 3:-4] = x
            return base[:, 3:-4]
        base = np.full((x.shape[1], x.shape[0] + 5), np.nan, np.float32)
        base[:, 2:-3] = x.T
        return base[:, 2:-3].T

    out_base = np.full((2100, 1300 + 9), np.nan, np.float32)
    out = out_base[:, 4:-5] if "padded" in layout else None
    got = fastsgemm.sgemm(laid_out(A), laid_out(B), out=out, kernel="warptile")
    check(got, A, B)
    if out is not None:
        assert np.isnan(out_base[:, :4]).all() and np.isnan(out_base[:, -5:]).all()  # nothing outside out


def test_copies_through_staging_are_exact(rng):
    X = random_matrix(rng, 3001, 1000)  # 12 MB; an odd row count leaves a short last chunk
    device = fastsgemm.DeviceArray.from_numpy(X)
    back = device.numpy()
    assert np.array_equal(back, X)


def test_threads_staging_at_once_all_get_the_right_answer(rng):
    pairs = [(random_matrix(rng, 1200, 900), random_matrix(rng, 900, 1100)) for _ in range(6)]
    results = [None] * len(pairs)

    def work(i):
        results[i] = fastsgemm.sgemm(*pairs[i], kernel="warptile")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (A, B), got in zip(pairs, results):
        check(got, A, B)


def test_in_place_update_of_a_large_host_matrix(rng):
    """out = C, beta = 1: C crosses to the GPU before out's pages are faulted in for the copy back, and the
    fault-in leaves their contents alone."""
    A, B, C = random_matrix(rng, 2100, 700), random_matrix(rng, 700, 1300), random_matrix(rng, 2100, 1300)
    expected = A.astype(np.float64) @ B.astype(np.float64) + C.astype(np.float64)
    fastsgemm.sgemm(A, B, C, beta=1.0, out=C, kernel="warptile")
    assert np.linalg.norm(C - expected) / np.linalg.norm(expected) < 1e-5


def test_a_failed_call_leaves_a_large_out_as_it_was(rng):
    """The fault-in runs only after the kernel is queued; a call refused before that leaves out untouched."""
    A, B = random_matrix(rng, 2100, 700), random_matrix(rng, 700, 1300)
    out = rng.standard_normal((2100, 1300), dtype=np.float32)
    before = out.copy()
    with pytest.raises(ValueError):
        fastsgemm.sgemm(A, B, None, beta=2.0, out=out)  # beta without C
    assert np.array_equal(out, before)

