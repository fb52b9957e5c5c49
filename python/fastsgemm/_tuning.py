"""kernel="auto": the kernel measured fastest for a problem's shape on this GPU.

The tuning table (tuning.json beside this file, written by `python -m fastsgemm.tune`) holds, for each
GPU that was tuned, a list of measured shapes, the median time of every FP32-accurate kernel at each
(rungs and their configurations, cuBLAS among them), and the fastest. A problem takes the fastest kernel
of the nearest measured shape, nearest by

    |log2(M / M')| + |log2(N / N')| + |log2(K / K')|  (+ 1 when only one of the two is a multiple of 4
                                                         in every dimension)

since speed follows the orders of magnitude of the dimensions, and shapes that are not multiples of 4 cannot
use 16-byte vector loads. A kernel that cannot take the problem's M or N (max_dim) gives way to cuBLAS.

A stack of products (fastsgemm.matmul) runs in one launch on the kernels that take a batch (the wgmma rungs and
cuBLAS: KernelInfo.batched). The table also holds stacks timed as stacks (entries with a "count": count' products
of M' x N' x K' each, every batched kernel timed on the whole stack). For a stack of `count` products auto takes
the measured stack or single product (count' = 1) nearest by

    |log2(count * M * N / (count' * M' * N'))| + |log2(K / K')| + (|log2(M / M')| + |log2(N / N')|) / 4  (+ 1 as above)

(what fills the GPU is the number of output tiles, whichever product they belong to; how full each product
leaves its tiles weighs less): a measured stack's own choice (tune.choose's), or else of the batched kernels
timed there the fastest. A stack that is one matrix
product (csrc/operands.c's fsg_run_batch: a shared B with A's and the results' matrices end to end) is looked
up as that product. Single products never take a stack's entry.

GPUs not in the table: a tuned GPU of the same compute capability lends its entries (the same SM design,
other clocks and memory); otherwise auto runs cuBLAS. FASTSGEMM_TUNING names another table file
(`python -m fastsgemm.tune --output FILE` writes one); the table is read once per process.
"""
from __future__ import annotations

import functools
import json
import math
import os
import warnings
from pathlib import Path

from . import _sgemm
from ._registry import auto_candidates, batched_candidates

SHIPPED_TABLE = Path(__file__).with_name("tuning.json")
TABLE_FORMAT = 1
FALLBACK = "cublas"
# What auto runs in cuBLAS's place where cuBLAS cannot be opened (kernels/support/cublas.c opens it on first use).
WITHOUT_CUBLAS = "warptile:waves"


def table_path() -> Path:
    return Path(os.environ["FASTSGEMM_TUNING"]) if os.environ.get("FASTSGEMM_TUNING") else SHIPPED_TABLE


def read_table(path: Path) -> dict:
    """The table at `path` ({"format": 1, "devices": {}} when there is no file); ValueError when unreadable."""
    if not path.exists():
        return {"format": TABLE_FORMAT, "devices": {}}
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"tuning table {path} cannot be read: {error}") from None
    if not isinstance(table, dict) or table.get("format") != TABLE_FORMAT or not isinstance(table.get("devices"), dict):
        raise ValueError(f"tuning table {path} is not a format-{TABLE_FORMAT} fastsgemm table")
    return table


def _fastest_first(times: dict, kernels: set) -> tuple:
    """The kernels among `kernels` that a shape's timings (kernel -> median ms) name, fastest first."""
    return tuple(sorted((k for k in times if k in kernels), key=times.get))


@functools.lru_cache(maxsize=None)
def tuned_devices() -> dict:
    """GPU name -> (compute capability, [(M, N, K, kernel, batched, count), ...]), entries this build can run only;
    batched: the kernels that run a stack in one launch, fastest first, as timed at that shape; count: the number
    of products timed together (1: one product)."""
    path = table_path()
    try:
        table = read_table(path)
    except ValueError as error:
        warnings.warn(f"fastsgemm: {error}; kernel='auto' runs {FALLBACK}", RuntimeWarning, stacklevel=2)
        return {}
    known = auto_candidates()
    one_launch = batched_candidates()
    devices = {}
    for name, device in table["devices"].items():
        entries = [(s["M"], s["N"], s["K"], s["kernel"], _fastest_first(s.get("median_ms", {}), one_launch),
                    s.get("count", 1)) for s in device.get("shapes", []) if s.get("kernel") in known]
        if entries:
            devices[name] = (tuple(device.get("compute_capability", ())), entries)
    return devices


def _lender(device: int):
    """The tuned GPU whose entries stand for this device: its own name, or a same-compute-capability GPU's; None."""
    info = _sgemm.device_info(device)
    devices = tuned_devices()
    if info["name"] in devices:
        return info["name"]
    return next((name for name in sorted(devices) if devices[name][0] == tuple(info["compute_capability"])), None)


@functools.lru_cache(maxsize=None)
def _entries_for(device: int) -> tuple:
    """The measured shapes that stand for this device: its own, or a same-compute-capability GPU's."""
    lender = _lender(device)
    return tuple(tuned_devices()[lender][1]) if lender is not None else ()


def _ratio(x, e) -> float:
    return abs(math.log2(max(x, 1) / max(e, 1)))


def _alignment_step(m, n, k, entry) -> float:
    """1 when only one of the problem and the entry is a multiple of 4 in every dimension."""
    em, en, ek = entry[:3]
    return 0.0 if (m % 4 == 0 and n % 4 == 0 and k % 4 == 0) == (em % 4 == 0 and en % 4 == 0 and ek % 4 == 0) else 1.0


def _count(entry) -> int:
    return entry[5] if len(entry) > 5 else 1


def _distance(m, n, k, entry) -> float:
    em, en, ek = entry[:3]
    return _ratio(m, em) + _ratio(n, en) + _ratio(k, ek) + _alignment_step(m, n, k, entry)


def _nearest_single(entries, m: int, n: int, k: int):
    """The measured single product nearest to m x n x k among entries, or None where there is none."""
    singles = [entry for entry in entries if _count(entry) == 1]
    return min(singles, key=lambda entry: _distance(m, n, k, entry)) if singles else None


def pick(entries, m: int, n: int, k: int) -> str:
    """The kernel of the measured single product nearest to m x n x k, among entries (M, N, K, kernel[, batched,
    count]); cuBLAS when there are none or that kernel cannot take this M or N."""
    nearest = _nearest_single(entries, m, n, k)
    if nearest is None:
        return FALLBACK
    return nearest[3] if max(m, n) <= auto_candidates()[nearest[3]] else FALLBACK


def _stack_distance(m, n, k, count, entry) -> float:
    em, en, ek = entry[:3]
    whole = _ratio(count * m * n, _count(entry) * em * en)
    return whole + _ratio(k, ek) + (_ratio(m, em) + _ratio(n, en)) / 4 + _alignment_step(m, n, k, entry)


def pick_batched(entries, m: int, n: int, k: int, count: int) -> str:
    """For a stack of `count` m x n x k products, at the measured stack or product nearest to it
    (_stack_distance): a stack's own choice, else the fastest kernel timed there that runs a stack in one launch;
    cuBLAS (strided-batched) when there is none."""
    if not entries:
        return FALLBACK
    nearest = min(entries, key=lambda entry: _stack_distance(m, n, k, count, entry))
    ranked = nearest[4] if len(nearest) > 4 else ()
    if _count(nearest) > 1 and nearest[3] in batched_candidates():  # a stack's own choice first (tune.choose's)
        ranked = (nearest[3], *(kernel for kernel in ranked if kernel != nearest[3]))
    fits = [kernel for kernel in ranked if max(m, n) <= auto_candidates()[kernel]]
    return fits[0] if fits else FALLBACK


@functools.lru_cache(maxsize=4096)
def choose(device: int, m: int, n: int, k: int, count: int = 1) -> str:
    """The kernel name kernel="auto" runs for an m x n x k problem on CUDA device `device`, or for a stack of
    `count` of them."""
    entries = _entries_for(device)
    kernel = pick(entries, m, n, k) if count <= 1 else pick_batched(entries, m, n, k, count)
    return WITHOUT_CUBLAS if kernel.partition(":")[0] in ("cublas", "cublas_tf32") and not cublas_opens() else kernel


def explain(device: int, m: int, n: int, k: int) -> str:
    """Why kernel="auto" runs what it runs for one m x n x k product on `device`, as a clause: "the fastest of the
    FP32-accurate kernels timed at 1024x1024x1024 on this GPU" and the like."""
    name = _sgemm.device_info(device)["name"]
    nearest = _nearest_single(_entries_for(device), m, n, k)
    if nearest is None:
        return f"this GPU ({name}) has no entry in the tuning table: cuBLAS (python -m fastsgemm.tune makes one)"
    lender = _lender(device)
    whose = "this GPU" if lender == name else f"{lender}, a tuned GPU of the same compute capability"
    why = f"the fastest of the FP32-accurate kernels timed at {nearest[0]}x{nearest[1]}x{nearest[2]} on {whose}"
    kernel = choose(device, m, n, k)
    if kernel != nearest[3]:
        why += f" was {nearest[3]}, which " + ("cannot take this M or N" if kernel == FALLBACK else
                                               "needs cuBLAS, which cannot be opened here")
    return why


@functools.lru_cache(maxsize=1)
def cublas_opens() -> bool:
    """Whether cuBLAS can be opened here (it is, by this question, when it can)."""
    try:
        _sgemm.cublas_library()
    except _sgemm.CudaError:
        return False
    return True
