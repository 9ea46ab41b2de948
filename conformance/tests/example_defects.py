"""One defect per class of the specials section, planted in copies of the example plugin's renderer (docs/writing-a-backend.md)."""
from __future__ import annotations
import math
from tinycore.dtype import dtypes, ALL_DTYPES
from tinycore.uop import UOp, Ops
from tinycore.rewrite import PatternMatcher, UPat

def widened(base):
  """The example renderer declaring every dtype (PYTHON computes them all), as a C plugin with float64 and bfloat16 does."""
  return type(base.__name__, (base,), {"supported_dtypes": frozenset(ALL_DTYPES)})

def negative_zero_literals(base):
  """A -0.0 constant written into the kernel as 0.0 (a renderer printing the value without its sign)."""
  class Renderer(widened(base)):
    def render(self, name: str, uops: list[UOp]) -> str:   # the C base writes floats in hex: -0.0 is -0x0.0p+0
      return super().render(name, uops).replace(float(-0.0).hex(), float(0.0).hex())
  return Renderer

def through_an_intermediate(base):
  """float64 -> float16 done through float32, and 64-bit ints -> float32 through float64: two roundings."""
  i64 = (dtypes.int64, dtypes.uint64)
  return type(base.__name__, (widened(base),), {"extra_matcher": PatternMatcher([
    (UPat(Ops.CAST, dtypes.float16, src=(UPat.var("x", dtypes.float64),)), lambda x: x.cast(dtypes.float32).cast(dtypes.float16)),
    (UPat(Ops.CAST, dtypes.float32, src=(UPat.var("x", i64),)), lambda x: x.cast(dtypes.float64).cast(dtypes.float32))])})

def finite_max_accumulator(base):
  """Max (and min, which is -max(-x)) accumulators that start at -FLT_MAX instead of -inf."""
  class Renderer(widened(base)):
    def render(self, name: str, uops: list[UOp]) -> str:
      out, moved = [], {}
      for u in uops:
        src = tuple(moved.get(s, s) for s in u.src)
        if u.op is Ops.DEFINE_ACC and src[0].op is Ops.CONST and src[0].arg == -math.inf:
          out.append(c := UOp(Ops.CONST, u.dtype, (), -3.4028234663852886e38))
          src = (c,) + src[1:]
        out.append(v := u if src == u.src else u.replace(src=src))
        moved[u] = v
      return super().render(name, out)
  return Renderer

def unguarded_bfloat16(base):
  """float32 -> bfloat16 rounded on the bits (add 0x7fff plus the kept lowest bit, shift) with no NaN guard: a NaN whose
  payload is in the low half becomes an infinity, or the carry wraps it to a zero."""
  u32 = dtypes.uint32
  def rounded(x: UOp) -> UOp:
    b = x.bitcast(u32)
    lsb = UOp(Ops.AND, u32, (UOp(Ops.SHR, u32, (b, UOp.const(u32, 16))), UOp.const(u32, 1)))
    r = UOp(Ops.SHR, u32, (UOp(Ops.ADD, u32, (UOp(Ops.ADD, u32, (b, UOp.const(u32, 0x7fff))), lsb)), UOp.const(u32, 16)))
    return r.cast(dtypes.uint16).bitcast(dtypes.bfloat16)
  return type(base.__name__, (widened(base),), {"extra_matcher": PatternMatcher([
    (UPat(Ops.CAST, dtypes.bfloat16, src=(UPat.var("x", dtypes.float32),)), rounded)])})

# class of the specials section -> the defect that class must catch
DEFECTS = {"signed zero constants": negative_zero_literals, "double rounding": through_an_intermediate,
           "reduce identities": finite_max_accumulator, "NaN payloads": unguarded_bfloat16}

def planted(base, defect: str | None):
  """The example's renderer class with one defect (None: only widened to every dtype, the copies' baseline)."""
  return widened(base) if defect is None else DEFECTS[defect](base)
