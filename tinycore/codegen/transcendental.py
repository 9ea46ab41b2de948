"""Decompositions of SIN (exact range reduction), float MOD (exact fmod) and float64 EXP2/LOG2 into ALU ops every target
has, as rewrite rules a renderer opts into through its `extra_matcher` (docs/writing-a-backend.md, section 3)."""
from __future__ import annotations
import functools, math
from fractions import Fraction
from tinycore.dtype import DType, dtypes, truncate
from tinycore.uop import UOp, Ops
from tinycore.rewrite import PatternMatcher, UPat

# a float format's integer twins and its significand bits (the implicit one included): the float32 forms use 32-bit
# integers only (WGSL has nothing wider), the float64 forms 64-bit ones
FORMATS = {dtypes.float32: (dtypes.uint32, dtypes.int32, 24), dtypes.float64: (dtypes.uint64, dtypes.int64, 53)}
WIDE = (dtypes.float16, dtypes.bfloat16)   # computed in float32 and rounded once: float32 is exact for their SIN and MOD inputs

def _c(dt: DType, v) -> UOp: return UOp.const(dt, v)
def _shl(x: UOp, n: UOp | int) -> UOp: return x.alu(Ops.SHL, n if isinstance(n, UOp) else _c(x.dtype, n))
def _shr(x: UOp, n: UOp | int) -> UOp: return x.alu(Ops.SHR, n if isinstance(n, UOp) else _c(x.dtype, n))
def _sub(x: UOp, y: UOp | int) -> UOp: return x.alu(Ops.SUB, y if isinstance(y, UOp) else _c(x.dtype, y))   # wraps on unsigned

# ***** exact constants: pi and 2/pi to any number of bits, in Python integers (Machin's formula) *****

def _atan_inv(n: int, one: int) -> int:
  """atan(1/n) * one, by its alternating series."""
  total, power, k = 0, one // n, 0
  while power:
    total += (-1) ** k * (power // (2 * k + 1))
    power, k = power // (n * n), k + 1
  return total

@functools.cache
def pi_bits(n: int) -> int:
  """floor(pi * 2**n) (64 guard bits absorb the series' truncations)."""
  one = 1 << (n + 64)
  return (16 * _atan_inv(5, one) - 4 * _atan_inv(239, one)) >> 64

@functools.cache
def two_over_pi_bits(n: int) -> int:
  """floor(2/pi * 2**n): bit i (counting from 1 after the binary point) of 2/pi is bit n - i of this integer."""
  return (1 << (2 * n + 193)) // pi_bits(n + 128) >> 64 if n >= 0 else 0

# ***** small builders *****

def _poly(x: UOp, coeffs: list[float]) -> UOp:
  """coeffs[0] + coeffs[1]*x + ... by Horner, in x's dtype."""
  acc = _c(x.dtype, coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = acc * x + _c(x.dtype, c)
  return acc

def _select(i: UOp, values: list[int]) -> UOp:
  """values[i] for an unsigned i (values[-1] past the end): a chain of WHEREs, the table lookup every target can do."""
  out = _c(i.dtype, values[-1])
  for k in range(len(values) - 2, -1, -1): out = i.eq(_c(i.dtype, k)).where(_c(i.dtype, values[k]), out)
  return out

def _via_float32(op: Ops):
  """op on a half or bfloat16 value, done in float32 and rounded once (exact for MOD, within one ulp for SIN)."""
  return lambda x: UOp(op, dtypes.float32, tuple(s.cast(dtypes.float32) for s in x.src)).cast(x.dtype) if x.dtype.count == 1 else None

def _magnitude(x: UOp) -> tuple[UOp, UOp]:
  """(|x| as its unsigned bits, x's sign bit): exact for every value, -0.0 and NaN included."""
  uint = FORMATS[x.dtype][0]
  sign = 1 << (8 * x.dtype.itemsize - 1)
  bits = x.bitcast(uint)
  return bits & _c(uint, sign - 1), bits & _c(uint, sign)

# ***** SIN: reduce x = k*pi/2 + r exactly (|r| <= pi/4), then the sine or cosine polynomial of r, picked by k mod 4 *****

# Payne-Hanek for |x| >= pi/4 (below it r = x): x = m * 2**e (m the integer of the significand's bits) times the window of
# 2/pi's bits that matters modulo 4, in LIMB-bit pieces of the unsigned twin (a piece product and the column sums fit it),
# gives the quadrant and two words of the fraction. The window is long enough that the bits of 2/pi left out change less
# than the last of them, and two words keep r's relative error small even for the x closest to a multiple of pi/2
# (2**-29.2 away in float32: 16367173 * 2**72, 2**-60.9 in float64). Taylor terms: the first omitted one is far below an ulp.
SIN_PARAMS = {  # dtype: (LIMB, window limbs, sin terms, cos terms)
  dtypes.float32: (15, 6, 4, 5),
  dtypes.float64: (27, 7, 8, 8),
}

def _exp_bias(ft: DType) -> int: return (1 << (8 * ft.itemsize - FORMATS[ft][2] - 1)) - 1

@functools.cache
def two_over_pi_limbs(ft: DType) -> tuple[int, ...]:
  """2/pi's bits in LIMB-bit pieces, the first piece starting where the window of the arguments in [1/2, 1) starts."""
  mant = FORMATS[ft][2]
  limb, nw = SIN_PARAMS[ft][:2]
  first = -mant - 1                      # x in [1/2, 1) is m * 2**-mant, and the window starts at bit e - 1 of 2/pi
  last_window = (2 ** (8 * ft.itemsize - mant) - 1) - (_exp_bias(ft) - 1)   # from inf's biased exponent, the largest
  count = last_window // limb + nw + 1
  top = first + count * limb
  bits = two_over_pi_bits(top)
  return tuple((bits >> (top - (first + (c + 1) * limb - 1))) & ((1 << limb) - 1) if first + (c + 1) * limb - 1 >= 0 else 0
               for c in range(count))

@functools.cache
def half_pi_scaled(ft: DType) -> tuple[float, float]:
  """pi/2 / 2**width (width: the dtype's bits) as c1 + c2, c1 rounded to the dtype and c2 the rest."""
  width, n = 8 * ft.itemsize, 256
  exact = Fraction(pi_bits(n), 2 ** (n + 1 + width))
  c1 = truncate(ft, float(exact))
  return c1, float(exact - Fraction(c1))

def _payne_hanek(abits: UOp, ft: DType) -> tuple[UOp, UOp]:
  """(quadrant, r) for |x| >= 1/2, from |x|'s bits: |x| * 2/pi = 4n + quadrant + r / (pi/2), r to 2 * width bits."""
  uint, _, mant = FORMATS[ft]
  limb, nw = SIN_PARAMS[ft][:2]
  width, mask = 8 * ft.itemsize, (1 << limb) - 1
  m = (abits & _c(uint, (1 << (mant - 1)) - 1)) | _c(uint, 1 << (mant - 1))
  start = _exp_bias(ft) - 1              # the biased exponent of [1/2, 1): window position 0
  pos = _sub(_shr(abits, mant - 1).maximum(_c(uint, start)), start)   # smaller |x| (r = x there) read position 0: harmless
  j, sh = pos // _c(uint, limb), pos % _c(uint, limb)
  table = two_over_pi_limbs(ft)
  pieces = [_select(j, list(table[t:t + len(table) - nw])) for t in range(nw + 1)]   # table[j + t]
  window = [(_shl(pieces[t], sh) | _shr(pieces[t + 1], _sub(_c(uint, limb), sh))) & _c(uint, mask) for t in range(nw)]
  w = window[::-1]                       # least significant limb first
  ms = [_shr(m, limb * a) & _c(uint, mask) for a in range(-(-mant // limb))]
  digits, acc = [], None
  for k in range(nw):                    # m * window mod 2**(nw*LIMB), with carries: every sum fits the unsigned twin
    col = functools.reduce(lambda x, y: x + y, [ms[a] * w[k - a] for a in range(len(ms)) if 0 <= k - a < nw])
    acc = col if acc is None else _shr(acc, limb) + col
    digits.append(acc & _c(uint, mask))
  quadrant = _shr(digits[-1], limb - 2) & _c(uint, 3)
  def field(lo: int) -> UOp:             # the `width` bits of the product from bit lo up, as one unsigned integer
    return functools.reduce(lambda x, y: x | y, [_shl(d, limb * k - lo) if limb * k >= lo else _shr(d, lo - limb * k)
                                                 for k, d in enumerate(digits) if lo - limb < limb * k < lo + width])
  # the fraction below the quadrant in two words; at 1/2 or more it is the next quadrant's negative fraction, made a
  # magnitude here (two's complement of the pair) so a tiny r keeps its low bits instead of cancelling them
  hi, lo = field(nw * limb - 2 - width), field(nw * limb - 2 - 2 * width)
  neg = _shr(hi, width - 1).ne(_c(uint, 0))
  hi, lo = neg.where((hi ^ _c(uint, (1 << width) - 1)) + lo.eq(_c(uint, 0)).cast(uint), hi), neg.where(_sub(_c(uint, 0), lo), lo)
  # r = (hi + lo / 2**width) * pi/2 / 2**width, hi cut where the dtype holds each part exactly, pi/2 in two parts
  low = (1 << (width - mant)) - 1
  top, bottom = (hi & _c(uint, ((1 << width) - 1) ^ low)).cast(ft), (hi & _c(uint, low)).cast(ft)
  c1, c2 = half_pi_scaled(ft)
  mag = top * _c(ft, c1) + (top * _c(ft, c2) + (bottom * _c(ft, c1) + lo.cast(ft) * _c(ft, c1 / 2 ** width)))
  return (quadrant + neg.cast(uint)) & _c(uint, 3), neg.where(-mag, mag)

def _sin(x: UOp) -> UOp | None:
  ft = x.dtype
  if ft.count != 1: return None
  uint = FORMATS[ft][0]
  nsin, ncos = SIN_PARAMS[ft][2:]
  abits, sign = _magnitude(x)
  ax = abits.bitcast(ft)
  q, r = _payne_hanek(abits, ft)
  small = ax < _c(ft, math.pi / 4)
  q, r = small.where(_c(uint, 0), q), small.where(ax, r)
  r2 = r * r
  s = r + r * r2 * _poly(r2, [(-1) ** (i + 1) / math.factorial(2 * i + 3) for i in range(nsin)])
  c = _c(ft, 1.0) + r2 * _poly(r2, [(-1) ** (i + 1) / math.factorial(2 * i + 2) for i in range(ncos)])
  v = (q & _c(uint, 1)).ne(_c(uint, 0)).where(c, s)
  # quadrants 2 and 3 negate, and sin(-x) = -sin(x): both by the sign bit, so sin(-0.0) is -0.0
  flip = _shl(q & _c(uint, 2), 8 * ft.itemsize - 2) ^ sign
  return (ax < _c(ft, math.inf)).where((v.bitcast(uint) ^ flip).bitcast(ft), _c(ft, math.nan))

# ***** MOD on floats: fmod, exact. |a| = ma * 2**ea, |b| = mb * 2**eb: the result is ((ma * 2**(ea-eb)) mod mb) * 2**eb *****

def _fmod(a: UOp, b: UOp) -> UOp | None:
  ft = a.dtype
  if ft.count != 1: return None
  uint, _, mant = FORMATS[ft]
  step = 8 * ft.itemsize - mant          # r < mb < 2**mant, so r << step fits the unsigned twin
  (abits, sign), (bbits, _) = _magnitude(a), _magnitude(b)
  def split(bits: UOp) -> tuple[UOp, UOp]:   # (integer significand, biased exponent, subnormals as exponent 1)
    biased = _shr(bits, mant - 1)
    frac = bits & _c(uint, (1 << (mant - 1)) - 1)
    return biased.ne(_c(uint, 0)).where(frac | _c(uint, 1 << (mant - 1)), frac), biased.maximum(_c(uint, 1))
  (ma, ea), (mb, eb) = split(abits), split(bbits)
  d = _sub(ea, eb)                       # >= 0 whenever |a| >= |b|, the only case this result is used for
  r = _shl(ma % mb, d % _c(uint, step)) % mb
  full = d // _c(uint, step)
  for i in range(((1 << (8 * ft.itemsize - mant)) - 3) // step):   # finite biased exponents run 1 .. 2**bits - 2
    r = _c(uint, i).alu(Ops.CMPLT, full).where(_shl(r, step) % mb, r)
  fa, fb = abits.bitcast(ft), bbits.bitcast(ft)
  # r * 2**-(mant-1) is exact, and scaling it by 2**(eb - bias) (a normal power of two, from its bits) gives the true
  # remainder, which the dtype holds: exact, subnormal results too, with no division (WGSL's is not correctly rounded)
  res = ((r.cast(ft) * _c(ft, 2.0 ** (1 - mant))) * _shl(eb, mant - 1).bitcast(ft)).bitcast(uint) | sign
  ok = (fa < _c(ft, math.inf)) & (_c(ft, 0.0) < fb)                # NaN for a infinite or NaN, b zero or NaN
  return ok.where((fa < fb).where(a, res.bitcast(ft)), _c(ft, math.nan))

# ***** float64 EXP2 and LOG2, for targets whose hardware has them only in float32 *****

def _f64(x) -> UOp: return _c(dtypes.float64, x)
def _rint(x: UOp) -> UOp: return (x + (x < _f64(0.0)).where(_f64(-0.5), _f64(0.5))).alu(Ops.TRUNC)
def _pow2i(k: UOp) -> UOp:
  """2**k for an integer-valued float64 k in [-1022, 1023], from its exponent bits."""
  return ((k.cast(dtypes.int64) + 1023).alu(Ops.SHL, _c(dtypes.int64, 52))).bitcast(dtypes.float64)

def _exp2_f64(x: UOp) -> UOp:
  inrange = (x < _f64(1024.0)) & (x < _f64(-1075.0)).logical_not()
  xs = x.ne(x).where(x, inrange.where(x, _f64(0.0)))   # NaN stays NaN
  k = _rint(xs)
  t = (xs - k) * _f64(math.log(2))   # |t| <= ln2/2: e^t to 1e-17 by its Taylor series
  p = _poly(t, [1 / math.factorial(i) for i in range(15)])
  k1 = (k * _f64(0.5)).alu(Ops.TRUNC)
  out = p * _pow2i(k1) * _pow2i(k - k1)   # two factors: 2**k alone leaves the normal range near the ends
  return (x < _f64(-1075.0)).where(_f64(0.0), (x < _f64(1024.0)).logical_not().where(x.ne(x).where(x, _f64(math.inf)), out))

def _log2_f64(x: UOp) -> UOp:
  sub = x < _f64(2.0 ** -1022)
  xs = sub.where(x * _f64(2.0 ** 54), x)
  bits = xs.bitcast(dtypes.int64)
  e = (bits.alu(Ops.SHR, _c(dtypes.int64, 52)) & 0x7ff).cast(dtypes.float64) - sub.where(_f64(1023.0 + 54), _f64(1023.0))
  m = ((bits & 0xfffffffffffff) | 0x3ff0000000000000).bitcast(dtypes.float64)   # in [1, 2)
  big = _f64(math.sqrt(2)) < m
  m, e = big.where(m * _f64(0.5), m), big.where(e + _f64(1.0), e)
  s = (m - _f64(1.0)) / (m + _f64(1.0))   # |s| <= 0.172: log m = 2 atanh s
  ln = _f64(2.0) * s * _poly(s * s, [1 / (2 * i + 1) for i in range(12)])
  out = e + ln * _f64(1 / math.log(2))
  special = (x < _f64(0.0)).where(_f64(math.nan), x.eq(_f64(0.0)).where(_f64(-math.inf), x.eq(_f64(math.inf)).where(x, out)))
  return x.ne(x).where(x, special)

# ***** the rules: a renderer adds the ones its target needs to its extra_matcher *****

# SIN of every float dtype: float32 with 32-bit integers only, float64 with 64-bit ones, half and bfloat16 through float32
sin_rules = PatternMatcher([
  (UPat(Ops.SIN, dtype=tuple(FORMATS), name="x"), lambda x: _sin(x.src[0])),
  (UPat(Ops.SIN, dtype=WIDE, name="x"), _via_float32(Ops.SIN)),
])
# MOD of every float dtype (exact fmod: the remainder of truncated division, with the dividend's sign), the same way
fmod_rules = PatternMatcher([
  (UPat(Ops.MOD, dtype=tuple(FORMATS), name="x"), lambda x: _fmod(*x.src)),
  (UPat(Ops.MOD, dtype=WIDE, name="x"), _via_float32(Ops.MOD)),
])
# EXP2 and LOG2 of float64 from float64 arithmetic and 64-bit integers
exp2_log2_f64_rules = PatternMatcher([
  (UPat(Ops.EXP2, dtype=dtypes.float64, name="x"), lambda x: _exp2_f64(x.src[0]) if x.dtype.count == 1 else None),
  (UPat(Ops.LOG2, dtype=dtypes.float64, name="x"), lambda x: _log2_f64(x.src[0]) if x.dtype.count == 1 else None),
])
