"""Wide accesses: one thread's loads (or stores) of consecutive global elements at a provably aligned index as one vector access."""
from __future__ import annotations
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops, split_terms
from tinycore.renderer import Renderer

def lanes(ren: Renderer, dt: DType) -> int:
  """How many elements of dt one access of the target takes (1: element by element). Only dtypes the target computes
  natively (emulate.py never rewrites their memory), never bool (a byte the renderer turns into a predicate)."""
  if ren.memory_vector <= dt.itemsize or dt.count != 1 or dt == dtypes.bool or dt not in (ren.alu_dtypes or ren.supported_dtypes): return 1
  return min(4, ren.memory_vector // dt.itemsize)

def _runs(accesses: list[UOp], key_extra, ren: Renderer) -> list[list[UOp]]:
  """Runs of n accesses of one buffer at index base + c, ..., base + c + n - 1, where c and every coefficient of base
  are multiples of n: the run's first element is then at a multiple of n elements from the buffer's start (which
  ProgramSpec.check_aligned holds to a multiple of the access's bytes at every launch)."""
  groups: dict[tuple, dict[int, UOp]] = {}
  for a in accesses:
    idx = a.src[0]
    if len(idx.src) != 2 or idx.src[0].op is not Ops.DEFINE_GLOBAL: continue   # a gated or masked index reads conditionally
    dt = a.dtype if a.op is Ops.LOAD else a.src[1].dtype
    if (n := lanes(ren, dt)) == 1: continue
    terms, c = split_terms(idx.src[1])
    if any(k % n for k in terms.values()): continue
    groups.setdefault((n, idx.src[0], frozenset(terms.items()), key_extra(a)), {})[c] = a
  runs = []
  for (n, *_), at in groups.items():
    runs.extend([at[c + i] for i in range(n)] for c in sorted(at) if c % n == 0 and all(c + i in at for i in range(1, n)))
  return runs

def _vector_index(first: UOp, n: int) -> UOp:
  buf = first.src[0].src[0]
  return UOp(Ops.INDEX, buf.dtype.base.vec(n).ptr(buf.dtype.size, buf.dtype.addrspace), first.src[0].src)

def widen(sink: UOp, ren: Renderer) -> UOp:
  """Each run of loads becomes one vector LOAD whose lanes (GEP) replace them; each run of a SINK's stores (the same
  gates) one STORE of their values as a vector, where the first of them stood."""
  if ren.memory_vector <= 1: return sink
  loads = [u for u in sink.toposort() if u.op is Ops.LOAD and len(u.src) == 1]
  sub: dict[UOp, UOp] = {}
  for run in _runs(loads, lambda ld: (), ren):
    vec = UOp(Ops.LOAD, run[0].dtype.vec(len(run)), (_vector_index(run[0], len(run)),))
    sub.update({ld: UOp(Ops.GEP, ld.dtype, (vec,), i) for i, ld in enumerate(run)})
  if sub: sink = sink.substitute(sub)
  stores = [u for u in sink.src if u.op is Ops.STORE]
  merged: dict[UOp, UOp | None] = {}
  for run in _runs(stores, lambda st: st.src[2:], ren):
    val = UOp(Ops.VECTORIZE, run[0].src[1].dtype.vec(len(run)), tuple(st.src[1] for st in run))
    merged[run[0]] = UOp(Ops.STORE, dtypes.void, (_vector_index(run[0], len(run)), val) + run[0].src[2:])
    merged.update({st: None for st in run[1:]})
  if not merged: return sink
  return sink.replace(src=tuple(m for s in sink.src if (m := merged.get(s, s)) is not None))
