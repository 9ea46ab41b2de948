"""GPU dims: output loops become block/grid ids (SPECIAL gidxN), thread axes of a block thread ids (SPECIAL lidxN)."""
from __future__ import annotations
from tinycore.dtype import dtypes
from tinycore.helpers import prod, strides_for_shape
from tinycore.uop import UOp, Ops, AxisType, sint_to_uop, split_terms
from tinycore.rewrite import graph_substitute
from tinycore.renderer import Renderer

THREAD_AXES = (AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.WARP)   # the kinds of range a block's thread ids stand for

def thread_axes(sink: UOp, rngs: list[UOp]) -> list[UOp]:
  """A block's thread axes (LOCAL, GROUP_REDUCE, WARP) in dim order, the last varying fastest (lidx0): by their stride in
  the first store's address, largest first, so neighbouring threads write (and mostly read) neighbouring elements; a
  grouped sum's threads, not in the address, after them: neighbours read neighbouring terms; a tensor core's lanes last,
  so each warp is 32 consecutive threads of the block."""
  first = next((st for st in sink.src if st.op is Ops.STORE), None)
  coef = split_terms(first.src[0].src[1])[0] if first is not None else {}
  return sorted((r for r in rngs if r.arg[1] in THREAD_AXES),
                key=lambda r: (r.arg[1] is AxisType.WARP, -abs(coef.get(r, 0)), r.arg[1] is AxisType.GROUP_REDUCE, r.arg[0]))

def _ids(rngs: list[UOp], prefix: str, dims: int) -> tuple[dict[UOp, UOp], tuple]:
  """The last range becomes dim 0 (x varies fastest); past `dims` ranges the leading ones share one id, unflattened
  with div/mod. Returns the substitution and the size of each dim."""
  sizes = [r.src[0] for r in rngs]
  sub: dict[UOp, UOp] = {}
  if len(rngs) > dims:  # merge the leading loops into one id
    k = len(rngs) - dims + 1
    lead_shape = [s.arg if s.op is Ops.CONST else s for s in sizes[:k]]
    merged = UOp(Ops.SPECIAL, dtypes.index, (sint_to_uop(prod(lead_shape)),), f"{prefix}{dims - 1}")
    sub = {r: (merged // st) % sh for r, st, sh in zip(rngs[:k], strides_for_shape(lead_shape), lead_shape)}
    rngs, sizes = rngs[k:], sizes[k:]
  else: merged = None
  for d, r in enumerate(reversed(rngs)): sub[r] = UOp(Ops.SPECIAL, dtypes.index, (r.src[0],), f"{prefix}{d}")
  specials = sorted({v for v in sub.values() if v.op is Ops.SPECIAL} | ({merged} if merged is not None else set()), key=lambda s: s.arg)
  return sub, tuple(s.src[0].arg if s.src[0].op is Ops.CONST else s.src[0] for s in specials)

def map_gpu_dims(sink: UOp, ren: Renderer) -> tuple[UOp, tuple, tuple | None]:
  """GPU-style targets: GLOBAL ranges -> gidx, the block's thread axes (LOCAL, then GROUP_REDUCE: a grouped sum's
  threads vary fastest, reading neighbouring elements) -> lidx. Returns the kernel, the launch's global size (blocks
  when there are thread axes, else threads) and its local size (None: no thread axes, the driver picks a block)."""
  rngs = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  glob = [r for r in rngs if r.arg[1] is AxisType.GLOBAL]
  threads = thread_axes(sink, rngs)
  if ren.global_dims == 0 or not (glob or threads): return sink, (1, 1, 1), None
  sub, gsize = _ids(glob, "gidx", ren.global_dims)
  lsize = None
  if threads:
    lsub, lsize = _ids(threads, "lidx", 3)
    sub |= lsub
    lsize = lsize + (1,) * (3 - len(lsize))
  return graph_substitute(sink, sub).simplify(), gsize + (1,) * (3 - len(gsize)), lsize
