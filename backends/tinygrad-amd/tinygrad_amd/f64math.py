"""float64 exp2, log2 and sin as UOp graphs of adds, multiplies and bit operations: the hardware has float32
transcendentals only. Rewrite rules for the renderer's extra_matcher (range reduction, then polynomials)."""
from __future__ import annotations
import math
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops
from tinycore.rewrite import PatternMatcher, UPat

F64, I64 = dtypes.float64, dtypes.int64

def _c(x: float) -> UOp: return UOp.const(F64, x)
def _horner(x: UOp, coeffs: list[float]) -> UOp:
  """coeffs[0] + x * (coeffs[1] + x * (...))."""
  acc = _c(coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = acc * x + _c(c)
  return acc
def _trunc(x: UOp) -> UOp: return UOp(Ops.TRUNC, F64, (x,))
def _is_nan(x: UOp) -> UOp: return x.ne(x)
def _pow2(k: UOp) -> UOp:
  """2^k for an integer-valued float64 k in [-1022, 1023], built from its exponent bits."""
  return ((k.cast(dtypes.int32).cast(I64) + 1023) * (1 << 52)).bitcast(F64)

def exp2(x: UOp) -> UOp:
  """2^x = 2^k * e^(f ln 2) with k = trunc(x), |f| < 1: a Taylor series to degree 17 (error below 1e-18), and 2^k applied
  in two halves so results that overflow or fall into the subnormals round once."""
  xc = x.maximum(-1100.0)
  xc = (xc < 1100.0).where(xc, _c(1100.0))
  k = _trunc(xc)
  p = _horner((xc - k) * math.log(2), [1 / math.factorial(n) for n in range(18)])
  k1 = _trunc(k * 0.5)
  out = p * _pow2(k1) * _pow2(k - k1)
  return _is_nan(x).where(x, out)

def log2(x: UOp) -> UOp:
  """log2(x) = e + log(m)/ln 2 with x = m * 2^e, m in [sqrt(1/2), sqrt(2)): log(m) = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172,
  by its odd series to s^25. Subnormals are scaled by 2^64 first."""
  tiny = x < 2.2250738585072014e-308
  xs = tiny.where(x * 18446744073709551616.0, x)
  bits = xs.bitcast(I64)
  e = (((bits // (1 << 52)) & 0x7ff) - 1023).cast(F64) - tiny.where(_c(64.0), _c(0.0))
  m = ((bits & ((1 << 52) - 1)) | (1023 << 52)).bitcast(F64)
  big = _c(math.sqrt(2)) < m
  m = big.where(m * 0.5, m)
  e = e + big.where(_c(1.0), _c(0.0))
  s = (m - 1.0) / (m + 1.0)
  log_m = s * _horner(s * s, [2.0 / (2 * n + 1) for n in range(13)])
  out = e + log_m * (1 / math.log(2))
  out = (x < 0.0).where(_c(math.nan), out)
  out = x.eq(0.0).where(_c(-math.inf), out)
  out = x.eq(math.inf).where(x, out)
  return _is_nan(x).where(x, out)

# pi/2 in three parts (the first two with trailing zero bits, so k times them is exact for |k| < 2^20)
PIO2_1, PIO2_2, PIO2_3 = 1.57079632673412561417e+00, 6.07710050650619224932e-11, 2.02226624879595063154e-21

def sin(x: UOp) -> UOp:
  """sin(x): r = x - k pi/2 (Cody-Waite in three parts), |r| <= pi/4, then the sine or cosine series of r by the quadrant
  k mod 4. Accurate while |x| < 2^20 * pi/2; infinities and NaN give NaN."""
  y = x * (2 / math.pi)
  k = _trunc(y + (y < 0.0).where(_c(-0.5), _c(0.5)))
  r = x - k * PIO2_1 - k * PIO2_2 - k * PIO2_3
  r2 = r * r
  s = r * _horner(r2, [(-1) ** n / math.factorial(2 * n + 1) for n in range(10)])
  c = _horner(r2, [(-1) ** n / math.factorial(2 * n) for n in range(10)])
  q = (k - _trunc(k * 0.25) * 4.0)   # k mod 4, in (-4, 4)
  q = (q < 0.0).where(q + 4.0, q)
  out = q.eq(0.0).where(s, q.eq(1.0).where(c, q.eq(2.0).where(-s, -c)))
  return (x.ne(x) | x.eq(math.inf) | x.eq(-math.inf)).where(_c(math.nan), out)

f64_transcendentals = PatternMatcher([
  (UPat(Ops.EXP2, F64, (UPat.var("x"),)), exp2),
  (UPat(Ops.LOG2, F64, (UPat.var("x"),)), log2),
  (UPat(Ops.SIN, F64, (UPat.var("x"),)), sin),
])
