"""The registry as Python sees it: the one list of rungs (kernels/support/registry.c, read once through the C
extension), how a kernel name is parsed, which kernels kernel="auto" may run, and the error bound of each
precision. The API, the tuning, the benchmarks and the tests all read the ladder through this module."""
from __future__ import annotations

from typing import NamedTuple

from . import _sgemm
from ._operands import describe

class KernelConfig(NamedTuple):
    """Another template configuration of a rung: run it as kernel="<rung>:<name>"."""

    name: str
    shape: str  # what differs from the rung's own configuration
    max_dim: int  # largest M and N it takes
    fill: tuple | None = None  # how a long K is sliced: KernelInfo.fill
    batched: bool = False  # runs a stack of products in one launch: KernelInfo.batched
    precision: str = "fp32"  # KernelInfo.precision, or "near-fp32": within the FP32 bound, never auto's
    source: str = ""  # the file that holds it: the rung's own, or the engine's (kernels/engine/)
    not_for_auto: str | None = None  # why auto never runs it though it is FP32-accurate (the rung's, or its own)


class KernelInfo(NamedTuple):
    """One rung of the ladder, as the registry (kernels/support/registry.c) describes it."""

    name: str
    rung: int | None  # position on the ladder; None for the cuBLAS yardstick
    idea: str
    device: str  # "cpu" or "cuda"
    source: str  # the file that holds it
    max_dim: int  # largest M and N it takes
    sass: tuple  # instructions its idea compiles to, checked in CI (tests/test_compiled_kernels.py)
    precision: str  # "fp32": error like cuBLAS SGEMM's; "tf32": operands rounded to TF32 (about 3e-4)
    configs: tuple  # its other configurations (KernelConfig), for kernel="<name>:<config>" and kernel="auto"
    # Past K = 4096 the extension runs K in slices, side by side, and sums them (csrc/operands.c). None: slices of
    # about 512, for sums whose accuracy needs them; (tile_m, tile_n, blocks_per_sm, short_slice): sums accurate at
    # any K, so only as many slices as one wave of such blocks needs to fill the GPU. short_slice > 0 (the engine's
    # thin configurations): any K from 2 * short_slice up is sliced so, in slices of at least short_slice (all but
    # the last, which takes what is left). whole_k (a fifth element, True for ozaki): K is never sliced, so a row's
    # result is the same bits in a product of any number of rows.
    fill: tuple | None = None
    # A stack of products (fastsgemm.matmul) runs in one launch: the product index is a grid dimension (the wgmma
    # rungs) or cuBLAS's strided-batched call. False: the stack runs product by product, a launch each.
    batched: bool = False
    # Why kernel="auto" never runs it (its speed depends on the data, which auto cannot see), or None.
    not_for_auto: str | None = None

    @property
    def tensor_cores(self) -> bool:
        """Whether its idea compiles to tensor-core instructions (HMMA: mma.sync; HGMMA: wgmma; IGMMA: INT8
        wgmma), by its SASS claims: plots and tables draw these apart from the SIMT ladder."""
        return bool({"HMMA", "HGMMA", "IGMMA"} & set(self.sass))


REGISTRY = tuple(
    KernelInfo(r["name"], None if r["number"] < 0 else r["number"], r["idea"], r["device"], r["source"], r["max_dim"],
               tuple(r["sass"].split()), r["precision"], tuple(KernelConfig(*c) for c in r["configs"]), r["fill"],
               r["batched"], r["not_for_auto"])
    for r in _sgemm.rungs()
)
INDEX = {info.name: i for i, info in enumerate(REGISTRY)}

# The relative Frobenius error against float64 each precision must stay within on random inputs with K <= 4096
# (the tests' and the main job's bound): FP32 rungs; configurations within that bound whose error is above cuBLAS
# FP32's all the same (near-fp32: ozaki:7, which auto never runs); rungs that round operands to TF32 (2^-11 each:
# about 3e-4 typically, up to 1e-3 at K = 1).
ERROR_BOUND = {"fp32": 1e-5, "near-fp32": 1e-5, "tf32": 2e-3}

KERNELS = tuple(info.name for info in REGISTRY)
"""The names of the rungs, in ladder order (the registry's order)."""


def kernels() -> list[KernelInfo]:
    """The ladder in order: name, rung number, one-line idea, "cpu" or "cuda", source file, largest M/N,
    the SASS instructions the rung's idea compiles to, its precision ("fp32", or "tf32" for the rungs
    that round operands to TF32) and its other configurations (run as kernel="<name>:<config>")."""
    return list(REGISTRY)


class Kernel(NamedTuple):
    """A kernel as the C core takes it: a registry index and a configuration index (-1: the rung's own)."""

    rung: int
    config: int

    @property
    def name(self) -> str:
        info = REGISTRY[self.rung]
        return info.name if self.config < 0 else f"{info.name}:{info.configs[self.config].name}"

    @property
    def max_dim(self) -> int:
        info = REGISTRY[self.rung]
        return info.max_dim if self.config < 0 else info.configs[self.config].max_dim

    @property
    def batched(self) -> bool:
        """Whether it runs a stack of products in one launch."""
        info = REGISTRY[self.rung]
        return info.batched if self.config < 0 else info.configs[self.config].batched


def parse_kernel(kernel) -> Kernel | None:
    """The kernel a name means: "<rung>" or "<rung>:<config>"; None for "auto"."""
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a string naming a rung, got {describe(kernel)}")
    if kernel == "auto":
        return None
    name, colon, config = kernel.partition(":")
    if name not in INDEX:
        raise ValueError(f"unknown kernel {kernel!r}; valid kernels: {', '.join(('auto',) + KERNELS)}")
    index = INDEX[name]
    if not colon:
        return Kernel(index, -1)
    configs = [c.name for c in REGISTRY[index].configs]
    if config not in configs:
        offered = f"its configurations: {', '.join(configs)}" if configs else "it has none"
        raise ValueError(f"kernel {name!r} has no configuration {config!r}; {offered}")
    return Kernel(index, configs.index(config))


def auto_candidates() -> dict:
    """Every kernel name kernel="auto" may run -> its largest M and N: the FP32-accurate CUDA rungs and their
    configurations."""
    candidates = {}
    for info in REGISTRY:
        if info.device == "cuda" and info.precision == "fp32" and info.not_for_auto is None:
            candidates[info.name] = info.max_dim
            candidates.update({f"{info.name}:{c.name}": c.max_dim for c in info.configs
                               if c.precision == "fp32" and c.not_for_auto is None})
    return candidates


def batched_candidates() -> set:
    """The kernels auto may run (auto_candidates) that run a stack of products in one launch."""
    batched = set()
    for info in REGISTRY:
        if info.device == "cuda" and info.precision == "fp32" and info.not_for_auto is None:
            batched.update([info.name] if info.batched else [])
            batched.update(f"{info.name}:{c.name}" for c in info.configs
                           if c.batched and c.precision == "fp32" and c.not_for_auto is None)
    return batched
