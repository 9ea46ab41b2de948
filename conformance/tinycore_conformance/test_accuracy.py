"""Section accuracy: transcendentals swept densely over each float dtype's whole finite range, within tolerances.ACCURACY."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor
from tinycore_conformance.target import Target, target_for, dtype_name
from tinycore_conformance.tolerances import ACCURACY, ACCURACY_COND
from tinycore_conformance.uop_table import MANT, finfo
from tinycore_conformance.uops import from_bytes

pytestmark = pytest.mark.accuracy

LD = np.longdouble   # the exact values: long double where the platform has it (x86: 64 significand bits)
POW_EXPONENTS = (-2.5, -0.3, 0.7, 1.5, 3.1)
# name: (the Tensor op, the exact function in long double; for pow, of (base, exponent))
SWEPT = {
  "exp2": (Tensor.exp2, np.exp2), "log2": (Tensor.log2, np.log2), "sin": (Tensor.sin, np.sin), "sqrt": (Tensor.sqrt, np.sqrt),
  "reciprocal": (Tensor.reciprocal, lambda x: 1 / x), "exp": (Tensor.exp, np.exp), "log": (Tensor.log, np.log), "cos": (Tensor.cos, np.cos),
  "tan": (Tensor.tan, np.tan), "sigmoid": (Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x))), "tanh": (Tensor.tanh, np.tanh),
  "pow": (Tensor.pow, np.power),
}

def sweep(dt: DType, per_sign: int) -> np.ndarray:
  """`per_sign` values evenly spaced in bit pattern from +0 to the largest finite value (so every binade, subnormals
  included, gets its share), and their negatives: every finite value of a 16-bit float at the default size."""
  bits = MANT[dt] - 1 + {dtypes.float16: 5, dtypes.bfloat16: 8, dtypes.float32: 8, dtypes.float64: 11}[dt]   # sign excluded
  top = (1 << bits) - (1 << (MANT[dt] - 1))   # the pattern of +inf
  n = min(per_sign, top)
  pats = np.unique(np.array([i * (top - 1) // (n - 1) for i in range(n)], np.uint64))
  pats = np.concatenate([pats, pats | np.uint64(1 << bits)])
  return from_bytes(pats.astype(f"<u{dt.itemsize}").tobytes(), dt)

def per_sign(config) -> int: return 1 << 20 if config.getoption("conformance_profile") == "vendor" else 1 << 15

def pytest_generate_tests(metafunc) -> None:
  if "swept" in metafunc.fixturenames:
    t = target_for(metafunc.config)
    cases = [(op, dt) for op in SWEPT for dt in t.floats]
    metafunc.parametrize("swept", cases, ids=[f"{op}-{dtype_name(dt)}" for op, dt in cases])

def bound(op: str, dt: DType, x: np.ndarray, want: np.ndarray, e: np.ndarray | None) -> np.ndarray:
  """The allowed |error| of each result (the formula at tolerances.ACCURACY)."""
  ulps, absolute, k = ACCURACY[op][dtype_name(dt)]
  big, tiny, sub = finfo(dt)
  w = np.abs(want)
  ulp = np.maximum(LD(2.0) ** (np.floor(np.log2(np.maximum(w, LD(tiny)))) - (MANT[dt] - 1)), LD(sub))
  out = ulps * ulp + absolute
  if k:
    u = LD(2.0) ** -MANT[dt]
    with np.errstate(all="ignore"):
      cond = np.abs(want * e * np.log(np.abs(x))) + w if op == "pow" else ACCURACY_COND[op](x, want, u)
    out = out + k * u * np.nan_to_num(cond, nan=np.inf)
  return out

def test_sweep(device, target: Target, swept, request):
  """Every input of the sweep within the documented bound of the exact result; NaN where the exact result is NaN, the same
  infinity where it overflows. The failure names the worst input."""
  op, dt = swept
  fn, exact = SWEPT[op]
  x = sweep(dt, per_sign(request.config) // (4 if op == "pow" else 1))   # pow: a quarter of the bases, each with every exponent
  big, tiny, sub = finfo(dt)
  if not target.cap("denormals"): x = x[(x == 0) | (np.abs(x) >= tiny)]
  e = None
  if op == "pow":   # one launch: the sweep once per exponent
    e = np.repeat(np.array(POW_EXPONENTS, np.float64), x.size)
    x = np.tile(x, len(POW_EXPONENTS))
  xt = Tensor(x, dtype=dt)
  got = (fn(xt, Tensor(e, dtype=dt)) if e is not None else fn(xt)).numpy().astype(np.float64)
  with np.errstate(all="ignore"):
    want = np.asarray(exact(x.astype(LD), e.astype(LD)) if e is not None else exact(x.astype(LD)), LD)   # kept exact: float64 has no spare bits
    # past the dtype's range every value is the same infinity: both sides are clipped to the first power of two past it,
    # so overflowing to inf where the exact result rounds to the largest finite value costs an ulp, not infinitely many
    limit = LD(2.0) ** np.frexp(big)[1]
    err = np.where(got == want, 0.0, np.abs(np.clip(got.astype(LD), -limit, limit) - np.clip(want, -limit, limit)))
    over = np.where(err == 0, 0.0, err / bound(op, dt, x, want, e))
  nan_bad = (np.isnan(got) != np.isnan(want)) if target.cap("inf_nan") else np.zeros(x.shape, bool)
  over = np.where(np.isnan(want) | np.isnan(got), 0.0, np.nan_to_num(over, nan=np.inf))
  if not target.cap("inf_nan"): over = np.where(np.isfinite(want) & (np.abs(want) <= big), over, 0.0)
  bad = nan_bad | (over > 1)
  if bad.any():
    i = int(np.argmax(np.where(nan_bad, np.inf, over)))
    ulps, absolute, k = ACCURACY[op][dtype_name(dt)]
    raise AssertionError(f"{op} {dtype_name(dt)}: {int(bad.sum())} of {x.size} swept inputs "
                         f"outside the bound ({ulps} ulps + {absolute:g}" + (f" + {k} u cond(x)" if k else "") + f"); worst at x = {x[i]!r}"
                         + (f", exponent {e[i]}" if e is not None else "") + ": "
                         f"got {got[i]!r}, exact {float(want[i])!r} ({float(over[i]):.3g} times the bound)")
