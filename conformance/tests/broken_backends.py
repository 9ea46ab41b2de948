"""Deliberately broken backends, each the PYTHON device with one defect, registered through a test entry point."""
from __future__ import annotations
import os
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.runtime.builtin import PythonRenderer, PythonDriver, PythonProgram, HostAllocator
from tinycore.runtime.device import Assembler
from tinycore.runtime.errors import UnsupportedError
from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl

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

class IgnoresOffset(HostAllocator):
  """Forgets to add the offset when it makes a view."""
  def _offset(self, buf, size: int, offset: int): return buf[:size]

class ClampedProgram(PythonProgram):
  """Launches at most 65536 threads along dimension 0, like a driver that forgot to split a large grid."""
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
    return super().__call__(*bufs, global_size=(min(global_size[0], 65536), *global_size[1:]), local_size=local_size, vals=vals, wait=wait)
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
  return BackendSpec(name, CONTRACT_VERSION, renderer, Assembler, driver or (lambda index: NamedDriver(name)),
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
    spec("BROKEN_NAIVE", renderer_named("BROKEN_NAIVE", extra_matcher=naive_sums), reduce_scale_elements=1 << 18),
    spec("NARROW", renderer_named("NARROW", supported_dtypes=NARROW_DTYPES), inf_nan=True),
  ]
