"""Deliberately broken backends, each the PYTHON device with one defect, registered through a test entry point."""
from __future__ import annotations
import math, os, signal
import numpy as np
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops, exec_alu
from tinycore.runtime import builtin
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.runtime.builtin import PythonRenderer, PythonDriver, PythonProgram, HostAllocator
from tinycore.runtime.device import Assembler
from tinycore.runtime.errors import UnsupportedError
from tinycore.runtime.plugin import BackendSpec, hookimpl

def renderer_named(name: str, base=PythonRenderer, **attrs):
  return type(f"{name.title()}Renderer", (base,), {"device": name, **attrs})

class NamedDriver(PythonDriver):
  """PYTHON's driver under another device name (its errors then name that device)."""
  def __init__(self, name: str = "PYTHON"):
    super().__init__()
    self.device = name

# uint32 comparisons done on the signed bit pattern: values >= 2**31 compare wrongly
signed_compare = PatternMatcher([(UPat(Ops.CMPLT, src=(UPat.var("a", dtypes.uint32), UPat.var("b", dtypes.uint32))),
                                  lambda a, b: UOp(Ops.CMPLT, dtypes.bool, (a.bitcast(dtypes.int32), b.bitcast(dtypes.int32))))])

# float32 -> int32 rounds half up instead of truncating (the detour through float64 keeps the rule from matching again)
rounding_cast = PatternMatcher([(UPat(Ops.CAST, dtypes.int32, src=(UPat.var("x", dtypes.float32),)),
                                 lambda x: UOp(Ops.CAST, dtypes.int32, (UOp(Ops.CAST, dtypes.float64, (x + 0.5,)),)))])

# one accumulator per reduction: the codegen's tree of short sums (nested REDUCEs) flattened back into one long loop
naive_sums = PatternMatcher([(UPat(Ops.REDUCE, src=(UPat(Ops.REDUCE, name="inner"),), allow_any_len=True, name="outer"),
                              lambda outer, inner: UOp(Ops.REDUCE, outer.dtype, (inner.src[0],) + outer.src[1:] + inner.src[1:], outer.arg)
                              if inner.arg is outer.arg else None)])

# bool ADD done as a byte add: True + True is stored as the byte 2 (numpy still reads it as True)
byte_bool_add = PatternMatcher([(UPat(Ops.ADD, dtypes.bool, src=(UPat.var("a"), UPat.var("b"))),
                                 lambda a, b: UOp(Ops.BITCAST, dtypes.bool, (UOp(Ops.ADD, dtypes.uint8, (a.cast(dtypes.uint8), b.cast(dtypes.uint8))),)))])

# (a + b) - c in float16 computed in float32 and rounded once at the end: the intermediate a + b is never rounded to half
wide_half = PatternMatcher([(UPat(Ops.SUB, dtypes.float16, src=(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), UPat.var("c"))),
                             lambda a, b, c: ((a.cast(dtypes.float32) + b.cast(dtypes.float32)) - c.cast(dtypes.float32)).cast(dtypes.float16))])

# float32 sine with a naive range reduction in float32 (x - 2 pi trunc(x / 2 pi)): fine near 0, wrong for large |x|
# (the sine itself runs in float64 so the rule does not match its own output)
def naive_sin(x: UOp) -> UOp:
  r = x - UOp(Ops.TRUNC, dtypes.float32, (x * (1 / (2 * math.pi)),)) * (2 * math.pi)
  return UOp(Ops.SIN, dtypes.float64, (r.cast(dtypes.float64),)).cast(dtypes.float32)
naive_range_reduction = PatternMatcher([(UPat(Ops.SIN, dtypes.float32, src=(UPat.var("x"),)), naive_sin)])

def trapping_alu(op, dt, srcs):
  """exec_alu, except that signed MIN // -1 and MIN % -1 raise SIGFPE, as x86's idiv does."""
  if op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(dt) and not dtypes.is_unsigned(dt):
    a, b = np.asarray(srcs[0]), np.asarray(srcs[1])
    if np.any((a == np.iinfo(a.dtype).min) & (b == -1)): os.kill(os.getpid(), signal.SIGFPE)
  return exec_alu(op, dt, srcs)
class TrappingProgram(PythonProgram):
  def __call__(self, *bufs, **kw):
    builtin.exec_alu = trapping_alu   # the interpreter looks exec_alu up in its module on every op
    try: return super().__call__(*bufs, **kw)
    finally: builtin.exec_alu = exec_alu
class TrappingDriver(NamedDriver):
  def load(self, name: str, binary: bytes, spec=None): return TrappingProgram(name, binary.decode())

class TailDroppingProgram(PythonProgram):
  """Launches the global size rounded down to a multiple of 4, like a vectorised launch that forgot the remainder."""
  def __call__(self, *bufs, global_size=(1, 1, 1), **kw):
    return super().__call__(*bufs, global_size=(max(global_size[0] // 4 * 4, 1), *global_size[1:]), **kw)
class TailDroppingDriver(NamedDriver):
  def load(self, name: str, binary: bytes, spec=None): return TailDroppingProgram(name, binary.decode())

class Int16VarsProgram(PythonProgram):
  """Passes integer launch variables through 16 bits: values past +-32767 arrive wrapped."""
  def __call__(self, *bufs, vals=(), **kw):
    return super().__call__(*bufs, vals=tuple((v + 2**15) % 2**16 - 2**15 for v in vals), **kw)
class Int16VarsDriver(NamedDriver):
  def load(self, name: str, binary: bytes, spec=None): return Int16VarsProgram(name, binary.decode())

class IgnoresOffset(HostAllocator):
  """Forgets to add the offset when it makes a view."""
  def _offset(self, buf, size: int, offset: int): return buf[:size]

class ClampedProgram(PythonProgram):
  """Launches at most 65536 threads along dimension 0 (blocks times their threads), like a driver that forgot to split
  a large grid."""
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
    most = 65536 // (local_size[0] if local_size else 1)
    return super().__call__(*bufs, global_size=(min(global_size[0], most), *global_size[1:]), local_size=local_size, vals=vals, wait=wait)
class ClampingDriver(NamedDriver):
  def load(self, name: str, binary: bytes, spec=None): return ClampedProgram(name, binary.decode())

class AbortingProgram(PythonProgram):
  """Takes the whole process down (like a driver segfault) when launched over exactly 7 threads."""
  def __call__(self, *bufs, global_size=(1, 1, 1), **kw):
    if tuple(global_size)[:1] == (7,): os.abort()
    return super().__call__(*bufs, global_size=global_size, **kw)
class AbortingDriver(NamedDriver):
  def load(self, name: str, binary: bytes, spec=None): return AbortingProgram(name, binary.decode())

class LeakingDriver(NamedDriver):
  """Takes a scratch buffer from the allocator for every launch and never gives it back."""
  def __init__(self, name: str):
    super().__init__(name)
    self.allocator, self.scratch = None, []
  def load(self, name: str, binary: bytes, spec=None):
    inner, driver = PythonProgram(name, binary.decode()), self
    def program(*bufs, **kw):
      driver.scratch.append(driver.allocator.alloc(64))
      return inner(*bufs, **kw)
    return program
def leaky_allocator(drv: LeakingDriver) -> HostAllocator:
  drv.allocator = HostAllocator("BROKEN_LEAK")
  return drv.allocator

class AcceptsEverything(PythonRenderer):
  """Declares no float64 but never refuses it: float64 kernels run as if nothing were wrong."""
  device = "BROKEN_UNDECLARED"
  supported_dtypes = PythonRenderer.supported_dtypes - {dtypes.float64}
  def check_dtype(self, dt) -> None: pass

class RefusesExp(PythonRenderer):
  """Declares float32 but refuses every kernel using EXP2: a declared feature that does not work must fail, not skip."""
  device = "BROKEN_REFUSES"
  def render(self, name: str, uops: list[UOp]) -> str:
    if any(u.op is Ops.EXP2 for u in uops): raise UnsupportedError("backend BROKEN_REFUSES has no EXP2")
    return super().render(name, uops)

NARROW_DTYPES = frozenset({dtypes.bool, dtypes.int32, dtypes.float32})

def spec(name: str, renderer, driver=None, allocator=None, **caps) -> BackendSpec:
  return BackendSpec(name, (2, 0), renderer, Assembler, driver or (lambda index: NamedDriver(name)),
                     allocator or (lambda drv: HostAllocator(name)), priority=-50, capabilities=caps)

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [
    spec("BROKEN_CMP", renderer_named("BROKEN_CMP", extra_matcher=signed_compare)),
    spec("BROKEN_CAST", renderer_named("BROKEN_CAST", extra_matcher=rounding_cast)),
    spec("BROKEN_OFFSET", renderer_named("BROKEN_OFFSET"), allocator=lambda drv: IgnoresOffset("BROKEN_OFFSET")),
    spec("BROKEN_LAUNCH", renderer_named("BROKEN_LAUNCH"), driver=lambda index: ClampingDriver("BROKEN_LAUNCH")),
    spec("BROKEN_LEAK", renderer_named("BROKEN_LEAK"), driver=lambda index: LeakingDriver("BROKEN_LEAK"), allocator=leaky_allocator),
    spec("BROKEN_UNDECLARED", AcceptsEverything),
    spec("BROKEN_REFUSES", RefusesExp),
    spec("BROKEN_CRASH", renderer_named("BROKEN_CRASH"), driver=lambda index: AbortingDriver("BROKEN_CRASH")),
    # (no thread blocks: a grouped sum spreads the terms over a block's threads, which is accurate however they add; and
    # 2^23 terms: the scheduler cuts a long sum into partials of REDUCE_SPLIT = 2^15 terms only from there on, fewer
    # for shorter sums (schedule.py split_parts), which one accumulator adds too accurately to be told apart)
    spec("BROKEN_NAIVE", renderer_named("BROKEN_NAIVE", extra_matcher=naive_sums, has_local=False, has_shared=False), reduce_scale_elements=1 << 23),

    spec("BROKEN_TRAP", renderer_named("BROKEN_TRAP"), driver=lambda index: TrappingDriver("BROKEN_TRAP")),
    spec("BROKEN_BOOL", renderer_named("BROKEN_BOOL", extra_matcher=byte_bool_add)),
    spec("BROKEN_HALF", renderer_named("BROKEN_HALF", extra_matcher=wide_half)),
    spec("BROKEN_SIN", renderer_named("BROKEN_SIN", extra_matcher=naive_range_reduction)),
    spec("BROKEN_TAIL", renderer_named("BROKEN_TAIL"), driver=lambda index: TailDroppingDriver("BROKEN_TAIL"), fuzz_elements=1 << 10),
    spec("BROKEN_VARS", renderer_named("BROKEN_VARS"), driver=lambda index: Int16VarsDriver("BROKEN_VARS")),
    spec("NARROW", renderer_named("NARROW", supported_dtypes=NARROW_DTYPES), inf_nan=True),
    # states contract 2.0 with contract 1's driver factory (no instance index): a false claim, though the core runs it
    spec("BROKEN_CONTRACT", renderer_named("BROKEN_CONTRACT"), driver=lambda: NamedDriver("BROKEN_CONTRACT")),
  ]
