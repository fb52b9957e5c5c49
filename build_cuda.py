"""Where the build's CUDA comes from, and the PEP 517 backend that asks for it.

fastsgemm builds with nvcc, the CUDA runtime's headers and static library, and
cuBLAS's headers. They come from one of two places:

- a CUDA Toolkit on this machine: $CUDA_HOME or $CUDA_PATH, the one whose nvcc
  is on PATH, or /usr/local/cuda;
- NVIDIA's CUDA wheels on PyPI (nvcc, nvvm, the runtime, crt, CCCL, cuBLAS),
  which this backend adds to the build's requirements, so that a machine with
  only a driver builds too. The module then opens cuBLAS from the
  nvidia-cublas wheel, a runtime dependency.

FASTSGEMM_CUDA picks: "auto" (the default: the Toolkit where there is one,
else the wheels), "toolkit" (the Toolkit, or fail), "pypi" (the wheels even
where a Toolkit is installed: what a wheel for other machines is built with).

Which GPUs the build has code for is chosen here too (choose_archs, from
FASTSGEMM_CUDA_ARCHS): by default those of the machine that builds, or, on a
machine without a GPU, a portable set.

The backend is setuptools' own (setup.py does the compiling), with one hook
changed: the requirements of a build list the CUDA wheels when they will be
used. setup.py imports this module for the same choice.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403: the rest of the PEP 517 interface, unchanged

# The CUDA release the wheels come from. Its runtime needs a driver for CUDA 13 (R580 or newer on Linux).
CUDA_MAJOR = 13
CUDA_WHEELS = [
    f"nvidia-cuda-nvcc=={CUDA_MAJOR}.0.*",  # nvcc, ptxas, fatbinary, nvlink
    f"nvidia-nvvm=={CUDA_MAJOR}.0.*",  # cicc, which the nvcc wheel lacks
    f"nvidia-cuda-runtime=={CUDA_MAJOR}.0.*",  # cuda_runtime.h, libcudart_static.a
    f"nvidia-cuda-crt=={CUDA_MAJOR}.0.*",  # the headers nvcc includes itself
    f"nvidia-cuda-cccl=={CUDA_MAJOR}.0.*",  # cuda/barrier and the rest of libcu++, for the Hopper rungs
    f"nvidia-cublas=={CUDA_MAJOR}.0.*",  # cublas_v2.h
]
# What the module needs at run time when built from the wheels: cuBLAS, opened on first use.
CUBLAS_RUNTIME = f"nvidia-cublas>={CUDA_MAJOR}.0,<{CUDA_MAJOR + 1}"
MODES = ("auto", "toolkit", "pypi")


class CudaNotFound(Exception):
    pass


# ---- the GPU architectures to build for ----

PORTABLE_ARCHS = "80;90"  # 8.x GPUs run sm_80 machine code, Hopper sm_90's; the PTX of sm_90 JITs on later ones


def parse_archs(text):
    archs = [a.strip().lower().removeprefix("sm_") for a in text.replace(",", ";").split(";") if a.strip()]
    for a in archs:
        if not (a.rstrip("a").isdigit()):
            raise CudaNotFound(f"fastsgemm: FASTSGEMM_CUDA_ARCHS has '{a}', expected numbers such as 80;86;89;90 or 90a")
    return archs


def present_gpus():
    """The compute capabilities of the GPUs this machine has, e.g. ["90"], asked of the driver (libcuda); [] where
    there is none or no driver (a CI machine)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return []
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    found = set()
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        if (cuda.cuDeviceGet(ctypes.byref(device), ordinal) == 0
                and cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device) == 0     # COMPUTE_CAPABILITY_MAJOR
                and cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device) == 0):  # COMPUTE_CAPABILITY_MINOR
            found.add(f"{major.value}{minor.value}")
    return sorted(found, key=int)


def nvcc_archs(nvcc):
    """The sm_ targets this nvcc can build, e.g. ["75", "80", ..., "120"]."""
    done = subprocess.run([str(nvcc), "--list-gpu-code"], capture_output=True, text=True)
    return [c.removeprefix("sm_") for c in done.stdout.split() if c.startswith("sm_") and c[3:].isdigit()]


OLDEST_SUPPORTED = 80  # the kernels use cp.async and TF32 mma: compute capability 8.0 and newer


def capability(arch):
    """"90" -> "9.0", "120" -> "12.0"."""
    return f"{arch[:-1]}.{arch[-1]}"


def choose_archs(nvcc):
    """(archs, why) from FASTSGEMM_CUDA_ARCHS: a list as given; "portable"; "native" (the default, and what an empty
    value means): the supported GPUs this machine has (compute capability 8.0 and newer; one newer than this nvcc
    knows gets the newest target it knows, whose PTX it compiles at load time), or the portable set where it has
    none."""
    asked = os.environ.get("FASTSGEMM_CUDA_ARCHS", "").strip().lower() or "native"
    if asked == "portable":
        return parse_archs(PORTABLE_ARCHS), "FASTSGEMM_CUDA_ARCHS=portable"
    if asked != "native":
        archs = parse_archs(asked)
        if not archs:
            raise CudaNotFound(f"fastsgemm: FASTSGEMM_CUDA_ARCHS={asked!r} names no architecture")
        return archs, f"FASTSGEMM_CUDA_ARCHS={asked}"
    gpus = present_gpus()
    supported = [g for g in gpus if int(g) >= OLDEST_SUPPORTED]
    passed_over = "" if len(supported) == len(gpus) else (
        f" (passed over, older than fastsgemm supports: {', '.join(capability(g) for g in gpus if g not in supported)})")
    if not supported:
        where = "no GPU on the machine that built it" if not gpus else "no supported GPU on the machine that built it"
        return parse_archs(PORTABLE_ARCHS), f"{where}{passed_over}: the portable set, as FASTSGEMM_CUDA_ARCHS=portable"
    known = [k for k in nvcc_archs(nvcc) if int(k) >= OLDEST_SUPPORTED]
    archs = sorted({g if g in known or not known else max((k for k in known if int(k) <= int(g)), key=int,
                                                           default=g) for g in supported}, key=int)
    return archs, (f"the GPUs of the machine that built it, compute capability "
                   f"{', '.join(capability(g) for g in supported)}{passed_over}; FASTSGEMM_CUDA_ARCHS=portable builds "
                   "for every supported GPU")


def mode():
    value = os.environ.get("FASTSGEMM_CUDA", "auto").strip().lower() or "auto"
    if value not in MODES:
        raise CudaNotFound(f"FASTSGEMM_CUDA is '{value}'; expected one of {', '.join(MODES)}")
    return value


def library_dir(home):
    return home / "lib64" if (home / "lib64").exists() else home / "lib"


def _is_toolkit(home):
    """A directory with nvcc, the runtime's headers and cuBLAS: all that the build needs."""
    return (
        home is not None
        and (home / "bin" / "nvcc").exists()
        and (home / "include" / "cuda_runtime_api.h").exists()
        and (home / "include" / "cublas_v2.h").exists()
        and (library_dir(home) / "libcudart_static.a").exists()
    )


def _toolkit_of_nvcc(nvcc):
    """The toolkit an nvcc belongs to, also when it is a wrapper script elsewhere: nvcc names it as TOP."""
    home = Path(nvcc).resolve().parent.parent
    if _is_toolkit(home):
        return home
    try:
        dry = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    for line in (dry.stdout + dry.stderr).splitlines():
        if line.startswith("#$ TOP="):
            return Path(line.split("=", 1)[1].strip()).resolve().parent
    return None


def find_toolkit():
    """The toolkit root: $CUDA_HOME or $CUDA_PATH, else the one nvcc on PATH belongs to, else /usr/local/cuda;
    None where there is none."""
    for home in (Path(c) for c in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if c):
        if _is_toolkit(home):
            return home
    nvcc = shutil.which("nvcc")
    home = _toolkit_of_nvcc(nvcc) if nvcc else None
    if _is_toolkit(home):
        return home
    default = Path("/usr/local/cuda")
    return default if _is_toolkit(default) else None


def find_wheel_tree():
    """The tree the CUDA wheels install into (nvidia/cu13 with bin, nvvm, include and lib) on sys.path, or None."""
    for entry in sys.path:
        home = Path(entry or ".") / "nvidia" / f"cu{CUDA_MAJOR}"
        if (home / "bin" / "nvcc").exists() and _is_toolkit(home):
            return home
    return None


def uses_wheels():
    """Whether this build takes CUDA from the PyPI wheels (FASTSGEMM_CUDA, and whether there is a Toolkit)."""
    chosen = mode()
    return chosen == "pypi" or (chosen == "auto" and find_toolkit() is None)


def cuda_home():
    """(root, from_wheels): the tree to build with. Raises CudaNotFound saying what to do."""
    if not uses_wheels():
        home = find_toolkit()
        if home is None:
            raise CudaNotFound(
                "fastsgemm: FASTSGEMM_CUDA=toolkit, but no CUDA Toolkit was found (looked in $CUDA_HOME, $CUDA_PATH, "
                "on PATH and in /usr/local/cuda). Install the Toolkit (12.0 or newer), set CUDA_HOME, or leave "
                "FASTSGEMM_CUDA unset to build with NVIDIA's CUDA wheels from PyPI.")
        return home, False
    home = find_wheel_tree()
    if home is None:
        raise CudaNotFound(
            f"fastsgemm: building with NVIDIA's CUDA wheels, but they are not installed in this environment. A plain "
            f"`python -m pip install .` fetches them; with --no-build-isolation, install them first: "
            f"python -m pip install {' '.join(repr(w) for w in CUDA_WHEELS)}")
    # Wheels do not always keep the executable bit of the tools they carry.
    for tool in [*(home / "bin").iterdir(), *(home / "nvvm" / "bin").glob("*")]:
        if tool.is_file() and not os.access(tool, os.X_OK):
            try:
                tool.chmod(tool.stat().st_mode | 0o111)
            except OSError as e:
                raise CudaNotFound(f"fastsgemm: {tool} from the CUDA wheels is not executable and cannot be made so "
                                   f"({e}); reinstall the CUDA wheels where they can be, or build with a Toolkit") from e
    return home, True


def runtime_requirements():
    """What the built module needs besides numpy: cuBLAS from its wheel where CUDA came from the wheels."""
    return [CUBLAS_RUNTIME] if uses_wheels() else []


def _cuda_requirements():
    return list(CUDA_WHEELS) if uses_wheels() else []


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _cuda_requirements()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _cuda_requirements()
