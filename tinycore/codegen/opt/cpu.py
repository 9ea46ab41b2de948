"""CPU-style kernels: merged loops, conv taps resolved, register tiles, SIMD vectors, blocked sums, the outer loop across threads."""
from __future__ import annotations
import functools, itertools, math
from tinycore.dtype import dtypes
from tinycore.helpers import prod, strides_for_shape, ceildiv, NOOPT
from tinycore.uop import UOp, Ops, AxisType, GroupOp, sint_to_uop, symbolic_rules, split_terms, build_sum
from tinycore.renderer import Renderer
from tinycore.rewrite import graph_substitute, graph_rewrite, PatternMatcher, UPat
from tinycore.codegen.linearize import TERMS, terms
from tinycore.codegen.reduce import SUM_CHUNK

def global_ranges(sink: UOp) -> list[UOp]:
  return sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == AxisType.GLOBAL), key=lambda r: r.arg[0])

def optimize(sink: UOp, ren: Renderer) -> tuple[UOp, tuple]:
  """CPU-style targets (threads > 0 or vector_width > 1): register tiling and SIMD vectors, then the outer loop split
  across threads. Returns the kernel and its launch size."""
  lane = None
  if not NOOPT: sink = merge_ranges(graph_rewrite(resolve_taps(sink), ungate_rules))
  if not NOOPT and (plan := plan_upcasts(sink, ren)) is not None: sink, lane = apply_upcasts(sink, *plan)
  sink, gsize = split_for_threads(sink, ren.threads)
  sink = graph_rewrite(sink, symbolic_rules)
  if lane is not None: sink = vectorize(sink, lane)
  return sink, gsize

# ***** loops that every index reads as one become one loop *****
# A batch-norm sum over a [64,16,26,26] tensor reads x[n, c, h, w] at h*26 + w: two loops of 26 trips where one of 676
# reads the same elements in order. Merged, the vectors run along 676 contiguous floats (42 whole vectors and one masked
# one per image) instead of two 16-wide vectors along a 26-long row (one of them 10/16 masked), and the loop overhead
# is paid once. The rewrite a = m // B, b = m % B is exact whatever the kernel does with a and b; it is kept only where
# the simplifier folds every // and % away (each index reads a*B*s + b*s), so a pad's mask or an index of another shape
# keeps the two loops.

def _merge_candidates(sink: UOp) -> list[tuple[UOp, UOp]]:
  """(outer, inner) loop pairs of one kind (and the same reductions) with coefficient(outer) == trips(inner) *
  coefficient(inner) in every address that names either as a plain term: what a merge needs, checked cheaply."""
  order = sink.toposort()
  addrs = [split_terms(u.src[1])[0] for u in order if u.op is Ops.INDEX and len(u.src) >= 2]
  owners: dict[UOp, frozenset] = {}
  for x in order:
    if x.op is Ops.REDUCE:
      for r in x.src[1:]: owners[r] = owners.get(r, frozenset()) | {x}
  rngs = [u for u in order if u.op is Ops.RANGE and u.arg[1] in (AxisType.GLOBAL, AxisType.REDUCE) and _const_size(u)]
  out = []
  for a, b in itertools.permutations(rngs, 2):
    if a.arg[1] != b.arg[1] or owners.get(a) != owners.get(b): continue
    B, both = _const_size(b), False
    for t in addrs:
      ka, kb = t.get(a, 0), t.get(b, 0)
      if ka != kb * B: break
      both = both or (ka != 0 and kb != 0)
    else:
      if both: out.append((a, b))
  return out

def merge_ranges(sink: UOp) -> UOp:
  """Merge (outer, inner) loop pairs into one loop of trips(outer) * trips(inner) wherever the indices allow it."""
  tried: set[tuple[UOp, UOp]] = set()
  while (pair := next((p for p in _merge_candidates(sink) if p not in tried), None)) is not None:
    tried.add(pair)
    a, b = pair
    B = _const_size(b)
    m = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, _const_size(a) * B),), a.arg)
    div, mod = m // B, m % B
    def one_loop(x: UOp) -> UOp | None:   # a reduction over a and b is one over m
      rs = x.src[1:]
      if div not in rs: return None
      return x.replace(src=(x.src[0],) + tuple(m if r is div else r for r in rs if r is not mod))
    new = graph_rewrite(graph_rewrite(sink.substitute({a: div, b: mod}), PatternMatcher([(UPat(Ops.REDUCE, name="x"), one_loop)])), symbolic_rules)
    if not any(u.op in (Ops.IDIV, Ops.MOD) and m in u.toposort() for u in new.toposort()): sink, tried = new, set()
  return sink

# ***** CPU style: split the outer loop across threads *****

def split_for_threads(sink: UOp, threads: int) -> tuple[UOp, tuple]:
  """The outermost global loop (or the largest, when the outermost is too short to share) is cut into `threads` chunks;
  SPECIAL gidx0 picks the chunk: r -> core*chunk + r', r' < min(chunk, n - core*chunk). Launch size (threads, 1, 1):
  the driver runs the core ids on as many OS threads as pay off, in any order."""
  rngs = global_ranges(sink)
  if threads <= 1 or not rngs: return sink, (1, 1, 1)
  def size(r: UOp) -> int: return r.src[0].arg if r.src[0].op is Ops.CONST else int(r.src[0].vmax)
  r = rngs[0] if size(rngs[0]) >= threads else max(rngs, key=size)
  if size(r) <= 1: return sink, (1, 1, 1)
  n = r.src[0]
  # no core may get an empty chunk: where a chunk is at most one long, the simplifier folds the chunk's loop to its
  # single trip and the loop body (its stores) would run for that core too, past the end (7 cores over 6 column blocks
  # wrote a 7th block over the next row). A constant n is shared by as many cores as it has chunks; a variable n that
  # may be that short stays on one core.
  if n.op is Ops.CONST: threads = ceildiv(n.arg, ceildiv(n.arg, threads))
  elif n.vmax <= threads: return sink, (1, 1, 1)
  core = UOp(Ops.SPECIAL, dtypes.index, (UOp.const(dtypes.index, threads),), "gidx0")
  chunk = UOp.const(dtypes.index, ceildiv(n.arg, threads)) if n.op is Ops.CONST else (n + (threads - 1)) // threads
  end = chunk if n.op is Ops.CONST and n.arg % threads == 0 else (n - core * chunk).minimum(chunk)
  inner = UOp(Ops.RANGE, dtypes.index, (end.simplify(),), r.arg)
  return graph_substitute(sink, {r: core * chunk + inner}), (threads, 1, 1)

# ***** a pad's validity resolves the index math of a conv's taps *****
# A conv's input gradient reads the output gradient through tinygrad's pool trick: a reduce loop `a` of a few trips and
# an output axis y meet in (y + 13*a) % 14 and // 14, valid only where the % is below the kernel width. Most (a, y)
# pairs are masked: their loads still run, div/mod sit in every index and no vector lane is contiguous. Written out
# one trip at a time, each trip is a kernel tap whose validity is an interval of y; on it the div/mod fold to sums
# (y - 1 for one tap), and a tap that is never valid folds away.
TAP_TRIPS = 8          # the longest such loop written out (a k x k kernel gives k + 1 trips)
# the most operations a sum's written-out trips may hold together (trips x the body's operations): a U-Net's gradient
# summed over three 8-trip loops with a 100-operation body wrote out 512 copies of it, 970 KB of LLVM IR that took 24 s
# to compile; such a sum keeps its loops (a 3x3 conv's 16 trips of a few operations are far inside)
TAP_OPS = 4096
TAP_ENUMERATE = 256    # the longest axis whose valid values are found by trying each

def _clauses(c: UOp) -> list[UOp]: return [x for s in c.src for x in _clauses(s)] if c.op is Ops.AND else [c]
def _ranges_in(u: UOp) -> set[UOp]: return {x for x in u.toposort() if x.op is Ops.RANGE}

def _fold_mod(x: UOp) -> UOp | None:  # x % c when x stays in one period: x minus that period's start
  a, c = x.src
  if c.op is not Ops.CONST or c.arg <= 0 or a.vmin < 0 or a.vmin // c.arg != a.vmax // c.arg: return None
  return a - (a.vmin // c.arg) * c.arg if a.vmin >= c.arg else a
_bounded_rules = symbolic_rules + PatternMatcher([(UPat(Ops.MOD, name="x"), _fold_mod)])
_tap_names = itertools.count()

def _given_valid(w: UOp) -> UOp | None:
  """WHERE(valid, x, other): each axis that alone decides some clauses of valid, tried value by value; where its valid
  values are an interval, those clauses become the interval's bounds and x, if it is index math, is simplified knowing them.
  Nested masks with one `other` (a pad of a pad: a conv's input gradient) are one: valid & valid2, tried together (a
  tap past the kernel's end is then never valid and folds away)."""
  cond, x, other = w.src
  nested = x.op is Ops.WHERE and x.src[2] is other
  if nested: cond, x = cond & x.src[0], x.src[1]
  clauses, by_axis = _clauses(cond), {}
  # only index math is simplified knowing valid: a load runs whatever valid says, so the gates inside a masked value
  # (each load's index carries the whole validity, see the lowerer) must keep every clause that keeps it in its buffer
  pure = not any(u.op is Ops.LOAD for u in x.toposort())
  for c in clauses:
    if len(rs := _ranges_in(c)) != 1 or any(u.op in (Ops.DEFINE_VAR, Ops.LOAD) for u in c.toposort()): continue
    if (n := _const_size(g := next(iter(rs)))) is not None and n <= TAP_ENUMERATE: by_axis.setdefault(g, []).append(c)
  keep, changed = [c for c in clauses if not any(c in cs for cs in by_axis.values())], False
  for g, cs in by_axis.items():
    test = cs[0] if len(cs) == 1 else functools.reduce(lambda p, q: p & q, cs)
    tried = [test.substitute({g: UOp.const(dtypes.index, v)}).simplify() for v in range(_const_size(g))]
    if any(t.op is not Ops.CONST for t in tried): keep += cs; continue
    if not (vals := [v for v, t in enumerate(tried) if t.arg]): return other
    lo, hi, n = vals[0], vals[-1], _const_size(g)
    if vals != list(range(lo, hi + 1)): keep += cs; continue
    bounds = ([(g < lo).logical_not()] if lo > 0 else []) + ([g < hi + 1] if hi < n - 1 else [])
    if bounds == cs: keep += cs; continue
    keep, changed = keep + bounds, True
    if not pure: continue
    ph = UOp(Ops.DEFINE_VAR, dtypes.index, (), (f"_tap{next(_tap_names)}", lo, hi))
    x = graph_rewrite(x.substitute({g: ph}), _bounded_rules).substitute({ph: g})
  if not changed and not nested: return None
  if not keep: return x
  return functools.reduce(lambda p, q: p & q, keep).where(x, other)

def _gated(idx: UOp) -> UOp | None:
  """i when idx is the lowerer's gate WHERE(valid, i, 0), or the simplifier's WHERE(invalid, 0, i), else None."""
  if idx.op is not Ops.WHERE: return None
  zero = [s.op is Ops.CONST and s.arg == 0 for s in idx.src[1:]]
  return idx.src[1] if zero[1] and not zero[0] else idx.src[2] if zero[0] and not zero[1] else None

def _ungate(x: UOp) -> UOp | None:
  """LOAD(INDEX(buf, gate(i))) -> LOAD(INDEX(buf, i)) where i is inside the buffer for every value of its ranges: the
  gate only keeps a masked read in the buffer, its value is masked by the WHERE around it."""
  idx = x.src[0]
  if len(idx.src) != 2 or (i := _gated(idx.src[1])) is None or idx.src[0].dtype.size <= 0: return None
  return x.replace(src=(idx.replace(src=(idx.src[0], i)),)) if 0 <= i.vmin and i.vmax < idx.src[0].dtype.size else None
ungate_rules = PatternMatcher([(UPat(Ops.LOAD, src=(UPat(Ops.INDEX),), name="x"), _ungate)])

def resolve_taps(sink: UOp) -> UOp:
  """Reduce loops of at most TAP_TRIPS trips that meet div/mod in a validity are written out trip by trip, then every
  validity is resolved against the index math it guards (_given_valid)."""
  deps = _range_deps(sink)
  taps = {r for u in sink.toposort() if u.op is Ops.WHERE for c in _clauses(u.src[0]) if any(y.op in (Ops.MOD, Ops.IDIV) for y in c.toposort())
          for r in deps[c] if r.arg[1] == AxisType.REDUCE and (n := _const_size(r)) is not None and n <= TAP_TRIPS}
  if not taps: return sink
  def write_out(x: UOp) -> UOp | None:
    if not (mine := [r for r in x.src[1:] if r in taps]): return None
    if prod(_const_size(r) for r in mine) * sum(1 for u in x.src[0].toposort() if u.op in GroupOp.ALU) > TAP_OPS: return None
    parts = [x.src[0].substitute({r: UOp.const(dtypes.index, v) for r, v in zip(mine, combo)})
             for combo in itertools.product(*[range(_const_size(r)) for r in mine])]
    # the trips are terms of the reduction (TERMS): inside a remaining loop each joins the accumulator on its own
    body = functools.reduce(lambda a, b: UOp(x.arg, x.dtype, (a, b), TERMS), parts)
    rest = tuple(r for r in x.src[1:] if r not in taps)
    return UOp(Ops.REDUCE, x.dtype, (body,) + rest, x.arg) if rest else body
  sink = graph_rewrite(graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="x"), write_out)])), symbolic_rules)
  sink = graph_rewrite(sink, symbolic_rules + PatternMatcher([(UPat(Ops.WHERE, name="w"), _given_valid)]))
  return graph_rewrite(sink, PatternMatcher([(UPat(Ops.ADD, name="x"), _merge_taps)]))

def _tap_sum(u: UOp, valid: UOp | None = None) -> tuple[UOp, UOp | None] | None:
  """(REDUCE, its validity) when u is a tap's masked sum WHERE(v1, WHERE(v2, .. REDUCE(ADD) .., 0), 0) or a bare REDUCE(ADD)."""
  if u.op is Ops.REDUCE: return (u, valid) if u.arg is Ops.ADD and dtypes.is_float(u.dtype) else None
  if u.op is Ops.WHERE and u.src[2].op is Ops.CONST and u.src[2].arg == 0: return _tap_sum(u.src[1], u.src[0] if valid is None else valid & u.src[0])
  return None

def _masked(body: UOp, valid: UOp) -> UOp:
  """valid ? body : 0 as a term of a sum (a conv's tap, a padded vector's lanes). A product masks each factor instead
  (v?a:0 * v?b:0 is v?a*b:0 bit for bit, 0*0 = 0), so that it still joins the accumulator with a multiply-add (a mask
  between the product and the sum made it a multiply, a select and an add); the loads are gated by the same validity
  anyway, and a masked lane-invariant factor is computed once for every copy that shares it."""
  if body.op is Ops.ADD and body.arg == TERMS: return body.replace(src=tuple(_masked(s, valid) for s in body.src))
  if body.op is Ops.MUL: return body.replace(src=tuple(valid.where(s, s.const_like(0)) for s in body.src))
  return valid.where(body, body.const_like(0))

def _merge_taps(x: UOp) -> UOp | None:
  """The taps of a sum written out (TERMS), each a masked sum over the same loop (a conv's input gradient: a sum over the
  output channels per tap) -> one sum over that loop of the masked terms: one accumulator instead of one per tap, so the
  register tile can be as large as a forward conv's. Only the order of the float additions changes (one reduction's)."""
  if x.arg != TERMS: return None
  # a +0.0 term (a tap never valid) adds nothing to a sum that starts at +0.0: dropped
  taps = [_tap_sum(u) for u in terms(x, Ops.ADD) if not (u.op is Ops.CONST and u.arg == 0 and math.copysign(1.0, u.arg) > 0)]
  if not taps or None in taps or len({t[0].src[1:] for t in taps}) != 1: return None
  body = functools.reduce(lambda a, b: UOp(Ops.ADD, x.dtype, (a, b), TERMS), [r.src[0] if v is None else _masked(r.src[0], v) for r, v in taps])
  return UOp(Ops.REDUCE, x.dtype, (body,) + taps[0][0].src[1:], Ops.ADD)

# ***** CPU style: upcasting (register tiles) and SIMD vectors *****
# An upcast axis r of size n becomes an outer loop ro of size n/(k*w) and k copies (unrolled) of w SIMD lanes:
# r = ro*k*w + c*w + lane. Copies of a global axis are more stores; copies of a reduce axis are more accumulators,
# combined after the loop. Lanes become vector dtypes: contiguous loads/stores become vector loads/stores.
# Only reductions are reassociated (lanes and copies are partial results); every elementwise op keeps its IEEE meaning.

def _range_deps(sink: UOp) -> dict[UOp, frozenset[UOp]]:
  deps: dict[UOp, frozenset[UOp]] = {}
  for u in sink.toposort(): deps[u] = frozenset({u}) if u.op is Ops.RANGE else frozenset().union(*(deps[s] for s in u.src))
  return deps

def lane_base(idx: UOp, r: UOp) -> UOp | None:
  """base when idx == base + r with base free of r (consecutive r -> consecutive elements), else None."""
  terms, const = split_terms(idx)
  if terms.get(r) != 1: return None
  rest = {t: k for t, k in terms.items() if t is not r}
  if any(r in t.toposort() for t in rest): return None
  return build_sum(rest, const, idx.dtype)

def _const_size(r: UOp) -> int | None: return r.src[0].arg if r.src[0].op is Ops.CONST else None

def _tiles(r: UOp, T: int, overlap: bool = True) -> bool:
  """Can axis r be cut into tiles of T? When T divides it; an output (global) axis also when it is at least T long and
  not much is recomputed: the last tile is moved back to end at the axis' end, overlapping the one before it (those
  outputs are computed twice, by the same operations, and stored twice with the same value). Reduce axes must divide:
  an overlap would count elements twice; and a kernel that reads its output buffer (an in-place assign) cannot overlap:
  the second computation would read what the first one stored."""
  n = _const_size(r)
  if n % T == 0: return True
  return overlap and r.arg[1] == AxisType.GLOBAL and n >= T and ceildiv(n, T) * T <= n * 3 // 2

def _pads(r: UOp, T: int) -> bool:
  """Can a sum's axis r that T does not divide be padded to whole tiles of T? The lanes past its end add a masked 0
  (apply_upcasts): a plain sum gets the same terms, when not much of the last tile is wasted."""
  n = _const_size(r)
  return n % T != 0 and r.arg[1] == AxisType.REDUCE and ceildiv(n, T) * T <= n * 3 // 2

def _tile_base(outer: UOp, n: int, T: int) -> UOp:
  """The first index of tile `outer` of an axis of n cut into tiles of T, the last one overlapping when T does not divide n."""
  # min(outer*T, n-T): its bounds are exact (0 and n-T), so an index built on it is known to stay in its buffer
  return outer * T if n % T == 0 else (outer * T).minimum(n - T)

def plan_upcasts(sink: UOp, ren: Renderer) -> tuple[UOp | None, int, dict[UOp, int], tuple | None, tuple[UOp, ...]] | None:
  """Heuristics: (the axis to vectorize or None, vector width, {axis: copies}, the sum cut into blocks or None, the
  other sums' axes that take the same vectors). None: leave the kernel as it is."""
  order = sink.toposort()
  deps = _range_deps(sink)
  reduces = [u for u in order if u.op is Ops.REDUCE]
  reduce_rngs = {r for x in reduces for r in x.src[1:]}
  rngs = [u for u in order if u.op is Ops.RANGE and (u.arg[1] == AxisType.GLOBAL or u in reduce_rngs) and _const_size(u)]
  accesses = [u.src[0].src[1] for u in order if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX]
  loads = [u for u in order if u.op is Ops.LOAD]
  overlap = not ({u.src[0].src[0] for u in order if u.op is Ops.STORE} & {u.src[0].src[0] for u in loads})   # no in-place update
  red_trips = {r: _const_size(r) for r in reduce_rngs}
  spans = functools.cache(lambda i, r, W: _span_offsets(_ungated(i), r, W) is not None)
  def vec_score(r: UOp, weighted: bool) -> int:
    # contiguous accesses gain (padded ones too: a masked vector load; a few elements each read by neighbouring lanes:
    # one short load and a shuffle), gathers lose. Weighted, each counts as often as it runs: a load in a 43264-trip
    # sum decides, not the store of its result (a batch-norm sum vectorised along its 16 channels gathered every element)
    def runs(i: UOp) -> int: return prod(red_trips[x] or 1 for x in deps[i] if x in red_trips) if weighted else 1
    def vector(i: UOp) -> bool: return lane_base(i, r) is not None or _padded_base(i, r) is not None or spans(i, r, W)
    return sum((1 if vector(i) else -1) * runs(i) for i in accesses if r in deps[i])
  sums = {r for x in reduces if x.arg is Ops.ADD for r in x.src[1:]} - {r for x in reduces if x.arg is not Ops.ADD for r in x.src[1:]}
  def takes(r: UOp, W: int) -> bool: return _tiles(r, W, overlap) or (r in sums and _pads(r, W))
  vaxis = None
  # the widest vectors some axis takes (an axis they divide, an overlapping last tile, a padded sum) that gain, counted
  # by how often each access runs; where none does at 4 lanes and a quarter of the target's width or more (a max-pool's
  # 2x2 window, or its 5-wide rows in pairs, are no vectors), the axis with more contiguous accesses than gathers (its
  # stores and arithmetic vectorise; a gathered lane costs about what a scalar load does)
  for weighted, narrowest in ((True, max(4, ren.vector_width // 4)), (False, 2)):
    W = ren.vector_width
    while W >= narrowest and vaxis is None:
      cands = [(vec_score(r, weighted), _const_size(r) % W == 0, r.arg[1] == AxisType.GLOBAL, r.arg[0], r) for r in rngs if takes(r, W)]
      if cands and (best := max(cands, key=lambda c: c[:4]))[0] > 0: vaxis = best[4]
      else: W //= 2
    if vaxis is not None: break
  if vaxis is None: W = 1
  # a kernel's other sums over an axis of the same length (a variance after its mean) take the same vectors: each sum
  # is its own loop, and one left scalar would run at a sixteenth of the speed
  # (not a sum computed anew in each trip of vaxis's, nor around it: one lane would then stand for both axes, and the
  # inner sum would add only the terms where the two are equal. A mean inside its variance's body, the same every trip,
  # is computed before that loop: it takes the vectors)
  twins: list[UOp] = []
  def per_trip(inner: UOp, outer: UOp) -> bool: return bool(deps[inner] & set(outer.src[1:])) and inner in outer.src[0].toposort()
  vsums = [x for x in reduces if vaxis in x.src[1:]]
  for x in (reduces if vaxis is not None and vaxis.arg[1] == AxisType.REDUCE else []):
    if any(per_trip(x, y) or per_trip(y, x) for y in vsums): continue
    same = [r for r in x.src[1:] if vaxis not in x.src[1:] and _const_size(r) == _const_size(vaxis) and takes(r, W) and vec_score(r, True) > 0]
    if same: twins.append(max(same, key=lambda r: vec_score(r, True)))
  if vaxis is not None and vaxis.arg[1] == AxisType.GLOBAL and (not reduces or _k_blocks(sink, reduces, overlap) is None):
    # the lanes of an output axis are separate outputs: narrower vectors leave more tiles for the threads (16 channels
    # in one 16-wide vector ran on one core), each output's arithmetic the same at every width and thread count (not
    # where the sum is cut into blocks: their length follows the tile's width)
    rest = prod(_const_size(r) for r in rngs if r.arg[1] == AxisType.GLOBAL and r is not vaxis)
    def lanes_busy(w: int) -> tuple[int, int]: return w * min(max(ren.threads, 1), ceildiv(_const_size(vaxis), w) * rest), -w
    W = max((w for w in (W >> i for i in range(W.bit_length())) if w > 1 and _tiles(vaxis, w, overlap)), key=lanes_busy)
  copies: dict[UOp, int] = {}
  kblock = None
  budget = ren.upcast_max
  def ok(r: UOp, k: int) -> bool:  # k copies tile the axis: dividing it (7 copies of a 1001 axis beat none), or for an
    w, n = (W if r is vaxis else 1), _const_size(r)  # output axis with an overlapping last tile that recomputes little (8 rows of 999)
    if n % (k * w) == 0: return True
    padded = r is vaxis and r in sums   # a plain sum's last tile is padded with masked zeros (apply_upcasts)
    return (padded or _tiles(r, k * w, overlap)) and ceildiv(n, k * w) * k * w - n <= n // 8
  def pick(r: UOp, wanted: int) -> None:
    nonlocal budget
    if (k := next((k for k in range(min(wanted, budget), 1, -1) if ok(r, k)), None)) is not None: copies[r], budget = k, budget // k
  if reduces:
    # register tiles: copy the global axes that some load in the reduce loop does not depend on (it is loaded once
    # and used by every copy); the axis with most such loads first
    def reuse(r: UOp) -> int: return sum(1 for ld in loads if r not in deps[ld] and deps[ld] & reduce_rngs)
    glob = sorted((r for r in rngs if r.arg[1] == AxisType.GLOBAL and reuse(r) > 0), key=lambda r: (-reuse(r), r is vaxis, r.arg[0]))
    rows = next((r for r in glob if r is not vaxis), None)
    if vaxis is not None and vaxis in glob and rows is not None:
      # a sum cut into blocks needs tiles that divide their axes (an overlapping tile would add its block twice, and
      # where two threads share the overlap, in a race), the vectors' own too
      kblock = _k_blocks(sink, reduces, overlap) if _const_size(vaxis) % W == 0 else None
      exact = lambda r, k: _const_size(r) % (k * (W if r is vaxis else 1)) == 0
      fits = exact if kblock is not None else ok
      # a vector axis too short for copies (a conv's 11-wide rows) leaves the tile's columns to another output axis that
      # the broadcast operand does not depend on (the batch of a conv: each copy loads its own vector)
      cols = vaxis if fits(vaxis, 2) else next((r for r in glob if r is not vaxis and r is not rows), vaxis)
      copies.update(register_tile(ren, rows, cols, W if cols is vaxis else 1, fits, len(reduces)))
      if kblock is not None: kblock = (kblock, _block_length(ren, kblock, copies.get(vaxis, 1) * W, loads, deps, vaxis))
    elif vaxis is not None and vaxis.arg[1] == AxisType.GLOBAL:
      for r in glob:
        if r is not vaxis: pick(r, 8)
      if vaxis in glob: pick(vaxis, 2)
    elif vaxis is not None and len(glob) >= 2:
      # vectors along the sum (a conv's weight gradient): both operands are vectors, one per copy of its own output axis
      copies.update(register_tile(ren, glob[0], glob[1], 1, ok, len(reduces)))
    else:
      # vectors along the sum and one output axis (a matrix-vector product x @ W.T): 8 rows' dot products at once, 8
      # streams of W. Rows as short as GPT-2's 768 floats pay each group's horizontal sums and stream starts often: 8 rows
      # made a 124M decode step 5-10% faster than 4 (AVX-512, one thread; bench/llm.py)
      for r in glob[:2]: pick(r, (8 if vaxis is not None else 4) if r is glob[0] else 2)
    if not copies and (vaxis is None or vaxis.arg[1] == AxisType.REDUCE):  # a reduction alone: independent accumulators
      r = vaxis if vaxis is not None else max((r for r in rngs if r in reduce_rngs), key=lambda r: vec_score(r, False), default=None)
      if r is not None: pick(r, 4)
  if vaxis is None and not copies: return None
  for t in twins:
    if vaxis in copies: copies[t] = copies[vaxis]
  return vaxis, W, copies, kblock, tuple(twins)

def _k_blocks(sink: UOp, reduces: list[UOp], overlap: bool) -> UOp | None:
  """The reduce range to cut into blocks (multiples of SUM_CHUNK, see _block_length) that run outside the row tiles, or
  None. A tile's partial sum is kept in the output between blocks, so a block of B's column panel (block x tile width) stays in cache for every
  row tile instead of the whole panel being streamed again for each one (at power-of-two row lengths the panel's rows
  share cache sets, and a 1024-long panel did not stay in L2: 0.35x numpy's speed). The sum is the left fold of the
  blocks' sums, as tree_sums would make it (at most SUM_CHUNK blocks: the same accuracy). Only where every store is the plain float sum and the output is not read."""
  red = reduces[0]
  if len(reduces) != 1 or red.arg is not Ops.ADD or not dtypes.is_float(red.dtype) or len(red.src) != 2 or not overlap: return None
  k = red.src[1]
  if (K := _const_size(k)) is None or not SUM_CHUNK < K <= SUM_CHUNK**2 or K % SUM_CHUNK or any(st.src[1] is not red for st in sink.src): return None
  return k

# The copy of B's panel lives on the stack of the thread running the kernel: bounded inside the smallest default thread
# stack a pool gets (512 KiB on macOS), whatever the L2 (a 16 MiB L2 would otherwise ask for a 4 MiB copy and overflow it)
PACK_MAX_BYTES = 256 << 10

def _block_length(ren: Renderer, k: UOp, width: int, loads: list[UOp], deps, vaxis: UOp) -> int:
  """The longest block of the sum (a multiple of SUM_CHUNK dividing it, short of all of it) whose copy of B's panel (block
  x tile width, see _pack) takes at most a quarter of the L2: fewer blocks read and write the output's partials fewer
  times and read A's rows in longer runs, while the copy stays in L2 beside the rows of A and C the tiles pass over.
  SUM_CHUNK where the cache is unknown."""
  K, item = _const_size(k), max((ld.dtype.itemsize for ld in loads if vaxis in deps[ld] and k in deps[ld]), default=4)
  return max((c for c in range(SUM_CHUNK, K, SUM_CHUNK) if K % c == 0 and c * width * item <= min(ren.cache_bytes // 4, PACK_MAX_BYTES)), default=SUM_CHUNK)

def register_tile(ren: Renderer, rows: UOp, cols: UOp, W: int, ok, sums: int = 1) -> dict[UOp, int]:
  """The register tile of a product's reduction (a matmul's C[i, j] += A[i, k] * B[k, j]): m copies of the rows, n of the
  vector columns. Each step of the reduce loop loads n vectors of B and broadcasts m scalars of A into m*n accumulators;
  all of them and a broadcast (and the product, where no FMA fuses it) must fit the target's vector registers. The tile
  with most multiply-adds per load wins (2.4 for 6x4 in AVX-512's 32 registers, 1.7 for 4x3 in AVX2's 16), discounted
  by the work an overlapping last tile repeats. `sums` reductions share the loop (a conv's taps, see resolve_taps): each
  tile cell has that many accumulators."""
  regs, nr, nc = ren.vector_registers - (1 if dtypes.float32 in ren.mulacc_dtypes else 2), _const_size(rows), _const_size(cols)
  def useful(n: int, t: int) -> float: return n / (ceildiv(n, t) * t)
  tiles = [(m * n / (m + n) * useful(nr, m) * useful(nc, n * W), m * n, m, n) for n in range(1, regs + 1) if n == 1 or ok(cols, n)
           for m in range(1, regs // n) if m * n * sums + n <= regs and (m == 1 or ok(rows, m))]
  _, _, m, n = max(tiles, default=(0, 0, 1, 1))
  return {r: k for r, k in ((rows, m), (cols, n)) if k > 1}

def apply_upcasts(sink: UOp, vaxis: UOp | None, W: int, copies: dict[UOp, int], kblock: tuple[UOp, int] | None = None,
                  twins: tuple[UOp, ...] = ()) -> tuple[UOp, UOp | None]:
  """Rewrite the scalar graph: upcast axes split into an outer loop, copies and a `lane` placeholder range; `kblock`,
  (a reduce range, a block length): the range cut into blocks summed through the output (see _k_blocks); `twins`:
  other sums' axes split by the same lane as vaxis."""
  next_id = max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE) + 1
  lane = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, W),), (next_id, AxisType.LANE)) if vaxis is not None else None
  vec_axes = {vaxis, *twins} if vaxis is not None else set()
  axes = set(copies) | vec_axes
  def tile(r: UOp) -> int: return copies.get(r, 1) * (W if r in vec_axes else 1)
  outer = {r: UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, ceildiv(_const_size(r), tile(r))),), r.arg) for r in axes}
  def padded(r: UOp) -> bool: return r in vec_axes and r.arg[1] == AxisType.REDUCE and _const_size(r) % tile(r) != 0
  def split(r: UOp, c: int) -> UOp:
    w = W if r in vec_axes else 1
    return (outer[r] * tile(r) if padded(r) else _tile_base(outer[r], _const_size(r), tile(r))) + c * w + (lane if r in vec_axes else 0)
  def body(x: UOp, combo: tuple[int, ...], mine: list[UOp]) -> UOp:
    out = x.src[0].substitute({r: split(r, c) for r, c in zip(mine, combo)})
    if (v := next((r for r in mine if padded(r)), None)) is None: return out
    # a padded sum: past the axis' end a lane adds 0, and its loads are gated like a pad's (masked vector loads)
    valid = split(v, combo[mine.index(v)]) < _const_size(v)
    # (the reads along this sum's own axis only: another sum inside this one's body has its own axis and its own gates)
    gates = {i: i.replace(src=(i.src[0], valid.where(i.src[1], UOp.const(dtypes.index, 0)))) for i in out.toposort()
             if i.op is Ops.INDEX and len(i.src) == 2 and outer[v] in i.src[1].toposort()}
    return _masked(out.substitute(gates), valid)   # a product's factors masked: it joins the accumulator with a multiply-add
  def upcast_reduce(x: UOp) -> UOp | None:
    mine = [r for r in x.src[1:] if r in axes]
    if not mine: return None
    rest = tuple(outer.get(r, r) for r in x.src[1:]) + ((lane,) if vec_axes & set(mine) else ())
    parts = [UOp(Ops.REDUCE, x.dtype, (body(x, combo, mine),) + rest, x.arg) for combo in itertools.product(*[range(copies.get(r, 1)) for r in mine])]
    return _combine(x.arg, parts)
  sink = graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="x"), upcast_reduce)]))
  glob = sorted((r for r in axes if r.arg[1] == AxisType.GLOBAL), key=lambda r: r.arg[0])   # (a set's order is the nodes' addresses)
  stores = [st.substitute({r: split(r, c) for r, c in zip(glob, combo)})
            for combo in itertools.product(*[range(copies.get(r, 1)) for r in glob]) for st in sink.src]
  blocks = []
  if kblock is not None:  # block kb of the sum: out = (kb == 0 ? 0 : out) + the block's sum; kb is a plain loop (no thread shares it)
    k, kc = kblock
    kb = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, _const_size(k) // kc),), (next_id + 1, AxisType.BLOCK))
    kin = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, kc),), (next_id + 2, AxisType.REDUCE))
    def block(st: UOp) -> UOp:
      red = st.src[1]
      part = UOp(Ops.REDUCE, red.dtype, (red.src[0].substitute({k: kb * kc + kin}), kin), red.arg)
      return UOp(Ops.STORE, dtypes.void, (st.src[0], kb.eq(0).where(red.const_like(0.0), st.src[0].load()) + part))
    stores, blocks = [block(st) for st in stores], [kb]
  sink = UOp(Ops.SINK, dtypes.void, tuple(stores))
  if vaxis is not None and vaxis.arg[1] == AxisType.GLOBAL and any(r.arg[1] == AxisType.REDUCE for r in sink.toposort() if r.op is Ops.RANGE):
    # loop order for tiled reductions: the vector axis outermost, so the operand the inner loops share (a panel of
    # columns, K x tile width) is reused from cache by every row tile instead of streamed again for each one; the
    # blocks of the sum next, so that a block of the panel stays in cache while the row tiles use it
    rngs = global_ranges(sink)
    new_order = [outer[vaxis]] + blocks + [r for r in rngs if r is not outer[vaxis]]
    if kblock is not None and lane is not None: sink, new_order = _pack(sink, new_order, kin, lane, next_id + 3)
    ids = sorted(r.arg[0] for r in new_order)
    sink = graph_substitute(sink, {r: r.replace(arg=(i, r.arg[1])) for r, i in zip(new_order, ids)})
  return sink, lane

def _pack(sink: UOp, loops: list[UOp], kin: UOp, lane: UOp, pack_id: int) -> tuple[UOp, list[UOp]]:
  """The vectors a block of the sum loads that do not change with the innermost loops (B's panel, K block x tile width,
  in a matmul) are first copied into a contiguous scratch buffer of the thread, which those loops then read. B's rows
  are a row length apart: at power-of-two lengths every row of the panel maps to the same few L1 sets, so the panel
  never stays in L1 and each step of the sum waited on L2; copied, the block is one contiguous run (the CPU's analogue
  of a GPU's shared memory). Returns the sink and the loop order with the copy loop ("pack") in it."""
  deps = _range_deps(sink)
  bodies = [u.src[0] for u in sink.toposort() if u.op is Ops.REDUCE and kin in u.src[1:]]
  loads = list(dict.fromkeys(u for b in bodies for u in b.toposort() if u.op is Ops.LOAD and {kin, lane} <= deps[u]))
  outside = frozenset().union(*(deps[u] for u in loads)) - {kin, lane}
  if not loads or len({u.dtype for u in loads}) != 1 or not outside <= set(loops): return sink, loops
  at = max(loops.index(r) for r in outside) + 1
  if prod(_const_size(r) or 2 for r in loops[at:]) < 2: return sink, loops   # nothing would read a copy twice
  W, T = _const_size(lane), len(loads) * _const_size(lane)
  scratch = UOp(Ops.DEFINE_REG, loads[0].dtype.ptr(_const_size(kin) * T, "reg"), (), 0)
  kp = UOp(Ops.RANGE, dtypes.index, (kin.src[0],), (pack_id, AxisType.PACK))
  copies = [scratch.index(kp * T + s * W + lane).store(ld.substitute({kin: kp})) for s, ld in enumerate(loads)]
  sink = sink.substitute({ld: scratch.index(kin * T + s * W + lane).load() for s, ld in enumerate(loads)})
  return UOp(Ops.SINK, dtypes.void, tuple(copies) + sink.src), loops[:at] + [kp] + loops[at:]

def _combine(op: Ops, parts: list[UOp]) -> UOp:
  """A balanced tree of the reduce op over partial results."""
  while len(parts) > 1: parts = [UOp(op, parts[i].dtype, (parts[i], parts[i+1])) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
  return parts[0]

def vectorize(sink: UOp, lane: UOp) -> UOp:
  """Replace the `lane` placeholder by vector dtypes. Values that vary with the lane become vectors (contiguous loads
  and stores become vector ones, others are gathered/scattered lane by lane); lane-invariant values are broadcast.
  A REDUCE over the lane keeps a vector accumulator and is reduced across lanes after the loop."""
  W = _const_size(lane)
  order = sink.toposort()
  dep: dict[UOp, bool] = {}
  for u in order:
    if u is lane: dep[u] = True
    elif u.op is Ops.REDUCE: dep[u] = dep[u.src[0]] and lane not in u.src[1:]
    else: dep[u] = any(dep[s] for s in u.src)
  new: dict[UOp, UOp] = {}   # lane-invariant node -> rebuilt node
  vec: dict[UOp, UOp] = {}   # lane-dependent value -> its vector
  def at_lane(s: UOp, i: int) -> UOp:  # the scalar value of s in lane i
    if s in vec: return UOp(Ops.GEP, s.dtype, (vec[s],), i)
    return s.substitute({lane: UOp.const(dtypes.index, i)}).simplify() if dep[s] else new[s]
  def as_vec(s: UOp) -> UOp:
    if s in vec: return vec[s]
    if s.op is Ops.CONST: return UOp.const(s.dtype.vec(W), s.arg)
    return UOp(Ops.VECTORIZE, s.dtype.vec(W), (new[s],) * W)
  def per_lane(u: UOp) -> UOp:
    return UOp(Ops.VECTORIZE, u.dtype.vec(W), tuple(u.replace(src=tuple(at_lane(s, i) for s in u.src)) for i in range(W)))
  stores: list[UOp] = []
  for u in order:
    if u.op is Ops.SINK: continue
    if u.op is Ops.STORE:
      buf, idx = u.src[0].src[:2]
      if not dep[u]: stores.append(u.replace(src=(new[u.src[0]], new[u.src[1]])))
      elif (base := lane_base(idx, lane)) is not None:
        stores.append(UOp(Ops.STORE, dtypes.void, (_vec_index(buf, base, W), as_vec(u.src[1]))))
      else: stores.extend(UOp(Ops.STORE, dtypes.void, (buf.index(at_lane(idx, i)), at_lane(u.src[1], i))) for i in range(W))
      continue
    if not dep[u]:
      if u.op is Ops.REDUCE and lane in u.src[1:]:
        rest = tuple(r for r in u.src[1:] if r is not lane)
        acc = UOp(Ops.REDUCE, u.dtype.vec(W), (as_vec(u.src[0]),) + rest, u.arg) if rest else as_vec(u.src[0])
        new[u] = _combine(u.arg, [UOp(Ops.GEP, u.dtype, (acc,), i) for i in range(W)])
      else: new[u] = u if all(new[s] is s for s in u.src) else u.replace(src=tuple(new[s] for s in u.src))
      continue
    if u.dtype == dtypes.index or u.op in (Ops.RANGE, Ops.INDEX): continue  # index math stays scalar, per lane
    if u.op is Ops.LOAD:
      buf, idx = u.src[0].src[:2]
      if (base := lane_base(idx, lane)) is not None: vec[u] = UOp(Ops.LOAD, u.dtype.vec(W), (_vec_index(buf, base, W),))
      elif (padded := _padded_base(idx, lane)) is not None:  # lanes outside the pad are not read (their value is masked later)
        vec[u] = UOp(Ops.LOAD, u.dtype.vec(W), (_vec_index(buf, padded, W, as_vec(idx.src[0])),))
      elif (offs := _span_offsets(_ungated(idx), lane, W)) is not None and (run := _span_load(buf, at_lane(_ungated(idx), 0), offs, u.dtype)) is not None:
        vec[u] = run   # lanes read a few nearby elements (a pool's w // 2 or 2*w + b): one load and a shuffle
      else: vec[u] = UOp(Ops.VECTORIZE, u.dtype.vec(W), tuple(UOp(Ops.LOAD, u.dtype, (buf.index(at_lane(idx, i)),)) for i in range(W)))
    elif u.op is Ops.CMPLT and not dep[u.src[1]] and (base := lane_base(u.src[0], lane)) is not None:
      # base + lane < n (a padded sum's last vector): lane < n - base, one compare of the lane numbers with a broadcast
      # bound instead of W scalar compares assembled into a mask bit by bit (50 mask instructions per vector on AVX-512).
      vec[u] = _lanes_below(new[u.src[1]] - base, W)
    elif any(dep[s] and s not in vec for s in u.src): vec[u] = per_lane(u)  # reads index math: computed lane by lane
    elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.REDUCE):
      vec[u] = u.replace(dtype=u.dtype.vec(W), src=tuple(as_vec(s) if i == 0 or u.op is not Ops.REDUCE else s for i, s in enumerate(u.src)))
    else: raise NotImplementedError(f"vectorize: no rule for {u.op}")
  return UOp(Ops.SINK, dtypes.void, tuple(stores))

def _vec_index(buf: UOp, base: UOp, W: int, mask: UOp | None = None) -> UOp:
  return UOp(Ops.INDEX, buf.dtype.base.vec(W).ptr(buf.dtype.size, buf.dtype.addrspace), (buf, base) + ((mask,) if mask is not None else ()))

def _lanes_below(room: UOp, W: int) -> UOp:
  """The W-lane mask of lanes i < room: one compare of the lane numbers with the broadcast bound. The bound is clamped to
  [-1, W] first, so it fits int32 whatever the index width."""
  room = room.maximum(-1).minimum(W).simplify().cast(dtypes.int32)
  lanes = UOp(Ops.VECTORIZE, dtypes.int32.vec(W), tuple(UOp.const(dtypes.int32, i) for i in range(W)))
  return UOp(Ops.CMPLT, dtypes.bool.vec(W), (lanes, UOp(Ops.VECTORIZE, room.dtype.vec(W), (room,) * W)))

def _ungated(idx: UOp) -> UOp:
  """The index a gated read WHERE(valid, index, 0) reads where it is valid; idx itself where it is not gated."""
  return idx.src[1] if idx.op is Ops.WHERE and idx.src[2].op is Ops.CONST and idx.src[2].arg == 0 else idx

def _span_offsets(idx: UOp, r: UOp, W: int) -> list[int] | None:
  """For an index that reads r through floor division (a pool's gradient at w // 2) or every other element (a pool's
  window at 2*w + b): where r runs over W consecutive values from a multiple of W, the elements read relative to the
  first (0, 0, 1, 1, ... for w // 2; 0, 2, 4, ... for 2*w), if they are constants within 2*W elements; else None.
  Only the index's terms that read r are evaluated, lane by lane (the rest is the same in every lane)."""
  terms = split_terms(idx)[0]
  if terms.get(r) != 2 and not any(u.op is Ops.IDIV and u.src[1].op is Ops.CONST and W % u.src[1].arg == 0 and
                                   r in u.src[0].toposort() for u in idx.toposort()): return None
  moving = build_sum({t: k for t, k in terms.items() if r in t.toposort()}, 0, idx.dtype)
  # an axis of the scalar kernel (choosing the vector axis): its terms must read no other loop (a conv's pool-trick
  # index (y + 13*a) // 14 mixes two; evaluating every such read of a big kernel cost seconds of compile time)
  if r.arg[1] != AxisType.LANE and any(u.op in (Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR) and u is not r for u in moving.toposort()): return None
  tile = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("_tile", 0, 1 << 24)) * W if r.arg[1] != AxisType.LANE else UOp.const(dtypes.index, 0)
  at = [split_terms(moving.substitute({r: tile + i}).simplify()) for i in range(W)]
  if any(lane_terms != at[0][0] for lane_terms, _ in at): return None   # a lane's index differs from the first's by more than a constant
  offs = [const - at[0][1] for _, const in at]
  return offs if all(0 <= o < 2 * W for o in offs) else None

def _span_load(buf: UOp, first: UOp, offs: list[int], dtype) -> UOp | None:
  """The lanes' values of a read at first + offs: one load of the elements they span (a power of two long) and a
  shuffle. A lane the kernel masks reads any element (its value is masked later, as with a pad's gate), so only the
  buffer bounds the load: past its end the elements are not read; None where the first element may lie before it."""
  if first.vmin < 0: return None
  P, n = 1 << max(offs).bit_length(), buf.dtype.size
  mask = _lanes_below(UOp.const(dtypes.index, n) - first, P) if first.vmax + P > n else None
  run = UOp(Ops.LOAD, dtype.vec(P), (_vec_index(buf, first, P, mask),))
  return UOp(Ops.VECTORIZE, dtype.vec(len(offs)), tuple(UOp(Ops.GEP, dtype, (run,), o) for o in offs))

def _padded_base(idx: UOp, r: UOp) -> UOp | None:
  """base when idx is a padded read WHERE(valid, base + r, 0) (the lowerer's gate that keeps masked reads in the buffer)."""
  return lane_base(ungated, r) if (ungated := _ungated(idx)) is not idx else None
