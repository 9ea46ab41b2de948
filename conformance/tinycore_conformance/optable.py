"""The ops the suite checks: each Tensor op with its numpy reference, accepted dtypes, input domains and shape cases."""
from __future__ import annotations
import math
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor
from tinycore_conformance import oracle as O

@dataclass(frozen=True)
class Case:
  """Input shapes for one run of an op. A shape of None is a Python scalar operand; `view` makes tensor inputs
  non-contiguous ("noncontig": permuted, shrunk, flipped) or broadcast ("expand": a stride-0 view of one row)."""
  name: str
  shapes: tuple
  kw: dict = field(default_factory=dict)
  view: str | None = None
  def describe(self) -> str:
    parts = ["scalar" if s is None else str(tuple(s)) for s in self.shapes]
    return " x ".join(parts) + (f" {self.view}" if self.view else "") + (f" {self.kw}" if self.kw else "")

@dataclass(frozen=True)
class Op:
  name: str
  fn: Callable[..., Any]           # tinycore: fn(*inputs, **kw) -> Tensor (or a list of Tensors)
  ref: Callable[..., Any]          # numpy: ref(*inputs, **kw) on float64 / native int / bool arrays
  family: str                      # picks the default shape cases: unary, binary, ternary, reduce, axis, movement, matmul, custom
  kinds: str = "f"                 # accepted dtypes: f floats, i signed ints, u unsigned ints, b bool
  domain: str | tuple = "any"      # oracle.sample domain, one for all inputs or one per input; "divpair" for dividend/divisor
  grad: bool = False               # differentiable in its float inputs
  grad_domain: str | None = None   # where the gradient is smooth, if not `domain`
  big: bool = False                # also run past 2**16 elements
  input_dtypes: Callable[[DType], tuple] | None = None   # per-input dtypes when they differ from the tested dtype
  cases: tuple[Case, ...] | None = None   # replaces the family's cases (the first is the dtype-sweep case)
  skip_cases: tuple[str, ...] = ()
  fits: Callable[[tuple], bool] | None = None   # which shapes a shape-generic op accepts
  floor: float = 0.0               # absolute error the op's own definition allows (an approximation formula), values and gradients
  grad_skip: tuple[str, ...] = ()  # cases where the gradient is undefined (std of equal values)
  dtype_kw: bool = False           # creation ops: pass dtype= to fn and ref
  scale_by_abs: bool = False       # sums of products: judge each element's error against ref(|inputs|), the size of its terms
  def accepts(self, dt: DType) -> bool:
    kind = "b" if dt == dtypes.bool else "f" if O.is_float(dt) else "u" if dtypes.is_unsigned(dt) else "i"
    return kind in self.kinds
  def domains(self, n: int) -> tuple:
    return self.domain if isinstance(self.domain, tuple) else (self.domain,) * n

# ***** shape cases per family (the first of each list is the dtype-sweep case) *****

def C(name, *shapes, view=None, **kw) -> Case: return Case(name, tuple(shapes), kw, view)

FAMILY_CASES: dict[str, tuple[Case, ...]] = {
  "unary": (C("odd", (3, 5)), C("scalar", ()), C("empty", (0,)), C("empty3d", (2, 0, 3)), C("rank4", (2, 3, 1, 4)),
            C("noncontig", (4, 5), view="noncontig"), C("expanded", (4, 5), view="expand")),
  "binary": (C("odd", (3, 5), (3, 5)), C("broadcast", (3, 1), (1, 5)), C("broadcast_rank", (3, 5), (5,)), C("scalar_tensor", (3, 5), ()),
             C("py_rhs", (3, 5), None), C("py_lhs", None, (3, 5)), C("empty", (0, 3), (1, 3)),
             C("noncontig", (4, 5), (4, 5), view="noncontig"), C("expanded", (4, 5), (4, 5), view="expand")),
  "ternary": (C("odd", (3, 5), (3, 5), (3, 5)), C("broadcast", (3, 1), (1, 5), ()), C("empty", (0, 3), (0, 3), (1, 3)),
              C("noncontig", (4, 5), (4, 5), (4, 5), view="noncontig")),
  "reduce": (C("axis1", (3, 5), axis=1), C("all", (3, 5), axis=None), C("axis0", (3, 5), axis=0), C("keepdim", (2, 3, 5), axis=-1, keepdim=True),
             C("axes", (2, 3, 5), axis=(0, 2)), C("scalar", (), axis=None), C("empty", (0, 3), axis=0),
             C("noncontig", (4, 5), axis=1, view="noncontig"), C("expanded", (4, 5), axis=0, view="expand")),
  "axis": (C("last", (3, 5), axis=-1), C("first", (3, 5), axis=0), C("3d", (2, 3, 4), axis=1), C("empty", (0, 3), axis=1),
           C("empty_axis", (3, 0), axis=1), C("noncontig", (4, 5), axis=1, view="noncontig")),
  "movement": (C("3d", (2, 3, 4)), C("odd", (3, 5)), C("scalar", ()), C("empty", (0, 3)), C("noncontig", (4, 5), view="noncontig"),
               C("expanded", (4, 5), view="expand")),
  "matmul": (C("mat", (3, 4), (4, 5)), C("batched", (2, 3, 4), (4, 5)), C("batched_both", (2, 3, 4), (2, 4, 5)), C("vec_mat", (4,), (4, 5)),
             C("mat_vec", (3, 4), (4,)), C("vec_vec", (4,), (4,)), C("empty_k", (3, 0), (0, 5)), C("empty_m", (0, 4), (4, 5)),
             C("noncontig", (4, 5), (5, 3), view="noncontig")),
}
BIG_CASES = {"unary": C("big", (65537,)), "binary": C("big", (65537,), (65537,)), "ternary": C("big", (65537,), (65537,), (65537,)),
             "reduce": C("big", (65537,), axis=None), "movement": C("big2d", (257, 259))}

def cases_of(op: Op) -> tuple[Case, ...]:
  cs = op.cases if op.cases is not None else FAMILY_CASES[op.family]
  return tuple(c for c in cs if c.name not in op.skip_cases and (op.fits is None or all(s is None or op.fits(tuple(s)) for s in c.shapes)))

# ***** references *****

def _red(fn):
  """numpy reduction with tinycore's (axis, keepdim) arguments."""
  return lambda x, axis=None, keepdim=False: fn(x, axis=axis, keepdims=keepdim)
def _tdiv(a, b):
  """Division truncating toward zero: floats by trunc, ints exactly in their own dtype."""
  if np.asarray(a).dtype.kind == "f" or np.asarray(b).dtype.kind == "f" or isinstance(a, float) or isinstance(b, float): return np.trunc(np.divide(a, b))
  q = np.floor_divide(a, b)
  return np.where((np.mod(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)), q + 1, q)
def _on_floats(fn): return lambda x: fn(x) if x.dtype.kind == "f" else x   # rounding an integer is the identity
def _mm(a, b): return np.matmul(*(x.astype(np.int64) if x.dtype.kind in "iu" else x for x in (a, b)))
def _neg(x): return np.logical_not(x) if np.asarray(x).dtype == np.bool_ else np.negative(x)
def _sub(a, b): return np.logical_xor(a, b) if np.asarray(a).dtype == np.bool_ and np.asarray(b).dtype == np.bool_ else np.subtract(a, b)
def _cum_extreme(fn):
  """Running max/min along `axis` and the index where it was (the last among ties, like torch)."""
  def ref(x, axis):
    if x.ndim == 0: return x, np.zeros((), np.int64)
    y = np.moveaxis(x, axis, -1)
    vals = fn.accumulate(y, axis=-1) if y.size else y.copy()
    idx = np.zeros(y.shape, np.int64)
    for i in range(y.shape[-1]):
      hit = y[..., :i + 1] == vals[..., i:i + 1]
      idx[..., i] = i - np.argmax(hit[..., ::-1], axis=-1)
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)
  return ref
def _gelu(x): return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
def _argmax(fn):
  def ref(x, axis=None, keepdim=False):
    if x.ndim == 0: return np.zeros((), np.int64)
    return fn(x.reshape(-1) if axis is None else x, axis=None if axis is None else axis, keepdims=keepdim if axis is not None else False)
  return ref
def _lse(x, axis=None, keepdim=False):
  m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)   # an empty axis sums to 0: log gives -inf, like torch
  m = np.where(np.isinf(m), 0, m)
  out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
  return out if keepdim else (np.squeeze(out, axis=axis) if axis is not None else out.reshape(()))
def _mean(x, axis=None, keepdim=False):
  with np.errstate(invalid="ignore", divide="ignore"): return np.mean(x.astype(np.float64), axis=axis, keepdims=keepdim)
def _var(ddof_fn):
  def ref(x, axis=None, keepdim=False):
    n = x.size if axis is None else int(np.prod([x.shape[a] for a in (axis if isinstance(axis, tuple) else (axis,))]))
    with np.errstate(invalid="ignore", divide="ignore"):
      v = np.sum((x - np.mean(x, axis=axis, keepdims=True)) ** 2, axis=axis, keepdims=keepdim) / (n - 1) if n > 1 else \
          np.full(np.sum(x, axis=axis, keepdims=keepdim).shape, np.nan)
    return ddof_fn(v)
  return ref
def _shrink1(x):  # drop the first element of every dim longer than one
  return x[tuple(slice(1, None) if s > 1 else slice(None) for s in x.shape)]
def _tshrink1(t: Tensor) -> Tensor: return t.shrink(tuple((1, s) if s > 1 else (0, s) for s in t.shape))

def unary(name, fn, ref, kinds="f", domain="any", grad=True, **kw) -> Op: return Op(name, fn, ref, "unary", kinds, domain, grad, **kw)
def binary(name, fn, ref, kinds="fiu", domain="any", grad=True, **kw) -> Op: return Op(name, fn, ref, "binary", kinds, domain, grad, **kw)

DIVLIKE = dict(domain="divpair", skip_cases=("broadcast",))
ALL = "fiub"

OPS: tuple[Op, ...] = (
  # ---- unary ----
  unary("neg", lambda x: x.neg(), _neg, ALL, big=True),
  unary("reciprocal", lambda x: x.reciprocal(), lambda x: 1 / x, domain="nonzero"),
  unary("sqrt", lambda x: x.sqrt(), np.sqrt, domain="pos", big=True),
  unary("rsqrt", lambda x: x.rsqrt(), lambda x: 1 / np.sqrt(x), domain="pos"),
  unary("exp", lambda x: x.exp(), np.exp, domain="exp", big=True),
  unary("exp2", lambda x: x.exp2(), np.exp2, domain="exp"),
  unary("log", lambda x: x.log(), np.log, domain="pos"),
  unary("log2", lambda x: x.log2(), np.log2, domain="pos"),
  unary("log10", lambda x: x.log10(), np.log10, domain="pos"),
  unary("sin", lambda x: x.sin(), np.sin, domain="trig", big=True),
  unary("cos", lambda x: x.cos(), np.cos, domain="trig"),
  unary("tan", lambda x: x.tan(), np.tan, domain="tan"),
  unary("trunc", lambda x: x.trunc(), _on_floats(np.trunc), "fiu", "halves", grad_domain="offgrid"),
  unary("floor", lambda x: x.floor(), _on_floats(np.floor), "fiu", "halves", grad_domain="offgrid"),
  unary("ceil", lambda x: x.ceil(), _on_floats(np.ceil), "fiu", "halves", grad_domain="offgrid"),
  unary("round", lambda x: x.round(), _on_floats(np.round), "fiu", "halves", grad_domain="offgrid"),
  unary("frac", lambda x: x.frac(), lambda x: x - np.trunc(x), domain="halves", grad_domain="offgrid"),
  unary("abs", lambda x: x.abs(), np.abs, ALL),
  unary("sign", lambda x: x.sign(), np.sign, "fiu"),
  unary("square", lambda x: x.square(), np.square, "fiu"),
  unary("relu", lambda x: x.relu(), lambda x: np.maximum(x, 0), "fiu", big=True),
  unary("relu6", lambda x: (x * 4).relu6(), lambda x: np.clip(x * 4, 0, 6)),
  unary("leaky_relu", lambda x: x.leaky_relu(0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
  unary("elu", lambda x: x.elu(), lambda x: np.where(x > 0, x, np.expm1(x)), domain="exp"),
  unary("celu", lambda x: x.celu(1.5), lambda x: np.maximum(x, 0) + np.minimum(0, 1.5 * np.expm1(x / 1.5)), domain="exp"),
  unary("selu", lambda x: x.selu(), lambda x: 1.0507 * np.where(x >= 0, x, 1.67326 * np.expm1(x)), domain="exp"),
  unary("sigmoid", lambda x: x.sigmoid(), O.sigmoid, big=True),
  unary("hardsigmoid", lambda x: x.hardsigmoid(), lambda x: np.clip(x / 6 + 0.5, 0, 1), domain="small"),
  unary("logsigmoid", lambda x: x.logsigmoid(), lambda x: -O.softplus(-x)),
  unary("softplus", lambda x: x.softplus(), O.softplus),
  unary("tanh", lambda x: x.tanh(), np.tanh),
  unary("sinh", lambda x: x.sinh(), np.sinh, domain="exp"),
  unary("cosh", lambda x: x.cosh(), np.cosh, domain="exp"),
  unary("atanh", lambda x: x.atanh(), np.arctanh, domain="unit"),
  unary("asinh", lambda x: x.asinh(), np.arcsinh, domain="small"),
  unary("acosh", lambda x: x.acosh(), np.arccosh, domain="ge1"),
  unary("hardtanh", lambda x: x.hardtanh(), lambda x: np.clip(x, -1, 1)),
  unary("gelu", lambda x: x.gelu(), _gelu, domain="small"),
  unary("quick_gelu", lambda x: x.quick_gelu(), lambda x: x * O.sigmoid(1.702 * x)),
  unary("silu", lambda x: x.silu(), lambda x: x * O.sigmoid(x)),
  unary("mish", lambda x: x.mish(), lambda x: x * np.tanh(O.softplus(x))),
  unary("softsign", lambda x: x.softsign(), lambda x: x / (1 + np.abs(x))),
  unary("hardswish", lambda x: x.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6, domain="small"),
  unary("erf", lambda x: x.erf(), O.erf, floor=1e-5),  # Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7, its slope's error ~4e-6
  unary("isnan", lambda x: x.isnan(), np.isnan, grad=False),
  unary("isinf", lambda x: x.isinf(), np.isinf, grad=False),
  unary("isfinite", lambda x: x.isfinite(), np.isfinite, grad=False),
  unary("logical_not", lambda x: x.logical_not(), np.logical_not, ALL, grad=False),
  unary("bitwise_not", lambda x: ~x, np.invert, "iub", grad=False),
  unary("lshift", lambda x: x << 3, lambda x: np.left_shift(x, np.asarray(3, x.dtype)), "iu", grad=False),
  unary("rshift", lambda x: x >> 3, lambda x: np.right_shift(x, np.asarray(3, x.dtype)), "iu", grad=False),
  unary("clip", lambda x: x.clip(1, 5), lambda x: np.clip(x, 1, 5), "fiu"),
  unary("cast_float32", lambda x: x.float(), lambda x: x.astype(np.float64), ALL, grad=False, big=True),
  # ---- binary ----
  binary("add", lambda a, b: a + b, np.add, ALL, big=True),
  binary("sub", lambda a, b: a - b, _sub, ALL),
  binary("mul", lambda a, b: a * b, np.multiply, ALL, big=True),
  binary("div", lambda a, b: a / b, lambda a, b: np.divide(np.asarray(a, np.float64), b), domain=("any", "nonzero"), big=True),
  binary("floordiv", lambda a, b: a // b, np.floor_divide, **DIVLIKE),
  binary("truncdiv", lambda a, b: a.div(b, rounding_mode="trunc") if isinstance(a, Tensor) else b.div(a, True, rounding_mode="trunc"), _tdiv, **DIVLIKE),
  binary("mod", lambda a, b: a % b, np.mod, **DIVLIKE),
  binary("maximum", lambda a, b: a.maximum(b) if isinstance(a, Tensor) else b.maximum(a), np.maximum, ALL, big=True),
  binary("minimum", lambda a, b: a.minimum(b) if isinstance(a, Tensor) else b.minimum(a), np.minimum, ALL),
  binary("pow", lambda a, b: a ** b, np.power, "f", ("pos", "small")),
  binary("lt", lambda a, b: a < b, np.less, ALL, "pairs", False, big=True),
  binary("gt", lambda a, b: a > b, np.greater, ALL, "pairs", False),
  binary("le", lambda a, b: a <= b, np.less_equal, ALL, "pairs", False),
  binary("ge", lambda a, b: a >= b, np.greater_equal, ALL, "pairs", False),
  binary("eq", lambda a, b: a == b, np.equal, ALL, "pairs", False),
  binary("ne", lambda a, b: a != b, np.not_equal, ALL, "pairs", False),
  binary("bitwise_and", lambda a, b: a & b, np.bitwise_and, "iub", grad=False),
  binary("bitwise_or", lambda a, b: a | b, np.bitwise_or, "iub", grad=False),
  binary("bitwise_xor", lambda a, b: a ^ b, np.bitwise_xor, "iub", grad=False),
  # ---- ternary ----
  Op("where", lambda c, a, b: c.where(a, b), np.where, "ternary", ALL, grad=True, big=True,
     input_dtypes=lambda dt: (dtypes.bool, dt, dt)),
  Op("lerp", lambda a, b, w: a.lerp(b, w), lambda a, b, w: a + (b - a) * w, "ternary", "f", ("any", "any", "unit"), grad=True),
  # ---- reductions ----
  Op("sum", lambda x, **k: x.sum(**k), _red(np.sum), "reduce", ALL, grad=True, scale_by_abs=True, big=True),
  Op("prod", lambda x, **k: x.prod(**k), _red(np.prod), "reduce", ALL, "near1", grad=True),
  Op("max", lambda x, **k: x.max(**k), _red(np.max), "reduce", ALL, grad=True),
  Op("min", lambda x, **k: x.min(**k), _red(np.min), "reduce", ALL, grad=True),
  Op("mean", lambda x, **k: x.mean(**k), _mean, "reduce", ALL, "small", grad=True, scale_by_abs=True),
  Op("var", lambda x, **k: x.var(**k), _var(lambda v: v), "reduce", "f", grad=True),
  Op("std", lambda x, **k: x.std(**k), _var(np.sqrt), "reduce", "f", grad=True, grad_skip=("expanded",)),
  Op("any", lambda x, **k: x.any(**k), _red(np.any), "reduce", ALL),
  Op("all", lambda x, **k: x.all(**k), _red(np.all), "reduce", ALL),
  Op("logsumexp", lambda x, **k: x.logsumexp(**k), _lse, "reduce", "f", grad=True),
  Op("argmax", lambda x, **k: x.argmax(**k), _argmax(np.argmax), "reduce", ALL, skip_cases=("axes",)),
  Op("argmin", lambda x, **k: x.argmin(**k), _argmax(np.argmin), "reduce", ALL, skip_cases=("axes",)),
  # ---- along one axis ----
  Op("softmax", lambda x, axis: x.softmax(axis), lambda x, axis: O.softmax(x, axis), "axis", "f", grad=True),
  Op("log_softmax", lambda x, axis: x.log_softmax(axis), lambda x, axis: O.log_softmax(x, axis), "axis", "f", grad=True),
  Op("cumsum", lambda x, axis: x.cumsum(axis), lambda x, axis: np.cumsum(x, axis=axis), "axis", ALL, grad=True, scale_by_abs=True),
  Op("cumprod", lambda x, axis: x.cumprod(axis), lambda x, axis: np.cumprod(x, axis=axis), "axis", "fiu", "near1", grad=True, scale_by_abs=True),
  Op("cummax", lambda x, axis: x.cummax(axis), _cum_extreme(np.maximum), "axis", "fiu", grad=True),
  Op("cummin", lambda x, axis: x.cummin(axis), _cum_extreme(np.minimum), "axis", "fiu", grad=True),
  # ---- movement ----
  Op("reshape", lambda x: x.reshape(x.shape[::-1]), lambda x: x.reshape(x.shape[::-1]), "movement", ALL, grad=True),
  Op("flatten", lambda x: x.flatten(), lambda x: x.reshape(-1), "movement", ALL, grad=True),
  Op("permute", lambda x: x.permute(*reversed(range(x.ndim))), lambda x: np.transpose(x), "movement", ALL, grad=True, big=True,
     fits=lambda s: len(s) >= 1),
  Op("transpose", lambda x: x.transpose(0, -1), lambda x: np.swapaxes(x, 0, -1), "movement", ALL, grad=True, fits=lambda s: len(s) >= 2),
  Op("flip", lambda x: x.flip(0), lambda x: np.flip(x, 0), "movement", ALL, grad=True, big=True, fits=lambda s: len(s) >= 1),
  Op("flip_all", lambda x: x.flip(*range(x.ndim)), lambda x: np.flip(x), "movement", ALL, grad=True, fits=lambda s: len(s) >= 1),
  Op("shrink", _tshrink1, _shrink1, "movement", ALL, grad=True),
  Op("pad", lambda x: x.pad(((1, 2),) * x.ndim), lambda x: np.pad(x, ((1, 2),) * x.ndim), "movement", ALL, grad=True, big=True,
     fits=lambda s: len(s) >= 1),
  Op("pad_value", lambda x: x.pad(((2, 1),) * x.ndim, value=3), lambda x: np.pad(x, ((2, 1),) * x.ndim, constant_values=3), "movement", "fiu",
     grad=True, fits=lambda s: len(s) >= 1),
  Op("pad_negative", lambda x: x.pad(((-1, 1),) * x.ndim), lambda x: np.pad(x[(slice(1, None),) * x.ndim], ((0, 1),) * x.ndim), "movement", ALL,
     grad=True, fits=lambda s: len(s) >= 1 and min(s) >= 1),
  Op("pad_reflect", lambda x: x.pad(((1, 1),) * x.ndim, mode="reflect"), lambda x: np.pad(x, ((1, 1),) * x.ndim, mode="reflect"), "movement", ALL,
     grad=True, fits=lambda s: len(s) >= 1 and min(s) >= 2),
  Op("pad_replicate", lambda x: x.pad(((2, 1),) * x.ndim, mode="replicate"), lambda x: np.pad(x, ((2, 1),) * x.ndim, mode="edge"), "movement", ALL,
     grad=True, fits=lambda s: len(s) >= 1 and min(s) >= 1),
  Op("pad_circular", lambda x: x.pad(((1, 1),) * x.ndim, mode="circular"), lambda x: np.pad(x, ((1, 1),) * x.ndim, mode="wrap"), "movement", ALL,
     grad=True, fits=lambda s: len(s) >= 1 and min(s) >= 1),
  Op("expand", lambda x: x.unsqueeze(0).expand(3, *x.shape), lambda x: np.broadcast_to(x, (3,) + x.shape), "movement", ALL, grad=True),
  Op("unsqueeze", lambda x: x.unsqueeze(-1), lambda x: x[..., None], "movement", ALL, grad=True),
  Op("squeeze", lambda x: x.unsqueeze(0).squeeze(0), lambda x: x, "movement", ALL, grad=True),
  Op("repeat", lambda x: x.repeat((2,) + (1,) * (x.ndim - 1)), lambda x: np.tile(x, (2,) + (1,) * (x.ndim - 1)), "movement", ALL, grad=True,
     fits=lambda s: len(s) >= 1),
  Op("repeat_interleave", lambda x: x.repeat_interleave(2, 0), lambda x: np.repeat(x, 2, 0), "movement", ALL, grad=True, fits=lambda s: len(s) >= 1),
  Op("roll", lambda x: x.roll(2, 0), lambda x: np.roll(x, 2, 0), "movement", ALL, grad=True, fits=lambda s: len(s) >= 1),
  Op("tril", lambda x: x.tril(), lambda x: np.tril(x), "movement", ALL, grad=True, fits=lambda s: len(s) >= 2),
  Op("triu", lambda x: x.triu(1), lambda x: np.triu(x, 1), "movement", ALL, grad=True, fits=lambda s: len(s) >= 2),
  Op("cat", lambda x: x.cat(x * 2, dim=0), lambda x: np.concatenate([x, x * 2], 0), "movement", "fiu", grad=True, fits=lambda s: len(s) >= 1),
  Op("stack", lambda x: Tensor.stack(x, x + 1, dim=-1), lambda x: np.stack([x, x + 1], -1), "movement", "fiu", grad=True),
  Op("split", lambda x: x.split(2, 0), lambda x: np.split(x, range(2, x.shape[0], 2), 0) if x.shape[0] else [x], "movement", ALL, grad=True,
     fits=lambda s: len(s) >= 1),
  Op("chunk", lambda x: x.chunk(2, 0), lambda x: np.array_split(x, 2, 0) if x.shape[0] else [x], "movement", ALL, grad=True,
     fits=lambda s: len(s) >= 1 and s[0] % 2 == 0),
  Op("getitem_slices", lambda x: x[1:, ::2], lambda x: x[1:, ::2], "movement", ALL, grad=True, fits=lambda s: len(s) >= 2),
  Op("getitem_negative", lambda x: x[::-2, -1], lambda x: x[::-2, -1], "movement", ALL, grad=True, fits=lambda s: len(s) >= 2 and s[1] >= 1),
  Op("getitem_int", lambda x: x[1], lambda x: x[1], "movement", ALL, grad=True, fits=lambda s: len(s) >= 1 and s[0] >= 2),
  Op("getitem_none_ellipsis", lambda x: x[None, ..., 0], lambda x: x[None, ..., 0], "movement", ALL, grad=True, fits=lambda s: len(s) >= 1 and s[-1] >= 1),
  Op("getitem_tensor", lambda x: x[Tensor([1, 0, 1, 1])], lambda x: x[np.array([1, 0, 1, 1])], "movement", ALL, grad=True,
     fits=lambda s: len(s) >= 1 and s[0] >= 2),
  # ---- matmul ----
  Op("matmul", lambda a, b: a @ b, _mm, "matmul", "fiu", "small", grad=True, scale_by_abs=True),
  Op("linear", lambda x, w, b: x.linear(w, b), lambda x, w, b: x @ w + b, "custom", "f", grad=True, scale_by_abs=True,
     cases=(C("2d", (3, 4), (4, 5), (5,)), C("3d", (2, 3, 4), (4, 5), (5,)))),
  Op("einsum", lambda a, b: Tensor.einsum("ij,jk->ik", a, b), lambda a, b: np.einsum("ij,jk->ik", *(x.astype(np.int64) if x.dtype.kind == "i" else x for x in (a, b))), "custom", "fi", "small", grad=True, scale_by_abs=True,
     cases=(C("mat", (3, 4), (4, 5)),)),
  # ---- networks ----
  Op("conv2d", lambda x, w, b, **k: x.conv2d(w, b, **k), O.conv2d, "custom", "f", grad=True, scale_by_abs=True,
     cases=(C("plain", (2, 3, 7, 7), (4, 3, 3, 3), (4,)), C("padding", (1, 2, 5, 6), (3, 2, 3, 3), (3,), padding=1),
            C("stride", (1, 2, 7, 7), (2, 2, 3, 3), (2,), stride=2), C("dilation", (1, 2, 7, 7), (2, 2, 3, 3), (2,), dilation=2),
            C("groups", (1, 4, 5, 5), (4, 2, 3, 3), (4,), groups=2), C("noncontig", (2, 3, 6, 5), (4, 3, 2, 2), (4,), view="noncontig"))),
  Op("max_pool2d", lambda x, **k: x.max_pool2d(**k), lambda x, kernel_size, stride: O.pool2d(x, kernel_size, stride, np.max), "custom", "fi",
     grad=True, cases=(C("k2", (2, 3, 6, 6), kernel_size=2, stride=2), C("k3s1", (1, 2, 5, 7), kernel_size=3, stride=1))),
  Op("avg_pool2d", lambda x, **k: x.avg_pool2d(**k), lambda x, kernel_size, stride: O.pool2d(x, kernel_size, stride, np.mean), "custom", "f",
     grad=True, scale_by_abs=True, cases=(C("k2", (2, 3, 6, 6), kernel_size=2, stride=2), C("k3s1", (1, 2, 5, 7), kernel_size=3, stride=1))),
  Op("layernorm", lambda x: x.layernorm(), lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5), "custom", "f",
     grad=True, cases=(C("rows", (4, 6)), C("3d", (2, 3, 8)))),
  Op("batchnorm", lambda x, w, b, m, s: x.batchnorm(w, b, m, s), lambda x, w, b, m, s: (x - m.reshape(1, -1, 1)) * s.reshape(1, -1, 1) * w.reshape(1, -1, 1) + b.reshape(1, -1, 1),
     "custom", "f", ("any", "any", "any", "any", "pos"), grad=True, cases=(C("ncl", (2, 3, 4), (3,), (3,), (3,), (3,)),)),
  Op("scaled_dot_product_attention", lambda q, k, v: q.scaled_dot_product_attention(k, v),
     lambda q, k, v: O.softmax(q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]), -1) @ v, "custom", "f", grad=True,
     cases=(C("bhld", (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)),)),
  # ---- losses (the integer targets come from the "labels" domain) ----
  Op("sparse_categorical_crossentropy", lambda x, y: x.sparse_categorical_crossentropy(y),
     lambda x, y: -np.mean(O.log_softmax(x, -1)[np.arange(len(y)), y]), "custom", "f", ("any", "labels"), grad=True,
     input_dtypes=lambda dt: (dt, dtypes.int32), cases=(C("batch", (6, 4), (6,)),)),
  Op("cross_entropy", lambda x, y: x.cross_entropy(y),
     lambda x, y: -np.mean(O.log_softmax(x, 1)[np.arange(len(y)), y]), "custom", "f", ("any", "labels"), grad=True,
     input_dtypes=lambda dt: (dt, dtypes.int32), cases=(C("batch", (6, 4), (6,)),)),
  Op("binary_crossentropy_logits", lambda x, y: x.binary_crossentropy_logits(y),
     lambda x, y: np.mean(O.softplus(x) - y * x), "custom", "f", ("any", "prob"), grad=True, cases=(C("batch", (6, 3), (6, 3)),)),
  Op("binary_crossentropy", lambda p, y: p.binary_crossentropy(y),
     lambda p, y: -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)), "custom", "f", ("prob", "prob"), grad=True, cases=(C("batch", (6, 3), (6, 3)),)),
  # ---- indexing with tensors ----
  Op("gather", lambda x, i: x.gather(1, i), lambda x, i: np.take_along_axis(x, i.astype(np.int64), 1), "custom", ALL, ("any", "labels"),
     grad=True, input_dtypes=lambda dt: (dt, dtypes.int32), cases=(C("rows", (3, 4), (3, 6)),)),
  Op("one_hot", lambda i: i.one_hot(5), lambda i: np.eye(5, dtype=np.int32)[i.astype(np.int64)], "custom", "iu", "labels",
     cases=(C("vec", (7,)), C("mat", (2, 3)))),
  # ---- creation ----
  Op("zeros", lambda dtype: Tensor.zeros(3, 4, dtype=dtype), lambda dtype: np.zeros((3, 4), O.np_type(dtype)), "custom", ALL,
     cases=(C("3x4"),), dtype_kw=True),
  Op("ones", lambda dtype: Tensor.ones(3, 4, dtype=dtype), lambda dtype: np.ones((3, 4), O.np_type(dtype)), "custom", ALL,
     cases=(C("3x4"),), dtype_kw=True),
  Op("full", lambda dtype: Tensor.full((2, 3), 7, dtype=dtype), lambda dtype: np.full((2, 3), 7).astype(O.np_type(dtype)), "custom", ALL,
     cases=(C("2x3"),), dtype_kw=True),
  Op("arange", lambda dtype: Tensor.arange(2, 27, 3, dtype=dtype), lambda dtype: np.arange(2, 27, 3).astype(O.np_type(dtype)), "custom", "fiu",
     cases=(C("2:27:3"),), dtype_kw=True),
  # 70000 wraps in the small ints: an arange in those raises OverflowError, so the cast of an int32 one wraps it
  Op("arange_big", lambda dtype: Tensor.arange(70000).cast(dtype), lambda dtype: np.arange(70000).astype(O.np_type(dtype)), "custom", "iu",
     cases=(C("70000"),), dtype_kw=True),
  Op("eye", lambda dtype: Tensor.eye(4, 5, dtype=dtype), lambda dtype: np.eye(4, 5).astype(O.np_type(dtype)), "custom", ALL,
     cases=(C("4x5"),), dtype_kw=True),
  Op("linspace", lambda dtype: Tensor.linspace(-1, 2, 7, dtype=dtype), lambda dtype: np.linspace(-1, 2, 7), "custom", "f",
     cases=(C("7"),), dtype_kw=True),
)

OPS_BY_NAME = {op.name: op for op in OPS}
