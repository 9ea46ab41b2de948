"""Tensor-core heuristics: a matmul-shaped reduction whose dtypes a renderer's tensor core takes runs on it, padded to its tile."""
from __future__ import annotations
from tinycore.uop import UOp, Ops, AxisType
from tinycore.codegen.opt.kernel import Kernel, Opt, OptOps, OptError, apply_opt, const_size, _mma_operands

def _axis(k: Kernel, rngs: list[UOp], d: int) -> Kernel | None:
  """k with one of `rngs` (one kind) a multiple of d: the longest that is, else the longest padded to one (less than
  doubling it), else all of them merged into one, padded where needed. Then the axis is the range with the first id."""
  rngs = sorted(rngs, key=lambda r: r.arg[0])
  if not rngs: return None
  if any(const_size(r) % d == 0 for r in rngs): return k
  for r in sorted(rngs, key=lambda r: -const_size(r)):
    try: return apply_opt(k, Opt(OptOps.PADTO, r.arg[0], d))
    except OptError: pass
  try:
    for r in rngs[1:]: k = apply_opt(k, Opt(OptOps.MERGE, rngs[0].arg[0], r.arg[0]))
    return k if const_size(k.rng(rngs[0].arg[0])) % d == 0 else apply_opt(k, Opt(OptOps.PADTO, rngs[0].arg[0], d))
  except OptError: return None

def use_tensor_cores(k: Kernel) -> Kernel | None:
  """The kernel with its reduction on the first tensor core that takes it (axes padded to the tile, or merged and padded,
  where they are not multiples of it), or None."""
  if len(k.reduces) != 1: return None
  for i, tc in enumerate(k.ren.tensor_cores):
    if (ops := _mma_operands(k.reduces[0], tc)) is None: continue
    M, N, K = tc.dims
    kk = k
    for side, d in (("k", K), ("m", M), ("n", N)):
      x = kk.reduces[0]
      da, db = ({u for u in o.toposort() if u.op is Ops.RANGE} for o in _mma_operands(x, tc))
      rngs = [r for r in (x.src[1:] if side == "k" else kk.axes(AxisType.GLOBAL)) if const_size(r) is not None and
              (side == "k" or (r in da) != (r in db) and (r in da) == (side == "m"))]
      if (kk := _axis(kk, rngs, d)) is None: break
    if kk is None: continue
    for r in sorted((r for r in kk.reduces[0].src[1:] if const_size(r) is not None and const_size(r) % K == 0), key=lambda r: -const_size(r)):
      try: return _tiles(apply_opt(kk, Opt(OptOps.TC, r.arg[0], i)))
      except OptError: continue
  return None

def _tiles(k: Kernel) -> Kernel:
  """More work per warp and warps per block: each warp 2x4 instructions' tiles (A's fragments used by 4, B's by 2),
  2x2 warps to a block, where the output axes divide."""
  (mma,) = [u for u in k.order if u.op is Ops.WMMA]
  a, b = ({u for u in s.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.GLOBAL} for s in mma.src[:2])
  for op, side, amt in ((OptOps.UPCAST, b - a, 4), (OptOps.UPCAST, a - b, 2), (OptOps.LOCAL, a - b, 2), (OptOps.LOCAL, b - a, 2)):
    for r in sorted(side, key=lambda r: -r.arg[0]):
      r = k.rng(r.arg[0])
      if const_size(r) is not None and const_size(r) % amt == 0 and const_size(r) > amt:
        try:
          k = apply_opt(k, Opt(op, r.arg[0], amt))
          break
        except OptError: pass
  return k
