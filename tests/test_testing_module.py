"""fastsgemm.testing, the public module the tests and benchmarks check results with, and the rule that they reach
the package through it and the public API, not through private names."""
import ast
import io
import itertools
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing as ft


def test_every_kernel_name_has_its_precisions_bound():
    for k in fastsgemm.kernels():
        for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs)):
            assert ft.error_bound(name) == ft.ERROR_BOUND[k.precision], name
    assert ft.error_bound("auto") == ft.ERROR_BOUND["fp32"]
    assert ft.error_bound("cublas_tf32") > ft.error_bound("cublas")  # TF32's bound is the wider
    with pytest.raises(ValueError, match="unknown kernel"):
        ft.error_bound("no_such_rung")


def test_the_bounds_are_read_only():
    with pytest.raises(TypeError):
        ft.ERROR_BOUND["fp32"] = 1.0  # type: ignore[index]


def test_relative_error():
    want = np.array([[3.0, 4.0]])
    assert ft.relative_error(want, want) == 0.0
    assert ft.relative_error(np.array([[3.0, 5.0]], np.float32), want) == pytest.approx(0.2)
    assert ft.relative_error(np.ones((2, 2)), np.zeros((2, 2))) == pytest.approx(2.0)  # absolute: all-zero reference
    with pytest.raises(ValueError, match="shapes"):
        ft.relative_error(np.ones((2, 3)), np.ones((3, 2)))


def test_why_no_gpu_agrees_with_cuda_available():
    assert (ft.why_no_gpu() == "") == fastsgemm.cuda_available()
    assert (fastsgemm.device_count() > 0) == fastsgemm.cuda_available()


def test_without_a_gpu_the_device_helpers_say_why():
    if fastsgemm.cuda_available():
        pytest.skip("a GPU is usable here")
    assert fastsgemm.device_count() == 0
    with pytest.raises(fastsgemm.CudaError):
        ft.current_device()
    with pytest.raises(fastsgemm.CudaError):
        ft.random_device_matrix(4, 4)


@pytest.mark.gpu
def test_random_device_matrices():
    a = ft.random_device_matrix(300, 200, seed=7)
    values = a.numpy()
    assert isinstance(a, fastsgemm.DeviceArray) and values.shape == (300, 200) and values.dtype == np.float32
    assert values.min() >= -1.0 and values.max() < 1.0 and abs(values.mean()) < 0.05 and values.std() > 0.5
    assert np.array_equal(values, ft.random_device_matrix(300, 200, seed=7).numpy())
    assert not np.array_equal(values, ft.random_device_matrix(300, 200, seed=8).numpy())
    assert ft.relative_error(a, values) == 0.0  # a DeviceArray is read back for the comparison
    assert ft.current_device() == 0


@pytest.mark.gpu
def test_random_device_matrices_are_made_on_the_current_device_only():
    """The fill runs on the calling thread's current device: another device is refused, not filled from the wrong
    GPU; the current one may be named in any form sgemm takes."""
    current = ft.current_device()
    assert ft.random_device_matrix(4, 4, device=current).numpy().shape == (4, 4)
    if fastsgemm.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    with pytest.raises(ValueError, match="current device"):
        ft.random_device_matrix(4, 4, device=1 - current if current < 2 else 0)


# ---- the rule: tests and benchmarks reach the package through its public API and fastsgemm.testing ----

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(fastsgemm.__file__).parent
PRIVATE_MODULES = {p.name.split(".")[0] for p in PACKAGE.iterdir() if re.match(r"_[a-z]", p.name)}  # _sgemm, _api...
PUBLIC_MODULES = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}  # testing, torch, dask...

# The private names a test or a benchmark may use, as (file, name): the file tests (or measures) that private piece
# itself, which no public name offers; each group says why. A name is the private one and what is read from it
# ("_sgemm.sgemm_fast"; "_sgemm" alone: the module object itself). A utility any test would want (the current
# device, random device matrices, error bounds) belongs in fastsgemm.testing instead.
PRIVATE_USES_ALLOWED = {
    # The C fast path's entry points called directly: that they take or decline a call (NotImplemented), and what
    # each costs per call.
    ("tests/test_call_path.py", "_sgemm.sgemm_fast"),
    ("tests/test_device_arrays.py", "_sgemm.sgemm_fast"),
    ("tests/test_lying_device.py", "_sgemm.sgemm_fast"),
    ("tests/test_torch.py", "_sgemm.linear_fast"),
    ("benchmarks/fast_call_cost.py", "_sgemm.sgemm_fast"),
    ("benchmarks/fast_call_cost.py", "_sgemm.linear_fast"),
    ("benchmarks/fast_call_cost.py", "torch._linear_out"),
    ("benchmarks/linear_call.py", "_sgemm.sgemm_fast"),
    ("benchmarks/linear_call.py", "_sgemm.linear_fast"),
    ("benchmarks/linear_call.py", "torch._linear_out"),
    # The rule both call paths share, in C (overlap test, working stream, result, the fast readers), asked directly.
    ("tests/test_call_path.py", "_sgemm.views_overlap"),
    ("tests/test_call_path.py", "_sgemm.read_device"),
    ("tests/test_call_path.py", "_sgemm.pointer_device"),  # the result's device, against _operands.operand_device
    ("tests/test_call_path.py", "_operands.to_operand"),
    ("tests/test_call_path.py", "_operands.working_stream"),
    ("tests/test_call_path.py", "_operands.empty_like_framework"),
    ("tests/test_call_path.py", "_operands.operand_device"),
    ("tests/test_call_path.py", "_operands.c_contiguous_strides"),
    # Operands that lie, forged over raw allocations of a known size: the C checks must refuse them.
    ("tests/lying_fuzz.py", "_sgemm.DeviceBuffer"),
    ("tests/lying_fuzz.py", "_sgemm.copy"),
    ("tests/lying_fuzz.py", "_device_array.matrix_core"),
    ("tests/test_lying_device.py", "_sgemm.DeviceBuffer"),
    ("tests/test_lying_inputs.py", "_sgemm.gemm"),
    ("tests/test_lying_inputs.py", "_sgemm.dlpack_import"),
    ("tests/test_lying_inputs.py", "_operands.to_operand"),
    ("tests/test_lying_inputs.py", "_operands.is_device_array"),
    ("tests/test_lying_inputs.py", "_operands.HOST"),
    # DLPack capsules and DeviceArray's C base: its buffer, pool flags and the fast path's class registration.
    ("tests/test_device_arrays.py", "_sgemm.dlpack_export"),
    ("tests/test_device_arrays.py", "_sgemm.dlpack_import"),
    ("tests/test_device_arrays.py", "_sgemm.DeviceBuffer"),
    ("tests/test_device_arrays.py", "_sgemm.DeviceMatrix"),
    ("tests/test_device_arrays.py", "_sgemm.register_fast_path"),
    ("tests/test_device_arrays.py", "_device_array.device_buffer"),
    ("tests/valgrind_workload.py", "_sgemm.dlpack_export"),
    ("tests/valgrind_workload.py", "_sgemm.dlpack_import"),
    # kernel="auto": the tuning table, its reading and choices, the registry's candidates, the stack timer.
    ("tests/test_tuning.py", "_tuning.pick"),
    ("tests/test_tuning.py", "_tuning.pick_batched"),
    ("tests/test_tuning.py", "_tuning.read_table"),
    ("tests/test_tuning.py", "_tuning.SHIPPED_TABLE"),
    ("tests/test_tuning.py", "_tuning._fastest_first"),
    ("tests/test_tuning.py", "_tuning._stack_distance"),
    ("tests/test_tuning.py", "_tuning.tuned_devices"),
    ("tests/test_tuning.py", "_tuning._sgemm"),
    ("tests/test_tuning.py", "_tuning._entries_for"),
    ("tests/test_tuning.py", "_tuning.choose"),
    ("tests/test_tuning.py", "_tuning.explain"),
    ("tests/test_tuning.py", "_tuning.cublas_opens"),
    ("tests/test_tuning.py", "_registry.auto_candidates"),
    ("tests/test_tuning.py", "_registry.batched_candidates"),
    ("tests/test_tuning.py", "_registry.parse_kernel"),
    ("tests/test_tuning.py", "_sgemm.time_gemm"),
    ("tests/test_tuning.py", "_device_array.matrix_core"),
    ("tests/test_multi_gpu.py", "_tuning.choose"),  # which GPU's table auto asks, recorded
    ("tests/test_api.py", "_registry.parse_kernel"),  # configurations parse as named kernels
    ("tests/test_api.py", "_api.AUTO_FALLBACK_WARNED"),  # the warn-once state, reset to see the one warning
    # The install: driver and cuBLAS checks, where the extension opens cuBLAS, what the build covers, its symbols.
    ("tests/test_install.py", "_cuda_setup.driver_problem"),
    ("tests/test_install.py", "_cuda_setup.driver_release"),
    ("tests/test_install.py", "_cuda_setup.check_at_import"),
    ("tests/test_install.py", "_cuda_setup.cublas_search_dirs"),
    ("tests/test_install.py", "_cuda_setup.runs_on"),
    ("tests/test_install.py", "_cuda_setup.build_info"),
    ("tests/test_install.py", "_cuda_setup._sgemm"),
    ("tests/test_install.py", "_sgemm.cuda_versions"),
    ("tests/test_install.py", "_sgemm.set_cublas_search_dirs"),
    ("tests/test_install.py", "_sgemm.cublas_library"),
    ("tests/test_install.py", "_sgemm.__file__"),
    # The parts of the Python layer a test watches or a benchmark times: a path not taken, the fork guard's state,
    # the memory limit's parser, the dask graph's task, the copies fastsgemm.dask makes.
    ("tests/test_matmul.py", "_matmul.to_operand"),
    ("tests/test_process_life.py", "_sgemm.cuda_initialized"),
    ("tests/test_device_memory.py", "_memory.parse_bytes"),
    ("tests/test_dask.py", "dask._host_block"),
    ("benchmarks/dask_matmul.py", "dask._sgemm"),
    ("benchmarks/dask_matmul.py", "dask._sgemm.copy"),
    ("benchmarks/dask_matmul.py", "_sgemm"),
    # Not tests of these: utilities fastsgemm.testing does not offer (each used in fewer than 3 places, the bar for
    # adding one there): a DeviceArray's last writer stream, a wait for the GPU, what the build has code for.
    ("tests/test_call_path.py", "_device_array.record_writer"),
    ("tests/lying_fuzz.py", "_sgemm.synchronize"),
    ("benchmarks/torch_step_profile.py", "_sgemm.build_info"),
    # The runtime's device alone, on a thread that must have no CUDA context before fastsgemm's call: the public
    # current_device first checks that a GPU is usable, which this workload must not do on that thread.
    ("tests/thread_workload.py", "_sgemm.current_device"),
}

_IMPORT = re.compile(r"\bfrom\s+fastsgemm((?:\.\w+)*)\s+import\s+(\([\w\s,]*\)|\w+(?:\s+as\s+\w+)?(?:[ \t]*,[ \t]*\w+"
                     r"(?:\s+as\s+\w+)?)*)|\bimport\s+fastsgemm((?:\.\w+)*)(?:\s+as\s+(\w+))?")


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _code(path: Path) -> str:
    """The file's text with its comments and docstrings blanked (lines kept): its code, with the code its strings
    hand to a fresh interpreter."""
    text = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0].value, "value", None), str):
                docstrings.add((body[0].lineno, body[0].col_offset))
    starts = [0, *itertools.accumulate(len(line) for line in io.StringIO(text))]  # where each line begins
    chars = list(text)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.start in docstrings):
            begin, end = starts[token.start[0] - 1] + token.start[1], starts[token.end[0] - 1] + token.end[1]
            chars[begin:end] = [c if c == "\n" else " " for c in chars[begin:end]]
    return "".join(chars)


def private_uses(path: Path) -> dict:
    """The package's private names that `path` uses, name -> the lines: imported from a private module, or read
    from one (through fastsgemm, or a name an import bound: `from fastsgemm import _sgemm`, `import fastsgemm.torch
    as fst`, `import fastsgemm as fs`), by attribute or by getattr/setattr with the name as a string, as code or in
    code a string holds."""
    code = _code(path)
    found = {}

    def note(name, at):
        found.setdefault(name, []).append(code.count("\n", 0, at) + 1)

    bound = {"fastsgemm": []}  # a name in the file -> the package's module it is, as parts
    for match in _IMPORT.finditer(code):
        if match.group(3) is not None:  # import fastsgemm[.x] [as y]
            if match.group(4):
                bound[match.group(4)] = match.group(3)[1:].split(".") if match.group(3) else []
        else:
            module = match.group(1)[1:].split(".") if match.group(1) else []
            for name, alias in re.findall(r"(\w+)(?:\s+as\s+(\w+))?", match.group(2)):
                parts = module + [name]
                if not module and name in PRIVATE_MODULES | PUBLIC_MODULES:
                    bound[alias or name] = parts  # a module: what the file reads from it counts
                elif any(map(_private, parts)):
                    note(".".join(parts), match.start())
        code = code[:match.start()] + re.sub(r"[^\n]", " ", match.group()) + code[match.end():]
    for name, module in bound.items():
        for match in re.finditer(rf"(?:(?<![\w./])|(?<=\\[nt])){re.escape(name)}\b((?:\.\w+)*)", code):
            parts = module + match.group(1).split(".")[1:]
            set_name = re.match(r"\s*,\s*[\"'](\w+)[\"']", code[match.end():])
            if set_name and re.search(r"(?:setattr|getattr)\(\s*$", code[:match.start()]):  # [gs]etattr(module, "name")
                parts.append(set_name.group(1))
            first = next((i for i, part in enumerate(parts) if _private(part)), None)
            if first is not None:
                note(".".join(parts[:first + 2]), match.start())
    return found


def test_tests_and_benchmarks_use_private_names_only_where_they_test_them():
    """What a test or a benchmark needs from the package is public (the API, fastsgemm.testing); a private name
    appears only in the allow-list above, where a file tests that private piece itself. Every entry is still in
    use: the list stays as short as the private uses it allows."""
    found = {}
    for path in sorted([*ROOT.glob("tests/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("benchmarks/harness/*.py")]):
        for name, lines in private_uses(path).items():
            found[(path.relative_to(ROOT).as_posix(), name)] = lines
    assert ("tests/test_tuning.py", "_tuning.pick") in found, "the reader saw no private use: it is broken"
    unlisted = {f"{file}:{lines[0]}: {name}" for (file, name), lines in found.items()
                if (file, name) not in PRIVATE_USES_ALLOWED}
    assert not unlisted, ("private names outside the allow-list: use the public API or fastsgemm.testing (or, for a "
                          "test of that private piece itself, add it to PRIVATE_USES_ALLOWED):\n" +
                          "\n".join(sorted(unlisted)))
    unused = PRIVATE_USES_ALLOWED - found.keys()
    assert not unused, f"allow-list entries no file uses any more, to remove: {sorted(unused)}"
