"""The C extension under valgrind memcheck on the CPU path (runs in CI where
valgrind is installed): no invalid read or write, use of uninitialised memory
or definite leak whose stack passes through fastsgemm's extension.

CPython and NumPy have valgrind reports of their own (start-up allocations
kept for the process's life, their own tricks); they are not ours to fix, so
only the records that reach the extension count.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKLOAD = Path(__file__).resolve().parent / "valgrind_workload.py"
VALGRIND = shutil.which("valgrind")
OURS = re.compile(r"_sgemm\.cpython|\((?:_sgemm|operands|00_cpu|registry|cublas)\.c:")


def records(log):
    """valgrind's report, split into its error and leak records."""
    pid = re.search(r"==(\d+)==", log).group(1)
    found, current = [], []
    for line in log.splitlines():
        body = line.split(f"=={pid}==", 1)[-1]
        if body.strip():
            current.append(body)
        elif current:
            found.append(current)
            current = []
    return found + ([current] if current else [])


@pytest.mark.skipif(VALGRIND is None, reason="valgrind is not installed")
def test_extension_is_clean_under_valgrind(tmp_path):
    log_file = tmp_path / "valgrind.log"
    env = dict(os.environ, PYTHONMALLOC="malloc")  # let valgrind see every Python allocation
    done = subprocess.run(
        [VALGRIND, "--leak-check=full", "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
         f"--log-file={log_file}", sys.executable, str(WORKLOAD)],
        capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and "valgrind workload: ok" in done.stdout, done.stdout + done.stderr
    log = log_file.read_text()
    assert "ERROR SUMMARY" in log, "valgrind wrote no summary"
    ours = [r for r in records(log) if any(OURS.search(line) for line in r)]
    assert not ours, "valgrind reports in fastsgemm's extension:\n\n" + "\n\n".join("\n".join(r[:20]) for r in ours[:5])
