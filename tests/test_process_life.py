"""A process's life around fastsgemm: a fork after CUDA was initialized gives a clear error in the child (never a
hang or a crash), a fork before it leaves the child free to use the GPU, a multiprocessing pool started with
"spawn" works, and the interpreter exits cleanly with work still queued while torch and CuPy tear down too.
Each case runs in a subprocess of its own."""
import importlib.util
import subprocess
import sys
import textwrap

import pytest


def run_python(code, timeout=300):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


CHILD_REPORT = """
    import os, numpy as np, fastsgemm

    def product_in_child():
        '''In the child: "ok", or the error's class and message. Exits the child without running atexit.'''
        try:
            a = np.ones((64, 32), np.float32)
            got = fastsgemm.sgemm(a, a.T, kernel="auto")
            assert np.array_equal(got, np.full((64, 64), 32, np.float32)), "wrong product"
            report = "ok"
        except Exception as e:
            report = f"{type(e).__name__}: {e}"
        return report

    def fork_and_report():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, product_in_child().encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            report = pipe.read()
        _, status = os.waitpid(pid, 0)
        return report, status
"""


@pytest.mark.gpu
def test_a_child_forked_after_cuda_gets_a_clear_error():
    done = run_python(CHILD_REPORT + """
    a = np.ones((64, 32), np.float32)
    fastsgemm.sgemm(a, a.T, kernel="auto")  # the parent initializes CUDA
    report, status = fork_and_report()
    print("child:", report)
    print("status:", status)
    print("parent:", product_in_child())
    """, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["child"].startswith("CudaError") and "forked" in lines["child"] and "spawn" in lines["child"], lines
    assert lines["status"] == "0", lines  # the child exited by itself, not on a signal
    assert lines["parent"] == "ok", lines  # and the parent's CUDA is untouched


@pytest.mark.gpu
def test_a_child_forked_before_cuda_uses_the_gpu():
    """Importing fastsgemm initializes no CUDA, so a fork right after the import leaves the child free."""
    done = run_python(CHILD_REPORT + """
    from fastsgemm import _sgemm
    print("initialized:", _sgemm.cuda_initialized())
    report, status = fork_and_report()
    print("child:", report)
    print("status:", status)
    """, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines == {"initialized": "False", "child": "ok", "status": "0"}, done.stdout


@pytest.mark.gpu
def test_a_spawned_pool_multiplies():
    done = run_python("""
    import multiprocessing, numpy as np, fastsgemm

    if __name__ == "__main__":
        rng = np.random.default_rng(4)
        pairs = [(rng.standard_normal((40 + i, 30), dtype=np.float32), rng.standard_normal((30, 20), dtype=np.float32))
                 for i in range(4)]
        fastsgemm.sgemm(*pairs[0])  # the parent uses CUDA first: spawned children start clean anyway
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            results = pool.starmap(fastsgemm.sgemm, pairs)
        for (a, b), got in zip(pairs, results):
            want = a.astype(np.float64) @ b.astype(np.float64)
            error = np.linalg.norm(got - want) / np.linalg.norm(want)
            assert error < 1e-5, error
        print("ok", len(results))
    """, timeout=240)
    assert done.returncode == 0 and done.stdout.strip() == "ok 4", done.stdout + done.stderr


def installed(package):
    return importlib.util.find_spec(package) is not None


@pytest.mark.gpu
@pytest.mark.parametrize("synchronize", [False, True], ids=["queued", "synchronized"])
def test_exit_with_work_queued_is_clean(synchronize):
    """Work queued from torch tensors, CuPy arrays and DeviceArrays, results still alive at exit, and fastsgemm's
    own teardown (the main thread's cuBLAS handle, the pools) beside torch's and CuPy's: no crash, no message."""
    frameworks = [name for name in ("torch", "cupy") if installed(name)]
    done = run_python(f"""
    import numpy as np, fastsgemm
    frameworks = {frameworks!r}
    n = 2048
    host = np.random.default_rng(2).standard_normal((n, n), dtype=np.float32)
    kept = []
    d = fastsgemm.to_device(host)
    kept += [fastsgemm.sgemm(d, d, kernel=k) for k in ("auto", "cublas", "warptile")]
    if "torch" in frameworks:
        import torch
        t = torch.from_numpy(host).cuda()
        kept += [fastsgemm.sgemm(t, t, kernel=k) for k in ("auto", "cublas", "warptile")]
    if "cupy" in frameworks:
        import cupy
        c = cupy.asarray(host)
        kept += [fastsgemm.sgemm(c, c, kernel=k) for k in ("auto", "cublas", "warptile")]
    if {synchronize!r}:
        if "torch" in frameworks:
            torch.cuda.synchronize()
        if "cupy" in frameworks:
            cupy.cuda.Device().synchronize()
    print("queued", len(kept))
    """, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("queued"), done.stdout
    assert done.stderr == "", done.stderr
