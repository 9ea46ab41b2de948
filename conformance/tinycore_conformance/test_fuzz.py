"""Section fuzz: random graphs of elementwise, movement and reduce ops (hypothesis) built on the backend and in numpy."""
from __future__ import annotations
from dataclasses import dataclass, field
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor
from tinycore_conformance import oracle as O
from tinycore_conformance.target import Target, target_for, dtype_name
from tinycore_conformance.tolerances import mismatches

pytestmark = pytest.mark.fuzz

# examples per test; "ci" replays the same examples every run (derandomize), "vendor" explores fresh ones
PROFILES = {
  "ci": {"graphs": 25, "movement": 4, "derandomize": True},
  "vendor": {"graphs": 400, "movement": 60, "derandomize": False},
}
MAX_ELEMENTS = 2048   # past this only shrinking and reducing steps are drawn, so graphs stay cheap on slow backends

def profile_settings(config, kind: str) -> settings:
  p = PROFILES[config.getoption("conformance_profile")]
  return settings(max_examples=p[kind], derandomize=p["derandomize"], deadline=None, database=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])

@dataclass
class Graph:
  """The value under construction, on both sides, with a readable log of the steps taken."""
  dt: DType
  np_val: np.ndarray
  t: Tensor
  log: list[str] = field(default_factory=list)
  scale: float = 0.0    # the largest magnitude any intermediate reached: float error is relative to it
  def step(self, what: str, np_val, t: Tensor) -> None:
    self.np_val = self.wrap(np.asarray(np_val))
    self.t = t
    self.log.append(f"{what} -> {self.np_val.shape}")
    if self.np_val.size and O.is_float(self.dt): self.scale = max(self.scale, float(np.max(np.abs(self.np_val))))
  def wrap(self, a: np.ndarray) -> np.ndarray:
    """numpy's mirror keeps the tested dtype's width after every step (ints wrap like the backend's)."""
    if O.is_float(self.dt): return a.astype(np.float64)
    with np.errstate(all="ignore"): return a.astype(O.np_type(self.dt))

def leaf(data, g_dt: DType, shape: tuple, label: str) -> tuple[np.ndarray, Tensor]:
  seed = data.draw(st.integers(0, 2**32 - 1), label=f"{label} seed")
  rng = np.random.default_rng(seed)
  if g_dt == dtypes.bool: vals = rng.random(shape) < 0.5
  elif O.is_int(g_dt):
    lo, hi = O.int_range(g_dt)
    vals = rng.integers(max(lo, -10), min(hi, 10), shape, endpoint=True).astype(O.np_type(g_dt))
  else: vals = O.representable(rng.uniform(-2, 2, shape), g_dt)
  return vals, Tensor(vals, dtype=g_dt)

def broadcastable_shape(data, shape: tuple) -> tuple:
  """A shape that broadcasts to `shape`: each dim kept or set to 1, some leading dims dropped."""
  drop = data.draw(st.integers(0, len(shape)), label="leading dims dropped")
  return tuple(s if data.draw(st.booleans(), label="keep dim") else 1 for s in shape[drop:])

# ***** the steps a graph is built from; each mirrors itself in numpy *****

FLOAT_UNARY = {"neg": (np.negative, lambda t: -t), "relu": (lambda a: np.maximum(a, 0), lambda t: t.relu()), "abs": (np.abs, lambda t: t.abs()),
               "sin": (np.sin, lambda t: t.sin()), "sigmoid": (O.sigmoid, lambda t: t.sigmoid()), "tanh": (np.tanh, lambda t: t.tanh()),
               "sqrt(|x|+0.5)": (lambda a: np.sqrt(np.abs(a) + 0.5), lambda t: (t.abs() + 0.5).sqrt()),
               "1/(|x|+1)": (lambda a: 1 / (np.abs(a) + 1), lambda t: (t.abs() + 1).reciprocal())}
INT_UNARY = {"neg": (np.negative, lambda t: -t), "abs": (np.abs, lambda t: t.abs()), "relu": (lambda a: np.maximum(a, 0), lambda t: t.relu()),
             "x*3": (lambda a: a * 3, lambda t: t * 3), "x^5": (lambda a: a ^ 5, lambda t: t ^ 5), "~x": (np.invert, lambda t: ~t)}
BINARY = {"add": (np.add, lambda a, b: a + b), "sub": (np.subtract, lambda a, b: a - b), "mul": (np.multiply, lambda a, b: a * b),
          "maximum": (np.maximum, lambda a, b: a.maximum(b)), "minimum": (np.minimum, lambda a, b: a.minimum(b))}

def unary_step(data, g: Graph) -> None:
  table = FLOAT_UNARY if O.is_float(g.dt) else INT_UNARY
  name = data.draw(st.sampled_from(sorted(table)), label="unary")
  f_np, f_t = table[name]
  with np.errstate(all="ignore"): g.step(name, f_np(g.np_val), f_t(g.t))

def binary_step(data, g: Graph) -> None:
  name = data.draw(st.sampled_from(sorted(BINARY)), label="binary")
  shape = broadcastable_shape(data, g.np_val.shape)
  other_np, other_t = leaf(data, g.dt, shape, "operand")
  a_np, b_np, a_t, b_t = (g.np_val, other_np, g.t, other_t) if data.draw(st.booleans(), label="graph on the left") else (other_np, g.np_val, other_t, g.t)
  f_np, f_t = BINARY[name]
  with np.errstate(all="ignore"): g.step(f"{name} with input{shape}", f_np(O.as_ref(a_np) if O.is_float(g.dt) else a_np, b_np), f_t(a_t, b_t))

def where_step(data, g: Graph) -> None:
  shape = broadcastable_shape(data, g.np_val.shape)
  cond_np, cond_t = leaf(data, dtypes.bool, shape, "condition")
  other_np, other_t = leaf(data, g.dt, g.np_val.shape, "other")
  g.step(f"where(cond{shape}, x, other)", np.where(cond_np, g.np_val, other_np), cond_t.where(g.t, other_t))

def self_step(data, g: Graph) -> None:
  """x combined with a flipped view of itself: one buffer read through two index maps."""
  axis = data.draw(st.integers(0, g.np_val.ndim - 1), label="flip axis")
  name = data.draw(st.sampled_from(sorted(BINARY)), label="binary with itself")
  f_np, f_t = BINARY[name]
  with np.errstate(all="ignore"): g.step(f"{name}(x, flip(x, {axis}))", f_np(g.np_val, np.flip(g.np_val, axis)), f_t(g.t, g.t.flip(axis)))

def permute_step(data, g: Graph) -> None:
  order = tuple(data.draw(st.permutations(range(g.np_val.ndim)), label="order"))
  g.step(f"permute{order}", np.transpose(g.np_val, order), g.t.permute(order))

def reshape_step(data, g: Graph) -> None:
  shape = g.np_val.shape
  kinds = ["flatten", "split"] + (["merge"] if len(shape) >= 2 else [])
  kind = data.draw(st.sampled_from(kinds), label="reshape kind")
  if kind == "flatten": new = (int(np.prod(shape)),)
  elif kind == "split":
    d = data.draw(st.integers(0, len(shape) - 1), label="dim to split")
    f = data.draw(st.sampled_from([k for k in range(1, shape[d] + 1) if shape[d] % k == 0]), label="factor")
    new = shape[:d] + (f, shape[d] // f) + shape[d + 1:]
  else:
    d = data.draw(st.integers(0, len(shape) - 2), label="dims to merge")
    new = shape[:d] + (shape[d] * shape[d + 1],) + shape[d + 2:]
  g.step(f"reshape{new}", g.np_val.reshape(new), g.t.reshape(new))

def expand_step(data, g: Graph) -> None:
  pos = data.draw(st.integers(0, g.np_val.ndim), label="new axis")
  k = data.draw(st.integers(2, 3), label="expanded to")
  shape = g.np_val.shape[:pos] + (k,) + g.np_val.shape[pos:]
  g.step(f"unsqueeze({pos}).expand{shape}", np.broadcast_to(np.expand_dims(g.np_val, pos), shape), g.t.unsqueeze(pos).expand(shape))

def pad_step(data, g: Graph) -> None:
  pads = tuple((data.draw(st.integers(0, 2), label="pad before"), data.draw(st.integers(0, 2), label="pad after")) for _ in g.np_val.shape)
  g.step(f"pad{pads}", np.pad(g.np_val, pads), g.t.pad(pads))

def shrink_step(data, g: Graph) -> None:
  arg = []
  for s in g.np_val.shape:
    b = data.draw(st.integers(0, s - 1), label="shrink start")
    arg.append((b, data.draw(st.integers(b + 1, s), label="shrink end")))
  g.step(f"shrink{tuple(arg)}", g.np_val[tuple(slice(b, e) for b, e in arg)], g.t.shrink(tuple(arg)))

def flip_step(data, g: Graph) -> None:
  axis = data.draw(st.integers(0, g.np_val.ndim - 1), label="flip axis")
  g.step(f"flip({axis})", np.flip(g.np_val, axis), g.t.flip(axis))

def reduce_step(data, g: Graph) -> None:
  axis = data.draw(st.integers(0, g.np_val.ndim - 1), label="reduce axis")
  keep = g.np_val.ndim == 1 or data.draw(st.booleans(), label="keepdim")
  op = data.draw(st.sampled_from(["sum", "max"]), label="reduce op")
  if op == "sum": want = np.sum(g.np_val, axis=axis, keepdims=keep, dtype=g.np_val.dtype)
  else: want = np.max(g.np_val, axis=axis, keepdims=keep)
  g.step(f"{op}(axis={axis}, keepdim={keep})", want, g.t.sum(axis, keepdim=keep) if op == "sum" else g.t.max(axis, keepdim=keep))

def contiguous_step(data, g: Graph) -> None: g.step("contiguous", g.np_val, g.t.contiguous())

COMPUTE = {"unary": unary_step, "binary": binary_step, "where": where_step, "self": self_step, "reduce": reduce_step}
MOVEMENT = {"permute": permute_step, "reshape": reshape_step, "expand": expand_step, "pad": pad_step, "shrink": shrink_step,
            "flip": flip_step, "contiguous": contiguous_step}
SHRINKING = ("shrink", "reduce")

def build(data, dt: DType, steps: dict) -> Graph:
  shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3), label="input shape"))
  vals, t = leaf(data, dt, shape, "input")
  g = Graph(dt, vals.astype(np.float64) if O.is_float(dt) else vals, t, [f"input{shape} {dtype_name(dt)}"])
  if vals.size and O.is_float(dt): g.scale = float(np.max(np.abs(vals)))
  for _ in range(data.draw(st.integers(1, 8), label="steps")):
    big, deep = g.np_val.size > MAX_ELEMENTS, g.np_val.ndim >= 4
    menu = [k for k in steps if (not big or k in SHRINKING) and not (deep and k == "expand")]
    steps[data.draw(st.sampled_from(menu), label="step")](data, g)
  return g

def check(g: Graph) -> None:
  got = g.t.numpy()
  want = g.np_val if O.is_float(g.dt) else g.np_val.astype(O.np_type(g.dt))
  if (why := mismatches(got, want, dtype_name(g.dt), scale=g.scale)) is not None:
    raise AssertionError(f"random graph in {dtype_name(g.dt)}: {why}\n  " + "\n  ".join(g.log))

def pytest_generate_tests(metafunc) -> None:
  t = target_for(metafunc.config)
  if metafunc.function.__name__ == "test_random_movement":
    metafunc.parametrize("dtype", t.dtypes, ids=[dtype_name(d) for d in t.dtypes])

@pytest.mark.covers("random graph")
@pytest.mark.parametrize("kind", ["float", "int"])
def test_random_graph(device, target: Target, request, kind):
  """Elementwise, movement and reduce ops in random order, with realize boundaries drawn too."""
  dt = target.default_float if kind == "float" else target.default_int
  if dt is None: pytest.skip(f"{target.name} declares no {kind} dtype")
  request.node.user_properties.append(("dtype", dtype_name(dt)))
  @profile_settings(request.config, "graphs")
  @given(st.data())
  def run(data): check(build(data, dt, COMPUTE | MOVEMENT))
  run()

@pytest.mark.covers("random movement")
def test_random_movement(device, request, dtype):
  """Only data movement (and where), so every declared dtype must come back bit-exact."""
  @profile_settings(request.config, "movement")
  @given(st.data())
  def run(data): check(build(data, dtype, MOVEMENT | {"where": where_step}))
  run()
