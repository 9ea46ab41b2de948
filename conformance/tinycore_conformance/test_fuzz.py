"""Section fuzz: random Tensor programs (hypothesis) over constants, aranges, data and views of realized buffers, at sizes
around every tile, vector, block and split length the codegen uses, run on the backend and mirrored in numpy."""
from __future__ import annotations
import math
from dataclasses import dataclass, field
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from tinycore.dtype import DType, dtypes, least_upper_dtype
from tinycore.tensor import Tensor
from tinycore.codegen.reduce import SUM_CHUNK
from tinycore.codegen.opt.cpu import TAP_TRIPS, TAP_ENUMERATE
from tinycore.schedule import REDUCE_SPLIT
from tinycore_conformance import oracle as O
from tinycore_conformance.target import Target, target_for, dtype_name
from tinycore_conformance.tolerances import mismatches, tolerance

pytestmark = pytest.mark.fuzz

# programs per test. "ci" runs the same ones every run (derandomize) and reports a failing one as it was drawn (its code
# is in the message); "vendor" draws fresh ones, `--fuzz-programs N` of them per random-program test (and N/10 per
# dtype's movement test) where given, and shrinks a failing one to a small reproducer
PROFILES = {
  "ci": {"programs": 250, "movement": 4, "derandomize": True, "phases": (Phase.explicit, Phase.generate)},
  "vendor": {"programs": 2000, "movement": 200, "derandomize": False, "phases": tuple(Phase)},
}

def profile_settings(config, kind: str) -> settings:
  p = PROFILES[config.getoption("conformance_profile")]
  n = p[kind] if (asked := config.getoption("fuzz_programs", None)) is None else max(1, asked if kind == "programs" else asked // 10)
  return settings(max_examples=n, derandomize=p["derandomize"], phases=p["phases"], deadline=None, database=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])

# ***** sizes: 1, primes, and the lengths the codegen treats specially, each -1, +0 and +1 *****
PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 97, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 99991)

def special_sizes(ren, cap: int) -> tuple[int, ...]:
  """Powers of two (vector widths, register tiles, workgroups, SUM_CHUNK and its square, REDUCE_SPLIT), the target's own
  widths, thread count and register tiles (a few vectors wide), a sum's blocks, and the tap limits."""
  lengths = {1 << k for k in range(1, 18)} | {SUM_CHUNK, SUM_CHUNK ** 2, REDUCE_SPLIT, TAP_TRIPS, TAP_ENUMERATE, 3 * SUM_CHUNK, 5 * SUM_CHUNK}
  widths = {ren.vector_width, ren.upcast_max, max(ren.threads, 1), ren.max_threads_per_group, *(ren.local_max or ())}
  lengths |= {w * m for w in widths if w > 1 for m in range(1, 9)}
  return tuple(sorted(s for s in {1, *PRIMES} | {n + d for n in lengths for d in (-1, 0, 1)} if 1 <= s <= cap))

@dataclass
class Fuzz:
  """What the drawing needs to know of the target: its dtypes, the sizes to draw from, and the largest program."""
  target: Target
  sizes: tuple[int, ...]
  cap: int

# ***** values: every number a program starts from (data, constants, arange starts and steps) comes from here *****

def values(rng: np.random.Generator, dt: DType, shape: tuple) -> np.ndarray:
  """Random values of `dt` in its numpy carrier: bools, small integers, floats in [-2, 2] rounded to dt."""
  if dt == dtypes.bool: return rng.random(shape) < 0.5
  if O.is_int(dt):
    lo, hi = O.int_range(dt)
    return rng.integers(max(lo, -10), min(hi, 10), shape, endpoint=True).astype(O.np_type(dt))
  return O.representable(rng.uniform(-2, 2, shape), dt)

def draw_values(data, dt: DType, shape: tuple, label: str) -> tuple[np.ndarray, str]:
  seed = data.draw(st.integers(0, 2**32 - 1), label=f"{label} seed")
  return values(np.random.default_rng(seed), dt, shape), f"values({dtype_name(dt)}, {shape}, seed={seed})"

def draw_scalar(data, dt: DType, label: str):
  """A Python scalar of dt's kind (bool, int or float) with a value of dt."""
  return draw_values(data, dt, (), label)[0].item()

def arange_steps(dt: DType, n: int) -> list[float]:
  """The steps of an arange of n elements, from a start in [-5, 5], whose values are all exact in dt and within its room."""
  steps = [1, 2, -1, 3] + ([0.5, -0.25] if O.is_float(dt) else [])
  if not O.is_float(dt): return steps
  exact = 2.0 ** ((7 if dt == dtypes.bfloat16 else np.finfo(O.np_type(dt)).nmant) + 1)   # integers up to here are exact
  return [s for s in steps if 5 + n * abs(s) <= min(room(dt), exact * min(1, abs(s)))]

# ***** the program under construction, on both sides *****

@dataclass
class Graph:
  """The value under construction on the backend (t) and in numpy (np_val, rounded to dt after every step), with the
  program so far as code, the largest magnitude the error is relative to (scale), the loosest float dtype it passed
  through (tol), and whether numpy's value is the backend's exactly (no float arithmetic rounded it yet)."""
  dt: DType
  np_val: np.ndarray
  t: Tensor
  log: list[str] = field(default_factory=list)
  scale: float = 0.0
  tol: str | None = None
  exact: bool = True
  def step(self, code: str, np_val, t: Tensor, dt: DType | None = None, exact: bool = True) -> None:
    self.dt = dt or self.dt
    self.np_val, self.t = round_to(np.asarray(np_val), self.dt), t
    self.exact = self.exact and exact
    self.log.append(code)
    if O.is_float(self.dt):
      if self.tol is None or tolerance(dtype_name(self.dt))[1] > tolerance(self.tol)[1]: self.tol = dtype_name(self.dt)
      if self.np_val.size: self.scale = max(self.scale, float(np.max(np.abs(self.np_val))))
  @property
  def bound(self) -> float: return float(np.max(np.abs(self.np_val.astype(np.float64)))) if self.np_val.size else 0.0
  @property
  def room(self) -> float: return room(self.dt)

def round_to(a: np.ndarray, dt: DType) -> np.ndarray:
  """numpy's mirror holds dt's values: floats rounded to dt (kept in float64), ints wrapped to dt's width."""
  if O.is_float(dt): return O.representable(a, dt).astype(np.float64)
  with np.errstate(all="ignore"): return a.astype(O.np_type(dt))

def room(dt: DType) -> float:
  """How large a float value may grow: a quarter of dt's largest finite value (never near overflow, where numpy's
  float64 arithmetic and the backend's rounding could disagree on inf). Integers wrap alike on both sides."""
  return float(np.finfo(np.float32).max if dt == dtypes.bfloat16 else np.finfo(O.np_type(dt)).max) / 4 if O.is_float(dt) else math.inf

def draw_shape(data, fz: Fuzz, budget: int, label: str, max_dims: int = 4) -> tuple[int, ...]:
  shape: list[int] = []
  for i in range(data.draw(st.integers(1, max_dims), label=f"{label} dims")):
    shape.append(s := data.draw(st.sampled_from([s for s in fz.sizes if s <= budget]), label=f"{label} dim {i}"))
    budget //= s
  return tuple(shape)

def leaf(data, fz: Fuzz, dt: DType, shape: tuple, label: str) -> tuple[np.ndarray, Tensor, str]:
  """A constant, ones/zeros, an arange, random data, or a view of a realized buffer, of dtype dt and this shape."""
  n = math.prod(shape)
  # hypothesis draws the first choices of a list most often (and shrinks towards them): the kinds most likely to meet a
  # special case first
  kinds = ["full"] + (["arange"] if dt != dtypes.bool and arange_steps(dt, n) else []) + ["data"] + (["view"] if shape else []) + ["ones", "zeros"]
  kind = data.draw(st.sampled_from(kinds), label=f"{label} kind")
  name = f"dtypes.{dtype_name(dt)}"
  if kind == "full":
    c = draw_scalar(data, dt, label)
    return np.full(shape, c, O.np_type(dt)), Tensor.full(shape, c, dtype=dt), f"Tensor.full({shape}, {c!r}, dtype={name})"
  if kind in ("ones", "zeros"):
    return np.full(shape, kind == "ones", O.np_type(dt)), getattr(Tensor, kind)(*shape, dtype=dt), f"Tensor.{kind}(*{shape}, dtype={name})"
  if kind == "arange":
    start = data.draw(st.integers(-5, 5), label="arange start")
    step = data.draw(st.sampled_from(arange_steps(dt, n)), label="arange step")
    vals = (start + step * np.arange(n)).reshape(shape)
    if O.is_float(dt) or (O.int_range(dt)[0] <= vals.min() and vals.max() <= O.int_range(dt)[1]):
      return round_to(vals, dt), Tensor.arange(start, start + n * step, step, dtype=dt).reshape(shape), f"Tensor.arange({start}, {start + n * step}, {step}, dtype={name}).reshape({shape})"
    with np.errstate(all="ignore"):   # past dt's range: an int32 arange cast to dt wraps like numpy's astype
      return vals.astype(O.np_type(dt)), Tensor.arange(start, start + n * step, step).cast(dt).reshape(shape), f"Tensor.arange({start}, {start + n * step}, {step}).cast({name}).reshape({shape})"
  if kind == "view":
    # a window of a larger realized buffer (an offset and strides), maybe flipped, maybe stored transposed
    pads = [(data.draw(st.integers(0, 2), label="view before"), data.draw(st.integers(0, 2), label="view after")) for _ in shape]
    order = tuple(data.draw(st.permutations(range(len(shape))), label="view stored order"))
    stored = tuple((shape[i] + pads[i][0] + pads[i][1]) for i in order)
    base, code = draw_values(data, dt, stored, label)
    back = tuple(int(i) for i in np.argsort(order))
    np_v, t = np.transpose(base, back), Tensor(base, dtype=dt).realize().permute(back)
    window = tuple((b, b + s) for (b, _), s in zip(pads, shape))
    np_v, t = np_v[tuple(slice(b, e) for b, e in window)], t.shrink(window)
    code = f"Tensor({code}).realize().permute({back}).shrink({window})"
    if data.draw(st.booleans(), label="view flipped"):
      np_v, t, code = np.flip(np_v, 0), t.flip(0), code + ".flip(0)"
    return np_v, t, code
  vals, code = draw_values(data, dt, shape, label)
  return vals, Tensor(vals, dtype=dt), f"Tensor({code})"

def broadcastable_shape(data, shape: tuple) -> tuple:
  """A shape that broadcasts to `shape`: each dim kept or set to 1, some leading dims dropped."""
  drop = data.draw(st.integers(0, len(shape)), label="leading dims dropped")
  return tuple(s if data.draw(st.booleans(), label="keep dim") else 1 for s in shape[drop:])

# ***** the steps a program is built from; each mirrors itself in numpy *****

FLOAT_UNARY = {"neg": (np.negative, lambda t: -t, "-x"), "relu": (lambda a: np.maximum(a, 0), lambda t: t.relu(), "x.relu()"),
               "abs": (np.abs, lambda t: t.abs(), "x.abs()"), "sin": (np.sin, lambda t: t.sin(), "x.sin()"),
               "sigmoid": (O.sigmoid, lambda t: t.sigmoid(), "x.sigmoid()"), "tanh": (np.tanh, lambda t: t.tanh(), "x.tanh()"),
               "sqrt(|x|+0.5)": (lambda a: np.sqrt(np.abs(a) + 0.5), lambda t: (t.abs() + 0.5).sqrt(), "(x.abs() + 0.5).sqrt()"),
               "1/(|x|+1)": (lambda a: 1 / (np.abs(a) + 1), lambda t: (t.abs() + 1).reciprocal(), "(x.abs() + 1).reciprocal()")}
EXACT_UNARY = ("neg", "relu", "abs")   # no rounding: numpy's value stays the backend's exactly
INT_UNARY = {"neg": (np.negative, lambda t: -t, "-x"), "abs": (np.abs, lambda t: t.abs(), "x.abs()"),
             "relu": (lambda a: np.maximum(a, 0), lambda t: t.relu(), "x.relu()"), "x*3": (lambda a: a * 3, lambda t: t * 3, "x * 3"),
             "x^5": (lambda a: a ^ 5, lambda t: t ^ 5, "x ^ 5"), "~x": (np.invert, lambda t: ~t, "~x")}
BINARY = {"add": (np.add, lambda a, b: a + b, "{} + {}"), "sub": (np.subtract, lambda a, b: a - b, "{} - {}"),
          "mul": (np.multiply, lambda a, b: a * b, "{} * {}"), "maximum": (np.maximum, lambda a, b: a.maximum(b), "{}.maximum({})"),
          "minimum": (np.minimum, lambda a, b: a.minimum(b), "{}.minimum({})")}

def growth(op: str, a: float, b: float) -> float:
  """The largest magnitude op can give from operands of magnitudes a and b."""
  return a * b if op == "mul" else a + b if op in ("add", "sub") else max(a, b)

def unary_step(data, fz: Fuzz, g: Graph) -> None:
  table = FLOAT_UNARY if O.is_float(g.dt) else INT_UNARY
  name = data.draw(st.sampled_from(sorted(table)), label="unary")
  f_np, f_t, code = table[name]
  with np.errstate(all="ignore"): g.step(f"x = {code}", f_np(g.np_val), f_t(g.t), exact=not O.is_float(g.dt) or name in EXACT_UNARY)

def binary(data, g: Graph, other_np, other_t, other_code: str, b: float) -> None:
  """g op other, the operand on either side; ops that could pass the dtype's room are not offered."""
  name = data.draw(st.sampled_from([k for k in sorted(BINARY) if growth(k, g.bound, b) <= g.room]), label="binary")
  f_np, f_t, code = BINARY[name]
  # a Python scalar takes maximum/minimum as their argument only (c.maximum(x) is not a thing)
  left = data.draw(st.booleans(), label="graph on the left") if isinstance(other_t, Tensor) or name not in ("maximum", "minimum") else True
  a_np, b_np, a_t, b_t, ca, cb = (g.np_val, other_np, g.t, other_t, "x", other_code) if left else (other_np, g.np_val, other_t, g.t, other_code, "x")
  with np.errstate(all="ignore"):
    g.step("x = " + code.format(ca, cb), f_np(a_np, b_np), f_t(a_t, b_t), exact=not O.is_float(g.dt) or name in ("maximum", "minimum"))

def binary_step(data, fz: Fuzz, g: Graph) -> None:
  shape = broadcastable_shape(data, g.np_val.shape)
  o_np, o_t, code = leaf(data, fz, g.dt, shape, "operand")
  binary(data, g, round_to(o_np, g.dt), o_t, code, float(np.max(np.abs(o_np))) if o_np.size else 0.0)

def const_step(data, fz: Fuzz, g: Graph) -> None:
  """x op c with a Python scalar of x's kind (a constant folded into the kernel)."""
  c = draw_scalar(data, g.dt, "constant")
  binary(data, g, np.asarray(c, O.np_type(g.dt)), c, repr(c), abs(c))

def self_step(data, fz: Fuzz, g: Graph) -> None:
  """x combined with a flipped view of itself: one buffer read through two index maps."""
  axis = data.draw(st.integers(0, g.np_val.ndim - 1), label="flip axis")
  name = data.draw(st.sampled_from([k for k in sorted(BINARY) if growth(k, g.bound, g.bound) <= g.room]), label="binary with itself")
  f_np, f_t, code = BINARY[name]
  with np.errstate(all="ignore"):
    g.step("x = " + code.format("x", f"x.flip({axis})"), f_np(g.np_val, np.flip(g.np_val, axis)), f_t(g.t, g.t.flip(axis)),
           exact=not O.is_float(g.dt) or name in ("maximum", "minimum"))

def where_step(data, fz: Fuzz, g: Graph) -> None:
  cond_np, cond_t, c_code = leaf(data, fz, dtypes.bool, broadcastable_shape(data, g.np_val.shape), "condition")
  other_np, other_t, o_code = leaf(data, fz, g.dt, g.np_val.shape, "other")
  g.step(f"x = {c_code}.where(x, {o_code})", np.where(cond_np, g.np_val, round_to(other_np, g.dt)), cond_t.where(g.t, other_t))

def cast_targets(fz: Fuzz, g: Graph) -> list[DType]:
  """The dtypes x can be cast to with the same value on both sides: floats that hold its magnitude; from floats, ints
  and bool only while numpy's value is the backend's exactly (truncation and != 0 are discontinuous), and ints only
  where every value fits."""
  out = []
  lo, hi = (float(g.np_val.min()), float(g.np_val.max())) if g.np_val.size else (0.0, 0.0)
  for d in fz.target.dtypes:
    if d == g.dt: continue
    if O.is_float(d): ok = g.bound <= room(d)
    elif not O.is_float(g.dt) or d == dtypes.bool: ok = g.exact or not O.is_float(g.dt)
    else: ok = g.exact and O.int_range(d)[0] <= math.trunc(lo) and math.trunc(hi) <= O.int_range(d)[1]
    if ok: out.append(d)
  return out

def cast_step(data, fz: Fuzz, g: Graph) -> None:
  d = data.draw(st.sampled_from(cast_targets(fz, g)), label="cast to")
  with np.errstate(all="ignore"):
    want = g.np_val != 0 if d == dtypes.bool else np.trunc(g.np_val) if O.is_float(g.dt) and not O.is_float(d) else g.np_val
    exact = bool(np.all(round_to(want.astype(np.float64), d) == want)) if O.is_float(d) else True
  g.step(f"x = x.cast(dtypes.{dtype_name(d)})", want, g.t.cast(d), d, exact)

def permute_step(data, fz: Fuzz, g: Graph) -> None:
  order = tuple(data.draw(st.permutations(range(g.np_val.ndim)), label="order"))
  g.step(f"x = x.permute({order})", np.transpose(g.np_val, order), g.t.permute(order))

def divisors(n: int) -> list[int]:
  small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
  return sorted(set(small + [n // k for k in small]))

def reshape_step(data, fz: Fuzz, g: Graph) -> None:
  shape = g.np_val.shape
  kinds = ["flatten"] + (["split"] if shape else []) + (["merge"] if len(shape) >= 2 else [])
  kind = data.draw(st.sampled_from(kinds), label="reshape kind")
  if kind == "flatten": new = (int(np.prod(shape)),)
  elif kind == "split":
    d = data.draw(st.integers(0, len(shape) - 1), label="dim to split")
    f = data.draw(st.sampled_from(divisors(shape[d])), label="factor")
    new = shape[:d] + (f, shape[d] // f) + shape[d + 1:]
  else:
    d = data.draw(st.integers(0, len(shape) - 2), label="dims to merge")
    new = shape[:d] + (shape[d] * shape[d + 1],) + shape[d + 2:]
  g.step(f"x = x.reshape({new})", g.np_val.reshape(new), g.t.reshape(new))

def expand_step(data, fz: Fuzz, g: Graph) -> None:
  pos = data.draw(st.integers(0, g.np_val.ndim), label="new axis")
  k = data.draw(st.integers(2, 3), label="expanded to")
  shape = g.np_val.shape[:pos] + (k,) + g.np_val.shape[pos:]
  g.step(f"x = x.unsqueeze({pos}).expand({shape})", np.broadcast_to(np.expand_dims(g.np_val, pos), shape), g.t.unsqueeze(pos).expand(shape))

def pad_step(data, fz: Fuzz, g: Graph) -> None:
  pads = tuple((data.draw(st.integers(0, 2), label="pad before"), data.draw(st.integers(0, 2), label="pad after")) for _ in g.np_val.shape)
  g.step(f"x = x.pad({pads})", np.pad(g.np_val, pads), g.t.pad(pads))

def shrink_step(data, fz: Fuzz, g: Graph) -> None:
  arg = []
  for s in g.np_val.shape:
    b = data.draw(st.integers(0, s - 1), label="shrink start")
    arg.append((b, data.draw(st.integers(b + 1, s), label="shrink end")))
  g.step(f"x = x.shrink({tuple(arg)})", g.np_val[tuple(slice(b, e) for b, e in arg)], g.t.shrink(tuple(arg)))

def flip_step(data, fz: Fuzz, g: Graph) -> None:
  axis = data.draw(st.integers(0, g.np_val.ndim - 1), label="flip axis")
  g.step(f"x = x.flip({axis})", np.flip(g.np_val, axis), g.t.flip(axis))

def sum_dtype(dt: DType) -> DType:
  """The dtype a sum returns: bool and narrow ints widen to 32 bits (like PyTorch), the rest keep theirs."""
  if dt == dtypes.bool: return dtypes.int32
  return least_upper_dtype(dt, dtypes.uint32 if O.int_range(dt)[0] == 0 else dtypes.int32) if O.is_int(dt) else dt

def reduce_ops(fz: Fuzz, g: Graph, n: int) -> list[str]:
  """Reductions over n elements each: a float sum only while n terms stay within the dtype's room, a mean of integers
  where float32 is declared (it returns float32)."""
  ops = ["sum"] if not O.is_float(g.dt) or g.bound * n <= g.room else []
  if O.is_float(g.dt) or dtypes.float32 in fz.target.dtypes: ops.append("mean")
  return ops + ["max", "min"]

def reduce_step(data, fz: Fuzz, g: Graph) -> None:
  nd = g.np_val.ndim
  axes = None if nd == 0 or data.draw(st.booleans(), label="over all axes") else \
    tuple(sorted(data.draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True), label="reduce axes")))
  keep = data.draw(st.booleans(), label="keepdim")
  n = math.prod(g.np_val.shape[a] for a in (axes if axes is not None else range(nd)))
  op = data.draw(st.sampled_from(reduce_ops(fz, g, n)), label="reduce op")
  a = g.np_val
  if op == "sum":
    dt = sum_dtype(g.dt)
    if O.is_float(dt):
      want = np.sum(a, axis=axes, keepdims=keep)
      # a sum's error is relative to its terms' magnitudes; half sums accumulate in float32 and round once
      acc = min(1.0, tolerance("float32")[1] / tolerance(dtype_name(dt))[1])
      if a.size: g.scale = max(g.scale, acc * float(np.max(np.sum(np.abs(a), axis=axes))))
    else:
      with np.errstate(all="ignore"): want = np.sum(a.astype(O.np_type(dt)), axis=axes, keepdims=keep, dtype=O.np_type(dt))
    exact = not O.is_float(dt)
  elif op == "mean":
    dt = g.dt if O.is_float(g.dt) else dtypes.float32
    want, exact = np.mean(a.astype(np.float64), axis=axes, keepdims=keep), False
  else: dt, want, exact = g.dt, (np.max if op == "max" else np.min)(a, axis=axes, keepdims=keep), True
  g.step(f"x = x.{op}({axes}, keepdim={keep})", want, getattr(g.t, op)(axes, keepdim=keep), dt, exact)

def realize_step(data, fz: Fuzz, g: Graph) -> None: g.step("x = x.realize()", g.np_val, g.t.realize())
def contiguous_step(data, fz: Fuzz, g: Graph) -> None: g.step("x = x.contiguous()", g.np_val, g.t.contiguous())

def menu(fz: Fuzz, g: Graph, allowed: set[str]) -> list[str]:
  """The steps that apply to g as it is: by its dtype's kind, its rank, and how far its size and magnitude may grow."""
  nd, n = g.np_val.ndim, g.np_val.size
  out = ["reduce"] + (["const", "binary", "unary"] + (["self"] if nd else []) if g.dt != dtypes.bool else [])
  out += (["cast"] if cast_targets(fz, g) else []) + ["where", "reshape"] + (["expand"] if n * 3 <= fz.cap and nd < 4 else [])
  if nd: out += ["permute", "flip", "shrink"] + (["pad"] if math.prod(s + 4 for s in g.np_val.shape) <= 2 * fz.cap else [])
  return [k for k in out + ["realize", "contiguous"] if k in allowed]

STEPS = {"unary": unary_step, "binary": binary_step, "const": const_step, "self": self_step, "where": where_step, "cast": cast_step,
         "reduce": reduce_step, "permute": permute_step, "reshape": reshape_step, "expand": expand_step, "pad": pad_step,
         "shrink": shrink_step, "flip": flip_step, "realize": realize_step, "contiguous": contiguous_step}
MOVEMENT = {"permute", "reshape", "expand", "pad", "shrink", "flip", "realize", "contiguous", "where"}

def build(data, fz: Fuzz, dt: DType, allowed: set[str]) -> Graph:
  budget = data.draw(st.sampled_from(sorted({min(fz.cap, b) for b in (64, 1024, 16384, fz.cap)})), label="elements at most")
  shape = draw_shape(data, fz, budget, "input")
  vals, t, code = leaf(data, fz, dt, shape, "input")
  g = Graph(dt, vals, t)
  g.step(f"x = {code}", vals, t)
  for _ in range(data.draw(st.integers(1, 8), label="steps")):
    STEPS[data.draw(st.sampled_from(menu(fz, g, allowed)), label="step")](data, fz, g)
  return g

def check(g: Graph) -> None:
  program = "\n  ".join(g.log)
  assert g.t.dtype == g.dt, f"random program gives {g.t.dtype}, expected {g.dt} (the dtype rules of tinycore.dtype):\n  {program}"
  got = g.t.numpy()
  want = g.np_val if O.is_float(g.dt) else g.np_val.astype(O.np_type(g.dt))
  tol = g.tol if O.is_float(g.dt) else dtype_name(g.dt)   # an int or bool result came out of exact values only
  if (why := mismatches(got, want, tol, scale=g.scale)) is not None:
    raise AssertionError(f"random program in {dtype_name(g.dt)}: {why}\n  {program}")

def fuzz_for(target: Target) -> Fuzz:
  cap = int(target.cap("fuzz_elements"))
  return Fuzz(target, special_sizes(target.renderer, cap), cap)

def pytest_generate_tests(metafunc) -> None:
  t = target_for(metafunc.config)
  if metafunc.function.__name__ == "test_random_movement":
    metafunc.parametrize("dtype", t.dtypes, ids=[dtype_name(d) for d in t.dtypes])

@pytest.mark.covers("random graph")
@pytest.mark.parametrize("kind", ["float", "int"])
def test_random_graph(device, target: Target, request, kind):
  """Programs of constants, aranges, data and views; elementwise ops, casts, movement and reductions in random order,
  with realize boundaries; at sizes around the codegen's tile, vector, block and split lengths."""
  dt = target.default_float if kind == "float" else target.default_int
  if dt is None: pytest.skip(f"{target.name} declares no {kind} dtype")
  request.node.user_properties.append(("dtype", dtype_name(dt)))
  fz = fuzz_for(target)
  @profile_settings(request.config, "programs")
  @given(st.data())
  def run(data): check(build(data, fz, dt, set(STEPS)))
  run()

@pytest.mark.covers("random movement")
def test_random_movement(device, target: Target, request, dtype):
  """Only data movement (and where), so every declared dtype must come back bit-exact."""
  fz = fuzz_for(target)
  @profile_settings(request.config, "movement")
  @given(st.data())
  def run(data): check(build(data, fz, dtype, MOVEMENT))
  run()
