"""Every numeric tolerance of the suite, per dtype, in one dict; and the comparison that applies them."""
from __future__ import annotations
import numpy as np

# (atol, rtol) by the dtype of the value compared. "fwd": results of ops; "grad": gradients, which chain several
# rounded ops; integers and bool always compare exactly. A value passes when |got - want| <= atol + rtol * max(|want|, scale),
# where `scale` (default 0) is the magnitude of the intermediates the value was computed from: sums and random graphs
# lose precision relative to their largest term, not to their result.
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
  "float64":  {"fwd": (1e-9, 1e-9), "grad": (1e-6, 1e-6)},
  "float32":  {"fwd": (1e-5, 1e-4), "grad": (1e-4, 1e-3)},
  "float16":  {"fwd": (5e-3, 1e-2), "grad": (5e-2, 5e-2)},
  "bfloat16": {"fwd": (3e-2, 3e-2), "grad": (2e-1, 1e-1)},
}

def tolerance(dtype_name: str, kind: str = "fwd") -> tuple[float, float]:
  return TOLERANCES[dtype_name][kind] if dtype_name in TOLERANCES else (0.0, 0.0)

def mismatches(got: np.ndarray, want: np.ndarray, dtype_name: str, kind: str = "fwd", scale=0.0, floor: float = 0.0) -> str | None:
  """None when got matches want; else a one-line description of the worst mismatch. NaN matches NaN, infinities must match
  exactly; `floor` is an absolute error an op's definition allows (an approximation formula's documented error)."""
  got, want = np.asarray(got), np.asarray(want)
  if got.shape != want.shape: return f"shape {got.shape}, expected {want.shape}"
  if got.size == 0: return None
  atol, rtol = tolerance(dtype_name, kind)
  if dtype_name not in TOLERANCES:  # exact: ints, bool
    bad = got.astype(want.dtype) != want
  else:
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
      nan_bad = np.isnan(g) != np.isnan(w)
      inf_bad = (np.isinf(g) | np.isinf(w)) & (g != w) & ~np.isnan(g) & ~np.isnan(w)
      finite = np.isfinite(g) & np.isfinite(w)
      err = np.where(finite, np.abs(g - w), 0.0)
      bound = max(atol, floor) + rtol * np.maximum(np.abs(np.where(finite, w, 0.0)), scale)
      bad = nan_bad | inf_bad | (finite & (err > bound))
  if not bad.any(): return None
  idx = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
  return (f"{int(bad.sum())} of {bad.size} elements differ; first at index {tuple(int(i) for i in idx)}: got {got[idx]!r}, "
          f"expected {want[idx]!r}" + (f" (atol {max(atol, floor):g}, rtol {rtol:g}" + (f", scale {np.broadcast_to(scale, bad.shape)[idx]:g})" if np.any(scale) else ")") if dtype_name in TOLERANCES else " (exact)"))

def assert_close(got, want, dtype_name: str, what: str, kind: str = "fwd", scale=0.0, floor: float = 0.0) -> None:
  if (why := mismatches(got, want, dtype_name, kind, scale, floor)) is not None: raise AssertionError(f"{what}: {why}")

# ***** accuracy of transcendentals: the uops table and the sweeps of test_accuracy.py *****

# op -> dtype -> (ulps, absolute, k): a result y for input x passes when
#   |y - f(x)| <= ulps * ulp(f(x)) + absolute + k * u * cond(x)
# with f(x) exact, ulp() in the result's dtype, u = 2**-significand_bits the dtype's unit roundoff, and cond(x) = |x f'(x)|
# (ACCURACY_COND below): the error a composition inherits from rounding its argument (Tensor.exp is exp2(x * log2(e)), so
# exp(80) in float32 is only good to ~80 * u relative). The UOps (exp2, log2, sin, sqrt, reciprocal) have k = 0: their
# argument is exact, so sin(1e30) must be the sine of 1e30, whatever the range reduction. sqrt and 1/x are IEEE operations,
# correctly rounded (half an ulp). float16/bfloat16 math runs in float32 and rounds once: one ulp of the result.
_U1 = {"float16": (1, 2.0**-24, 0), "bfloat16": (1, 2.0**-24, 0)}
ACCURACY: dict[str, dict[str, tuple[float, float, float]]] = {
  "exp2": {**_U1, "float32": (4, 0.0, 0), "float64": (2, 0.0, 0)},
  "log2": {**_U1, "float32": (4, 2.0**-22, 0), "float64": (2, 2.0**-51, 0)},
  "sin": {**_U1, "float32": (4, 2.0**-22, 0), "float64": (2, 2.0**-51, 0)},
  "sqrt": {d: (0.5, 0.0, 0) for d in ("float16", "bfloat16", "float32", "float64")},
  "reciprocal": {d: (0.5, 0.0, 0) for d in ("float16", "bfloat16", "float32", "float64")},
  # Tensor ops composed of the UOps above: their UOps' error, a few roundings, and the argument's rounding (k)
  "exp": {d: (u + 1, a, 2) for d, (u, a, _) in {**_U1, "float32": (4, 0.0, 0), "float64": (2, 0.0, 0)}.items()},
  "log": {d: (u + 1, a, 2) for d, (u, a, _) in {**_U1, "float32": (4, 2.0**-22, 0), "float64": (2, 2.0**-51, 0)}.items()},
  "cos": {d: (u + 1, a, 2) for d, (u, a, _) in {**_U1, "float32": (4, 2.0**-22, 0), "float64": (2, 2.0**-51, 0)}.items()},
  "tan": {d: (2 * u + 2, a, 4) for d, (u, a, _) in {**_U1, "float32": (4, 2.0**-22, 0), "float64": (2, 2.0**-51, 0)}.items()},
  "sigmoid": {d: (u + 3, a, 2) for d, (u, a, _) in {**_U1, "float32": (4, 0.0, 0), "float64": (2, 0.0, 0)}.items()},
  "tanh": {d: (u + 3, a, 4) for d, (u, a, _) in {**_U1, "float32": (4, 0.0, 0), "float64": (2, 0.0, 0)}.items()},
  "pow": {d: (u + 4, a, 4) for d, (u, a, _) in {**_U1, "float32": (4, 0.0, 0), "float64": (2, 0.0, 0)}.items()},
}

# cond(x) = |x f'(x)| of each composed op, in float64 numpy, from x and y = f(x) (pow's is in test_accuracy.bound), plus the
# scale of the constants folded in (cos(x) = sin(pi/2 - x) rounds pi/2; tanh and sigmoid subtract from 1). tan(x) is
# sin(x) / cos(x): once the argument's rounding (u |x|) is as large as |cos(x)|, the pole may have moved past x, and no
# accuracy is promised (inf).
ACCURACY_COND = {
  "exp": lambda x, y, u: np.abs(x * y), "log": lambda x, y, u: np.ones_like(x), "cos": lambda x, y, u: np.abs(x) + 2,
  "tan": lambda x, y, u: np.where(u * (np.abs(x) + 2) < 0.5 / np.sqrt(1 + y * y), (np.abs(x) + 2) * (1 + y * y), np.inf),
  "sigmoid": lambda x, y, u: np.abs(x) * y * (1 - y) + 1, "tanh": lambda x, y, u: np.abs(x) * (1 - y * y) + 1,
}
