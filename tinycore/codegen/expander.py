"""Expansion: UPCAST and UNROLL ranges written out as copies (an upcast's stores once per value, an unroll's terms of its sum)."""
from __future__ import annotations
import functools, itertools
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops, AxisType, symbolic_rules
from tinycore.rewrite import graph_rewrite, PatternMatcher, UPat
from tinycore.codegen.linearize import TERMS

def _values(rngs: list[UOp]) -> list[dict[UOp, UOp]]:
  return [{r: UOp.const(dtypes.index, v) for r, v in zip(rngs, combo)} for combo in itertools.product(*[range(r.src[0].arg) for r in rngs])]

def _unroll(x: UOp) -> UOp | None:
  """A reduction over UNROLL ranges: their values are terms of one trip of the loop, in order (TERMS: each joins the
  accumulator on its own, so the sum is the same left fold as the loop it replaces)."""
  if not (mine := [r for r in x.src[1:] if r.arg[1] is AxisType.UNROLL]): return None
  body = functools.reduce(lambda a, b: UOp(x.arg, x.dtype, (a, b), TERMS), [x.src[0].substitute(v) for v in _values(mine)])
  rest = tuple(r for r in x.src[1:] if r not in mine)
  return UOp(Ops.REDUCE, x.dtype, (body,) + rest, x.arg) if rest else body

def _upcast(x: UOp) -> UOp | None:
  """A SINK's or BARRIER's stores that depend on UPCAST ranges: one store per value of them."""
  stores = []
  for st in x.src:
    ups = sorted({u for u in st.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.UPCAST}, key=lambda r: r.arg[0]) if st.op is Ops.STORE else []
    stores.extend([st.substitute(v) for v in _values(ups)] if ups else [st])
  return None if len(stores) == len(x.src) and all(a is b for a, b in zip(stores, x.src)) else x.replace(src=tuple(stores))

expand_rules = PatternMatcher([(UPat(Ops.REDUCE, name="x"), _unroll), (UPat((Ops.SINK, Ops.BARRIER), name="x"), _upcast)])

def expand(sink: UOp) -> UOp:
  """Every UPCAST and UNROLL range written out; sources first, so a barrier's copies are expanded before the stores
  that read through it (which then no longer see the copy ranges)."""
  out = graph_rewrite(sink, expand_rules)
  return out if out is sink else graph_rewrite(out, symbolic_rules)
