"""Ctrl-C during a long cpu-rung call (host only: runs without a GPU).

The cpu rung runs in column panels of out with the GIL released, and checks
for signals between them (csrc/interruptible.c). A child process starts a
product of several seconds, sends itself SIGINT after half a second and
reports when KeyboardInterrupt arrived; out must then hold the result in the
panels that finished and its old zeros in the others, the boundary on a panel
edge (a multiple of 256 columns), both when out is written directly and when
it is written through a temporary (a strided out).
"""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# 3072 x 3072 x 8192: about 5 s at 30 GFLOP/s, in panels of 256 columns (about 0.15 s each at that speed).
M, K, N, SEED = 3072, 3072, 8192, 7
PANEL_MULTIPLE = 256
SIGNAL_AFTER_S = 0.5

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, threading, time
    import numpy as np
    import fastsgemm

    M, K, N, seed, layout, signal_after, path = (*map(int, sys.argv[1:5]), sys.argv[5], float(sys.argv[6]), sys.argv[7])
    # Python raises KeyboardInterrupt only where SIGINT was not ignored when it started, and a shell without job
    # control starts background jobs (`pytest &` in a script) with SIGINT ignored: without this line the test
    # would measure how pytest was started, not the panel checks.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    if layout == "direct":
        out = np.zeros((M, N), np.float32)
    else:  # every other column of a buffer: no row- or column-major view, so written through a temporary
        out = np.zeros((M, 2 * N), np.float32)[:, ::2]

    start = time.perf_counter()
    fastsgemm.sgemm(A, B[:, :256], kernel="cpu")  # one panel's worth, to estimate the whole run
    full_estimate = (time.perf_counter() - start) * N / 256

    sent = {}
    def interrupt():
        time.sleep(signal_after)
        sent["at"] = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    start = time.perf_counter()
    try:
        fastsgemm.sgemm(A, B, out=out, kernel="cpu")
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    ended = time.perf_counter()
    np.save(path, out)
    print(json.dumps({"outcome": outcome, "call_s": ended - start, "latency_s": ended - sent.get("at", ended),
                      "full_estimate_s": full_estimate}))
    """
)


@pytest.mark.parametrize("layout", ["direct", "strided"])
def test_ctrl_c_stops_a_cpu_call_at_a_panel_edge(layout, tmp_path):
    path = tmp_path / "out.npy"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(M), str(K), str(N), str(SEED), layout, str(SIGNAL_AFTER_S), str(path)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["outcome"] == "KeyboardInterrupt", report
    # The signal is seen at the next panel edge, and a strided out then takes the finished panels back from the
    # temporary: a few panels' time at most. A panel's time is measured in the child (its one-panel run), so that
    # a loaded machine, where everything runs slower, is not mistaken for a late check.
    panel_s = report["full_estimate_s"] * PANEL_MULTIPLE / N
    bound = max(1.0, 3 * panel_s)
    assert report["latency_s"] < bound, (f"KeyboardInterrupt came {report['latency_s']:.2f} s after SIGINT, past "
                                         f"{bound:.2f} s (three panels of {panel_s:.2f} s): {report}")
    assert report["call_s"] < report["full_estimate_s"] / 3, f"the call ran (nearly) to the end: {report}"

    out = np.load(path)
    rng = np.random.default_rng(SEED)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    written = out.any(axis=0)
    done = int(np.argmin(written)) if not written.all() else N  # the first column still all zeros
    assert 0 < done < N, f"{done} of {N} columns written: expected a part, signal after {SIGNAL_AFTER_S} s"
    assert done % PANEL_MULTIPLE == 0, f"the written columns end at {done}, not on a panel edge"
    assert written[:done].all(), "a column before the boundary was never written"
    assert not out[:, done:].any(), f"columns past {done} (unfinished panels) were written"
    reference = A.astype(np.float64) @ B[:, :done].astype(np.float64)
    error = np.linalg.norm(out[:, :done] - reference) / np.linalg.norm(reference)
    assert error <= 1e-5, f"finished columns: relative error {error:.2e} against float64"


def test_sigint_handler_that_does_not_raise_lets_the_call_finish():
    """A handler that returns normally is run between panels, and the call goes on to the full result."""
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(
            """
            import os, signal, threading, time
            import numpy as np
            import fastsgemm

            seen = []
            signal.signal(signal.SIGINT, lambda signum, frame: seen.append(time.perf_counter()))
            rng = np.random.default_rng(3)
            A = rng.uniform(-1, 1, (1024, 1024)).astype(np.float32)
            B = rng.uniform(-1, 1, (1024, 16384)).astype(np.float32)
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            D = fastsgemm.sgemm(A, B, kernel="cpu")
            assert len(seen) == 1, seen
            reference = A.astype(np.float64) @ B
            error = np.linalg.norm(D - reference) / np.linalg.norm(reference)
            assert error <= 1e-5, error
            print("ok")
            """)],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr


# ---- the panels give the one-call result whatever shares memory with out ----

# 1024^3 runs in two panels of 512 columns (csrc/interruptible.c: about 1.5e9 flops each, whole multiples of 256).
P = 1024


@pytest.fixture(scope="module")
def square():
    rng = np.random.default_rng(11)
    return tuple(rng.uniform(-1, 1, (P, P)).astype(np.float32) for _ in range(3))


@pytest.mark.parametrize("case", ["out_is_A", "out_is_A_transposed", "out_is_B", "out_is_B_transposed",
                                  "out_overlaps_C", "out_is_C", "strided_A", "strided_out"])
def test_panels_match_one_call_when_out_shares_memory(case, square):
    """No panel may read what an earlier one wrote: inputs that share memory with out are read as they were."""
    import fastsgemm

    A, B, C = square
    plain = fastsgemm.sgemm(A, B, kernel="cpu")
    with_c = fastsgemm.sgemm(A, B, C, beta=1.0, kernel="cpu")
    if case == "out_is_A":
        D = A.copy()
        got, expected = fastsgemm.sgemm(D, B, out=D, kernel="cpu"), plain
    elif case == "out_is_A_transposed":
        D = A.T.copy()  # D.T is A; out is D: A's memory in the other layout
        got, expected = fastsgemm.sgemm(D.T, B, out=D, kernel="cpu"), plain
    elif case == "out_is_B":
        D = B.copy()
        got, expected = fastsgemm.sgemm(A, D, out=D, kernel="cpu"), plain
    elif case == "out_is_B_transposed":  # each panel of out is rows of B that later panels read
        D = B.T.copy()
        got, expected = fastsgemm.sgemm(A, D.T, out=D, kernel="cpu"), plain
    elif case == "out_overlaps_C":  # C is out moved one column back: a panel's last column is the next one's C
        base = np.zeros((P, P + 1), np.float32)
        base[:, :-1] = C
        got, expected = fastsgemm.sgemm(A, B, base[:, :-1], beta=1.0, out=base[:, 1:], kernel="cpu"), with_c
    elif case == "out_is_C":  # the in-place update: each panel reads its own columns of C before writing them
        D = C.copy()
        got, expected = fastsgemm.sgemm(A, B, D, beta=1.0, out=D, kernel="cpu"), with_c
    elif case == "strided_A":
        base = np.zeros((P, 2 * P), np.float32)
        base[:, ::2] = A
        got, expected = fastsgemm.sgemm(base[:, ::2], B, kernel="cpu"), plain
    else:  # written through a temporary, panel by panel
        base = np.full((P, 2 * P), np.nan, np.float32)
        got, expected = fastsgemm.sgemm(A, B, out=base[:, ::2], kernel="cpu"), plain
        assert np.isnan(base[:, 1::2]).all(), "memory between out's columns was written"
    np.testing.assert_array_equal(got, expected)
