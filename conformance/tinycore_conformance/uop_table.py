"""The uops section's table: edge operands per op and dtype, an independent reference of each op, and the byte comparison."""
from __future__ import annotations
import itertools, math
from fractions import Fraction
import numpy as np
from tinycore.dtype import DType, dtypes, FLOATS, INTS
from tinycore.uop import Ops
from tinycore_conformance.oracle import int_range, bf16_round
from tinycore_conformance.target import dtype_name
from tinycore_conformance.tolerances import ACCURACY
from tinycore_conformance.uops import CASTS, signature, from_bytes, operands, to_bytes

# every ALU op tinycore defines, by the kind of dtype it is defined on (FDIV is float division, IDIV integer division;
# bool ADD/MUL/MAX mean OR/AND/OR)
FLOAT_OPS = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC, Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MOD,
             Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.MULACC)
INT_OPS = (Ops.NEG, Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.OR, Ops.AND,
           Ops.SHL, Ops.SHR, Ops.WHERE, Ops.MULACC)
BOOL_OPS = (Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.OR, Ops.AND, Ops.WHERE)
APPROXIMATE = {Ops.EXP2, Ops.LOG2, Ops.SIN}   # compared within tolerances.ACCURACY; every other op to the bit
DIVISIONS = {Ops.IDIV, Ops.MOD}               # on integers: run in a child process, since a trap kills the interpreter

def ops_for(dt: DType) -> tuple[Ops, ...]: return FLOAT_OPS if dt in FLOATS else INT_OPS if dt in INTS else BOOL_OPS

# ***** edge operands *****

MANT = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}   # significand bits
def finfo(dt: DType) -> tuple[float, float, float]:
  """(largest finite, smallest normal, smallest subnormal) of a float dtype."""
  if dt == dtypes.bfloat16: return float(bf16_round(np.float32(3.3895314e38))), 2.0 ** -126, 2.0 ** -133
  fi = np.finfo({dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}[dt])
  return float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)

def float_edges(dt: DType) -> list[float]:
  big, tiny, sub = finfo(dt)
  p = 2.0 ** MANT[dt]
  vals = [0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.5, 3.0, -7.0, 1 / 3, 0.1, 1e4, -1e4, p, p + 2, -(p - 1), big, -big, tiny, sub, -sub,
          tiny - sub, 1e30, -1e30, math.inf, -math.inf, math.nan]
  return [v for v in vals if not math.isfinite(v) or abs(v) <= big]

def int_edges(dt: DType) -> list[int]:
  lo, hi = int_range(dt)
  vals = [0, 1, 2, 3, 7, 100, hi // 2, hi // 2 + 1, hi - 1, hi, -1, -2, -3, -7, -100, lo // 2, lo + 1, lo]
  return sorted({v for v in vals if lo <= v <= hi})

def edges(dt: DType) -> list:
  return [False, True] if dt == dtypes.bool else float_edges(dt) if dt in FLOATS else int_edges(dt)

def shift_amounts(dt: DType) -> list[int]:
  w = 8 * dt.itemsize
  lo, hi = int_range(dt)
  return sorted({v for v in (0, 1, 2, w - 1, w, w + 1, 2 * w - 1, 2 * w, -1) if lo <= v <= hi})

def columns(op: Ops, dt: DType) -> list[list]:
  """The operand columns of `op` on `dt`: every edge alone (unary), every ordered pair of edges (binary, so division and
  remainder see every sign combination and MIN // -1), shift amounts at and past the width, and a few addends for MULACC."""
  e = edges(dt)
  if op in (Ops.SHL, Ops.SHR): rows = list(itertools.product(e, shift_amounts(dt)))
  elif op is Ops.WHERE: rows = [(c, a, b) for c in (False, True) for a, b in itertools.product(e, e)]
  elif op is Ops.MULACC: rows = [(a, b, c) for a, b in itertools.product(e, e) for c in e[:: max(1, len(e) // 5)]] + fused_rows(dt)
  elif op in (Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC): rows = [(a,) for a in e]
  else: rows = list(itertools.product(e, e))
  return [list(c) for c in zip(*rows)]

def fused_rows(dt: DType) -> list[tuple]:
  """MULACC operands where one rounding and two differ: products that cancel against c below the dtype's precision,
  one that overflows while the sum does not, and products whose rounding in the subnormal range a sum would see."""
  if dt not in FLOATS: return []
  big, tiny, sub = finfo(dt)
  u = 2.0 ** (1 - MANT[dt])   # the spacing above 1
  return [(1 + u, 1 - u, -1.0), (1 + u, 1 + u, -(1 + 2 * u)), (1 + u, -(1 + u), 1 + 2 * u), (1 / 3, 3.0, -1.0), (0.1, 10.0, -1.0),
          (big, 2.0, -big), (-big, 2.0, big), (big, 1 + u, -big), (0.5 + u, sub, -sub), (0.5, sub, sub), (0.5, -sub, -sub), (tiny, 1 - u / 2, -tiny)]

def cast_column(src: DType, dst: DType) -> list:
  """Edges of `src`, plus the values at and just past the ends of `dst`'s range that `src` holds exactly."""
  vals = list(edges(src))
  if dst in INTS:
    lo, hi = int_range(dst)
    vals += [hi, hi + 1, lo, lo - 1, hi + 0.5, lo - 0.5, -0.5, 0.99, -0.99] if src in FLOATS else [hi, hi + 1, lo, lo - 1]
  elif dst in FLOATS:
    big, tiny, sub = finfo(dst)
    ulp_top = 2.0 ** (math.floor(math.log2(big)) - MANT[dst] + 1)
    vals += [big, big + ulp_top / 2, -big - ulp_top, tiny, sub, sub / 2, sub * 1.5, 2.0 ** MANT[dst] + 1, 2.0 ** 31, 2.0 ** 63 + 2 ** 40]
  return [v for v in dict.fromkeys(vals) if holds(src, v)]

def holds(dt: DType, v) -> bool:
  """`v` is exactly a value of `dt` (so the table shows the operand the kernel really gets)."""
  if dt == dtypes.bool: return isinstance(v, bool)
  if dt in INTS:
    lo, hi = int_range(dt)
    return float(v).is_integer() and lo <= v <= hi
  if not math.isfinite(v): return True
  return float(from_bytes(to_dtype_bytes(v, dt), dt)[0]) == v

def to_dtype_bytes(v, dt: DType) -> bytes:
  with np.errstate(all="ignore"): return to_bytes([v], dt)

SAME_SIZE = {1: (dtypes.int8, dtypes.uint8), 2: (dtypes.int16, dtypes.uint16, dtypes.float16, dtypes.bfloat16),
             4: (dtypes.int32, dtypes.uint32, dtypes.float32), 8: (dtypes.int64, dtypes.uint64, dtypes.float64)}

def bitcast_column(src: DType) -> list:
  """Bit patterns of every same-size integer edge, as values of `src` (NaN patterns left out: the specials section checks them)."""
  bits = [b for d in SAME_SIZE[src.itemsize] if d in INTS for b in int_edges(d)]
  vals = from_bytes(b"".join(int(b % 2 ** (8 * src.itemsize)).to_bytes(src.itemsize, "little") for b in bits), src)
  keep = [v.item() for v in vals if src not in FLOATS or not math.isnan(v)]
  return list(dict.fromkeys(keep))

# ***** an independent reference: Python ints and math, numpy only for IEEE arithmetic in the dtype itself *****

def wrap(v: int, dt: DType) -> int:
  lo, hi = int_range(dt)
  return (v - lo) % (hi - lo + 1) + lo

def trunc_div(a: int, b: int) -> int:
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q

def ref_int(op: Ops, dt: DType, a: int, b: int = 0, c: int = 0):
  w = 8 * dt.itemsize
  if op is Ops.NEG: return wrap(-a, dt)
  if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ): return {Ops.CMPLT: a < b, Ops.CMPNE: a != b, Ops.CMPEQ: a == b}[op]
  if op is Ops.WHERE: return b if a else c
  if op is Ops.IDIV: return 0 if b == 0 else wrap(trunc_div(a, b), dt)
  if op is Ops.MOD: return 0 if b == 0 else wrap(a - b * trunc_div(a, b), dt)
  if op in (Ops.SHL, Ops.SHR): return wrap(a << (b & (w - 1)), dt) if op is Ops.SHL else a >> (b & (w - 1))
  if op is Ops.MULACC: return wrap(a * b + c, dt)
  return wrap({Ops.ADD: a + b, Ops.SUB: a - b, Ops.MUL: a * b, Ops.MAX: max(a, b), Ops.XOR: a ^ b, Ops.OR: a | b, Ops.AND: a & b}[op], dt)

def ref_bool(op: Ops, a: bool, b: bool = False, c: bool = False) -> bool:
  if op is Ops.WHERE: return b if a else c
  return {Ops.ADD: a or b, Ops.MUL: a and b, Ops.MAX: a or b, Ops.OR: a or b, Ops.AND: a and b, Ops.XOR: a != b,
          Ops.CMPLT: (not a) and b, Ops.CMPNE: a != b, Ops.CMPEQ: a == b}[op]

def in_dtype(x: float, dt: DType):
  """A float64 value rounded once to `dt` (numpy's conversion; bfloat16 by oracle.bf16_round)."""
  with np.errstate(all="ignore"):
    if dt == dtypes.bfloat16: return float(bf16_round(np.float64(x)))
    return {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}[dt](x)

def ref_float(op: Ops, dt: DType, a: float, b: float = 0.0, c: float = 0.0):
  if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ): return {Ops.CMPLT: a < b, Ops.CMPNE: a != b, Ops.CMPEQ: a == b}[op]
  if op is Ops.WHERE: return in_dtype(b if a else c, dt)
  if op is Ops.NEG: return in_dtype(-a, dt)
  if op is Ops.TRUNC: return in_dtype(math.copysign(math.trunc(a), a) if math.isfinite(a) else a, dt)
  if op is Ops.MAX: return in_dtype(math.nan if math.isnan(a) or math.isnan(b) else max(a, b), dt)
  if op is Ops.MOD: return in_dtype(math.nan if math.isinf(a) or b == 0 or math.isnan(a) or math.isnan(b) else math.fmod(a, b), dt)
  if op in APPROXIMATE:
    fn = {Ops.EXP2: lambda x: 2.0 ** x if x < 2000 else math.inf, Ops.LOG2: lambda x: math.nan if x < 0 else -math.inf if x == 0 else math.log2(x),
          Ops.SIN: lambda x: math.sin(x) if math.isfinite(x) else math.nan}[op]
    return in_dtype(math.nan if math.isnan(a) else fn(a), dt)
  if op is Ops.MULACC: return ref_fma(dt, a, b, c)
  # IEEE arithmetic, rounded once to the dtype (bfloat16: computed in float32, then rounded)
  carrier = np.float32 if dt == dtypes.bfloat16 else {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}[dt]
  x, y = carrier(a), carrier(b)
  with np.errstate(all="ignore"):
    out = {Ops.ADD: lambda: x + y, Ops.SUB: lambda: x - y, Ops.MUL: lambda: x * y, Ops.FDIV: lambda: x / y, Ops.RECIP: lambda: carrier(1) / x,
           Ops.SQRT: lambda: np.sqrt(x)}[op]()
  return in_dtype(float(out), dt)

def round_exact(x: Fraction, dt: DType):
  """A rational rounded once to the nearest value of `dt` (ties to even), in Python integers; past the largest, infinity."""
  big, tiny, _ = finfo(dt)
  e = x.numerator.bit_length() - x.denominator.bit_length()
  if abs(x) < Fraction(2) ** e: e -= 1   # now 2**e <= |x| < 2**(e + 1)
  quantum = Fraction(2) ** (max(e, round(math.log2(tiny))) - MANT[dt] + 1)   # subnormals share the smallest normal's
  v = round(x / quantum) * quantum                                             # Fraction's round: half to even
  return in_dtype((-1.0 if x < 0 else 1.0) * (math.inf if abs(v) > big else float(abs(v))), dt)

def ref_fma(dt: DType, a: float, b: float, c: float):
  """a * b + c rounded once (IEEE fusedMultiplyAdd): the exact value in rationals, then round_exact."""
  if math.isnan(a) or math.isnan(b) or math.isnan(c): return in_dtype(math.nan, dt)
  if math.isinf(a) or math.isinf(b):
    if a == 0 or b == 0: return in_dtype(math.nan, dt)
    p = math.copysign(math.inf, a) * math.copysign(1.0, b)
    return in_dtype(math.nan if math.isinf(c) and c != p else p, dt)
  if math.isinf(c): return in_dtype(c, dt)
  x = Fraction(a) * Fraction(b) + Fraction(c)
  if x == 0:   # an exact zero is -0 only as a sum of two -0s (the product's sign is its operands')
    neg = (a == 0 or b == 0) and c == 0 and math.copysign(1.0, a) * math.copysign(1.0, b) < 0 and math.copysign(1.0, c) < 0
    return in_dtype(-0.0 if neg else 0.0, dt)
  return round_exact(x, dt)

def round_int(v: int, bits: int) -> int:
  """The integer v rounded to `bits` significant bits, ties to even: int -> float conversion done in integers."""
  n = abs(v).bit_length() - bits
  if n <= 0: return v
  q, r = divmod(abs(v), 1 << n)
  q += r > 1 << (n - 1) or (r == 1 << (n - 1) and q & 1)
  return (q << n) * (1 if v > 0 else -1)

def ref_cast(v, src: DType, dst: DType, bitcast: bool = False):
  if bitcast: return from_bytes(to_dtype_bytes(v, src), dst)[0].item()
  if dst == dtypes.bool: return v != 0
  if dst in INTS:
    if src not in FLOATS: return wrap(int(v), dst)
    lo, hi = int_range(dst)
    return 0 if math.isnan(v) else hi if v >= hi else lo if v <= lo else math.trunc(v)
  # integers round to the float's precision, once; floats through in_dtype
  if src not in FLOATS: v = round_int(int(v), MANT[dst])
  return in_dtype(float(v), dst)

def reference(op: Ops, dt: DType, cols: list, to: DType | None = None) -> list:
  """The expected value of every row, computed without tinycore's exec_alu/exec_cast."""
  in_dts = signature(op, dt, to)[1]
  rows = list(zip(*[v.tolist() for v in operands(in_dts, cols)]))
  if op in CASTS: return [ref_cast(r[0], dt, to, op is Ops.BITCAST) for r in rows]
  fn = (lambda *r: ref_bool(op, *r)) if dt == dtypes.bool else (lambda *r: ref_int(op, dt, *r)) if dt in INTS else (lambda *r: ref_float(op, dt, *r))
  return [fn(*r) for r in rows]

# ***** comparison *****

def ulps(got: np.ndarray, want: np.ndarray, dt: DType) -> np.ndarray:
  """|got - want| in units of the last place of `want` in `dt` (subnormal spacing below the normal range)."""
  big, tiny, sub = finfo(dt)
  w = np.abs(want.astype(np.float64))
  spacing = np.maximum(2.0 ** (np.floor(np.log2(np.maximum(w, tiny))) - (MANT[dt] - 1)), sub)
  with np.errstate(invalid="ignore"): return np.abs(got.astype(np.float64) - want.astype(np.float64)) / spacing

def mismatched_rows(op: Ops, dt: DType, out_dt: DType, got: bytes, want: bytes, in_cols: list[np.ndarray]) -> np.ndarray:
  """Indices of the rows whose result differs from the definition. Bytes must match exactly (bools 0/1, integers, signed
  zeros, infinities) except: any NaN matches NaN, max(+0, -0) may be either zero, and EXP2/LOG2/SIN are within ACCURACY."""
  w = out_dt.itemsize
  same_bytes = np.array([got[i:i + w] == want[i:i + w] for i in range(0, len(want), w)], bool)
  if out_dt not in FLOATS: return np.flatnonzero(~same_bytes)
  g, e = from_bytes(got, out_dt).astype(np.float64), from_bytes(want, out_dt).astype(np.float64)
  ok = same_bytes | (np.isnan(g) & np.isnan(e))
  if op is Ops.MAX: ok |= (g == 0) & (e == 0) & (in_cols[0] == 0) & (in_cols[1] == 0)
  if op in APPROXIMATE:
    limit, absolute = ACCURACY[op.name.lower()][dtype_name(out_dt)][:2]
    finite = np.isfinite(e) & np.isfinite(g) & (e != 0)
    with np.errstate(invalid="ignore"): ok |= finite & ((ulps(g, e, out_dt) <= limit) | (np.abs(g - e) <= absolute))
  return np.flatnonzero(~ok)
