"""Tensor-core heuristics: a matmul-shaped reduction whose dtypes a renderer's tensor core takes runs on it, padded to its tile."""
from __future__ import annotations
from tinycore.uop import Ops, AxisType
from tinycore.codegen.opt.kernel import Kernel, Opt, OptOps, OptError, apply_opt, const_size, _mma_operands

def use_tensor_cores(k: Kernel) -> Kernel | None:
  """The kernel with its reduction on the first tensor core that takes it (axes padded to the tile where they are not
  multiples of it, when that less than doubles them), or None."""
  if len(k.reduces) != 1: return None
  x = k.reduces[0]
  for i, tc in enumerate(k.ren.tensor_cores):
    if (ops := _mma_operands(x, tc)) is None: continue
    da, db = ({u for u in o.toposort() if u.op is Ops.RANGE} for o in ops)
    M, N, K = tc.dims
    sizes = {g: M if g in da else N for g in k.axes(AxisType.GLOBAL) if (g in da) != (g in db)}
    for r in (r for r in x.src[1:] if const_size(r) is not None):
      kk = k
      for g, d in [(r, K)] + list(sizes.items()):
        if const_size(g) is not None and const_size(g) % d:
          try: kk = apply_opt(kk, Opt(OptOps.PADTO, g.arg[0], d))
          except OptError: pass
      try: return apply_opt(kk, Opt(OptOps.TC, r.arg[0], i))
      except OptError: continue
  return None
