"""fastsgemm.matmul: numpy.matmul's semantics over fastsgemm's kernels.

Operands of any rank: 1-D ones are promoted to matrices (a row for A, a column for B) and the added
dimension is dropped from the result; the dimensions before the last two are a stack of matrices, and the
stacks broadcast against each other as NumPy broadcasts. An operand broadcast along the stack is read in
place, never copied. On the GPU a run of the stack through which every operand steps evenly is one call of
the C core (csrc/operands.c, fsg_run_batch): a stack whose products share B (or A) and lie end to end is one
matrix product ((s, m, k) @ (k, n) is the (s * m) x k matrix times B), and any other is one launch on the
kernels that take a batch (KernelInfo.batched: the wgmma rungs, cuBLAS's strided-batched call) and product
by product on the rest. Torch tensors and CuPy arrays of 2 or 3 dimensions skip the Python below altogether
(csrc/fast_call.c, matmul_fast).
"""
from __future__ import annotations

import math

import numpy as np

from . import _sgemm
from ._api import CudaError, resolve_kernel, sgemm
from ._device_array import DeviceArray, device_buffer, matrix_core, record_writer
from ._operands import (CUDA, HOST, Operand, c_contiguous_strides, describe, differentiable_product,
                        empty_like_framework, is_device_array, operand_device, records_gradient, to_operand,
                        torch_tensors, untracked, working_stream)


def _result_shape(a_shape, b_shape):
    """(batch shape, m, k, n, shape of the result) for numpy.matmul's rules; ValueError as NumPy raises."""
    if len(a_shape) == 0 or len(b_shape) == 0:
        which = "A" if len(a_shape) == 0 else "B"
        raise ValueError(f"matmul: {which} is a scalar (0-D); matmul takes arrays of 1 or more dimensions "
                         f"(use * to scale)")
    a_matrix = a_shape if len(a_shape) >= 2 else (1,) + tuple(a_shape)
    b_matrix = b_shape if len(b_shape) >= 2 else tuple(b_shape) + (1,)
    (m, k), (k2, n) = a_matrix[-2:], b_matrix[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {tuple(a_shape)} (A) and {tuple(b_shape)} (B) not aligned: "
                         f"A's last dimension ({k}) differs from B's "
                         f"{'only' if len(b_shape) == 1 else 'second to last'} dimension ({k2})")
    try:
        batch = np.broadcast_shapes(tuple(a_matrix[:-2]), tuple(b_matrix[:-2]))
    except ValueError:
        raise ValueError(f"matmul: the stacks of A {tuple(a_shape)} and B {tuple(b_shape)} do not broadcast: "
                         f"{tuple(a_matrix[:-2])} against {tuple(b_matrix[:-2])}") from None
    shape = tuple(batch) + ((m,) if len(a_shape) >= 2 else ()) + ((n,) if len(b_shape) >= 2 else ())
    return tuple(batch), m, k, n, shape


def _batch_steps(shape, strides, batch):
    """The strides (elements) of an operand's stack dimensions, broadcast to `batch`: 0 where it has extent 1 or
    lacks the dimension."""
    lead = len(batch) - len(shape)
    return tuple(0 if d < lead or shape[d - lead] == 1 else strides[d - lead] for d in range(len(batch)))


def _runs(batch, steps_of_each):
    """Splits the stack dimensions into an outer part, looped over, and the longest inner run through which every
    operand steps with one stride: the batch of one launch. Dimensions of extent 1 go with either. Returns (outer
    extents, the outer strides of each operand, the inner run's count, each operand's step through it)."""
    first, inner_last = len(batch), None  # the run is batch[first:]; inner_last: its last dimension past extent 1
    previous = None  # the run's outermost dimension past extent 1 so far
    for d in reversed(range(len(batch))):
        if batch[d] != 1:
            if previous is not None and any(s[d] != s[previous] * batch[previous] for s in steps_of_each):
                break
            previous = d
            inner_last = d if inner_last is None else inner_last
        first = d
    inner_steps = [s[inner_last] if inner_last is not None else 0 for s in steps_of_each]
    return batch[:first], [s[:first] for s in steps_of_each], math.prod(batch[first:]), inner_steps


def matmul(a, b, *, out=None, kernel="auto"):
    """a @ b in float32 with numpy.matmul's semantics: 1-D operands promoted, stacks of matrices broadcast.

    Host arrays give a NumPy result; torch tensors and CuPy arrays give one of their own framework, on the
    operands' device. `out`, when given, must have the result's shape exactly (as numpy.matmul requires) and
    lie on the operands' side; it is returned. Any strides work, and a broadcast stack is read in place
    (stride 0). On the GPU a stack whose products share B and whose A and result matrices follow each other
    evenly (a C-contiguous stack, for one) runs as one tall product, and likewise a shared A with B and result
    matrices side by side; other stacks run in one launch on the kernels that take a batch (auto picks among
    them) and product by product on the others. TypeError for dtypes other than float32,
    ValueError for shapes that numpy.matmul refuses; kernel as for fastsgemm.sgemm ("auto" picks for the
    product that runs).
    """
    # Two well-formed matrices are sgemm's problem exactly: its C fast path reads them in one pass and runs. It
    # declines everything else (other ranks and types, errors) before touching anything, and the code below runs.
    result = _sgemm.sgemm_fast(a, b, None, out, 1.0, 0.0, kernel)
    if result is not NotImplemented:
        return result
    # Stacks of torch tensors or CuPy arrays (3-D, or 3-D with 2-D) likewise, through matmul_fast.
    result = _sgemm.matmul_fast(a, b, out, kernel)
    if result is not NotImplemented:
        return result
    if records_gradient(a, b, out) and torch_tensors(a, b):  # the fast paths leave these to us
        if out is not None:  # as torch.matmul refuses out= when autograd would record the product
            raise RuntimeError("matmul: out= records no gradient, and an operand requires grad; leave out= off "
                               "(the product then has its gradient), or pass .detach()ed tensors")
        return differentiable_product("matmul", a, b, kernel)
    a, b, out = untracked(a), untracked(b), untracked(out)
    on_device = is_device_array(a)
    choice = resolve_kernel(kernel, on_device)
    x = to_operand("A", a, matrix=False)
    stream = working_stream(x) if x.side == CUDA else None
    y = to_operand("B", b, matrix=False, consumer_stream=stream)
    o = to_operand("out", out, writable=True, matrix=False, consumer_stream=stream) if out is not None else None
    for op in (y, o):
        if op is not None and op.side != x.side:
            raise ValueError(f"A is a {x.side} array ({describe(x.source)}) but {op.name} is a {op.side} array "
                             f"({describe(op.source)}); put all operands on the same side")
    batch, m, k, n, shape = _result_shape(x.shape, y.shape)
    device = None  # the operands' GPU, which the work runs on whichever is current: they must all live on it
    if x.side == CUDA:
        on = [(op.name, d) for op in (x, y, o) if op is not None for d in (operand_device(op),) if d is not None]
        if len({d for _, d in on}) > 1:
            raise ValueError(f"matmul: operands live on different CUDA devices: "
                             f"{', '.join(f'{name} on device {d}' for name, d in on)}; put them on one")
        device = on[0][1] if on else None
    if o is not None and tuple(o.shape) != shape:
        raise ValueError(f"matmul: out has shape {tuple(o.shape)}; A {tuple(x.shape)} @ B {tuple(y.shape)} "
                         f"needs {shape}")
    if x.side == HOST:
        target = o.core if o is not None else None
        if target is not None and (_host_overlaps(target, x.core) or _host_overlaps(target, y.core)):
            # Products run one by one: an out over A or B would feed a later product a result. Compute aside.
            target[...] = _host_matmul(x.core, y.core, None, batch, shape, kernel)
        else:
            computed = _host_matmul(x.core, y.core, target, batch, shape, kernel)
        return out if out is not None else computed
    return _device_matmul(x, y, o, batch, m, k, n, shape, choice, device, stream)


def _host_matmul(a, b, out, batch, shape, kernel):
    """Host stacks, product by product through fastsgemm.sgemm (each product's operands staged to the GPU on
    their own), into views of one result array."""
    result = np.empty(shape, dtype=np.float32) if out is None else out
    added = tuple(axis for axis, one_d in ((-2, a.ndim == 1), (-1, b.ndim == 1)) if one_d)
    full = np.expand_dims(result, added) if added else result  # a view with the 1-D operands' dimensions back
    a2 = a[np.newaxis, :] if a.ndim == 1 else a
    b2 = b[:, np.newaxis] if b.ndim == 1 else b
    a_stack = np.broadcast_to(a2, tuple(batch) + a2.shape[-2:])  # stride 0 along the broadcast: no copy
    b_stack = np.broadcast_to(b2, tuple(batch) + b2.shape[-2:])
    for index in np.ndindex(*batch):
        sgemm(a_stack[index], b_stack[index], out=full[index], kernel=kernel)
    return result[()] if out is None and result.ndim == 0 else result  # 1-D @ 1-D: a scalar, as NumPy gives


def _matrix_view(op, promote_axis):
    """(shape, strides) of a device operand as a stack of matrices: a 1-D operand gets a dimension of extent 1
    at promote_axis (-2 for A, -1 for B, and for out the ones its operands lacked)."""
    shape, strides = list(op.shape), list(op.strides)
    for axis in promote_axis:
        position = len(shape) + 1 + axis
        shape.insert(position, 1)
        strides.insert(position, 0)
    return tuple(shape), tuple(strides)


def _run_stack(choice, firsts, strides, m, k, n, count, steps, stream):
    """`count` products on the operands' GPU, one call of the C core: product p's A, B and out are the m x k, k x n and
    m x n matrices with the given (row, column) strides, steps[i] * p elements after the addresses in `firsts`."""
    (a_rs, a_cs), (b_rs, b_cs), (o_rs, o_cs) = strides
    # choice None: auto, which the C core asks about the stack (or the one product it is) once it has read it.
    _sgemm.gemm_batch(choice, (firsts[0], m, k, a_rs, a_cs), (firsts[1], k, n, b_rs, b_cs),
                      (firsts[2], m, n, o_rs, o_cs), count, *steps, stream)


def _host_overlaps(x, y):
    """Whether two aligned float32 host arrays name a common address (the same test as device operands')."""
    return _sgemm.views_overlap(x.ctypes.data, x.shape, tuple(s // 4 for s in x.strides), y.ctypes.data, y.shape,
                                tuple(s // 4 for s in y.strides))


def _overlaps(op, other):
    """Whether two device operands name a common address (csrc/operands.c's one overlap test)."""
    return _sgemm.views_overlap(op.ptr, tuple(op.shape), tuple(op.strides), other.ptr, tuple(other.shape),
                                tuple(other.strides))


def _device_matmul(x, y, o, batch, m, k, n, shape, choice, device, stream):
    result = None
    if o is None:
        result = empty_like_framework(x, shape)
        o = to_operand("out", result, writable=True, matrix=False, consumer_stream=stream)
    elif _overlaps(o, x) or _overlaps(o, y):
        # Products run one by one: an out over A or B would feed a later product a result. Compute into a
        # temporary, then copy it over out, matrix by matrix, in stream order after the products.
        scratch = DeviceArray.empty((max(math.prod(shape[:-1]), 1), shape[-1] if shape else 1),
                                    device=device)
        device_buffer(scratch).share()  # read on `stream`: freed only after the device has synchronized
        ptr = matrix_core(scratch)[0]
        temporary = Operand("out", CUDA, shape, None, scratch, "fastsgemm", ptr=ptr,
                            strides=c_contiguous_strides(shape))
        _device_matmul(x, y, temporary, batch, m, k, n, shape, choice, device, stream)
        axes = sorted(([-2] if len(x.shape) == 1 else []) + ([-1] if len(y.shape) == 1 else []))
        (t_shape, t_strides), (o_shape, o_strides) = _matrix_view(temporary, axes), _matrix_view(o, axes)
        if o.producer_stream is not None:
            _sgemm.stream_wait(stream, o.producer_stream, device)
        for index in np.ndindex(*t_shape[:-2]):
            views = [(op.ptr + 4 * sum(i * s for i, s in zip(index, st[:-2])), m, n, st[-2], st[-1])
                     for op, st in ((o, o_strides), (temporary, t_strides))]
            _sgemm.copy(views[0], views[1], stream)
        return _finish(o.source, o, stream, device)
    a_shape, a_strides = _matrix_view(x, [-2] if len(x.shape) == 1 else [])
    b_shape, b_strides = _matrix_view(y, [-1] if len(y.shape) == 1 else [])
    out_axes = ([-2] if len(x.shape) == 1 else []) + ([-1] if len(y.shape) == 1 else [])
    o_shape, o_strides = _matrix_view(o, sorted(out_axes))
    count = math.prod(batch)
    if count and m and n:
        steps = [_batch_steps(a_shape[:-2], a_strides[:-2], batch), _batch_steps(b_shape[:-2], b_strides[:-2], batch),
                 _batch_steps(o_shape[:-2], o_strides[:-2], batch)]
        outer, outer_steps, inner, inner_steps = _runs(batch, steps)
        for op in (x, y, o):
            if op.producer_stream is not None:
                _sgemm.stream_wait(stream, op.producer_stream, device)
        strides = (a_strides[-2:], b_strides[-2:], o_strides[-2:])
        for index in np.ndindex(*outer):
            firsts = [ptr + 4 * sum(i * s for i, s in zip(index, offsets))
                      for ptr, offsets in zip((x.ptr, y.ptr, o.ptr), outer_steps)]
            _run_stack(choice, firsts, strides, m, k, n, inner, inner_steps, stream)
    if x.keep_alive or y.keep_alive:
        _sgemm.synchronize(stream, device)  # DLPack producers may free their memory once their deleter runs
    return _finish(result if result is not None else o.source, o, stream, device)


def _finish(result, o, stream, device):
    """The result, its last writer recorded (a DeviceArray), the work finished first where a DLPack producer
    may free out's memory once it is let go."""
    if isinstance(result, DeviceArray):
        record_writer(result, stream)
    if o.keep_alive:
        _sgemm.synchronize(stream, device)
    return result


__all__ = ["matmul", "CudaError"]
