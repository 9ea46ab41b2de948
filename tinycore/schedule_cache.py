"""The schedule cache: realizing a graph of the same structure as an earlier one (the same ops, dtypes, shapes and
constants, over other buffers) replays the earlier schedule instead of scheduling again.

The key is the graph with its buffers as positional placeholders (numbered by first use, by the Buffer behind each
BUFFER node, so aliasing is part of the key), the unique ids of ASSIGN/CONTIGUOUS nodes renumbered the same way, and
bound variables keyed by the variable, not the value (the values go to the kernels' var_vals at replay). A tensor-level
constant UOp.const keeps (and its broadcast) is keyed by the node itself: it holds no buffer, hash-consing makes equal
ones one node, and the key keeps it alive, so the same constant built again is that node. The template holds only
kernel ASTs (which reference numbered parameters, never buffers), slot numbers and shapes: no buffer, and no graph
node but those constants, is kept alive by an entry (a transfer item keeps its op, dtype and arg only). Sharded graphs
are cached like any other: their devices are part of the key, and the rewrite to per-shard work depends on the graph
alone. Anything the template cannot describe exactly (buffer views, symbolic result shapes, assigns that already ran)
is scheduled the ordinary way, every time."""
from __future__ import annotations
import math
from collections import OrderedDict
from typing import Callable
from tinycore.helpers import DEBUG, getenv
from tinycore.uop import UOp, Ops, CONST_LEAF
from tinycore.dtype import dtypes
from tinycore.runtime.device import Buffer
from tinycore.multi import make_buffer
from tinycore.schedule import ScheduleItem
from tinycore import schedule as _sched

SCHEDULE_CACHE_SIZE = getenv("SCHEDULE_CACHE_SIZE", 512)   # templates kept (least recently used dropped); 0 turns it off
_cache: OrderedDict[int, list] = OrderedDict()       # hash(key) -> [[key, _Template or _ONCE (seen once: a template is made on the 2nd
_ONCE, _NEVER = object(), object()                    # miss, so one-off graphs never pay for one) or _NEVER (uncacheable)], ...]
_BUFFER, _BIND, _ASSIGN, _CONTIGUOUS, _DEVICE, _UNIQUE = Ops.BUFFER, Ops.BIND, Ops.ASSIGN, Ops.CONTIGUOUS, Ops.DEVICE, Ops.UNIQUE
_void = dtypes.void
stats = {"hits": 0, "misses": 0, "uncacheable": 0}

class _Template:
  __slots__ = ("new", "items", "becomes")
  def __init__(self, new, items, becomes): self.new, self.items, self.becomes = new, items, becomes

def _walk(outs: list[UOp]):
  """(key, nodes in key order, input Buffers by slot, bound values by variable name), or None when the graph has an
  assign that already ran (create_schedule substitutes those: left to it) or a BUFFER without storage."""
  ids: dict[UOp, int] = {}   # a node's number once keyed; -1 while its sources are on the stack (met again: key it)
  nodes: list[UOp] = []
  key: list[tuple] = []
  bufs: list[Buffer] = []
  slot: dict[int, int] = {}
  uniq: dict = {}
  binds: dict[str, int] = {}
  done, STORAGE = _sched.done_assigns, _sched.STORAGE
  index, number = ids.__getitem__, ids.get   # C-level maps: no Python frame per node
  stack: list[UOp] = list(reversed(outs))
  pop, push, extend, append_node, append_key = stack.pop, stack.append, stack.extend, nodes.append, key.append
  while stack:
    u = pop()
    if (i := number(u)) is not None:
      if i >= 0: continue
      # met again: its sources are keyed (a source of u cannot be above u's entry without being u's own descendant)
      op, arg = u.op, u.arg
      if (op is _ASSIGN or op is _CONTIGUOUS) and isinstance(arg, int): arg = ("unique", uniq.setdefault(arg, len(uniq)))
      elif arg.__class__ is float and arg == 0.0: arg = (arg, math.copysign(1.0, arg))  # -0.0 == 0.0, as in UOpMeta
      k = (op, u.dtype, tuple(map(index, u.src)), arg)
    elif (op := u.op) is _BUFFER:
      if (b := u.__dict__.get(STORAGE)) is None: return None   # (schedule.buffers, without a call)
      if (s := slot.get(id(b))) is None: s = slot[id(b)] = len(bufs); bufs.append(b)
      k = (op, u.dtype, u.arg, u.src[0].arg, s, b.size, b.dtype)
    elif op is _BIND:
      var, val = u.src[0], u.src[1].arg
      if binds.setdefault(var.arg[0], val) != val: return None  # one variable bound to two values: left to create_schedule
      k = (op, u.dtype, var, u.src[1].src)
    elif src := u.src:
      if CONST_LEAF in u.__dict__: k = u   # a tensor-level constant (or its broadcast) kept by UOp.const: keyed as itself
      else:
        if op is _ASSIGN and u in done: return None
        ids[u] = -1
        push(u)
        extend(src)   # any fixed order keys the same graph the same way: no reversed copy of the sources
        continue
    else:
      arg = u.arg
      if arg.__class__ is float and arg == 0.0: arg = (arg, math.copysign(1.0, arg))
      k = (op, u.dtype, (), arg)
    ids[u] = len(nodes)
    append_node(u)
    append_key(k)
  key.append(tuple([ids[o] for o in outs]))
  return tuple(key), nodes, ids, bufs, slot, binds

def _make_template(items, becomes, ids: dict[UOp, int], slot: dict[int, int], nbufs: int, binds: dict[str, int]) -> _Template | None:
  new: list[tuple] = []
  slots = dict(slot)
  t_items = []
  for si in items:
    # a transfer's ast is its graph node: the template keeps only what running it reads (op, dtype, arg), no buffer
    ast = si.ast if si.ast.op is Ops.SINK else UOp(si.ast.op, si.ast.dtype, (), si.ast.arg)
    s_bufs = []
    for b in si.bufs:
      if (s := slots.get(id(b))) is None:
        if b._base is not None or b.is_allocated: return None   # neither an input nor a buffer this schedule made
        s = slots[id(b)] = nbufs + len(new)
        new.append((b.device, b.size, b.dtype, b.options))
      s_bufs.append(s)
    vv = []
    for name, val in si.var_vals.items():
      if name in binds:
        if binds[name] != val: return None
        vv.append((name, None))
      else: vv.append((name, val))   # a value fixed by the key (a bound variable inside a shape)
    t_items.append((ast, tuple(s_bufs), tuple(vv)))
  t_becomes = []
  made: dict[UOp, int] = {}
  for x, v in becomes.items():
    # a node of a rewritten graph (per-shard work, split reductions) is held by no tensor: only the graph's own matter
    if (p := ids.get(x)) is None: continue
    shape, layout = None, None
    if v.op is Ops.MULTI: layout, v = (v.arg,), v.src[0]   # a sharded result: the view of its MultiBuffer, laid out by arg
    if v.op is Ops.RESHAPE:
      shape, v = v.arg, v.src[0]
      if not all(isinstance(s, int) for s in shape): return None
    if (q := ids.get(v)) is not None: t_becomes.append((p, "node", q, shape, layout))
    elif v.op is Ops.BUFFER and (b := _sched.buffers.get(v)) is not None and (s := slots.get(id(b))) is not None:
      if v in made: t_becomes.append((p, "same", made[v], shape, layout))
      else:
        made[v] = len(t_becomes)
        t_becomes.append((p, "buf", (s, v.dtype, v.arg, v.src[0]), shape, layout))   # (the DEVICE node: no buffer under it)
    else: return None
  return _Template(tuple(new), tuple(t_items), tuple(t_becomes))

def _replay(t: _Template, nodes: list[UOp], bufs: list[Buffer], binds: dict[str, int]):
  allb = bufs + [make_buffer(d, n, dt, opts) for d, n, dt, opts in t.new]
  items = [ScheduleItem(ast, [allb[i] for i in s_bufs], {n: binds[n] if v is None else v for n, v in vv} if vv else {}) for ast, s_bufs, vv in t.items]
  def becomes() -> dict[UOp, UOp]:
    out: dict[UOp, UOp] = {}
    made: list[UOp | None] = []
    for p, kind, ref, shape, layout in t.becomes:
      if kind == "node": v = nodes[ref]
      elif kind == "same": v = made[ref]
      else:
        s, dtype, size, device = ref
        v = UOp(_BUFFER, dtype, (device, UOp(_UNIQUE, _void, (), _sched.unique_id())), size)   # positional: no kwargs
        v.__dict__[_sched.STORAGE] = allb[s]   # (schedule.buffers[v] = ..., without a call)
      made.append(v)
      if shape is not None: v = UOp(Ops.RESHAPE, v.dtype, (v,), shape)
      out[nodes[p]] = v if layout is None else UOp(Ops.MULTI, v.dtype, (v,), layout[0])
    return out
  return items, becomes

def create_schedule_cached(outs: list[UOp], create_schedule=None) -> tuple[list[ScheduleItem], Callable[[], dict[UOp, UOp]]]:
  """create_schedule(outs), replayed from a template when a graph of this structure was scheduled before: (the items,
  a function giving the map from each realized node to its result). The map is asked for after the items ran: a replay
  builds its result nodes then, on a GPU while the kernels run, not before the launches.
  `create_schedule`: the scheduler (default tinycore.schedule.create_schedule); one that was replaced (a spy in a test,
  a debugging hook) is called every time, without the cache."""
  create_schedule = create_schedule or _sched.create_schedule
  if SCHEDULE_CACHE_SIZE <= 0 or DEBUG.value >= 3 or create_schedule is not _sched.create_schedule: return _scheduled(create_schedule(outs))
  w = _walk(outs)
  if w is None:
    stats["uncacheable"] += 1
    return _scheduled(create_schedule(outs))
  key, nodes, ids, bufs, slot, binds = w
  # by the key's hash, the keys kept beside: the key (a dtype, an arg per node) is hashed once per lookup, not again
  # for the LRU move; keys of one hash (hash(-1) == hash(-2)) share a bucket, each with its own entry
  h = hash(key)
  if (bucket := _cache.get(h)) is None: bucket = _cache[h] = []
  else: _cache.move_to_end(h)
  for entry in bucket:
    if entry[0] == key: break
  else: bucket.append(entry := [key, None])
  if isinstance(t := entry[1], _Template):
    stats["hits"] += 1
    return _replay(t, nodes, bufs, binds)
  stats["misses"] += 1
  items, becomes = create_schedule(outs)
  if t is _ONCE:
    if (t := _make_template(items, becomes, ids, slot, len(bufs), binds)) is None: stats["uncacheable"] += 1
    entry[1] = t if t is not None else _NEVER
  elif t is None: entry[1] = _ONCE
  while len(_cache) > SCHEDULE_CACHE_SIZE: _cache.popitem(last=False)
  return _scheduled((items, becomes))

def _scheduled(scheduled: tuple[list[ScheduleItem], dict[UOp, UOp]]):
  """create_schedule's (items, map) as create_schedule_cached answers: the map behind a function."""
  items, becomes = scheduled
  return items, lambda: becomes
