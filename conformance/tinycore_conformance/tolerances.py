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
