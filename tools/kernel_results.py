"""Run a fixed set of kernels (matmul, conv, reductions, every declared dtype's ops and casts) on one device and save
their results, or compare them bit for bit with a saved run: `save DEVICE FILE` before a renderer change, `compare
DEVICE FILE` after it (the device's environment, NV_EMULATE=1 say, as for its conformance run)."""
from __future__ import annotations
import sys
import numpy as np
from tinycore import Tensor, Device, dtypes
from tinycore.dtype import INTS, FLOATS, to_np_dtype

def values(dt, n: int, seed: int) -> Tensor:
  """n values of dt spread over its range, edge values included (bfloat16 and half through float32)."""
  rng = np.random.default_rng(seed)
  if dt == dtypes.bool: return Tensor(rng.integers(0, 2, n).astype(bool))
  if dtypes.is_int(dt):
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    edges = [lo, hi, 0, 1, -1 if lo < 0 else 2, 7]
    return Tensor(np.array(edges + [int(v) for v in rng.integers(max(lo, -1000), min(hi, 1000), n - 6)], to_np_dtype(dt)))
  v = np.concatenate([[0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.25, 1e-6], rng.standard_normal(n - 8) * 10])
  return Tensor(v.astype(np.float32)).cast(dt)

def kernels(dev: str, declared) -> dict[str, Tensor]:
  out: dict[str, Tensor] = {}
  rng = np.random.default_rng(0)
  a, b = Tensor(rng.standard_normal((33, 40)).astype(np.float32), device=dev), Tensor(rng.standard_normal((40, 27)).astype(np.float32), device=dev)
  x, w = Tensor(rng.standard_normal((2, 3, 11, 11)).astype(np.float32), device=dev), Tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), device=dev)
  out["matmul"] = a @ b
  out["conv"] = x.conv2d(w, padding=1)
  out["conv_stride"] = x.conv2d(w, stride=2)
  out["sum"], out["max"], out["mean_axis"], out["var"] = a.sum(), a.max(), a.mean(1), a.var(0)
  out["softmax"], out["logsumexp"], out["argmax"] = a.softmax(1), a.logsumexp(1), a.argmax(0)
  for dt in declared:
    n = dt.name
    p, q = values(dt, 64, 1).to(dev), values(dt, 64, 2).to(dev)
    if dt in FLOATS or dt in INTS:
      out[f"{n}_add"], out[f"{n}_sub"], out[f"{n}_mul"] = p + q, p - q, p * q
      out[f"{n}_max"], out[f"{n}_neg"], out[f"{n}_lt"], out[f"{n}_ne"] = p.maximum(q), -p, p < q, p != q
      out[f"{n}_where"] = (p < q).where(p, q)
      out[f"{n}_sum"], out[f"{n}_prod"], out[f"{n}_rmax"] = p.sum(), p[:8].prod(), p.max()
      out[f"{n}_matmul"] = p.reshape(8, 8) @ q.reshape(8, 8)
    if dt in FLOATS:
      out[f"{n}_div"], out[f"{n}_sqrt"], out[f"{n}_exp2"], out[f"{n}_log2"] = p / q, p.sqrt(), p.exp2(), p.log2()
      out[f"{n}_sin"], out[f"{n}_recip"], out[f"{n}_trunc"], out[f"{n}_mulacc"] = p.sin(), p.reciprocal(), p.trunc(), p * q + p
      out[f"{n}_mod"] = p % q
    if dt in INTS:
      out[f"{n}_idiv"], out[f"{n}_mod"] = p // q, p % q
      out[f"{n}_and"], out[f"{n}_or"], out[f"{n}_xor"] = p & q, p | q, p ^ q
      out[f"{n}_shl"], out[f"{n}_shr"] = p << (q & 7), p >> (q & 7)
    if dt == dtypes.bool: out["bool_and"], out["bool_or"], out["bool_xor"], out["bool_not"] = p & q, p | q, p ^ q, p.logical_not()
    for to in declared:
      out[f"{n}_cast_{to.name}"] = p.cast(to)
      if to.itemsize == dt.itemsize and dtypes.bool not in (dt, to) and to != dt: out[f"{n}_bitcast_{to.name}"] = p.bitcast(to)
  return out

def results(dev: str) -> dict[str, np.ndarray]:
  declared = [d for d in (dtypes.bool, *INTS, *FLOATS) if d in Device.renderer(dev).supported_dtypes]
  got = {}
  for k, t in kernels(dev, declared).items():
    v = t.numpy()
    got[k] = v.astype(np.float32) if t.dtype == dtypes.bfloat16 else v
  return got

def same(a: np.ndarray, b: np.ndarray) -> bool:
  """Bit for bit, except that any NaN matches any NaN."""
  if a.shape != b.shape or a.dtype != b.dtype: return False
  a, b = np.atleast_1d(a), np.atleast_1d(b)
  if a.dtype.kind != "f": return a.tobytes() == b.tobytes()
  nan = np.isnan(a)
  return bool((nan == np.isnan(b)).all()) and a[~nan].tobytes() == b[~nan].tobytes()

if __name__ == "__main__":
  if len(sys.argv) != 4 or sys.argv[1] not in ("save", "compare"): raise SystemExit(__doc__)
  cmd, dev, path = sys.argv[1:]
  got = results(dev)
  if cmd == "save":
    np.savez(path, **got)
    print(f"{dev}: saved {len(got)} results to {path}")
  else:
    want = dict(np.load(path))
    diff = sorted(k for k in want if k in got and not same(want[k], got[k]))
    missing, new = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    print(f"{dev}: {len(want) - len(diff) - len(missing)} of {len(want)} results the same" + (f"; new kernels: {new}" if new else ""))
    for k in diff: print(f"  DIFFERS: {k}\n    before {want[k].ravel()[:8]}\n    after  {got[k].ravel()[:8]}")
    for k in missing: print(f"  MISSING: {k}")
    if diff or missing: raise SystemExit(1)
