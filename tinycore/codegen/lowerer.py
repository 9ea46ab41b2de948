"""Lowering: a kernel AST of tensor-level ops becomes loops (RANGE), loads, stores and index math."""
from __future__ import annotations
import itertools
from typing import Callable
from tinycore.dtype import dtypes
from tinycore.helpers import strides_for_shape
from tinycore.uop import UOp, Ops, AxisType, GroupOp, sint_to_uop, symbolic_rules
from tinycore.rewrite import graph_rewrite

def _and(a: UOp | None, b: UOp) -> UOp: return b if a is None else a & b
_placeholders, PLACEHOLDER = itertools.count(), "_valid"   # a pad's stand-in for an index inside its valid region

class Lowerer:
  """Walks the AST from the store down, carrying the index of the element being computed through movement ops."""
  def __init__(self): self.n_ranges, self.memo = 0, {}
  def new_range(self, size, kind: AxisType) -> UOp:
    r = UOp(Ops.RANGE, dtypes.index, (sint_to_uop(size),), (self.n_ranges, kind))
    self.n_ranges += 1
    return r
  def ranges_for(self, shape, kind: AxisType) -> tuple[UOp, ...]:
    return tuple(UOp.const(dtypes.index, 0) if s == 1 else self.new_range(s, kind) for s in shape)

  def lower(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    """The value of u at element idx. An explicit stack instead of recursion: a kernel's chain of ops may be any length.
    Sources are lowered in order, each to the end before the next (range numbering is depth-first)."""
    top = (u, idx, valid)
    stack, plans, memo = [top], {}, self.memo
    while stack:
      key = stack[-1]
      if key in memo: stack.pop(); continue
      if (plan := plans.get(key)) is None: plan = plans[key] = self._plan(*key)
      needs, finish = plan
      if todo := [k for k in needs if k not in memo]: stack.extend(reversed(todo)); continue
      stack.pop()
      memo[key] = finish(*[memo[k] for k in needs])
    return memo[top]

  def _plan(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[tuple, Callable[..., UOp]]:
    """What lowering u at idx needs, as (u's sources at their indices, and the function building u's value from theirs)."""
    op = u.op
    if op is Ops.DEFINE_GLOBAL:  # an input buffer: a 1-D view indexed by idx[0]
      if u.dtype.size == 0: return _leaf(UOp.const(u.dtype.base, 0))
      # never address outside the buffer: under a pad the index is 0 where the pad is not valid, unless every value it
      # takes is inside the buffer anyway (a row's max read by each element of the padded row: one load, not one a term)
      i = idx[0] if valid is None or _inside(idx[0], u.dtype.size) else valid.where(idx[0], UOp.const(dtypes.index, 0))
      return _leaf(UOp(Ops.LOAD, u.dtype.base, (u.index(i),)))
    if op is Ops.CONST: return _leaf(UOp.const(u.dtype, u.arg))
    if op is Ops.IOTA: return _leaf(idx[0].cast(u.dtype))
    if op is Ops.DEFINE_VAR: return _leaf(u.cast(u.dtype) if u.dtype != dtypes.index else u)
    if op in GroupOp.Elementwise: return tuple((s, idx, valid) for s in u.src), lambda *srcs: u.replace(src=srcs)
    src = u.src[0]
    if op is Ops.RESHAPE:
      flat = sum((i * st for i, st in zip(idx, strides_for_shape(u.shape))), UOp.const(dtypes.index, 0))
      new = tuple(UOp.const(dtypes.index, 0) if s == 1 else (flat // st) % s for s, st in zip(src.shape, strides_for_shape(src.shape)))
      # simplified now: a value reached along two paths whose reshapes cancel (a reduction a kernel stores, and stores again
      # after a cast and a reshape to (n, m, 1)) is then the same (u, idx) and lowered once: one REDUCE, not two copies
      return _same(src, graph_rewrite(UOp(Ops.SINK, dtypes.void, new), symbolic_rules).src, valid)
    if op is Ops.EXPAND: return _same(src, tuple(UOp.const(dtypes.index, 0) if s == 1 else i for i, s in zip(idx, src.shape)), valid)
    if op is Ops.PERMUTE:
      inv = [0] * len(u.arg)
      for i, p in enumerate(u.arg): inv[p] = i
      return _same(src, tuple(idx[inv[j]] for j in range(len(inv))), valid)
    if op is Ops.SHRINK: return _same(src, tuple(i + b if b != 0 else i for i, (b, _) in zip(idx, u.arg)), valid)
    if op is Ops.FLIP: return _same(src, tuple((s - 1) - i if f else i for i, s, f in zip(idx, src.shape, u.arg)), valid)
    if op is Ops.PAD:
      cond: UOp | None = None
      new_idx = []
      bounded: dict[UOp, UOp] = {}
      for i, s, (b, a) in zip(idx, src.shape, u.arg):
        if b != 0: cond = _and(cond, (i < b).logical_not())
        if a != 0: cond = _and(cond, i < (s + b))
        j = i - b if b != 0 else i
        if (b != 0 or a != 0) and isinstance(s, int) and j.op is not Ops.CONST and (j.vmin < 0 or j.vmax > s - 1):
          # where the pad is valid, j is in [0, s): the source's index math is simplified with a placeholder of those
          # bounds (a conv's input gradient pads and reshapes: div/mod that only fold inside the valid region), then j
          # goes back in. Outside the valid region the value is masked by the where below and loads read element 0.
          x = UOp(Ops.DEFINE_VAR, dtypes.index, (), (f"{PLACEHOLDER}{next(_placeholders)}", 0, s - 1))
          bounded[x], j = j, x
        new_idx.append(j)
      if cond is None: return _same(src, tuple(new_idx), valid)
      def masked(inner: UOp) -> UOp:
        if bounded: inner = graph_rewrite(inner, symbolic_rules).substitute(bounded)
        return cond.where(inner, UOp.const(u.dtype, 0))
      return ((src, tuple(new_idx), _and(valid, cond)),), masked
    if op is Ops.REDUCE_AXIS:
      rop, axes = u.arg
      rng = {a: self.new_range(src.shape[a], AxisType.REDUCE) for a in axes}
      rr = tuple(r for r in rng.values() if r.op is Ops.RANGE)
      def reduce(inner: UOp) -> UOp:
        if rop is Ops.ADD: inner = _exact_products(inner)
        return UOp(Ops.REDUCE, u.dtype, (inner,) + rr, rop) if rr else inner
      return ((src, tuple(rng.get(a, i) for a, i in enumerate(idx)), valid),), reduce
    raise NotImplementedError(f"codegen cannot lower {op} (the scheduler should have removed it)")

def _exact_products(x: UOp) -> UOp:
  """A sum of 16-bit float products widened to float32 (a half matmul's or convolution's, and their gradients'): the
  operands are widened instead, so each product is exact (11 + 11 significant bits fit in float32's 24), as a tensor
  core forms it. The sum is then the same on a tensor core and off it; rounding each product to 16 bits first would
  lose up to 2^-11 (float16) or 2^-8 (bfloat16) of every term."""
  if x.op is Ops.CAST and x.dtype in (dtypes.float32, dtypes.float64) and (m := x.src[0]).op is Ops.MUL and m.dtype in (dtypes.float16, dtypes.bfloat16):
    return UOp(Ops.MUL, x.dtype, tuple(s.cast(x.dtype) for s in m.src))
  return x

def _leaf(value: UOp) -> tuple[tuple, Callable[[], UOp]]: return (), lambda: value
def _inside(i: UOp, size: int) -> bool:
  """Is every value index i takes in [0, size)? Not decided where i holds a pad's placeholder (its bounds are the valid
  region's only: the index it stands for may run past the buffer where the pad is not valid)."""
  return isinstance(size, int) and 0 <= i.vmin and i.vmax < size and \
    not any(x.op is Ops.DEFINE_VAR and x.arg[0].startswith(PLACEHOLDER) for x in i.toposort())

def _same(src: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[tuple, Callable[[UOp], UOp]]:
  """A movement op: the value of its source at the moved index, unchanged."""
  return ((src, idx, valid),), lambda x: x

def lower_ast(ast: UOp) -> UOp:
  """SINK(STORE(param, value)...) -> SINK of kernel-level stores over RANGEs of the output shape."""
  low = Lowerer()
  stores = ast.src
  shape = stores[0].src[1].shape
  if any(s.src[1].shape != shape for s in stores): raise ValueError(f"all outputs of a kernel must have one shape, got {[s.src[1].shape for s in stores]}")
  ranges = low.ranges_for(shape, AxisType.GLOBAL)
  flat = sum((r * st for r, st in zip(ranges, strides_for_shape(shape))), UOp.const(dtypes.index, 0))
  out = []
  for st in stores:
    param, value = st.src
    out.append(param.index(flat).store(low.lower(value, ranges, None)))
  return UOp(Ops.SINK, dtypes.void, tuple(out), ast.arg)
