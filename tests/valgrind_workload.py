"""A CPU-path workload for valgrind (tests/test_valgrind.py): the cpu rung on
every layout and on empty shapes, the error paths, and both DLPack capsule
kinds consumed and left unconsumed. No GPU is touched."""
import numpy as np

import fastsgemm
import fastsgemm._sgemm as core


def main():
    rng = np.random.default_rng(0)
    for m, n, k in [(1, 1, 1), (17, 33, 65), (64, 3, 130), (0, 5, 3), (4, 6, 0)]:
        A = rng.standard_normal((m, k), dtype=np.float32)
        B = rng.standard_normal((k, n), dtype=np.float32)
        C = rng.standard_normal((m, n), dtype=np.float32)
        expected = 0.5 * (A.astype(np.float64) @ B) + 2 * C
        for a in (A, np.asfortranarray(A), A[::-1, ::-1].copy()[::-1, ::-1]):
            out = np.empty((n, m), np.float32).T  # column-major out
            fastsgemm.sgemm(a, B, C, alpha=0.5, beta=2.0, out=out, kernel="cpu")
            assert np.allclose(out, expected, atol=1e-4)
            fastsgemm.sgemm(a, B, kernel="cpu")
    for bad in (lambda: fastsgemm.sgemm(A, B.astype(np.float64), kernel="cpu"),
                lambda: fastsgemm.sgemm(A, A.T.copy().T[:, :1], kernel="cpu")):
        try:
            bad()
        except (TypeError, ValueError):
            pass

    class Owner:
        pass

    owner = Owner()
    for versioned in (True, False):
        capsule = core.dlpack_export(owner, 4096, 3, 5, 5, 1, 1, 0, versioned)
        holder = core.dlpack_import(capsule)[0]  # consumed: the holder calls the deleter
        del capsule, holder
        unused = core.dlpack_export(owner, 4096, 3, 5, 5, 1, 1, 0, versioned)
        del unused  # never consumed: the capsule's destructor calls the deleter
    print("valgrind workload: ok")


if __name__ == "__main__":
    main()
