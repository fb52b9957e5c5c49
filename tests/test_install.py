"""Where the build's CUDA comes from (build_cuda.py), and what the module checks of the machine's CUDA at import
(python/fastsgemm/_cuda_setup.py): the driver's version, and where cuBLAS is opened from.

The builds themselves (with the Toolkit hidden, a wheel, an sdist) are .ci/run's; these tests hold the pieces
to account on any machine."""
import importlib.util
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastsgemm
from fastsgemm import _cuda_setup

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def build_cuda(monkeypatch):
    """build_cuda.py from the repository root, freshly imported (it reads FASTSGEMM_CUDA on each call). It is
    setuptools' backend too, so it needs setuptools, which a Python 3.12 venv does not have by itself."""
    pytest.importorskip("setuptools")
    spec = importlib.util.spec_from_file_location("build_cuda_under_test", ROOT / "build_cuda.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the driver check ----

def test_driver_too_old_is_one_line_naming_both_versions_and_what_to_do():
    message = _cuda_setup.driver_problem(12040, 13000, "550.54.15")
    assert message is not None and "\n" not in message
    assert "550.54.15" in message and "CUDA 12.4" in message  # the driver, by release and by CUDA version
    assert "CUDA 13.0" in message and "580" in message  # what this build needs
    assert "Update the driver" in message and "FASTSGEMM_CUDA=toolkit" in message and "kernel='cpu'" in message


def test_driver_new_enough_or_absent_is_no_problem():
    assert _cuda_setup.driver_problem(13000, 13000, None) is None
    assert _cuda_setup.driver_problem(13020, 13000, None) is None  # newer minor
    assert _cuda_setup.driver_problem(13000, 13020, None) is None  # older minor: minor version compatibility
    assert _cuda_setup.driver_problem(0, 13000, None) is None  # no driver: cuda_available() says so


def test_driver_too_old_without_a_release_still_names_its_cuda_version():
    message = _cuda_setup.driver_problem(12020, 13000, None)
    assert "CUDA 12.2" in message and "CUDA 13.0" in message


def test_driver_release_read_from_the_kernel_module_version(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
                       "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert _cuda_setup.driver_release(str(version)) == "550.54.15"
    assert _cuda_setup.driver_release(str(tmp_path / "missing")) is None


def test_import_check_warns_once_for_an_old_driver_and_the_cpu_rung_still_runs(monkeypatch):
    monkeypatch.setattr(_cuda_setup._sgemm, "cuda_versions", lambda: (12040, 13000))
    monkeypatch.setattr(_cuda_setup, "driver_release", lambda: "550.54.15")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _cuda_setup.check_at_import()
    old = [w for w in caught if issubclass(w.category, fastsgemm.DriverTooOldWarning)]
    assert len(old) == 1 and "550.54.15" in str(old[0].message)
    shown = warnings.formatwarning(old[0].message, old[0].category, old[0].filename, old[0].lineno, old[0].line)
    assert shown.count("\n") == 1  # one line, with no source line under it
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(fastsgemm.sgemm(a, a.T, kernel="cpu"), a @ a.T)


def test_versions_come_from_the_module():
    driver, runtime = fastsgemm._sgemm.cuda_versions()
    assert runtime >= 12000 and driver >= 0


# ---- where cuBLAS is opened from ----

def test_cublas_search_dirs_find_the_wheels_layout(tmp_path):
    cu13 = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    cu12 = tmp_path / "old" / "nvidia" / "cublas" / "lib"
    for lib, name in ((cu13, "libcublas.so.13"), (cu12, "libcublas.so.12")):
        lib.mkdir(parents=True)
        (lib / name).write_bytes(b"")
    path = [str(tmp_path / "nowhere"), str(tmp_path / "site"), str(tmp_path / "old")]
    assert _cuda_setup.cublas_search_dirs(13, path) == (str(cu13),)
    assert _cuda_setup.cublas_search_dirs(12, path) == (str(cu12),)
    assert _cuda_setup.cublas_search_dirs(14, path) == ()


def test_cublas_search_dirs_pass_over_entries_that_are_not_directory_names(tmp_path):
    cu13 = tmp_path / "nvidia" / "cu13" / "lib"
    cu13.mkdir(parents=True)
    (cu13 / "libcublas.so.13").write_bytes(b"")
    odd = [b"/bytes/entry", "/" + "x" * 5000, str(tmp_path)]  # bytes, and a name too long for the file system
    assert _cuda_setup.cublas_search_dirs(13, odd) == (str(cu13),)


def test_the_import_check_never_stops_the_import(monkeypatch):
    def broken():
        raise OSError("unreadable")
    monkeypatch.setattr(_cuda_setup._sgemm, "cuda_versions", broken)
    with pytest.warns(RuntimeWarning, match="CUDA check at import failed"):
        _cuda_setup.check_at_import()


def test_cublas_search_dirs_must_be_a_tuple_of_str():
    with pytest.raises(TypeError):
        fastsgemm._sgemm.set_cublas_search_dirs(["/a/list"])


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


def test_a_missing_cublas_is_a_clear_error_without_a_gpu(tmp_path):
    missing = tmp_path / "libcublas.so.13"
    done = _run("""
        import fastsgemm
        try:
            fastsgemm._sgemm.cublas_library()
        except fastsgemm.CudaError as e:
            print("ERROR", e.cuda_name, e)
    """, FASTSGEMM_CUBLAS_LIBRARY=str(missing))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ERROR cudaErrorSharedObjectInitFailed")
    assert str(missing) in done.stdout and "cannot open shared object file" in done.stdout


def test_cublas_named_by_the_environment_is_the_one_opened(tmp_path):
    found = _run("import fastsgemm; print(fastsgemm._sgemm.cublas_library())")
    if found.returncode != 0:
        pytest.skip(f"no cuBLAS on this machine: {found.stderr.strip().splitlines()[-1]}")
    original = Path(found.stdout.strip())
    major = fastsgemm._sgemm.cuda_versions()[1] // 1000
    copy = tmp_path / original.name
    copy.write_bytes(original.read_bytes())
    lt = original.parent / f"libcublasLt.so.{major}"
    if lt.exists():  # the copy's own RUNPATH ($ORIGIN, in the wheel) looks for it beside it
        (tmp_path / lt.name).symlink_to(lt.resolve())
    again = _run("""
        import fastsgemm
        print(fastsgemm._sgemm.cublas_library())
        print(any(line.rstrip().endswith(%r) for line in open("/proc/self/maps")))
        print(any(line.rstrip().endswith(%r) for line in open("/proc/self/maps")))
    """ % (str(copy), str(original.resolve())), FASTSGEMM_CUBLAS_LIBRARY=str(copy))
    assert again.returncode == 0, again.stderr
    path, copy_mapped, original_mapped = again.stdout.split()
    assert path == str(copy) and copy_mapped == "True" and original_mapped == "False"


@pytest.mark.gpu
def test_a_missing_cublas_fails_the_cublas_rung_clearly_and_the_other_rungs_still_run(tmp_path):
    missing = tmp_path / "libcublas.so.13"
    done = _run("""
        import numpy as np, fastsgemm
        a = np.random.default_rng(1).random((64, 48), dtype=np.float32)
        b = np.random.default_rng(2).random((48, 32), dtype=np.float32)
        try:
            fastsgemm.sgemm(a, b, kernel="cublas")
        except fastsgemm.CudaError as e:
            print("ERROR", e.cuda_name, e)
        d = fastsgemm.sgemm(a, b, kernel="warptile")
        print("OTHER", float(np.abs(d - a.astype(np.float64) @ b).max()))
        print("AUTO", fastsgemm.auto_kernel(64, 64, 8192))  # cuBLAS's shape in the tuning table
    """, FASTSGEMM_CUBLAS_LIBRARY=str(missing))
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["ERROR"].startswith("cudaErrorSharedObjectInitFailed")
    assert "cuBLAS could not be loaded" in lines["ERROR"] and str(missing) in lines["ERROR"]
    assert "pip install" in lines["ERROR"] and "nvidia-cublas" in lines["ERROR"]
    assert float(lines["OTHER"]) < 1e-3
    assert "cublas" not in lines["AUTO"]  # auto does not pick a rung that cannot run


# ---- build_cuda.py: the GPU architectures ----

def test_native_builds_for_the_gpus_found_here(build_cuda, monkeypatch):
    monkeypatch.delenv("FASTSGEMM_CUDA_ARCHS", raising=False)  # native is the default
    monkeypatch.setattr(build_cuda, "nvcc_archs", lambda nvcc: ["75", "80", "86", "89", "90", "100", "120"])
    monkeypatch.setattr(build_cuda, "present_gpus", lambda: ["90"])
    archs, why = build_cuda.choose_archs("nvcc")
    assert archs == ["90"] and "9.0" in why and "portable" in why  # says what it found, and how to build for all
    monkeypatch.setattr(build_cuda, "present_gpus", lambda: ["86", "80"])
    assert build_cuda.choose_archs("nvcc")[0] == ["80", "86"]
    # A GPU newer than this nvcc knows: the newest it can build, whose PTX the GPU compiles at load time.
    monkeypatch.setattr(build_cuda, "present_gpus", lambda: ["130"])
    assert build_cuda.choose_archs("nvcc")[0] == ["120"]


def test_gpus_older_than_supported_are_passed_over(build_cuda, monkeypatch):
    """The kernels need compute capability 8.0 (cp.async, TF32 mma): an older GPU beside a supported one is left
    out, and one alone makes the build portable; the reason names them."""
    monkeypatch.delenv("FASTSGEMM_CUDA_ARCHS", raising=False)
    monkeypatch.setattr(build_cuda, "nvcc_archs", lambda nvcc: ["75", "80", "86", "89", "90", "120"])
    monkeypatch.setattr(build_cuda, "present_gpus", lambda: ["61", "80"])
    archs, why = build_cuda.choose_archs("nvcc")
    assert archs == ["80"] and "6.1" in why and "passed over" in why
    monkeypatch.setattr(build_cuda, "present_gpus", lambda: ["75"])
    archs, why = build_cuda.choose_archs("nvcc")
    assert archs == ["80", "90"] and "7.5" in why and "portable" in why


def test_without_a_gpu_the_default_is_portable(build_cuda, monkeypatch):
    monkeypatch.delenv("FASTSGEMM_CUDA_ARCHS", raising=False)
    monkeypatch.setattr(build_cuda, "present_gpus", lambda: [])
    archs, why = build_cuda.choose_archs("nvcc")
    assert archs == build_cuda.parse_archs(build_cuda.PORTABLE_ARCHS) == ["80", "90"] and "no GPU" in why
    monkeypatch.setenv("FASTSGEMM_CUDA_ARCHS", "")  # empty: the default
    assert build_cuda.choose_archs("nvcc")[0] == ["80", "90"]
    monkeypatch.setenv("FASTSGEMM_CUDA_ARCHS", "portable")
    monkeypatch.setattr(build_cuda, "present_gpus", lambda: ["90"])  # asked for: portable even with a GPU here
    assert build_cuda.choose_archs("nvcc")[0] == ["80", "90"]


def test_a_list_is_taken_as_given_and_nonsense_refused(build_cuda, monkeypatch):
    monkeypatch.setenv("FASTSGEMM_CUDA_ARCHS", "sm_80; 90a")
    assert build_cuda.choose_archs("nvcc")[0] == ["80", "90a"]
    monkeypatch.setenv("FASTSGEMM_CUDA_ARCHS", "hopper")
    with pytest.raises(build_cuda.CudaNotFound, match="hopper"):
        build_cuda.choose_archs("nvcc")
    monkeypatch.setenv("FASTSGEMM_CUDA_ARCHS", ";")
    with pytest.raises(build_cuda.CudaNotFound, match="names no architecture"):
        build_cuda.choose_archs("nvcc")


def test_what_a_build_runs_on():
    portable = {"archs": ["80", "90"], "ptx": "90"}
    assert all(_cuda_setup.runs_on(portable, cc) for cc in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)])
    assert not _cuda_setup.runs_on(portable, (7, 5))
    hopper = {"archs": ["90"], "ptx": "90"}
    assert _cuda_setup.runs_on(hopper, (9, 0)) and not _cuda_setup.runs_on(hopper, (8, 6))
    specific = {"archs": ["90a"], "ptx": "90a"}  # sm_90a code and PTX run on 9.0 alone
    assert _cuda_setup.runs_on(specific, (9, 0)) and not _cuda_setup.runs_on(specific, (10, 0))
    mixed = {"archs": ["90a", "100"], "ptx": "100"}  # 9.0 runs the sm_90a code, though the PTX is newer
    assert _cuda_setup.runs_on(mixed, (9, 0)) and _cuda_setup.runs_on(mixed, (10, 3))
    assert not _cuda_setup.runs_on(mixed, (8, 9))


def test_the_build_records_what_it_covers():
    info = _cuda_setup.build_info()
    assert info is not None, "setup.py records it in the module"
    assert info["archs"] and info["ptx"] in info["archs"] and info["why"]
    done = subprocess.run([sys.executable, "-m", "fastsgemm"], capture_output=True, text=True, timeout=600)
    assert f"built for: {', '.join('sm_' + a for a in info['archs'])}" in done.stdout, done.stdout + done.stderr


# ---- build_cuda.py: the choice of CUDA ----

def test_build_mode_defaults_to_auto_and_rejects_others(build_cuda, monkeypatch):
    monkeypatch.delenv("FASTSGEMM_CUDA", raising=False)
    assert build_cuda.mode() == "auto"
    monkeypatch.setenv("FASTSGEMM_CUDA", "PyPI")
    assert build_cuda.mode() == "pypi"
    monkeypatch.setenv("FASTSGEMM_CUDA", "conda")
    with pytest.raises(build_cuda.CudaNotFound, match="expected one of auto, toolkit, pypi"):
        build_cuda.mode()


def test_pypi_mode_asks_for_the_cuda_wheels_and_cublas_at_run_time(build_cuda, monkeypatch):
    monkeypatch.setenv("FASTSGEMM_CUDA", "pypi")
    # setuptools' own part of the hook runs setup.py in the working directory: only ours is under test here
    monkeypatch.setattr(build_cuda._setuptools, "get_requires_for_build_wheel", lambda config_settings=None: [])
    requires = build_cuda.get_requires_for_build_wheel()
    names = {r.split("=")[0] for r in requires}
    assert {"nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl",
            "nvidia-cublas"} <= names
    assert build_cuda.runtime_requirements() == [build_cuda.CUBLAS_RUNTIME]


def test_toolkit_mode_asks_for_nothing_more(build_cuda, monkeypatch):
    monkeypatch.setenv("FASTSGEMM_CUDA", "toolkit")
    monkeypatch.setattr(build_cuda._setuptools, "get_requires_for_build_wheel", lambda config_settings=None: [])
    assert not any(r.startswith("nvidia-") for r in build_cuda.get_requires_for_build_wheel())
    assert build_cuda.runtime_requirements() == []


def test_auto_mode_takes_the_toolkit_where_there_is_one(build_cuda, monkeypatch, tmp_path):
    monkeypatch.setenv("FASTSGEMM_CUDA", "auto")
    monkeypatch.setattr(build_cuda, "find_toolkit", lambda: None)
    assert build_cuda.uses_wheels()
    monkeypatch.setattr(build_cuda, "find_toolkit", lambda: tmp_path)
    assert not build_cuda.uses_wheels()


def test_toolkit_mode_without_a_toolkit_says_what_to_do(build_cuda, monkeypatch):
    monkeypatch.setenv("FASTSGEMM_CUDA", "toolkit")
    monkeypatch.setattr(build_cuda, "find_toolkit", lambda: None)
    with pytest.raises(build_cuda.CudaNotFound, match="no CUDA Toolkit was found.*CUDA_HOME"):
        build_cuda.cuda_home()


def test_wheel_mode_without_the_wheels_installed_says_what_to_do(build_cuda, monkeypatch, tmp_path):
    monkeypatch.setenv("FASTSGEMM_CUDA", "pypi")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(build_cuda.CudaNotFound, match="nvidia-cuda-nvcc"):
        build_cuda.cuda_home()


def test_the_wheel_tree_is_found_on_sys_path(build_cuda, monkeypatch, tmp_path):
    home = tmp_path / "nvidia" / f"cu{build_cuda.CUDA_MAJOR}"
    for f in ("bin/nvcc", "include/cuda_runtime_api.h", "include/cublas_v2.h", "lib/libcudart_static.a"):
        (home / f).parent.mkdir(parents=True, exist_ok=True)
        (home / f).write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), str(tmp_path)])
    monkeypatch.setenv("FASTSGEMM_CUDA", "pypi")
    found, from_wheels = build_cuda.cuda_home()
    assert found == home and from_wheels
    assert (home / "bin" / "nvcc").stat().st_mode & 0o111  # made executable: wheels do not always keep the bit


def test_sdist_manifest_names_what_a_build_needs():
    manifest = (ROOT / "MANIFEST.in").read_text()
    for needed in ("build_cuda.py", "recursive-include csrc", "recursive-include kernels"):
        assert needed in manifest


def test_the_module_exports_its_init_function_alone():
    """Every helper of the extension is hidden (setup.py's -fvisibility=hidden): nothing but PyInit__sgemm can
    clash with another library's symbol of the same name. Data symbols the linker itself adds are not counted."""
    import shutil

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm (binutils)")
    listed = subprocess.run([nm, "-D", "--defined-only", fastsgemm._sgemm.__file__], capture_output=True,
                            text=True, check=True).stdout
    functions = sorted(line.split()[-1] for line in listed.splitlines() if line.split()[1:2] in (["T"], ["W"]))
    assert functions == ["PyInit__sgemm"], functions
