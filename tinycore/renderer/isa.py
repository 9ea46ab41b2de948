"""The base of renderers for instruction sets (PTX, RDNA3 assembly, LLVM IR): a rule table from UOps to instructions, each
rule returning the register that holds its value; registers named and counted per kind, labels."""
from __future__ import annotations
from collections import defaultdict
from tinycore.dtype import DType, dtypes
from typing import Callable
from tinycore.uop import UOp, Ops
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.renderer import Renderer, KernelWriter

def unsigned_divisor(x: UOp) -> int | None:
  """d where the IDIV or MOD x divides by a constant d > 0 a dividend whose bounds are never negative nor past its
  dtype's (no wrap hid a negative value: address math's): an unsigned division of it is the same; else None."""
  c, a = x.src[1], x.src[0]
  return c.arg if c.op is Ops.CONST and c.arg > 0 and 0 <= a.vmin and a.vmax <= x.dtype.scalar.max else None

def shift_of_divisor(x: UOp) -> int | None:
  """k where x is an unsigned division (unsigned_divisor) by 2^k: a shift right or a mask of k bits; else None."""
  return d.bit_length() - 1 if (d := unsigned_divisor(x)) is not None and d & (d - 1) == 0 else None

def fragment_rules(load: Callable[[UOp], UOp | None]) -> PatternMatcher:
  """A target's rule loading a tensor core's fragment at once (NV's ldmatrix, RDNA3's wide LDS loads): `load` is given
  each WMMA operand that is a VECTORIZE of plain loads from one shared array, ordered after the same sources, and
  returns the one load taking their place, or None where it cannot (the elements are then loaded one by one)."""
  def operands(x: UOp) -> UOp | None:
    srcs = tuple(f if _shared_elements(s) and (f := load(s)) is not None else s for s in x.src[:2])
    return x.replace(src=srcs + x.src[2:]) if srcs != x.src[:2] else None
  return PatternMatcher([(UPat(Ops.WMMA, name="x"), operands)])

def _shared_elements(frag: UOp) -> bool:
  lds = frag.src
  return frag.op is Ops.VECTORIZE and all(ld.op is Ops.LOAD and ld.arg is None and len(ld.src[0].src) == 2 for ld in lds) and \
    (buf := lds[0].src[0].src[0]).op is Ops.DEFINE_LOCAL and all(ld.src[0].src[0] is buf and ld.src[1:] == lds[0].src[1:] for ld in lds)

class ISAKernel(KernelWriter):
  """One kernel being written: the registers of each kind used so far, the instruction lines, the labels. A target with
  few registers reuses them itself (AMD frees a value's register after its last use)."""
  def __init__(self, ren: ISARenderer, name: str, uops: list[UOp]):
    super().__init__(ren, name, uops)
    self.counts: dict[str, int] = defaultdict(int)
    # a WMMA, or a float32/64 MULACC or ADD (one instruction each), that the next line assigns to the accumulator it
    # reads: computed into the accumulator's registers (no copy; nothing reads the accumulator's old value after it)
    self.into_acc: dict[UOp, UOp] = {u: nxt.src[0] for u, nxt in zip(self.uops, self.uops[1:]) if nxt.op is Ops.ASSIGN and nxt.src[1] is u and
                                     nxt.src[0] in u.src and (u.op is Ops.WMMA or u.op in (Ops.MULACC, Ops.ADD) and u.dtype in (dtypes.float32, dtypes.float64))}
  def reg(self, kind: str) -> str:
    """A fresh register of a kind (ren.reg_kind maps a dtype to one)."""
    self.counts[kind] += 1
    return self.ren.reg_name.format(kind=kind, n=self.counts[kind] - 1)
  def new(self, dt: DType) -> str: return self.reg(self.ren.reg_kind(dt))
  def ins(self, *text: str) -> str:
    """Instructions (a text may hold several, one a line), each written as the target writes one."""
    self.lines.extend(self.ren.instruction.format(i) for t in text for i in t.split("\n"))
    return ""
  def label(self, name: str) -> str:
    self.lines.append(f"{name}:")
    return ""
  def lanes(self, x: UOp) -> tuple:
    """A vector op (tensor-core accumulators summed) written lane by lane: each lane the scalar op of its sources' lanes."""
    out = []
    for i in range(x.dtype.count):
      lane = UOp(x.op, x.dtype.scalar, tuple(UOp(Ops.GEP, s.dtype.scalar, (s,), i) for s in x.src))
      for g in lane.src: self.r[g] = self.element(self[g.src[0]], i)
      out.append(self.write(lane))
    return tuple(out)
  def element(self, vector, i: int):
    """Lane i of a vector value: here a tuple of registers (a target holding vectors otherwise says how)."""
    return vector[i]

class ISARenderer(Renderer):
  """`reg_kind(dtype)` is the register class a value lives in, `reg_name` how a register is written, `instruction` how
  an instruction line is; `rules` return each value's register (or operand text); `render_kernel` wraps the lines."""
  reg_name = "%{kind}{n}"
  instruction = "\t{};"
  kernel = ISAKernel
  def reg_kind(self, dt: DType) -> str: raise NotImplementedError
  def render_kernel(self, k: ISAKernel) -> str: raise NotImplementedError
  def render(self, name: str, uops: list[UOp]) -> str: return self.render_kernel(self.kernel(self, name, uops).write_all())
