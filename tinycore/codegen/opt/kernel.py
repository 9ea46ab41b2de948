"""The kernel under optimisation (its ranges by kind, which reduce owns which range) and apply_opt, the one place actions change it."""
from __future__ import annotations
import functools
from dataclasses import dataclass
from enum import Enum, auto
import numpy as np
from tinycore.dtype import dtypes
from tinycore.helpers import prod, ceildiv
from tinycore.uop import UOp, Ops, AxisType, symbolic_rules, split_terms, identity_element
from tinycore.rewrite import graph_rewrite, PatternMatcher, UPat
from tinycore.renderer import Renderer, TensorCore
from tinycore.codegen.gpudims import thread_axes
from tinycore.codegen.widen import lanes
from tinycore.codegen.linearize import NEXT_TRIP

class OptOps(Enum):
  """What an optimisation action does to the range (RANGE id) it names."""
  LOCAL = auto()      # an output axis: `amount` threads of one block take consecutive values (GPU)
  UPCAST = auto()     # an output axis: each thread computes `amount` values (copies: a register tile)
  UNROLL = auto()     # a reduce axis: `amount` terms per trip of its loop, written out
  GROUP = auto()      # a reduce axis spread over `amount` threads of a block, neighbours reading neighbouring elements
  GROUPTOP = auto()   # the same, each thread reading one contiguous run of the axis
  STAGE = auto()      # a reduce axis cut into tiles of `amount`: per tile, every operand the block's threads share is
                      # first copied into shared memory (the last action on a kernel; only UNROLL may follow)
  PADTO = auto()      # an axis run to the next multiple of `amount`: reads past its end give 0, sums skip them, stores there are dropped
  MERGE = auto()      # the axis and the range numbered `amount` (of its kind) as one range, `amount`'s values varying fastest
  TC = auto()         # the reduction over this axis on the renderer's tensor core number `amount` (codegen/opt/tc.py)
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

def range_deps(order, deps: dict[UOp, frozenset[UOp]] | None = None) -> dict[UOp, frozenset[UOp]]:
  """The ranges each node of `order` (sources first) changes with: a reduction's not with the ranges it reduces over.
  `deps`: what is known already (nodes of an earlier order), extended in place."""
  deps = {} if deps is None else deps
  for u in order:
    if u in deps: continue
    d = frozenset({u}) if u.op is Ops.RANGE else frozenset().union(*(deps[s] for s in u.src))
    deps[u] = d - set(u.src[1:]) | frozenset().union(*(deps[r.src[0]] for r in u.src[1:])) if u.op is Ops.REDUCE else d
  return deps

class Kernel:
  """A version of the lowered kernel and what the actions ask of it, each computed once (never re-derived per helper)."""
  def __init__(self, sink: UOp, ren: Renderer, applied: tuple[Opt, ...] = ()): self.sink, self.ren, self.applied = sink, ren, applied
  @functools.cached_property
  def order(self) -> list[UOp]: return self.sink.toposort()
  @functools.cached_property
  def ranges(self) -> list[UOp]: return sorted((u for u in self.order if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  def axes(self, *kinds: AxisType) -> list[UOp]: return [r for r in self.ranges if r.arg[1] in kinds]
  @functools.cached_property
  def deps(self) -> dict[UOp, frozenset[UOp]]: return range_deps(self.order)
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

def split_range(sink: UOp, r: UOp, amount: int, new: UOp, top: bool = False) -> UOp:
  """r (n trips) -> rest*amount + new (top: new*(n/amount) + rest), `new` a range of `amount` trips (a fresh one, or a
  block's thread axis the work shares); reductions over r reduce over both, outer first."""
  n = const_size(r)
  rest = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n // amount),), r.arg) if n // amount > 1 else UOp.const(dtypes.index, 0)
  expr = (new * (n // amount) + rest) if top else (rest * amount + new)
  pair = tuple(x for x in ((new, rest) if top else (rest, new)) if x.op is Ops.RANGE)
  def both(x: UOp) -> UOp | None:
    if expr not in x.src[1:]: return None
    return x.replace(src=(x.src[0],) + tuple(y for s in x.src[1:] for y in (pair if s is expr else (s,))))
  sink = graph_rewrite(sink.substitute({r: expr}), PatternMatcher([(UPat(Ops.REDUCE, name="x"), both)]))
  return graph_rewrite(sink, symbolic_rules)

def pad_range(k: Kernel, r: UOp, size: int) -> UOp:
  """r runs to `size`, past its n trips: every load reading it is kept in its buffer and gives 0 there, a reduction's
  body gives the reduction's identity there, a store there is dropped (a gate)."""
  n = const_size(r)
  new = r.replace(src=(UOp.const(dtypes.index, size),))
  valid = new < n
  def gate_load(x: UOp) -> UOp | None:
    idx = x.src[0]
    if new not in idx.src[1].toposort() or idx.src[1].op is Ops.WHERE and idx.src[1].src[0] is valid: return None
    return valid.where(x.replace(src=(idx.replace(src=(idx.src[0], valid.where(idx.src[1], UOp.const(dtypes.index, 0))) + idx.src[2:]),) + x.src[1:]), x.const_like(0))
  def gate_reduce(x: UOp) -> UOp | None:
    if new not in x.src[1:] or x.src[0].op is Ops.WHERE and x.src[0].src[0] is valid: return None
    return x.replace(src=(valid.where(x.src[0], x.src[0].const_like(identity_element(x.arg, x.dtype.scalar))),) + x.src[1:])
  def gate_store(x: UOp) -> UOp | None:
    if new not in x.src[0].src[1].toposort() or x.src[0].src[0].op is not Ops.DEFINE_GLOBAL: return None
    gates = [g for g in x.src[2:] if g.dtype == dtypes.bool]
    if any(valid in g.toposort() for g in gates): return None
    return x.replace(src=x.src[:2] + (functools.reduce(lambda a, b: a & b, gates + [valid]),) + tuple(g for g in x.src[2:] if g.dtype != dtypes.bool))
  sink = k.sink.substitute({r: new})
  sink = graph_rewrite(sink, PatternMatcher([(UPat(Ops.LOAD, src=(UPat(Ops.INDEX),), allow_any_len=True, name="x"), gate_load),
                                            (UPat(Ops.REDUCE, name="x"), gate_reduce), (UPat(Ops.STORE, name="x"), gate_store)]), bottom_up=True)
  return graph_rewrite(sink, symbolic_rules)

# what each action splits off, and from which kind of axis
_SPLITS = {OptOps.LOCAL: (AxisType.GLOBAL, AxisType.LOCAL), OptOps.UPCAST: (AxisType.GLOBAL, AxisType.UPCAST),
           OptOps.UNROLL: (AxisType.REDUCE, AxisType.UNROLL), OptOps.GROUP: (AxisType.REDUCE, AxisType.GROUP_REDUCE),
           OptOps.GROUPTOP: (AxisType.REDUCE, AxisType.GROUP_REDUCE), OptOps.STAGE: (AxisType.REDUCE, AxisType.REDUCE)}

def apply_opt(k: Kernel, opt: Opt) -> Kernel:
  """The kernel with `opt` applied, or OptError saying why it does not apply."""
  ren, r, amt = k.ren, k.rng(opt.axis), opt.amount
  if opt.op is OptOps.TC:
    if any(o.op not in (OptOps.PADTO, OptOps.MERGE) for o in k.applied): raise OptError(f"{opt}: TC is the first action (after PADTO, MERGE)")
    if not 0 <= amt < len(ren.tensor_cores): raise OptError(f"{opt}: backend {ren.device} has {len(ren.tensor_cores)} tensor cores")
    return Kernel(apply_tc(k, r, ren.tensor_cores[amt]), ren, k.applied + (opt,))
  if opt.op is OptOps.MERGE:
    inner = k.rng(amt)
    if r is inner or r.arg[1] is not inner.arg[1] or r.arg[1] not in (AxisType.GLOBAL, AxisType.REDUCE) or None in (const_size(r), const_size(inner)):
      raise OptError(f"{opt}: merges two GLOBAL or two REDUCE ranges of constant trips")
    if r.arg[1] is AxisType.REDUCE and any((r in x.src[1:]) != (inner in x.src[1:]) for x in k.reduces):
      raise OptError(f"{opt}: the two ranges are not reduced over together")
    merged = r.replace(src=(UOp.const(dtypes.index, const_size(r) * const_size(inner)),))
    def one(x: UOp) -> UOp | None:   # a reduction over both is one over the merged range
      return x.replace(src=(x.src[0],) + tuple(merged if s is r else s for s in x.src[1:] if s is not inner)) if r in x.src[1:] else None
    sink = graph_rewrite(k.sink, PatternMatcher([(UPat(Ops.REDUCE, name="x"), one)]))
    sink = sink.substitute({r: merged // const_size(inner), inner: merged % const_size(inner)})
    return Kernel(graph_rewrite(sink, symbolic_rules), ren, k.applied + (opt,))
  if opt.op is OptOps.PADTO:
    if r.arg[1] not in (AxisType.GLOBAL, AxisType.REDUCE) or (n := const_size(r)) is None or amt < 2 or n % amt == 0:
      raise OptError(f"{opt}: pads a GLOBAL or REDUCE range of constant trips that {amt} does not divide")
    if ceildiv(n, amt) * amt > n * 2: raise OptError(f"{opt}: more than doubles the range's {n} trips")
    return Kernel(pad_range(k, r, ceildiv(n, amt) * amt), ren, k.applied + (opt,))
  src_kind, new_kind = _SPLITS[opt.op]
  if r.arg[1] is not src_kind: raise OptError(f"{opt}: range {opt.axis} is {r.arg[1].name}, {opt.op.name} splits a {src_kind.name} range")
  if (n := const_size(r)) is None or amt < 2 or n % amt: raise OptError(f"{opt}: {amt} does not divide the range's {r.src[0]} trips")
  if any(o.op is OptOps.STAGE for o in k.applied) and opt.op is not OptOps.UNROLL: raise OptError(f"{opt}: only UNROLL may follow STAGE")
  grouped = opt.op in (OptOps.GROUP, OptOps.GROUPTOP)
  # a reduction the block's threads along an output axis (or another reduction's group) do not change is spread over
  # those threads (a row's sum in the kernel that then writes the row: its threads sum the row together) instead of
  # over threads of its own
  shared = next((t for t in k.axes(AxisType.LOCAL, AxisType.GROUP_REDUCE) if const_size(t) == amt and not any(t in k.deps[x] for x in k.owners[r])),
                None) if grouped else None
  if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
    if not ren.has_local: raise OptError(f"{opt}: backend {ren.device} has no thread blocks")
    if opt.op is not OptOps.LOCAL and not ren.has_shared: raise OptError(f"{opt}: backend {ren.device} has no shared memory")
    if shared is None and prod(const_size(t) for t in k.threads()) * amt > ren.max_threads_per_group:
      raise OptError(f"{opt}: a block of more than {ren.max_threads_per_group} threads")
    if shared is None and len(k.threads()) >= 3: raise OptError(f"{opt}: at most 3 thread axes")
  if opt.op is OptOps.UPCAST and amt > ren.upcast_max: raise OptError(f"{opt}: more than {ren.upcast_max} copies")
  if grouped and any(x.arg[1] in (AxisType.GROUP_REDUCE, AxisType.LOCAL) for x in k.owners[r][0].src[1:]):
    raise OptError(f"{opt}: the reduction is already grouped")
  new = shared if shared is not None else UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amt),), (k.next_id, new_kind))
  sink = split_range(k.sink, r, amt, new, top=opt.op is OptOps.GROUPTOP)
  if opt.op is OptOps.STAGE: sink = stage(Kernel(sink, ren), r.replace(src=(UOp.const(dtypes.index, n // amt),)) if n > amt else None, new)
  return Kernel(sink, ren, k.applied + (opt,))

# ***** STAGE: operands the block shares, copied into shared memory one tile of the sum at a time *****
# A matmul block of 16x16 threads, each computing 4x4 outputs, reads a 64-row panel of A and a 64-column panel of B along
# K: every element of A's panel is read by the 16 threads of its row, of B's by the 16 of its column. Per tile of K
# (`amount` long) the threads copy both panels' tiles into shared memory (each thread a few runs of the widest vector the
# target takes, consecutive threads consecutive runs), wait at a barrier, then read them from there: global traffic falls by the block's width. A
# barrier before the copy keeps a tile until every thread has finished reading the one before it.
# Where twice the tiles fit, they are double-buffered (pipelined): tile t+1 is copied into the other buffer while tile t
# is read. A trip of the loop over tiles then waits at one barrier (tile t copied, and every thread done reading the
# buffer the trip refills) and loads tile t+1 from global memory before its sums, storing it to shared memory after
# them: the loads' latency is spent doing the sums instead of waiting at a barrier (linearize.py's NEXT_TRIP).

# A tensor core's fragment loads read their tile through the lane id's bits (codegen/opt/tc.py), not through one range
# per tile axis: their tile is found from the addresses themselves. Every fragment load of one operand (one buffer, one
# base address) reads inside the same box of elements, `sizes` along `strides` of the buffer; the box is copied to
# shared memory whole, in the buffer's order (consecutive threads consecutive runs), and each fragment element is
# read at its place in the box.

_NP_ALU = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.NEG: np.negative,
           Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal, Ops.AND: np.logical_and, Ops.OR: np.logical_or,
           Ops.WHERE: np.where, Ops.IDIV: lambda a, b: np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b)),
           Ops.MOD: lambda a, b: a - b * (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b)))}

def _values(u: UOp, tile: list[UOp], others: int) -> np.ndarray | None:
  """The index u at every point of the tile's ranges (one numpy axis each), every other range at `others`; None where
  it reads something else (a variable, a load)."""
  vals: dict[UOp, np.ndarray] = {}
  for x in u.toposort():
    if x.op is Ops.CONST: vals[x] = np.array(x.arg)
    elif x.op is Ops.RANGE:
      vals[x] = np.arange(const_size(x)).reshape([-1 if t is x else 1 for t in tile]) if x in tile else np.array(min(others, x.vmax))
    elif x.op in _NP_ALU: vals[x] = _NP_ALU[x.op](*(vals[s] for s in x.src))
    else: return None
  return np.broadcast_to(vals[u], [const_size(t) for t in tile]).astype(np.int64)

def _box(idxs: list[UOp], tile: list[UOp]) -> tuple[int, list[int], list[int]] | None:
  """(least offset, strides, sizes): the elements the indexes read over the tile's ranges, relative to the first one's
  at the tile's origin, as a box of the buffer (each stride a multiple of the span below it), the same wherever the
  other ranges are; None where they are not one."""
  offs = []
  for others in (0, 1):
    vals = [_values(i, tile, others) for i in idxs]
    if any(v is None for v in vals): return None
    offs.append(np.unique(np.concatenate([v.ravel() for v in vals])) - vals[0].flat[0])
  if offs[0].shape != offs[1].shape or (offs[0] != offs[1]).any(): return None
  low, got = int(offs[0][0]), offs[0] - offs[0][0]
  strides, sizes, points = [], [], np.zeros(1, np.int64)
  while len(points) < len(got):
    s, n = int(got[~np.isin(got, points)][0]), 1
    while np.isin(points + n * s, got).all(): n += 1
    if n == 1 or strides and s < strides[-1] * sizes[-1] or strides and s % strides[-1]: return None
    strides, sizes, points = strides + [s], sizes + [n], np.add.outer(np.arange(n) * s, points).ravel()
  return (low, strides, sizes) if len(points) == len(got) and np.isin(got, points).all() else None

def _ungated(ld: UOp) -> UOp:
  """A load's index without the gates of padded reads (pad_range, the lowerer's pads: where a gate is off, the value
  read is masked after the load): the copy gates its own reads."""
  idx = ld.src[0].src[1]
  while idx.op is Ops.WHERE and idx.src[2].op is Ops.CONST and idx.src[2].arg == 0: idx = idx.src[1]
  return idx

def _affine_run(value, n: int, lid: UOp) -> bool:
  """Are the global indexes value(e) reads for a thread's n consecutive tile elements e one index plus constants?"""
  reads = [[u for u in value(lid * n + j).simplify().toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL] for j in range(n)]
  return all(len(r) == len(reads[0]) for r in reads) and \
    all(split_terms(_ungated(a).simplify())[0] == split_terms(_ungated(b).simplify())[0] for r in reads[1:] for a, b in zip(reads[0], r))

def layout(sizes: list[int], itemsize: int, rows: list[bool], pad: bool) -> list[int]:
  """The strides (in elements) of a tile of `sizes` (innermost first) in shared memory. Shared memory is banks of 4
  bytes, one word of each a cycle (32 banks on NVIDIA GPUs, the NV emulator's shared_wavefronts; AMD's LDS is banked
  too): lanes of a warp reading 16 bytes each (a vector, a row of ldmatrix) at places a multiple of 32 bytes apart share
  banks and take turns. So where `pad`, an axis the warp's lanes read along (`rows`) whose stride is a multiple of 32
  bytes gets 16 bytes more: an odd number of 16-byte groups, so 8 lanes on 8 consecutive rows reach 8 different groups
  of 4 banks (and 4-byte reads of two rows two banks)."""
  strides, s = [], 1
  for n, row in zip(sizes, rows):
    if pad and row and s * itemsize % 32 == 0: s += 16 // itemsize
    strides, s = strides + [s], s * n
  return strides

def stage(k: Kernel, outer: UOp | None, inner: UOp, pad: bool = True, pipelined: bool = True) -> UOp:
  """Every global load in the reductions over `inner` that some thread axis does not change (the threads share it) is
  read from a shared-memory copy of its tile: the values it takes over `inner` and the thread and upcast axes it reads.
  The tiles are double-buffered where `outer` (the loop over tiles) is their sums' outermost loop and two copies of the
  padded tiles fit in shared memory; else single. Their rows are padded (layout()) where the padded tiles fit."""
  threads = k.threads()
  if not threads: raise OptError("STAGE: no thread axes (LOCAL) to share a tile")
  if k.axes(AxisType.GROUP_REDUCE): raise OptError("STAGE: not with a grouped reduction")
  # a loop around the loop over tiles (another range of the sum, or another sum's loop it runs in) would refill the
  # first buffer while the last trip's reads of it may still run
  pipelined = pipelined and outer is not None and all(x.src[1] is outer and not any(a.arg[1] is AxisType.REDUCE for a in k.deps[x])
                                                      for x in k.owners.get(inner, []))
  nthreads, lid = prod(const_size(t) for t in threads), flat(threads)
  pre = UOp(Ops.BARRIER, dtypes.void, (outer,) if outer is not None else ())
  if pipelined:   # the tile a trip copies for the next one: the last trip's copy reads its own tile again (and is not read)
    trips = const_size(outer)
    after, this_slot, next_slot = (outer < trips - 1).where(outer + 1, outer), outer % 2, (outer + 1) % 2
  sub, copies, spans, smem_bytes = {}, [], [], 0
  tile_kinds = (AxisType.LOCAL, AxisType.UPCAST, AxisType.UNROLL, AxisType.WARP)
  def copy(ld: UOp, sizes: list[int], rows: list[bool], value) -> tuple[UOp, list[int]]:
    """(smem, its strides): a fresh shared array holding a tile of `sizes` (innermost first; rows padded where the
    warp's lanes read along them: layout()), filled by the block's threads: the tile's element e (row-major) is
    value(e). Where the target accesses n elements at once (codegen/widen.py), each thread copies n consecutive ones of
    a row a step: one wide shared store, and one wide global load where they are consecutive there too. n is the widest
    that copies no more elements than one at a time would (a copy past the tile's end still reads one: 4608 over 256
    threads takes pairs, not fours)."""
    size = prod(sizes)
    # n elements a thread copies run along the tile's innermost axis; where their global indexes are not one index plus
    # constants (an axis merged from several, read through divisions and remainders: a weight gradient's images x 7x7
    # pixels), each of the n would take its own division and remainder: 1 a step then, and a thread's copies, a block's
    # threads apart, share theirs where that many elements are whole rows of the tile (the same place along the axis)
    most = next((n for n in (16, 8, 4, 2) if n <= lanes(k.ren, ld.dtype) and _affine_run(value, n, lid)), 1)
    for strides in (layout(sizes, ld.dtype.itemsize, rows, pad), layout(sizes, ld.dtype.itemsize, rows, False)):
      # the tile as runs of axes each laid out whole: [elements, stride] of each, a padded axis starting a new one
      runs = [[sizes[0], 1]]
      for m, st in zip(sizes[1:], strides[1:]):
        if st == runs[-1][0] * runs[-1][1]: runs[-1][0] *= m
        else: runs.append([m, st])
      n = next(n for n in (16, 8, 4, 2, 1) if n <= most and runs[0][0] % n == 0 and ceildiv(size // n, nthreads) * n == ceildiv(size, nthreads))
      # a padded layout only where finding a chunk's run takes shifts and masks, not divisions (a conv's weight rows of 288)
      if len(runs) == 1 or all(m & (m - 1) == 0 for m in [runs[0][0] // n] + [m for m, _ in runs[1:-1]]): break
    span = sum((m - 1) * st for m, st in zip(sizes, strides)) + 1
    # two buffers, each starting 16 bytes aligned (wide accesses): buffer b at b * span
    span = ceildiv(span * ld.dtype.itemsize, 16) * 16 // ld.dtype.itemsize if pipelined else span
    smem = UOp(Ops.DEFINE_LOCAL, ld.dtype.ptr(span * (2 if pipelined else 1), "local"), (), len(spans))
    ids = k.next_id + 2 * len(spans)
    spans.append(span)
    chunk = lid if size <= nthreads * n else lid + nthreads * UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, ceildiv(size, nthreads * n)),),
                                                                   (ids, AxisType.UPCAST))
    # a tile the threads do not divide: the copies past its end are not stored (and read its first element)
    inside = chunk < size // n if size % (nthreads * n) else None
    chunk = chunk if inside is None else inside.where(chunk, UOp.const(dtypes.index, 0))
    # Which thread copies which chunk is free. Shared memory serves a warp's stores 128 bytes of lanes at a time, `group`
    # lanes (layout()); in row order, where a row is under 128 bytes, those lanes store two or more rows, whose padded
    # starts can share banks (rows of 64 bytes 80 apart: 4 banks twice). With a row stride of s = w * odd chunks (w a
    # power of two), the rows r of one group start at w * (odd * r) mod group chunks: distinct for group // w
    # consecutive rows. So a group copies w consecutive chunks of each of group // w consecutive rows, in distinct banks,
    # while each warp still reads 32 bytes or more of a row at a time from global memory (whole sectors). Where rows are
    # longer, row order had no conflict, but this order too puts a thread's copies whole blocks of rows apart: constant
    # offsets from one address (ptxas, 4096^2 fp16 matmul: 172 registers, 209 with B's tile copied in row order).
    per_row, group = runs[0][0] // n, 128 // max(4, n * ld.dtype.itemsize)
    w = (s := runs[1][1] // n) & -s if len(runs) > 1 and runs[1][1] % n == 0 else per_row
    if w < min(per_row, group) and per_row & (per_row - 1) == 0 and runs[1][0] % (group // w) == 0 and w * (32 // group) * n * ld.dtype.itemsize >= 32:
      block = group // w * per_row
      i = chunk % block   # chunk's place in its block of rows: its group i // group, its lane there i % group
      chunk = chunk // block * block + i % group // w * per_row + i // group * w + i % w
    j = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (ids + 1, AxisType.UPCAST)) if n > 1 else UOp.const(dtypes.index, 0)
    at = chunk * n + j
    # a chunk's n elements lie in the first run: their place there, plus the place of that run's copy in the others
    place, rest = (at, None) if len(runs) == 1 else ((chunk % (runs[0][0] // n)) * n + j, chunk // (runs[0][0] // n))
    for i, (m, st) in enumerate(runs[1:]):
      place, rest = place + (rest if i == len(runs) - 2 else rest % m) * st, rest // m
    gate = (inside,) if inside is not None else ()
    if not pipelined: copies.append(smem.index(place).store(value(at), *gate, pre))
    else:   # the first tile before the loop, and each trip's next tile into the buffer the trip does not read
      copies.append(smem.index(place).store(value(at).substitute({outer: UOp.const(dtypes.index, 0)}), *gate))
      copies.append(smem.index(place + next_slot * span).store(value(at).substitute({outer: after}), *gate))
    return smem, strides
  fragments: dict[tuple, list[UOp]] = {}
  copied: set[UOp] = set()
  # a load whose one reader narrows it (a mixed-precision matmul's float32 operand cast to the tensor core's float16) is
  # copied narrowed: converted once per tile where it is stored (linearize.py), not at every read, in half the memory
  narrowed: dict[UOp, UOp] = {}
  for x in k.owners.get(inner, []):
    # the sum's loops inside the tile's loop are the tile's; those outside it run alike in every thread of the block
    mine = set(x.src[1 + x.src[1:].index(outer) + 1:]) if outer is not None else set(x.src[1:])
    users: dict[UOp, list[UOp]] = {}
    for u in (body := x.src[0].toposort()):
      for s in u.src: users.setdefault(s, []).append(u)
    for ld in (u for u in body if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and inner in k.deps[u]):
      if ld in copied or all(t in k.deps[ld] for t in threads): continue
      if len(us := users[ld]) == 1 and us[0].op is Ops.CAST and dtypes.is_float(us[0].dtype) and dtypes.is_float(ld.dtype) and us[0].dtype.itemsize < ld.dtype.itemsize:
        narrowed[ld] = us[0]
      tile = [a for a in k.deps[ld] if a is not outer and (a.arg[1] in tile_kinds or a in mine)]
      if any(a not in tile and a is not outer and a.arg[1] is not AxisType.GLOBAL for a in k.deps[ld]): continue
      if any(const_size(a) is None for a in tile): continue
      if any(a.arg[1] is AxisType.WARP for a in tile):   # a fragment element: its operand's loads are staged together below
        # one operand's fragment elements: one buffer, one base address but for its constant
        base = split_terms(_ungated(ld).substitute({a: UOp.const(dtypes.index, 0) for a in tile}).simplify())[0]
        group = fragments.setdefault((ld.src[0].src[0], narrowed.get(ld, ld).dtype, frozenset(base.items())), [])
        if ld not in group: group.append(ld)
        continue
      # a padded read (the lowerer's pads: WHERE(valid, load, 0), valid a function of the load's own coordinates: a
      # conv's halo) is copied masked: the copy writes the zeros once per tile, and the sums read plain values, not a
      # select per multiply-add (a conv's 7 pixels x 4 filters: 56 selects a trip beside 112 multiply-adds)
      masked = [w for w in users[ld] if w.op is Ops.WHERE and w.src[1] is ld and w.src[2].op is Ops.CONST and w.src[2].arg == 0 and k.deps[w] <= k.deps[ld]]
      staged = masked[0] if len(masked) == 1 and len(users[ld]) == 1 else narrowed.get(ld, ld)
      # the layout follows the global addresses (the axis of stride 1 last): the copy reads consecutive elements
      terms = split_terms(ld.src[0].src[1])[0]
      tile.sort(key=lambda a: (-abs(terms.get(a, 0)), a.arg[0]))
      coords = lambda at: {a: (at // prod(const_size(b) for b in tile[i + 1:])) % const_size(a) for i, a in enumerate(tile)}
      # the lanes of a warp differ along the thread axes: rows along them are padded
      smem, strides = copy(staged, [const_size(a) for a in reversed(tile)], [a in threads for a in reversed(tile)], lambda at: staged.substitute(coords(at)))
      copied.add(ld)
      sub[staged] = smem.index(sum((a * s for a, s in zip(reversed(tile), strides)), this_slot * spans[-1] if pipelined else UOp.const(dtypes.index, 0)))
      smem_bytes += smem.dtype.size * staged.dtype.itemsize
  for (buf, _, _), lds in fragments.items():
    reals = [_ungated(ld) for ld in lds]
    tile = sorted({a for ld in lds for a in k.deps[ld] if a.arg[1] is not AxisType.GLOBAL and a is not outer}, key=lambda a: a.arg[0])
    base = reals[0].substitute({a: UOp.const(dtypes.index, 0) for a in tile}).simplify()
    if (box := _box(reals, tile)) is None: continue
    low, strides, sizes = box
    gated = any(ld.src[0].src[1].op is Ops.WHERE for ld in lds)
    def value(at: UOp, ld=lds[0], buf=buf, base=base, low=low, strides=strides, sizes=sizes, gated=gated) -> UOp:
      addr = base + low + sum((((at // prod(sizes[:i])) % n) * s for i, (s, n) in enumerate(zip(strides, sizes))), UOp.const(dtypes.index, 0))
      # a padded operand's box runs past the buffer's ends: those copies read its first element (the sum masks them)
      ok = (addr < buf.dtype.size) & (UOp.const(dtypes.index, -1) < addr) if gated else None
      v = UOp(Ops.LOAD, ld.dtype, (buf.index(addr if ok is None else ok.where(addr, UOp.const(dtypes.index, 0))),))
      return v if ld not in narrowed else UOp(Ops.CAST, narrowed[ld].dtype, (v,))
    # a fragment's lanes read along every axis of the box but its contiguous one (the rows of ldmatrix's matrices)
    smem, lay = copy(narrowed.get(lds[0], lds[0]), sizes, [False] + [True] * (len(sizes) - 1), value)
    smem_bytes += smem.dtype.size * smem.dtype.base.itemsize
    for ld, real in zip(lds, reals):
      off = real.substitute({a: UOp.const(dtypes.index, 0) for a in k.deps[ld] if a not in tile}) - int(_values(reals[0], tile, 0).flat[0]) - low
      # the box's strides each divide the next: an offset's place along stride s is (off mod the next stride) // s
      sub[narrowed.get(ld, ld)] = smem.index(sum(((off % strides[i + 1] if i + 1 < len(strides) else off) // s) * lay[i] for i, s in enumerate(strides))
                           + (this_slot * spans[-1] if pipelined else 0))
  if not copies: raise OptError("STAGE: no load the threads of a block share")
  if smem_bytes > k.ren.shared_max and pipelined: return stage(k, outer, inner, pad, False)
  if smem_bytes > k.ren.shared_max and pad: return stage(k, outer, inner, False, False)
  if smem_bytes > k.ren.shared_max: raise OptError(f"STAGE: tiles of {smem_bytes} bytes, more than the {k.ren.shared_max} bytes of shared memory")
  # pipelined: one barrier a trip, waiting for the copies before the loop and those the trip before left (NEXT_TRIP)
  post = UOp(Ops.BARRIER, dtypes.void, (outer, *copies), NEXT_TRIP) if pipelined else UOp(Ops.BARRIER, dtypes.void, tuple(copies))
  return graph_rewrite(k.sink.substitute({ld: UOp(Ops.LOAD, ld.dtype, (idx, post)) for ld, idx in sub.items()}), symbolic_rules)

# ***** TC: a matmul-shaped reduction on the renderer's tensor core *****
# The reduction C[m, n] = sum_k A[m, k] * B[k, n] (products of dtype_in values, summed in dtype_out) is cut into tiles of
# the instruction's M x N x K: the tile's coordinates become a warp's lanes and each lane's fragment elements, where the
# TensorCore's layout puts them; the sum over k runs over the tiles of K, each step one WMMA that adds into the lanes'
# accumulator fragments; each lane stores the output elements its fragment of D holds.

def _mma_operands(x: UOp, tc: TensorCore) -> tuple[UOp, UOp] | None:
  """(A, B) of dtype_in when x sums products of them in dtype_out: CAST(A * B), CAST(A) * CAST(B), or A * B."""
  if x.arg is not Ops.ADD or x.dtype != tc.dtype_out: return None
  body, valid = x.src[0], None
  if body.op is Ops.WHERE and body.src[2].op is Ops.CONST and body.src[2].arg == 0: valid, body = body.src[0], body.src[1]   # a padded sum
  if body.op is Ops.CAST and body.dtype == tc.dtype_out and body.src[0].op is Ops.MUL: body = body.src[0]
  if body.op is not Ops.MUL: return None
  ops = tuple(s.src[0] if s.op is Ops.CAST and s.dtype == tc.dtype_out else s for s in body.src)
  if not all(o.dtype == tc.dtype_in for o in ops): return None
  return ops if valid is None else tuple(valid.where(o, o.const_like(0)) for o in ops)   # past the sum's end a product is 0

def _coord(tc: TensorCore, operand: str, lane: UOp, element: int, name: str) -> UOp:
  """The tile coordinate `name` of `element` of `lane`'s fragment of `operand`, as index math of the lane id."""
  lane_bits, elem_bits = getattr(tc, operand)
  out = UOp.const(dtypes.index, sum(((element >> i) & 1) << to[1] for i, to in enumerate(elem_bits) if to is not None and to[0] == name))
  for i, to in enumerate(lane_bits):
    if to is not None and to[0] == name: out = out + ((lane // (1 << i)) % 2) * (1 << to[1])
  return out

def apply_tc(k: Kernel, r: UOp, tc: TensorCore) -> UOp:
  M, N, K = tc.dims
  if not (owners := k.owners.get(r)) or len(owners) != 1 or (ops := _mma_operands(x := owners[0], tc)) is None:
    raise OptError(f"TC {tc.name}: range {r.arg[0]} is not the axis of one sum of {tc.dtype_in.name} products in {tc.dtype_out.name}")
  a, b = ops
  da, db = ({u for u in o.toposort() if u.op is Ops.RANGE} for o in ops)
  glob = [g for g in k.axes(AxisType.GLOBAL) if const_size(g) is not None]
  ms = [g for g in glob if g in da and g not in db and const_size(g) % M == 0]
  ns = [g for g in glob if g in db and g not in da and const_size(g) % N == 0]
  if not ms or not ns or const_size(r) is None or const_size(r) % K:
    raise OptError(f"TC {tc.name}: needs output axes read by one operand each and a sum axis that are multiples of {tc.dims} (PADTO first)")
  if any(t.arg[1] is not AxisType.GLOBAL and t is not r and t not in x.src[1:] for t in k.deps[x]):
    raise OptError(f"TC {tc.name}: the sum reads loops other than output axes and its own")
  m, n = ms[-1], max(ns, key=lambda g: (k.output_coefficient(g) == 1, g.arg[0]))
  ids = k.next_id
  lane = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, tc.threads),), (ids, AxisType.WARP))
  tile = {g: UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, const_size(g) // d),), g.arg) if const_size(g) > d else UOp.const(dtypes.index, 0)
          for g, d in ((m, M), (n, N), (r, K))}
  def at(operand: str, e: int) -> dict[UOp, UOp]:
    names = {"a": (("m", m, M), ("k", r, K)), "b": (("k", r, K), ("n", n, N)), "c": (("m", m, M), ("n", n, N))}[operand]
    return {g: tile[g] * d + _coord(tc, operand, lane, e, c) for c, g, d in names}
  frag = lambda operand, v: UOp(Ops.VECTORIZE, tc.dtype_in.vec(tc.elements(operand)), tuple(v.substitute(at(operand, e)) for e in range(tc.elements(operand))))
  acc = tc.dtype_out.vec(tc.elements("c"))
  mma = UOp(Ops.WMMA, acc, (frag("a", a), frag("b", b), UOp.const(acc, 0)), tc)
  rest = tuple(tile[r] if s is r else s for s in x.src[1:] if s is not r or tile[r].op is Ops.RANGE)
  summed = UOp(Ops.REDUCE, acc, (mma,) + rest, Ops.ADD) if rest else mma
  stores = tuple(st.substitute({x: UOp(Ops.GEP, tc.dtype_out, (summed,), e)} | at("c", e)) for st in k.sink.src for e in range(tc.elements("c")))
  return graph_rewrite(k.sink.replace(src=stores), symbolic_rules)
