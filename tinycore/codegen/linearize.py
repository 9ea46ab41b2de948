"""Linearizer: the kernel graph becomes the ordered list of UOps a renderer walks (loops opened and closed, reductions into accumulators)."""
from __future__ import annotations
import math
from collections import defaultdict
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops, AxisType, identity_element
from tinycore.renderer import Renderer, async_copies

# A node of a reduction's op (ADD, MAX) whose arg is TERMS, inside that reduction's body, combines terms of the reduction,
# not values of an elementwise op (codegen/opt.py writes a conv's taps out this way): each term joins the accumulator on
# its own, as the reduction may order its terms, and a product term fuses with the accumulator (a multiply-add per term).
TERMS = "terms"

# A BARRIER whose arg is NEXT_TRIP (a double-buffered tile: codegen/opt/kernel.py stage()) sits at the top of each trip of
# the loop its first source is: it waits for its other sources, stores, as the trip before left them (those that change
# with the loop: the next tile's copy, emitted at the end of each trip, its loads at the start) or as the code before the
# loop did (the first tile's copy).
NEXT_TRIP = "next trip"

def terms(x: UOp, op: Ops) -> list[UOp]:
  """The terms of a reduction body, left to right: the leaves of its TERMS tree of `op`, or the body itself."""
  return terms(x.src[0], op) + terms(x.src[1], op) if x.op is op and x.arg == TERMS else [x]

def linearize(sink: UOp, params: list[UOp] = (), ren: Renderer | None = None) -> list[UOp]:
  """`params`: DEFINE_GLOBALs emitted even when nothing in `sink` uses them; `ren`: the target (its asynchronous copies)."""
  order = sink.toposort()
  # reductions over the same ranges share one loop (a range is opened once); the loop sits inside every outer loop
  # any of them needs, so a reduction's value changes with the outer loops of its whole group
  reduces_by_ranges: dict[tuple, list[UOp]] = defaultdict(list)
  for u in order:
    if u.op is Ops.REDUCE: reduces_by_ranges[u.src[1:]].append(u)
  deps: dict[UOp, frozenset[UOp]] = {}     # the loop ranges each node's value changes with
  def deps_pass() -> bool:
    changed = False
    for u in order:
      if u.op is Ops.RANGE: d = frozenset({u}) | deps[u.src[0]]  # a loop whose length varies with an outer loop sits inside it
      # a reduction changes with the outer loops of its group's bodies and of its own loops' lengths: a constant body
      # summed over a loop whose length varies with an outer loop (a long sum's last, shorter chunk) varies with it too
      elif u.op is Ops.REDUCE:
        d = frozenset().union(*(deps.get(x.src[0], frozenset()) for x in reduces_by_ranges[u.src[1:]]), *(deps[r] for r in u.src[1:])) - set(u.src[1:])
      else: d = frozenset().union(*(deps[s] for s in u.src))
      if deps.get(u) != d: deps[u], changed = d, True
    return changed
  deps_pass()
  # a group's outer loops can come from a member later in `order`: then repeat to the fixed point
  while any(len(g) > 1 for g in reduces_by_ranges.values()) and deps_pass(): pass
  next_trip: dict[UOp, list[UOp]] = defaultdict(list)   # a tile loop's barriers
  for b in order:
    if b.op is Ops.BARRIER and b.arg == NEXT_TRIP: next_trip[b.src[0]].append(b)
  carried = {s: rng for rng, bs in next_trip.items() for b in bs for s in b.src[1:] if rng in deps[s]}
  issued_early = async_copies(order, ren) & carried.keys() if carried and ren is not None else set()
  # a next tile's copy: its loads, emitted at the start of a trip, and what it computes from them (a conversion to the
  # tile's dtype), which waits for the copy's store
  copied = {st: st.src[1].toposort(gate=lambda u: u.op is not Ops.LOAD) for st in carried}
  converted = {n for nodes in copied.values() for n in nodes if n.op is not Ops.LOAD}
  out: list[UOp] = []
  new: dict[UOp, UOp] = {}
  emitted: list[UOp] = []    # the keys of `new` in the order they were added
  opened: set[UOp] = set()   # the loops open at this point of `out`
  n_acc = 0

  def emit(u: UOp) -> UOp:
    if (done := new.get(u)) is not None: return done
    stack = [(u, False)]
    while stack:  # iterative post-order: long elementwise chains must not hit the recursion limit
      x, ready = stack.pop()
      if x in new: continue
      if x.op is Ops.REDUCE: emit_reduce_group(x); continue
      if not ready:
        stack.append((x, True))
        # a store's value before its address: the address of a sum's output is computed after the sum's loop, not
        # held in a register across it; likewise a load's barrier before its address (a grouped sum's warp totals)
        srcs = x.src[1:] + x.src[:1] if x.op in (Ops.STORE, Ops.LOAD) else x.src
        stack.extend((s, False) for s in reversed(srcs) if s not in new and s not in carried)
        continue
      srcs = tuple(new[s] for s in x.src if s not in carried)
      n = x if len(srcs) == len(x.src) and all(a is b for a, b in zip(srcs, x.src)) else x.replace(src=srcs)
      out.append(n)
      new[x] = n; emitted.append(x)
    return new[u]

  def emit_reduce_group(r: UOp) -> None:
    nonlocal n_acc
    rngs = r.src[1:]
    group = [x for x in reduces_by_ranges[rngs] if x not in new]
    # hoist everything the loop body needs, nested reductions' bodies included, that changes only with the loops open
    # here: computed inside the loop it would not exist after it (a store's index shared with a nested body, say)
    for x in group:
      for n in x.src[0].toposort():
        if n not in new and n not in carried and deps[n] <= opened: emit(n)
    accs = []
    for x in group:
      acc = UOp(Ops.DEFINE_ACC, x.dtype, (UOp.const(x.dtype, identity_element(x.arg, x.dtype.scalar)),), n_acc)
      n_acc += 1
      accs.append(emit(acc))
    bodies = [n for x in group for n in x.src[0].toposort()]
    for rng in rngs:
      emit(rng.src[0])
      out.append(rng); new[rng] = rng; opened.add(rng); emitted.append(rng)
      # the next trip's tile is loaded first: its loads' latency passes while this trip sums. An asynchronous copy is
      # issued whole, after the trip's barrier (it writes the buffer the trip before read): it lands while the trip
      # sums, and the next trip's barrier waits for it
      for st in (st for st, r in carried.items() if r is rng and st not in issued_early):
        for ld in (n for n in copied[st] if n.op is Ops.LOAD): emit(ld)
      if early := [st for st, r in carried.items() if r is rng and st in issued_early]:
        for b in next_trip[rng]: emit(b)
        for st in early: emit(st)
      # what changes only with the loops open so far is computed here, outside the inner ones (a tile copied into shared
      # memory once per trip of the outer loop, between its barriers)
      if rng is not rngs[-1]:
        for n in bodies:
          if n not in new and n not in carried and n not in converted and deps[n] <= opened: emit(n)
    for x, acc in zip(group, accs):
      for t in terms(x.src[0], x.arg):
        # a tensor core's sum of products adds into the accumulator itself: D = A @ B + acc, one instruction per step
        if t.op is Ops.WMMA and x.arg is Ops.ADD and t.src[2].op is Ops.CONST and t.src[2].arg == 0: upd = t.replace(src=(emit(t.src[0]), emit(t.src[1]), acc))
        else: upd = UOp(x.arg, x.dtype, (acc, emit(t)))
        out.extend([upd, UOp(Ops.ASSIGN, x.dtype, (acc, upd))])
    for rng in reversed(rngs):
      for st in (st for st, r in carried.items() if r is rng): emit(st)   # stored after the trip's sums, before the next trip's barrier (else issued already)
      out.append(UOp(Ops.ENDRANGE, dtypes.void, (rng,))); opened.discard(rng)
    for x, acc in zip(group, accs): new[x] = acc; emitted.append(x)

  # parameters and thread ids first, then everything loop-invariant, then the loops
  for u in sorted({u for u in order if u.op is Ops.DEFINE_GLOBAL} | set(params), key=lambda u: u.arg): out.append(u); new[u] = u
  for u in sorted((u for u in order if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg): emit(u)
  for u in (u for u in order if u.op is Ops.SPECIAL): emit(u)
  # a load from a buffer the kernel writes reads what the stores before it left (a sum in blocks reads its partial back
  # from the output): it stays where its store needs it, never hoisted above the loops, nor is anything computed from it
  written, pinned = {u.src[0].src[0] for u in order if u.op is Ops.STORE}, set()
  for u in order:
    if (u.op is Ops.LOAD and u.src[0].src[0] in written) or any(s in pinned for s in u.src): pinned.add(u)
  # only what a loop needs is computed before the loops: what only the code after them needs (a matmul block's 64 output
  # addresses) is computed there, where it is used. Held across a GPU kernel's sum loop, those addresses took the
  # registers the accumulators need (ptxas spilled a 4096^2 fp16 matmul's).
  in_loops: set[UOp] = set()
  for u in reversed(order):
    if deps[u] or u in in_loops or u.op is Ops.REDUCE: in_loops.update(s for s in u.src if not deps[s])
  for u in order:
    if not deps[u] and u in in_loops and u not in pinned and u.op not in (Ops.STORE, Ops.SINK): emit(u)
  # the other loops nest in the order of their ids; each store runs inside all of them but the "pack" loops it does not
  # write in, and outside the loops after a pack loop it writes in: a pack loop fills a scratch buffer (codegen/opt.py's
  # _pack) before the loops after it read that buffer. Stores are emitted in the order of the loops they need, a store
  # inside a loop before those that only need the loops around it (the copy before its readers, even where their own
  # loops are all one trip long and folded away).
  loops = sorted((u for u in order if u.op is Ops.RANGE and u.arg[1] != AxisType.REDUCE), key=lambda u: u.arg[0])
  def needs(st: UOp) -> list[UOp]:
    packs = [lp for lp in loops if lp.arg[1] == AxisType.PACK and lp in deps[st]]
    return [lp for lp in loops if (lp.arg[1] != AxisType.PACK or lp in packs) and (not packs or lp.arg[0] <= packs[-1].arg[0])]
  stack: list[tuple[UOp, int]] = []   # the loops open, each with how many nodes had been emitted when it opened
  for st, want in sorted(((st, needs(st)) for st in sink.src), key=lambda p: [lp.arg[0] for lp in p[1]] + [math.inf]):
    keep = next((i for i, ((lp, _), w) in enumerate(zip(stack, want)) if lp is not w), min(len(stack), len(want)))
    while len(stack) > keep:  # what was computed inside a closed loop does not exist after it: it is computed again
      lp, mark = stack.pop()
      out.append(UOp(Ops.ENDRANGE, dtypes.void, (lp,))); opened.discard(lp)
      for x in emitted[mark:]: new.pop(x, None)
      del emitted[mark:]
    for lp in want[keep:]:
      emit(lp.src[0])
      stack.append((lp, len(emitted)))
      out.append(lp); new[lp] = lp; opened.add(lp)
    emit(st)
  for lp, _ in reversed(stack): out.append(UOp(Ops.ENDRANGE, dtypes.void, (lp,)))
  return out
