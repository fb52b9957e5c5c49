"""fastsgemm's own device memory: how much it holds on each GPU, at most how much, and a limit on it.

Counted: every allocation fastsgemm makes on a GPU (DeviceArrays, the temporaries of host operands and of
operands copied into a kernel's layout, the tensor-core rungs' packed workspaces, cuBLAS's workspaces).
Not counted: memory the caller's framework owns (CuPy and torch arrays, the results sgemm makes for them).

    fastsgemm.set_device_memory_limit("4GiB")     # every GPU; FASTSGEMM_DEVICE_MEMORY_LIMIT=4GiB at import does the same
    fastsgemm.device_memory()                     # {'limit': 4294967296, 'in_use': 0, 'peak': 0}

Under a limit, an allocation that would go past it raises MemoryError naming the limit, before the driver is
asked; a tensor-core rung packs its operands in K panels that fit, or runs the path that needs no workspace. The
memory pools that fastsgemm's workspaces and results come from keep what was freed for the next call, up to a 64th
of the GPU or the limit, whichever is smaller. Each thread that has called cuBLAS holds a 32 MiB workspace, which
counts. fastsgemm.dask streams host chunks through a GPU within the limit.
"""
from __future__ import annotations

import numbers
import os
import re

from . import _sgemm
from ._api import device_ordinal

ENVIRONMENT_VARIABLE = "FASTSGEMM_DEVICE_MEMORY_LIMIT"

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value) -> int:
    """A byte count: an int, or a string such as "512MiB", "3.2 GB" or "1000000". ValueError otherwise."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        count = int(value)
    elif isinstance(value, str):
        found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", value)
        if found is None or found.group(2).lower() not in _UNITS:
            raise ValueError(f"{value!r} is not a byte count: write an integer or a number with a unit "
                             f"({', '.join(u for u in _UNITS if u)}), such as '512MiB'")
        count = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
    else:
        raise TypeError(f"a byte count must be an int or a string such as '512MiB', got {type(value).__name__}")
    if count < 0:
        raise ValueError(f"a byte count cannot be negative, got {value!r}")
    return count


def _ordinal_or_every(device) -> int:
    return -1 if device is None else device_ordinal(device)


def set_device_memory_limit(limit, device=None) -> None:
    """Caps the device memory fastsgemm itself may hold on `device` (an ordinal, a torch.device or a CuPy Device;
    None: every GPU) at `limit` bytes (an int or a string such as "512MiB"; None removes the cap). Takes effect for
    the next allocation; memory already held is not freed."""
    _sgemm.set_device_memory_limit(_ordinal_or_every(device), None if limit is None else parse_bytes(limit))


def device_memory(device=None) -> dict:
    """fastsgemm's own device memory on `device` (None: the current device), in bytes: its limit (None when there
    is none), what it holds now, and the most it has held since the process started or the peak was reset."""
    limit, in_use, peak = _sgemm.device_memory(device_ordinal(device))
    return {"limit": limit, "in_use": in_use, "peak": peak}


def reset_device_memory_peak(device=None) -> None:
    """Starts the peak of `device` (None: every GPU) again from what is held now."""
    _sgemm.reset_device_memory_peak(_ordinal_or_every(device))


def limit_from_environment() -> None:
    """Applies FASTSGEMM_DEVICE_MEMORY_LIMIT, if it is set, to every GPU (at import). ValueError names the variable
    when its value is not a byte count."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not value:
        return
    try:
        limit = parse_bytes(value)
    except ValueError as error:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}: {error}") from None
    _sgemm.set_device_memory_limit(-1, limit)
