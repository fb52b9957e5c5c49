"""What the compiler makes of each rung, checked without a GPU (`python -m pytest -m compiler`; CI runs these in a
step of their own, and the default run skips them: they take minutes).

Every CUDA rung is compiled for sm_90 (sm_90a for the files setup.py builds
for it: the wgmma rungs) with the build's own nvcc flags and `-Xptxas -v`: no
rung may spill registers, and from tile2d up no rung may have a stack frame
(an accumulator array that went to local memory), and no rung's wgmmas may be
serialized by ptxas (its report says so). Then its SASS (cuobjdump)
must contain the instructions its idea is about, as the registry lists them
(fastsgemm.kernels()[i].sass): 128-bit shared loads from transposed up, 128-bit
stores of D from widestore up, 128-bit global loads from vectorized up, LDGSTS
(cp.async) from doublebuffer up, HMMA in the mma.sync rungs, HGMMA in
the wgmma rungs, ...
"""
import ast
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fastsgemm

ROOT = Path(__file__).resolve().parent.parent
ARCH = "sm_90"
NO_STACK_FROM_RUNG = 6  # tile2d: register tiles from here on must live in registers
FIRST_WIDE_STORE_RUNG = 8  # widestore: 128-bit stores of D
FIRST_VECTORIZED_RUNG = 9  # vectorized: 128-bit global loads of the tiles
FIRST_CP_ASYNC_RUNG = 12  # doublebuffer: cp.async (LDGSTS)


def setup_constant(name):
    """A constant of setup.py (NVCC_FLAGS, FILE_ARCHS) exactly as the build uses it."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no {name}")


def nvcc_flags():
    return setup_constant("NVCC_FLAGS")


def arch_flag(source):
    """-arch for a rung's file: sm_90, or the file's own target where setup.py's FILE_ARCHS names one."""
    own = setup_constant("FILE_ARCHS").get(source)
    return f"-gencode=arch=compute_{own},code=sm_{own}" if own else f"-arch={ARCH}"


def find_tool(name):
    """A CUDA tool on PATH, under $CUDA_HOME, or from the nvidia-cuda-* wheels of the test extras; with
    FASTSGEMM_CUDA=pypi (CUDA from the wheels only, as on a machine with just a driver) not /usr/local/cuda's."""
    found = shutil.which(name)
    if found:
        return found
    toolkits = [os.environ.get("CUDA_HOME")]
    if os.environ.get("FASTSGEMM_CUDA", "").strip().lower() != "pypi":
        toolkits.append("/usr/local/cuda")
    for home in toolkits:
        if home and (Path(home) / "bin" / name).exists():
            return str(Path(home) / "bin" / name)
    for site in sys.path:
        hits = glob.glob(os.path.join(site, "nvidia", "cu*", "bin", name))
        if hits:
            return hits[0]
    return None


NVCC = find_tool("nvcc")
CUOBJDUMP = find_tool("cuobjdump")
CUDA_RUNGS = [k for k in fastsgemm.kernels() if k.source.endswith(".cu")]

pytestmark = [pytest.mark.compiler, pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")]


# The files that hold configurations of rungs, other than the rung's own file: the engine's (kernels/engine/*.cu),
# and the lessons of the rungs whose kernel=<name> is the engine's (kernel="<name>:lesson", kernels/ladder/): checked
# as the rungs' own files are.
OTHER_SOURCES = sorted({c.source for k in CUDA_RUNGS for c in k.configs if c.source != k.source})
LESSONS = {k.name: c.source for k in CUDA_RUNGS for c in k.configs if c.name == "lesson"}
# What the per-file checks run on: each rung by name, each other file by its path.
FILES = [k.name for k in CUDA_RUNGS] + OTHER_SOURCES


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """rung name or engine file -> (ptxas report, object file), each compiled once."""
    out_dir = tmp_path_factory.mktemp("sass")
    results = {}
    for name, source in [(k.name, k.source) for k in CUDA_RUNGS] + [(s, s) for s in OTHER_SOURCES]:
        obj = out_dir / (source.removeprefix("kernels/").replace("/", "_").removesuffix(".cu") + ".o")
        command = [NVCC, *nvcc_flags(), arch_flag(source), "-Xptxas", "-v", "-I", str(ROOT / "kernels"), "-c",
                   str(ROOT / source), "-o", str(obj)]
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, f"{source} does not compile:\n{done.stderr}"
        results[name] = (done.stdout + done.stderr, obj)
    return results


def test_engine_files_are_found():
    """warptile's other shapes live in the engine (kernels/engine/warptile.cu), and the lessons of rungs 19-24 in
    the ladder: the lists above are not empty."""
    assert "kernels/engine/warptile.cu" in OTHER_SOURCES
    assert LESSONS.get("tf32x3") == "kernels/ladder/20_tf32x3.cu" and set(LESSONS.values()) <= set(OTHER_SOURCES)


RUNG_NUMBER = {k.name: k.rung for k in CUDA_RUNGS}


@pytest.mark.parametrize("name", FILES)
def test_no_spills(name, compiled):
    report, _ = compiled[name]
    usages = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert usages, f"no ptxas resource report for {name}:\n{report}"
    spilling = [u for u in usages if u[1] != "0" or u[2] != "0"]
    assert not spilling, f"{name} spills registers in {len(spilling)} instantiation(s): {spilling}"
    rung = RUNG_NUMBER.get(name, NO_STACK_FROM_RUNG)  # the engine's kernels: no stack frames either
    if rung is not None and rung >= NO_STACK_FROM_RUNG:
        framed = [u for u in usages if u[0] != "0"]
        assert not framed, f"{name} has a stack frame in {len(framed)} instantiation(s): {framed}"


@pytest.mark.parametrize("name", FILES)
def test_wgmmas_are_not_serialized(name, compiled):
    """Where ptxas cannot keep a kernel's wgmmas in flight together (registers the wgmmas define touched on a
    path it cannot order, too few registers), it makes each wait for the one before and says so in its report
    ("wgmma.mma_async instructions are serialized due to ..."). The results stay right and the tensor cores
    run a fraction of the time; this check catches it where there is no GPU to time it. Rung 24's epilogue
    with a fast path for tiles inside D did it (benchmarks/NOTES.md, "The persistent grid")."""
    report, _ = compiled[name]
    serialized = [line.strip() for line in report.splitlines() if "wgmma" in line and "serialized" in line]
    assert not serialized, f"{name}: ptxas serialized wgmmas:\n" + "\n".join(serialized)


NM = shutil.which("nm")


@pytest.mark.skipif(NM is None, reason="needs nm (binutils)")
@pytest.mark.parametrize("name", FILES)
def test_a_rung_file_defines_only_its_launchers(name, compiled):
    """A rung file is included by the next rung, and by the engine, for its code: everything it or an engine
    file defines with external linkage (strong global symbols, nm's T) must be its extern "C" launchers, or two
    objects would clash at link time. Kernels and helpers are templates or inline."""
    listed = subprocess.run([NM, "-g", "--defined-only", str(compiled[name][1])], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    strong = [line.split()[-1] for line in listed.stdout.splitlines() if line.split()[1:2] == ["T"]]
    assert strong and all(symbol.startswith("fsg_") for symbol in strong), (
        f"{name} defines more than its launchers: {[n for n in strong if not n.startswith('fsg_')]}")


@pytest.mark.skipif(NM is None, reason="needs nm (binutils)")
def test_no_launcher_is_defined_twice(compiled):
    """Across every rung's and engine file's object, each strong symbol is defined once: an engine file that
    includes a lesson must not define the lesson's launchers again (the link would fail, or worse, pick one)."""
    where = {}
    for name, (_, obj) in compiled.items():
        listed = subprocess.run([NM, "-g", "--defined-only", str(obj)], capture_output=True, text=True, check=True)
        for line in listed.stdout.splitlines():
            if line.split()[1:2] == ["T"]:
                where.setdefault(line.split()[-1], []).append(name)
    twice = {symbol: files for symbol, files in where.items() if len(files) > 1}
    assert where and not twice, twice


def kernels_by_object(compiled, hopper):
    """{kernel: [objects]} over the objects built for sm_90a (hopper) or for the default targets (not hopper)."""
    assert CUOBJDUMP is not None, "cuobjdump not found: install the test extras (pip install '.[test]')"
    sources = {k.name: k.source for k in CUDA_RUNGS} | {s: s for s in OTHER_SOURCES}
    where = {}
    for name, (_, obj) in compiled.items():
        if (sources[name] in setup_constant("FILE_ARCHS")) != hopper:
            continue
        dump = subprocess.run([CUOBJDUMP, "-sass", str(obj)], capture_output=True, text=True, check=True).stdout
        for kernel in set(re.findall(r"Function : (\S+)", dump)):
            where.setdefault(kernel, []).append(name)
    assert where, "no kernels listed"
    return where


def kernels_in_more_than_one_object(compiled, hopper):
    """{kernel: [objects]} for the kernels compiled into more than one of the objects built for sm_90a (hopper) or
    for the default targets (not hopper)."""
    return {kernel: files for kernel, files in kernels_by_object(compiled, hopper).items() if len(files) > 1}


def test_no_kernel_is_compiled_into_two_objects(compiled):
    """Each kernel instantiation lives in one object: a lesson's kernels in its own, an engine file's in its own. A
    function a lesson leaves outside its launcher guard that launches a kernel (a non-template inline launcher)
    would compile that kernel into every later rung that includes the lesson."""
    twice = kernels_in_more_than_one_object(compiled, hopper=False)
    assert not twice, f"{len(twice)} kernels in more than one object, e.g. {list(twice.items())[:3]}"


def test_no_kernel_is_compiled_for_both_targets(compiled):
    """No kernel is compiled both into an object for the default targets and into one for sm_90a: an sm_90a file
    that includes a file built for the default targets must not instantiate that file's kernels again (none
    does now that every lesson is whole; rung 19 once included rung 18). The two checks above each look within one group of objects; this one across them."""
    default, hopper = kernels_by_object(compiled, hopper=False), kernels_by_object(compiled, hopper=True)
    both = {kernel: default[kernel] + hopper[kernel] for kernel in default.keys() & hopper.keys()}
    assert not both, f"{len(both)} kernels in objects of both targets, e.g. {list(both.items())[:3]}"


@pytest.mark.xfail(strict=True, reason="issue 46: the engine's Hopper headers (engine/tf32.cuh and the rest) are "
                   "included by several engine files, whose inline launchers and fallbacks instantiate the same "
                   "kernels in each")
def test_no_hopper_kernel_is_compiled_into_two_objects(compiled):
    twice = kernels_in_more_than_one_object(compiled, hopper=True)
    assert not twice, f"{len(twice)} kernels in more than one object, e.g. {list(twice.items())[:3]}"


# An instruction's opcode in `cuobjdump -sass` (after its address and any predicate).
OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def sass_opcodes(obj):
    dump = subprocess.run([CUOBJDUMP, "-sass", str(obj)], capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    opcodes = set(OPCODE.findall(dump.stdout))
    assert opcodes, "cuobjdump printed no instructions"
    return opcodes


@pytest.mark.parametrize("kernel", [k for k in CUDA_RUNGS if k.sass], ids=[k.name for k in CUDA_RUNGS if k.sass])
def test_sass_has_the_rungs_instructions(kernel, compiled):
    assert CUOBJDUMP is not None, "cuobjdump not found: install the test extras (pip install '.[test]')"
    opcodes = sass_opcodes(compiled[kernel.name][1])
    for claim in kernel.sass:
        assert any(op == claim or op.startswith(claim + ".") for op in opcodes), (
            f"{kernel.name} claims {claim} but its SASS has none; it has {sorted(opcodes)}")


@pytest.mark.parametrize("name", sorted(LESSONS))
def test_a_lesson_has_its_rungs_instructions(name, compiled):
    """Where kernel=<name> is the engine's copy, the lesson (kernel="<name>:lesson") compiles to the instructions
    the rung claims too."""
    assert CUOBJDUMP is not None, "cuobjdump not found: install the test extras (pip install '.[test]')"
    opcodes = sass_opcodes(compiled[LESSONS[name]][1])
    claims = next(k.sass for k in CUDA_RUNGS if k.name == name)
    assert claims and all(any(op == c or op.startswith(c + ".") for op in opcodes) for c in claims), (name, claims)


def vector_loads_before_last_barrier(obj):
    """For each kernel in obj: how many 128-bit global loads (LDG.E.128) come before its last barrier, that is in
    its k-loop, where the tiles are loaded, rather than in the epilogue after it."""
    dump = subprocess.run([CUOBJDUMP, "-sass", str(obj)], capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    counts = {}
    for function in re.split(r"\n\s+Function : ", dump.stdout)[1:]:
        ops = OPCODE.findall(function)
        bars = [i for i, op in enumerate(ops) if op.startswith("BAR.SYNC")]
        counts[function.split("\n", 1)[0].strip()] = sum(
            op.startswith("LDG.E.128") for op in ops[:bars[-1] if bars else len(ops)])
    assert counts, "cuobjdump printed no kernels"
    return counts


def test_scalar_rungs_have_no_vector_global_loads(compiled):
    """The claims can fail: rungs before widestore use no 128-bit global access at all, and widestore's 128-bit
    loads are its epilogue's (C, read beside D's 128-bit stores): none before its last barrier, where the tiles are
    loaded. vectorized, the next rung, loads its tiles so (in its instantiations for aligned matrices)."""
    assert CUOBJDUMP is not None, "cuobjdump not found: install the test extras (pip install '.[test]')"
    for k in CUDA_RUNGS:
        if k.rung is not None and k.rung < FIRST_WIDE_STORE_RUNG:
            opcodes = sass_opcodes(compiled[k.name][1])
            assert "LDG.E.128" not in opcodes and "STG.E.128" not in opcodes, k.name
    for name, expect_tiles in (("widestore", False), ("vectorized", True)):
        loads = vector_loads_before_last_barrier(compiled[name][1])
        assert any(loads.values()) == expect_tiles, (name, loads)  # vectorized: its VEC instantiations


def test_rungs_before_doublebuffer_have_no_cp_async(compiled):
    """The claims can fail: twostage, the rung before doublebuffer, brings its tiles through registers only, so
    neither it nor any rung before it may hold a cp.async (LDGSTS)."""
    assert CUOBJDUMP is not None, "cuobjdump not found: install the test extras (pip install '.[test]')"
    earlier = [k for k in CUDA_RUNGS if k.rung is not None and k.rung < FIRST_CP_ASYNC_RUNG]
    assert "twostage" in [k.name for k in earlier]
    for k in earlier:
        assert not any(op.startswith("LDGSTS") for op in sass_opcodes(compiled[k.name][1])), k.name

