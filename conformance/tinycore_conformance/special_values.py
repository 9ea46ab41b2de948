"""Special values by class (signed-zero constants, double rounding, reduce identities, NaN payloads): the specials section's tables, and a pool the fuzzer draws from."""
from __future__ import annotations
import math
from fractions import Fraction
import numpy as np
from tinycore.dtype import DType, dtypes, FLOATS, INTS
from tinycore_conformance.oracle import int_range, np_type

# the classes, each named in the report when one of its checks fails
CLASSES = {
  "signed zero constants": "-0.0 as a constant folded into a kernel (a Python scalar operand, full(), a pad value, a cast), not only in buffers",
  "double rounding": "narrowing conversions of values at and just off the target's rounding ties, off by less than any plausible "
                     "intermediate type holds (float32 for float64 -> half/bfloat16, float64 for 64-bit ints -> float32): rounded once",
  "reduce identities": "max, min, sum and prod over all -inf, all +inf, all NaN, fully masked rows, and values past a narrower type's range",
  "NaN payloads": "quiet and signalling NaNs with high and low payload bits, both signs, through every cast (a NaN stays a NaN) and bitcast (bits kept)",
}

# (significand bits with the implicit one, smallest normal exponent, largest exponent, stored exponent bits)
FORMATS: dict[DType, tuple[int, int, int, int]] = {dtypes.float16: (11, -14, 15, 5), dtypes.bfloat16: (8, -126, 127, 8),
                                                   dtypes.float32: (24, -126, 127, 8), dtypes.float64: (53, -1022, 1023, 11)}

# ***** an exact reference for rounding: rationals, no floating-point conversion in between *****

def round_exact(v: int | float, dt: DType) -> float:
  """v (a Python int or float, taken exactly) rounded once to float dtype `dt`, ties to even; past the largest finite value
  at or beyond its tie, +-inf. Returned as a Python float (exact: every value of these dtypes is a float64)."""
  if isinstance(v, float) and not math.isfinite(v): return v
  if v == 0: return math.copysign(0.0, v) if isinstance(v, float) else 0.0
  p, emin, emax, _ = FORMATS[dt]
  q = Fraction(v)
  sign, q = (-1 if q < 0 else 1), abs(q)
  e = q.numerator.bit_length() - q.denominator.bit_length()
  if Fraction(2) ** e > q: e -= 1   # now 2**e <= q < 2**(e+1)
  ulp = Fraction(2) ** (max(e, emin) - p + 1)   # subnormals share the smallest normal exponent's spacing
  n, rem = divmod(q, ulp)
  n += rem * 2 > ulp or (rem * 2 == ulp and n % 2 == 1)
  out = n * ulp
  if out > (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax: return sign * math.inf
  return math.copysign(float(out), sign)   # a zero keeps the sign of v

def holds(dt: DType, v: int | float) -> bool:
  """v is exactly a value of `dt`."""
  if dt in INTS:
    lo, hi = int_range(dt)
    return (isinstance(v, int) or (math.isfinite(v) and v == int(v))) and lo <= v <= hi
  return not math.isfinite(v) or round_exact(v, dt) == v

def ulp_at(dt: DType, v: int | float) -> int | float:
  """The smallest step `dt` takes at v: 1 for integers, the spacing of v's binade for floats (subnormal spacing below)."""
  if dt in INTS: return 1
  p, emin, _, _ = FORMATS[dt]
  return 2.0 ** (max(math.frexp(abs(v))[1] - 1, emin) - p + 1)

# ***** double rounding: values at and just off the ties of a narrowing conversion *****

def narrows(src: DType, dst: DType) -> bool:
  """Some value of src rounds when converted to float dtype dst (a narrower significand or range)."""
  if dst not in FLOATS or src == dtypes.bool or src == dst: return False
  if src in INTS: return 8 * src.itemsize - (src not in (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)) > FORMATS[dst][0]
  (ps, emins, emaxs, _), (pd, emind, emaxd, _) = FORMATS[src], FORMATS[dst]
  return ps > pd or emaxs > emaxd or emins - ps < emind - pd

def tie_values(src: DType, dst: DType) -> list[int | float]:
  """Values of src at the rounding ties of dst (halfway between two neighbours, and the overflow tie past dst's largest
  value) and one step of src either side of each: a step below the precision of every type narrower than src, so a
  conversion through such an intermediate rounds the value onto the tie and then rounds the tie again (to even)."""
  pd, emind, emaxd, _ = FORMATS[dst]
  if src in INTS:
    lo, hi = int_range(src)
    exps = [k for k in (pd + 1, pd + 7, 30, 31, 53, 60, 62, 63) if 2 ** k < hi]
  else: exps = [0, pd + 3, emaxd - 1, emind, emind - 1]   # 1.0, a binade of integers, the top binade, the normal/subnormal edge
  ties = []
  for k in exps:
    u = Fraction(2) ** (max(k, emind) - pd + 1)
    ties += [Fraction(2) ** k + u / 2, Fraction(2) ** k + 3 * u / 2]
  sub = Fraction(2) ** (emind - pd + 1)   # the smallest subnormal of dst: ties at half and one and a half of it
  top = (2 - Fraction(2) ** (1 - pd)) * Fraction(2) ** emaxd   # the largest finite dst value; half an ulp past it rounds to inf
  ties += [sub / 2, 3 * sub / 2, top + Fraction(2) ** (emaxd - pd) ]
  out: list[int | float] = []
  for t in ties:
    if t.denominator != 1 and src in INTS: continue
    tv = int(t) if src in INTS else float(t)
    step = Fraction(ulp_at(src, tv))
    for v in (t, t - step, t + step):
      for s in (1, -1):
        x = int(s * v) if src in INTS else float(s * v)
        if Fraction(x) == s * v and holds(src, x) and x not in out: out.append(x)
  return out

# ***** NaN payloads *****

def nan_patterns(dt: DType) -> list[int]:
  """Bit patterns of NaNs of float dtype dt: quiet and signalling, payload bits high and low (and, for float32 and float64,
  only in the low half: truncating them to the narrower type's bits alone would give an infinity), both signs."""
  p, _, _, ebits = FORMATS[dt]
  m = p - 1
  exp, quiet = ((1 << ebits) - 1) << m, 1 << (m - 1)
  pats = [exp | quiet, exp | quiet | 1, exp | 1, exp | (1 << (m - 2)), exp | (1 << m) - 1]
  if dt in (dtypes.float32, dtypes.float64): pats.append(exp | (1 << (4 * dt.itemsize)) - 1)
  sign = 1 << (8 * dt.itemsize - 1)
  return pats + [x | sign for x in pats]

def bits_to_array(bits: list[int], dt: DType) -> np.ndarray:
  """The values with these bit patterns, in dt's numpy carrier (bfloat16: the top half of a float32)."""
  if dt == dtypes.bfloat16: return (np.array(bits, np.uint32) << 16).view(np.float32)
  return np.array(bits, np.dtype(f"u{dt.itemsize}")).view(np_type(dt))

# ***** reduce identities *****

def reduce_rows(dt: DType, n: int) -> dict[str, np.ndarray]:
  """Rows of n values of dt whose max, min, sum or prod starts from or ends at the edge of the type: every element the
  identity of max (-inf, or the integer minimum) or of min, all NaN, and values past the range of the next narrower type
  (float64 past float32's, 64-bit integers past 32 bits), where an accumulator started at that type's extreme shows."""
  lo, hi = (-math.inf, math.inf) if dt in FLOATS else int_range(dt)
  rows = {"all lowest": [lo] * n, "all highest": [hi] * n}
  if dt in FLOATS: rows["all NaN"] = [math.nan] * n
  if dt == dtypes.float64:   # exact in any order: powers of two (a sum of few terms of equal size)
    rows["below -float32 max"] = [-(2.0 ** 1000)] * (n - 1) + [-(2.0 ** 999)]
    rows["above float32 max"] = [2.0 ** 1000] * (n - 1) + [2.0 ** 999]
  if dt in (dtypes.int64, dtypes.uint64):
    rows["past 32 bits"] = [lo + 2 ** 40 + i for i in range(n)] if dt == dtypes.uint64 else [-(2 ** 40) - i for i in range(n)]
  return {k: np.array(v, np_type(dt)) for k, v in rows.items()}

# ***** one pool per dtype for the fuzzer *****

def special_pool(dt: DType) -> np.ndarray:
  """Every special value above that dt holds, in dt's numpy carrier: signed zeros, infinities, NaN payloads, the ties of
  each narrower float and the steps around them, the range edges. For random graphs to draw leaves from."""
  if dt == dtypes.bool: return np.array([False, True])
  if dt in INTS:
    lo, hi = int_range(dt)
    vals = {0, 1, -1, lo, hi, lo + 1, hi - 1} | {v for f in FORMATS if narrows(dt, f) for v in tie_values(dt, f)}
    return np.array(sorted(v for v in vals if lo <= v <= hi), np_type(dt))
  vals = [0.0, -0.0, math.inf, -math.inf] + [v for f in FORMATS if narrows(dt, f) for v in tie_values(dt, f)]
  return np.concatenate([np.array(vals, np.float64).astype(np_type(dt)), bits_to_array(nan_patterns(dt), dt)])
