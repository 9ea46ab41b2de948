"""Dtype emulation: the dtypes a renderer does not compute, convert or address natively (Renderer.alu_dtypes,
float_conversions, memory_word), rewritten on the linear program into ones it does: 16-bit floats in float32, 8/16-bit
integers in 32 bits, 64-bit integers as 32-bit halves, 8/16-bit memory packed in 32-bit words."""
from __future__ import annotations
import math, struct
from tinycore.dtype import DType, PtrDType, dtypes, f32_to_bf16_bits, bf16_bits_to_f32
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.rewrite import PatternMatcher, UPat, graph_rewrite_map
from tinycore.renderer import Renderer
from tinycore.runtime.errors import UnsupportedError

# The passes run on the linear program, not the kernel graph: the linearizer makes the accumulators, and their updates (a
# half product's, an int64 sum's) need the emulation as much as any op. A value of an emulated dtype is represented by
# BITCAST(its representation -> the dtype), which every rule consuming one takes apart: a half or bfloat16 held as its bits
# is BITCAST(uint16 -> half), a 64-bit integer BITCAST(uint32.vec(2) -> int64) (low word first). The wrapper keeps the
# original dtype visible to the users rewritten after it; once they are, nothing reads it and it is dropped.
F16, F32, U16, U32, PAIR = dtypes.float16, dtypes.float32, dtypes.uint16, dtypes.uint32, dtypes.uint32.vec(2)
SMALL_FLOATS = (dtypes.float16, dtypes.bfloat16)
WIDER = {dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32, dtypes.uint8: U32, dtypes.uint16: U32, dtypes.float16: F32, dtypes.bfloat16: F32}
LONGS = (dtypes.int64, dtypes.uint64)
BUFFERS = (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG)

class Emulation:
  """What one renderer lacks, by dtype, and the number the next accumulator made here takes."""
  def __init__(self, ren: Renderer, uops: list[UOp]):
    native = ren.supported_dtypes if ren.alu_dtypes is None else ren.alu_dtypes
    lacks = {d for d in ren.supported_dtypes if d not in native}
    self.floats = lacks & set(SMALL_FLOATS)                      # computed in float32
    self.bits = {d for d in self.floats if d not in ren.float_conversions}   # and held as their bits
    self.ints = lacks & {dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16}
    self.longs = lacks & set(LONGS)
    self.word, self.exact_division, self.device = ren.memory_word, ren.exact_division, ren.device
    self.emulated = self.floats | self.ints | self.longs | {d for d in ren.supported_dtypes if d.itemsize < self.word}
    self.acc = max((u.arg for u in uops if u.op is Ops.DEFINE_ACC), default=-1) + 1
  def new_acc(self) -> int:
    self.acc += 1
    return self.acc - 1

def scalar(dt: DType) -> DType: return (dt.base if isinstance(dt, PtrDType) else dt).scalar
def vec(dt: DType, like: DType) -> DType: return dt.vec(like.count) if like.count > 1 else dt
def const(like: UOp, v, dt: DType | None = None) -> UOp: return UOp.const(vec(dt or scalar(like.dtype), like.dtype), v)
def shl(x: UOp, n) -> UOp: return x.alu(Ops.SHL, x._b(n))
def shr(x: UOp, n) -> UOp: return x.alu(Ops.SHR, x._b(n))
def sub(x: UOp, y) -> UOp: return x.alu(Ops.SUB, x._b(y))
def where(c: UOp, a: UOp, b) -> UOp: return c.where(a, b if isinstance(b, UOp) else const(a, b))
def wrapped(dtype, inner) -> UPat: return UPat(Ops.BITCAST, dtype, (UPat(dtype=inner, name="r"),), name="w")
def retype_buffer(x: UOp, dt: DType, size: int) -> UOp: return x.replace(dtype=dt.ptr(size, x.dtype.addrspace))

# ***** 16-bit floats: arithmetic in float32, rounded back after every op *****

def float_alu(ctx: Emulation, x: UOp) -> UOp | None:
  t = x.src[-1].dtype
  if t.scalar not in ctx.floats or x.op is Ops.WHERE: return None
  if x.op is Ops.MULACC:   # rounded once (a product and a sum in float32 would round twice): half exactly, bfloat16 not at all
    if t.scalar != F16: raise UnsupportedError(f"backend {ctx.device}: no fused multiply-add (MULACC) of {t.scalar.name} from float32 arithmetic")
    return f16_fma(*(s.cast(vec(F32, s.dtype)) for s in x.src)).cast(x.dtype)
  if t == F16 and x.op in (Ops.FDIV, Ops.RECIP, Ops.SQRT) and not ctx.exact_division:
    a, b = (UOp.const(F32, 1.0) if x.op is Ops.RECIP else x.src[0].cast(F32)), x.src[-1].cast(F32)
    return f16_root(b, b.alu(Ops.SQRT)) if x.op is Ops.SQRT else f16_quotient(a, b, a / b)
  out = UOp(x.op, x.dtype if x.op in GroupOp.Comparison else vec(F32, t), tuple(s.cast(vec(F32, s.dtype)) for s in x.src))
  return out if x.op in GroupOp.Comparison else out.cast(x.dtype)

def f16_fma(a: UOp, b: UOp, c: UOp) -> UOp:
  """a * b + c of three halves (float32 values), rounded once to half: the product is exact in float32 (22 bits), the
  sum's rounding error exact by Knuth's two-sum, and the sum rounded to odd (its last bit set where it is inexact) then
  to half is rounded once (float32 keeps 13 more bits; a nonzero exact sum is at least 2^-48, never subnormal)."""
  p = a * b
  s = p + c
  back = s - p
  e = (p - (s - back)) + (c - back)
  bits = s.bitcast(vec(U32, s.dtype))
  inexact = e.ne(0.0) & (bits & 0x7f800000).ne(0x7f800000) & (bits & 1).eq(0)   # an infinite sum leaves e NaN
  step = ((e < 0.0).ne(s < 0.0)).where(bits.alu(Ops.SUB, const(bits, 1)), bits + 1)   # toward the exact sum
  return inexact.where(step, bits).bitcast(s.dtype)

# half division and square root where float32's are inexact (Renderer.exact_division False: WGSL lets them be 2.5 ulp off),
# so that one rounded to half is not always the correctly rounded half. The exact result lies past the half midpoint next
# to the rounding only where the float32 one is that close to it, and the midpoint (12 bits) times b (11 bits), or
# squared, is exact in float32: comparing decides.
def magnitude_bits(x: UOp) -> UOp: return x.bitcast(U32) & 0x7fffffff
def half_value(bits: UOp) -> UOp: return bits.cast(U16).bitcast(F16).cast(F32)
def neighbour(h: UOp, up: UOp) -> tuple[UOp, UOp]:
  """(|h|'s half bits, those of the half next to it away from zero where `up`, else toward zero)."""
  hb = h.bitcast(U16).cast(U32) & 0x7fff
  return hb, up.where(hb + 1, hb.alu(Ops.SUB, UOp.const(U32, 1)))

def f16_quotient(a: UOp, b: UOp, q: UOp) -> UOp:
  """a / b of two halves (float32 values) from q, an f32 quotient within 2.5 ulp; ties (among subnormals) go to even."""
  h = q.cast(F16)
  up = magnitude_bits(h.cast(F32)) < magnitude_bits(q)
  hb, nb = neighbour(h, up)
  m = hb.maximum(nb).eq(UOp.const(U32, 0x7c00)).where(UOp.const(F32, 65520.0), (half_value(hb) + half_value(nb)) * 0.5)
  c, x = m * magnitude_bits(b).bitcast(F32), magnitude_bits(a).bitcast(F32)
  pick = (up.where(c < x, x < c) | (x.eq(c) & (nb & 1).eq(UOp.const(U32, 0)))).where(nb, hb)
  exact = magnitude_bits(a).eq(UOp.const(U32, 0)) | magnitude_bits(b).eq(UOp.const(U32, 0)) | (magnitude_bits(a) >= 0x7f800000) | \
          (magnitude_bits(b) >= 0x7f800000) | magnitude_bits(q).eq(magnitude_bits(h.cast(F32)))
  return exact.where(h, (pick | (q.bitcast(U32).alu(Ops.SHR, UOp.const(U32, 16)) & 0x8000)).cast(U16).bitcast(F16))

def f16_root(x: UOp, r: UOp) -> UOp:
  """sqrt of a half (a float32 value) from r, an inexact f32 root; the midpoint squared is never a half, so no ties."""
  h = r.cast(F16)
  up = h.cast(F32) < r
  hb, nb = neighbour(h, up)
  m = (half_value(hb) + half_value(nb)) * 0.5
  pick = up.where(m * m < x, x < m * m).where(nb, hb)
  exact = (x.bitcast(U32).alu(Ops.SUB, UOp.const(U32, 1)) >= 0x7f7fffff) | r.eq(h.cast(F32))   # +-0, negative, inf, NaN
  return exact.where(h, half_value(pick).cast(F16))

def float_cast(ctx: Emulation, x: UOp, y: UOp) -> UOp | None:
  """Every conversion of a 16-bit float computed in float32 goes through float32 (exact for all their values, and one
  rounding from every integer to half: exact below 2^24, infinite past 65520); from float64, and from 32/64-bit integers to
  bfloat16, through float32 rounded to odd, so that the value is rounded once."""
  src, dst = y.dtype.scalar, x.dtype.scalar
  if dst in ctx.floats and src != F32:
    if src == dtypes.float64: f = odd_f32(y)
    elif dst == dtypes.bfloat16 and src in LONGS:   # from its words (lane by lane)
      if y.dtype.count > 1: return UOp(Ops.VECTORIZE, x.dtype, tuple(UOp(Ops.GEP, src, (y,), i).cast(dst) for i in range(y.dtype.count)))
      f = long_to_f32(halves(y) if src in ctx.longs else (y.cast(U32), shr(y, 32).cast(U32)), src == dtypes.int64, odd=True)
    elif dst == dtypes.bfloat16 and src in (dtypes.int32, U32): f = odd8(y).cast(vec(F32, y.dtype))
    else: f = y.cast(vec(F32, y.dtype))
    return f.cast(x.dtype)
  if src in ctx.floats and dst != F32: return y.cast(vec(F32, y.dtype)).cast(x.dtype)
  return None

def odd8(x: UOp) -> UOp:
  """A 32-bit integer past 2^24 (where float32 rounds) rounded to odd at bit 8 (the bits below cut, bit 8 set where any
  was): then exact in float32, from which it rounds once to bfloat16."""
  signed = x.dtype.scalar == dtypes.int32
  odd = (x & const(x, -256 if signed else 0xffffff00)) | (x & 0xff).ne(const(x, 0)).where(const(x, 256), const(x, 0))
  big = (const(x, 2**24 - 1) < x) | (x < const(x, 1 - 2**24)) if signed else const(x, 2**24 - 1) < x
  return big.where(odd, x)

def odd_f32(x: UOp) -> UOp:
  """float64 -> float32 truncated, the last bit set where inexact: a second rounding to 16 bits then rounds once."""
  f = x.cast(vec(F32, x.dtype))
  back, bits = f.cast(x.dtype), f.bitcast(vec(U32, x.dtype))
  away = (x < const(x, 0)).where(back < x, x < back)
  return back.ne(x).where(where(away, sub(bits, 1), bits) | const(bits, 1), bits).bitcast(f.dtype)

# the bits of a 16-bit float from a float32 value, rounded to nearest even (NaN stays NaN), and back (exact)
def bf16_bits(x: UOp) -> UOp:
  b = x.bitcast(vec(U32, x.dtype))
  nan = const(b, 0x7f800000) < (b & 0x7fffffff)
  quiet = (b & 0xffff).ne(const(b, 0)).where(const(b, 0x40), const(b, 0))   # a bfloat16 NaN's own bits kept, another made quiet
  return nan.where(shr(b, 16) | quiet, shr(b + 0x7fff + (shr(b, 16) & 1), 16))

def f16_bits(x: UOp) -> UOp:
  """Overflow past 65520 to inf, subnormals on the 2^-24 grid, NaN keeps its sign and the top of its payload."""
  b = x.bitcast(vec(U32, x.dtype))
  s, a = shr(b, 16) & 0x8000, b & 0x7fffffff
  pm = shr(a, 13) & 0x3ff
  nan = pm.eq(const(pm, 0)).where(const(pm, 0x200), pm) | 0x7c00
  normal = shr(sub(a + 0xfff + (shr(a, 13) & 1), 0x38000000), 13)
  e = shr(a, 23)
  m, sh = (a & 0x7fffff) | 0x800000, sub(const(e, 126), e)   # below 2^-14: |x| / 2^-24 = m >> sh, 14 <= sh <= 24
  q, rest, tie = shr(m, sh), m & sub(shl(const(m, 1), sh), 1), shl(const(m, 1), sub(sh, 1))
  subnormal = (e < 102).where(const(e, 0), q + ((tie < rest) | (rest.eq(tie) & (q & 1).eq(const(q, 1)))).cast(q.dtype))
  return s | (const(a, 0x7f800000) < a).where(nan, (a < 0x477ff000).where((a < 0x38800000).where(subnormal, normal), const(a, 0x7c00)))

def bf16_value(h: UOp) -> UOp: return shl(h, 16).bitcast(vec(F32, h.dtype))
def f16_value(h: UOp) -> UOp:
  s, e, m = shl(h & 0x8000, 16), shr(h, 10) & 0x1f, h & 0x3ff
  tiny = (m.cast(vec(F32, m.dtype)) * (2.0 ** -24)).bitcast(m.dtype)   # subnormal halves are normal float32s: exact
  mag = e.eq(const(e, 0x1f)).where(shl(m, 13) | 0x7f800000, e.eq(const(e, 0)).where(tiny, shl(e + 112, 23) | shl(m, 13)))
  return (s | mag).bitcast(vec(F32, h.dtype))
TO_BITS, FROM_BITS = {dtypes.bfloat16: bf16_bits, dtypes.float16: f16_bits}, {dtypes.bfloat16: bf16_value, dtypes.float16: f16_value}
CONST_BITS = {dtypes.bfloat16: lambda v: f32_to_bf16_bits(v), dtypes.float16: lambda v: struct.unpack("<H", struct.pack("<e", v))[0]}

VALUE_OF_BITS = {dtypes.bfloat16: bf16_bits_to_f32, dtypes.float16: lambda b: struct.unpack("<e", struct.pack("<H", b))[0]}
def const_value(x: UOp, w: UOp, r: UOp) -> UOp | None:
  """The float32 a 16-bit float constant's bits stand for, as a constant: computed from the bits in the kernel, the
  value would hide from the renderer what it is (a constant -0.0 whose product a shader compiler folds to +0.0). NaN
  stays in the bit path, which keeps its payload."""
  if r.op is not Ops.CONST or math.isnan(v := VALUE_OF_BITS[w.dtype.scalar](r.arg)): return None
  return UOp.const(x.dtype, v)

def bits_wrap(r: UOp, dt: DType) -> UOp: return r.bitcast(vec(dt.scalar, r.dtype))
def retype_bits(ctx: Emulation, x: UOp) -> UOp | None:
  """Sources of a 16-bit float held as bits (buffers, loads, accumulators, selections, vectors) become uint16 ones."""
  if scalar(x.dtype) not in ctx.bits: return None
  if x.op in BUFFERS: return retype_buffer(x, dtypes.uint16, x.dtype.size)
  if x.op is Ops.INDEX: return x.replace(dtype=vec(dtypes.uint16, x.dtype.base).ptr(x.dtype.size, x.dtype.addrspace))
  if x.op is Ops.CONST: return bits_wrap(const(x, CONST_BITS[x.dtype.scalar](x.arg), dtypes.uint16), x.dtype)
  inner = tuple(s.src[0] if s.op is Ops.BITCAST and s.dtype.scalar in ctx.bits else s for s in x.src)
  return bits_wrap(x.replace(dtype=vec(dtypes.uint16, x.dtype), src=inner), x.dtype)

def bits_rules() -> list:
  def is_bits(ctx, w): return scalar(w.dtype) in ctx.bits
  return [
    (UPat((*BUFFERS, Ops.INDEX, Ops.CONST, Ops.LOAD, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.WHERE, Ops.VECTORIZE, Ops.GEP), name="x"), retype_bits),
    (UPat(Ops.STORE, src=(UPat.var("i"), wrapped(None, dtypes.uint16)), allow_any_len=True, name="x"),
     lambda ctx, x, i, w, r: x.replace(src=(i, r, *x.src[2:])) if is_bits(ctx, w) else None),
    (UPat(Ops.CAST, F32, (wrapped(None, dtypes.uint16),), name="x"),
     lambda ctx, x, w, r: None if not is_bits(ctx, w) else c if (c := const_value(x, w, r)) is not None else FROM_BITS[w.dtype.scalar](r.cast(vec(U32, r.dtype)))),
    (UPat(Ops.CAST, src=(UPat.var("y", F32),), name="x"),
     lambda ctx, x, y: bits_wrap(TO_BITS[x.dtype.scalar](y).cast(vec(dtypes.uint16, y.dtype)), x.dtype) if is_bits(ctx, x) else None),
    (UPat(Ops.BITCAST, src=(wrapped(None, dtypes.uint16),), name="x"),   # a user's bitcast of the bits: the bits themselves
     lambda ctx, x, w, r: r.bitcast(x.dtype) if is_bits(ctx, w) else None),
    (UPat(Ops.BITCAST, src=(UPat.var("y"),), name="x"),
     lambda ctx, x, y: bits_wrap(y.bitcast(vec(dtypes.uint16, y.dtype)), x.dtype) if is_bits(ctx, x) and y.dtype.scalar != dtypes.uint16 else None),
    # a tensor core instruction takes 16-bit float fragments held as bits as those bits (its arg says what they are)
    (UPat(Ops.WMMA, name="x"), lambda ctx, x: x.replace(src=tuple(s.src[0] if s.op is Ops.BITCAST and s.dtype.scalar in ctx.bits else s for s in x.src))
     if any(s.op is Ops.BITCAST and s.dtype.scalar in ctx.bits for s in x.src) else None),
  ]

# ***** 8/16-bit integers: arithmetic in 32 bits, wrapped back after every op *****

def int_alu(ctx: Emulation, x: UOp) -> UOp | None:
  t = x.src[-1].dtype.scalar
  if t not in ctx.ints or x.op is Ops.WHERE: return None
  if x.op is Ops.MULACC: return UOp(Ops.ADD, x.dtype, (UOp(Ops.MUL, x.dtype, x.src[:2]), x.src[2]))
  srcs = [s.cast(WIDER[t]) for s in x.src]
  if x.op in (Ops.SHL, Ops.SHR): srcs[1] = srcs[1] & (8 * t.itemsize - 1)   # the count is taken mod the narrow width
  out = UOp(x.op, x.dtype if x.op in GroupOp.Comparison else WIDER[t], tuple(srcs))
  return out if x.op in GroupOp.Comparison else out.cast(t)

# ***** 64-bit integers as two 32-bit halves *****

def halves(x: UOp) -> tuple[UOp, UOp]:
  """The (low, high) words of a 64-bit value, BITCAST(pair -> int64)."""
  p = x.src[0]
  return (p.src[0], p.src[1]) if p.op is Ops.VECTORIZE else (UOp(Ops.GEP, U32, (p,), 0), UOp(Ops.GEP, U32, (p,), 1))
def long(dt: DType, lo: UOp, hi: UOp) -> UOp: return UOp(Ops.VECTORIZE, PAIR, (lo, hi)).bitcast(dt)
def u32(v: int) -> UOp: return UOp.const(U32, v)
def as_u32(b: UOp) -> UOp: return b.cast(U32)

def add64(a, b):
  lo = a[0] + b[0]
  return lo, a[1] + b[1] + as_u32(lo < a[0])
def sub64(a, b): return sub(a[0], b[0]), sub(sub(a[1], b[1]), as_u32(a[0] < b[0]))
def neg64(a): return sub64((u32(0), u32(0)), a)
def lt64(a, b, signed: bool) -> UOp:
  hi_lt = a[1].cast(dtypes.int32) < b[1].cast(dtypes.int32) if signed else a[1] < b[1]
  return hi_lt | (a[1].eq(b[1]) & (a[0] < b[0]))
def select64(c, a, b): return c.where(a[0], b[0]), c.where(a[1], b[1])

def mul_wide(a: UOp, b: UOp) -> tuple[UOp, UOp]:
  """The full 64-bit product of two uint32s, from products of their 16-bit halves (each fits 32 bits)."""
  a0, a1, b0, b1 = a & 0xffff, shr(a, 16), b & 0xffff, shr(b, 16)
  p01, p10 = a0 * b1, a1 * b0
  mid = shr(a0 * b0, 16) + (p01 & 0xffff) + (p10 & 0xffff)
  return a * b, a1 * b1 + shr(p01, 16) + shr(p10, 16) + shr(mid, 16)

def shift64(op: Ops, a, n: UOp, signed: bool):
  """a shifted by n mod 64: by n mod 32 within the words, the words swapped past 32. `(x >> 1) >> (31 - k)` is x's top k
  bits, also for k = 0 (a shift by 32 would be one by 0)."""
  big, k = (n & 32).ne(u32(0)), n & 31
  if op is Ops.SHL:
    moved = shl(a[0], k)
    return big.where(u32(0), moved), big.where(moved, shl(a[1], k) | shr(shr(a[0], 1), sub(u32(31), k)))
  top = a[1].cast(dtypes.int32) if signed else a[1]
  hi = shr(top, k.cast(top.dtype)).cast(U32)
  fill = shr(top, 31).cast(U32) if signed else u32(0)
  return big.where(hi, shr(a[0], k) | shl(shl(a[1], 1), sub(u32(31), k))), big.where(fill, hi)

def divmod64(a, b, signed: bool, mod: bool):
  """Truncating division by shift and subtract, one quotient bit a step; signed operands divide as magnitudes and take
  their signs back (MIN / -1 wraps to MIN); a zero divisor gives 0."""
  zero = (b[0] | b[1]).eq(u32(0))
  if signed:
    na, nb = a[1].cast(dtypes.int32) < 0, b[1].cast(dtypes.int32) < 0
    a, b = select64(na, neg64(a), a), select64(nb, neg64(b), b)
  q, r = (u32(0), u32(0)), (u32(0), u32(0))
  for i in range(63, -1, -1):
    r = (shl(r[0], 1) | (shr(a[i // 32], i % 32) & 1), shl(r[1], 1) | shr(r[0], 31))
    fits = lt64(r, b, False).logical_not()
    r = select64(fits, sub64(r, b), r)
    q = (shl(q[0], 1) | as_u32(fits), shl(q[1], 1) | shr(q[0], 31))
  out = r if mod else q
  if signed: out = select64(na if mod else na.ne(nb), neg64(out), out)
  return select64(zero, (u32(0), u32(0)), out)

def long_alu(ctx: Emulation, x: UOp) -> UOp | None:
  t = x.src[-1].dtype.scalar
  if t not in ctx.longs: return None
  signed, op = not dtypes.is_unsigned(t), x.op
  if op is Ops.WHERE: return long(x.dtype, *select64(x.src[0], halves(x.src[1]), halves(x.src[2])))
  if op is Ops.MULACC: return UOp(Ops.ADD, t, (UOp(Ops.MUL, t, x.src[:2]), x.src[2]))
  if op is Ops.MAX: return UOp(Ops.CMPLT, dtypes.bool, x.src).where(x.src[1], x.src[0])
  a, b = halves(x.src[0]), halves(x.src[-1])
  if op is Ops.CMPLT: return lt64(a, b, signed)
  if op in (Ops.CMPEQ, Ops.CMPNE): return a[0].alu(op, b[0]).alu(Ops.AND if op is Ops.CMPEQ else Ops.OR, a[1].alu(op, b[1]))
  if op in (Ops.AND, Ops.OR, Ops.XOR): return long(t, a[0].alu(op, b[0]), a[1].alu(op, b[1]))
  if op is Ops.TRUNC: return x.src[0]
  ops = {Ops.ADD: lambda: add64(a, b), Ops.SUB: lambda: sub64(a, b), Ops.NEG: lambda: neg64(a),
         Ops.MUL: lambda: (lambda lo, hi: (lo, hi + a[0] * b[1] + a[1] * b[0]))(*mul_wide(a[0], b[0])),
         Ops.SHL: lambda: shift64(op, a, b[0] & 63, signed), Ops.SHR: lambda: shift64(op, a, b[0] & 63, signed),
         Ops.IDIV: lambda: divmod64(a, b, signed, False), Ops.MOD: lambda: divmod64(a, b, signed, True)}
  if op not in ops: raise UnsupportedError(f"no emulation of {op} on {t.name} from 32-bit halves")
  return long(t, *ops[op]())

def long_to_f32(a, signed: bool, odd: bool = False) -> UOp:
  """Rounded once: the magnitude shifted so its top bit is bit 63 (found from float32's exponent of the high word,
  exact below 2^24), the high word converted with the rest as a sticky bit, scaled back by a power of two. `odd`: rounded
  to odd instead (for bfloat16, which rounds it once more)."""
  neg = a[1].cast(dtypes.int32) < 0 if signed else None
  lo, hi = select64(neg, neg64(a), a) if signed else a
  big = const(hi, 1 << 24) <= hi
  top = shr(big.where(shr(hi, 8), hi).cast(F32).bitcast(U32), 23) + big.where(u32(8), u32(0))   # floor(log2(hi)) + 127
  s = sub(u32(127 + 31), top)
  w = (shl(hi, s) | shr(shr(lo, 1), sub(u32(31), s))) | as_u32(shl(lo, s).ne(u32(0)))
  if odd: lo, w = odd8(lo), odd8(w)
  f = hi.eq(u32(0)).where(lo.cast(F32), w.cast(F32) * shl(sub(u32(127 + 32), s), 23).bitcast(F32))
  return neg.where(-f, f) if signed else f

def float_to_long(y: UOp, signed: bool) -> tuple[UOp, UOp]:
  """Truncating and saturating, NaN to 0: the magnitude's high word is trunc(|t| / 2^32), its low word the (exact) rest."""
  t = y.alu(Ops.TRUNC)
  mag = (t < const(t, 0)).where(-t, t)
  hi = (mag * (2.0 ** -32)).alu(Ops.TRUNC)
  w = (sub(mag, hi * (2.0 ** 32)).cast(U32), hi.cast(U32))
  if signed:
    w = select64(t < const(t, 0), neg64(w), w)
    w = select64(const(mag, 2.0 ** 63) <= mag, ((t < const(t, 0)).where(u32(0), u32(0xffffffff)), (t < const(t, 0)).where(u32(0x80000000), u32(0x7fffffff))), w)
  else: w = select64(const(t, 2.0 ** 64) <= t, (u32(0xffffffff), u32(0xffffffff)), select64(t < const(t, 0), (u32(0), u32(0)), w))
  return select64(y.ne(y), (u32(0), u32(0)), w)

def long_cast(ctx: Emulation, x: UOp, y: UOp) -> UOp | None:
  src, dst = y.dtype.scalar, x.dtype.scalar
  if src in ctx.longs:
    a, signed = halves(y), not dtypes.is_unsigned(src)
    if dst in LONGS: return long(dst, *a)
    if dst == dtypes.bool: return (a[0] | a[1]).ne(u32(0))
    if dst == dtypes.float64:   # the high word times 2^32 and the low word are exact: one rounding in the add
      return a[1].cast(dtypes.int32 if signed else U32).cast(dst) * (2.0 ** 32) + a[0].cast(dst)
    if dst == F32: return long_to_f32(a, signed)
    return (long_to_f32(a, signed) if dtypes.is_float(dst) else a[0]).cast(dst)
  if dst not in ctx.longs: return None
  if dtypes.is_float(src): return long(dst, *float_to_long(y if src in (F32, dtypes.float64) else y.cast(F32), not dtypes.is_unsigned(dst)))
  if src == dtypes.bool: return long(dst, y.cast(U32), u32(0))
  return long(dst, y.cast(U32), shr(y.cast(dtypes.int32), 31).cast(U32) if not dtypes.is_unsigned(src) else u32(0))

def long_rules() -> list:
  def is_long(ctx, x): return scalar(x.dtype) in ctx.longs
  def load(ctx, x, i):
    buf, j = i.src[0], i.src[1] * 2
    return long(x.dtype, buf.index(j).load(*x.src[1:]), buf.index(j + 1).load(*x.src[1:])) if is_long(ctx, x) else None
  def store(ctx, x, i, w, r):
    if not is_long(ctx, w): return None
    (lo, hi), buf, j = halves(w), i.src[0], i.src[1] * 2
    return UOp.sink(buf.index(j).store(lo, *x.src[2:]), buf.index(j + 1).store(hi, *x.src[2:]))
  def acc(ctx, x):
    if not is_long(ctx, x): return None
    lo, hi = halves(x.src[0])
    return long(x.dtype, UOp(Ops.DEFINE_ACC, U32, (lo,), ctx.new_acc()), UOp(Ops.DEFINE_ACC, U32, (hi,), ctx.new_acc()))
  return [
    (UPat(BUFFERS, name="x"), lambda ctx, x: retype_buffer(x, U32, 2 * x.dtype.size) if is_long(ctx, x) else None),
    (UPat(Ops.CONST, name="x"), lambda ctx, x: long(x.dtype, u32(x.arg & 0xffffffff), u32((x.arg >> 32) & 0xffffffff)) if is_long(ctx, x) else None),
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="i"),), allow_any_len=True, name="x"), load),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="i"), wrapped(None, PAIR)), allow_any_len=True, name="x"), store),
    (UPat(Ops.DEFINE_ACC, name="x"), acc),
    (UPat(Ops.ASSIGN, src=(UPat.var("a"), UPat.var("v")), name="x"),
     lambda ctx, x, a, v: long(x.dtype, *(UOp(Ops.ASSIGN, U32, (s, n)) for s, n in zip(halves(a), halves(v)))) if is_long(ctx, x) else None),
    (UPat(Ops.CAST, src=(UPat.var("y"),), name="x"), long_cast),
    (UPat(Ops.BITCAST, src=(wrapped(LONGS, PAIR),), name="x"),   # between int64 and uint64, or to float64: the pair's bits
     lambda ctx, x, w, r: r.bitcast(x.dtype) if is_long(ctx, w) else None),
    (UPat(Ops.BITCAST, src=(UPat.var("y"),), name="x"),
     lambda ctx, x, y: y.bitcast(PAIR).bitcast(x.dtype) if is_long(ctx, x) and y.dtype != PAIR else None),
  ]

# ***** 8/16-bit memory: in buffers packed in 32-bit words, in shared memory and scratch widened to 32 bits *****

def word_of(ctx: Emulation, i: UOp, dt: DType) -> tuple[UOp, UOp, UOp]:
  """(the word's INDEX, the element's bit shift in it, the element's mask) for INDEX i of an element of dt."""
  per, bits = ctx.word // dt.itemsize, 8 * dt.itemsize
  pos = i.src[1]
  return i.src[0].index(shr(pos, per.bit_length() - 1)), (pos & (per - 1)).cast(U32) * bits, u32((1 << bits) - 1)

def narrow(ctx: Emulation, dt: DType) -> bool: return dt.itemsize < ctx.word
def wide(dt: DType) -> DType: return WIDER.get(dt, U32)   # bool too

def packed_load(ctx: Emulation, x: UOp, i: UOp) -> UOp | None:
  if not narrow(ctx, x.dtype): return None
  if i.src[0].op is not Ops.DEFINE_GLOBAL: return i.load(*x.src[1:], dtype=wide(x.dtype)).cast(x.dtype)
  idx, shift, mask = word_of(ctx, i, x.dtype)
  bits = shr(idx.load(*x.src[1:]), shift) & mask
  return bits.ne(u32(0)) if x.dtype == dtypes.bool else bits.cast(x.dtype)

def packed_store(ctx: Emulation, x: UOp, i: UOp, v: UOp) -> UOp | None:
  """Into a buffer, STORE(word, bits, .., mask): the uint32 src past the value marks the bits this store writes."""
  if not narrow(ctx, v.dtype): return None
  if i.src[0].op is not Ops.DEFINE_GLOBAL: return i.store(v.cast(wide(v.dtype)), *x.src[2:])
  idx, shift, mask = word_of(ctx, i, v.dtype)
  return idx.store(shl(v.cast(U32) & mask, shift), *x.src[2:], shl(mask, shift))

def packed_buffer(ctx: Emulation, x: UOp) -> UOp | None:
  if not narrow(ctx, x.dtype.base): return None
  if x.op is not Ops.DEFINE_GLOBAL: return retype_buffer(x, wide(x.dtype.base), x.dtype.size)
  return retype_buffer(x, U32, x.dtype.size if x.dtype.size < 0 else -(-x.dtype.size * x.dtype.base.itemsize // ctx.word))

# ***** the pass *****


folds = [
  (UPat(Ops.GEP, src=(UPat(Ops.VECTORIZE, name="v"),), name="x"), lambda x, v: v.src[x.arg]),
  (UPat(Ops.CAST, src=(UPat(Ops.CONST, name="c"),), name="x"),   # a constant converted, but not float -> int (truncate() does not saturate)
   lambda x, c: None if dtypes.is_int(x.dtype) and dtypes.is_float(c.dtype) else UOp.const(x.dtype, c.arg)),
  (UPat(Ops.CAST, src=(UPat(Ops.CAST, src=(UPat.var("y"),), name="m"),), name="x"),   # out to a type holding all of y's values and back
   lambda x, m, y: y if x.dtype == y.dtype and m.dtype.scalar == WIDER.get(y.dtype.scalar) else None),
  (UPat(Ops.BITCAST, src=(UPat(Ops.BITCAST, src=(UPat.var("y"),)),), name="x"), lambda x, y: y if x.dtype == y.dtype else None),
  (UPat(Ops.BARRIER, name="x"),   # after stores that became several (a SINK groups them): after each of them
   lambda x: x.replace(src=tuple(t for s in x.src for t in (s.src if s.op is Ops.SINK else (s,)))) if any(s.op is Ops.SINK for s in x.src) else None),
  (UPat(Ops.BITCAST, src=(UPat.var("y"),), name="x"),   # between integers of one size a bitcast is a cast
   lambda x, y: y.cast(x.dtype) if dtypes.is_int(x.dtype) and dtypes.is_int(y.dtype) and x.dtype.itemsize == y.dtype.itemsize else None),
]
rules = PatternMatcher(folds + [(UPat(GroupOp.ALU, name="x"), f) for f in (float_alu, int_alu, long_alu)] + [
  (UPat(Ops.CAST, src=(UPat.var("y"),), name="x"), float_cast)] + bits_rules() + long_rules() + [
  (UPat(BUFFERS, name="x"), packed_buffer),
  (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="i"),), allow_any_len=True, name="x"), packed_load),
  (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="i"), UPat.var("v")), allow_any_len=True, name="x"), packed_store),
])

def rewrite_linear(uops: list[UOp], pm: PatternMatcher, ctx) -> list[UOp]:
  """pm's rules over a linear program: each UOp, its sources already rewritten, is rewritten with the nodes its rules build
  to a fixed point, and those new nodes take its place (in dependency order; a SINK only groups them). Nodes made inside a
  loop, but constants, are gone after it: a later use places them again. So are the nodes rules built from an
  accumulator's value (a half one converted to float32) once it is assigned: a use of the accumulator reads its value
  there, and an unrolled sum assigns it several times a trip. A node the program holds twice (an unrolled sum's equal
  terms: one update and assignment, each time reading what the one before assigned) is placed again where it stands
  again: kept as computed, its first place would stand for both and the sum lose a term. Then every node nothing uses is
  dropped, unless it is void (a store, a loop's end, a barrier) or a definition, loop or assignment."""
  done: dict[UOp, UOp] = {}
  out, avail, scopes, results = [], set(), [], set()
  reads: dict[UOp, frozenset] = {}   # the accumulators a placed node reads
  first: dict[UOp, set[UOp]] = {}    # the nodes placed for an original node where it first stands
  for u in uops:
    r = graph_rewrite_map(u, pm, ctx, done=done)[u]
    if (was := first.get(u)) is not None:   # its value, and its own assignments with what groups them (a 64-bit one's two
      again = {r}                            # halves), are placed again; another accumulator's assignment never is
      for x in r.toposort():
        if (x.op is Ops.ASSIGN and x in was) or any(s in again for s in x.src): again.add(x)
      avail.difference_update(again)
    placed = len(out)
    for x in r.toposort(gate=lambda x: x not in avail):
      if x in avail or x.op is Ops.SINK: continue
      out.append(x); avail.add(x)
      reads[x] = frozenset((x,) if x.op is Ops.DEFINE_ACC else ()).union(*(reads.get(s, ()) for s in x.src))
      if scopes and x.op is not Ops.CONST: scopes[-1].append(x)   # a constant is declared nowhere: it stays available
      if x.op is Ops.ASSIGN:   # what rules built from the old value is stale (an original node's value stays as computed)
        avail.difference_update([n for n in avail if x.src[0] in reads[n] and n.op not in (Ops.DEFINE_ACC, Ops.ASSIGN) and n not in results])
    results.add(r)
    first.setdefault(u, set(out[placed:]))
    if u.op in (Ops.RANGE, Ops.IF): scopes.append([])
    elif u.op in (Ops.ENDRANGE, Ops.ENDIF): avail.difference_update(scopes.pop())
  keep, used = [], set()
  for u in reversed(out):
    if u in used or u.dtype == dtypes.void or u.op in (*BUFFERS, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE, Ops.ASSIGN):
      keep.append(u); used.update(u.src)
  return keep[::-1]

def emulate(uops: list[UOp], ren: Renderer) -> list[UOp]:
  """The linear program with every dtype the renderer lacks emulated; unchanged when it lacks none the program uses."""
  ctx = Emulation(ren, uops)
  if not ctx.emulated or not any(scalar(u.dtype) in ctx.emulated for u in uops): return uops
  out = rewrite_linear(uops, rules, ctx)
  for u in out:   # what is left of an emulated dtype: 16-bit floats the target converts itself, moved and selected; small ints cast
    t = scalar(u.dtype) if u.op not in GroupOp.ALU else u.src[-1].dtype.scalar
    left = t in ctx.longs or t in ctx.bits or (u.op in GroupOp.ALU and u.op is not Ops.WHERE and t in ctx.floats | ctx.ints) or \
      (u.op in (Ops.LOAD, *BUFFERS) and t.itemsize < ctx.word)
    if left: raise UnsupportedError(f"backend {ren.device}: no emulation of {u.op} on {t.name}")
  return out
