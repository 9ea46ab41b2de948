"""Tensor-core heuristics: a matmul-shaped reduction whose dtypes a renderer's tensor core takes runs on it, padded to its tile."""
from __future__ import annotations
from tinycore.helpers import ceildiv
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
      # padded sizes go to a multiple of the block's tile (2x2 warps of up to 4x8 tiles, K 32) where that costs little
      wide = next((w for w in ((2 * K,) if side == "k" else (d * 8, d * 4, d * 2)) if any(const_size(r) % w == 0 or
                   ceildiv(const_size(r), w) * w * 8 <= const_size(r) * 9 for r in rngs)), d)
      if (kk := _axis(kk, rngs, wide) or _axis(kk, rngs, d)) is None: break
    if kk is None: continue
    for r in sorted((r for r in kk.reduces[0].src[1:] if const_size(r) is not None and const_size(r) % K == 0), key=lambda r: -const_size(r)):
      try: return _stage(_tiles(apply_opt(kk, Opt(OptOps.TC, r.arg[0], i))), r.arg[0], K)
      except OptError: continue
  return None

def _tiles(k: Kernel) -> Kernel:
  """Warps per block and more work per warp: 2x2 warps to a block (their operands' tiles shared through shared memory:
  _stage), each warp up to 4x8 instructions' tiles (A's fragments used by 8, B's by 4; at most the renderer's
  upcast_max copies of either), as far as the output axes divide."""
  (mma,) = [u for u in k.order if u.op is Ops.WMMA]
  tc = mma.arg
  a, b = ({u for u in s.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.GLOBAL} for s in mma.src[:2])
  def words(n: int, dt) -> int: return ceildiv(n * dt.itemsize, 4)
  # what the kernel reads per output after the sum (an optimiser's step fused onto a weight gradient: the weight and
  # Adam's two moments) is held beside each accumulator
  inside = set(mma.toposort())
  after = sum(1 for u in k.order if u.op is Ops.LOAD and u not in inside and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and k.deps[u] & (a | b))
  def regs(ua: int, ub: int) -> int:   # 32-bit registers a lane holds for ua x ub tiles: accumulators, A's and B's fragments
    return ua * ub * words(tc.elements("c"), tc.dtype_out) * (1 + after) + ua * words(tc.elements("a"), tc.dtype_in) + ub * words(tc.elements("b"), tc.dtype_in)
  up = {"a": 1, "b": 1}   # copies of A's tiles (along its own output axis) and of B's
  for op, name, most in ((OptOps.LOCAL, "a", 2), (OptOps.LOCAL, "b", 2), (OptOps.UPCAST, "b", 8), (OptOps.UPCAST, "a", 4)):
    side = a - b if name == "a" else b - a
    for amt in (x for x in (8, 4, 2) if x <= min(most, k.ren.upcast_max)):
      # the tiles' registers below three quarters of a lane's (the rest: addresses, loop counters, the copies to shared memory)
      if op is OptOps.UPCAST and k.ren.registers and regs(up["a"] * (amt if name == "a" else 1), up["b"] * (amt if name == "b" else 1)) >= k.ren.registers * 3 // 4: continue
      before = len(k.applied)
      for r in sorted(side, key=lambda r: -r.arg[0]):
        r = k.rng(r.arg[0])
        if const_size(r) is not None and const_size(r) % amt == 0 and const_size(r) > amt:
          try:
            k = apply_opt(k, Opt(op, r.arg[0], amt))
            break
          except OptError: pass
      if len(k.applied) > before:
        if op is OptOps.UPCAST: up[name] *= amt
        break
  return k

def _stage(k: Kernel, axis: int, K: int) -> Kernel:
  """The operands' tiles the block's warps share copied to shared memory 32 of the sum at a time (fewer where the sum's
  tiles do not divide), where there is a loop over the tensor core's K tiles to cut."""
  if not any(r.arg[0] == axis for r in k.ranges): return k
  n = const_size(k.rng(axis))
  for amt in [a for a in range(max(32 // K, 2), 1, -1) if n % a == 0] + ([n] if n <= max(32 // K, 2) else []):
    try: return apply_opt(k, Opt(OptOps.STAGE, axis, amt))
    except OptError: pass
  return k
