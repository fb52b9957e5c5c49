"""The ladder's files as lessons (issue 46): whole files that include no other rung and no engine file, and SIMT
neighbours whose `diff` stays within 150 lines. Reads the sources only: no compiler, no GPU."""
import re
import subprocess
from pathlib import Path

import pytest

LADDER = Path(__file__).resolve().parent.parent / "kernels" / "ladder"
FILES = sorted(LADDER.glob("[0-9][0-9]_*.cu"))
LAST_SIMT_RUNG = 16  # rungs 1-16 run on the CUDA cores; 17 on is the tensor cores
SIMT = [f for f in FILES if int(f.name[:2]) <= LAST_SIMT_RUNG]
WHOLE = FILES  # every rung is whole


def diff_lines(old, new):
    done = subprocess.run(["diff", str(old), str(new)], capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return sum(line.startswith(("<", ">")) for line in done.stdout.splitlines())


def test_the_ladder_is_found():
    assert len(SIMT) == LAST_SIMT_RUNG and [int(f.name[:2]) for f in SIMT] == list(range(1, LAST_SIMT_RUNG + 1))


@pytest.mark.parametrize("path", WHOLE, ids=[f.name for f in WHOLE])
def test_a_whole_lesson_includes_no_other_rung_and_no_engine_file(path):
    """common.cuh (the plumbing every rung shares) and, where a lesson needs it, a support header (the memory limit
    that counts the wgmma rungs' workspaces): no rung, no engine file."""
    found = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', path.read_text(), re.M)
    # the project's headers (common.cuh, or a path like "support/x.h"); system headers (<cuda.h>, <cstdint>) aside
    includes = [i for i in found if i == "common.cuh" or ("/" in i and not i.startswith("cuda/"))]
    assert includes[:1] == ["common.cuh"] and all(i.startswith("support/") for i in includes[1:]), includes


def test_neighbouring_simt_rungs_differ_by_at_most_150_lines():
    too_far = {f"{a.name} -> {b.name}": n for a, b in zip(SIMT, SIMT[1:]) if (n := diff_lines(a, b)) > 150}
    assert not too_far, too_far


KERNELS = LADDER.parent


def includers(path):
    """The files under kernels/ (lessons and engine) that include the lesson at path."""
    name = f'#include "ladder/{path.name}"'
    return [f.relative_to(KERNELS).as_posix() for f in sorted(KERNELS.rglob("*.cu*")) if name in f.read_text()]


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_a_lesson_that_nothing_includes_has_no_launcher_guard(path):
    """A lesson's launcher is guarded (`#if __INCLUDE_LEVEL__ == 0`) only so that a file which includes the lesson
    for its code does not define the launcher again. Where nothing includes it, the guard has no reason to be."""
    if "__INCLUDE_LEVEL__" in path.read_text():
        assert includers(path), f"{path.name} keeps a guard, and nothing includes it"
