"""Running one op case on the backend and in numpy: input views, forward comparison, and gradients by central differences."""
from __future__ import annotations
import warnings
import numpy as np
import pytest
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor
from tinycore.runtime.device import Device
from tinycore.runtime.errors import TinycoreError, UnsupportedError
from tinycore_conformance import oracle as O
from tinycore_conformance.optable import Op, Case
from tinycore_conformance.target import dtype_name
from tinycore_conformance.tolerances import assert_close

# ***** views: the same movement ops applied to a numpy array and to a Tensor *****

def base_shape(view: str | None, shape: tuple) -> tuple:
  """The shape of the buffer a view of `shape` is taken from."""
  if view is None or not shape: return shape
  if view == "expand": return (1,) + shape[1:]
  if len(shape) == 1: return (shape[0] + 1,)
  return shape[:-2] + (shape[-1] + 1, shape[-2] + 1)

def view_np(view: str | None, a: np.ndarray, shape: tuple) -> np.ndarray:
  if view is None or not shape: return a
  if view == "expand": return np.broadcast_to(a, shape)
  if len(shape) == 1: return a[1:][::-1]
  return np.swapaxes(a, -1, -2)[..., 1:, 1:][::-1]

def view_t(view: str | None, t: Tensor, shape: tuple) -> Tensor:
  if view is None or not shape: return t
  if view == "expand": return t.expand(shape)
  if len(shape) == 1: return t.shrink(((1, shape[0] + 1),)).flip(0)
  t = t.transpose(-1, -2)
  return t.shrink(tuple((0, s) for s in t.shape[:-2]) + ((1, shape[-2] + 1), (1, shape[-1] + 1))).flip(0)

# ***** inputs *****

def make_inputs(op: Op, case: Case, dt: DType, rng: np.random.Generator, domain: str | tuple | None = None) -> tuple[list, tuple]:
  """Base values (numpy arrays before the case's view, or Python scalars) and their dtypes."""
  n = len(case.shapes)
  if n == 0: return [], ()
  dts = op.input_dtypes(dt) if op.input_dtypes is not None else (dt,) * n
  doms = (domain if isinstance(domain, tuple) else (domain,) * n) if domain is not None else op.domains(n)
  bases = [() if s is None else base_shape(case.view, tuple(s)) for s in case.shapes]
  if doms[0] == "divpair": vals = list(O.divpair(rng, dt, bases[0], bases[1]))
  else: vals = [O.sample(rng, d, b, dom) for d, b, dom in zip(dts, bases, doms)]
  return [v.item() if s is None else v for v, s in zip(vals, case.shapes)], dts

def tensors_of(case: Case, vals: list, dts: tuple, requires_grad: bool = False) -> tuple[list, list]:
  """(leaf tensors or scalars, the op's inputs: leaves with the case's view applied)."""
  leaves = [v if s is None else Tensor(v, dtype=d, requires_grad=requires_grad and O.is_float(d) or None) for v, d, s in zip(vals, dts, case.shapes)]
  return leaves, [x if s is None else view_t(case.view, x, tuple(s)) for x, s in zip(leaves, case.shapes)]

def refs_of(case: Case, vals: list) -> list:
  return [v if s is None else O.as_ref(view_np(case.view, v, tuple(s))) for v, s in zip(vals, case.shapes)]

def abs_of(x): return abs(x) if not isinstance(x, np.ndarray) or x.dtype.kind == "f" else np.abs(x.astype(np.float64))

def _listify(x) -> list: return list(x) if isinstance(x, (list, tuple)) else [x]

def reference(op: Op, case: Case, refs: list, dt: DType):
  kw = dict(case.kw) | ({"dtype": dt} if op.dtype_kw else {})
  with np.errstate(all="ignore"), warnings.catch_warnings():  # numpy warns about empty means; tinycore's nan is the answer
    warnings.simplefilter("ignore", RuntimeWarning)
    return op.ref(*refs, **kw)

def run_op(op: Op, case: Case, ins: list, dt: DType):
  return op.fn(*ins, **(dict(case.kw) | ({"dtype": dt} if op.dtype_kw else {})))

def refused(what: str, e: UnsupportedError, outs: list | None = None) -> None:
  """A backend refused an op whose inputs are all dtypes it declares (the `inputs_declared` fixture skipped the rest).
  That is a clean skip only when the op's result is of a dtype the backend does not declare (rule 6: refuse rather
  than compute garbage); otherwise a declared feature does not work, and that is a failure."""
  tensors = [o for o in outs or [] if isinstance(o, Tensor)]
  if tensors:
    declared = Device.renderer(tensors[0].device).supported_dtypes
    if (missing := sorted({dtype_name(o.dtype) for o in tensors if o.dtype.scalar not in declared})):
      pytest.skip(f"backend refused cleanly: the result is {', '.join(missing)}, which it does not declare ({e})")
  raise AssertionError(f"{what}: the backend refused an op on dtypes it declares: {e}")

# ***** checks *****

PRECISION = {"bfloat16": 0, "float16": 1, "float32": 2, "float64": 3}

def tolerance_dtype(out: DType, ins: tuple) -> str:
  """A float result is only as precise as the coarsest float it was computed from (a half input promoted to float32
  still carries half's rounding)."""
  names = [dtype_name(out)] + [dtype_name(d) for d in ins if O.is_float(d)]
  return min(names, key=lambda n: PRECISION.get(n, 99)) if dtype_name(out) in PRECISION else dtype_name(out)

def check_forward(op: Op, case: Case, dt: DType, ieee: bool = True) -> None:
  """`ieee`: the backend keeps infinities and NaN (capability inf_nan); where the answer holds one and it does not, skip."""
  what = f"{op.name} {dtype_name(dt)} {case.describe()}"
  rng = O.rng_for(op.name, case.name, dtype_name(dt))
  vals, dts = make_inputs(op, case, dt, rng)
  try: want = reference(op, case, refs_of(case, vals), dt)
  except (ValueError, IndexError) as e:  # numpy refuses (e.g. max of an empty axis): tinycore must refuse too, cleanly
    outs = None
    try:
      outs = _listify(run_op(op, case, tensors_of(case, vals, dts)[1], dt))
      got = [o.numpy() for o in outs]
    except UnsupportedError as u: refused(what, u, outs)
    except (ValueError, IndexError, TypeError, TinycoreError): return
    raise AssertionError(f"{what}: numpy raises {type(e).__name__}({e}), but the backend returned {got}")
  outs = None
  try:
    outs = _listify(run_op(op, case, tensors_of(case, vals, dts)[1], dt))
    got = [o.numpy() for o in outs]
  except UnsupportedError as u: refused(what, u, outs)
  wants = _listify(want)
  if not ieee and any(np.asarray(w).dtype.kind == "f" and not np.all(np.isfinite(w)) for w in wants):
    pytest.skip("the answer is NaN or infinite and the backend declares capabilities['inf_nan'] = False")
  assert len(got) == len(wants), f"{what}: {len(got)} outputs, expected {len(wants)}"
  scales = _listify(reference(op, case, [abs_of(r) for r in refs_of(case, vals)], dt)) if op.scale_by_abs else [0.0] * len(wants)
  for i, (o, g, w, sc) in enumerate(zip(outs, got, wants, scales)):
    w = np.asarray(w)
    if o.dtype == dtypes.bool and (stored := np.unique(np.ascontiguousarray(g).view(np.uint8))).max(initial=0) > 1:   # numpy reads any nonzero byte as True
      raise AssertionError(f"{what}: bools stored as the bytes {stored.tolist()}, not only 0 and 1")
    if not O.is_float(o.dtype):
      with np.errstate(all="ignore"): w = w.astype(O.np_type(o.dtype))
    assert_close(g, w, tolerance_dtype(o.dtype, dts), what + (f" output {i}" if len(got) > 1 else ""), scale=np.abs(sc), floor=op.floor)

def numeric_grad(f, x: np.ndarray) -> np.ndarray:
  """d f / d x by central differences in float64; f is smooth near x by the choice of domains."""
  g = np.zeros(x.shape, np.float64)
  flat, gflat = x.reshape(-1), g.reshape(-1)
  for i in range(flat.size):
    h = 1e-6 * max(1.0, abs(flat[i]))
    old = flat[i]
    flat[i] = old + h; up = f()
    flat[i] = old - h; down = f()
    flat[i] = old
    gflat[i] = (up - down) / (2 * h)
  return g

def check_backward(op: Op, case: Case, dt: DType) -> None:
  what = f"d/dx {op.name} {dtype_name(dt)} {case.describe()}"
  rng = O.rng_for("grad", op.name, case.name, dtype_name(dt))
  vals, dts = make_inputs(op, case, dt, rng, op.grad_domain)
  outs = None
  try:
    leaves, ins = tensors_of(case, vals, dts, requires_grad=True)
    outs = _listify(run_op(op, case, ins, dt))
    outs = [o for o in outs if O.is_float(o.dtype)]  # integer outputs (indices) carry no gradient
    weights = [O.representable(rng.standard_normal(o.shape), o.dtype) for o in outs]
    loss = None
    for o, w in zip(outs, weights):
      term = (o * Tensor(w, dtype=o.dtype)).sum()
      loss = term if loss is None else loss + term
    targets = [i for i, (x, s) in enumerate(zip(leaves, case.shapes)) if s is not None and O.is_float(dts[i])]
    grads = [g.numpy() for g in loss.gradient(*[leaves[i] for i in targets])]
  except UnsupportedError as u: refused(what, u, outs)
  # the same loss in float64 numpy, as a function of the (mutable) float64 copies of the float inputs
  base = [np.array(v, np.float64) if i in targets else v for i, v in enumerate(vals)]
  def loss_np() -> float:
    outs_np = [o for o in _listify(reference(op, case, refs_of(case, base), dt)) if np.asarray(o).dtype.kind == "f"]
    return float(sum(np.sum(np.asarray(o, np.float64) * w.astype(np.float64)) for o, w in zip(outs_np, weights)))
  for j, i in enumerate(targets):
    want = numeric_grad(loss_np, base[i])
    assert_close(grads[j], want, dtype_name(dts[i]), f"{what} (input {i})", kind="grad", floor=op.floor)
