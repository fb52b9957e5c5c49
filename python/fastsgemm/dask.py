"""fastsgemm as the chunk kernel of Dask: x @ y for dask.array matrices, each output block accumulated in place.

    import dask.array as da
    import fastsgemm.dask

    x = da.random.random((40000, 30000), chunks=8192).astype("float32")
    y = da.random.random((30000, 20000), chunks=8192).astype("float32")
    z = fastsgemm.dask.matmul(x, y)      # a dask.array; nothing runs until z.compute() or z.persist()

How the graph is built. Output block (i, j) is x[i, 0] @ y[0, j] + x[i, 1] @ y[1, j] + ..., computed as a chain
of tasks along K: the first task makes the block (fastsgemm.sgemm), and each later one adds its product into that
same block in place (sgemm with beta = 1 and out = the block). Dask's own matmul instead makes every partial
product as a block of its own and sums them afterwards, which holds K/chunk partial blocks in memory and reads
them all again. The block a chain passes along is that chain's alone: no other task reads it, so updating it in
place is safe on every Dask scheduler when each task runs once. It is not safe to run a task of a chain twice:
its input block may already hold its product (the input and output of a chain task are one object). So do not
ask Dask to retry these tasks (`retries=`); an error in one fails the computation, which can be started again.

Chunks. Any chunking works. The K chunks of x (its column chunks) and of y (its row chunks) must line up for the
products to exist; where they do not, the operand whose chunks move fewer bytes is rechunked along K to the
other's K chunks, and nothing else is rechunked (the output takes x's row chunks and y's column chunks). Chunks of
unknown size (NaN, after boolean indexing) raise ValueError: call x.compute_chunk_sizes() first.

Where it runs. Each task calls fastsgemm.sgemm on its chunks, so chunks stay what they are: NumPy chunks are
computed on the GPU (staged through pinned memory by fastsgemm) and come back as NumPy, or on the cpu rung where
there is no GPU; CuPy chunks are computed on the GPU that holds them and stay there. kernel is any name
fastsgemm.sgemm takes; "auto" picks per block shape.

Importing this module imports dask; `import fastsgemm` alone never does. Install with
`pip install 'fastsgemm[dask]'`.
"""
from __future__ import annotations

import math

import numpy as np
from dask.array.core import Array
from dask.highlevelgraph import HighLevelGraph
from dask.base import tokenize

from ._api import sgemm

__all__ = ["matmul"]


def _first_product(a, b, kernel):
    """The first task of a chain: a new block, a @ b."""
    return sgemm(a, b, kernel=kernel)


def _add_product(block, a, b, kernel):
    """A later task of a chain: block += a @ b, in place (block is this chain's own), and the block passed on."""
    sgemm(a, b, block, beta=1.0, out=block, kernel=kernel)
    return block


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


def align_k_chunks(x: Array, y: Array) -> tuple[Array, Array]:
    """x and y with the same chunks along K (x's columns, y's rows): unchanged where they already agree, else the
    operand whose rechunk moves fewer bytes (the smaller one) takes the other's K chunks."""
    if x.chunks[1] == y.chunks[0]:
        return x, y
    if x.nbytes <= y.nbytes:
        return x.rechunk({1: y.chunks[0]}), y
    return x, y.rechunk({0: x.chunks[1]})


def matmul(x: Array, y: Array, *, kernel: str = "auto") -> Array:
    """x @ y for two 2-D float32 dask arrays (NumPy or CuPy chunks), as a dask array whose blocks fastsgemm
    computes, each accumulated along K in place. See the module's docstring for the graph, the chunks and where
    the work runs. TypeError for other types or dtypes, ValueError for shapes that do not multiply."""
    _check("x", x)
    _check("y", y)
    if x.shape[1] != y.shape[0]:
        raise ValueError(f"matmul: shapes {x.shape} (x) and {y.shape} (y) not aligned: {x.shape[1]} (dim 1) != "
                         f"{y.shape[0]} (dim 0)")
    x, y = align_k_chunks(x, y)
    name = "fastsgemm-matmul-" + tokenize(x, y, kernel)
    partial = name + "-partial"
    k_blocks = len(x.chunks[1])
    layer = {}
    for i in range(len(x.chunks[0])):
        for j in range(len(y.chunks[1])):
            previous = None  # K = 0 is one empty chunk along K: its product is the zeros numpy.matmul gives
            for k in range(k_blocks):
                key = (name, i, j) if k == k_blocks - 1 else (partial, i, j, k)
                if previous is None:
                    layer[key] = (_first_product, (x.name, i, k), (y.name, k, j), kernel)
                else:
                    layer[key] = (_add_product, previous, (x.name, i, k), (y.name, k, j), kernel)
                previous = key
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x, y])
    meta = x._meta if hasattr(x, "_meta") else np.empty((0, 0), dtype=np.float32)
    return Array(graph, name, chunks=(x.chunks[0], y.chunks[1]), dtype=np.float32, meta=meta)
