"""The numpy side of every check: input values per dtype and domain, bfloat16 rounding, and reference implementations."""
from __future__ import annotations
import math, zlib
import numpy as np
from tinycore.dtype import DType, dtypes, FLOATS, INTS, UINTS

NP_TYPES: dict[DType, type] = {
  dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16,
  dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64,
  dtypes.float16: np.float16, dtypes.bfloat16: np.float32, dtypes.float32: np.float32, dtypes.float64: np.float64}

def np_type(dt: DType) -> type:
  """The numpy type holding `dt`'s values: bfloat16 values travel as float32 numbers (exactly representable)."""
  return NP_TYPES[dt.scalar]

def is_float(dt: DType) -> bool: return dt.scalar in FLOATS
def is_int(dt: DType) -> bool: return dt.scalar in INTS

def bf16_round(x) -> np.ndarray:
  """Round float32 or float64 values to the nearest bfloat16 (ties to even), once, returned as float32. NaN stays NaN,
  overflow goes to inf."""
  x = np.asarray(x)
  with np.errstate(over="ignore"): f = x.astype(np.float32)
  bits = f.view(np.uint32).astype(np.uint64)
  rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
  # a float64 that float32 rounded onto a bfloat16 tie lies past the tie on one side: it rounds that way, not to even
  with np.errstate(invalid="ignore"):
    tie, up = ((bits & 0xFFFF) == 0x8000) & (f.astype(np.float64) != x), np.abs(x) > np.abs(f.astype(np.float64))
  rounded = np.where(tie, ((bits >> 16) + up) << 16, rounded)
  out = rounded.astype(np.uint32).view(np.float32)
  return np.where(np.isnan(f), np.float32(np.nan), out)

def representable(x, dt: DType) -> np.ndarray:
  """x (floats) rounded to what `dt` holds, in dt's numpy carrier type."""
  with np.errstate(over="ignore", invalid="ignore"):  # values past the dtype's range become inf, as in the dtype
    if dt.scalar == dtypes.bfloat16: return bf16_round(np.asarray(x, np.float64))
    return np.asarray(x).astype(np_type(dt))

def rng_for(*key) -> np.random.Generator:
  """A generator seeded from a test's identity, so every run and every backend sees the same values."""
  return np.random.default_rng(zlib.crc32(repr(key).encode()))

def int_range(dt: DType) -> tuple[int, int]:
  bits = 8 * dt.itemsize
  return (0, 2**bits - 1) if dt.scalar in UINTS else (-2**(bits - 1), 2**(bits - 1) - 1)

# float domains: (low, high) for uniform values, or a name handled below. Integer dtypes map each domain to a range.
FLOAT_DOMAINS = {"any": None, "small": (-3.0, 3.0), "pos": (0.2, 4.0), "unit": (-0.9, 0.9), "ge1": (1.1, 4.0),
                 "exp": (-4.0, 4.0), "trig": (-3.0, 3.0), "tan": (-1.2, 1.2), "near1": (0.5, 1.5), "prob": (0.05, 0.95)}
N_LABELS = 4   # the "labels" domain: class indices in [0, N_LABELS)

def sample(rng: np.random.Generator, dt: DType, shape: tuple, domain: str = "any") -> np.ndarray:
  """Values of dtype `dt` (in its numpy carrier) drawn from `domain`."""
  n = int(np.prod(shape)) if shape else 1
  if dt.scalar == dtypes.bool: return (rng.random(n) < 0.5).reshape(shape)
  if is_int(dt):
    lo, hi = int_range(dt)
    if domain in ("any", "pairs"): vals = rng.integers(lo, hi, n, dtype=np_type(dt), endpoint=True)
    elif domain == "labels": vals = rng.integers(0, N_LABELS, n)
    elif domain in ("halves", "near1", "offgrid"): vals = rng.integers(max(lo, -8), 8, n, endpoint=True)
    elif domain in ("pos", "ge1"): vals = rng.integers(1, 10, n, endpoint=True)
    elif domain == "nonzero":
      vals = rng.integers(1, 10, n, endpoint=True) * (1 if lo == 0 else rng.choice(np.array([-1, 1]), n))
    else: vals = rng.integers(max(lo, -5), 5, n, endpoint=True)
    out = np.asarray(vals).astype(np_type(dt)).reshape(shape)
  else:
    if domain in ("any", "pairs"): vals = rng.standard_normal(n) * 2
    elif domain == "halves": vals = np.where(rng.random(n) < 0.5, rng.integers(-8, 8, n) / 2, rng.standard_normal(n) * 3)
    elif domain == "nonzero": vals = rng.uniform(0.25, 3.0, n) * rng.choice(np.array([-1.0, 1.0]), n)
    elif domain == "offgrid":  # away from integers and halves: where floor/round/frac are smooth
      vals = rng.integers(-6, 6, n) + rng.uniform(0.15, 0.35, n) + 0.5 * (rng.random(n) < 0.5)
    else: vals = rng.uniform(*FLOAT_DOMAINS[domain], n)
    out = representable(vals, dt).reshape(shape)
  if domain == "pairs" and n > 1:  # comparisons need equal elements too: copy every third element from its neighbour
    flat = out.reshape(-1).copy()
    flat[1::3] = flat[0:-1:3][:len(flat[1::3])]
    out = flat.reshape(shape)
  return out

def divpair(rng: np.random.Generator, dt: DType, shape_a: tuple, shape_b: tuple) -> tuple[np.ndarray, np.ndarray]:
  """Dividend and divisor whose quotient stays away from integers (floats), so floor/trunc/mod are well conditioned.
  Integer divisors are nonzero (division by zero is checked on its own in the dtypes section)."""
  if is_int(dt): return sample(rng, dt, shape_a, "any"), sample(rng, dt, shape_b, "nonzero")
  full = np.broadcast_shapes(shape_a, shape_b)
  quot = rng.integers(-6, 6, full) + rng.uniform(0.2, 0.8, full)   # at least 0.2 from every integer
  if tuple(shape_a) == full:  # the divisor may broadcast: build the dividend from it
    b = sample(rng, dt, shape_b, "nonzero")
    return representable(quot * b.astype(np.float64), dt), b
  if tuple(shape_b) != full: raise ValueError(f"divpair needs one operand of the full shape, got {shape_a} and {shape_b}")
  a = sample(rng, dt, shape_a, "nonzero")
  return a, representable(a.astype(np.float64) / quot, dt)

def as_ref(x: np.ndarray) -> np.ndarray:
  """What the reference computes on: floats widen to float64; ints and bool keep their dtype (so they wrap alike)."""
  x = np.asarray(x)
  return x.astype(np.float64) if x.dtype.kind == "f" else x

# ***** references that numpy does not have *****

def erf(x): return np.vectorize(math.erf, otypes=[np.float64])(x) if np.asarray(x).size else np.asarray(x, np.float64)

def _max_or_zero(x, axis):  # an empty axis has no maximum; its softmax is empty all the same
  return np.max(x, axis=axis, keepdims=True) if x.shape[axis] else 0.0

def softmax(x, axis):
  e = np.exp(x - _max_or_zero(x, axis))
  return e / np.sum(e, axis=axis, keepdims=True)

def log_softmax(x, axis):
  m = x - _max_or_zero(x, axis)
  return m - np.log(np.sum(np.exp(m), axis=axis, keepdims=True))

def sigmoid(x): return 1 / (1 + np.exp(-x))

def softplus(x): return np.logaddexp(0, x)

def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
  """NCHW convolution (cross-correlation, like PyTorch) by explicit loops over the kernel window."""
  x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  n, cin, h, wd = x.shape
  cout, cin_g, kh, kw = w.shape
  oh, ow = (h - dilation * (kh - 1) - 1) // stride + 1, (wd - dilation * (kw - 1) - 1) // stride + 1
  out = np.zeros((n, cout, oh, ow), np.result_type(x, w))
  per_group = cout // groups
  for o in range(cout):
    g = o // per_group
    for i in range(kh):
      for j in range(kw):
        patch = x[:, g*cin_g:(g+1)*cin_g, i*dilation:i*dilation + stride*(oh-1) + 1:stride, j*dilation:j*dilation + stride*(ow-1) + 1:stride]
        out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
  return out if b is None else out + b.reshape(1, -1, 1, 1)

def pool2d(x, k, stride, fn):
  n, c, h, w = x.shape
  oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
  win = np.stack([x[:, :, i:i + stride*(oh-1) + 1:stride, j:j + stride*(ow-1) + 1:stride] for i in range(k) for j in range(k)], -1)
  return fn(win, axis=-1)

def threefry_random_bits(n: int, seed: int, call: int) -> np.ndarray:
  """threefry2x32-20 of (counter, call index) under the key (seed, 0): the generator tinycore documents for Tensor.rand."""
  m = np.uint64(0xFFFFFFFF)
  def rotl(v, r): return ((v << np.uint64(r)) | (v >> np.uint64(32 - r))) & m
  k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
  ks = [k0, k1, k0 ^ k1 ^ np.uint64(0x1BD11BDA)]
  rot = [13, 15, 26, 6, 17, 29, 16, 24]
  x0 = (np.arange(n, dtype=np.uint64) + ks[0]) & m
  x1 = (np.full(n, call & 0xFFFFFFFF, np.uint64) + ks[1]) & m
  for i in range(5):
    for r in (rot[:4] if i % 2 == 0 else rot[4:]):
      x0 = (x0 + x1) & m
      x1 = rotl(x1, r) ^ x0
    x0 = (x0 + ks[(i + 1) % 3]) & m
    x1 = (x1 + ks[(i + 2) % 3] + np.uint64(i + 1)) & m
  return x0.astype(np.uint32)
