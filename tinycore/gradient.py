"""Autograd on the lazy graph: derivative rules as a PatternMatcher over UOps, and the reverse sweep that applies them."""
from __future__ import annotations
import math
from tinycore.uop import UOp, Ops, resolve
from tinycore.dtype import dtypes
from tinycore.rewrite import UPat, PatternMatcher

def _reduce_to(g: UOp, shape: tuple) -> UOp:
  """Sum g over the axes where `shape` was expanded; 16-bit floats summed in float32 (as a forward sum or matmul is:
  a half gradient summed over a batch in half loses its low terms, and a tensor core adds products in float32)."""
  axes = tuple(i for i, (a, b) in enumerate(zip(shape, g.shape)) if a != b)
  if g.dtype in (dtypes.float16, dtypes.bfloat16): return g.cast(dtypes.float32).r(Ops.ADD, axes).cast(g.dtype)
  return g.r(Ops.ADD, axes)

def _max_grad(ctx: UOp, ret: UOp) -> tuple:
  a, b = ret.src
  # ties split the gradient evenly, as in PyTorch's maximum
  one, half = ctx.const_like(1.0), ctx.const_like(0.5)
  wa = a.alu(Ops.CMPLT, b).logical_not().where(a.alu(Ops.CMPEQ, b).where(half, one), ctx.const_like(0.0))
  return (ctx * wa, ctx * (one - wa))

def _reduce_max_grad(ctx: UOp, ret: UOp) -> tuple:
  src = ret.src[0]
  hit = src.alu(Ops.CMPEQ, ret.expand(src.shape)).cast(ctx.dtype)
  count = hit.r(Ops.ADD, ret.arg[1]).expand(src.shape)
  return (hit * ctx.expand(src.shape) / count,)

def _reduce_prod_grad(ctx: UOp, ret: UOp) -> tuple:
  """d prod(x)/dx_i is the product of the other elements of x_i's group, formed without dividing by a zero x_i.
  N = the product of the group's nonzero elements, Z = the product of its zero elements (1 with none, else 0):
    x_i != 0: N / x_i * Z
    x_i == 0: N * (the product of the other zeros: 1 with one zero, the other zero with two, 0 with more)
  Z and the other zero are written with the zero elements themselves (value 0), so second derivatives are right too."""
  src, axes = ret.src[0], ret.arg[1]
  zero, one = src.eq(0), src.const_like(1)
  def group(x: UOp, op: Ops) -> UOp: return x.r(op, axes).expand(src.shape)
  nonzero_prod = group(zero.where(one, src), Ops.MUL)
  zero_prod = group(zero.where(src, one), Ops.MUL)
  nzeros = group(zero.cast(dtypes.int32), Ops.ADD)
  zero_sum = group(zero.where(src, src.const_like(0)), Ops.ADD)
  other_zeros = nzeros.eq(1).where(one, nzeros.eq(2).where(zero_sum - src, src.const_like(0)))
  others = zero.where(nonzero_prod * other_zeros, nonzero_prod / zero.where(one, src) * zero_prod)
  return (ctx.expand(src.shape) * others,)

_LN2 = math.log(2)

# each rule maps (ctx = gradient of ret, ret) to the gradients of ret's sources (None: not differentiable)
pm_gradient = PatternMatcher([
  (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype),)),
  (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (ctx * (ret.src[0].const_like(math.pi / 2) - ret.src[0]).alu(Ops.SIN),)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (ctx / (ret.src[0] * ret.src[0].const_like(_LN2)),)),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx * ret * ret.const_like(_LN2),)),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx / (ret * ret.const_like(2)),)),
  (UPat(Ops.NEG), lambda ctx: (-ctx,)),
  (UPat(Ops.TRUNC), lambda ctx: (ctx.const_like(0),)),
  (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)), lambda ctx: (None, None)),
  (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),
  (UPat(Ops.SUB), lambda ctx: (ctx, -ctx)),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ret.src[1] * ctx, ret.src[0] * ctx)),
  (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (ctx / ret.src[1], -ctx * ret.src[0] / (ret.src[1] * ret.src[1]))),
  (UPat(Ops.MAX, name="ret"), _max_grad),
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, ret.src[0].where(ctx, ctx.const_like(0)), ret.src[0].where(ctx.const_like(0), ctx))),
  (UPat(Ops.REDUCE_AXIS, name="ret"), lambda ctx, ret: (ctx.expand(ret.src[0].shape),) if ret.arg[0] is Ops.ADD else
                                                      _reduce_max_grad(ctx, ret) if ret.arg[0] is Ops.MAX else
                                                      _reduce_prod_grad(ctx, ret)),
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
  (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: (_reduce_to(ctx, ret.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(tuple(sorted(range(len(ret.arg)), key=lambda i: ret.arg[i]))),)),
  (UPat(Ops.PAD, name="ret"), lambda ctx, ret: (ctx.shrink(tuple((b, b + s) for (b, _), s in zip(ret.arg, ret.src[0].shape))),)),
  (UPat(Ops.SHRINK, name="ret"), lambda ctx, ret: (ctx.pad(tuple((b, s - e) for (b, e), s in zip(ret.arg, ret.src[0].shape))),)),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
  (UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD)), lambda ctx: (ctx,)),
  (UPat(Ops.DETACH), lambda ctx: (None,)),
  (UPat(Ops.CUSTOM_GRADIENT, name="ret"), lambda ctx, ret: (None, *ret.arg[0](ctx, ret))),
  (UPat(Ops.COPY, name="ret"), lambda ctx, ret: (UOp(Ops.COPY, ctx.dtype, (ctx,), ret.src[0].device),)),
  (UPat(Ops.MULTI, name="ret"), lambda ctx, ret: (UOp(Ops.COPY, ctx.dtype, (ctx,), _sources(ret)[0].device),)),
  (UPat(Ops.BITCAST), lambda ctx: (None,)),
  # float fmod(a, b) = a - trunc(a/b) * b, the quotient piecewise constant; an integer remainder has no gradient
  (UPat(Ops.MOD, name="ret"), lambda ctx, ret: (ctx, -ctx * (ret.src[0] / ret.src[1]).alu(Ops.TRUNC)) if dtypes.is_float(ret.dtype) else (None, None)),
  (UPat((Ops.AND, Ops.OR, Ops.XOR, Ops.IDIV, Ops.SHL, Ops.SHR)), lambda ctx: (None, None)),
])

def _sources(u: UOp) -> tuple[UOp, ...]:
  """What u's rule differentiates with respect to: its sources, except for a lazy shard, MULTI([SHRINK](COPY(x, devices))):
  at the tensor level that is one copy of x (the nodes between are per-shard work), so x gets the gradient, copied back."""
  if u.op is not Ops.MULTI: return u.src
  s = u.src[0].src[0] if u.src[0].op is Ops.SHRINK else u.src[0]
  return (s.src[0],) if s.op is Ops.COPY and isinstance(s.src[0].device, str) else ()

def differentiable_graph(root: UOp) -> dict[UOp, None]:
  """The nodes a gradient of root can flow through (not under a DETACH), sources first."""
  return root.toposort(gate=lambda u: u.op is not Ops.DETACH)

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp], order: dict[UOp, None] | None = None) -> dict[UOp, UOp]:
  """Reverse-mode sweep from root: gradients of every node on a path to a target (missing: no path). `order`:
  differentiable_graph(root), where the caller has it already."""
  if order is None: order = differentiable_graph(root)
  on_path: set[UOp] = set()
  for u in order:  # sources come first, so a node is on a path if any source is
    if u in targets or not on_path.isdisjoint(u.src): on_path.add(u)
  grads: dict[UOp, UOp] = {root: root_grad}
  for u in reversed(order):
    if u not in grads or u in targets and not u.src or u.op is Ops.BUFFER: continue
    srcs = _sources(u)
    if on_path.isdisjoint(srcs): continue
    g = grads[u]
    got = pm_gradient.rewrite(u, ctx=g)
    if got is None: raise NotImplementedError(f"no gradient rule for {u.op}")
    for s, sg in zip(srcs, got):
      if sg is None or s not in on_path: continue
      grads[s] = sg if s not in grads else grads[s] + sg
  # a target with no elements has a gradient of no elements, whether or not a path reaches it (ops on empty tensors may
  # return a fresh constant, e.g. logsumexp over an empty dim): zeros of its shape, like torch
  for t in targets:
    if t not in grads and t.shape is not None and any(resolve(s == 0, False) for s in t.shape): grads[t] = t.const_like(0)
  return grads
