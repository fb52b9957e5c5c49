"""fastsgemm.torch: the torch.library operator, its gradient, its fake implementation under torch.compile, and
Linear as a drop-in for torch.nn.Linear. CPU tensors run the cpu rung (these tests need no GPU); CUDA tensors run
kernel="auto" and a few rungs. Skipped where torch is not installed."""
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import fastsgemm  # noqa: E402
import fastsgemm.torch as fst  # noqa: E402

from conftest import FP32_TOLERANCE, tolerance  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class OperatorRecorder(TorchDispatchMode):
    """Records the name of every operator dispatched while it is active."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def devices():
    """(device, kernel) pairs to run on: the CPU with the cpu rung, and the GPU with auto where there is one."""
    return [pytest.param("cpu", "cpu", id="cpu"),
            pytest.param("cuda", "auto", id="cuda-auto", marks=pytest.mark.gpu)]


def relative_error(value, reference):
    value, reference = value.detach().double().cpu(), reference.detach().double().cpu()
    return float(torch.linalg.norm(value - reference) / max(float(torch.linalg.norm(reference)), 1e-30))


def weighted_loss(y):
    """A loss whose gradient differs in every element (a plain sum gives a gradient of ones, stride 0)."""
    weights = torch.linspace(-1.0, 1.0, y.numel(), dtype=y.dtype, device=y.device).reshape(y.shape)
    return (y * weights).sum()


# (A's shape, B's shape): matrices, 1-D operands, a Linear layer on a batch, broadcast stacks on either side.
SHAPES = [((33, 17), (17, 9)), ((17,), (17, 9)), ((33, 17), (17,)), ((17,), (17,)), ((2, 3, 33, 17), (17, 9)),
          ((3, 33, 17), (1, 17, 9)), ((33, 17), (2, 17, 9)), ((2, 1, 33, 17), (3, 17, 9)), ((17,), (2, 17, 9)),
          ((2, 3, 33, 17), (17,))]


def test_import_fastsgemm_does_not_import_torch():
    code = "import sys, fastsgemm; assert 'torch' not in sys.modules, 'torch was imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("device, kernel", devices())
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_forward_and_both_gradients_match_a_float64_reference(device, kernel, shapes):
    generator = torch.Generator().manual_seed(7)
    a = torch.randn(shapes[0], generator=generator).to(device).requires_grad_()
    b = torch.randn(shapes[1], generator=generator).to(device).requires_grad_()
    y = fst.matmul(a, b, kernel=kernel)
    weighted_loss(y).backward()

    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    y64 = torch.matmul(a64, b64)
    weighted_loss(y64).backward()
    assert y.shape == y64.shape and y.device == a.device and y.dtype == torch.float32
    for what, value, reference in (("C", y, y64), ("dA", a.grad, a64.grad), ("dB", b.grad, b64.grad)):
        assert value.shape == reference.shape, what
        assert relative_error(value, reference) < FP32_TOLERANCE, what


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["cublas", "warptile", "tf32x3", "naive", "tf32"])
def test_every_kind_of_rung_gives_the_gradient(kernel):
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(4, 70, 130, generator=generator).cuda().requires_grad_()
    b = torch.randn(130, 50, generator=generator).cuda().requires_grad_()
    weighted_loss(fst.matmul(a, b, kernel=kernel)).backward()
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    weighted_loss(torch.matmul(a64, b64)).backward()
    assert relative_error(a.grad, a64.grad) < tolerance(kernel)
    assert relative_error(b.grad, b64.grad) < tolerance(kernel)


@pytest.mark.parametrize("device, kernel", devices())
def test_a_sum_loss_whose_gradient_has_stride_zero(device, kernel):
    """loss.sum() hands the layer an expanded gradient (every stride 0): one tall product on it, still right."""
    layer = fst.Linear(40, 24, device=device, kernel=kernel)
    x = torch.randn(3, 7, 40, device=device, requires_grad=True)
    layer(x).sum().backward()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, layer.weight, layer.bias))
    torch.nn.functional.linear(x64, w64, b64).sum().backward()
    for value, reference in ((x.grad, x64.grad), (layer.weight.grad, w64.grad), (layer.bias.grad, b64.grad)):
        assert relative_error(value, reference) < FP32_TOLERANCE


@pytest.mark.parametrize("device, kernel", devices())
def test_gradcheck_in_float32(device, kernel):
    generator = torch.Generator().manual_seed(11)
    inputs = [torch.randn(shape, generator=generator).to(device).requires_grad_()
              for shape in ((2, 6, 5), (5, 4))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # gradcheck warns that the inputs are not float64
        # The product is bilinear, so central differences are exact but for rounding: about K float32 ulps of the
        # outputs over eps. eps = 1e-2 keeps that near 1e-4, well inside the tolerances.
        assert torch.autograd.gradcheck(lambda x, y: fst.matmul(x, y, kernel=kernel), inputs,
                                        eps=1e-2, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device, kernel", devices())
def test_gradgradcheck_in_float32(device, kernel):
    """Double backward: the backward's products are themselves differentiable (create_graph=True records them)."""
    generator = torch.Generator().manual_seed(13)
    inputs = [torch.randn(shape, generator=generator).to(device).requires_grad_() for shape in ((2, 6, 5), (5, 4))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert torch.autograd.gradgradcheck(lambda x, y: fst.matmul(x, y, kernel=kernel), inputs,
                                            eps=1e-2, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device, kernel", devices())
@pytest.mark.parametrize("shapes", [((33, 17), (17, 9)), ((2, 3, 33, 17), (17, 9)), ((17,), (2, 17, 9))],
                         ids=["matrices", "stack-by-matrix", "vector-by-stack"])
def test_plain_eager_calls_give_the_operators_bits(device, kernel, shapes):
    """A plain eager call skips torch.library's dispatch (fastsgemm.torch's _EagerProduct), a traced or
    intercepted one takes the registered operator: the same result and gradients, bit for bit, either way."""
    generator = torch.Generator().manual_seed(21)
    a = torch.randn(shapes[0], generator=generator).to(device).requires_grad_()
    b = torch.randn(shapes[1], generator=generator).to(device).requires_grad_()
    a_op, b_op = (t.detach().clone().requires_grad_() for t in (a, b))

    eager = fst.matmul(a, b, kernel=kernel)
    through_operator = torch.ops.fastsgemm.matmul(a_op, b_op, kernel)
    assert type(eager.grad_fn).__name__ == "_EagerProductBackward"
    assert type(through_operator.grad_fn).__name__ != "_EagerProductBackward"
    weighted_loss(eager).backward()
    weighted_loss(through_operator).backward()
    assert torch.equal(eager, through_operator)
    assert torch.equal(a.grad, a_op.grad) and torch.equal(b.grad, b_op.grad)
    with torch.no_grad():  # autograd records nothing: the product alone, the same bits
        untracked = fst.matmul(a, b, kernel=kernel)
    assert untracked.grad_fn is None and not untracked.requires_grad and torch.equal(untracked, eager)


def test_meta_tensors_and_dispatch_modes_take_the_operator():
    """What eager calls must not skip: meta tensors (only the operator's fake implementation knows their shape) and
    an active dispatch mode (it must see the operator, as a recorder or FakeTensorMode expects)."""
    assert fst.matmul(torch.empty(3, 4, 5, device="meta"), torch.empty(5, 2, device="meta")).shape == (3, 4, 2)
    a, b = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3)
    with OperatorRecorder() as recorder:
        fst.matmul(a, b, kernel="cpu")
    assert "fastsgemm.matmul.default" in recorder.ops, recorder.ops


@pytest.mark.parametrize("device, kernel", devices())
@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
def test_jit_trace_records_the_operator(device, kernel, grad, tmp_path):
    """torch.jit.trace records operators: a traced Linear must hold fastsgemm's, not the traced call's result as a
    constant, and give the right product on new inputs, before and after torch.jit.save and load."""
    torch.manual_seed(3)
    layer = fst.Linear(6, 4, device=device, kernel=kernel)
    example, fresh = torch.randn(5, 6, device=device), torch.randn(7, 6, device=device)
    with torch.set_grad_enabled(grad), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(layer, example)
    assert "fastsgemm::matmul" in str(traced.graph), traced.graph
    path = tmp_path / "layer.pt"
    torch.jit.save(traced, str(path))
    loaded = torch.jit.load(str(path), map_location=device)
    expected = fresh.double() @ layer.weight.detach().double().T + layer.bias.detach().double()
    for module in (traced, loaded):
        with torch.set_grad_enabled(grad):
            result = module(fresh)
        assert result.shape == (7, 4)
        assert relative_error(result, expected) < FP32_TOLERANCE


def test_forward_mode_gradients_are_refused_not_wrong():
    """fastsgemm.torch has a backward, no forward-mode rule: under torch.func.jvp or jacfwd the tangent came out as
    zeros, and a dual tensor's tangent was dropped. Both raise; a dual level whose operands carry no tangent, and
    reverse mode, still work."""
    import torch.autograd.forward_ad as forward_ad
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    product = lambda x, y: fst.matmul(x, y, kernel="cpu")  # noqa: E731
    with pytest.raises(NotImplementedError, match="forward-mode"):
        torch.func.jvp(product, (a, b), (torch.ones_like(a), torch.zeros_like(b)))
    with pytest.raises(NotImplementedError, match="forward-mode"):
        torch.func.jacfwd(lambda x: product(x, b))(a)
    with forward_ad.dual_level():
        with pytest.raises(NotImplementedError, match="dual tensor"):
            product(forward_ad.make_dual(a, torch.ones_like(a)), b)
        plain = product(a, b)
    assert relative_error(plain, a.double() @ b.double()) < FP32_TOLERANCE
    x = a.clone().requires_grad_()
    product(x, b).sum().backward()
    assert relative_error(x.grad, torch.ones(4, 3, dtype=torch.float64) @ b.double().T) < FP32_TOLERANCE


def test_vmap_over_the_product():
    """torch.func.vmap runs the operator once per batch element (torch's fallback for a custom operator)."""
    a, b = torch.randn(3, 4, 5), torch.randn(5, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's note that the fallback loops
        result = torch.func.vmap(lambda x: fst.matmul(x, b, kernel="cpu"))(a)
    assert relative_error(result, a.double() @ b.double()) < FP32_TOLERANCE


def test_the_profiler_sees_the_operator():
    """Under torch.profiler a call takes the operator, so that fastsgemm::matmul shows among its events."""
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fst.matmul(a, b, kernel="cpu")
    assert any(event.name == "fastsgemm::matmul" for event in profile.events()), [e.name for e in profile.events()]


@pytest.mark.parametrize("device, kernel", devices())
def test_the_operator_passes_torch_library_checks(device, kernel):
    """Schema, autograd registration, fake implementation and dynamic shapes, as torch.library checks them."""
    a = torch.randn(3, 4, 5, device=device, requires_grad=True)
    b = torch.randn(5, 2, device=device, requires_grad=True)
    results = torch.library.opcheck(torch.ops.fastsgemm.matmul.default, (a, b, kernel))
    assert all(outcome == "SUCCESS" for outcome in results.values()), results


@pytest.mark.parametrize("device, kernel", devices())
def test_backward_copies_nothing(device, kernel):
    """The backward of a Linear layer on a batch runs products on views: no clone, copy or contiguous. (The recorder,
    a dispatch mode, sends the backward's products through the operator, on the same rows, weight and gradient
    views that a plain eager backward hands the C fast path directly.)"""
    layer = fst.Linear(24, 16, device=device, kernel=kernel)
    x = torch.randn(4, 8, 24, device=device, requires_grad=True)
    loss = weighted_loss(layer(x))
    with OperatorRecorder() as recorder:
        loss.backward()
    assert recorder.ops.count("fastsgemm.matmul.default") == 2, recorder.ops
    copies = [op for op in recorder.ops if any(word in op for word in ("clone", "copy", "contiguous", "_to_copy"))]
    assert not copies, recorder.ops


def test_fake_implementation_gives_shapes_and_refuses_what_the_operator_refuses():
    meta = lambda *shape: torch.empty(shape, device="meta")  # noqa: E731
    assert torch.ops.fastsgemm.matmul(meta(2, 3, 4, 5), meta(5, 6), "auto").shape == (2, 3, 4, 6)
    assert torch.ops.fastsgemm.matmul(meta(5), meta(3, 5, 6), "auto").shape == (3, 6)
    assert torch.ops.fastsgemm.matmul(meta(5), meta(5), "auto").shape == ()
    with pytest.raises(TypeError, match="float32"):
        torch.ops.fastsgemm.matmul(meta(4, 5).double(), meta(5, 6), "auto")
    with pytest.raises(ValueError, match="not aligned"):
        torch.ops.fastsgemm.matmul(meta(4, 5), meta(6, 6), "auto")
    with pytest.raises(ValueError, match="do not broadcast"):
        torch.ops.fastsgemm.matmul(meta(2, 4, 5), meta(3, 5, 6), "auto")


def test_eager_errors_are_fastsgemms():
    with pytest.raises(TypeError, match="float32"):
        fst.matmul(torch.randn(4, 5, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64), kernel="cpu")
    with pytest.raises(ValueError, match=r"\(4, 5\).*\(6, 6\)"):
        fst.matmul(torch.randn(4, 5), torch.randn(6, 6), kernel="cpu")


def test_linear_is_a_drop_in_for_torch_nn_linear():
    torch.manual_seed(5)
    reference = torch.nn.Linear(24, 16)
    layer = fst.Linear(24, 16, kernel="cpu")
    assert isinstance(layer, torch.nn.Linear)
    assert layer.state_dict().keys() == reference.state_dict().keys()
    layer.load_state_dict(reference.state_dict())
    for shape in ((24,), (5, 24), (3, 5, 24)):
        x = torch.randn(shape)
        assert relative_error(layer(x), torch.nn.functional.linear(x.double(), reference.weight.double(),
                                                                   reference.bias.double())) < FP32_TOLERANCE
    no_bias = fst.Linear(24, 16, bias=False, kernel="cpu")
    assert no_bias.bias is None and no_bias(torch.randn(2, 24)).shape == (2, 16)
    shared = fst.Linear.from_linear(reference, kernel="cpu")
    assert shared.weight is reference.weight and shared.bias is reference.bias
    assert "kernel='cpu'" in repr(shared)


@pytest.mark.parametrize("device, kernel", devices())
@pytest.mark.parametrize("features", [(29, 0), (0, 7), (0, 0)], ids=["no-outputs", "no-inputs", "neither"])
@pytest.mark.parametrize("shape", [(5,), (2, 3)], ids=["rows", "stack"])
def test_a_linear_without_features_trains_as_torch_nn_linear(device, kernel, features, shape):
    """A layer with no outputs or no inputs (a model built from a configuration can have one): the forward and
    backward as torch.nn.Linear's, every gradient zero or empty. Its backward once asked reshape for (-1, 0),
    which no row count satisfies."""
    torch.manual_seed(11)
    reference = torch.nn.Linear(*features, device=device)
    layer = fst.Linear.from_linear(reference, kernel=kernel)
    x = torch.randn(*shape, features[0], device=device, requires_grad=True)
    x_reference = x.detach().clone().requires_grad_()
    y, y_reference = layer(x), reference(x_reference)
    assert y.shape == y_reference.shape
    assert torch.equal(y, y_reference)  # no products to round: the bias, or zeros
    y.sum().backward()
    grads = [x.grad, layer.weight.grad, layer.bias.grad]
    reference.zero_grad(set_to_none=True)
    y_reference.sum().backward()
    for got, want in zip(grads, [x_reference.grad, reference.weight.grad, reference.bias.grad]):
        assert got is not None and got.shape == want.shape and torch.equal(got, want)


class Passthrough(torch.overrides.TorchFunctionMode):
    """Changes nothing, but makes every call an intercepted one: fastsgemm.torch then takes its generic path."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def node_names(grad_fn):
    """The class names of every node of an autograd graph, from grad_fn down."""
    names, pending = [], [grad_fn]
    while pending:
        node = pending.pop()
        if node is not None:
            names.append(type(node).__name__)
            pending.extend(child for child, _ in node.next_functions)
    return names


def linear_run(layer, x, generic):
    """(output, x.grad, weight.grad, bias.grad) of one forward and backward of `layer` on a fresh copy of x, and
    the names of the output's autograd graph."""
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    if generic:
        with Passthrough():
            y = layer(x)
    else:
        y = layer(x)
    if y.requires_grad:
        weighted_loss(y).backward()
    bias_grad = layer.bias.grad if layer.bias is not None else None
    if not generic:  # the generic path's stacked result is a view of its 2-D product; the fast path's is not
        assert y._base is None, "a new tensor, as torch.nn.Linear's result is, not a view"
    return (y.detach(), x.grad, layer.weight.grad, bias_grad), node_names(y.grad_fn)


@pytest.mark.parametrize("device, kernel", devices())
@pytest.mark.parametrize("shape", [(37, 24), (3, 37, 24), (0, 24)], ids=["rows", "stack", "empty"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("trains", ["everything", "parameters", "input-and-bias", "input", "nothing"])
def test_linear_fast_path_gives_the_generic_paths_numbers(device, kernel, shape, bias, trains):
    """Linear's plain eager path (_LinearProduct: one product with the bias added, both gradients' products in the
    C fast path) against its generic path (the operator on weight.mT, then + bias): the same output and products,
    bit for bit; the bias's gradient is the same column sums, in an order that may differ. `trains`: which of the
    input, the weight and the bias require grad (a first layer's input does not; a frozen layer's parameters; with
    nothing, grad mode on, no graph at all)."""
    torch.manual_seed(3)
    layer = fst.Linear(24, 16, bias=bias, device=device, kernel=kernel)
    layer.weight.requires_grad_(trains in ("everything", "parameters"))
    if bias:
        layer.bias.requires_grad_(trains not in ("input", "nothing"))
    x = torch.randn(shape, device=device).requires_grad_(trains not in ("parameters", "nothing"))
    (fast, fast_graph), (generic, generic_graph) = linear_run(layer, x, False), linear_run(layer, x, True)
    if trains == "nothing":
        assert fast_graph == [] and generic_graph == []
    else:
        assert "_LinearProductBackward" in fast_graph and "_LinearProductBackward" not in generic_graph, (
            fast_graph, generic_graph)
    assert fast[0].shape == (*shape[:-1], 16)
    for name, ours, theirs in zip(("output", "x.grad", "weight.grad"), fast[:3], generic[:3]):
        assert (ours is None) == (theirs is None), name
        assert ours is None or torch.equal(ours, theirs), name
    assert (fast[3] is None) == (generic[3] is None)
    if fast[3] is not None:
        torch.testing.assert_close(fast[3], generic[3], rtol=1e-6, atol=1e-6)
    with torch.no_grad():  # inference: the product and the bias, no graph, the same bits, a tensor of its own
        inferred = layer(x)
    assert inferred.grad_fn is None and inferred._base is None and torch.equal(inferred, fast[0])


def layouts_of_inputs(device):
    """Inputs of a 24 -> 16 layer in the layouts a model hands one: contiguous rows and stacks, a transposed matrix,
    a stack of single rows (their own stride), a stack of one, a column slice whose rows still merge, slices and a
    permuted stack whose rows do not, four dimensions, and empty batches."""
    g = torch.Generator(device=device).manual_seed(11)
    x = lambda *shape: torch.randn(*shape, device=device, generator=g)  # noqa: E731
    return {"rows": x(37, 24), "one row": x(1, 24), "stack": x(3, 37, 24), "transposed": x(24, 37).mT,
            "single rows": x(5, 3, 24)[:, :1], "one row repeated": x(1, 1, 24).expand(3, 1, 24),
            "stack of one": x(1, 37, 24), "column slice": x(3, 37, 30)[:, :, 3:27], "row slice": x(3, 40, 24)[:, 2:39],
            "strided stack": x(6, 37, 24)[::2], "rows that do not merge": x(37, 3, 24).transpose(0, 1),
            "four dimensions": x(2, 3, 5, 24), "empty": x(0, 24), "empty stack": x(3, 0, 24),
            "empty stack, expanded": x(0, 24).expand(3, 0, 24)}


# The layouts above that the one-call C path (linear_fast) takes on CUDA tensors; Linear.forward hands the rows
# that do not merge to the generic path before it, and linear_fast itself refuses four dimensions.
ONE_CALL = {"rows", "one row", "stack", "transposed", "single rows", "one row repeated", "stack of one",
            "column slice", "empty", "empty stack", "empty stack, expanded"}


@pytest.mark.parametrize("device, kernel", devices())
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_linear_inference_in_every_layout(device, kernel, bias):
    """Under no_grad the layer writes input @ weight^T + bias into a new tensor in one call where it can (CUDA rows
    that merge into one matrix) and through Python otherwise: in every layout, the generic path's bits, a tensor of
    its own of the input's leading shape, and FP32-accurate against float64."""
    torch.manual_seed(12)
    layer = fst.Linear(24, 16, bias=bias, device=device, kernel=kernel)
    for name, x in layouts_of_inputs(device).items():
        with torch.no_grad():
            ours = layer(x)
            with Passthrough():
                generic = layer(x)
        assert ours.shape == (*x.shape[:-1], 16) and ours._base is None and ours.is_contiguous(), name
        assert torch.equal(ours, generic), name
        if ours.numel():
            want = torch.nn.functional.linear(x.double(), layer.weight.double(),
                                              layer.bias.double() if bias else None)
            assert relative_error(ours, want) <= FP32_TOLERANCE, name


@pytest.mark.gpu
def test_linear_fast_takes_the_layouts_it_should():
    """The one-call path is taken, not silently passed by: linear_fast returns a tensor for every layout it is
    for, and NotImplemented (nothing done) for four dimensions and for rows that do not merge."""
    from fastsgemm import _sgemm
    torch.manual_seed(13)
    layer = fst.Linear(24, 16, device="cuda")
    w, b = layer.weight.detach(), layer.bias.detach()
    with torch.no_grad():
        for name, x in layouts_of_inputs("cuda").items():
            result = _sgemm.linear_fast(x, w, b, "auto")
            if name in ONE_CALL:
                assert result is not NotImplemented, name
                assert torch.equal(result, layer(x)), name
            elif name in ("four dimensions", "rows that do not merge", "row slice", "strided stack"):
                assert result is NotImplemented, name


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 8, 64, 300])
def test_linear_inference_of_a_wide_layer(batch):
    """A 1024 -> 1024 layer at small batches, where auto cuts K into slices (the thin configuration) and the bias,
    as the product's C, is added by the slices' sum: FP32-accurate against float64, and the generic path's bits
    wherever auto runs one of fastsgemm's kernels (cuBLAS may choose another algorithm with a C than without)."""
    torch.manual_seed(14)
    layer = fst.Linear(1024, 1024, device="cuda")
    with torch.no_grad():
        layer.bias.copy_(torch.randn(1024) * 4)  # a bias as large as the products, so that its rounding shows
    x = torch.randn(batch, 1024, device="cuda")
    with torch.no_grad():
        ours = layer(x)
        with Passthrough():
            generic = layer(x)
    want = torch.nn.functional.linear(x.double(), layer.weight.double(), layer.bias.double())
    assert relative_error(ours, want) <= FP32_TOLERANCE
    if not fastsgemm.auto_kernel(batch, 1024, 1024).startswith("cublas"):
        assert torch.equal(ours, generic)


@pytest.mark.parametrize("device, kernel", devices())
def test_linear_with_a_strided_bias(device, kernel):
    """A bias that is a strided view (every other element of a longer vector) is read with its stride."""
    torch.manual_seed(15)
    layer = fst.Linear(24, 16, device=device, kernel=kernel)
    layer.bias = torch.nn.Parameter(torch.randn(32, device=device)[::2])
    x = torch.randn(3, 37, 24, device=device)
    with torch.no_grad():
        ours = layer(x)
        with Passthrough():
            generic = layer(x)
    assert torch.equal(ours, generic)
    want = torch.nn.functional.linear(x.double(), layer.weight.double(), layer.bias.double())
    assert relative_error(ours, want) <= FP32_TOLERANCE


@pytest.mark.parametrize("device, kernel", devices())
def test_linear_is_traced_by_torch_fx(device, kernel):
    """torch.fx.symbolic_trace passes proxies, not tensors: the layer records the generic path's operator."""
    torch.manual_seed(7)
    model = torch.nn.Sequential(fst.Linear(24, 16, device=device, kernel=kernel), torch.nn.ReLU())
    traced = torch.fx.symbolic_trace(model)
    assert "fastsgemm.matmul" in str(traced.graph)
    x = torch.randn(3, 5, 24, device=device)
    assert torch.equal(traced(x), model(x))


@pytest.mark.parametrize("device, kernel", devices())
def test_linear_inputs_whose_rows_do_not_merge_take_the_generic_path(device, kernel):
    torch.manual_seed(4)
    layer = fst.Linear(24, 16, device=device, kernel=kernel)
    x = torch.randn(24, 5, 3, device=device).permute(2, 1, 0)  # (3, 5, 24): its rows are no one matrix
    y = layer(x)
    assert "_LinearProductBackward" not in node_names(y.grad_fn)  # the generic path's product, then its bias add
    reference = torch.nn.functional.linear(x.double(), layer.weight.double(), layer.bias.double())
    assert relative_error(y, reference) < FP32_TOLERANCE


@pytest.mark.parametrize("device, kernel", devices())
def test_linear_double_backward_matches_torch_nn_linear(device, kernel):
    """create_graph=True: the fast path's backward records differentiable products, so a gradient of a gradient
    (a gradient penalty) matches torch.nn.Linear's."""
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference in true FP32 (the default; made sure)
    torch.manual_seed(6)
    reference = torch.nn.Linear(24, 16, device=device)
    layer = fst.Linear.from_linear(reference, kernel=kernel)
    x = torch.randn(3, 37, 24, device=device)
    results = []
    for model in (layer, reference):
        model.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y = torch.tanh(model(xi))
        assert ("_LinearProductBackward" in node_names(y.grad_fn)) == (model is layer)
        (grad_x,) = torch.autograd.grad(weighted_loss(y), xi, create_graph=True)
        grad_x.square().sum().backward()
        results.append((grad_x.detach(), model.weight.grad.clone(), model.bias.grad.clone()))
    for ours, theirs in zip(*results):
        assert relative_error(ours, theirs) < 10 * FP32_TOLERANCE


def train(make_linear, device, steps=60):
    """Loss per step of a small MLP trained with SGD on a fixed regression problem, from a fixed initialisation."""
    torch.manual_seed(1234)
    model = torch.nn.Sequential(make_linear(32, 64), torch.nn.Tanh(), make_linear(64, 64), torch.nn.Tanh(),
                                make_linear(64, 1)).to(device)
    generator = torch.Generator().manual_seed(99)
    x = torch.randn(256, 32, generator=generator).to(device)
    y = torch.sin(x[:, :1] * 2) + 0.1 * x[:, 1:2]
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        optimiser.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return np.array(losses)


@pytest.mark.parametrize("device, kernel", devices())
def test_a_small_mlp_trains_to_torchs_loss_curve(device, kernel):
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference in true FP32 (the default; made sure)
    ours = train(lambda i, o: fst.Linear(i, o, kernel=kernel), device)
    theirs = train(torch.nn.Linear, device)
    assert theirs[-1] < 0.5 * theirs[0], "the problem must actually train"
    # Both sum the same products in a different order: float32 noise, which training does not amplify here.
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)


def compile_and_capture(model, backend=None):
    """model compiled with fullgraph=True (a graph break is an error), and the FX graphs Dynamo produced."""
    graphs = []

    def capture(graph_module, example_inputs):
        graphs.append(graph_module)
        if backend is None:
            return graph_module.forward
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(backend)(graph_module, example_inputs)

    torch._dynamo.reset()
    return torch.compile(model, fullgraph=True, backend=capture), graphs


@pytest.mark.parametrize("device, kernel", devices())
def test_torch_compile_traces_the_operator_with_no_graph_break(device, kernel):
    torch.manual_seed(8)
    model = torch.nn.Sequential(fst.Linear(24, 32, device=device, kernel=kernel), torch.nn.ReLU(),
                                fst.Linear(32, 8, device=device, kernel=kernel))
    compiled, graphs = compile_and_capture(model, backend="aot_eager")
    for batch in (5, 9, 17):  # new sizes: a recompile with dynamic shapes, through the fake implementation
        x = torch.randn(batch, 24, device=device, requires_grad=True)
        y = compiled(x)
        weighted_loss(y).backward()
        eager_x = x.detach().requires_grad_()
        eager_y = model(eager_x)
        assert torch.equal(y, eager_y)
        weighted_loss(eager_y).backward()
        assert torch.equal(x.grad, eager_x.grad)
    assert graphs, "Dynamo produced no graph"
    for graph in graphs:
        targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
        assert targets.count(torch.ops.fastsgemm.matmul.default) == 2, targets


@pytest.mark.gpu
def test_torch_compile_with_inductor_on_the_gpu():
    torch.manual_seed(9)
    model = torch.nn.Sequential(fst.Linear(64, 64, device="cuda"), torch.nn.GELU(), fst.Linear(64, 10, device="cuda"))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(128, 64, device="cuda")
    reference = torch.nn.functional.linear(
        torch.nn.functional.gelu(torch.nn.functional.linear(x.double(), model[0].weight.double(),
                                                            model[0].bias.double())),
        model[2].weight.double(), model[2].bias.double())
    assert relative_error(compiled(x), reference) < FP32_TOLERANCE


@pytest.mark.gpu
def test_work_runs_on_torchs_current_stream():
    """The inputs are NaN until a side stream, busy for tens of milliseconds first, writes them; the forward and
    backward products are queued on that stream right after. A product on any other stream would read NaN."""
    generator = torch.Generator().manual_seed(12)
    host_a, host_b = (torch.randn(shape, generator=generator).pin_memory() for shape in ((1024, 768), (768, 512)))
    a = torch.full((1024, 768), float("nan"), device="cuda", requires_grad=True)
    b = torch.full((768, 512), float("nan"), device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        with torch.no_grad():
            a.copy_(host_a, non_blocking=True)
            b.copy_(host_b, non_blocking=True)
        y = fst.matmul(a, b)
        weighted_loss(y).backward()
    side.synchronize()
    a64, b64 = host_a.double().requires_grad_(), host_b.double()
    y64 = a64 @ b64
    weighted_loss(y64).backward()
    assert relative_error(y, y64) < FP32_TOLERANCE
    assert relative_error(a.grad, a64.grad) < FP32_TOLERANCE


def readme_example(name):
    """The Python block docs/guide.md keeps between <!-- example:NAME:start --> and <!-- example:NAME:end -->."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    block = text.split(f"<!-- example:{name}:start -->")[1].split(f"<!-- example:{name}:end -->")[0]
    return block.split("```python")[1].split("```")[0]


@pytest.mark.gpu
def test_the_readme_training_example_trains(capsys):
    torch._dynamo.reset()
    exec(compile(readme_example("torch-train"), "docs/guide.md", "exec"), {})
    losses = [float(line.split()[-1]) for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
    assert len(losses) == 4 and all(np.isfinite(losses))
    assert losses[-1] < 0.2 * losses[0], losses


# ---- fastsgemm.matmul and fastsgemm.sgemm on tensors autograd records ----

UNREGISTERED_SCRIPT = r"""
import sys, torch, fastsgemm
assert "fastsgemm.torch" not in sys.modules
a, b = torch.randn(6, 5, requires_grad=True), torch.randn(5, 4)
for call in (fastsgemm.matmul, fastsgemm.sgemm):
    try:
        call(a, b, kernel="cpu")
        print("NO ERROR")
    except RuntimeError as error:
        print("REFUSED", error)
with torch.no_grad():
    print("NO GRAD", tuple(fastsgemm.matmul(a, b, kernel="cpu").shape))
import fastsgemm.torch
y = fastsgemm.matmul(a, b, kernel="cpu")
y.sum().backward()
print("REGISTERED", y.grad_fn is not None, tuple(a.grad.shape))
"""


def test_before_fastsgemm_torch_is_imported_a_gradient_is_refused_not_dropped():
    """The core never imports its torch integration: a product autograd would record, asked for first, raises and
    names the import; under no_grad it runs; after `import fastsgemm.torch` the same call has its gradient."""
    done = subprocess.run([sys.executable, "-c", UNREGISTERED_SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    refused = [line for line in lines if line.startswith("REFUSED")]
    assert len(refused) == 2 and all("import fastsgemm.torch" in line for line in refused), done.stdout
    assert "NO ERROR" not in done.stdout
    assert "NO GRAD (6, 4)" in lines and "REGISTERED True (6, 5)" in lines, done.stdout


@pytest.mark.parametrize("device, kernel", devices())
@pytest.mark.parametrize("call", ["matmul", "sgemm"])
def test_plain_calls_on_tensors_that_require_grad_give_the_product_its_gradient(device, kernel, call):
    """fastsgemm.matmul and sgemm(A, B) record the product as torch.matmul does (through fastsgemm.torch's
    operator) instead of handing back a result cut off from the graph."""
    generator = torch.Generator().manual_seed(11)
    a = torch.randn(37, 19, generator=generator).to(device).requires_grad_()
    b = torch.randn(19, 23, generator=generator).to(device)  # only A requires grad
    y = getattr(fastsgemm, call)(a, b, kernel=kernel)
    assert y.grad_fn is not None and y.requires_grad and isinstance(y, torch.Tensor)
    weighted_loss(y).backward()
    a64 = a.detach().double().requires_grad_()
    weighted_loss(a64 @ b.double()).backward()
    assert relative_error(y, a64.detach() @ b.double()) <= FP32_TOLERANCE
    assert relative_error(a.grad, a64.grad) <= FP32_TOLERANCE


@pytest.mark.parametrize("device, kernel", devices())
def test_under_no_grad_tensors_that_require_grad_are_read_as_they_are(device, kernel):
    generator = torch.Generator().manual_seed(12)
    layer_weight = torch.nn.Parameter(torch.randn(19, 23, generator=generator).to(device))
    x = torch.randn(37, 19, generator=generator).to(device)
    with torch.no_grad():
        y = fastsgemm.matmul(x, layer_weight, kernel=kernel)
        out = torch.empty(37, 23, device=device)
        fastsgemm.sgemm(x, layer_weight, out=out, kernel=kernel)
    reference = x.double() @ layer_weight.detach().double()
    assert relative_error(torch.as_tensor(np.asarray(y)) if not isinstance(y, torch.Tensor) else y,
                          reference) <= FP32_TOLERANCE
    assert relative_error(out, reference) <= FP32_TOLERANCE
    assert not getattr(y, "requires_grad", False)


@pytest.mark.parametrize("device, kernel", devices())
def test_calls_that_would_drop_a_gradient_say_so(device, kernel):
    fs = fastsgemm
    a = torch.randn(8, 5, device=device, requires_grad=True)
    b = torch.randn(5, 6, device=device)
    c = torch.zeros(8, 6, device=device)
    for attempt in (lambda: fs.sgemm(a, b, alpha=2.0, kernel=kernel), lambda: fs.sgemm(a, b, c, beta=1.0, kernel=kernel),
                    lambda: fs.sgemm(a, b, out=torch.empty(8, 6, device=device), kernel=kernel)):
        with pytest.raises(RuntimeError, match="records no gradient"):
            attempt()
    with pytest.raises(RuntimeError, match="out= records no gradient"):
        fs.matmul(a, b, out=torch.empty(8, 6, device=device), kernel=kernel)
    with pytest.raises(ValueError, match="2-D|matri"):  # sgemm's own shape error, not a word about gradients
        fs.sgemm(a[0], b, kernel=kernel)
