"""Hostile arguments to fastsgemm.benchmark and to python -m fastsgemm.bench (host only: no GPU needed).

benchmark() checks every argument before any work: TypeError for a wrong type, ValueError for a bad value,
each naming the argument and the value. The bench CLI answers every user error with argparse's usage and a
one-line error, exit status 2, before it looks for a GPU; valid arguments reach that point unchanged.
"""
import functools
import subprocess
import sys

import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing
from conftest import run_at_once

# ---- fastsgemm.benchmark ----

VALID = {"kernel": "cpu", "M": 4, "N": 5, "K": 6}


@pytest.mark.parametrize(
    "argument, value",
    [
        ("M", "4"),
        ("N", "x"),
        ("K", 4.0),
        ("M", True),
        ("N", None),
        ("K", np.float32(4)),
        ("repeats", 2.5),
        ("repeats", False),
        ("warmup", "1"),
        ("seed", 1.0),
        ("seed", None),
        ("alpha", "1"),
        ("beta", None),
        ("alpha", 1j),
        ("check", 1),
        ("check", "yes"),
        ("check", None),
        ("kernel", 3),
        ("kernel", None),
        ("count", 2.0),
        ("count", True),
        ("count", "8"),
    ],
)
def test_benchmark_wrong_type(argument, value):
    args = {**VALID, argument: value}
    with pytest.raises(TypeError) as error:
        fastsgemm.benchmark(**args)
    message = str(error.value)
    assert argument in message and repr(value) in message, message


@pytest.mark.parametrize(
    "argument, value",
    [("M", 0), ("N", -4), ("K", 0), ("repeats", 0), ("repeats", -1), ("warmup", -1), ("seed", -1), ("M", np.int64(0)),
     ("count", 0), ("count", -3)],
)
def test_benchmark_bad_value(argument, value):
    args = {**VALID, argument: value}
    with pytest.raises(ValueError) as error:
        fastsgemm.benchmark(**args)
    message = str(error.value)
    assert argument in message and repr(value) in message, message


@pytest.mark.parametrize("extra", [{"alpha": 2.0}, {"beta": 1.0}])
def test_benchmark_stack_has_no_alpha_or_beta(extra):
    """A stack is timed as matmul runs it, which takes no alpha, beta or C."""
    with pytest.raises(ValueError, match="count=3.*alpha 1 and beta 0"):
        fastsgemm.benchmark("cpu", 4, 4, 4, count=3, **extra)


def test_benchmark_cpu_rung_takes_no_stack():
    with pytest.raises(ValueError, match="cpu rung.*count=2"):
        fastsgemm.benchmark("cpu", 4, 4, 4, count=2)


@pytest.mark.parametrize("kernel", ["bogus", "warptile:nope", ""])
def test_benchmark_unknown_kernel(kernel):
    with pytest.raises(ValueError, match="kernel"):
        fastsgemm.benchmark(kernel, 4, 4, 4)


def test_benchmark_valid_arguments_unchanged():
    """Integers and reals of any kind (NumPy's too) still run, and the result is as before."""
    result = fastsgemm.benchmark("cpu", np.int64(8), 9, np.int32(10), repeats=3, warmup=0, alpha=np.float32(2.0),
                                 beta=0, check=np.bool_(True), seed=np.uint8(3))
    assert (result["kernel"], result["picked"], result["M"], result["N"], result["K"]) == ("cpu", "cpu", 8, 9, 10)
    assert (result["repeats"], result["warmup"], result["input_sets"]) == (3, 0, 1)
    assert result["rel_error"] <= fastsgemm.testing.ERROR_BOUND["fp32"]
    assert result["error_reference"] == "float64"
    unchecked = fastsgemm.benchmark("cpu", 4, 4, 4, repeats=1, warmup=0, beta=0.5, check=False)
    assert unchecked["rel_error"] is None and unchecked["median_ms"] >= 0


# ---- python -m fastsgemm.bench ----


def bench(*args):
    return subprocess.run([sys.executable, "-m", "fastsgemm.bench", *args], capture_output=True, text=True,
                          timeout=120)


USER_ERRORS = [
    (["--sizes", "-4"], "-4"),
    (["--sizes", "0"], "'0'"),
    (["--sizes", "4x0x4"], "4x0x4"),
    (["--sizes", "abc"], "abc"),
    (["--sizes", "4x4"], "4x4"),
    (["--sizes", "4x4x4x4"], "4x4x4x4"),
    (["--sizes", "1024", "4.5"], "4.5"),
    (["--sizes", "4xx4"], "4xx4"),
    (["--kernels", "bogus"], "bogus"),
    (["--kernels", "naive", "warptile:nope"], "nope"),
    (["--repeats", "0"], "'0'"),
    (["--repeats", "x"], "'x'"),
    (["--warmup", "-1"], "-1"),
    (["--warmup", "1.5"], "1.5"),
    (["--calls", "0"], "'0'"),
    (["--overhead", "--kernels", "cpu"], "cpu"),
    (["--end-to-end", "--kernels", "auto", "cpu"], "cpu"),
    (["--quick", "--sizes", "0x1x1"], "0x1x1"),
]


@functools.cache
def user_error_answers():
    """The CLI's answer to each user error, all asked at once (each is mostly an interpreter's start)."""
    return run_at_once({tuple(args): [sys.executable, "-m", "fastsgemm.bench", *args] for args, _ in USER_ERRORS},
                       timeout=120)


@pytest.mark.parametrize("args, bad", USER_ERRORS, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_bench_cli_user_errors(args, bad):
    result = user_error_answers()[tuple(args)]
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    assert bad in errors[0], errors[0]
    assert result.stdout == ""


def test_bench_cli_out_that_cannot_be_written(tmp_path):
    """Checked before the run, not found out at its end."""
    (tmp_path / "file").write_text("")
    (tmp_path / "taken.json").mkdir()
    for out, bad in ((tmp_path / "file" / "results", tmp_path / "file"), (tmp_path / "taken", tmp_path / "taken.json")):
        result = bench("--out", str(out))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        errors = [line for line in result.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1 and str(bad) in errors[0], result.stderr


@pytest.mark.parametrize(
    "args",
    [[], ["--quick"], ["--sizes", "4", "4x5x6", "--kernels", "naive", "auto", "warptile:64x64x16", "--repeats", "1",
                       "--warmup", "0", "--calls", "1"], ["--overhead", "--kernels", "auto", "cublas"]],
    ids=["defaults", "quick", "everything", "overhead"],
)
def test_bench_cli_valid_arguments(args, tmp_path):
    """Valid arguments get past the checks: without a GPU to the one line saying there is nothing to time."""
    if fastsgemm.cuda_available():
        pytest.skip("with a GPU the run would time the ladder; this checks the path without one")
    result = bench(*args, "--out", str(tmp_path / "new" / "results"))
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == "no usable CUDA device: nothing to time"
