"""A process's life around fastsgemm: a fork after CUDA was initialized gives a clear error in the child (never a
hang or a crash) while host work still runs there, a fork before it leaves the child free to use the GPU, a
multiprocessing pool started with "spawn" works, and the interpreter exits cleanly with work still queued while
torch and CuPy tear down too. Each case runs in a subprocess of its own."""
import importlib.util
import subprocess
import sys
import textwrap

import pytest


def run_python(code, timeout=300):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


# Run in the subprocess: a product in a forked child, reported back through a pipe.
CHILD_REPORT = """
    import os, sys, warnings, numpy as np, fastsgemm

    def product_in_child(kernel):
        # "ok", or the error's class and message; then each warning's message after " | ".
        a = np.ones((64, 32), np.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = fastsgemm.sgemm(a, a.T, kernel=kernel)
                assert np.array_equal(got, np.full((64, 64), 32, np.float32)), "wrong product"
                report = "ok"
            except Exception as e:
                report = f"{type(e).__name__}: {e}"
        return " | ".join([report, *(str(w.message) for w in caught)])

    def fork_and_report(kernels, ordinary_exit=True):
        # Each kernel's report from one forked child, and the child's exit status. The child then exits the
        # ordinary way (its atexit handlers and the interpreter's teardown run), or with os._exit as the children
        # of multiprocessing's "fork" method do.
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            with os.fdopen(write, "w") as pipe:
                pipe.write(repr({kernel: product_in_child(kernel) for kernel in kernels}))
            sys.exit(0) if ordinary_exit else os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            reports = eval(pipe.read())
        _, status = os.waitpid(pid, 0)
        return reports, status
"""


def child_after_cuda(initialize, ordinary_exit):
    done = run_python(CHILD_REPORT + initialize + f"""
    reports, status = fork_and_report(["warptile", "cpu", "auto"], ordinary_exit={ordinary_exit})
    print(repr((reports, status, product_in_child("warptile"))))
    """, timeout=120)
    assert done.returncode == 0, done.stderr
    reports, status, parent = eval(done.stdout.strip().splitlines()[-1])  # our own repr
    assert status == 0, (status, done.stderr)  # the child exited by itself, cleanly, not on a signal
    assert parent == "ok", parent  # the parent's CUDA is untouched
    # A GPU kernel in the child: a CudaError that says why and what to do.
    assert reports["warptile"].startswith("CudaError") and "forked" in reports["warptile"], reports
    assert "spawn" in reports["warptile"], reports
    # Host work still runs there; auto falls back to it and its warning says why.
    assert reports["cpu"] == "ok", reports
    assert reports["auto"].startswith("ok | ") and "forked" in reports["auto"], reports
    # Nothing on stderr but Python's own warning (3.12 and later) that the parent had threads when it forked.
    unexpected = [line for line in done.stderr.splitlines()
                  if line.strip() and "use of fork() may lead to deadlocks" not in line]
    assert not unexpected, done.stderr


@pytest.mark.gpu
def test_a_child_forked_after_fastsgemm_used_cuda_gets_a_clear_error():
    child_after_cuda("""
    a = np.ones((64, 32), np.float32)
    fastsgemm.sgemm(a, a.T, kernel="warptile")  # fastsgemm initializes CUDA in the parent
    """, ordinary_exit=False)  # benchmarks/NOTES.md: such a child's ordinary exit crashed (after host staging)


@pytest.mark.gpu
def test_a_child_forked_after_torch_used_cuda_gets_a_clear_error():
    pytest.importorskip("torch")
    child_after_cuda("""
    import torch
    torch.ones(4, device="cuda").sum().item()  # CUDA initialized by torch alone: fastsgemm has made no call yet
    """, ordinary_exit=True)


@pytest.mark.gpu
def test_a_child_forked_before_cuda_uses_the_gpu():
    """Importing fastsgemm initializes no CUDA, so a fork right after the import leaves the child free."""
    done = run_python(CHILD_REPORT + """
    from fastsgemm import _sgemm
    initialized = _sgemm.cuda_initialized()
    reports, status = fork_and_report(["warptile", "auto"])
    print(repr((initialized, reports, status)))
    """, timeout=120)
    assert done.returncode == 0, done.stderr
    initialized, reports, status = eval(done.stdout.strip().splitlines()[-1])  # our own repr
    assert (initialized, reports, status) == (False, {"warptile": "ok", "auto": "ok"}, 0), done.stdout + done.stderr


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
