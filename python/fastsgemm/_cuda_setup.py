"""What this build of fastsgemm needs from the machine's CUDA, checked at import.

- cuBLAS is opened on its first use (kernels/support/cublas.c). Where fastsgemm was built from NVIDIA's CUDA wheels,
  cuBLAS comes from the nvidia-cublas wheel; the C side is told where that wheel's library directory is.
- The CUDA runtime is linked into the module. It needs a driver for its CUDA major version or newer: on an older one
  the import warns once, in one line, and the `cpu` rung keeps working.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from . import _sgemm

# The oldest Linux driver branch for each CUDA major version (minor version compatibility covers the rest).
MINIMUM_DRIVER_BRANCH = {12: 525, 13: 580}


class DriverTooOldWarning(RuntimeWarning):
    """The NVIDIA driver is older than the CUDA this build of fastsgemm was compiled with."""


def version_text(version: int) -> str:
    """A CUDA version as cudaDriverGetVersion and CUDART_VERSION give it (13000) in the usual form (13.0)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def cublas_search_dirs(cuda_major: int, path=None) -> tuple[str, ...]:
    """The directories on sys.path where a nvidia-cublas wheel for `cuda_major` keeps libcublas: nvidia/cu13/lib for
    CUDA 13's wheels, nvidia/cublas/lib for CUDA 12's. Absolute paths; entries that are not directory names (bytes,
    unreadable or overlong paths) are passed over."""
    found = []
    for entry in sys.path if path is None else path:
        if not isinstance(entry, str):
            continue
        root = os.path.join(os.path.abspath(entry or "."), "nvidia")
        for lib in (os.path.join(root, f"cu{cuda_major}", "lib"), os.path.join(root, "cublas", "lib")):
            if os.path.isfile(os.path.join(lib, f"libcublas.so.{cuda_major}")) and lib not in found:
                found.append(lib)
    return tuple(found)


def driver_release(version_file: str = "/proc/driver/nvidia/version") -> str | None:
    """The loaded NVIDIA kernel module's release (for example 550.54.15), or None where it cannot be read."""
    try:
        text = Path(version_file).read_text()
    except OSError:
        return None
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return None


def driver_problem(driver: int, runtime: int, release: str | None) -> str | None:
    """One line saying that the driver is too old for this build and what to do, or None when it is not (or when
    there is no driver at all: cuda_available() says that)."""
    if driver <= 0 or driver // 1000 >= runtime // 1000:
        return None
    major = runtime // 1000
    branch = MINIMUM_DRIVER_BRANCH.get(major)
    needs = f"CUDA {version_text(runtime)}" + (f", driver {branch} or newer" if branch else "")
    named = f"{release}, which supports CUDA {version_text(driver)}" if release else f"CUDA {version_text(driver)}"
    return (f"fastsgemm: the NVIDIA driver ({named}) is older than this build needs ({needs}). Update the driver, or "
            f"build fastsgemm against CUDA {driver // 1000} (FASTSGEMM_CUDA=toolkit with a CUDA {driver // 1000} "
            f"Toolkit). GPU kernels are unavailable until then; kernel='cpu' works.")


def check_at_import() -> None:
    """What `import fastsgemm` checks. Nothing here may stop the import: a failure is a warning."""
    try:
        driver, runtime = _sgemm.cuda_versions()
        _sgemm.set_cublas_search_dirs(cublas_search_dirs(runtime // 1000))
        problem = driver_problem(driver, runtime, driver_release() if 0 < driver < runtime else None)
    except Exception as error:  # noqa: BLE001: an odd sys.path or file system must not break the import
        warnings.warn(f"fastsgemm: the CUDA check at import failed ({error!r}); cuBLAS is looked for by the system's "
                      f"loader only", RuntimeWarning, stacklevel=2)
        return
    if problem is not None:  # one line: no source line under it, as warnings.warn would print
        warnings.warn_explicit(problem, DriverTooOldWarning, "fastsgemm", 0, module="fastsgemm")


def build_info() -> dict | None:
    """What this build of the extension has code for (setup.py records it in the module): "archs" (machine code,
    e.g. ["90"]), "ptx" (the architecture whose PTX later GPUs compile at load time), "why" (how they were chosen);
    None for a build that did not record it."""
    text = _sgemm.build_info()
    return json.loads(text) if text else None


def runs_on(info: dict, capability) -> bool:
    """Whether a build (build_info()) has code for a GPU of this compute capability, (major, minor): machine code
    for the same major and a minor no higher, or PTX of an architecture no newer."""
    major, minor = capability
    for arch in info["archs"]:
        number = int(arch.rstrip("a"))
        if arch.endswith("a"):  # architecture-specific code (sm_90a) runs on that architecture alone
            if number == 10 * major + minor:
                return True
        elif number // 10 == major and number % 10 <= minor:
            return True
    ptx = info["ptx"]
    return int(ptx.rstrip("a")) == 10 * major + minor if ptx.endswith("a") else int(ptx) <= 10 * major + minor
