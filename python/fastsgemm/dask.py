"""fastsgemm as the chunk kernel of Dask: x @ y for dask.array matrices, each output block accumulated in place, the
blocks spread over the GPUs, host chunks streamed through GPUs smaller than the problem.

    import dask.array as da
    import fastsgemm.dask

    x = da.random.random((40000, 30000), chunks=8192).astype("float32")
    y = da.random.random((30000, 20000), chunks=8192).astype("float32")
    z = fastsgemm.dask.matmul(x, y)      # a dask.array; nothing runs until z.compute() or z.persist()

The graph. Output block (i, j) is x[i, 0] @ y[0, j] + x[i, 1] @ y[1, j] + ..., computed by one task: the first
product makes the block and each later one is added into that same block in place (fastsgemm.sgemm with beta = 1
and out = the block). Dask's own matmul instead makes every partial product a block of its own and sums them
afterwards, which holds K/chunk partial blocks in memory and reads them all again. One task per block also means a
block never leaves the GPU that accumulates it, on any scheduler.

Chunks. Any chunking works. The K chunks of x (its column chunks) and of y (its row chunks) must line up for the
products to exist; where they do not, the operand whose chunks move fewer bytes is rechunked along K to the
other's K chunks, and nothing else is rechunked (the output takes x's row chunks and y's column chunks). Chunks of
unknown size (NaN, after boolean indexing) raise ValueError: call x.compute_chunk_sizes() first.

The GPUs. Output block (i, j) is given GPU devices[(i * column_blocks + j) % len(devices)]; `devices` defaults to
every GPU the process building the graph sees. Its task runs there, and only there:
- Host (NumPy) chunks are staged through that GPU by the task itself, one pair of chunks at a time (into two
  buffers it reuses), into a block that stays on the GPU until the last product and then comes back as NumPy. One such task runs at a time per GPU
  (they would only queue behind each other on its stream), so a GPU holds one output block, one pair of input
  chunks and a workspace: set fastsgemm.set_device_memory_limit (or FASTSGEMM_DEVICE_MEMORY_LIMIT) and products
  larger than the GPU stream through it within that limit. A limit too small for one block and one chunk pair
  raises MemoryError naming it: use smaller chunks.
- Device (CuPy) chunks are moved to the GPU of each block that reads them by a task of the graph, once per chunk
  and GPU. CuPy copies them, on a stream of their own, peer to peer (this module enables peer access between the
  GPUs where they allow it); a chunk that is a view is packed first. Dask keeps the copy while blocks on that GPU
  still need it, and frees it after. Chunks already on the block's GPU are read in place. The blocks stay on their
  GPUs: `z.compute()` joins them on the current device, as cupy.concatenate does; `z.persist()` or
  `z.to_delayed()` keeps them where they were made.
- A process that sees fewer GPUs than the graph names (a Dask worker started on one GPU) runs GPU d's tasks on its
  GPU d % count; a process with no GPU runs host chunks on the cpu rung.
kernel is any name fastsgemm.sgemm takes; "auto" picks per block shape and GPU.

Importing this module imports dask; `import fastsgemm` alone never does. Install with
`pip install 'fastsgemm[dask]'`.
"""
from __future__ import annotations

import math
import sys
import threading

import numpy as np
from dask.array.core import Array
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from . import _sgemm
from ._api import cuda_available, device_ordinal, sgemm
from ._device_array import DeviceArray, matrix_core
from ._registry import REGISTRY, parse_kernel

__all__ = ["matmul", "align_k_chunks"]


# ---- the tasks ----

def _gpu_here(device):
    """The GPU of this process that runs work given GPU `device`, or None where there is none to run it on."""
    if device is None or not cuda_available():
        return None
    return device % _sgemm.device_count()


_one_block_per_gpu: dict[int, threading.Lock] = {}
_locks_lock = threading.Lock()


def _staging_turn(gpu: int) -> threading.Lock:
    with _locks_lock:
        return _one_block_per_gpu.setdefault(gpu, threading.Lock())


def _runs_on_host(kernel) -> bool:
    choice = parse_kernel(kernel)
    return choice is not None and REGISTRY[choice.rung].device == "cpu"


def _host_block(x_chunks, y_chunks, kernel, device):
    """Output block sum_k x_chunks[k] @ y_chunks[k] of host chunks, as NumPy, accumulated on GPU `device`: the chunks
    go up a pair at a time (each pair freed before the next is staged), the block stays on the GPU until the last
    product. Where there is no GPU to run on, or the kernel is a host rung, the same sum on the host."""
    gpu = _gpu_here(device)
    if gpu is None or _runs_on_host(kernel):
        block = None
        for a, b in zip(x_chunks, y_chunks):
            block = sgemm(a, b, kernel=kernel) if block is None else sgemm(a, b, block, beta=1.0, out=block,
                                                                              kernel=kernel)
        return block
    with _staging_turn(gpu):
        block = DeviceArray.empty((x_chunks[0].shape[0], y_chunks[0].shape[1]), device=gpu)
        # One buffer for x's chunks and one for y's, as large as the largest, filled in turn: each copy is queued on
        # the GPU after the product that read the buffer before it.
        x_buffer = _sgemm.DeviceBuffer(4 * max(a.size for a in x_chunks), gpu)
        y_buffer = _sgemm.DeviceBuffer(4 * max(b.size for b in y_chunks), gpu)
        for k, (a, b) in enumerate(zip(x_chunks, y_chunks)):
            a_on_gpu, b_on_gpu = DeviceArray(x_buffer, a.shape), DeviceArray(y_buffer, b.shape)
            _sgemm.copy(matrix_core(a_on_gpu), _host_matrix(a), None)
            _sgemm.copy(matrix_core(b_on_gpu), _host_matrix(b), None)
            if k == 0:
                sgemm(a_on_gpu, b_on_gpu, out=block, kernel=kernel)
            else:
                sgemm(a_on_gpu, b_on_gpu, block, beta=1.0, out=block, kernel=kernel)
        return block.numpy()


def _host_matrix(chunk):
    """A host chunk as the copy takes it: float32, aligned, any strides."""
    return np.require(chunk, dtype=np.float32, requirements="A")


def _device_block(x_chunks, y_chunks, kernel, device):
    """Output block sum_k x_chunks[k] @ y_chunks[k] of device chunks (on the block's GPU already: _on_gpu), made by
    the first product and added into in place by the others; it stays on that GPU."""
    block = None
    for a, b in zip(x_chunks, y_chunks):
        block = sgemm(a, b, kernel=kernel) if block is None else sgemm(a, b, block, beta=1.0, out=block, kernel=kernel)
    return block


_copy_streams: dict = {}  # GPU ordinal -> the CuPy stream chunks are copied to it on
_peers_enabled: set = set()


def _copy_stream(cupy, gpu, source):
    """The stream that copies chunks to `gpu`, its own so that a copy does not queue behind the products already
    queued there; and peer access from `gpu` to `source`'s memory, so the copy goes straight over NVLink or PCIe
    rather than through the host. Both made once per process."""
    with _locks_lock:
        if (gpu, source) not in _peers_enabled:
            _peers_enabled.add((gpu, source))
            if cupy.cuda.runtime.deviceCanAccessPeer(gpu, source):
                with cupy.cuda.Device(gpu):
                    try:
                        cupy.cuda.runtime.deviceEnablePeerAccess(source)
                    except cupy.cuda.runtime.CUDARuntimeError as error:
                        if "PeerAccessAlreadyEnabled" not in str(error):
                            raise
        if gpu not in _copy_streams:
            with cupy.cuda.Device(gpu):
                _copy_streams[gpu] = cupy.cuda.Stream(non_blocking=True)
        return _copy_streams[gpu]


def _on_gpu(chunk, device):
    """A device chunk on GPU `device`: itself when it is there already, else CuPy's copy of it there. The copy
    starts after the work queued on the chunk's own GPU (which may still be writing it); the work queued on the two
    GPUs after it (the products that read the copy, and whatever may reuse the chunk's memory once Dask lets it go)
    waits for it."""
    gpu = _gpu_here(device)
    cupy = sys.modules.get("cupy")
    if gpu is None or cupy is None or not isinstance(chunk, cupy.ndarray) or chunk.device.id == gpu:
        return chunk
    copies = _copy_stream(cupy, gpu, chunk.device.id)
    with chunk.device:
        # CuPy copies between GPUs only what is contiguous: a chunk that is a view of a larger array is packed first,
        # on its own GPU.
        source = cupy.ascontiguousarray(chunk)
        written = cupy.cuda.get_current_stream().record()
    with cupy.cuda.Device(gpu):
        copies.wait_event(written)
        with copies:
            moved = cupy.copy(source)
        copied = copies.record()
        cupy.cuda.get_current_stream().wait_event(copied)
    with chunk.device:
        cupy.cuda.get_current_stream().wait_event(copied)
    return moved


# ---- the graph ----

def _check(name, array):
    if not isinstance(array, Array):
        raise TypeError(f"{name} must be a dask.array.Array, got {type(array).__module__}.{type(array).__qualname__}"
                        f"; for NumPy, CuPy or torch arrays call fastsgemm.sgemm or fastsgemm.matmul")
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D dask array (a matrix), got {array.ndim}-D with shape {array.shape}")
    if array.dtype != np.float32:
        raise TypeError(f"{name} has dtype {array.dtype}; fastsgemm computes in float32 and never casts silently: "
                        f"pass {name}.astype('float32')")
    if any(math.isnan(size) for sizes in array.chunks for size in sizes):
        raise ValueError(f"{name} has chunks of unknown size {array.chunks}; call {name}.compute_chunk_sizes() first")


def _host_chunks(array: Array) -> bool:
    return isinstance(getattr(array, "_meta", None), np.ndarray)


def align_k_chunks(x: Array, y: Array) -> tuple[Array, Array]:
    """x and y with the same chunks along K (x's columns, y's rows): unchanged where they already agree, else the
    operand whose rechunk moves fewer bytes (the smaller one) takes the other's K chunks."""
    if x.chunks[1] == y.chunks[0]:
        return x, y
    if x.nbytes <= y.nbytes:
        return x.rechunk({1: y.chunks[0]}), y
    return x, y.rechunk({0: x.chunks[1]})


def gpus_for_blocks(devices) -> list:
    """The GPU ordinals output blocks are spread over: `devices` (ordinals, torch.devices or CuPy Devices) checked,
    else every GPU this process sees; [None] where it sees none (the tasks then decide where they run)."""
    if devices is None:
        return list(range(_sgemm.device_count())) if cuda_available() else [None]
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise TypeError(f"devices must be a list of GPUs (ordinals, torch.devices or CuPy Devices), got {devices!r}")
    ordinals = [device_ordinal(device) for device in devices]
    if not ordinals:
        raise ValueError("devices is empty: name at least one GPU, or pass None for all of them")
    if len(set(ordinals)) != len(ordinals):
        raise ValueError(f"devices names a GPU twice: {ordinals}")
    return ordinals


def matmul(x: Array, y: Array, *, kernel: str = "auto", devices=None) -> Array:
    """x @ y for two 2-D float32 dask arrays (both with NumPy chunks, or both with CuPy chunks), as a dask array
    whose blocks fastsgemm computes, each accumulated along K in place by one task on its GPU. `devices`: the GPUs
    the output blocks are spread over (default: every GPU this process sees). See the module's docstring for the
    graph, the chunks, the GPUs and the device memory limit. TypeError for other types or dtypes, ValueError for
    shapes that do not multiply."""
    _check("x", x)
    _check("y", y)
    if x.shape[1] != y.shape[0]:
        raise ValueError(f"matmul: shapes {x.shape} (x) and {y.shape} (y) not aligned: {x.shape[1]} (dim 1) != "
                         f"{y.shape[0]} (dim 0)")
    host = _host_chunks(x)
    if host != _host_chunks(y):
        raise TypeError(f"x has {type(x._meta).__module__} chunks and y {type(y._meta).__module__} chunks; give both "
                        f"host (NumPy) chunks or both device (CuPy) chunks")
    gpus = gpus_for_blocks(devices)
    x, y = align_k_chunks(x, y)
    name = "fastsgemm-matmul-" + tokenize(x, y, kernel, gpus)
    k_blocks, column_blocks = len(x.chunks[1]), len(y.chunks[1])
    layer = {}

    def chunk_on(array, index, gpu):
        """The key of a chunk as the block's task reads it: the chunk itself for host chunks (the task stages
        them), else the task that puts it on the block's GPU, made once per chunk and GPU."""
        if host:
            return (array.name, *index)
        key = (f"{name}-{array.name}-on-gpu", *index, -1 if gpu is None else gpu)
        if key not in layer:
            layer[key] = (_on_gpu, (array.name, *index), gpu)
        return key

    block_task = _host_block if host else _device_block
    for i in range(len(x.chunks[0])):
        for j in range(column_blocks):
            gpu = gpus[(i * column_blocks + j) % len(gpus)]
            x_chunks = [chunk_on(x, (i, k), gpu) for k in range(k_blocks)]
            y_chunks = [chunk_on(y, (k, j), gpu) for k in range(k_blocks)]
            layer[(name, i, j)] = (block_task, x_chunks, y_chunks, kernel, gpu)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x, y])
    meta = x._meta if hasattr(x, "_meta") else np.empty((0, 0), dtype=np.float32)
    return Array(graph, name, chunks=(x.chunks[0], y.chunks[1]), dtype=np.float32, meta=meta)
