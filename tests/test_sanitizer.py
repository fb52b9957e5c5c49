"""compute-sanitizer over every CUDA rung: memcheck, racecheck, initcheck and
synccheck, on odd shapes and misaligned views (tests/sanitizer_workload.py).
GPU only and opt-in, since each tool slows kernels 10-1000x:

    python -m pytest -m sanitizer
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKLOAD = Path(__file__).resolve().parent / "sanitizer_workload.py"
SANITIZER = shutil.which("compute-sanitizer")


@pytest.mark.gpu
@pytest.mark.sanitizer
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "initcheck", "synccheck"])
def test_compute_sanitizer_is_clean(tool):
    if SANITIZER is None:
        pytest.skip("compute-sanitizer is not on PATH")
    pytest.importorskip("cupy")
    # Memory errors only: CuPy's pool keeps device blocks past exit, which a leak check reports as
    # leaks; fastsgemm's own leaks are tested directly (tests/test_reliability.py, 10,000 calls).
    # racecheck runs the small odd shapes and 255 x 257 x 4093, which has every kind of block 4095 x 4097 x 4093
    # has (sanitizer_workload.py says why that is the same check): at 4095 x 4097 x 4093 itself it takes over
    # nine minutes a rung (benchmarks/racecheck_large.sh).
    command = [SANITIZER, "--tool", tool, "--error-exitcode", "99", sys.executable, str(WORKLOAD)]
    if tool != "racecheck":
        command.append("--large")
    done = subprocess.run(command, capture_output=True, text=True, timeout=3000)
    report = done.stdout + done.stderr
    assert done.returncode == 0, f"{tool} failed (exit {done.returncode}):\n{report[-4000:]}"
    # racecheck summarises hazards in its own words; the others count errors.
    clean = "RACECHECK SUMMARY: 0 hazards" if tool == "racecheck" else "ERROR SUMMARY: 0 errors"
    assert clean in report, report[-4000:]
    assert "sanitizer workload: 0 failures" in report, report[-4000:]
