"""The C extension reads down: no two files of csrc/ call each other, directly or around a longer loop, and
csrc/_sgemm.c (the module table, its state, its functions) is called by none of them. Each file is compiled on
its own and the calls between them are read from the objects' symbols (nm), so this needs a C compiler, the
Python headers and CUDA's headers, but no GPU (`python -m pytest -m compiler`)."""
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
NM = shutil.which("nm")


def cuda_include():
    nvcc = shutil.which("nvcc")
    for home in (os.environ.get("CUDA_HOME"), str(Path(nvcc).parent.parent) if nvcc else None, "/usr/local/cuda"):
        if home and (Path(home) / "include" / "cuda_runtime_api.h").exists():
            return str(Path(home) / "include")
    return None


pytestmark = [pytest.mark.compiler,
              pytest.mark.skipif(CC is None or NM is None or cuda_include() is None,
                                 reason="needs a C compiler, nm and CUDA's headers")]


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    """{(caller file, callee file)} over csrc/*.c, from the symbols each object defines and uses."""
    out = tmp_path_factory.mktemp("objects")
    defined, used = {}, {}
    for source in sorted((ROOT / "csrc").glob("*.c")):
        obj = out / (source.stem + ".o")
        subprocess.run([CC, "-std=c11", "-O0", "-fPIC", "-c", str(source), "-o", str(obj), "-I", str(ROOT / "csrc"),
                        "-I", str(ROOT / "kernels"), "-I", cuda_include(), "-I", sysconfig.get_paths()["include"]],
                       check=True, capture_output=True)
        for line in subprocess.run([NM, str(obj)], capture_output=True, text=True, check=True).stdout.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in "TDRB":
                defined[fields[2]] = source.stem
            elif len(fields) == 2 and fields[0] == "U":
                used.setdefault(source.stem, set()).add(fields[1])
    return {(caller, defined[name]) for caller, names in used.items() for name in names
            if name in defined and defined[name] != caller}


def test_no_file_of_the_extension_calls_the_module_file(calls):
    assert not [caller for caller, callee in calls if callee == "_sgemm"], sorted(calls)


def test_the_calls_between_c_files_have_no_loop(calls):
    graph = {}
    for caller, callee in calls:
        graph.setdefault(caller, set()).add(callee)
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                raise AssertionError(f"a loop of calls: {' -> '.join(path + [node, nxt])}")
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert graph["_sgemm"] >= {"call", "fast_call"}, graph  # the check saw the files it is about
