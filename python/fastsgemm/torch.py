"""fastsgemm for PyTorch models: a differentiable operator that torch.compile traces, and a Linear layer.

    import torch
    import fastsgemm.torch

    layer = fastsgemm.torch.Linear(512, 256, device="cuda")  # a torch.nn.Linear whose product runs on fastsgemm
    y = fastsgemm.torch.matmul(x, w)                          # numpy.matmul's semantics, with a gradient
    model = torch.compile(model, fullgraph=True)              # traces through both, with no graph break

The product is the operator `torch.ops.fastsgemm.matmul(a, b, kernel)`, registered with torch.library:

- Its forward is fastsgemm.matmul, on the tensors' device and torch's current stream there (CPU tensors go
  through fastsgemm's host path).
- Its backward is two more calls of the same operator on transposed views (`.mT`), with no copies:
  dA = dC @ B^T and dB = A^T @ dC. A 2-D operand that is column-major (Linear's transposed weight) gets its
  gradient column-major too, so autograd hands it to the parameter without a copy; stacked operands get
  row-major gradients. A stack broadcast against the other operand has its gradient summed over
  the broadcast dimensions; where B is one matrix shared by a stack of A (a Linear layer on a batch), dB is
  a single product over the whole stack, A and dC seen as tall matrices.
- Its fake implementation gives the result's shape, dtype and device without computing anything, which is
  what torch.compile needs to trace a model that calls it.
- A plain eager call (nothing tracing, transforming or intercepting it) runs the same forward and backward
  without torch.library's dispatch, whose Python layers cost more than a small product (_EagerProduct): the
  same numbers, bit for bit. Everything else gets the operator.

Tensors must be float32 (TypeError otherwise: fastsgemm never casts). `kernel` is any name fastsgemm.sgemm
takes; "auto" (the default) runs the FP32-accurate kernel measured fastest for each product's shape, so a
model keeps FP32 accuracy (unlike TF32 math in torch, it does not trade accuracy for speed).

Importing this module imports torch; `import fastsgemm` alone never does. It also registers the operator with
fastsgemm's core, so that fastsgemm.matmul and fastsgemm.sgemm on tensors autograd would record go through it;
before that import they refuse such tensors (RuntimeError) rather than return a result with no gradient.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad

from . import _matmul, _operands, _sgemm

__all__ = ["Linear", "matmul"]


def _compute(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
    if a.device.type == "cpu" and b.device.type == "cpu":
        # CPU tensors: through NumPy views (no copies); the result comes back as a NumPy array, shared as a tensor.
        return torch.from_numpy(np.asarray(_matmul.matmul(a.numpy(), b.numpy(), kernel=kernel)))
    return _matmul.matmul(a, b, kernel=kernel)


def _product(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
    """a @ b by fastsgemm: the operator's forward, and _EagerProduct's."""
    # The inputs may require grad; fastsgemm reads their memory only, so detach (no copy).
    a, b = a.detach(), b.detach()
    if a.dim() > 2 and b.dim() == 2:
        # A stack times one matrix (a layer on a batch) is one tall product: as two matrices it takes fastsgemm's
        # C fast path, one pass over the operands, where a stack would take the Python one, product by product.
        # Any stack whose rows merge into one dimension without a copy will do: a contiguous one, and the
        # expanded (stride 0) gradient a .sum() loss hands back, which fastsgemm then reads as one matrix.
        try:
            rows = a.view(-1, a.shape[-1])
        except RuntimeError:  # strides that do not merge: the stack path
            rows = None
        if rows is not None:
            return _compute(rows, b, kernel).reshape(*a.shape[:-1], b.shape[-1])
    return _compute(a, b, kernel)


@torch.library.custom_op("fastsgemm::matmul", mutates_args=())
def _matmul_operator(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
    return _product(a, b, kernel)


@_matmul_operator.register_fake
def _matmul_shape(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
    """The result's metadata only, for tracing (torch.compile, the meta device): numpy.matmul's shape rules."""
    for name, tensor in (("A", a), ("B", b)):
        if tensor.dtype != torch.float32:
            raise TypeError(f"{name} has dtype {tensor.dtype}; fastsgemm computes in float32 and never casts "
                            f"silently: pass {name}.float()")
        if tensor.dim() == 0:
            raise ValueError(f"matmul: {name} is a scalar (0-D); matmul takes tensors of 1 or more dimensions")
    if a.device != b.device:
        raise ValueError(f"matmul: A is on {a.device} and B on {b.device}; put both on one device")
    k, k2 = a.shape[-1], b.shape[-2] if b.dim() >= 2 else b.shape[0]
    message = f"matmul: shapes {tuple(a.shape)} (A) and {tuple(b.shape)} (B) not aligned: {k} != {k2}"
    if isinstance(k, int) and isinstance(k2, int) and k != k2:
        raise ValueError(message)  # as the operator itself raises
    torch._check(k == k2, lambda: message)  # symbolic sizes (dynamic shapes): a guard, not a Python bool
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise ValueError(f"matmul: the stacks of A {tuple(a.shape)} and B {tuple(b.shape)} do not broadcast") from None
    shape = tuple(batch) + tuple(a.shape[-2:-1]) + tuple(b.shape[-1:] if b.dim() >= 2 else ())
    return a.new_empty(shape)


def _broadcast(x, y):
    """torch.broadcast_shapes(x, y) for shapes that already broadcast (the forward checked them). Plain integer
    sizes take this loop, a tenth of torch.broadcast_shapes's Python time; symbolic ones (tracing) take torch's."""
    if not all(type(size) is int for size in (*x, *y)):
        return torch.broadcast_shapes(x, y)
    x, y = (1,) * (len(y) - len(x)) + tuple(x), (1,) * (len(x) - len(y)) + tuple(y)
    return tuple(q if p == 1 else p for p, q in zip(x, y))


def _as_stacks(a, b, grad):
    """a, b and the gradient of a @ b as stacks of matrices: a 1-D a as a row, a 1-D b as a column, and grad with
    the dimensions matmul dropped put back (size-1 dimensions: views, never copies)."""
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    if a2.dim() == 2 and b2.dim() == 2 and grad.dim() == 2:  # two matrices: nothing to broadcast or put back
        return a2, b2, grad
    batch = _broadcast(a2.shape[:-2], b2.shape[:-2])
    return a2, b2, grad.reshape(tuple(batch) + (a2.shape[-2], b2.shape[-1]))


def _product_like(x, y, like, kernel):
    """x @ y, laid out as `like` is where that is a column-major matrix (a transposed weight, as Linear passes):
    computed then as (y^T @ x^T)^T, so that the gradient reaches the parameter in the parameter's own layout and
    autograd does not copy it over."""
    if x.dim() == 2 and y.dim() == 2 and like.dim() == 2 and like.stride(-2) == 1 and like.stride(-1) != 1:
        return _apply(y.mT, x.mT, kernel).mT
    return _apply(x, y, kernel)


def _setup_context(ctx, inputs, output):
    a, b, kernel = inputs
    ctx.save_for_backward(a, b)
    ctx.kernel = kernel


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    a2, b2, grad2 = _as_stacks(a, b, grad)
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        # dA = dC @ B^T, summed over the stack dimensions along which A was broadcast.
        grad_a = _product_like(grad2, b2.mT, a2, ctx.kernel).sum_to_size(a2.shape).reshape(a.shape)
    if ctx.needs_input_grad[1]:
        if b2.dim() == 2 and a2.dim() > 2:
            # One B for the whole stack: dB = sum_i A_i^T dC_i, which is A^T dC with the stack laid end to end as
            # one tall matrix. reshape is a view for the usual contiguous activations (a copy only otherwise).
            rows = a2.shape[:-1].numel()
            grad_b = _product_like(a2.reshape(rows, a2.shape[-1]).mT, grad2.reshape(rows, grad2.shape[-1]), b2,
                                   ctx.kernel)
        else:
            # dB = A^T @ dC, summed over the stack dimensions along which B was broadcast.
            grad_b = _product_like(a2.mT, grad2, b2, ctx.kernel).sum_to_size(b2.shape)
        grad_b = grad_b.reshape(b.shape)
    return grad_a, grad_b, None


_matmul_operator.register_autograd(_backward, setup_context=_setup_context)


class _EagerProduct(torch.autograd.Function):
    """The operator's forward and backward, without torch.library's dispatch around them.

    A call of a custom operator passes through Python layers that check and route it (the dispatcher's autograd
    kernel, the operator's own wrappers); on a small product they cost more than the product itself. A plain eager
    call has nothing for them to do, so it runs this: the same forward, the same backward (whose products come back
    here, or to the operator where something is watching), the same numbers. Anything that traces, transforms or
    intercepts operators (torch.compile, torch.jit.trace, torch.func, dispatch and function modes, the profiler,
    tensor subclasses, meta tensors) gets the operator, which it knows how to handle (_plain_eager)."""

    @staticmethod
    def forward(ctx, a, b, kernel):
        # The forward takes ctx itself: with a separate setup_context, torch binds the arguments through
        # inspect.signature on every call, which costs more than the operator's dispatch saved.
        _setup_context(ctx, (a, b, kernel), None)
        return _product(a, b, kernel)

    @staticmethod
    def backward(ctx, grad):
        return _backward(ctx, grad)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _plain_eager(a, b) -> bool:
    """Whether a call on a and b is plain eager PyTorch: nothing traces, transforms, intercepts or profiles it, and
    both are ordinary tensors in memory fastsgemm reads. Anything else takes the operator. (A function mode includes
    `with torch.device(...)` and torch.set_default_device: such calls take the operator too.)"""
    return (type(a) in _PLAIN_TENSORS and type(b) in _PLAIN_TENSORS
            and a.device.type in ("cpu", "cuda") and b.device.type in ("cpu", "cuda")
            and _plain_state()
            and not torch._C._functorch.is_functorch_wrapped_tensor(a)
            and not torch._C._functorch.is_functorch_wrapped_tensor(b))


def _plain_state() -> bool:
    """_plain_eager's checks of torch's state, without its checks of the operands: nothing compiles, traces,
    profiles, dispatches through a mode or transforms the call."""
    return (not torch.compiler.is_compiling()
            # torch.jit.trace records operators: a product outside one would be traced as a constant.
            and torch._C._get_tracing_state() is None
            and not torch.autograd._profiler_enabled()  # the profiler shows fastsgemm::matmul as an operator
            and torch._C._len_torch_dispatch_stack() == 0  # no TorchDispatchMode (FakeTensorMode, recorders, ...)
            and torch._C._len_torch_function_stack() == 0  # no TorchFunctionMode
            and torch._C._functorch.peek_interpreter_stack() is None)  # no torch.func transform (vmap, grad, ...)


def _under_jvp() -> bool:
    """Whether a torch.func forward-mode transform (jvp, jacfwd, hessian) is active, at any depth of the stack."""
    try:
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
        interpreters = retrieve_all_functorch_interpreters()
    except ImportError:  # a torch without it: the innermost transform only
        interpreters = [torch._C._functorch.peek_interpreter_stack()]
    return any(i is not None and i.key() == torch._C._functorch.TransformType.Jvp for i in interpreters)


def _refuse_forward_mode(a, b) -> None:
    """fastsgemm.torch has a backward, not a forward-mode gradient: under torch.func.jvp (and jacfwd, hessian) the
    product's tangent would come out wrong, and with dual tensors (torch.autograd.forward_ad) it would be dropped.
    Raise instead. Outside both, this costs two calls and an attribute read. (Not while torch.compile traces: it
    cannot trace functorch's interpreter stack, and the compiled graph holds the operator.)"""
    if torch.compiler.is_compiling():
        return
    if torch._C._functorch.peek_interpreter_stack() is not None and _under_jvp():
        raise NotImplementedError("fastsgemm.torch has no forward-mode gradient: it cannot run under torch.func.jvp, "
                                  "jacfwd or hessian; use reverse mode (backward, torch.func.grad, jacrev) or "
                                  "torch.matmul there")
    if forward_ad._current_level >= 0 and any(forward_ad.unpack_dual(t).tangent is not None for t in (a, b)):
        raise NotImplementedError("fastsgemm.torch has no forward-mode gradient: an operand is a dual tensor "
                                  "(torch.autograd.forward_ad) whose tangent the product would drop; use reverse "
                                  "mode (backward) or torch.matmul there")


def _apply(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
    """The differentiable product: the registered operator, or in plain eager calls _EagerProduct, or, where
    autograd records nothing (no input requires grad, or grad mode is off, as in a backward that builds no graph),
    the product alone. Forward-mode AD is refused (_refuse_forward_mode)."""
    _refuse_forward_mode(a, b)
    if not _plain_eager(a, b):
        return _matmul_operator(a, b, kernel)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _EagerProduct.apply(a, b, kernel)
    return _product(a, b, kernel)


def matmul(a: torch.Tensor, b: torch.Tensor, *, kernel: str = "auto") -> torch.Tensor:
    """a @ b with numpy.matmul's (and torch.matmul's) semantics, computed by fastsgemm, differentiable.

    a and b are float32 tensors on one device (CPU or CUDA); the result is a new tensor there. See the module's
    docstring for how the gradient is computed."""
    return _apply(a, b, kernel)


def _fast_product(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
    """a @ b for two matrices autograd does not record: fastsgemm's C fast path in one call, else _compute."""
    result = _sgemm.sgemm_fast(a, b, None, None, 1.0, 0.0, kernel)
    return _compute(a, b, kernel) if result is NotImplemented else result


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x's rows as one matrix, a view (the caller made sure the strides merge)."""
    # The row count named, not -1: with no features (x.shape[-1] == 0) -1 is ambiguous, and view refuses it.
    return x.view(math.prod(x.shape[:-1]), x.shape[-1]) if x.dim() > 2 else x


def _linear_out(input: torch.Tensor, weight: torch.Tensor, bias, kernel: str) -> torch.Tensor:
    """input @ weight^T + bias where autograd records nothing, as a new tensor of input's leading shape (never a
    view, as torch.nn.Linear's result is not), written by one call of the C fast path: the bias is its C, every
    row the same (a row stride of zero), with beta = 1, so each element is the product plus the bias rounded
    once, as adding it afterwards gives. CUDA inputs of 2 or 3 dimensions take _sgemm.linear_fast, which also
    makes the result and the bias's broadcast in C; the rest the same product through sgemm_fast."""
    result = _sgemm.linear_fast(input, weight, bias, kernel)
    if result is not NotImplemented:
        return result
    out = input.new_empty((*input.shape[:-1], weight.shape[0]))
    rows, out_rows = _rows(input), _rows(out)
    c = bias.expand(out_rows.shape) if bias is not None else None
    if _sgemm.sgemm_fast(rows, weight.mT, c, out_rows, 1.0, 0.0 if c is None else 1.0, kernel) is NotImplemented:
        out_rows.copy_(_compute(rows, weight.mT, kernel))  # CPU tensors; or a dtype _compute refuses, raising
        if bias is not None:
            out_rows.add_(bias)
    return out


class _LinearProduct(torch.autograd.Function):
    """Linear's input @ weight^T + bias for a plain eager call on an input whose rows are one matrix without a copy:
    the forward is one product with the bias added in place (_linear_out), and the backward computes, on the rows,
    dx = g @ weight and dweight = g^T @ x (laid out as a contiguous weight is), each in one call of the C fast
    path, and dbias = the column sums of g. These are the products the generic path (_apply on weight.mT, then
    `+ bias`) runs, with the same operands, so the numbers are the same; what goes is its Python around each
    product (the checks per product, the stack bookkeeping, the layout choice) and the separate bias add. Only what
    the backward needs is kept: the input only where the weight's gradient is wanted, the weight only where the
    input's is. A backward that builds a graph (create_graph=True) or that something intercepts takes the generic
    path's differentiable products instead."""

    @staticmethod
    def forward(ctx, input, weight, bias, kernel):
        need_input, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        ctx.save_for_backward(input if need_weight else None, weight if need_input else None)
        ctx.kernel = kernel
        ctx.input_shape = input.shape
        return _linear_out(input, weight, bias, kernel)

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        need_input, need_weight, need_bias, _ = ctx.needs_input_grad
        rows = _rows(input) if input is not None else None
        # A view but for gradients whose strides do not merge; the row count named (a Linear with no outputs).
        grad_rows = grad.reshape(math.prod(grad.shape[:-1]), grad.shape[-1])
        grad_input = grad_weight = None
        if torch.is_grad_enabled() or not _plain_eager(grad_rows, weight if weight is not None else rows):
            product = _apply
        else:
            product = _fast_product
        if need_input:
            grad_input = product(grad_rows, weight, ctx.kernel).view(ctx.input_shape)
        if need_weight:
            grad_weight = product(grad_rows.mT, rows, ctx.kernel)
        return grad_input, grad_weight, grad_rows.sum(0) if need_bias else None, None


class Linear(torch.nn.Linear):
    """torch.nn.Linear, with its product computed by fastsgemm: y = x @ weight^T + bias.

    A drop-in: the same constructor, parameters, initialisation and state_dict as torch.nn.Linear, so a model
    swaps one for the other and loads the same checkpoints. Float32 only. `kernel` picks the fastsgemm kernel
    ("auto", the default, runs FP32-accurate kernels only). Linear.from_linear(layer) wraps an existing layer's
    parameters (shared, not copied)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 kernel: str = "auto"):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.kernel = kernel

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, *, kernel: str = "auto") -> "Linear":
        """A fastsgemm Linear that shares `layer`'s weight and bias (training one trains the other)."""
        made = cls(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta", kernel=kernel)
        made.weight = layer.weight
        made.bias = layer.bias
        return made

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        # Inference first, in as few Python steps as can be (a call at batch 1 is mostly host time): where autograd
        # records nothing and nothing traces or intercepts the call, _sgemm.linear_fast checks the rest itself (CUDA
        # float32 tensors, input rows that merge, a bias of out_features) and hands back NotImplemented otherwise.
        # The types first: a tracer's proxy must not be asked anything (torch.fx refuses a proxy in an `if`).
        if (type(input) is torch.Tensor and type(weight) in _PLAIN_TENSORS
                and (bias is None or type(bias) in _PLAIN_TENSORS)
                and (not torch.is_grad_enabled()
                     or not (weight.requires_grad or input.requires_grad or (bias is not None and bias.requires_grad)))
                and _plain_state() and forward_ad._current_level < 0):
            result = _sgemm.linear_fast(input, weight, bias, self.kernel)
            if result is not NotImplemented:
                return result
        # A plain eager call (no forward-mode level either; ordinary tensors checked first, so that a tracer's proxy
        # goes to the generic path untouched) with a contiguous weight, a float32 bias on the input's device or none,
        # and an input whose rows are one matrix without a copy: _LinearProduct where autograd records, else the
        # product and the bias straight into a new tensor (_linear_out).
        if (_plain_eager(input, weight) and input.dim() >= 2 and weight.is_contiguous()
                and (bias is None or (type(bias) in _PLAIN_TENSORS and bias.dtype == torch.float32
                                      and bias.device == input.device))
                and forward_ad._current_level < 0):
            try:
                _rows(input)
                merges = True
            except RuntimeError:  # strides that do not merge: the generic path
                merges = False
            if merges:
                if torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad or
                                                (bias is not None and bias.requires_grad)):
                    return _LinearProduct.apply(input, weight, bias, self.kernel)
                return _linear_out(input, weight, bias, self.kernel)
        # weight.mT is a transposed view: fastsgemm reads it column-major, in place.
        output = _apply(input, weight.mT, self.kernel)
        return output + bias if bias is not None else output

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel!r}"


# fastsgemm.matmul and fastsgemm.sgemm on tensors autograd would record reach the operator through this.
_operands.register_differentiable(matmul)
