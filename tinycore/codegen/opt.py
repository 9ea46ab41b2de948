"""Kernel optimisations on the lowered graph, chosen from the renderer's description of the target."""
from __future__ import annotations
from tinycore.dtype import dtypes
from tinycore.helpers import prod, strides_for_shape
from tinycore.uop import UOp, Ops, sint_to_uop
from tinycore.renderer import Renderer
from tinycore.rewrite import graph_substitute

def global_ranges(sink: UOp) -> list[UOp]:
  return sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda r: r.arg[0])

def map_globals(sink: UOp, ren: Renderer) -> tuple[UOp, tuple]:
  """GPU-style targets: output loops become SPECIAL thread ids (innermost loop -> dim 0). Returns the launch size."""
  rngs = global_ranges(sink)
  if ren.global_dims == 0 or not rngs: return sink, (1, 1, 1)
  sizes = [r.src[0] for r in rngs]
  if len(rngs) > ren.global_dims:  # merge the leading loops into one id
    k = len(rngs) - ren.global_dims + 1
    lead = prod([s if s.op is not Ops.CONST else s.arg for s in sizes[:k]]) if all(s.op is Ops.CONST for s in sizes[:k]) else None
    merged = UOp(Ops.SPECIAL, dtypes.index, (sint_to_uop(lead if lead is not None else prod(sizes[:k])),), f"gidx{len(rngs)-k}")
    lead_shape = [s.arg if s.op is Ops.CONST else s for s in sizes[:k]]
    sub = {r: (merged // st) % sh for r, st, sh in zip(rngs[:k], strides_for_shape(lead_shape), lead_shape)}
    rest = rngs[k:]
  else: sub, rest, merged = {}, rngs, None
  for d, r in enumerate(reversed(rest)): sub[r] = UOp(Ops.SPECIAL, dtypes.index, (r.src[0],), f"gidx{d}")
  specials = sorted((v for v in sub.values() if v.op is Ops.SPECIAL), key=lambda s: s.arg) + ([merged] if merged is not None else [])
  gsize = tuple(s.src[0].arg if s.src[0].op is Ops.CONST else s.src[0] for s in sorted(set(specials), key=lambda s: s.arg))
  return graph_substitute(sink, sub).simplify(), gsize + (1,)*(3-len(gsize))

def kernel_name(ast: UOp) -> str:
  """tinygrad-style: r_ for kernels with a reduction, E_ otherwise, then the output shape."""
  has_reduce = any(u.op is Ops.REDUCE_AXIS for u in ast.toposort())
  shape = ast.src[0].src[1].shape
  return ("r_" if has_reduce else "E_") + ("_".join(str(s) if isinstance(s, int) else "v" for s in shape) or "1")
