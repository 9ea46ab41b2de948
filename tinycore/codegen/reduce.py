"""Reductions: grouped ones combined by warp shuffles and through shared memory, long float sums cut into a tree of short ones (accuracy)."""
from __future__ import annotations
import functools, itertools
from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.uop import UOp, Ops, AxisType, symbolic_rules
from tinycore.rewrite import graph_rewrite, PatternMatcher, UPat
from tinycore.codegen.gpudims import thread_axes, THREAD_AXES
from tinycore.codegen.linearize import terms, NEXT_TRIP
from tinycore.renderer import Renderer
from tinycore.codegen.opt.kernel import range_deps

# ***** grouped reductions *****
# A sum over n spread over G threads of a block (GROUP_REDUCE): each thread sums its n/G terms, then the G partials are
# combined so that every thread of the group gets the same bits, and the group's first thread stores the result. Two
# ways, the first where it applies:
# - warp shuffles (a target with renderer.shuffle_width lanes, the block whole warps, the group's threads the block's
#   fastest and G a power of two: each group is consecutive lanes). log2(G) butterfly steps: the lanes m apart exchange
#   partials (SHUFFLE_XOR) and both combine the pair, which gives both the same bits (IEEE addition and multiplication
#   are commutative; a float max of 0 and -0 is not, so a max takes the pair in lane order). Past a warp, each warp's
#   total goes through shared memory: one barrier, then every thread combines its group's G/width totals in order.
# - shared memory: each thread writes its partial, and after a barrier every thread of the group combines the G
#   partials in the same order (past 64 in two rounds, rows of sqrt(G) first).
# A reduction may also be spread over an output axis's threads (LOCAL) that it does not depend on: each of them then
# goes on to compute its own outputs from the result.

THREADS = (AxisType.GROUP_REDUCE, AxisType.LOCAL)   # a reduction over these is spread over a block's threads

def group_reduces(sink: UOp, ren: Renderer) -> UOp:
  order = sink.toposort()
  threads = thread_axes(sink, [u for u in order if u.op is Ops.RANGE])
  grouped = [x for x in order if x.op is Ops.REDUCE and any(r.arg[1] in THREADS for r in x.src[1:])]
  if not grouped: return sink
  # the group axes, found before the sums are combined: a sum whose terms do not depend on its threads (a constant's,
  # folded) leaves them nowhere in the combined kernel, which then launched 1 thread for its 32 lanes' shuffles
  groups = sorted({r for x in grouped for r in x.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE}, key=lambda r: r.arg[0])
  ids = itertools.count(max(u.arg[0] for u in order if u.op is Ops.RANGE) + 1)
  nlocal = itertools.count(max((u.arg + 1 for u in order if u.op is Ops.DEFINE_LOCAL), default=0))
  # slot: the thread's number in its block, the last thread axis fastest: the hardware's linear thread id, as
  # codegen/gpudims.py numbers the axes (so a warp is 32 consecutive slots)
  slot, stride = UOp.const(dtypes.index, 0), 1
  for t in reversed(threads): slot, stride = slot + t * stride, stride * t.src[0].arg
  W = ren.shuffle_width if stride % max(ren.shuffle_width, 1) == 0 else 0
  deps: dict[UOp, frozenset[UOp]] = {}   # (the rewrite hands lower() new nodes too: extended as they come)
  def after_last_trip(x: UOp, store: UOp) -> UOp:
    # a reduction run once per trip of loops around it (not block or thread ids), combined after one barrier, writes
    # shared memory the trip before read: a barrier in each trip first, so no thread writes before every thread has read
    around = {r for r in range_deps(x.src[0].toposort(), deps)[x.src[0]] - set(x.src[1:]) if r.arg[1] not in (AxisType.GLOBAL, *THREAD_AXES)}
    if not around: return store
    return store.replace(src=store.src + (UOp(Ops.BARRIER, dtypes.void, tuple(sorted(around, key=lambda r: r.arg[0]))),))
  def shuffled(x: UOp, group: list[UOp], partial: UOp, G: int) -> UOp | None:
    if not (W and G & (G - 1) == 0 and x.dtype.count == 1 and x.dtype.itemsize == 4 and set(threads[len(threads) - len(group):]) == set(group)): return None
    m = 1
    while m < min(G, W):
      other = UOp(Ops.SHUFFLE_XOR, x.dtype, (partial,), m)
      if x.arg is Ops.MAX:   # the pair in lane order (upper: this lane has bit m), as MAX is not symmetric in its bits
        upper = ((slot // m) % 2).eq(1)
        partial = UOp(x.arg, x.dtype, (upper.where(other, partial), upper.where(partial, other)))
      else: partial = UOp(x.arg, x.dtype, (partial, other))   # a sum's or product's bits are the same either way round
      m *= 2
    if G <= W: return partial
    warps = UOp(Ops.DEFINE_LOCAL, x.dtype.ptr(stride // W, "local"), (), next(nlocal))
    done = UOp(Ops.BARRIER, dtypes.void, (after_last_trip(x, warps.index(slot // W).store(partial, (slot % W).eq(0))),))
    # the G/width totals (at most 32) combined in order, written out: no loop's compare, branch and counter per total
    totals = [UOp(Ops.LOAD, x.dtype, (warps.index(slot // G * (G // W) + j), done)) for j in range(G // W)]
    return functools.reduce(lambda a, b: UOp(x.arg, x.dtype, (a, b)), totals)
  def lower(x: UOp) -> UOp | None:
    if not (group := [r for r in x.src[1:] if r.arg[1] in THREADS]): return None
    rest = tuple(r for r in x.src[1:] if r not in group)
    partial = UOp(Ops.REDUCE, x.dtype, (x.src[0],) + rest, x.arg) if rest else x.src[0]
    G = prod(g.src[0].arg for g in group)
    if (ret := shuffled(x, group, partial, G)) is not None: return ret
    def at(i: UOp) -> UOp:   # the slot of the thread at position i of the group (the others where this thread is)
      coords, n = {}, 1
      for g in reversed(group): coords[g], n = (i // n) % g.src[0].arg, n * g.src[0].arg
      return slot.substitute(coords)
    def combine(smem: UOp, done: UOp, first: UOp, n: int, step: int) -> UOp:   # sum of the n slots first, first+step, ...
      j = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (next(ids), AxisType.REDUCE))
      return UOp(Ops.REDUCE, x.dtype, (UOp(Ops.LOAD, x.dtype, (smem.index(at(first + j * step)), done)), j), x.arg)
    smem = UOp(Ops.DEFINE_LOCAL, x.dtype.ptr(stride, "local"), (), next(nlocal))
    if G < 64: return combine(smem, UOp(Ops.BARRIER, dtypes.void, (after_last_trip(x, smem.index(slot).store(partial)),)), UOp.const(dtypes.index, 0), G, 1)
    done = UOp(Ops.BARRIER, dtypes.void, (smem.index(slot).store(partial),))
    # past 64 partials, in two rounds of sqrt(G) (each thread reads A + B partials, not G): the first A threads each
    # combine a column of B partials (every A-th: neighbouring threads read neighbouring slots, each in its own bank of
    # shared memory, where a row each would put a warp's reads B apart, 8 to a bank) into a second array, then every
    # thread combines the A columns. (In a loop each array's reads are before the other's barrier: no trip's barrier more)
    A = 1 << ((G.bit_length() - 1) // 2) if G & (G - 1) == 0 else next(a for a in range(int(G ** 0.5), 0, -1) if G % a == 0)
    gi = UOp.const(dtypes.index, 0)
    for g, n in zip(reversed(group), itertools.accumulate([1] + [g.src[0].arg for g in reversed(group)], lambda a, b: a * b)): gi = gi + g * n
    row = combine(smem, done, gi % A, G // A, A)
    rows = UOp(Ops.DEFINE_LOCAL, x.dtype.ptr(stride, "local"), (), next(nlocal))
    return combine(rows, UOp(Ops.BARRIER, dtypes.void, (rows.index(at(gi % A)).store(row, gi < A),)), UOp.const(dtypes.index, 0), A, 1)
  sink = graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="x"), lower)]))
  def gate(st: UOp) -> UOp:   # the group's first thread stores what every thread of it computed
    if st.src[0].src[0].op is not Ops.DEFINE_GLOBAL: return st
    addr = set(st.src[0].toposort())
    if not (gs := [r for r in groups if r not in addr]): return st
    first = gs[0].eq(0)
    for g in gs[1:]: first = first & g.eq(0)
    # and the store's own gate (a padded output axis's: its outputs past the end store nothing), kept with its other sources
    for g in (g for g in st.src[2:] if g.dtype == dtypes.bool): first = g & first
    return st.replace(src=st.src[:2] + (first,) + tuple(s for s in st.src[2:] if s.dtype != dtypes.bool))
  return graph_rewrite(sink.replace(src=tuple(gate(st) for st in sink.src)), symbolic_rules)

# ***** long float sums become a tree of short ones *****
# A float accumulator that has added n terms carries an error of up to (n-1) units of roundoff times the terms'
# magnitudes, and a float32 one stops growing altogether at 2^24 times its term. So every float sum of more than
# SUM_CHUNK terms is cut into nested loops, each level with a fresh accumulator that takes at most SUM_CHUNK terms (a
# trip of a body that adds several, a conv's taps or a register tile's unrolled products, counts them all): the error
# grows with SUM_CHUNK * levels (levels = log(n) / log(SUM_CHUNK)), not with n. Where a loop does not fit the level
# below whole, its inner part that does joins that level (a 4096-long sum of tiles of 16 terms: 16 tiles a level, not
# one, so a GPU matmul adds its register tile's partial sums into the next level every 16 tiles, not every tile). The
# cut depends only on the loop lengths, never on the thread count or the backend. The bound is in docs/architecture.md.
SUM_CHUNK = 256

def _trips(r: UOp) -> int: return r.src[0].arg if r.src[0].op is Ops.CONST else int(r.src[0].vmax)

def tree_sums(sink: UOp) -> UOp:
  """REDUCE(ADD) of floats over more than SUM_CHUNK terms -> nested REDUCEs of at most SUM_CHUNK terms each."""
  ids = itertools.count(max((u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE), default=-1) + 1)
  cuts: dict[tuple[UOp, int], tuple[UOp, list[UOp]]] = {}   # (loop, chunk) -> (its index as an expression of the new loops, those loops outer first)
  def cut(r: UOp, chunk: int) -> tuple[UOp, list[UOp]]:
    """r as nested loops of at most `chunk` trips, the innermost `chunk` long (shared by every sum cutting r alike)."""
    if (ret := cuts.get((r, chunk))) is not None: return ret
    n = r.src[0]
    if _trips(r) <= chunk: ret = (r, [r])
    else:  # r = outer*chunk + inner; the last chunk is shorter when chunk does not divide n
      idx, loops = cut(UOp(Ops.RANGE, dtypes.index, (((n + (chunk - 1)) // chunk).simplify(),), (next(ids), AxisType.REDUCE)), SUM_CHUNK)
      end = UOp.const(dtypes.index, chunk) if n.op is Ops.CONST and n.arg % chunk == 0 else (n - idx * chunk).minimum(chunk).simplify()
      inner = UOp(Ops.RANGE, dtypes.index, (end,), (next(ids), AxisType.REDUCE))
      ret = (idx * chunk + inner, loops + [inner])
    cuts[(r, chunk)] = ret
    return ret
  def tree(x: UOp) -> UOp | None:
    if x.arg is not Ops.ADD or not dtypes.is_float(x.dtype): return None
    per_trip = len(terms(x.src[0], Ops.ADD))   # the terms one trip of the body adds to the accumulator
    if per_trip * prod(_trips(r) for r in x.src[1:]) <= SUM_CHUNK: return None
    body, levels = x.src[0], [[]]   # levels innermost first, each at most SUM_CHUNK terms
    size = per_trip
    for r in reversed(x.src[1:]):
      room = max(SUM_CHUNK // size, 1)
      # the part of r the level below still has room for (a power of two that divides r: whole trips), then r's rest
      fill = room if r.src[0].op is Ops.CONST and r.src[0].arg % room == 0 and room & (room - 1) == 0 and _trips(r) > room else 1
      idx, loops = cut(r, fill if fill > 1 else SUM_CHUNK)
      if idx is not r: body = _retarget(body.substitute({r: idx}), r, idx, loops[-1])
      for lp in reversed(loops):
        if levels[-1] and size * _trips(lp) > SUM_CHUNK: levels, size = levels + [[]], 1
        levels[-1].insert(0, lp)
        size *= _trips(lp)
    for level in levels: body = UOp(Ops.REDUCE, x.dtype, (body,) + tuple(level), Ops.ADD)
    return body
  out = graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="x"), tree)]))
  return out if out is sink else graph_rewrite(out, symbolic_rules)

def _retarget(body: UOp, r: UOp, idx: UOp, inner: UOp) -> UOp:
  """body, where loop r became idx (nested loops), with r's NEXT_TRIP barriers on the innermost of them, `inner`: a trip
  of r (a double-buffered tile, codegen/opt/kernel.py stage()) is a trip of it."""
  return body.substitute({b: b.replace(src=(inner,) + b.src[1:]) for b in body.toposort() if b.op is Ops.BARRIER and b.arg == NEXT_TRIP and b.src[0] is idx})
