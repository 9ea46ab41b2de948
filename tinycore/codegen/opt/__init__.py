"""Kernel optimisation: the actions (Opt) and the kernel they act on, the hand-coded choice per target style, BEAM's options."""
from __future__ import annotations
from tinycore.helpers import NOOPT
from tinycore.uop import UOp, AxisType
from tinycore.renderer import Renderer
from tinycore.codegen.opt.kernel import OptOps, Opt, OptError, Kernel, apply_opt, const_size
from tinycore.codegen.opt import gpu

def gpu_style(ren: Renderer) -> bool: return ren.global_dims > 0

def optimize(sink: UOp, ren: Renderer, opts: tuple[Opt, ...] = ()) -> UOp:
  """The lowered kernel with `opts` applied (BEAM's choice), or with no opts given, a GPU-style target's hand-coded ones.
  (CPU-style targets add their own register tiles and vectors after expansion: codegen/opt/cpu.py.)"""
  k = Kernel(sink, ren)
  for o in opts: k = apply_opt(k, o)
  if not opts and gpu_style(ren) and not NOOPT: k = gpu.hand_coded(k)
  return k.sink

def candidate_opts(sink: UOp, ren: Renderer, applied: tuple[Opt, ...] = ()) -> list[Opt]:
  """The actions that apply to the kernel after `applied` (BEAM grows its beam by one of these at a time)."""
  k = Kernel(sink, ren)
  for o in applied: k = apply_opt(k, o)
  amounts = {OptOps.UPCAST: (2, 4, 8), OptOps.UNROLL: (2, 4, 8, 16), OptOps.LOCAL: (2, 4, 8, 16, 32), OptOps.GROUP: (16, 32, 64, 128, 256),
             OptOps.GROUPTOP: (16, 32, 64, 128, 256), OptOps.STAGE: (8, 16, 32)}
  ops = (OptOps.UPCAST, OptOps.UNROLL) + ((OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.STAGE) if gpu_style(ren) else ())
  out = []
  for op in ops:
    for r in k.ranges:
      # and the amount without a power of two the hand-coded tiles take where none is left (opt/gpu.py: 7 pixels a
      # thread of a conv's row of 56, 7 threads of a 7x7 map, a sum of 98 staged 14 terms a tile)
      if (n := const_size(r)) is None: continue
      odd = gpu.odd_tile(n) if op is OptOps.STAGE else gpu.odd_divisor(n, amounts[op][-1]) if op in (OptOps.UPCAST, OptOps.LOCAL) else None
      for amt in amounts[op] + ((odd,) if odd is not None else ()):
        if n % amt or n == amt and op is OptOps.STAGE: continue
        try: apply_opt(k, o := Opt(op, r.arg[0], amt))
        except OptError: continue
        out.append(o)
  return out

__all__ = ["OptOps", "Opt", "OptError", "Kernel", "apply_opt", "optimize", "candidate_opts", "AxisType"]
