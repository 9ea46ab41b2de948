"""Wide accesses: one thread's loads (or stores) of consecutive global or shared elements at a provably aligned index as one vector access."""
from __future__ import annotations
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops, split_terms
from tinycore.renderer import Renderer

def lanes(ren: Renderer, dt: DType) -> int:
  """How many elements of dt one access of the target takes (1: element by element): memory_vector bytes of them, for
  every dtype codegen/emulate.py keeps in memory element by element (native ones; 16-bit floats and 8/16-bit integers
  it computes in float32 or 32 bits, a 16-bit float it holds as its uint16 bits), not those it packs into words
  (narrower than memory_word) or splits (64-bit integers as 32-bit halves), and never bool (a byte the renderer turns
  into a predicate)."""
  if ren.memory_vector <= dt.itemsize or dt.count != 1 or dt == dtypes.bool or dt.itemsize < ren.memory_word or \
     dt in (dtypes.int64, dtypes.uint64) and dt not in (ren.alu_dtypes or ren.supported_dtypes): return 1
  return ren.memory_vector // dt.itemsize

def _runs(accesses: list[UOp], key_extra, ren: Renderer) -> list[list[UOp]]:
  """Runs of n accesses of one buffer at index base + c, ..., base + c + n - 1, where c and every coefficient of base
  are multiples of n: the run's first element is then at a multiple of n elements from the buffer's start (which
  ProgramSpec.check_aligned holds to a multiple of the access's bytes at every launch; a shared-memory array the
  renderer aligns to memory_vector, and each block's copy of it starts a whole array, a multiple of n, after the last).
  n is the widest power of two the target takes that this allows; what no run of n covers tries half of n."""
  groups: dict[tuple, dict[int, UOp]] = {}
  for a in accesses:
    idx = a.src[0]
    if len(idx.src) != 2 or idx.src[0].op not in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL): continue   # a gated or masked index reads conditionally
    terms, c = split_terms(idx.src[1])
    n = lanes(ren, a.dtype if a.op is Ops.LOAD else a.src[1].dtype)
    while n > 1 and (any(k % n for k in terms.values()) or idx.src[0].op is Ops.DEFINE_LOCAL and idx.src[0].dtype.size % n): n //= 2
    if n > 1: groups.setdefault((n, idx.src[0], frozenset(terms.items()), key_extra(a)), {})[c] = a
  runs = []
  for (n, *_), at in groups.items():
    while n > 1:
      for c in sorted(at):
        if c % n == 0 and all(c + i in at for i in range(n)): runs.append([at.pop(c + i) for i in range(n)])
      n //= 2
  return runs

def vector_index(first: UOp, n: int) -> UOp:
  """The index of n elements from first's (a LOAD's or STORE's) as one vector of its buffer's elements."""
  buf = first.src[0].src[0]
  return UOp(Ops.INDEX, buf.dtype.base.vec(n).ptr(buf.dtype.size, buf.dtype.addrspace), first.src[0].src)

def _merge_stores(holder: UOp, ren: Renderer) -> UOp:
  """holder (a SINK, or a BARRIER waiting on a staged tile's copies) with each run of its stores (the same gates and
  barrier) one STORE of their values as a vector, where the first of them stood."""
  merged: dict[UOp, UOp | None] = {}
  for run in _runs([u for u in holder.src if u.op is Ops.STORE], lambda st: st.src[2:], ren):
    vals = tuple(st.src[1] for st in run)
    whole = vals[0].src[0] if vals[0].op is Ops.GEP else None   # a wide load's lanes stored in order (a tile's copy): that load
    in_order = whole is not None and whole.dtype.count == len(run) and all(v.op is Ops.GEP and v.src[0] is whole and v.arg == i for i, v in enumerate(vals))
    val = whole if in_order else UOp(Ops.VECTORIZE, run[0].src[1].dtype.vec(len(run)), vals)
    merged[run[0]] = UOp(Ops.STORE, dtypes.void, (vector_index(run[0], len(run)), val) + run[0].src[2:])
    merged.update({st: None for st in run[1:]})
  return holder.replace(src=tuple(m for s in holder.src if (m := merged.get(s, s)) is not None)) if merged else holder

def widen(sink: UOp, ren: Renderer) -> UOp:
  """Each run of loads (after the same barrier) becomes one vector LOAD whose lanes (GEP) replace them, and each run of
  stores one vector STORE; in one walk from the leaves, so a tile's wide reads wait on the barrier of its wide copies."""
  if ren.memory_vector <= 1: return sink
  order = sink.toposort()
  # a tensor core's fragments read shared memory in the layout its instruction needs: that is the tensor-core path's to render
  frags = {u for w in order if w.op is Ops.WMMA for f in w.src[:2] for u in f.toposort(gate=lambda x: x.op is not Ops.LOAD)
           if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_LOCAL}
  runs = _runs([u for u in order if u.op is Ops.LOAD and u not in frags], lambda ld: ld.src[1:], ren)
  lane = {ld: (run, i) for run in runs for i, ld in enumerate(run)}
  # each run's first load (and what it reads) is visited before the rest, so every lane finds its vector's sources rebuilt
  new: dict[UOp, UOp] = {}
  vectors: dict[int, UOp] = {}   # id of a run -> its vector LOAD, built at its first lane
  for u in UOp(Ops.SINK, dtypes.void, tuple(run[0] for run in runs) + (sink,)).toposort():
    if u in lane:
      run, i = lane[u]
      if (vec := vectors.get(id(run))) is None:
        first = run[0].replace(src=tuple(new[s] for s in run[0].src))
        vec = vectors[id(run)] = UOp(Ops.LOAD, u.dtype.vec(len(run)), (vector_index(first, len(run)),) + first.src[1:])
      new[u] = UOp(Ops.GEP, u.dtype, (vec,), i)
      continue
    new[u] = u if all(new[s] is s for s in u.src) else u.replace(src=tuple(new[s] for s in u.src))
    if u.op in (Ops.SINK, Ops.BARRIER): new[u] = _merge_stores(new[u], ren)
  return new[sink]
