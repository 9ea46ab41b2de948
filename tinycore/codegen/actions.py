"""Optimisation actions BEAM chooses among (Opt): the core's UNROLL, the target's own from codegen/opt.py, applying a list of them.

An optimisation (Opt) is applied to the lowered kernel graph before the target's own passes (codegen/opt.py). The core
offers UNROLL (a reduce loop's body repeated `amount` times per iteration). codegen/opt.py can offer more: a function
`candidate_opts(sink, renderer) -> list[Opt]` lists the ones that apply to a kernel, and `apply_opt(sink, renderer, opt)`
applies one of its own (op names other than UNROLL); the search treats them all alike."""
from __future__ import annotations
from tinycore.uop import UOp, Ops
from tinycore.renderer import Renderer
from tinycore.codegen import opt as target_opts
from tinycore.codegen.opt import Opt

# ***** the core's option: unrolling a reduce loop *****

def _unroll(sink: UOp, axis: int, amount: int) -> UOp:
  """r in [0, n) becomes r' in [0, n/amount), the body summed (or max-ed) over r = r'*amount + i for each i."""
  def rewrite(x: UOp) -> UOp | None:
    if x.op is not Ops.REDUCE or not any(r.arg[0] == axis for r in x.src[1:]): return None
    r = next(r for r in x.src[1:] if r.arg[0] == axis)
    outer = UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, r.src[0].arg // amount),), r.arg)
    parts = [x.src[0].substitute({r: outer * amount + i}) for i in range(amount)]
    while len(parts) > 1: parts = [UOp(x.arg, x.dtype, tuple(parts[i:i+2])) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return UOp(Ops.REDUCE, x.dtype, (parts[0],) + tuple(outer if s is r else s for s in x.src[1:]), x.arg)
  reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE]
  return sink.substitute({x: new for x in reduces if (new := rewrite(x)) is not None})

def _unroll_options(sink: UOp) -> list[Opt]:
  rngs = {r for u in sink.toposort() if u.op is Ops.REDUCE for r in u.src[1:]}
  return [Opt("UNROLL", r.arg[0], k) for r in sorted(rngs, key=lambda r: r.arg[0]) if r.src[0].op is Ops.CONST
          for k in (2, 4, 8, 16) if r.src[0].arg % k == 0 and r.src[0].arg > k]

def candidate_opts(sink: UOp, ren: Renderer) -> list[Opt]:
  return _unroll_options(sink) + (list(target_opts.candidate_opts(sink, ren)) if hasattr(target_opts, "candidate_opts") else [])

def apply_opts(sink: UOp, ren: Renderer, opts: tuple[Opt, ...]) -> UOp:
  for o in opts:
    if o.op == "UNROLL": sink = _unroll(sink, o.axis, o.amount)
    elif hasattr(target_opts, "apply_opt"): sink = target_opts.apply_opt(sink, ren, o)
    else: raise ValueError(f"unknown optimisation {o}")
  return sink
