"""The kernel under optimisation (its ranges by kind, which reduce owns which range) and apply_opt, the one place actions change it."""
from __future__ import annotations
import functools
from dataclasses import dataclass
from enum import Enum, auto
from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.uop import UOp, Ops, AxisType, symbolic_rules, split_terms
from tinycore.rewrite import graph_rewrite, PatternMatcher, UPat
from tinycore.renderer import Renderer
from tinycore.codegen.gpudims import thread_axes

class OptOps(Enum):
  """What an optimisation action does to the range (RANGE id) it names."""
  LOCAL = auto()      # an output axis: `amount` threads of one block take consecutive values (GPU)
  UPCAST = auto()     # an output axis: each thread computes `amount` values (copies: a register tile)
  UNROLL = auto()     # a reduce axis: `amount` terms per trip of its loop, written out
  GROUP = auto()      # a reduce axis spread over `amount` threads of a block, neighbours reading neighbouring elements
  GROUPTOP = auto()   # the same, each thread reading one contiguous run of the axis
  STAGE = auto()      # a reduce axis cut into tiles of `amount`: per tile, every operand the block's threads share is
                      # first copied into shared memory (the last action on a kernel; only UNROLL may follow)
  def __repr__(self): return f"OptOps.{self.name}"

class OptError(ValueError):
  """An action that does not apply to this kernel: the message says why (BEAM skips such candidates)."""

@dataclass(frozen=True)
class Opt:
  op: OptOps
  axis: int      # the id of the RANGE it applies to (RANGE arg[0])
  amount: int
  def __repr__(self): return f"Opt({self.op.name}, {self.axis}, {self.amount})"

def const_size(r: UOp) -> int | None: return r.src[0].arg if r.src[0].op is Ops.CONST else None

class Kernel:
  """A version of the lowered kernel and what the actions ask of it, each computed once (never re-derived per helper)."""
  def __init__(self, sink: UOp, ren: Renderer, applied: tuple[Opt, ...] = ()): self.sink, self.ren, self.applied = sink, ren, applied
  @functools.cached_property
  def order(self) -> list[UOp]: return self.sink.toposort()
  @functools.cached_property
  def ranges(self) -> list[UOp]: return sorted((u for u in self.order if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  def axes(self, *kinds: AxisType) -> list[UOp]: return [r for r in self.ranges if r.arg[1] in kinds]
  @functools.cached_property
  def deps(self) -> dict[UOp, frozenset[UOp]]:
    """The ranges each node's value changes with."""
    deps: dict[UOp, frozenset[UOp]] = {}
    for u in self.order: deps[u] = frozenset({u}) if u.op is Ops.RANGE else frozenset().union(*(deps[s] for s in u.src))
    return deps
  @functools.cached_property
  def reduces(self) -> list[UOp]: return [u for u in self.order if u.op is Ops.REDUCE]
  @functools.cached_property
  def owners(self) -> dict[UOp, list[UOp]]:
    """range -> the reductions over it."""
    own: dict[UOp, list[UOp]] = {}
    for x in self.reduces:
      for r in x.src[1:]: own.setdefault(r, []).append(x)
    return own
  @functools.cached_property
  def written(self) -> set[UOp]: return {u.src[0].src[0] for u in self.order if u.op is Ops.STORE}
  @property
  def next_id(self) -> int: return max((r.arg[0] for r in self.ranges), default=-1) + 1
  def rng(self, axis: int) -> UOp:
    if (r := next((r for r in self.ranges if r.arg[0] == axis), None)) is None: raise OptError(f"the kernel has no range {axis}")
    return r
  def threads(self) -> list[UOp]:
    """The thread axes of a block in dim order, the last varying fastest (lidx0: codegen/gpudims.py)."""
    return thread_axes(self.sink, self.ranges)
  def output_coefficient(self, r: UOp) -> int:
    """r's coefficient in the first store's address (0 where it is not a plain term): which thread axis is contiguous."""
    return split_terms(self.sink.src[0].src[0].src[1])[0].get(r, 0) if self.sink.src and self.sink.src[0].op is Ops.STORE else 0

def flat(axes: list[UOp]) -> UOp:
  """The row-major position of the axes' values (the last fastest)."""
  out, stride = UOp.const(dtypes.index, 0), 1
  for a in reversed(axes):
    out, stride = out + a * stride, stride * const_size(a)
  return out

def split_range(sink: UOp, r: UOp, amount: int, kind: AxisType, new_id: int, top: bool = False) -> tuple[UOp, UOp]:
  """r (n trips) -> rest*amount + new (top: new*(n/amount) + rest), new a range of `kind`; reductions over r reduce over
  both, outer first. Returns the sink and the new range."""
  n = const_size(r)
  new = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amount),), (new_id, kind))
  rest = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n // amount),), r.arg) if n // amount > 1 else UOp.const(dtypes.index, 0)
  expr = (new * (n // amount) + rest) if top else (rest * amount + new)
  pair = tuple(x for x in ((new, rest) if top else (rest, new)) if x.op is Ops.RANGE)
  def both(x: UOp) -> UOp | None:
    if expr not in x.src[1:]: return None
    return x.replace(src=(x.src[0],) + tuple(y for s in x.src[1:] for y in (pair if s is expr else (s,))))
  sink = graph_rewrite(sink.substitute({r: expr}), PatternMatcher([(UPat(Ops.REDUCE, name="x"), both)]))
  return graph_rewrite(sink, symbolic_rules), new

# what each action splits off, and from which kind of axis
_SPLITS = {OptOps.LOCAL: (AxisType.GLOBAL, AxisType.LOCAL), OptOps.UPCAST: (AxisType.GLOBAL, AxisType.UPCAST),
           OptOps.UNROLL: (AxisType.REDUCE, AxisType.UNROLL), OptOps.GROUP: (AxisType.REDUCE, AxisType.GROUP_REDUCE),
           OptOps.GROUPTOP: (AxisType.REDUCE, AxisType.GROUP_REDUCE), OptOps.STAGE: (AxisType.REDUCE, AxisType.REDUCE)}

def apply_opt(k: Kernel, opt: Opt) -> Kernel:
  """The kernel with `opt` applied, or OptError saying why it does not apply."""
  ren, r, amt = k.ren, k.rng(opt.axis), opt.amount
  src_kind, new_kind = _SPLITS[opt.op]
  if r.arg[1] is not src_kind: raise OptError(f"{opt}: range {opt.axis} is {r.arg[1].name}, {opt.op.name} splits a {src_kind.name} range")
  if (n := const_size(r)) is None or amt < 2 or n % amt: raise OptError(f"{opt}: {amt} does not divide the range's {r.src[0]} trips")
  if any(o.op is OptOps.STAGE for o in k.applied) and opt.op is not OptOps.UNROLL: raise OptError(f"{opt}: only UNROLL may follow STAGE")
  if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
    if not ren.has_local: raise OptError(f"{opt}: backend {ren.device} has no thread blocks")
    if opt.op is not OptOps.LOCAL and not ren.has_shared: raise OptError(f"{opt}: backend {ren.device} has no shared memory")
    if prod(const_size(t) for t in k.threads()) * amt > ren.max_threads_per_group:
      raise OptError(f"{opt}: a block of more than {ren.max_threads_per_group} threads")
    if len(k.threads()) >= 3: raise OptError(f"{opt}: at most 3 thread axes")
  if opt.op is OptOps.UPCAST and amt > ren.upcast_max: raise OptError(f"{opt}: more than {ren.upcast_max} copies")
  if opt.op in (OptOps.GROUP, OptOps.GROUPTOP) and any(x.arg[1] is AxisType.GROUP_REDUCE for x in k.owners[r][0].src[1:]):
    raise OptError(f"{opt}: the reduction is already grouped")
  sink, new = split_range(k.sink, r, amt, new_kind, k.next_id, top=opt.op is OptOps.GROUPTOP)
  if opt.op is OptOps.STAGE: sink = stage(Kernel(sink, ren), r.replace(src=(UOp.const(dtypes.index, n // amt),)) if n > amt else None, new)
  return Kernel(sink, ren, k.applied + (opt,))

# ***** STAGE: operands the block shares, copied into shared memory one tile of the sum at a time *****
# A matmul block of 16x16 threads, each computing 4x4 outputs, reads a 64-row panel of A and a 64-column panel of B along
# K: every element of A's panel is read by the 16 threads of its row, of B's by the 16 of its column. Per tile of K
# (`amount` long) the threads copy both panels' tiles into shared memory (each thread a few elements, consecutive threads
# consecutive addresses), wait at a barrier, then read them from there: global traffic falls by the block's width. A
# barrier before the copy keeps a tile until every thread has finished reading the one before it.

def stage(k: Kernel, outer: UOp | None, inner: UOp) -> UOp:
  """Every global load in the reductions over `inner` that some thread axis does not change (the threads share it) is
  read from a shared-memory copy of its tile: the values it takes over `inner` and the thread and upcast axes it reads."""
  threads = k.threads()
  if not threads: raise OptError("STAGE: no thread axes (LOCAL) to share a tile")
  if k.axes(AxisType.GROUP_REDUCE): raise OptError("STAGE: not with a grouped reduction")
  nthreads, lid = prod(const_size(t) for t in threads), flat(threads)
  pre = UOp(Ops.BARRIER, dtypes.void, (outer,) if outer is not None else ())
  sub, copies, smem_bytes = {}, [], 0
  tile_kinds = (AxisType.LOCAL, AxisType.UPCAST, AxisType.UNROLL)
  for x in k.owners.get(inner, []):
    mine = set(x.src[1:])
    for ld in (u for u in x.src[0].toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and inner in k.deps[u]):
      if ld in sub or all(t in k.deps[ld] for t in threads): continue
      tile = [a for a in k.deps[ld] if a is not outer and (a.arg[1] in tile_kinds or a in mine)]
      if any(a not in tile and a is not outer and a.arg[1] is not AxisType.GLOBAL for a in k.deps[ld]): continue
      if any(const_size(a) is None for a in tile): continue
      # the layout follows the global addresses (the axis of stride 1 last): the copy reads consecutive elements
      terms = split_terms(ld.src[0].src[1])[0]
      tile.sort(key=lambda a: (-abs(terms.get(a, 0)), a.arg[0]))
      size = prod(const_size(a) for a in tile)
      if size % nthreads: continue
      smem = UOp(Ops.DEFINE_LOCAL, ld.dtype.ptr(size, "local"), (), len(copies))
      e = lid if size == nthreads else lid + nthreads * UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // nthreads),),
                                                           (k.next_id + len(copies), AxisType.UPCAST))
      coords, stride = {}, 1
      for a in reversed(tile): coords[a], stride = (e // stride) % const_size(a) if stride > 1 else e % const_size(a), stride * const_size(a)
      copies.append(smem.index(e).store(ld.substitute(coords), pre))
      sub[ld] = smem.index(flat(tile))
      smem_bytes += size * ld.dtype.itemsize
  if not copies: raise OptError("STAGE: no load the threads of a block share")
  if smem_bytes > k.ren.shared_max: raise OptError(f"STAGE: tiles of {smem_bytes} bytes, more than the {k.ren.shared_max} bytes of shared memory")
  post = UOp(Ops.BARRIER, dtypes.void, tuple(copies))
  return graph_rewrite(k.sink.substitute({ld: UOp(Ops.LOAD, ld.dtype, (idx, post)) for ld, idx in sub.items()}), symbolic_rules)
