"""Section specials: the classes of special_values.py (signed-zero constants, double rounding, reduce identities, NaN payloads), each failure named by its class."""
from __future__ import annotations
import math
import numpy as np
import pytest
from tinycore.dtype import DType, dtypes, FLOATS
from tinycore.tensor import Tensor
from tinycore.uop import Ops
from tinycore_conformance import oracle as O, special_values as S
from tinycore_conformance.target import Target, target_for, dtype_name
from tinycore_conformance.uops import one_op_kernel, run_kernel, from_bytes
from tinycore_conformance.uop_table import SAME_SIZE

pytestmark = pytest.mark.specials

REDUCE_INTS = (dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64)

def pytest_generate_tests(metafunc) -> None:
  t = target_for(metafunc.config)
  name = metafunc.function.__name__
  if name == "test_double_rounding":
    pairs = [(a, b) for a in t.dtypes for b in t.dtypes if S.narrows(a, b)]
    metafunc.parametrize("pair", pairs, ids=[f"{dtype_name(a)}->{dtype_name(b)}" for a, b in pairs])
  elif name in ("test_signed_zero_constants", "test_nan_payloads", "test_reduce_identities"):
    dts = [d for d in t.dtypes if d in FLOATS or (name == "test_reduce_identities" and d in REDUCE_INTS)]
    metafunc.parametrize("dtype", dts, ids=[dtype_name(d) for d in dts])

# ***** comparing results bit for bit *****

def bits_of(x: np.ndarray, dt: DType) -> np.ndarray:
  """The stored bits of values of dt (bfloat16 from its float32 carrier)."""
  x = np.ascontiguousarray(x, O.np_type(dt))
  return (x.view(np.uint32) >> 16).astype(np.uint16) if dt == dtypes.bfloat16 else x.view(np.dtype(f"u{dt.itemsize}"))

def differing(got: np.ndarray, want: np.ndarray, dt: DType) -> np.ndarray:
  """Indices where got differs from want: the same bits (so the sign of a zero counts), or NaN for NaN (any payload)."""
  got, want = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
  same = bits_of(got, dt) == bits_of(want, dt)
  if dt in FLOATS: same |= np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
  return np.flatnonzero(~same)

def show(v, dt: DType) -> str:
  """A value with its bits, where the bits say more than the number (floats: signs of zeros, NaN payloads)."""
  if dt not in FLOATS: return repr(int(v)) if dt != dtypes.bool else repr(bool(v))
  return f"{float(v)!r} (0x{int(bits_of(np.array([v]), dt)[0]):0{2 * dt.itemsize}x})"

def check(cls: str, what: str, ins: list, got: np.ndarray, want: np.ndarray, src: DType | None, dt: DType) -> str | None:
  """None when every row matches; else a line naming the class, what ran and the first rows that differ."""
  bad = differing(got, want, dt)
  if not bad.size: return None
  rows = [f"{show(ins[i], src) + ' ->' if src is not None else f'[{i}]'} got {show(np.asarray(got).reshape(-1)[i], dt)}, "
          f"expected {show(np.asarray(want).reshape(-1)[i], dt)}" for i in bad[:6]]
  return f"{cls}: {what}: {bad.size} of {np.asarray(want).size} wrong: " + "; ".join(rows)

def report(failures: list[str | None]) -> None:
  """One assertion for all of a test's checks: every failing one is listed, each naming its class."""
  if (lines := [f for f in failures if f]): raise AssertionError(" | ".join(lines))

# ***** signed-zero constants *****

# name: (Tensor expression of x, numpy expression of x in float64). x holds [1, -1, 0, -0, 2.5, -3]: each expression has
# a -0.0 (or a +0.0 that must not become -0.0) as a constant in the kernel, and at least one result is a zero whose sign
# depends on that constant's sign
ZERO_CASES = {
  "x * -0.0": (lambda x: x * -0.0, lambda x: x * -0.0),
  "-0.0 * x": (lambda x: -0.0 * x, lambda x: -0.0 * x),
  "x * 0.0": (lambda x: x * 0.0, lambda x: x * 0.0),
  "x + -0.0": (lambda x: x + -0.0, lambda x: x + -0.0),
  "x + 0.0": (lambda x: x + 0.0, lambda x: x + 0.0),
  "-0.0 + x": (lambda x: -0.0 + x, lambda x: -0.0 + x),
  "x - 0.0": (lambda x: x - 0.0, lambda x: x - 0.0),
  "x - -0.0": (lambda x: x - -0.0, lambda x: x - -0.0),
  "0.0 - x": (lambda x: 0.0 - x, lambda x: 0.0 - x),
  "-0.0 - x": (lambda x: -0.0 - x, lambda x: -0.0 - x),
  "where(x > 0, x, -0.0)": (lambda x: (x > 0).where(x, -0.0), lambda x: np.where(x > 0, x, -0.0)),
  "where(x > 0, -0.0, x)": (lambda x: (x > 0).where(-0.0, x), lambda x: np.where(x > 0, -0.0, x)),
  "full(-0.0)": (lambda x: Tensor.full(x.shape, -0.0, dtype=x.dtype).contiguous(), lambda x: np.full(x.shape, -0.0)),
  "-full(0.0)": (lambda x: (-Tensor.full(x.shape, 0.0, dtype=x.dtype)).contiguous(), lambda x: np.full(x.shape, -0.0)),
  "full(-0.0) + x * 0": (lambda x: Tensor.full(x.shape, -0.0, dtype=x.dtype) + x * 0, lambda x: -0.0 + x * 0),
  "pad(x, value=-0.0)": (lambda x: x.pad(((2, 1),), value=-0.0), lambda x: np.pad(x, (2, 1), constant_values=-0.0)),
  "cat(-x, x)": (lambda x: Tensor.cat(-x, x), lambda x: np.concatenate([-x, x])),
}
INF_ZERO_CASES = {   # where infinities are kept: dividing by a signed zero constant
  "x / -0.0": (lambda x: x / -0.0, lambda x: x / -0.0),
  "x / 0.0": (lambda x: x / 0.0, lambda x: x / 0.0),
}

@pytest.mark.covers("signed zero constants")
def test_signed_zero_constants(device, target: Target, dtype):
  """-0.0 (and +0.0) as constants inside kernels, from Python scalar operands, full(), a pad value and a concatenation:
  every result's bits, so the sign of each zero counts (x * -0.0 is -0.0 for positive x; x + 0.0 is +0.0 for x = -0.0)."""
  x = O.representable(np.array([1.0, -1.0, 0.0, -0.0, 2.5, -3.0]), dtype)
  cases = {**ZERO_CASES, **(INF_ZERO_CASES if target.cap("inf_nan") else {})}
  outs = {name: fn(Tensor(x, dtype=dtype)) for name, (fn, _) in cases.items()}
  Tensor.realize(*outs.values())
  with np.errstate(all="ignore"):
    report([check("signed zero constants", f"{name} in {dtype_name(dtype)} for x = {x.tolist()}", [], outs[name].numpy(),
                  O.representable(ref(x.astype(np.float64)), dtype), None, dtype) for name, (_, ref) in cases.items()])

# ***** double rounding *****

@pytest.mark.covers("double rounding")
def test_double_rounding(device, target: Target, pair):
  """src -> dst conversions of values at and just off dst's rounding ties, each rounded once from its exact value: from a
  buffer, from constants in the kernel, and from constants the cast is folded into before the kernel is built."""
  src, dst = pair
  def usable(v) -> bool:
    w = S.round_exact(v, dst)
    if not target.cap("inf_nan") and not math.isfinite(w): return False
    return target.cap("denormals") or not any(t in FLOATS and 0 < abs(float(x)) < 2.0 ** S.FORMATS[t][1] for x, t in ((v, src), (w, dst)))
  vals = [v for v in S.tie_values(src, dst) if usable(v)]
  pos = [v for v in vals if v > 0]   # constants: the positive half (the kernel's size grows with their number)
  paths = {"from a buffer": (vals, Tensor(np.array(vals, O.np_type(src)), dtype=src).cast(dst)),
           "of constants in the kernel": (pos, Tensor.stack(*[Tensor.full((), v, dtype=src) for v in pos]).cast(dst)),
           "folded into constants": (pos, Tensor.stack(*[Tensor.full((), v, dtype=src).cast(dst) for v in pos]))}
  Tensor.realize(*[t for _, t in paths.values()])
  report([check("double rounding", f"cast {dtype_name(src)} -> {dtype_name(dst)} {path}", vs, t.numpy(),
                O.representable(np.array([S.round_exact(v, dst) for v in vs]), dst), src, dst) for path, (vs, t) in paths.items()])

# ***** reduce identities *****

REDUCES = {"max": (Tensor.max, np.max), "min": (Tensor.min, np.min), "sum": (Tensor.sum, np.sum), "prod": (Tensor.prod, np.prod)}
N_ROW, N_FULL = 37, 1031   # a row of an axis reduction; a whole-tensor reduction (both leave a remainder for any vector width)

def reduce_ref(name: str, x: np.ndarray, axis, out_dt: DType) -> np.ndarray:
  """numpy's reduction in the result's dtype (integers wrap like it) or in float64 (floats), rounded to the result's dtype."""
  with np.errstate(all="ignore"):
    if out_dt in FLOATS: return O.representable(REDUCES[name][1](x.astype(np.float64), axis=axis), out_dt)
    return REDUCES[name][1](x.astype(O.np_type(out_dt)), axis=axis, **({"dtype": O.np_type(out_dt)} if name in ("sum", "prod") else {}))

@pytest.mark.covers("reduce identities")
def test_reduce_identities(device, target: Target, dtype):
  """max, min, sum and prod over rows that are all the identity of max (-inf, the integer minimum) or of min, all NaN, or
  past the range of a narrower type, along each axis and over a whole tensor; and over rows a mask empties (where(mask, x,
  identity) with the mask all False, as attention masking does): an accumulator started at a finite extreme shows."""
  rows = {k: v for k, v in S.reduce_rows(dtype, N_ROW).items() if target.cap("inf_nan") or np.all(np.isfinite(v.astype(np.float64)))}
  table = np.stack(list(rows.values()))
  what = f"{dtype_name(dtype)} rows " + ", ".join(f"{i}: {k}" for i, k in enumerate(rows))
  outs: dict[str, tuple[Tensor, np.ndarray]] = {}
  for name, (fn, _) in REDUCES.items():
    outs[f"{name} along axis 1 of {what}"] = (fn(Tensor(table, dtype=dtype), axis=1), table)
    outs[f"{name} along axis 0 of the transpose of {what}"] = (fn(Tensor(table.T.copy(), dtype=dtype), axis=0), table)
    for k, row in S.reduce_rows(dtype, N_FULL).items():
      if k in rows and (name in ("max", "min") or k == "all lowest"): outs[f"{name} of all {N_FULL} of {dtype_name(dtype)} row {k!r}"] = (fn(Tensor(row, dtype=dtype)), row)
  if dtype in FLOATS:   # a mask that empties a row: max and min of nothing are their identities -inf and +inf
    # +-1, 2 and -0.5: every sum and product is exact in any order, so the rows that keep values compare exactly too
    data = O.rng_for("reduce identities", dtype_name(dtype)).choice(np.array([-1.0, 1.0, 2.0, -0.5]), (3, N_ROW)).astype(O.np_type(dtype))
    mask = np.zeros((3, N_ROW), bool)
    mask[1, 0], mask[2] = True, True
    for name, fill in (("max", -math.inf), ("min", math.inf), ("sum", 0.0), ("prod", 1.0)):
      if not target.cap("inf_nan") and math.isinf(fill): continue
      masked = np.where(mask, data, fill)
      outs[f"{name} along axis 1 of where(mask, x, {fill}) in {dtype_name(dtype)}, row 0 all masked, row 1 all but one"] = \
        (REDUCES[name][0](Tensor(mask).where(Tensor(data, dtype=dtype), fill), axis=1), masked)
  Tensor.realize(*[t for t, _ in outs.values()])
  fails = []
  for label, (t, x) in outs.items():
    name = label.split(" ", 1)[0]
    axis = None if t.ndim == 0 else 1
    want = reduce_ref(name, x, axis, t.dtype)
    fails.append(check("reduce identities", label, [], t.numpy(), want, None, t.dtype))
  report(fails)

# ***** NaN payloads *****

@pytest.mark.covers("NaN payloads")
def test_nan_payloads(device, target: Target, dtype):
  """NaNs of every kind (quiet and signalling, payload bits high and low, both signs) through every cast from dtype (to a
  float: a NaN, any payload; to an integer: 0; to bool: True) and every same-size bitcast from and to it (the same bits)."""
  target.require("inf_nan")
  pats = S.nan_patterns(dtype)
  n, raw = len(pats), S.bits_to_array(pats, dtype)
  src_bytes = np.array(pats, np.dtype(f"u{dtype.itemsize}")).tobytes()
  fails = []
  for dst in target.dtypes:
    if dst == dtype: continue
    got = from_bytes(run_kernel(target.name, one_op_kernel(Ops.CAST, dtype, n, dst), (n, dst), [(src_bytes, dtype)]), dst)
    want = np.full(n, math.nan) if dst in FLOATS else np.zeros(n, np.uint8 if dst == dtypes.bool else O.np_type(dst)) + (dst == dtypes.bool)
    fails.append(check("NaN payloads", f"cast {dtype_name(dtype)} -> {dtype_name(dst)}", list(raw), got, O.representable(want, dst) if dst in FLOATS else want, dtype,
                       dst if dst != dtypes.bool else dtypes.uint8))
  for other in SAME_SIZE[dtype.itemsize]:
    if other == dtype or other not in target.dtypes: continue
    there = run_kernel(target.name, one_op_kernel(Ops.BITCAST, dtype, n, other), (n, other), [(src_bytes, dtype)])
    back = run_kernel(target.name, one_op_kernel(Ops.BITCAST, other, n, dtype), (n, dtype), [(src_bytes, other)])
    for what, got, dt in ((f"bitcast {dtype_name(dtype)} -> {dtype_name(other)}", there, other), (f"bitcast {dtype_name(other)} -> {dtype_name(dtype)}", back, dtype)):
      bits = np.frombuffer(got, np.dtype(f"u{dtype.itemsize}"))
      bad = np.flatnonzero(bits != np.frombuffer(src_bytes, np.dtype(f"u{dtype.itemsize}")))
      if bad.size: fails.append(f"NaN payloads: {what} changed the bits of {bad.size} of {n} NaNs: " + "; ".join(
        f"0x{pats[i]:0{2 * dtype.itemsize}x} -> 0x{int(bits[i]):0{2 * dtype.itemsize}x}" for i in bad[:6]))
  report(fails)
