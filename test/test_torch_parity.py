"""The documented Tensor API (docs/tensor-api.md), method by method and argument form by argument form, forward and backward
against PyTorch on the PYTHON and CPU devices; numpy where PyTorch has no counterpart; the error types for bad input."""
import ast, inspect, os, pathlib
from typing import Any, Callable, NamedTuple
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.device import Device

DEVICES = ["PYTHON", "CPU"]

@pytest.fixture(scope="module")
def torch():
  try: import torch
  except ImportError:
    if os.environ.get("CI"): pytest.fail("CI is set but PyTorch is missing: pip install torch==2.13.0 (the machine's local CPU wheel)")
    pytest.skip("PyTorch is not installed (pip install torch==2.13.0)")
  torch.set_num_threads(1)  # small shapes: threads only cost time on a shared 2-core machine
  return torch

@pytest.fixture(params=DEVICES)
def device(request, monkeypatch):
  monkeypatch.setattr(Device, "DEFAULT", request.param)  # every tensor a case makes, index tensors included, lands there
  return request.param

class Case(NamedTuple):
  """fn(T, *xs) builds the output from the inputs, with T the Tensor class (tinycore) or the torch module (the reference);
  ref replaces fn for PyTorch where its spelling differs. An input is a shape (uniform random in [low, high) of `dtype`,
  differentiable when float) or a numpy array (float arrays differentiable, int and bool arrays constants)."""
  name: str
  inputs: list
  fn: Callable
  ref: Callable | None = None
  low: float = -2.0
  high: float = 2.0
  grad: bool = True
  dtype: Any = np.float32
  const: tuple = ()  # inputs PyTorch does not differentiate (running statistics, class weights): constants on both sides

def C(name, inputs, fn, ref=None, **kw): return pytest.param(Case(name, inputs, fn, ref, **kw), id=name)

def _inputs(case: Case, seed: int) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  def one(spec):
    if isinstance(spec, np.ndarray): return spec
    if np.issubdtype(case.dtype, np.integer): return rng.integers(int(case.low), int(case.high), spec).astype(case.dtype)
    if case.dtype == np.bool_: return rng.integers(0, 2, spec).astype(np.bool_)
    return rng.uniform(case.low, case.high, spec).astype(case.dtype)
  return [one(s) for s in case.inputs]

# tolerances per dtype (rtol, atol); integer and bool results are exact
TOL = {dtypes.float16: (5e-3, 5e-3), dtypes.bfloat16: (2e-2, 2e-2), dtypes.float32: (1e-4, 1e-5), dtypes.float64: (1e-9, 1e-10)}
GRAD_TOL = {dtypes.float16: (1e-2, 1e-2), dtypes.bfloat16: (5e-2, 5e-2), dtypes.float32: (1e-3, 1e-4), dtypes.float64: (1e-7, 1e-8)}

def _outs(x) -> list: return list(x) if isinstance(x, (tuple, list)) else [x]

def _dtype_name(x) -> str:
  """The dtype as numpy names it; 64-bit ints read as 32-bit: tinygrad's default int is int32 where PyTorch's is int64
  (index results, integer sums), the same rule at another width."""
  if isinstance(x, Tensor): name = "bfloat16" if x.dtype == dtypes.bfloat16 else str(np.dtype(x.dtype.fmt))
  else: name = str(x.dtype).removeprefix("torch.")
  return {"int64": "int32", "uint64": "uint32"}.get(name, name)

def _compare(name: str, got: Tensor, want, torch, tol) -> None:
  assert got.shape == tuple(want.shape), f"{name}: shape {got.shape}, PyTorch {tuple(want.shape)}"
  assert _dtype_name(got) == _dtype_name(want), f"{name}: dtype {got.dtype}, PyTorch {want.dtype}"
  want_np = want.detach().float().numpy() if want.dtype == torch.bfloat16 else want.detach().numpy()
  got_np = got.float().numpy() if got.dtype == dtypes.bfloat16 else got.numpy()
  if got.dtype in tol: np.testing.assert_allclose(got_np, want_np, *tol[got.dtype], err_msg=name)
  else: np.testing.assert_equal(got_np, want_np, err_msg=name)

def run_case(case: Case, torch, device: str) -> None:
  xs = _inputs(case, sum(map(ord, case.name)))
  diff = [case.grad and np.issubdtype(x.dtype, np.floating) and i not in case.const for i, x in enumerate(xs)]
  ts = [Tensor(x, requires_grad=d or None) for x, d in zip(xs, diff)]
  rs = [torch.tensor(x, requires_grad=d) for x, d in zip(xs, diff)]
  outs, wants = _outs(case.fn(Tensor, *ts)), _outs((case.ref or case.fn)(torch, *rs))
  assert len(outs) == len(wants), f"{case.name}: {len(outs)} outputs, PyTorch {len(wants)}"
  for i, (o, w) in enumerate(zip(outs, wants)):
    assert o.device == device, f"{case.name}: output on {o.device}, not {device}"
    _compare(f"{case.name} forward output {i}", o, w, torch, TOL)
  if not any(diff): return
  # backward: an uneven upstream gradient into every float output
  pairs = [(o, w) for o, w in zip(outs, wants) if dtypes.is_float(o.dtype) and w.requires_grad]
  assert pairs, f"{case.name}: no differentiable output"
  ups = [np.random.default_rng(i).uniform(0.5, 1.5, w.shape).astype(np.float32) for i, (_, w) in enumerate(pairs)]
  loss = sum((o.float() * Tensor(u)).sum() for (o, _), u in zip(pairs, ups))
  want_loss = sum((w.float() * torch.tensor(u)).sum() for (_, w), u in zip(pairs, ups))
  tsd, rsd = [t for t, d in zip(ts, diff) if d], [r for r, d in zip(rs, diff) if d]
  grads = loss.gradient(*tsd, materialize_grads=True)
  wgrads = torch.autograd.grad(want_loss, rsd, allow_unused=True)
  for i, (g, wg, r) in enumerate(zip(grads, wgrads, rsd)):
    _compare(f"{case.name} grad of input {i}", g, wg if wg is not None else torch.zeros_like(r), torch, GRAD_TOL)

I32, B = np.int32, np.bool_
def ints(*a): return np.array(a, dtype=np.int32)
def F(T): return T.nn.functional if hasattr(T, "nn") else None

# ***** elementwise: unary *****
UNARY = [
  C("abs", [(2, 3)], lambda T, x: x.abs()), C("neg", [(5,)], lambda T, x: x.neg() + -x),
  C("acos", [(6,)], lambda T, x: x.acos(), low=-0.95, high=0.95), C("asin", [(6,)], lambda T, x: x.asin(), low=-0.95, high=0.95),
  C("atan", [(6,)], lambda T, x: x.atan(), low=-5, high=5), C("atanh", [(6,)], lambda T, x: x.atanh(), low=-0.9, high=0.9),
  C("acosh", [(6,)], lambda T, x: x.acosh(), low=1.1, high=4), C("asinh", [(6,)], lambda T, x: x.asinh(), low=-4, high=4),
  C("sin_cos_tan", [(6,)], lambda T, x: x.sin() + x.cos() * 2 + x.tan() * 3, low=-1.3, high=1.3),
  C("sinh_cosh_tanh", [(6,)], lambda T, x: x.sinh() + x.cosh() * 2 + x.tanh() * 3, low=-3, high=3),
  C("exp_exp2", [(6,)], lambda T, x: x.exp() + x.exp2(), low=-4, high=4),
  C("log_family", [(6,)], lambda T, x: x.log() + x.log2() + x.log10(), low=0.1, high=5),
  C("sqrt_rsqrt_reciprocal", [(6,)], lambda T, x: x.sqrt() + x.rsqrt() + x.reciprocal(), low=0.2, high=4),
  C("rounding", [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.7, 0.3, 1.7], np.float32)],
    lambda T, x: x.round() + x.floor() * 10 + x.ceil() * 100 + x.trunc() * 1000),
  C("sign_square", [np.array([-2.0, -0.0, 0.0, 0.5, 3.0], np.float32)], lambda T, x: x.sign() + x.square()),
  C("sigmoid_extreme", [np.array([-100.0, -20, -1, 0, 1, 20, 100], np.float32)], lambda T, x: x.sigmoid()),
  C("relu_relu6", [(9,)], lambda T, x: x.relu() + x.relu6() * 2, lambda T, x: x.relu() + F(T).relu6(x) * 2, low=-8, high=8),
  C("leaky_relu", [(9,)], lambda T, x: x.leaky_relu() + x.leaky_relu(0.2), lambda T, x: F(T).leaky_relu(x) + F(T).leaky_relu(x, 0.2)),
  C("elu_celu_selu", [(9,)], lambda T, x: x.elu() + x.elu(0.5) + x.celu(0.7) + x.selu(),
    lambda T, x: F(T).elu(x) + F(T).elu(x, 0.5) + F(T).celu(x, 0.7) + F(T).selu(x), low=-3, high=3),
  C("gelu_tanh", [(9,)], lambda T, x: x.gelu(), lambda T, x: F(T).gelu(x, approximate="tanh"), low=-4, high=4),
  C("gelu_none", [(9,)], lambda T, x: x.gelu(approximate="none"), lambda T, x: F(T).gelu(x), low=-4, high=4),
  C("silu_swish_mish", [(9,)], lambda T, x: x.silu() + x.swish() * 2 + x.mish(), lambda T, x: F(T).silu(x) * 3 + F(T).mish(x), low=-4, high=4),
  C("softplus_beta", [(9,)], lambda T, x: x.softplus() + x.softplus(2.0), lambda T, x: F(T).softplus(x) + F(T).softplus(x, 2.0), low=-4, high=4),
  C("softsign_logsigmoid", [(9,)], lambda T, x: x.softsign() + x.logsigmoid(), lambda T, x: F(T).softsign(x) + F(T).logsigmoid(x), low=-4, high=4),
  C("hard_activations", [(9,)], lambda T, x: x.hardswish() + x.hardsigmoid() + x.hardtanh() + x.hardtanh(-2, 3),
    lambda T, x: F(T).hardswish(x) + F(T).hardsigmoid(x) + F(T).hardtanh(x) + F(T).hardtanh(x, -2, 3), low=-5, high=5),
  C("erf", [(9,)], lambda T, x: x.erf(), low=-3, high=3),
  C("hardsigmoid_alpha_beta", [(9,)], lambda T, x: x.hardsigmoid(0.2, 0.4) + x.hardsigmoid(beta=0.25), lambda T, x: (x * 0.2 + 0.4).clamp(0, 1) + (x / 6 + 0.25).clamp(0, 1), low=-5, high=5),
  C("isinf_detect", [np.array([1.0, np.inf, -np.inf, np.nan], np.float32)], lambda T, x: (x.isinf(detect_negative=False), x.isinf(detect_positive=False), x.isinf(False, False)),
    lambda T, x: (x.isposinf(), x.isneginf(), x.isinf() & False), grad=False),
  C("isnan_isinf_isfinite", [np.array([1.0, np.inf, -np.inf, np.nan, 0.0], np.float32)],
    lambda T, x: (x.isnan(), x.isinf(), x.isfinite()), grad=False),
  C("logical_not", [(7,)], lambda T, x: x.logical_not(), dtype=B),
  C("bitwise_not", [(7,)], lambda T, x: x.bitwise_not() + ~x, dtype=I32, low=-50, high=50),
  C("half_unary", [(7,)], lambda T, x: x.exp() + x.sqrt() + x.sigmoid(), dtype=np.float16, low=0.1, high=3),
  C("double_unary", [(7,)], lambda T, x: x.exp() + x.log() + x.tanh(), dtype=np.float64, low=0.1, high=3),
  C("int_unary_to_float", [(7,)], lambda T, x: (x.sqrt(), x.exp(), x.sin(), x.abs(), x.neg()), dtype=I32, low=1, high=9),
]

# ***** elementwise: binary, broadcasting, scalars, promotion *****
BINARY = [
  C("add_sub_mul_div", [(3, 4), (3, 4)], lambda T, a, b: a + b + a - b * 2 + a * b + a / b, low=0.5, high=2),
  C("broadcast_col_row", [(3, 1), (1, 4)], lambda T, a, b: a.add(b) + a.sub(b) * a.mul(b) - a.div(b), low=0.5, high=2),
  C("broadcast_rank", [(2, 3, 4), (4,)], lambda T, a, b: a * b + b - a),
  C("scalar_both_sides", [(5,)], lambda T, x: 2 - x + x * 3 - 1 / x + x / 4 + 2 ** x + x ** 2, low=0.5, high=2),
  C("int_float_promotion", [ints(1, 2, 3), (3,)], lambda T, i, x: (i + x, i * 2, i / 2, i + 1.5, i * True, i - i)),
  C("bool_int_promotion", [np.array([True, False, True]), ints(4, 5, 6)], lambda T, b, i: (b + i, b * 2, b & b, b | ~b), grad=False),
  C("half_float_promotion", [(4,), (4,)], lambda T, a, b: a.half() + b, low=-1, high=1),
  C("div_rounding_modes", [(8,), (8,)], lambda T, a, b: (a.div(b, rounding_mode="floor"), a.div(b, rounding_mode="trunc"), a // b), low=-5, high=5, grad=False),
  C("int_div_modes", [ints(7, -7, 7, -7, 0), ints(2, 2, -2, -2, 3)],
    lambda T, a, b: (a.div(b, rounding_mode="floor"), a.div(b, rounding_mode="trunc"), a // b, a / b, a % b)),
  C("mod_float_signs", [np.array([5.5, -5.5, 5.5, -5.5, 0.0, 3.0], np.float32), np.array([2.0, 2.0, -2.0, -2.0, 2.0, -1.5], np.float32)],
    lambda T, a, b: (a % b, a.mod(b), a.fmod(b)), ref=lambda T, a, b: (a % b, a.remainder(b), a.fmod(b)), grad=False),
  C("int_fmod_mod", [ints(7, -7, 7, -7), ints(3, 3, -3, -3)], lambda T, a, b: (a.fmod(b), a % b, a % 3, 7 % b)),
  C("pow_forms", [(6,), (6,)], lambda T, a, b: a.pow(b) + a ** 2 + a ** 0.5 + 2 ** b + a.pow(-1), low=0.3, high=2),
  C("pow_zero_base", [np.array([0.0, 0.0, 0.0, 0.0, 2.0], np.float32), np.array([2.0, 0.0, 1.0, 0.5, 0.0], np.float32)], lambda T, a, b: a.pow(b)),
  C("pow_negative_base_int_exponent", [np.array([-2.0, -1.5, -3.0], np.float32)], lambda T, x: x ** 2 + x ** 3 + x.pow(-2)),
  C("pow_int_tensors", [ints(2, 3, -2, 0, 5), ints(3, 2, 3, 0, 1)], lambda T, a, b: (a ** b, a ** 2)),
  # d/dt of b**t is b**t * log(b): PyTorch's 0 at a zero base with t >= 0, -inf with t < 0, NaN for a negative base (b**t is
  # real only at integer t), as are both slopes of a negative base with a fractional exponent
  C("pow_exponent_grad", [np.array([0.0, 0.0, 0.0, 0.0, 0.0, -2.0, -2.0, -2.0, -2.0, 3.0, 0.5, 2.0, 0.0, -1.5], np.float32),
                          np.array([2.0, 0.0, -1.0, 0.5, 1.0, 2.0, 3.0, 0.5, -2.0, 0.0, -1.5, 0.3, -0.5, 0.0], np.float32)], lambda T, a, b: a ** b),
  # an infinite base: C's pow values, and the slopes 0 (e < 1), 1 (e == 1), e * b**(e-1) past 1 (each its own input: inf - inf)
  C("pow_infinite_base", [np.array([-np.inf, np.inf], np.float32)] * 5, lambda T, a, b, c, d, z: (a ** 0.3, b ** 2.0, c ** 3.0, d ** -1.0, z ** 0.0)),
  C("pow_scalar_base", [np.array([0.0, 1.0, -1.5, 3.0, 2.0, 0.5], np.float32)], lambda T, t: (2 ** t, 0 ** t, 0.0 ** t, (-2.0) ** t, 0.5 ** t, t.pow(t))),
  C("maximum_minimum", [(3, 4), (4,)], lambda T, a, b: a.maximum(b) + a.minimum(b) * 2 + a.maximum(0.5) + a.minimum(-1),
    lambda T, a, b: T.maximum(a, b) + T.minimum(a, b) * 2 + a.clamp(min=0.5) + a.clamp(max=-1)),
  C("maximum_ties", [np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 1.0, 4.0], np.float32)], lambda T, a, b: a.maximum(b) + a.minimum(b) * 3,
    lambda T, a, b: T.maximum(a, b) + T.minimum(a, b) * 3),
  C("maximum_int_with_float_scalar", [ints(1, 2, 3)], lambda T, i: (i.maximum(1.5), i.minimum(2.5)),
    lambda T, i: (T.maximum(i, T.tensor(1.5)), T.minimum(i, T.tensor(2.5)))),
  C("copysign", [(6,), np.array([1.0, -1.0, 0.0, -0.0, 2.0, -3.0], np.float32)], lambda T, a, b: a.copysign(b)),
  C("lerp_scalar_and_tensor", [(5,), (5,), (5,)], lambda T, a, b, w: a.lerp(b, 0.25) + a.lerp(b, w), low=0, high=1),
  C("logaddexp", [(5,), (5,)], lambda T, a, b: a.logaddexp(b), lambda T, a, b: T.logaddexp(a, b), low=-30, high=30),
  C("reverse_forms", [(3, 4), (4, 4)], lambda T, a, m: (a.add(2, reverse=True), a.sub(1.5, reverse=True), a.mul(3, reverse=True), a.div(2, reverse=True), a.pow(2, reverse=True),
                                                      a.matmul(m), a.matmul(m[:3, :3], reverse=True)),
    lambda T, a, m: (2 + a, 1.5 - a, 3 * a, 2 / a, 2 ** a, a @ m, m[:3, :3] @ a), low=0.5, high=2),
  C("int_reverse_forms", [(5,)], lambda T, i: (i.mod(7, reverse=True), i.bitwise_xor(5, reverse=True), i.bitwise_and(6, reverse=True), i.bitwise_or(9, reverse=True), i.sub(1, reverse=True)),
    lambda T, i: (7 % i, 5 ^ i, 6 & i, 9 | i, 1 - i), dtype=I32, low=1, high=9),
  C("comparisons", [(3, 4), (4,)], lambda T, a, b: (a < b, a > b, a <= b, a >= b, a == b, a != b, a.eq(b), a.ne(b), a < 0.5, 0.5 < a), grad=False),
  C("comparisons_equal_values", [np.array([1.0, 2.0, np.nan], np.float32), np.array([1.0, 3.0, np.nan], np.float32)],
    lambda T, a, b: (a <= b, a >= b, a == b, a != b), grad=False),
  C("bitwise_ops", [(6,), (6,)], lambda T, a, b: (a & b, a | b, a ^ b, a.bitwise_and(b), a.bitwise_or(b), a.bitwise_xor(b), a & 3, 5 | a), dtype=I32, low=-20, high=20),
  C("bool_logic", [(6,), (6,)], lambda T, a, b: (a & b, a | b, a ^ b, ~a), dtype=B),
  C("shifts", [ints(1, 5, -8, 100, -1)], lambda T, x: (x << 2, x >> 1, x.lshift(3), x.rshift(2)),
    lambda T, x: (x << 2, x >> 1, x.bitwise_left_shift(3), x.bitwise_right_shift(2))),
  # amounts from a tensor, and amounts of the bit width or more: every bit shifted out (-1 for a negative a >> n), as PyTorch's
  C("shifts_by_tensors_and_past_the_width", [ints(-1, -3, 1, 7, 0, -2**31, 2**31 - 1, -1), ints(0, 2, 8, 31, 31, 1, 30, 5)],
    lambda T, a, n: (a << n, a >> n, a << 33, a >> 40, a.lshift(n), a.rshift(n)), lambda T, a, n: (a << n, a >> n, a << 33, a >> 40, a << n, a >> n)),
  C("shifts_small_ints", [np.array([1, 5, -8, 100], np.int8), np.array([1, 5, 200, 255], np.uint8)], lambda T, x, u: (x << 1, x >> 2, u << 1, u >> 3)),
  C("where_forms", [np.array([True, False, True, False]), (4,), (4,)], lambda T, c, x, y: (c.where(x, y), c.where(x, 0.5), c.where(1.0, y)),
    lambda T, c, x, y: (T.where(c, x, y), T.where(c, x, 0.5), T.where(c, 1.0, y))),
  C("where_broadcast", [np.array([[True], [False]]), (2, 3), (3,)], lambda T, c, x, y: c.where(x, y), lambda T, c, x, y: T.where(c, x, y)),
  C("masked_fill", [(3, 4), np.array([True, False, True, False])], lambda T, x, m: x.masked_fill(m, 7.5) + x.masked_fill(m, -float("inf")).exp()),
  C("clip_forms", [(9,)], lambda T, x: x.clip(-0.5, 0.5) + x.clamp(-1, None) + x.clip(None, 0.25) * 2, low=-2, high=2),
  C("clip_boundaries", [np.array([-1.0, -0.5, 0.0, 0.5, 1.0], np.float32)], lambda T, x: x.clip(-0.5, 0.5)),
  C("clip_tensor_bounds", [(6,), (6,), (6,)], lambda T, x, lo, hi: x.clip(lo, lo + hi.abs()), lambda T, x, lo, hi: x.clamp(lo, lo + hi.abs())),
  C("isclose_allclose", [np.array([1.0, 1.0, np.inf, np.nan, -np.inf, 0.0], np.float32), np.array([1.0 + 1e-6, 1.1, np.inf, np.nan, np.inf, 1e-9], np.float32)],
    lambda T, a, b: (a.isclose(b), a.isclose(b, equal_nan=True), a.isclose(b, rtol=0.2), a.allclose(a), a[:2].allclose(b[:2], rtol=0.2)),
    lambda T, a, b: (a.isclose(b), a.isclose(b, equal_nan=True), a.isclose(b, rtol=0.2), T.tensor(a.allclose(a)), T.tensor(a[:2].allclose(b[:2], rtol=0.2))), grad=False),
]

# ***** reductions: every axis form *****
REDUCE = [
  C("sum_axis_forms", [(2, 3, 4)], lambda T, x: (x.sum(), x.sum(0), x.sum(-1), x.sum((0, 2)), x.sum((-1, -3)), x.sum(1, keepdim=True), x.sum((0, 1), keepdim=True), x.sum(())),
    lambda T, x: (x.sum(), x.sum(0), x.sum(-1), x.sum((0, 2)), x.sum((-1, -3)), x.sum(1, keepdim=True), x.sum((0, 1), keepdim=True), x.clone())),
  C("sum_dtype", [(3, 4)], lambda T, x: (x.sum(1, dtype="float16" if T is Tensor else T.float16), x.sum(dtype="float64" if T is Tensor else T.float64))),
  C("int_sum_prod_dtype", [(3, 4)], lambda T, x: (x.sum(), x.sum(0), x.prod(1), x.sum(dtype=T.float32 if T is not Tensor else "float32")), dtype=I32, low=-3, high=4),
  C("bool_sum", [(3, 4)], lambda T, x: (x.sum(), x.sum(1)), dtype=B),
  C("half_sum_mean", [(3, 4)], lambda T, x: (x.sum(1), x.mean(0)), dtype=np.float16),
  C("prod_forms", [(2, 3, 4)], lambda T, x: (x.prod(), x.prod(1), x.prod(-1, keepdim=True)),
    lambda T, x: (x.prod(), x.prod(1), x.prod(-1, keepdim=True)), low=0.5, high=1.5),
  C("prod_with_zero", [np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.0]], np.float32)], lambda T, x: x.prod(1)),
  C("max_min_axis_forms", [(2, 3, 4)], lambda T, x: (x.max(), x.max(1), x.min(-1), x.max((0, 2)), x.min(1, keepdim=True), x.max(axis=0, keepdim=True)),
    lambda T, x: (x.amax(), x.amax(1), x.amin(-1), x.amax((0, 2)), x.amin(1, keepdim=True), x.amax(0, keepdim=True))),
  C("max_ties_grad", [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)], lambda T, x: (x.max(1), x.min()), lambda T, x: (x.amax(1), x.amin())),
  C("mean_forms", [(2, 3, 4)], lambda T, x: (x.mean(), x.mean(1), x.mean((0, -1)), x.mean(-2, keepdim=True))),
  C("int_mean", [(3, 4)], lambda T, x: (x.mean(), x.mean(1)), lambda T, x: (x.float().mean(), x.float().mean(1)), dtype=I32, low=0, high=9),
  C("var_std_forms", [(3, 5)], lambda T, x: (x.var(), x.var(1), x.std(0, keepdim=True), x.var(1, correction=0), x.std(correction=0)),
    lambda T, x: (x.var(), x.var(1), x.std(0, keepdim=True), x.var(1, correction=0), x.std(correction=0))),
  C("var_mean_std_mean", [(3, 5)], lambda T, x: (*x.var_mean(1), *x.std_mean(0, correction=0)), lambda T, x: (*T.var_mean(x, 1), *T.std_mean(x, 0, correction=0))),
  C("any_all", [(3, 4)], lambda T, x: (x.any(), x.all(), x.any(1), x.all(0, keepdim=True), x.any((0, 1))), lambda T, x: (x.any(), x.all(), x.any(1), x.all(0, keepdim=True), x.any((0, 1))), dtype=B),
  C("argmax_argmin", [np.array([[1.0, 3.0, 3.0, 0.0], [5.0, -1.0, 5.0, -1.0]], np.float32)],
    lambda T, x: (x.argmax(), x.argmax(1), x.argmin(0), x.argmin(-1, keepdim=True), x.argmax(1, keepdim=True)), grad=False),
  C("logsumexp_forms", [(2, 3, 4)], lambda T, x: (x.logsumexp(), x.logsumexp(1), x.logsumexp((0, 2)), x.logsumexp(-1, keepdim=True)),
    lambda T, x: (x.flatten().logsumexp(0), x.logsumexp(1), x.logsumexp((0, 2)), x.logsumexp(-1, keepdim=True)), low=-30, high=30),
  C("logsumexp_0d", [()], lambda T, x: (x.logsumexp(0), x.logsumexp(-1, keepdim=True))),
  C("logsumexp_inf", [np.array([[-np.inf, -np.inf], [0.0, -np.inf]], np.float32)], lambda T, x: x.logsumexp(1), grad=False),
  C("logcumsumexp", [(3, 4)], lambda T, x: x.logcumsumexp(1) + x.logcumsumexp(), lambda T, x: x.logcumsumexp(1) + x.logcumsumexp(0), low=-20, high=20),
  C("cumsum_cumprod", [(3, 4)], lambda T, x: (x.cumsum(1), x.cumsum(), x.cumsum(-2), x.cumprod(1), x.cumprod(0)),
    lambda T, x: (x.cumsum(1), x.cumsum(0), x.cumsum(-2), x.cumprod(1), x.cumprod(0)), low=0.5, high=1.5),
  C("cummax_cummin", [np.array([[1.0, 3.0, 2.0, 3.0, 0.0], [0.0, -1.0, 4.0, 4.0, 5.0]], np.float32)],
    lambda T, x: (*x.cummax(1), *x.cummin(1), x.cummax(0)[0]), lambda T, x: (*x.cummax(1), *x.cummin(1), x.cummax(0)[0])),
  C("softmax_family", [(2, 3, 4)], lambda T, x: (x.softmax(), x.softmax(0), x.log_softmax(1), x.log_softmax(), x.softmin(-1)),
    lambda T, x: (x.softmax(-1), x.softmax(0), x.log_softmax(1), x.log_softmax(-1), F(T).softmin(x, -1)), low=-10, high=10),
  C("softmax_dtype", [(3, 4)], lambda T, x: x.half().softmax(1, dtype="float32" if T is Tensor else T.float32), low=-3, high=3),
  C("int_cumsum_and_max", [(3, 4)], lambda T, x: (x.cumsum(1), x.max(1), x.min(), x.sum(-1)), lambda T, x: (x.cumsum(1), x.amax(1), x.amin(), x.sum(-1)), dtype=I32, low=-9, high=9),
]

# ***** movement *****
MOVE = [
  C("reshape_forms", [(2, 3, 4)], lambda T, x: (x.reshape(6, 4), x.reshape((4, 6)), x.reshape(-1), x.reshape(2, -1), x.reshape([3, -1, 2]), x.view(24), x.view(4, 3, 2))),
  C("reshape_none_keeps_dims", [(2, 3, 4)], lambda T, x: (x.reshape(None, -1), x.reshape((None, 4, 3))), lambda T, x: (x.reshape(2, -1), x.reshape(2, 4, 3))),
  C("expand_forms", [(3, 1)], lambda T, x: (x.expand(3, 4), x.expand((2, 3, 4)), x.expand(-1, 5), x.expand(2, -1, -1))),
  C("permute_forms", [(2, 3, 4)], lambda T, x: (x.permute(2, 0, 1), x.permute((1, 2, 0)), x.permute(-1, -3, -2), x.permute([0, 2, 1]))),
  C("flip_forms", [(2, 3, 4)], lambda T, x: (x.flip(0), x.flip((0, 2)), x.flip(-1), x.flip([1])), lambda T, x: (x.flip(0), x.flip((0, 2)), x.flip(-1), x.flip([1]))),
  C("transpose_T", [(2, 3, 4)], lambda T, x: (x.transpose(0, 2), x.transpose(-1, -2), x[0].T, x[0].transpose()), lambda T, x: (x.transpose(0, 2), x.transpose(-1, -2), x[0].T, x[0].t())),
  C("flatten_unflatten", [(2, 3, 4)], lambda T, x: (x.flatten(), x.flatten(1), x.flatten(0, 1), x.flatten(-2, -1), x.unflatten(2, (2, 2)), x.unflatten(-1, (2, -1)))),
  C("squeeze_unsqueeze", [(1, 3, 1, 2)], lambda T, x: (x.squeeze(), x.squeeze(0), x.squeeze(-2), x.squeeze(1), x.squeeze((0, 2)), x.unsqueeze(0), x.unsqueeze(-1), x.unsqueeze(2))),
  C("repeat_forms", [(2, 3)], lambda T, x: (x.repeat(2, 1), x.repeat((1, 2)), x.repeat(2, 1, 3))),
  C("repeat_interleave", [(2, 3)], lambda T, x: (x.repeat_interleave(2), x.repeat_interleave(3, 0), x.repeat_interleave(2, dim=-1))),
  C("roll_forms", [(3, 4)], lambda T, x: (x.roll(1), x.roll(2, 1), x.roll(-1, 0), x.roll((1, -2), (0, 1)), x.roll(5, -1))),
  C("cat_forms", [(2, 3), (1, 3), (2, 3)], lambda T, a, b, c: (T.cat([a, b, c]), T.cat((a, c), dim=-1), T.cat([a], 0), T.cat([a, c], 1), a.cat(c, dim=1) if T is Tensor else T.cat([a, c], 1))),
  C("cat_mixed_dtypes", [(2, 2), ints(1, 2, 3, 4).reshape(2, 2)], lambda T, a, i: T.cat([a, i]), lambda T, a, i: T.cat([a, i.float()])),
  C("stack_forms", [(2, 3), (2, 3)], lambda T, a, b: (T.stack([a, b]), T.stack([a, b], 1), T.stack((a, b), dim=1), T.stack([a, b], dim=-1), T.stack([a]), a.stack(b, dim=2) if T is Tensor else T.stack([a, b], 2))),
  C("split_chunk", [(5, 4)], lambda T, x: (*x.split(2), *x.split([1, 4]), *x.split(3, dim=1), *x.chunk(2), *x.chunk(3, dim=-1))),
  C("tril_triu", [(3, 4)], lambda T, x: (x.tril(), x.triu(), x.tril(1), x.triu(-1), x.tril(-2), x.triu(2))),
  C("tril_batched", [(2, 3, 3)], lambda T, x: x.tril() + x.triu(1) * 2),
  C("diagonal_forms", [(3, 4, 5)], lambda T, x: (x.diagonal(), x.diagonal(1), x.diagonal(-1, 1, 2), x.diagonal(0, -1, 0), x[0].diagonal(2))),
  C("diag", [(4,)], lambda T, x: x.diag()),
  C("unfold", [(3, 7)], lambda T, x: (x.unfold(1, 3, 2), x.unfold(0, 2, 1), x.unfold(-1, 7, 1))),
  C("unfold_empty_windows", [(3, 3, 3)], lambda T, x: (x.unfold(1, 0, 8), x.unfold(-1, 0, 1))),
  C("meshgrid", [(3,), (4,)], lambda T, a, b: (*a.meshgrid(b), *a.meshgrid(b, indexing="xy")),
    lambda T, a, b: (*T.meshgrid(a, b, indexing="ij"), *T.meshgrid(a, b, indexing="xy"))),
  C("contiguous_detach_clone", [(2, 3)], lambda T, x: (x.T.contiguous() * 2, x.detach() + x, x.clone() * 3)),
  C("contiguous_backward", [(2, 3)], lambda T, x: x.T.contiguous_backward() * 2, lambda T, x: x.T.contiguous() * 2),
  C("pad_constant_forms", [(2, 3, 4)], lambda T, x: x.pad((1, 2)) + 0, lambda T, x: F(T).pad(x, (1, 2))),
  C("pad_flat_and_value", [(2, 3, 4)], lambda T, x: (x.pad((1, 2, 0, 1)), x.pad((1, 1, 2, 0), value=-3.5), x.pad((0, 0, 0, 0, 1, 1)), x.pad((-1, 1, 1, -2))),
    lambda T, x: (F(T).pad(x, (1, 2, 0, 1)), F(T).pad(x, (1, 1, 2, 0), value=-3.5), F(T).pad(x, (0, 0, 0, 0, 1, 1)), F(T).pad(x, (-1, 1, 1, -2)))),
  C("pad_grouped", [(2, 3, 4)], lambda T, x: (x.pad(((0, 1), None, (2, 0))), x.pad((None, (1, -1), (0, 0)), value=2.0)),
    lambda T, x: (F(T).pad(x, (2, 0, 0, 0, 0, 1)), F(T).pad(x, (0, 0, 1, -1), value=2.0))),
  C("pad_reflect", [(1, 2, 5)], lambda T, x: (x.pad((2, 1), mode="reflect"), x.pad((4, 0), mode="reflect"), x.pad((-1, 3), mode="reflect")),
    lambda T, x: (F(T).pad(x, (2, 1), mode="reflect"), F(T).pad(x, (4, 0), mode="reflect"), F(T).pad(x, (0, 3), mode="reflect")[..., 1:])),
  C("pad_reflect_2d", [(1, 1, 3, 4)], lambda T, x: x.pad((1, 2, 2, 1), mode="reflect"), lambda T, x: F(T).pad(x, (1, 2, 2, 1), mode="reflect")),
  C("pad_replicate", [(1, 2, 4)], lambda T, x: (x.pad((3, 1), mode="replicate"), x.pad((-1, 2), mode="replicate")),
    lambda T, x: (F(T).pad(x, (3, 1), mode="replicate"), F(T).pad(x, (0, 2), mode="replicate")[..., 1:])),
  C("pad_replicate_2d", [(1, 1, 3, 3)], lambda T, x: x.pad((1, 2, 0, 3), mode="replicate"), lambda T, x: F(T).pad(x, (1, 2, 0, 3), mode="replicate")),
  C("pad_circular", [(1, 2, 4)], lambda T, x: (x.pad((2, 3), mode="circular"), x.pad((4, 4), mode="circular"), x.pad((-1, 2), mode="circular")),
    lambda T, x: (F(T).pad(x, (2, 3), mode="circular"), F(T).pad(x, (4, 4), mode="circular"), F(T).pad(x, (-1, 2), mode="circular"))),
  # negative padding crops after a reflect or replicate pad of the whole input, before a circular one, as PyTorch's
  C("pad_negative_modes", [(3, 3, 3, 3)], lambda T, x: (x.pad((-1, 2, 2, -1), mode="reflect"), x.pad((2, -3, 0, -2), mode="reflect"),
                                                       x.pad((-1, 2, 2, -1), mode="replicate"), x.pad((3, -3, 1, -3), mode="replicate"), x.pad((1, -2, 2, -1), mode="circular")),
    lambda T, x: (F(T).pad(x, (-1, 2, 2, -1), mode="reflect"), F(T).pad(x, (2, -3, 0, -2), mode="reflect"), F(T).pad(x, (-1, 2, 2, -1), mode="replicate"),
                  F(T).pad(x, (3, -3, 1, -3), mode="replicate"), F(T).pad(x, (1, -2, 2, -1), mode="circular"))),
  C("pad_circular_2d", [(1, 1, 3, 3)], lambda T, x: x.pad((1, 2, 2, 0), mode="circular"), lambda T, x: F(T).pad(x, (1, 2, 2, 0), mode="circular")),
  C("casts", [(5,)], lambda T, x: (x.float(), x.half(), x.double(), x.int(), x.long(), x.short(), x.bool(), x.bfloat16(), x.cast(dtypes.float16), x.cast("float64")),
    lambda T, x: (x.float(), x.half(), x.double(), x.int(), x.long(), x.short(), x.bool(), x.bfloat16(), x.to(T.float16), x.to(T.float64)), low=-100, high=100),
  C("cast_float_to_int_truncates", [np.array([-2.7, -0.5, 0.5, 2.7, 126.9], np.float32)], lambda T, x: (x.int(), x.cast(dtypes.int8), x.bool()),
    lambda T, x: (x.int(), x.to(T.int8), x.bool()), grad=False),
  C("bitcast", [np.array([1.0, -2.0, 0.0], np.float32)], lambda T, x: (x.bitcast(dtypes.int32).long(), x.bitcast(dtypes.uint32).long()),
    lambda T, x: (x.view(T.int32).long(), x.view(T.int32).long() & 0xFFFFFFFF), grad=False),
]

# ***** indexing: every form, reading and writing *****
IDX = ints(2, 0, 2, 1)
INDEX = [
  C("index_ints", [(3, 4, 5)], lambda T, x: (x[1], x[-1], x[1, 2], x[-1, -2, -3], x[0][1][2])),
  C("index_slices", [(5, 6)], lambda T, x: (x[1:3], x[:, 2:], x[::2], x[1::3, ::2], x[-3:-1], x[:, -4:5:2], x[:100], x[4:2])),
  C("index_none_ellipsis", [(2, 3, 4)], lambda T, x: (x[None], x[:, None], x[..., 1], x[0, ...], x[..., None], x[None, ..., None, 0], x[1, ..., 1:3], x[...])),
  C("index_int_tensor", [(4, 5), IDX], lambda T, x, i: (x[i], x[:, i], x[i, i], x[i.reshape(2, 2)], x[i, 1:3], x[1, i])),
  C("index_int_lists", [(4, 5)], lambda T, x: (x[[0, 2]], x[[-1, 0, 1]], x[:, [4, 0]], x[[0, 1], [2, 3]])),
  C("index_separated_advanced", [(3, 4, 5), ints(0, 2), ints(1, 3)], lambda T, x, i, j: (x[i, :, j], x[i, 1:3, j], x[:, i][:, :, j])),
  C("index_negative_int_tensor", [(4, 3), ints(-1, -4, 0)], lambda T, x, i: x[i]),
  C("index_bool_mask", [(3, 4), np.array([True, False, True]), np.array([[True, False, True, True], [False, False, False, True], [True, True, False, False]])],
    lambda T, x, m, m2: (x[m], x[:, m2[0]], x[m2], x[x > 0])),
  C("index_repeated_int_tensor_grad", [(4,), ints(1, 1, 3, 1)], lambda T, x, i: x[i]),
  C("gather_forms", [(3, 4), ints(0, 2, 1, 0, 2, 2, 0, 1).reshape(2, 4), ints(3, 0, 1, 1).reshape(2, 2)],
    lambda T, x, i, j: (x.gather(0, i), x.gather(1, j), x.gather(-1, j), x.gather(0, i[:, :2]))),
  C("scatter_src_and_value", [(3, 4), (2, 4), ints(0, 2, 1, 0, 2, 2, 0, 1).reshape(2, 4)],
    lambda T, x, s, i: (x.scatter(0, i, s), x.scatter(1, i[:, :3] % 3, s), x.scatter(0, i, 2.5)), grad=False),
  C("scatter_reduce_add_multiply", [(3, 4), ints(0, 2, 1, 0, 2, 2, 0, 1).reshape(2, 4)],
    lambda T, x, i: (x.scatter(0, i, 2.0, reduce="add"), x.scatter(0, i, 3.0, reduce="multiply")), grad=False),
  C("scatter_reduce_all", [(3, 4), (2, 4), ints(0, 2, 1, 0, 0, 2, 0, 1).reshape(2, 4)],
    lambda T, x, s, i: tuple(x.scatter_reduce(0, i, s, r, include_self=inc) for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)),
    low=0.5, high=2, grad=False),
  C("scatter_reduce_sum_grad", [(3, 4), (2, 4), ints(0, 2, 1, 0, 0, 2, 0, 1).reshape(2, 4)],
    lambda T, x, s, i: x.scatter_reduce(0, i, s, "sum") + x.scatter_reduce(1, i % 4, s, "sum", include_self=False)),
  C("scatter_reduce_int", [ints(1, 2, 3, 4), ints(5, 6, 7), ints(0, 0, 3)], lambda T, x, s, i: (x.scatter_reduce(0, i, s, "mean"), x.scatter_reduce(0, i, s, "amax"))),
  C("one_hot", [ints(0, 2, 1, 3)], lambda T, i: (i.one_hot(5), i.one_hot()), lambda T, i: (F(T).one_hot(i.long(), 5), F(T).one_hot(i.long()))),
  C("masked_select", [(3, 4), np.array([[True, False, True, True], [False, False, False, True], [True, True, False, False]]), np.array([True, False, False, True])],
    lambda T, x, m, m1: (x.masked_select(m), x.masked_select(m1))),
  C("nonzero", [np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]], np.float32)], lambda T, x: (x.nonzero(), x[0].nonzero(), x[0, 1].nonzero(), x[0, 0].nonzero()), grad=False),
  C("masked_select_size", [(3, 4), np.array([[True, False, True, True], [False, False, False, True], [True, True, False, False]]), np.array([True, False, False, True])],
    lambda T, x, m, m1: (x.masked_select(m, size=3), x.masked_select(m, size=8, fill_value=-1.5), x.masked_select(m1, size=5), x.masked_select(mask=m & False, size=2)),
    lambda T, x, m, m1: (x.masked_select(m)[:3], T.cat([x.masked_select(m), T.full((2,), -1.5)]), x.masked_select(m1)[:5], T.zeros(2))),
  C("nonzero_size", [np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]], np.float32)],
    lambda T, x: (x.nonzero(size=5, fill_value=-1), x.nonzero(size=2), x[0].nonzero(size=3, fill_value=7), x[0, 1].nonzero(size=2)),
    lambda T, x: (T.nonzero_static(x, size=5, fill_value=-1), T.nonzero_static(x, size=2, fill_value=0), T.nonzero_static(x[0], size=3, fill_value=7), T.nonzero_static(x[0, 1], size=2)), grad=False),
  C("sort_forms", [np.array([[3.0, 1.0, 2.0, 1.0], [0.0, -1.0, 5.0, 5.0]], np.float32)],
    lambda T, x: (*x.sort(), *x.sort(0), *x.sort(descending=True), x.argsort(1), x.argsort(0, descending=True)),
    lambda T, x: (*x.sort(stable=True), *x.sort(dim=0, stable=True), *x.sort(descending=True, stable=True), x.argsort(dim=1, stable=True), x.argsort(dim=0, descending=True, stable=True))),
  C("topk", [np.array([[3.0, 1.0, 2.0, 7.0], [0.0, -1.0, 5.0, 4.0]], np.float32)],
    lambda T, x: (*x.topk(2), *x.topk(1, dim=0), *x.topk(3, largest=False), *x.topk(2, -1, True, True), *x.topk(k=2, dim=0, largest=False, sorted_=True)),
    lambda T, x: (*x.topk(2), *x.topk(1, dim=0), *x.topk(3, largest=False), *x.topk(2, -1, True, True), *x.topk(k=2, dim=0, largest=False, sorted=True))),
]

def _setitem(idx, value=None):
  """x[idx] = value (or the second input) on a copy: forward only, setitem is not differentiable in tinygrad."""
  def f(T, x, *v):
    y = x.clone() if T is not Tensor else x.contiguous().realize()
    y[idx] = v[0] if v else value
    return y
  return f

SETITEM = [
  C("setitem_int_scalar", [(3, 4)], _setitem(1, 5.0), grad=False),
  C("setitem_slice_step_tensor", [(4, 6), (2, 3)], _setitem((slice(1, 3), slice(None, None, 2))), grad=False),
  C("setitem_broadcast_row", [(3, 4), (4,)], _setitem(slice(None)), grad=False),
  C("setitem_ellipsis_none", [(2, 3, 4)], _setitem((Ellipsis, 1), -1.0), grad=False),
  C("setitem_negative_index", [(3, 4), (3,)], _setitem((slice(None), -1)), grad=False),
  C("setitem_bool_mask", [(3, 4)], lambda T, x: _setitem(x > 0, 0.0)(T, x), grad=False),
  C("setitem_int_tensor", [(4, 3), ints(0, 3), (2, 3)], lambda T, x, i, v: _setitem(i)(T, x, v), grad=False),
  C("setitem_int_int", [(3, 4)], _setitem(([0, 2], [1, 3]), 9.0), grad=False),
  C("setitem_int_dtype", [(5,)], _setitem(slice(1, 4), 7), dtype=I32, low=0, high=9),
]

def _setitem_grad(idx, scale=3.0):
  """y = x * 2 (not a leaf); y[idx] = v * scale: the gradient reaches x outside the written positions and v inside them."""
  def f(T, x, v):
    y = x * 2
    y[idx] = v * scale
    return y
  return f

SETITEM += [
  C("setitem_grad_int", [(3, 4), (4,)], _setitem_grad(1)),
  C("setitem_grad_slice_step", [(4, 6), (2, 3)], _setitem_grad((slice(1, 3), slice(None, None, 2)))),
  C("setitem_grad_broadcast", [(3, 4), (1,)], _setitem_grad((slice(None), slice(1, 3)))),
  C("setitem_grad_int_tensor", [(4, 3), ints(3, 0), (2, 3)], lambda T, x, i, v: _setitem_grad(i)(T, x, v)),
  C("setitem_grad_int_int", [(3, 4), (2,)], _setitem_grad(([0, 2], [1, 3]))),
  C("setitem_grad_bool_mask", [(3, 4), ()], lambda T, x, v: _setitem_grad(x > 0)(T, x, v)),
  C("setitem_grad_scalar", [(3, 4)], lambda T, x: (lambda y: (y.__setitem__((0, slice(1, None)), -1.0), y)[1])(x * x)),
]

# ***** linear algebra, einsum *****
LINALG = [
  C("matmul_2d", [(3, 4), (4, 5)], lambda T, a, b: (a @ b, a.matmul(b), a.dot(b) if T is Tensor else a.mm(b))),
  C("matmul_1d_operands", [(4,), (4, 3), (4,), (2, 4)], lambda T, v, m, w, n: (v @ m, n @ v, v @ w, v.dot(w) if T is Tensor else T.dot(v, w))),
  C("matmul_batched_broadcast", [(2, 1, 3, 4), (5, 4, 2), (4,)], lambda T, a, b, v: (a @ b, a @ v, v @ b)),
  C("matmul_int", [ints(1, 2, 3, 4, 5, 6).reshape(2, 3), ints(1, 0, -1, 2, 3, 1).reshape(3, 2)], lambda T, a, b: a @ b),
  C("matmul_half", [(4, 8), (8, 3)], lambda T, a, b: a @ b, dtype=np.float16, low=-1, high=1),
  C("dtype_of_the_accumulation", [(3, 4), (4, 2), (1, 2, 4, 4), (3, 2, 2, 2)],
    lambda T, a, b, x, w: (a.matmul(b, dtype=dtypes.float64), a.dot(b, dtype="float64"), a.linear(b, dtype=dtypes.float64), x.conv2d(w, dtype=dtypes.float64), T.einsum("ij,jk->ik", a, b, dtype=dtypes.float64)),
    lambda T, a, b, x, w: (lambda mm, cols: (mm, mm, a.double() @ b.double(), (cols.unsqueeze(1) * w.reshape(3, -1, 1)).double().sum(2).reshape(1, 3, 3, 3), mm))(
      (a.unsqueeze(-1) * b).double().sum(1), F(T).unfold(x, 2)), low=-1, high=1),  # products in the inputs' dtype, the sum in dtype= (tinygrad's rule); linear casts first
  C("linear", [(2, 3), (4, 3), (4,)], lambda T, x, w, b: (x.linear(w.T, b), x.linear(w.T)) if T is Tensor else (F(T).linear(x, w, b), F(T).linear(x, w))),
  C("einsum_forms", [(2, 3), (3, 4), (3, 3), (2, 5, 3), (2, 3, 4)],
    lambda T, a, b, s, c, d: (T.einsum("ij,jk->ik", a, b), T.einsum("ij,jk", a, b), T.einsum("ij->ji", a), T.einsum("ii->i", s), T.einsum("ii", s),
                              T.einsum("i,j->ij", a[0], b[0]), T.einsum("bij,bjk->bik", c, d), T.einsum("...ij,...jk->...ik", c, d),
                              T.einsum("b...,b->...", c, a[:, 0]), T.einsum("ij", a), T.einsum("ij->", a), T.einsum("i j , j k -> i k", a, b),
                              T.einsum("ij,jk->ik", [a, b]))),
  C("einsum_repeated_and_three_operands", [(3, 3, 2), (2, 4), (4,)], lambda T, a, b, c: (T.einsum("iij->j", a), T.einsum("iik,kl,l->i", a, b, c))),
]

# ***** nn ops *****
NN = [
  C("conv2d_forms", [(2, 4, 6, 6), (6, 2, 3, 3), (6,), (3, 4, 2, 3)],
    lambda T, x, w, b, w2: (x.conv2d(w, b, groups=2), x.conv2d(w2, stride=2, padding=1), x.conv2d(w2, padding=(2, 1), dilation=2), x.conv2d(w2, stride=(1, 2), padding=(2, 1, 1, 0))),
    lambda T, x, w, b, w2: (F(T).conv2d(x, w, b, groups=2), F(T).conv2d(x, w2, stride=2, padding=1), F(T).conv2d(x, w2, padding=(2, 1), dilation=2), F(T).conv2d(F(T).pad(x, (2, 1, 1, 0)), w2, stride=(1, 2))), low=-1, high=1),
  C("conv2d_1d_and_3d", [(1, 2, 7), (3, 2, 3), (1, 1, 3, 4, 4), (2, 1, 2, 2, 2)], lambda T, x, w, y, v: (x.conv2d(w, padding=1), y.conv2d(v, stride=2)),
    lambda T, x, w, y, v: (F(T).conv1d(x, w, padding=1), F(T).conv3d(y, v, stride=2)), low=-1, high=1),
  C("image_conv2d_forms", [(2, 4, 6, 6), (6, 2, 3, 3), (6,), (3, 4, 2, 3)],
    lambda T, x, w, b, w2: (x.image_conv2d(w, b, groups=2), x.image_conv2d(w2, stride=2, padding=1), x.image_conv2d(w2, None, 1, 1, 2, (2, 1)),
                           x.image_conv2d(w2, stride=(1, 2), padding=(2, 1, 1, 0)), x.image_conv2d(weight=w, bias=b, groups=2, stride=(2, 1), dilation=(1, 2), padding=2)),
    lambda T, x, w, b, w2: (F(T).conv2d(x, w, b, groups=2), F(T).conv2d(x, w2, stride=2, padding=1), F(T).conv2d(x, w2, padding=(2, 1), dilation=2),
                           F(T).conv2d(F(T).pad(x, (2, 1, 1, 0)), w2, stride=(1, 2)), F(T).conv2d(x, w, b, groups=2, stride=(2, 1), dilation=(1, 2), padding=2)), low=-1, high=1),
  # half inputs holding small integers: every product and sum exact, so the float32 sum shows in the dtype alone
  C("image_conv2d_image_dot_half_sum_in_float32", [np.arange(-16, 16).reshape(1, 2, 4, 4).astype(np.float16) % 7 - 3, np.arange(72).reshape(4, 2, 3, 3).astype(np.float16) % 5 - 2,
                                                  np.arange(12).reshape(3, 4).astype(np.float16) - 6, np.arange(20).reshape(4, 5).astype(np.float16) % 3],
    lambda T, x, w, a, b: (x.image_conv2d(w), x.image_conv2d(w, dtype=dtypes.float16), a.image_dot(b), a.image_dot(b, dtype="float16")),
    lambda T, x, w, a, b: (F(T).conv2d(x.float(), w.float()), F(T).conv2d(x.float(), w.float()).half(), a.float() @ b.float(), (a.float() @ b.float()).half())),
  C("image_dot_forms", [(3, 4), (4, 5), (2, 3, 4), (2, 4, 5), (4,)],
    lambda T, a, b, c, d, v: (a.image_dot(b), c.image_dot(d), c.image_dot(b), v.image_dot(b), a.image_dot(w=b, dtype=dtypes.float64)),
    lambda T, a, b, c, d, v: (a @ b, c @ d, c @ b, v @ b, (a.unsqueeze(-1) * b).double().sum(1)), low=-1, high=1),
  C("conv_transpose2d", [(1, 2, 3, 3), (2, 3, 3, 3), (3,), (2, 2, 2, 2)],
    lambda T, x, w, b, w2: (x.conv_transpose2d(w, b, stride=2, padding=1, output_padding=1), x.conv_transpose2d(w2, groups=2, dilation=2)),
    lambda T, x, w, b, w2: (F(T).conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1), F(T).conv_transpose2d(x, w2, groups=2, dilation=2)), low=-1, high=1),
  C("max_pool2d", [(1, 2, 5, 6)], lambda T, x: (x.max_pool2d(), x.max_pool2d(3, stride=2, padding=1), x.max_pool2d((2, 3), stride=1, dilation=(2, 1)), x.max_pool2d(2, ceil_mode=True)),
    lambda T, x: (F(T).max_pool2d(x, 2), F(T).max_pool2d(x, 3, stride=2, padding=1), F(T).max_pool2d(x, (2, 3), stride=1, dilation=(2, 1)), F(T).max_pool2d(x, 2, ceil_mode=True))),
  C("conv2d_padding_same_valid", [(2, 4, 6, 7), (3, 4, 3, 2), (1, 2, 8), (2, 2, 4)],
    lambda T, x, w, y, v: (x.conv2d(w, padding="same"), x.conv2d(w, padding="valid"), x.conv2d(w, padding="same", dilation=(2, 3)),
                           x.conv2d(w, padding=(2, 1)), y.conv2d(v, padding="same"), y.conv2d(v, padding="same", dilation=2)),
    lambda T, x, w, y, v: (F(T).conv2d(x, w, padding="same"), F(T).conv2d(x, w, padding="valid"), F(T).conv2d(x, w, padding="same", dilation=(2, 3)),
                           F(T).conv2d(x, w, padding=(2, 1)), F(T).conv1d(y, v, padding="same"), F(T).conv1d(y, v, padding="same", dilation=2)), low=-1, high=1),
  C("max_unpool2d_output_size", [(2, 3, 5, 5)], lambda T, x: (lambda v, i: (v.max_unpool2d(i, 2, output_size=(5, 5)), v.max_unpool2d(i, 2, output_size=(2, 3, 5, 5))))(*x.max_pool2d(2, return_indices=True)),
    lambda T, x: (lambda v, i: (F(T).max_unpool2d(v, i, 2, output_size=(5, 5)), F(T).max_unpool2d(v, i, 2, output_size=(2, 3, 5, 5))))(*F(T).max_pool2d(x, 2, return_indices=True))),
  C("max_unpool2d_infinities", [np.array([[[[np.inf, -np.inf, np.nan], [1.0, 2.0, 3.0]]]], np.float32)],
    lambda T, x: (lambda v, i: v.max_unpool2d(i, 2))(*x.max_pool2d(2, return_indices=True)),
    lambda T, x: (lambda v, i: F(T).max_unpool2d(v, i, 2))(*F(T).max_pool2d(x, 2, return_indices=True)), grad=False),
  C("max_pool2d_indices_unpool", [(1, 1, 4, 4)], lambda T, x: (lambda v, i: (v, i, v.max_unpool2d(i, 2)))(*x.max_pool2d(2, return_indices=True)),
    lambda T, x: (lambda v, i: (v, i, F(T).max_unpool2d(v, i, 2)))(*F(T).max_pool2d(x, 2, return_indices=True))),
  C("avg_pool2d", [(1, 2, 5, 6)], lambda T, x: (x.avg_pool2d(), x.avg_pool2d(3, stride=2, padding=1), x.avg_pool2d(3, stride=2, padding=1, count_include_pad=False), x.avg_pool2d(2, ceil_mode=True)),
    lambda T, x: (F(T).avg_pool2d(x, 2), F(T).avg_pool2d(x, 3, stride=2, padding=1), F(T).avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), F(T).avg_pool2d(x, 2, ceil_mode=True))),
  C("interpolate_modes", [(1, 2, 3, 4)], lambda T, x: (x.interpolate((5, 6)), x.interpolate((6, 8), mode="nearest"), x.interpolate((5, 7), align_corners=True), x.interpolate((2, 3))),
    lambda T, x: (F(T).interpolate(x, (5, 6), mode="bilinear"), F(T).interpolate(x, (6, 8), mode="nearest"), F(T).interpolate(x, (5, 7), mode="bilinear", align_corners=True),
                  F(T).interpolate(x, (2, 3), mode="bilinear"))),
  C("interpolate_1d_nearest_exact", [(1, 2, 5)], lambda T, x: (x.interpolate((8,)), x.interpolate((3,), mode="nearest-exact")),
    lambda T, x: (F(T).interpolate(x, 8, mode="linear"), F(T).interpolate(x, 3, mode="nearest-exact"))),
  # uint8 bilinear in PyTorch's separable integer passes, each rounding to uint8
  C("interpolate_uint8_bilinear", [(2, 3, 16, 16)], lambda T, x: (x.interpolate((5, 7)), x.interpolate((23, 9)), x.interpolate((6, 6), align_corners=True)),
    lambda T, x: (F(T).interpolate(x, (5, 7), mode="bilinear"), F(T).interpolate(x, (23, 9), mode="bilinear"), F(T).interpolate(x, (6, 6), mode="bilinear", align_corners=True)),
    dtype=np.uint8, low=0, high=255),
  C("interpolate_int_image", [(1, 1, 3, 3)], lambda T, x: x.interpolate((6, 6), mode="nearest"), lambda T, x: F(T).interpolate(x, (6, 6), mode="nearest"), dtype=np.uint8, low=0, high=255),
  C("normalize", [(3, 4), np.zeros((2, 4), np.float32)], lambda T, x, z: (x.normalize(), x.normalize(dim=0), x.normalize(p=1.0, dim=-1), z.normalize()),
    lambda T, x, z: (F(T).normalize(x), F(T).normalize(x, dim=0), F(T).normalize(x, p=1.0, dim=-1), F(T).normalize(z))),
  C("normalize_p0_and_negative", [(3, 4)], lambda T, x: (x.normalize(p=0), x.normalize(p=-1, dim=0)),
    lambda T, x: (F(T).normalize(x, p=0), F(T).normalize(x, p=-1, dim=0))),
  C("layernorm", [(2, 3, 4)], lambda T, x: (x.layernorm(), x.layernorm((1, 2)), x.layernorm(eps=1e-3)),
    lambda T, x: (F(T).layer_norm(x, (4,)), F(T).layer_norm(x, (3, 4)), F(T).layer_norm(x, (4,), eps=1e-3))),
  C("batchnorm", [(2, 3, 4), (3,), (3,), (3,), (3,)], lambda T, x, w, b, m, v: (x.batchnorm(w, b, m, (v.abs() + 0.5).rsqrt()), x.batchnorm(None, None, m, (v.abs() + 0.5).rsqrt())),
    lambda T, x, w, b, m, v: (F(T).batch_norm(x, m, v.abs() + 0.5, w, b, eps=0.0), F(T).batch_norm(x, m, v.abs() + 0.5, eps=0.0)), const=(3, 4)),
  C("dropout_eval_and_zero", [(3, 4)], lambda T, x: (x.dropout(0.5), x.dropout(0.0)) if T is Tensor else (x * 1, x * 1)),
  C("sdpa_forms", [(1, 2, 4, 3), (1, 2, 5, 3), (1, 2, 5, 3), np.tril(np.ones((4, 5), bool)), (4, 5)],
    lambda T, q, k, v, m, f: (q.scaled_dot_product_attention(k, v), q.scaled_dot_product_attention(k, v, attn_mask=m), q.scaled_dot_product_attention(k, v, attn_mask=f),
                              q.scaled_dot_product_attention(k[:, :, :4], v[:, :, :4], is_causal=True), q.scaled_dot_product_attention(k[:, :1], v[:, :1], enable_gqa=True)),
    lambda T, q, k, v, m, f: (F(T).scaled_dot_product_attention(q, k, v), F(T).scaled_dot_product_attention(q, k, v, attn_mask=m), F(T).scaled_dot_product_attention(q, k, v, attn_mask=f),
                              F(T).scaled_dot_product_attention(q, k[:, :, :4], v[:, :, :4], is_causal=True), F(T).scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True)), low=-1, high=1),
  C("cross_entropy_indices", [(4, 3), ints(0, 2, 1, 2)], lambda T, x, y: (x.cross_entropy(y), x.cross_entropy(y, reduction="sum"), x.cross_entropy(y, reduction="none"), x.cross_entropy(y, label_smoothing=0.1)),
    lambda T, x, y: (F(T).cross_entropy(x, y.long()), F(T).cross_entropy(x, y.long(), reduction="sum"), F(T).cross_entropy(x, y.long(), reduction="none"), F(T).cross_entropy(x, y.long(), label_smoothing=0.1))),
  C("cross_entropy_probabilities", [(4, 3), (4, 3)], lambda T, x, p: x.cross_entropy(p.softmax(1)) + x.cross_entropy(p.softmax(1), label_smoothing=0.2),
    lambda T, x, p: F(T).cross_entropy(x, p.softmax(1)) + F(T).cross_entropy(x, p.softmax(1), label_smoothing=0.2)),
  C("cross_entropy_spatial", [(2, 3, 2, 2), ints(0, 1, 2, 2, 1, 0, 0, 2).reshape(2, 2, 2)], lambda T, x, y: x.cross_entropy(y), lambda T, x, y: F(T).cross_entropy(x, y.long())),
  C("nll_loss_forms", [(4, 3), ints(0, 2, 1, 2), (3,)], lambda T, x, y, w: (x.log_softmax(1).nll_loss(y), x.nll_loss(y, reduction="sum"), x.nll_loss(y, weight=w.abs()), x.nll_loss(y, ignore_index=2), x.nll_loss(y, reduction="none")),
    lambda T, x, y, w: (F(T).nll_loss(x.log_softmax(1), y.long()), F(T).nll_loss(x, y.long(), reduction="sum"), F(T).nll_loss(x, y.long(), weight=w.abs()), F(T).nll_loss(x, y.long(), ignore_index=2), F(T).nll_loss(x, y.long(), reduction="none")), const=(2,)),
  C("binary_crossentropy", [(5,), (5,), (5,)], lambda T, x, y, pw: (x.sigmoid().binary_crossentropy(y.sigmoid()), x.binary_crossentropy_logits(y.sigmoid()), x.binary_crossentropy_logits(y.sigmoid(), reduction="none", pos_weight=pw.abs()), x.sigmoid().binary_crossentropy(y.sigmoid(), reduction="sum")),
    lambda T, x, y, pw: (F(T).binary_cross_entropy(x.sigmoid(), y.sigmoid()), F(T).binary_cross_entropy_with_logits(x, y.sigmoid()), F(T).binary_cross_entropy_with_logits(x, y.sigmoid(), reduction="none", pos_weight=pw.abs()), F(T).binary_cross_entropy(x.sigmoid(), y.sigmoid(), reduction="sum")), const=(2,)),
  C("sparse_categorical_crossentropy", [(4, 3), ints(0, 2, 1, 1)], lambda T, x, y: (x.sparse_categorical_crossentropy(y), x.sparse_categorical_crossentropy(y, ignore_index=2),
    x.sparse_categorical_crossentropy(y, label_smoothing=0.1), x.sparse_categorical_crossentropy(y, ignore_index=1, label_smoothing=0.2), x.sparse_categorical_crossentropy(y, reduction="sum")),
    lambda T, x, y: (F(T).cross_entropy(x, y.long()), F(T).cross_entropy(x, y.long(), ignore_index=2), F(T).cross_entropy(x, y.long(), label_smoothing=0.1),
                     F(T).cross_entropy(x, y.long(), ignore_index=1, label_smoothing=0.2), F(T).cross_entropy(x, y.long(), reduction="sum"))),
]

CREATE = [
  C("arange_forms", [], lambda T: (T.arange(5), T.arange(2, 7), T.arange(1, 10, 3), T.arange(5, 0, -2), T.arange(0, 1, 0.25), T.arange(0.5, 3), T.arange(3, dtype=T.float32 if T is not Tensor else dtypes.float32), T.arange(0))),
  C("arange_past_the_default_int", [], lambda T: (T.arange(2**31, 2**31 + 3), T.arange(-2**31 - 2, -2**31 + 1))),
  C("linspace_eye", [], lambda T: (T.linspace(0, 1, 5), T.linspace(-2, 3, 4), T.linspace(2, 2, 1), T.eye(3), T.eye(2, 4))),
  C("full_zeros_ones", [], lambda T: (T.full((2, 3), 1.5), T.full((2,), 3), T.full((2,), True), T.zeros(2, 3), T.zeros((3,)), T.ones(2, 1), T.ones((1, 2), dtype=T.int32 if T is not Tensor else dtypes.int32))),
  C("likes", [(2, 3), ints(1, 2, 3)], lambda T, x, i: (x.zeros_like() if T is Tensor else T.zeros_like(x), i.ones_like() if T is Tensor else T.ones_like(i), x.full_like(2.5) if T is Tensor else T.full_like(x, 2.5),
                                                      i.full_like(7) if T is Tensor else T.full_like(i, 7), x.ones_like(dtype=dtypes.int32) if T is Tensor else T.ones_like(x, dtype=T.int32)), grad=False),
  C("full_buffer_false", [], lambda T: (T.full((2, 3), 1.5, buffer=False), T.zeros(2, buffer=False), T.ones((2,), dtype=dtypes.int32, buffer=False)),
    lambda T: (T.full((2, 3), 1.5), T.zeros(2), T.ones((2,), dtype=T.int32))),
  C("full_like_positional", [(2, 3)], lambda T, x: (x.full_like(2, dtypes.int32, None), x.full_like(1.5, "float16"), x.full_like(fill_value=3, dtype=dtypes.int8)),
    lambda T, x: (T.full_like(x, 2, dtype=T.int32), T.full_like(x, 1.5, dtype=T.float16), T.full_like(x, 3, dtype=T.int8)), grad=False),
  C("const_like", [(2, 3), ints(1, 2, 3)], lambda T, x, i: (x.const_like(2.5), x.const_like(3), i.const_like(7), i.const_like(True), x.const_like(1, dtype=dtypes.int8)),
    lambda T, x, i: (T.full_like(x, 2.5), T.full_like(x, 3), T.full_like(i, 7), T.full_like(i, 1), T.full_like(x, 1, dtype=T.int8)), grad=False),
  C("tensor_from_python", [], lambda T: (Tensor([1, 2]), Tensor([1.5, 2]), Tensor([True, False]), Tensor([[1, 2], [3, 4]]), Tensor(3.5), Tensor(7)) if T is Tensor else
    (T.tensor([1, 2]), T.tensor([1.5, 2]), T.tensor([True, False]), T.tensor([[1, 2], [3, 4]]), T.tensor(3.5), T.tensor(7))),
]

# ***** the argument forms test_every_parameter_is_passed_in_each_form asks for that the cases above do not pass *****
def DT(T, name: str): return name if T is Tensor else getattr(T, name)  # a dtype by name for tinycore, torch's for the reference
PERM = ints(3, 0, 1, 2, 1, 0).reshape(2, 3)  # each row a permutation: no index written twice
FORMS = [
  C("negative_and_tuple_dims", [(2, 3, 4)], lambda T, x: (x.max(-1), x.min((0, -1)), x.prod((0, 2)), x.prod(1, dtype=DT(T, "float64")), x.std(-1), x.var((0, -1)),
    x.std((0, 1), keepdim=True), x.var(-2, True), x.argmax(-2), x.softmax(-2), x.logcumsumexp(-1), x.cumprod(-1), x.layernorm((-2, -1)), x.log_softmax(-2),
    x.diagonal(0, 0, -1), x.flip(0, 2), x.view((4, 6)), *x.var_mean((0, -1), keepdim=True, correction=0), *x.std_mean(-1, True), *x.std_mean((0, 1))),
    lambda T, x: (x.amax(-1), x.amin((0, -1)), x.prod(2).prod(0), x.prod(1, dtype=T.float64), x.std(-1), x.var((0, -1)),
    x.std((0, 1), keepdim=True), x.var(-2, keepdim=True), x.argmax(-2), x.softmax(-2), x.logcumsumexp(-1), x.cumprod(-1), F(T).layer_norm(x, (3, 4)), x.log_softmax(-2),
    x.diagonal(0, 0, -1), x.flip((0, 2)), x.view((4, 6)), *T.var_mean(x, (0, -1), keepdim=True, correction=0), *T.std_mean(x, -1, keepdim=True), *T.std_mean(x, (0, 1))), low=0.5, high=1.5),
  C("any_all_dims", [(2, 3, 4)], lambda T, x: (x.all((0, -1)), x.any(-1, keepdim=True), x.all(-2)), dtype=B),
  C("sort_cummax_split_negative_dims", [(3, 4)], lambda T, x: (*x.sort(-2), x.argsort(-1, True), x.cummax(-1)[0], x.cummin(-2)[1], *x.split(3, -1)),
    lambda T, x: (*x.sort(dim=-2, stable=True), x.argsort(dim=-1, descending=True, stable=True), x.cummax(-1)[0], x.cummin(-2)[1], *x.split(3, -1))),
  C("scatter_negative_dims", [(3, 4), (2, 4), PERM], lambda T, x, s, j: (x.scatter(-1, j, s), x.scatter_reduce(-2, j % 3, s, "sum", include_self=False)), grad=False),
  C("loss_reductions", [(4, 3), ints(0, 2, 1, 1), (5,), (5,)],
    lambda T, x, y, a, b: (x.sparse_categorical_crossentropy(y, reduction="none"), a.sigmoid().binary_crossentropy(b.sigmoid(), reduction="none"), a.binary_crossentropy_logits(b.sigmoid(), "sum")),
    lambda T, x, y, a, b: (F(T).cross_entropy(x, y.long(), reduction="none"), F(T).binary_cross_entropy(a.sigmoid(), b.sigmoid(), reduction="none"),
                           F(T).binary_cross_entropy_with_logits(a, b.sigmoid(), reduction="sum"))),
  C("selu_normalize_parameters", [(3, 4)], lambda T, x: (x.selu(1.5, 1.2), x.normalize(dim=-1, eps=0.5), x.clone(x.device)),
    lambda T, x: (F(T).elu(x, 1.5) * 1.2, F(T).normalize(x, dim=-1, eps=0.5), x.clone())),
  C("isclose_allclose_atol", [np.array([1.0, 1.1, np.nan], np.float32), np.array([1.15, 1.0, np.nan], np.float32)],
    lambda T, a, b: (a.isclose(b, atol=0.2), a.isclose(b, 0.0, 0.12), a.allclose(b, atol=0.2, equal_nan=True), a.allclose(b, atol=0.2)),
    lambda T, a, b: (a.isclose(b, atol=0.2), a.isclose(b, 0.0, 0.12), T.tensor(a.allclose(b, atol=0.2, equal_nan=True)), T.tensor(a.allclose(b, atol=0.2))), grad=False),
  C("avg_pool2d_dilation", [(1, 2, 5, 6)], lambda T, x: x.avg_pool2d(2, stride=1, dilation=2),
    lambda T, x: (x[..., :-2, :-2] + x[..., 2:, :-2] + x[..., :-2, 2:] + x[..., 2:, 2:]) / 4),
  C("max_unpool2d_stride_padding_dilation", [(1, 2, 5, 5)],
    lambda T, x: ((lambda v, i: v.max_unpool2d(i, 3, stride=2, padding=1))(*x.max_pool2d(3, stride=2, padding=1, return_indices=True)),
                  (lambda v, i: v.max_unpool2d(i, 2, 1, 2))(*x.max_pool2d(2, 1, 2, return_indices=True))),
    lambda T, x: ((lambda v, i: F(T).max_unpool2d(v, i, 3, stride=2, padding=1))(*F(T).max_pool2d(x, 3, stride=2, padding=1, return_indices=True)),
                  # PyTorch's unpool has no dilation (and refuses this output size): the values written at their indices instead
                  (lambda v, i: T.zeros(1, 2, 25).scatter(2, i.flatten(2), v.flatten(2)).reshape(1, 2, 5, 5))(*F(T).max_pool2d(x, 2, stride=1, dilation=2, return_indices=True)))),
  # tinygrad drops attention weights only while Tensor.training, as dropout does: outside it dropout_p changes nothing
  C("sdpa_dropout_outside_training", [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3)], lambda T, q, k, v: q.scaled_dot_product_attention(k, v, dropout_p=0.5),
    lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v)),
  C("shift_reverse", [(5,)], lambda T, i: (i.lshift(2, reverse=True), i.rshift(300, reverse=True)), lambda T, i: (2 << i, 300 >> i), dtype=I32, low=1, high=9),
  C("softmax_family_dtype", [(3, 4)], lambda T, x: (x.half().log_softmax(-1, dtype=DT(T, "float32")), x.half().softmin(0, DT(T, "float32"))),
    lambda T, x: (x.half().log_softmax(-1, dtype=T.float32), F(T).softmin(x.half(), 0, dtype=T.float32)), low=-3, high=3),
  C("gradient_seed", [(3,)], lambda T, x: x.square().gradient(x, gradient=Tensor([1.0, 2.0, -3.0]))[0],
    lambda T, x: (lambda y: T.autograd.grad(y * y, y, grad_outputs=T.tensor([1.0, 2.0, -3.0]))[0])(x.requires_grad_()), grad=False),
  C("creation_dtype_device_buffer", [(2, 3)], lambda T, x: (T.eye(2, 3, "int32"), T.linspace(0, 4, 5, "int32"), T.full((2,), 3, "int8", Device.DEFAULT),
                                                          x.full_like(2, dtypes.int32, None, False), x.zeros_like(dtype=dtypes.int8)),
    lambda T, x: (T.eye(2, 3, dtype=T.int32), T.linspace(0, 4, 5, dtype=T.int32), T.full((2,), 3, dtype=T.int8), T.full_like(x, 2, dtype=T.int32), T.zeros_like(x, dtype=T.int8)), grad=False),
  C("batchnorm_negative_axis", [(2, 3, 4), (3,), (3,), (3,), (3,)], lambda T, x, w, b, m, v: x.batchnorm(w, b, m, (v.abs() + 0.5).rsqrt(), axis=-2),
    lambda T, x, w, b, m, v: F(T).batch_norm(x, m, v.abs() + 0.5, w, b, eps=0.0), const=(3, 4)),
]

ALL = UNARY + BINARY + REDUCE + MOVE + INDEX + SETITEM + LINALG + NN + CREATE + FORMS

@pytest.mark.parametrize("case", ALL)
def test_matches_torch(case, device, torch):
  run_case(case, torch, device)

# ***** methods without a PyTorch counterpart: numpy *****
NUMPY_CASES = [
  ("shrink", lambda x: (x.shrink(((1, 3), None)), x.shrink((None, (0, 2))), x.shrink(((0, 0), (1, 4)))), lambda x: (x[1:3], x[:, :2], x[:0, 1:4])),
  ("pad_to_shrink_to", lambda x: (x.pad_to(4, 6), x.pad_to((None, 5), value=1.5), x.shrink_to(2, None), x.shrink_to((1, 3))),
   lambda x: (np.pad(x, ((0, 0), (0, 2))), np.pad(x, ((0, 0), (0, 1)), constant_values=1.5), x[:2], x[:1, :3])),
  ("negative_step_slices", lambda x: (x[::-1], x[:, ::-2], x[2:0:-1, 3::-3]), lambda x: (x[::-1], x[:, ::-2], x[2:0:-1, 3::-3])),
  ("rearrange", lambda x: (x.rearrange("a b -> b a"), x.rearrange("a (b c) -> a b c", c=2), x.rearrange("a b -> (a b)"), x.rearrange("... b -> b ...")),
   lambda x: (x.T, x.reshape(4, 2, 2), x.reshape(-1), x.T)),
  ("quick_gelu", lambda x: x.quick_gelu(), lambda x: x / (1 + np.exp(-1.702 * x))),
  ("sequential", lambda x: x.sequential([lambda t: t * 2, lambda t: t + 1]), lambda x: x * 2 + 1),
  ("qr", lambda x: (lambda q, r: (q @ r, q.T @ q, r.tril(-1)))(*x.qr()), lambda x: (x, np.eye(4), np.zeros((4, 4)))),
  ("sizes", lambda x: (Tensor(x.numel()), Tensor(x.size(1)), Tensor(list(x.size())), Tensor(x.element_size()), Tensor(x.nbytes()), Tensor(x.ndim), Tensor(len(x))),
   lambda x: (x.size, x.shape[1], list(x.shape), 4, x.nbytes, 2, len(x))),
  ("item_tolist", lambda x: (Tensor(x[1, 2].item()), Tensor(x.tolist())), lambda x: (x[1, 2], x)),
]

@pytest.mark.parametrize("name,fn,ref", NUMPY_CASES, ids=[c[0] for c in NUMPY_CASES])
def test_matches_numpy(name, fn, ref, device):
  x = np.random.default_rng(0).uniform(-2, 2, (4, 4)).astype(np.float32)
  for i, (got, want) in enumerate(zip(_outs(fn(Tensor(x))), _outs(ref(x)))):
    np.testing.assert_allclose(got.numpy(), np.asarray(want, np.float32), rtol=1e-4, atol=1e-5, err_msg=f"{name} output {i}")

def test_random_creation_shapes_dtypes_ranges(device):
  Tensor.manual_seed(3)
  for t, dt, lo, hi in [(Tensor.rand(2, 3), dtypes.float32, 0, 1), (Tensor.rand((4,), dtype=dtypes.float16), dtypes.float16, 0, 1),
                        (Tensor.uniform(50, low=-3, high=-1), dtypes.float32, -3, -1), (Tensor.randint(2, 50, low=5, high=9), dtypes.int32, 5, 8),
                        (Tensor.randperm(6), dtypes.int32, 0, 5), (Tensor.scaled_uniform(3, 4), dtypes.float32, -0.5, 0.5),
                        (Tensor.ones(3, 5).multinomial(4, replacement=True), dtypes.int32, 0, 4)]:
    v = t.numpy()
    assert t.dtype == dt and t.device == device and v.min() >= lo and v.max() <= hi, (t, v)
  assert sorted(Tensor.randperm(6).tolist()) == list(range(6))
  n = Tensor.normal(4000, mean=2.0, std=0.5).numpy()
  assert abs(n.mean() - 2.0) < 0.05 and abs(n.std() - 0.5) < 0.05
  assert Tensor.randn(2, 3).shape == (2, 3) and Tensor.rand_like(Tensor.ones(2, dtype=dtypes.float16)).dtype == dtypes.float16
  like = Tensor.ones(2, 3, dtype=dtypes.float16)
  for t, shape, dt in [(like.randn_like(), (2, 3), dtypes.float16), (like.randn_like(dtype=dtypes.float32), (2, 3), dtypes.float32),
                       (Tensor.ones(4, dtype=dtypes.int32).randn_like(), (4,), dtypes.float32), (Tensor.empty(2, 3), (2, 3), dtypes.float32),
                       (Tensor.empty((4,), dtype="int8"), (4,), dtypes.int8), (like.empty_like(), (2, 3), dtypes.float16),
                       (like.empty_like(dtype=dtypes.int32), (2, 3), dtypes.int32), (like.empty_like(dtypes.int8, device), (2, 3), dtypes.int8),
                       (like.randn_like(dtypes.float32), (2, 3), dtypes.float32), (like.randn_like(device=device, contiguous=False), (2, 3), dtypes.float16),
                       (Tensor.rand(2, device=device, contiguous=False), (2,), dtypes.float32), (Tensor.empty(2, 3, device=device), (2, 3), dtypes.float32),
                       (like.rand_like(dtype=dtypes.float32, device=device), (2, 3), dtypes.float32), (Tensor.randn((2, 3), dtype="float16", device=device, contiguous=False), (2, 3), dtypes.float16),
                       (Tensor.randint((2, 3), dtype=dtypes.int8, device=device, contiguous=False), (2, 3), dtypes.int8), (Tensor.uniform((3,), dtype="float16", device=device), (3,), dtypes.float16),
                       (Tensor.normal((2, 3), dtype=dtypes.float16), (2, 3), dtypes.float16), (Tensor.normal(2, 3, device=device), (2, 3), dtypes.float32),
                       (Tensor.scaled_uniform((3, 4), dtype="float16"), (3, 4), dtypes.float16), (Tensor.randperm(5, device, dtypes.int8, contiguous=True), (5,), dtypes.int8),
                       (Tensor.glorot_uniform(8, 4), (8, 4), dtypes.float32), (Tensor.glorot_uniform((8, 4), dtype=dtypes.float16), (8, 4), dtypes.float16),
                       (Tensor.kaiming_uniform(8, 4), (8, 4), dtypes.float32), (Tensor.kaiming_uniform((8, 4), a=0.1, device=device), (8, 4), dtypes.float32),
                       (Tensor.kaiming_normal((8, 4)), (8, 4), dtypes.float32), (Tensor.kaiming_normal(8, 4, a=0.2, dtype="float16"), (8, 4), dtypes.float16)]:
    assert t.shape == shape and t.dtype == dt and t.device == device and t.numpy().shape == shape, (t, shape, dt)
  r = Tensor.randn(4000).numpy()
  assert abs(r.mean()) < 0.05 and abs(r.std() - 1) < 0.05 and abs(Tensor.ones(4000).randn_like().numpy().std() - 1) < 0.05
  with Tensor.train():
    d = Tensor.ones(2000).dropout(0.25).numpy()
  assert np.all(np.isclose(d, 0) | np.isclose(d, 1 / 0.75)) and abs((d == 0).mean() - 0.25) < 0.05

# ***** sizes, dtypes and Python values: the same as PyTorch's for every dtype *****
def _memoryview_has(fmt: str) -> bool:
  try: return memoryview(b"").cast(fmt) is not None
  except ValueError: return False

def test_metadata_and_python_values_match_torch(device, torch):
  rng = np.random.default_rng(5)
  for name in ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]:
    for shape in [(), (3,), (2, 0, 3), (2, 3, 4)]:
      x = (rng.uniform(-50, 50, shape) > 0) if name == "bool" else rng.uniform(0 if name == "uint8" else -50, 50, shape).astype(np.float32)
      want = torch.tensor(x).to(getattr(torch, name))
      got = Tensor(want.float().numpy() if name == "bfloat16" else want.numpy()).cast(name)
      assert (got.numel(), got.size(), got.ndim, got.element_size(), got.nbytes(), got.is_floating_point(), got.shape) == \
        (want.numel(), tuple(want.size()), want.ndim, want.element_size(), want.nbytes, want.is_floating_point(), tuple(want.shape)), (name, shape)
      assert all(got.size(d) == want.size(d) for d in range(-got.ndim, got.ndim)), (name, shape)
      assert got.tolist() == want.tolist(), (name, shape)
      if got.numel() == 1: assert type(got.item()) is type(want.item()) and got.item() == want.item(), (name, shape)
      if name == "float16" and not _memoryview_has("e"):
        with pytest.raises(TypeError, match="numpy"): got.data()
      elif name != "bfloat16":  # numpy has no bfloat16 to read a memoryview of it with
        assert np.array_equal(np.asarray(got.data()).reshape(shape), want.numpy()) and got.data().format == np.dtype(name).char, (name, shape)
        assert got.data().shape == (tuple(want.shape) if got.numel() else (0,)), (name, shape)  # an empty one is flat: memoryview refuses a 0 in a shape
  with pytest.raises(ValueError, match="one element"): Tensor([1, 2]).item()

# ***** pow at special values: every (base, exponent) cell, value and both slopes, as PyTorch *****
POW_BASES = [-np.inf, -2.5, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 2.5, np.inf, np.nan]
POW_EXPONENTS = [0.0, 0.3, 0.5, -0.5, 1.0, 1.5, 2.0, 3.0, 3.3, -1.0, -2.0, -2.5, np.inf, -np.inf, np.nan]

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_special_values_match_torch(dtype, device, torch):
  # a Python exponent (float, and int where integral: other code paths, PyTorch's too) and a tensor exponent; infinities
  # and NaN must sit in the same cells (tinygrad's test_pow_neg_inf_frac_exponent and test_pow_zero_exponent are cells here)
  def check(what, got, want, cells):
    got, want = got.numpy(), want.detach().numpy()
    bad = ~(np.isclose(got, want, *GRAD_TOL[getattr(dtypes, dtype)], equal_nan=True) & (np.isnan(got) == np.isnan(want)))
    assert not bad.any(), f"{what} {dtype}: " + ", ".join(f"{cells[i]} -> {got[i]}, PyTorch {want[i]}" for i in np.flatnonzero(bad))
  exps = POW_EXPONENTS + [int(e) for e in POW_EXPONENTS if np.isfinite(e) and e == int(e)]
  b = Tensor(POW_BASES, dtype=dtype, requires_grad=True)
  tb = torch.tensor(POW_BASES, dtype=getattr(torch, dtype), requires_grad=True)
  outs = [b ** e for e in exps]
  grads = [o.sum().gradient(b)[0] for o in outs]
  Tensor.realize(*outs, *grads)
  for e, o, g in zip(exps, outs, grads):
    want = tb ** e
    cells = [f"{x!r} ** {e!r}" for x in POW_BASES]
    check("value", o, want, cells)
    check("d/dbase", g, torch.autograd.grad(want.sum(), tb)[0], cells)
  bs, es = [x for x in POW_BASES for _ in POW_EXPONENTS], POW_EXPONENTS * len(POW_BASES)
  b, e = Tensor(bs, dtype=dtype, requires_grad=True), Tensor(es, dtype=dtype, requires_grad=True)
  tb, te = (torch.tensor(v, dtype=getattr(torch, dtype), requires_grad=True) for v in (bs, es))
  out, want = b ** e, tb ** te
  (gb, ge), (wb, we) = out.sum().gradient(b, e), torch.autograd.grad(want.sum(), (tb, te))
  cells = [f"{x!r} ** tensor({y!r})" for x, y in zip(bs, es)]
  for what, got, ref in (("value", out, want), ("d/dbase", gb, wb), ("d/dexp", ge, we)): check(what, got, ref, cells)

def test_pow_returns_a_new_tensor(device):
  for e in (1, 1.0, 2, 0):  # x ** 1 was x itself: y += 1 changed x (PyTorch's pow always returns a new tensor)
    x = Tensor([1.0, 2.0]); y = x ** e
    y += 1
    np.testing.assert_equal(x.numpy(), [1.0, 2.0])

# ***** bitcast: every pair of dtypes, same size and size-changing along the last dim, bit for bit as torch's view(dtype) *****
BITCAST_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"]

@pytest.mark.parametrize("src", BITCAST_DTYPES)
def test_bitcast_every_pair(src, device, torch):
  # 2 rows of 16 bytes: every element size divides a row. A bool holds 0 or 1, so bytes that become or come from bools are 0/1.
  raw = np.random.default_rng(BITCAST_DTYPES.index(src)).integers(0, 256, (2, 16), dtype=np.uint8)
  gots, wants = [], []
  for dst in BITCAST_DTYPES:
    bits = raw & 1 if "bool" in (src, dst) else raw
    got, want = Tensor(bits).bitcast(src).bitcast(dst), torch.tensor(bits).view(getattr(torch, src)).view(getattr(torch, dst))
    assert got.dtype == getattr(dtypes, dst) and got.shape == tuple(want.shape), (src, dst, got.shape, tuple(want.shape))
    gots.append(got.bitcast("uint8"))
    wants.append(want.view(torch.uint8).numpy())
  got_bytes = Tensor.cat(*gots, dim=1).numpy()  # one kernel for all 13 targets
  for i, dst in enumerate(BITCAST_DTYPES): np.testing.assert_array_equal(got_bytes[:, 16 * i:16 * (i + 1)], wants[i], err_msg=f"{src} -> {dst}")

# ***** multinomial: the distribution of the draws, with a fixed seed and a tolerance a wrong sampler fails *****
def test_multinomial_statistics(device):
  Tensor.manual_seed(7)
  p, n = np.array([0.1, 0.2, 0.3, 0.4]), 3000
  w = Tensor(p * 5).reshape(1, 4).expand(n, 4)  # unnormalized weights, one row per trial
  first_two = w.multinomial(2).numpy()
  assert first_two.shape == (n, 2) and (first_two[:, 0] != first_two[:, 1]).all(), "without replacement a class is drawn once per row"
  # draw 1 follows p; draw 2 follows p with draw 1's class removed: P(j) = sum_i p_i p_j / (1 - p_i)
  second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(4) if i != j) for j in range(4)])
  np.testing.assert_allclose(np.bincount(first_two[:, 0], minlength=4) / n, p, atol=0.03)
  np.testing.assert_allclose(np.bincount(first_two[:, 1], minlength=4) / n, second, atol=0.03)
  perm = Tensor([1.0, 1e-6, 3.0, 2.0]).multinomial(4).numpy()  # every class once, the all but zero weight last
  assert sorted(perm.tolist()) == [0, 1, 2, 3] and perm[-1] == 1
  with_repl = Tensor(p).multinomial(n, replacement=True).numpy()
  np.testing.assert_allclose(np.bincount(with_repl, minlength=4) / n, p, atol=0.03)
  assert np.sort(Tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 1.0]]).multinomial(2).numpy(), 1).tolist() == [[1, 2], [0, 2]]  # as many positive weights as samples: each once

# ***** bad input: tinygrad's exception types (PyTorch's where they agree), each with a message *****
def _x(*shape): return Tensor.ones(*shape)
ERRORS = [
  ("reduce_dim_out_of_range", lambda: _x(2, 3).sum(5), IndexError),
  ("negative_dim_out_of_range", lambda: _x(2, 3).max(-3), IndexError),
  ("flatten_dim_out_of_range", lambda: _x(2, 3).flatten(2), IndexError),
  ("index_out_of_range", lambda: _x(2, 3)[2], IndexError),
  ("too_many_indices", lambda: _x(2, 3)[0, 0, 0], IndexError),
  ("two_ellipses", lambda: _x(2, 3)[..., ...], IndexError),
  ("float_index_tensor", lambda: _x(2, 3)[Tensor([0.5])], IndexError),
  ("reshape_size_mismatch", lambda: _x(2, 3).reshape(4, 2), ValueError),
  ("reshape_two_minus_ones", lambda: _x(2, 3).reshape(-1, -1), RuntimeError),
  ("permute_not_a_permutation", lambda: _x(2, 3).permute(0, 0), RuntimeError),
  ("permute_too_few_axes", lambda: _x(2, 3).permute(0), RuntimeError),
  ("flip_a_dim_twice", lambda: _x(2, 3).flip(0, -2), RuntimeError),
  ("roll_shifts_and_dims_differ", lambda: _x(2, 3).roll((1, 2), 0), RuntimeError),
  ("unfold_negative_size", lambda: _x(2, 3).unfold(1, -1, 1), RuntimeError),
  ("eye_negative", lambda: Tensor.eye(-1), ValueError),
  ("one_hot_negative_classes", lambda: Tensor([1]).one_hot(-2), ValueError),
  ("scatter_src_of_another_dtype", lambda: _x(2, 3).scatter(0, Tensor([[0, 1, 0]]), Tensor([[1, 2, 3]])), RuntimeError),
  ("scatter_bad_reduce", lambda: _x(2, 3).scatter(0, Tensor([[0, 1, 0]]), 1.0, reduce="max"), TypeError),
  ("cross_entropy_target_shape", lambda: _x(2, 3).cross_entropy(Tensor([0, 1, 2])), RuntimeError),
  ("broadcast_mismatch", lambda: _x(3) + _x(4), ValueError),
  ("expand_mismatch", lambda: _x(3).expand(4), ValueError),
  ("matmul_mismatch", lambda: _x(2, 3) @ _x(4, 2), RuntimeError),
  ("matmul_0d", lambda: _x() @ _x(3), RuntimeError),
  ("diagonal_same_dims", lambda: _x(3, 3).diagonal(0, 1, 1), RuntimeError),
  ("unfold_size_too_large", lambda: _x(2, 3).unfold(1, 4, 1), RuntimeError),
  ("unfold_step_zero", lambda: _x(2, 3).unfold(1, 2, 0), RuntimeError),
  ("meshgrid_bad_indexing", lambda: _x(2).meshgrid(_x(3), indexing="ab"), RuntimeError),
  ("div_bad_rounding_mode", lambda: _x(2).div(_x(2), rounding_mode="round"), RuntimeError),
  ("clip_without_bounds", lambda: _x(2).clip(), RuntimeError),
  ("gelu_bad_approximate", lambda: _x(2).gelu(approximate="fast"), RuntimeError),
  ("one_hot_float", lambda: _x(2).one_hot(3), RuntimeError),
  ("gather_index_ndim", lambda: _x(2, 3).gather(0, Tensor([0, 1])), RuntimeError),
  ("scatter_reduce_bad_reduce", lambda: _x(2, 3).scatter_reduce(0, Tensor([[0, 1, 0]]), _x(1, 3), "median"), RuntimeError),
  ("topk_k_too_large", lambda: _x(2, 3).topk(4), ValueError),
  ("pad_reflect_too_wide", lambda: _x(1, 3).pad((3, 0), mode="reflect"), ValueError),
  ("pad_odd_flat_length", lambda: _x(1, 3).pad((1, 0, 1)), ValueError),
  ("pad_unknown_mode", lambda: _x(1, 3).pad((1, 1), mode="wrap"), NotImplementedError),
  ("dropout_p_out_of_range", lambda: _x(3).dropout(1.5), ValueError),
  ("randint_low_not_below_high", lambda: Tensor.randint(3, low=4, high=4), ValueError),
  ("linspace_negative_steps", lambda: Tensor.linspace(0, 1, -1), ValueError),
  ("einsum_operand_count", lambda: Tensor.einsum("ij,jk->ik", _x(2, 2)), ValueError),
  ("sdpa_mask_and_causal", lambda: _x(1, 2, 2).scaled_dot_product_attention(_x(1, 2, 2), _x(1, 2, 2), attn_mask=_x(2, 2), is_causal=True), RuntimeError),
  ("backward_through_comparison", lambda: (Tensor([1.0, 2.0], requires_grad=True) > 0).sum().backward(), RuntimeError),
  ("gradient_of_int_target", lambda: Tensor([1.0]).sum().gradient(Tensor([1])), RuntimeError),
  ("bitcast_bytes_do_not_divide", lambda: Tensor([1, 2, 3], dtype=dtypes.uint8).bitcast(dtypes.float32), RuntimeError),
  ("bitcast_size_of_0d", lambda: Tensor(1, dtype=dtypes.int32).bitcast(dtypes.int16), RuntimeError),
  ("multinomial_more_samples_than_classes", lambda: _x(3).multinomial(4), RuntimeError),
  ("multinomial_fewer_positive_weights_than_samples", lambda: Tensor([[1.0, 2.0, 0.0], [1.0, 0.0, 0.0]]).multinomial(2), RuntimeError),
  ("multinomial_1d_fewer_positive_weights", lambda: Tensor([0.0, 3.0, 0.0, 0.0]).multinomial(2), RuntimeError),
  ("assign_dtype_mismatch", lambda: _x(3).contiguous().realize().assign(Tensor([1, 2, 3])), RuntimeError),
  ("assign_shape_mismatch", lambda: _x(3).contiguous().realize().assign(_x(2)), ValueError),
  ("setitem_leaf_requiring_grad", lambda: Tensor([1.0, 2.0], requires_grad=True).__setitem__(0, 3.0), RuntimeError),
  ("shard_a_sharded_tensor", lambda: _x(2, 2).shard(("CPU:0", "CPU:1")).shard(("CPU:0", "CPU:1")), RuntimeError),
  ("image_conv2d_not_4d", lambda: _x(1, 2, 5).image_conv2d(_x(3, 2, 3)), ValueError),
  ("image_dot_mismatch", lambda: _x(2, 3).image_dot(_x(4, 2)), RuntimeError),
  ("masked_select_int_mask", lambda: _x(3).masked_select(Tensor([1, 0, 1])), RuntimeError),
  ("from_blob_unsupported", lambda: Tensor.from_blob(0, (2,), dtype=dtypes.float32), NotImplementedError),
  ("truth_value", lambda: bool(_x(2)), TypeError),
  ("cumsum_dim_of_0d", lambda: Tensor(1.0).cumsum(1), IndexError),
  ("cummax_dim_of_0d", lambda: Tensor(1.0).cummax(1), IndexError),
  ("squeeze_dim_of_0d", lambda: Tensor(1.0).squeeze(10), IndexError),
  ("one_hot_minus_one", lambda: Tensor([1]).one_hot(-1), ValueError),
  ("conv2d_window_past_the_input", lambda: _x(1, 1, 6, 7).conv2d(_x(6, 1, 3, 3), dilation=3), RuntimeError),
  ("einsum_two_ellipses", lambda: Tensor.einsum("...ik...,...jk->", _x(2, 3, 4), _x(2, 3, 4)), RuntimeError),
  ("einsum_sizes_differ", lambda: Tensor.einsum("ij,jk->ik", _x(2, 3), _x(4, 2)), RuntimeError),
  ("gather_index_past_self", lambda: _x(2, 1, 1).gather(0, Tensor.zeros(3, 4, 5, dtype=dtypes.int32)), RuntimeError),
  ("scatter_index_past_self", lambda: _x(2, 3, 10).scatter(1, Tensor.zeros(3, 4, 5, dtype=dtypes.int32), _x(10, 10, 10)), RuntimeError),
  ("cross_entropy_probabilities_of_another_shape", lambda: _x(4, 10).cross_entropy(_x(4, 1)), RuntimeError),
  ("stack_list_and_a_tensor", lambda: Tensor.stack([_x(2), _x(2)], _x(2)), ValueError),
  ("linspace_bool", lambda: Tensor.linspace(5, 10, 3, dtype="bool"), ValueError),
  ("int_to_a_negative_power", lambda: Tensor([2, 3]) ** -2, RuntimeError),
  ("shift_of_a_float", lambda: _x(2) << 2, RuntimeError),
  ("shift_by_a_float", lambda: Tensor([1, 2]) >> Tensor([1.0, 2.0]), RuntimeError),
  ("unknown_dtype_name", lambda: _x(2).sum(dtype=""), AttributeError),
  ("arange_past_its_dtype", lambda: Tensor.arange(129, dtype=dtypes.int8), OverflowError),
  ("len_of_0d", lambda: len(_x()), TypeError),
]

@pytest.mark.parametrize("name,fn,exc", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_input_raises_tinygrads_exception_type(name, fn, exc):
  with pytest.raises(exc) as info: fn()
  assert len(str(info.value)) > 10, f"{name}: the message should say what is wrong: {info.value!r}"

# ***** every method docs/tensor-api.md marks "yes" is exercised: by a PyTorch case above, else by the test named here *****
# method -> the test that exercises it, for methods PyTorch has no counterpart to compare against (tinygrad's own helpers,
# random draws, buffers, devices and the graph) or whose result is no tensor; file::function, or file::function[case id]
ELSEWHERE = {
  **dict.fromkeys(["assign"], "test_tensor_api.py::test_assign_forms_and_views_see_the_write"),
  **dict.fromkeys(["backward", "grad", "to_"], "test_tensor_api.py::test_backward_fills_grad_in_every_form_tinygrad_has"),
  **dict.fromkeys(["is_param", "is_param_"], "test_tensor_api.py::test_is_param_and_layer_weights_get_grads_without_an_optimizer"),
  **dict.fromkeys(["replace"], "test_tensor_api.py::test_replace_takes_the_graph_dtype_and_device_without_writing"),
  **dict.fromkeys(["realize", "uop"], "test_tensor_api.py::test_realize_many_tensors_in_one_call"),
  **dict.fromkeys(["to", "shard", "shard_", "shard_like"], "test_tensor_api.py::test_to_and_shard_argument_forms"),
  **dict.fromkeys(["from_url"], "test_tensor_api.py::test_from_url_over_http_from_a_local_server"),
  **dict.fromkeys(["max_shape", "max_numel"], "test_tensor_api.py::test_max_shape_and_max_numel_take_each_variables_bound"),
  **dict.fromkeys(["newton_schulz"], "test_tensor_api.py::test_newton_schulz_matches_its_polynomial_and_handles_tall_matrices"),
  **dict.fromkeys(["keccak"], "test_tensor_api.py::test_keccak_matches_hashlib_at_the_block_edges"),
  **dict.fromkeys(["hash"], "test_tensor_api.py::test_hash_is_tinygrads_shake128_of_4k_piece_digests"),
  **dict.fromkeys(["svd"], "test_tensor_api.py::test_svd_reconstructs_with_orthonormal_factors_and_torchs_singular_values"),
  **dict.fromkeys(["manual_seed", "rand", "rand_like", "randn", "randn_like", "randint", "randperm", "normal", "uniform", "scaled_uniform",
                   "glorot_uniform", "kaiming_uniform", "kaiming_normal", "empty", "empty_like"], "test_torch_parity.py::test_random_creation_shapes_dtypes_ranges"),
  **dict.fromkeys(["multinomial"], "test_torch_parity.py::test_multinomial_statistics"),
  **dict.fromkeys(["numel", "size", "element_size", "nbytes", "ndim", "item", "tolist", "is_floating_point", "data"],
                  "test_torch_parity.py::test_metadata_and_python_values_match_torch"),
  **{m: f"test_torch_parity.py::test_matches_numpy[{case}]" for m, case in [("shrink", "shrink"), ("pad_to", "pad_to_shrink_to"), ("shrink_to", "pad_to_shrink_to"),
     ("rearrange", "rearrange"), ("quick_gelu", "quick_gelu"), ("sequential", "sequential"), ("qr", "qr")]},
  **dict.fromkeys(["from_blob"], "test_torch_parity.py::test_bad_input_raises_tinygrads_exception_type[from_blob_unsupported]"),
}

def _attrs(node) -> set[str]: return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}

def _test_code() -> dict[str, list[ast.AST]]:
  """Each test (file::function, file::function[case id] for a case of a parametrized list) -> its code. A PyTorch case's code
  is its fn (not its ref) plus run_case's, which it runs on every output (gradient, numpy)."""
  out: dict[str, list[ast.AST]] = {}
  for f in ("test_torch_parity.py", "test_tensor_api.py"):
    tree = ast.parse((pathlib.Path(__file__).parent / f).read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    out |= {f"{f}::{name}": [n] for name, n in funcs.items() if name.startswith("test_")}
    if f != "test_torch_parity.py": continue
    for n in ast.walk(tree):
      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "C":
        out[f"{f}::test_matches_torch[{n.args[0].value}]"] = [n.args[2], funcs["run_case"], funcs["_compare"]]
      if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id in ("NUMPY_CASES", "ERRORS"):
        test = "test_matches_numpy" if n.targets[0].id == "NUMPY_CASES" else "test_bad_input_raises_tinygrads_exception_type"
        out |= {f"{f}::{test}[{e.elts[0].value}]": [e.elts[1]] for e in n.value.elts}
  return out

def _documented_yes() -> dict[str, str]:
  """docs/tensor-api.md's methods marked yes -> their difference column."""
  rows = [line.split("|") for line in (pathlib.Path(__file__).resolve().parents[1] / "docs" / "tensor-api.md").read_text().splitlines() if line.startswith("| `")]
  return {r[1].strip().strip("`"): r[3].strip() for r in rows if r[2].strip() == "yes"}

def test_every_documented_method_is_tested():
  yes = set(_documented_yes())
  assert len(yes) > 200 and not set(ELSEWHERE) - yes, f"ELSEWHERE names methods the docs do not mark yes: {sorted(set(ELSEWHERE) - yes)}"
  reads = {test: set().union(*map(_attrs, code)) for test, code in _test_code().items()}
  by_torch = set().union(*(r for name, r in reads.items() if "::test_matches_torch[" in name))
  untested = sorted(m for m in yes - by_torch if m not in reads.get(ELSEWHERE.get(m, ""), ()))
  assert not untested, f"documented methods no test calls (add a PyTorch case, or a test named in ELSEWHERE): {untested}"

# ***** every argument form: tinygrad's signatures, and a test passing each parameter in each of its forms *****
# tinygrad's signature of each documented attribute (0.14's, unchanged in master of 2026-08-22), as a Python parameter list (None: a property or attribute), from its
# tensor.py and mixin/*.py
TINYGRAD_SIGNATURES = {
  "T": None, "abs": "self", "acos": "self", "acosh": "self", "add": "self, x, reverse=False", "all": "self, axis=None, keepdim=False",
  "allclose": "self, other, rtol=1e-05, atol=1e-08, equal_nan=False", "any": "self, axis=None, keepdim=False",
  "arange": "start, stop=None, step=1, dtype=None", "argmax": "self, axis=None, keepdim=False", "argmin": "self, axis=None, keepdim=False",
  "argsort": "self, dim=-1, descending=False", "asin": "self", "asinh": "self", "assign": "self, x", "atan": "self", "atanh": "self",
  "avg_pool2d": "self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, count_include_pad=True",
  "backward": "self, gradient=None", "batchnorm": "self, weight, bias, mean, invstd, axis=1", "bfloat16": "self",
  "binary_crossentropy": "self, Y, reduction='mean'", "binary_crossentropy_logits": "self, Y, reduction='mean', pos_weight=None",
  "bitcast": "self, dtype", "bitwise_and": "self, x, reverse=False", "bitwise_not": "self", "bitwise_or": "self, x, reverse=False",
  "bitwise_xor": "self, x, reverse=False", "bool": "self", "cast": "self, dtype", "cat": "self, *args, dim=0", "ceil": "self",
  "celu": "self, alpha=1.0", "chunk": "self, chunks, dim=0", "clamp": "self, min_=None, max_=None", "clip": "self, min_=None, max_=None",
  "clone": "self, device=None", "const_like": "self, b, dtype=None", "contiguous": "self, **kwargs", "contiguous_backward": "self",
  "conv2d": "self, weight, bias=None, groups=1, stride=1, dilation=1, padding=0, dtype=None",
  "conv_transpose2d": "self, weight, bias=None, groups=1, stride=1, dilation=1, padding=0, output_padding=0", "copysign": "self, other", "cos": "self",
  "cosh": "self", "cross_entropy": "self, Y, reduction='mean', label_smoothing=0.0", "cummax": "self, axis=0", "cummin": "self, axis=0",
  "cumprod": "self, axis", "cumsum": "self, axis=0", "data": "self", "detach": "self", "device": None, "diag": "self",
  "diagonal": "self, offset=0, dim1=0, dim2=1", "div": "self, x, reverse=False, rounding_mode=None", "dot": "self, w, dtype=None", "double": "self",
  "dropout": "self, p=0.5", "dtype": None, "einsum": "formula, *operands, dtype=None", "element_size": "self", "elu": "self, alpha=1.0",
  "empty": "*shape, device=None, dtype=None", "empty_like": "self, dtype=None, device=None", "eq": "self, x", "erf": "self", "exp": "self",
  "exp2": "self", "expand": "self, shape, *args", "eye": "n, m=None, dtype=None", "flatten": "self, start_dim=0, end_dim=-1",
  "flip": "self, axis, *args", "float": "self", "floor": "self", "fmod": "self, x", "from_blob": "ptr, shape, **kwargs",
  "from_url": "url, gunzip=False, **kwargs", "full": "shape, fill_value, dtype=None, device=None, buffer=True",
  "full_like": "self, fill_value, dtype=None, device=None, buffer=True", "gather": "self, dim, index", "gelu": "self, approximate='tanh'",
  "glorot_uniform": "*shape, **kwargs", "grad": None, "gradient": "self, *targets, gradient=None", "half": "self",
  "hardsigmoid": "self, alpha=0.16666666666666666, beta=0.5", "hardswish": "self", "hardtanh": "self, min_val=-1, max_val=1", "hash": "self",
  "image_conv2d": "self, weight, bias=None, groups=1, stride=1, dilation=1, padding=0, dtype=None", "image_dot": "self, w, dtype=None", "int": "self",
  "interpolate": "self, size, mode='linear', align_corners=False", "is_floating_point": "self", "is_param": None, "is_param_": "self, is_param=True",
  "isclose": "self, other, rtol=1e-05, atol=1e-08, equal_nan=False", "isfinite": "self", "isinf": "self, detect_positive=True, detect_negative=True",
  "isnan": "self", "item": "self", "kaiming_normal": "*shape, a=0.01, **kwargs", "kaiming_uniform": "*shape, a=0.01, **kwargs",
  "keccak": "self, cfg='sha3_256'", "layernorm": "self, axis=-1, eps=1e-05", "leaky_relu": "self, neg_slope=0.01", "lerp": "self, end, weight",
  "linear": "self, weight, bias=None, dtype=None", "linspace": "start, stop, steps, dtype=None", "log": "self", "log10": "self", "log2": "self",
  "log_softmax": "self, axis=-1, dtype=None", "logaddexp": "self, other", "logcumsumexp": "self, axis=0", "logical_not": "self", "logsigmoid": "self",
  "logsumexp": "self, axis=None, keepdim=False", "long": "self", "lshift": "self, x, reverse=False", "manual_seed": "seed=0",
  "masked_fill": "self, mask, value", "masked_select": "self, mask, size=None, fill_value=0", "matmul": "self, x, reverse=False, dtype=None",
  "max": "self, axis=None, keepdim=False", "max_numel": "self",
  "max_pool2d": "self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, return_indices=False", "max_shape": None,
  "max_unpool2d": "self, indices, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None", "maximum": "self, x",
  "mean": "self, axis=None, keepdim=False", "meshgrid": "self, *args, indexing='ij'", "min": "self, axis=None, keepdim=False", "minimum": "self, x",
  "mish": "self", "mod": "self, x, reverse=False", "mul": "self, x, reverse=False", "multinomial": "self, num_samples=1, replacement=False",
  "nbytes": "self", "ndim": None, "ne": "self, x", "neg": "self", "newton_schulz": "self, steps, params, eps=1e-07",
  "nll_loss": "self, Y, weight=None, ignore_index=None, reduction='mean'", "nonzero": "self, size=None, fill_value=0",
  "normal": "*shape, mean=0.0, std=1.0, **kwargs", "normalize": "self, p=2.0, dim=1, eps=1e-12", "numel": "self", "numpy": "self",
  "one_hot": "self, num_classes", "ones": "*shape, **kwargs", "ones_like": "self, **kwargs", "pad": "self, padding, mode='constant', value=0.0",
  "pad_to": "self, shape, *args, value=0", "permute": "self, order, *args", "pow": "self, x, reverse=False",
  "prod": "self, axis=None, keepdim=False, dtype=None", "qr": "self", "quick_gelu": "self", "rand": "*shape, device=None, dtype=None, contiguous=True",
  "rand_like": "self, **kwargs", "randint": "*shape, low=0, high=10, dtype=dtypes.int32, **kwargs", "randn": "*shape, dtype=None, **kwargs",
  "randn_like": "self, dtype=None, **kwargs", "randperm": "n, device=None, dtype=dtypes.int32, **kwargs",
  "realize": "self, *lst, do_update_stats=True", "rearrange": "self, formula, **sizes", "reciprocal": "self", "relu": "self", "relu6": "self",
  "repeat": "self, repeats, *args", "repeat_interleave": "self, repeats, dim=None", "replace": "self, x", "reshape": "self, shape, *args",
  "roll": "self, shifts, dims=None", "round": "self", "rshift": "self, x, reverse=False", "rsqrt": "self",
  "scaled_dot_product_attention": "self, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, enable_gqa=False",
  "scaled_uniform": "*shape, **kwargs", "scatter": "self, dim, index, src, reduce=None",
  "scatter_reduce": "self, dim, index, src, reduce, include_self=True", "selu": "self, alpha=1.67326, gamma=1.0507", "sequential": "self, ll",
  "shape": None, "shard": "self, devices, axis=None", "shard_": "self, devices, axis=None", "shard_like": "self, y", "short": "self",
  "shrink": "self, arg", "shrink_to": "self, shape, *args", "sigmoid": "self", "sign": "self", "silu": "self", "sin": "self", "sinh": "self",
  "size": "self, dim=None", "softmax": "self, axis=-1, dtype=None", "softmin": "self, axis=-1, dtype=None", "softplus": "self, beta=1.0",
  "softsign": "self", "sort": "self, dim=-1, descending=False",
  "sparse_categorical_crossentropy": "self, Y, ignore_index=-1, label_smoothing=0.0, reduction='mean'", "split": "self, sizes, dim=0", "sqrt": "self",
  "square": "self", "squeeze": "self, dim=None", "stack": "self, *args, dim=0", "std": "self, axis=None, keepdim=False, correction=1",
  "std_mean": "self, axis=None, keepdim=False, correction=1", "sub": "self, x, reverse=False", "sum": "self, axis=None, keepdim=False, dtype=None",
  "svd": "self, full_matrices=True", "swish": "self", "tan": "self", "tanh": "self", "to": "self, device", "to_": "self, device", "tolist": "self",
  "topk": "self, k, dim=-1, largest=True, sorted_=True", "transpose": "self, dim0=1, dim1=0", "tril": "self, diagonal=0", "triu": "self, diagonal=0",
  "trunc": "self", "unflatten": "self, dim, sizes", "unfold": "self, dim, size, step", "uniform": "*shape, low=0.0, high=1.0, dtype=None, **kwargs",
  "unsqueeze": "self, dim", "uop": None, "var": "self, axis=None, keepdim=False, correction=1",
  "var_mean": "self, axis=None, keepdim=False, correction=1", "view": "self, shape, *args", "where": "self, x, y", "zeros": "*shape, **kwargs",
  "zeros_like": "self, **kwargs"
}
# where tinygrad's **kwargs go on to another method: the keywords that one takes (rand's device and contiguous, full's dtype,
# device and buffer, Tensor()'s); any other **kwargs (contiguous's, rearrange's sizes) takes any name, so ours must too
_RAND, _FULL = ("device", "contiguous"), ("dtype", "device", "buffer")
TINYGRAD_FORWARDED = {
  **dict.fromkeys(["randn", "randint", "uniform", "randn_like"], _RAND), "randperm": ("contiguous",),
  **dict.fromkeys(["rand_like", "normal", "kaiming_normal", "glorot_uniform", "kaiming_uniform", "scaled_uniform"], ("dtype", *_RAND)),
  **dict.fromkeys(["zeros", "ones", "zeros_like", "ones_like"], _FULL), "from_blob": ("device", "dtype"), "from_url": ("device", "dtype", "requires_grad"),
}
# (method, parameter) -> how ours differs on purpose; docs/tensor-api.md's difference column for the method names the parameter too
SIGNATURE_DIFFERENCES = {
  ("cumprod", "axis"): "defaults to 0, as cumsum's does; tinygrad requires it",
  ("one_hot", "num_classes"): "defaults to None: the largest index + 1, which costs a sync; tinygrad requires it",
}
P = inspect.Parameter

def _tinygrad_signature(spec: str) -> inspect.Signature:
  scope = {"dtypes": dtypes}
  exec(f"def f({spec}): pass", scope)
  return inspect.signature(scope["f"])

def _same_default(a, b) -> bool: return a is b or (type(a) is type(b) and a == b)

def _signature_problems(m: str, theirs: inspect.Signature, ours: inspect.Signature) -> list[str]:
  """What a call tinygrad accepts would not find in ours: a parameter missing, of another kind or position, or with another default."""
  ps, qs = list(theirs.parameters.values()), list(ours.parameters.values())
  if (ps[:1] and ps[0].name == "self") != (qs[:1] and qs[0].name == "self"): return ["a method in one, a static or class method in the other"]
  positional = [q for q in qs if q.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
  var_kw = any(q.kind is P.VAR_KEYWORD for q in qs)
  def keyword(name): return (q := ours.parameters.get(name)) is not None and q.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
  problems = []
  for i, p in enumerate(x for x in ps if x.kind is P.POSITIONAL_OR_KEYWORD):
    if i >= len(positional) or positional[i].name != p.name or positional[i].kind is not P.POSITIONAL_OR_KEYWORD:
      problems.append(f"positional parameter {i} is {p.name!r}, ours {positional[i].name if i < len(positional) else None!r} (positional or keyword)")
  for p in ps:
    if p.kind is P.KEYWORD_ONLY and not (keyword(p.name) or var_kw): problems.append(f"keyword {p.name!r} is missing")
    if p.kind is P.VAR_POSITIONAL and not any(q.kind is P.VAR_POSITIONAL for q in qs): problems.append(f"*{p.name} is missing")
    if p.kind is P.VAR_KEYWORD:
      problems += [f"keyword {k!r} (tinygrad's **{p.name}) is missing" for k in TINYGRAD_FORWARDED.get(m, ()) if not (keyword(k) or var_kw)]
      if m not in TINYGRAD_FORWARDED and not var_kw: problems.append(f"**{p.name} is missing: tinygrad takes any keyword there")
    q = ours.parameters.get(p.name)
    if q is not None and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD) and (m, p.name) not in SIGNATURE_DIFFERENCES and not _same_default(p.default, q.default):
      problems.append(f"{p.name!r} defaults to {p.default!r}, ours to {q.default!r}")
  problems += [f"our extra parameter {q.name!r} has no default" for q in qs if q.name not in theirs.parameters and q.default is P.empty and q.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)]
  return problems

def test_signatures_take_every_tinygrad_argument_form():
  yes = _documented_yes()
  assert set(TINYGRAD_SIGNATURES) == set(yes), f"TINYGRAD_SIGNATURES and the methods docs/tensor-api.md marks yes differ: {sorted(set(TINYGRAD_SIGNATURES) ^ set(yes))}"
  t = Tensor([1.0])
  problems = {}
  for m, spec in TINYGRAD_SIGNATURES.items():
    if spec is None:
      if inspect.isroutine(getattr(t, m)): problems[m] = ["tinygrad's is an attribute, ours a method"]
    elif not inspect.isroutine(getattr(Tensor, m)): problems[m] = ["tinygrad's is a method, ours an attribute"]
    elif found := _signature_problems(m, _tinygrad_signature(spec), inspect.signature(getattr(Tensor, m))): problems[m] = found
  assert not problems, "signatures that refuse a call tinygrad accepts (fix ours, or list a real difference in SIGNATURE_DIFFERENCES):\n" + \
    "\n".join(f"  {m}: {'; '.join(ps)}" for m, ps in problems.items())
  for (m, name), why in SIGNATURE_DIFFERENCES.items():
    theirs, ours = _tinygrad_signature(TINYGRAD_SIGNATURES[m]).parameters[name], inspect.signature(getattr(Tensor, m)).parameters[name]
    assert not _same_default(theirs.default, ours.default), f"SIGNATURE_DIFFERENCES lists {m}({name}) ({why}), which is the same as tinygrad's now: drop it"
    assert f"`{name}`" in yes[m], f"docs/tensor-api.md's row for {m} should say how `{name}` differs: {why}"

# tinygrad master's Tensor attributes that tinycore leaves out; with TINYGRAD_SIGNATURES' names they are all of its Tensor's public attributes
TINYGRAD_TENSOR_ABSENT = {"alu", "as_param", "call", "callify", "const", "custom_kernel", "decode_hevc_frame", "invalids", "linear_with_vars",
                          "random_bits", "schedule_linear", "threefry", "ufix", "uprod", "usum"}

def test_every_tinygrad_tensor_attribute_is_in_the_table():
  text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "tensor-api.md").read_text().split("## Tensor attributes of tinygrad")[1]
  rows = {(c := line.split("|"))[1].strip().strip("`"): (c[2].strip(), c[3].strip()) for line in text.splitlines() if line.startswith("| `")}
  missing = (set(TINYGRAD_SIGNATURES) | TINYGRAD_TENSOR_ABSENT) - set(rows)
  assert not missing, f"tinygrad Tensor attributes docs/tensor-api.md's table does not list: {sorted(missing)}"
  no = {n for n, (yes, _) in rows.items() if yes == "no"}
  assert no == TINYGRAD_TENSOR_ABSENT, f"rows marked no differ from TINYGRAD_TENSOR_ABSENT: {sorted(no ^ TINYGRAD_TENSOR_ABSENT)}"
  assert all(why for n, (_, why) in rows.items() if n in no), "a row marked no says why tinycore leaves the attribute out"

# Each parameter tinygrad's signature has is passed by some test call (a PyTorch case, or for a method named in ELSEWHERE its
# test), in each of its forms: a dim as a negative number, a dim tinygrad also takes as a tuple as a tuple, a shape or order as
# varargs and as one sequence, each mode a string parameter selects
DIMS = {"axis", "dim", "dims", "dim0", "dim1", "dim2", "start_dim", "end_dim"}
SEQUENCE_DIMS = {*((m, "axis") for m in ("sum", "prod", "mean", "max", "min", "any", "all", "std", "var", "std_mean", "var_mean", "layernorm", "flip")),
                 ("roll", "dims"), ("roll", "shifts")}
CHOICES = {("pad", "mode"): ("reflect", "replicate", "circular"), ("div", "rounding_mode"): ("trunc", "floor"), ("gelu", "approximate"): ("none",),
           ("interpolate", "mode"): ("nearest", "nearest-exact"), ("scatter", "reduce"): ("add", "multiply"), ("meshgrid", "indexing"): ("xy",),
           ("scatter_reduce", "reduce"): ("sum", "prod", "mean", "amax", "amin"),
           **{(m, "reduction"): ("sum", "none") for m in ("cross_entropy", "nll_loss", "binary_crossentropy", "binary_crossentropy_logits", "sparse_categorical_crossentropy")}}
# (method, parameter) -> why no test passes it
UNEXERCISED = {
  ("realize", "do_update_stats"): "only whether GlobalCounters counts the kernels",
  ("contiguous", "kwargs"): "tinygrad's scheduler hints, which ours takes and ignores",
}

def _forms(node: ast.AST, loop_values: dict[str, set]) -> set:
  """The forms an argument's expression has: 'negative' (it holds a negative number), 'sequence' (a tuple or list), and each
  string it is; a loop variable has the forms of what it runs over (each string of a literal tuple, 'negative' for a range from
  a negative start)."""
  forms = {"sequence"} if isinstance(node, (ast.Tuple, ast.List)) else set()
  if any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) for n in ast.walk(node)): forms.add("negative")
  if isinstance(node, ast.Constant) and isinstance(node.value, str): forms.add(node.value)
  if isinstance(node, ast.Name): forms |= loop_values.get(node.id, set())
  return forms

def _passed_forms(code: list[ast.AST]) -> dict[tuple[str, str], set]:
  """(method, tinygrad parameter) -> the forms the calls in this code pass it in: 'passed' for any, the forms of _forms, and
  'varargs' for a shape (order, dims) given as several arguments rather than one sequence."""
  out: dict[tuple[str, str], set] = {}
  for root in code:
    loops = {c.target.id: {e.value for e in c.iter.elts if isinstance(e, ast.Constant)} if isinstance(c.iter, ast.Tuple) else _forms(c.iter, {}) & {"negative"}
             for c in ast.walk(root) if isinstance(c, ast.comprehension) and isinstance(c.target, ast.Name)}
    for n in ast.walk(root):
      if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(TINYGRAD_SIGNATURES.get(n.func.attr), str)): continue
      m, sig = n.func.attr, _tinygrad_signature(TINYGRAD_SIGNATURES[n.func.attr])
      on_class = isinstance(n.func.value, ast.Name) and n.func.value.id in ("T", "Tensor")
      receiver = [] if on_class or "self" not in sig.parameters else [n.func.value]
      var_kw = any(p.kind is P.VAR_KEYWORD for p in sig.parameters.values())
      try: bound = sig.bind_partial(*receiver, *n.args, **{k.arg: k.value for k in n.keywords if k.arg in sig.parameters or (k.arg and var_kw)})
      except TypeError: continue  # not tinygrad's form (a torch spelling in a shared fn)
      lead = [q.name for q in sig.parameters.values() if q.kind is P.POSITIONAL_OR_KEYWORD and q.name != "self"]
      for name, value in bound.arguments.items():
        kind, forms = sig.parameters[name].kind, {"passed"}
        if kind is P.VAR_POSITIONAL:
          if not value: continue
          if any(isinstance(v, ast.Starred) for v in value): pass  # as many arguments as a list holds: either form
          elif lead or len(value) > 1: out.setdefault((m, lead[0] if lead else name), set()).add("varargs")  # reshape(2, 3), zeros(2, 3)
          else: forms |= _forms(value[0], loops) & {"sequence"}  # zeros((2, 3))
        elif kind is not P.VAR_KEYWORD and not isinstance(value, ast.Starred): forms |= _forms(value, loops)
        out.setdefault((m, name), set()).update(forms)
  return out

def _required_forms(m: str, sig: inspect.Signature) -> dict[str, set]:
  out: dict[str, set] = {}
  params = [p for p in sig.parameters.values() if p.name != "self"]
  for p in params:
    if (m, p.name) in UNEXERCISED: continue
    need = {"passed"} | set(CHOICES.get((m, p.name), ()))
    if p.name in DIMS: need.add("negative")
    if (m, p.name) in SEQUENCE_DIMS: need.add("sequence")
    out[p.name] = need
  pos = [p for p in params if p.kind is P.POSITIONAL_OR_KEYWORD]
  if any(p.kind is P.VAR_POSITIONAL for p in params):  # a shape, order or dims: several arguments, or one sequence
    if pos and pos[0].name in ("shape", "order", "axis", "repeats"): out[pos[0].name] |= {"varargs", "sequence"}
    if not pos and params[0].name == "shape": out["shape"] |= {"varargs", "sequence"}
  return out

def test_every_parameter_is_passed_in_each_form():
  code = _test_code()
  by_torch = _passed_forms(list({id(n): n for test, nodes in code.items() if "::test_matches_torch[" in test for n in nodes}.values()))
  missing = {}
  for m, spec in TINYGRAD_SIGNATURES.items():
    if spec is None: continue
    elsewhere = _passed_forms(code[ELSEWHERE[m]]) if m in ELSEWHERE else {}
    for name, need in _required_forms(m, _tinygrad_signature(spec)).items():
      if lacking := need - by_torch.get((m, name), set()) - elsewhere.get((m, name), set()): missing[f"{m}({name})"] = sorted(lacking)
  assert not missing, f"parameters no test passes in these forms (add them to a PyTorch case, or the test ELSEWHERE names): {missing}"
