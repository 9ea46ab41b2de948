"""The scheduler: decides which lazy nodes become buffers (fusion), builds one kernel AST per buffer, plans memory."""
from __future__ import annotations
import itertools, weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from tinycore.dtype import dtypes
from tinycore.helpers import DEBUG, prod
from tinycore.uop import UOp, Ops, GroupOp, resolve
from tinycore.runtime.device import Buffer

# the runtime storage behind every BUFFER node; freed with the node (state lives here, nowhere else)
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
_unique = itertools.count()

def new_buffer_uop(device: str, size: int, dtype, buf: Buffer | None = None) -> UOp:
  u = UOp(Ops.BUFFER, dtype, (UOp(Ops.DEVICE, arg=device), UOp(Ops.UNIQUE, arg=next(_unique))), size)
  buffers[u] = buf if buf is not None else Buffer(device, size, dtype)
  return u

@dataclass
class ScheduleItem:
  ast: UOp                  # SINK(STORE...) for a kernel, or COPY
  bufs: list[Buffer]        # parameters in order: outputs first
  var_vals: dict[str, int] = field(default_factory=dict)

_PASSTHROUGH = (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD)

def _is_plain_view(u: UOp) -> bool:
  """A BUFFER behind reshapes only: its memory already is the tensor, in order."""
  while u.op is Ops.RESHAPE or u.op in _PASSTHROUGH: u = u.src[0]
  return u.op is Ops.BUFFER

def _plain_buffer(u: UOp) -> UOp:
  while u.op is not Ops.BUFFER: u = u.src[0]
  return u

def max_size(shape) -> int:
  """Elements a buffer for `shape` needs: symbolic dims take their upper bound."""
  return int(prod(s if isinstance(s, int) else s.vmax for s in shape))

def _expands(u: UOp) -> bool: return u.op is Ops.EXPAND and resolve(prod(u.shape) > prod(u.src[0].shape), True)

def find_realizes(outs: list[UOp], order: list[UOp]) -> set[UOp]:
  """The fusion decision: which nodes get their own buffer. Elementwise and movement ops fuse into their user;
  a reduction fuses into its one user kernel unless that would compute it more than once."""
  realize: set[UOp] = {o for o in outs if not o.is_realized}
  for u in order:
    if u.op is Ops.CONTIGUOUS and not _is_plain_view(u.src[0]): realize.add(u)
    if u.op is Ops.COPY:
      realize.add(u)
      if not _is_plain_view(u.src[0]): realize.add(u.src[0])
    if u.op is Ops.ASSIGN:
      realize.add(u)
      target = _plain_buffer(u.src[0])
      # writing a buffer while reading it elsewhere than the element being written needs a temporary
      if any(x.op in GroupOp.Movement and x.op is not Ops.RESHAPE and _plain_buffer_or_none(x) is target for x in u.src[1].toposort()): realize.add(u.src[1])
  users: dict[UOp, list[UOp]] = defaultdict(list)
  order = [u for u in order if u.op not in (Ops.DEVICE, Ops.UNIQUE)]
  for u in order:
    for s in u.src: users[s].append(u)
  roots: dict[UOp, frozenset[UOp]] = {}
  expanded: dict[UOp, bool] = {}
  in_reduce: dict[UOp, bool] = {}
  for u in reversed(order):
    r, e, ir = frozenset(), False, False
    for x in users[u]:
      if x in realize: r |= {x}
      else: r, e, ir = r | roots[x], e or expanded[x] or _expands(x), ir or in_reduce[x] or x.op is Ops.REDUCE_AXIS
    if u.op is Ops.REDUCE_AXIS and u not in realize and (len(r) > 1 or e or ir): realize.add(u)
    if u in realize: r, e, ir = frozenset({u}), False, False
    roots[u], expanded[u], in_reduce[u] = r, e, ir
  return realize

def _plain_buffer_or_none(u: UOp) -> UOp | None:
  while u.op in GroupOp.Movement or u.op in _PASSTHROUGH: u = u.src[0]
  return u if u.op is Ops.BUFFER else None

def create_schedule(outs: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Kernels (in dependency order) that realize `outs`, and the map from each realized node to its buffer view."""
  sink = UOp(Ops.SINK, dtypes.void, tuple(outs))
  order = sink.toposort(gate=lambda u: u.op is not Ops.BUFFER)
  realize = find_realizes(outs, order)
  out_buf: dict[UOp, Buffer] = {}     # realized node -> the buffer it is written to
  items: list[ScheduleItem] = []
  for x in order:
    if x not in realize: continue
    if x.op is Ops.ASSIGN: out_buf[x] = buffers[_plain_buffer(x.src[0])]
    else: out_buf[x] = Buffer(x.device, max_size(x.shape), x.dtype)
    if x.op is Ops.COPY:
      src = x.src[0]
      items.append(ScheduleItem(x, [out_buf[x], out_buf[src] if src in out_buf else buffers[_plain_buffer(src)]]))
      continue
    items.append(_kernel(x, realize, out_buf))
  # only what was asked for is re-pointed: intermediates' memory is recycled by the planner below
  becomes = {x: x.src[0] if x.op is Ops.ASSIGN else _buffer_view(x, out_buf[x]) for x in outs if x in realize}
  for x in order:  # a contiguous() of data already in order needs no kernel
    if x.op is Ops.CONTIGUOUS and x not in realize: becomes[x] = _plain_buffer(x.src[0]).reshape(x.shape)
  _plan_memory(items, {out_buf[x] for x in realize if x in outs or x.op is Ops.ASSIGN})
  if DEBUG >= 3:
    for i, si in enumerate(items): print(f"schedule {i}: {si.ast.op.name} {[b.size for b in si.bufs]}\n{si.ast}")
  return items, becomes

def _buffer_view(x: UOp, buf: Buffer) -> UOp:
  u = UOp(Ops.BUFFER, x.dtype, (UOp(Ops.DEVICE, arg=x.device), UOp(Ops.UNIQUE, arg=next(_unique))), buf.size)
  buffers[u] = buf
  return u.reshape(x.shape)

def _kernel(x: UOp, realize: set[UOp], out_buf: dict[UOp, Buffer]) -> ScheduleItem:
  """Kernel AST for realized node x: realized inputs become numbered parameters, so equal kernels share one AST."""
  value = x.src[0] if x.op is Ops.CONTIGUOUS else x.src[1] if x.op is Ops.ASSIGN else x
  bufs: list[Buffer] = [out_buf[x]]
  params: dict[int, UOp] = {}
  var_vals: dict[str, int] = {}
  memo: dict[UOp, UOp] = {}
  def param(buf: Buffer) -> UOp:
    if id(buf) not in params:
      params[id(buf)] = UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf.size), (), len(bufs))
      bufs.append(buf)
    return params[id(buf)]
  for u in value.toposort(gate=lambda u: not (u is not value and (u in realize or u.op is Ops.BUFFER))):
    if u is not value and u in realize: memo[u] = param(out_buf[u]).reshape(u.shape)
    elif u.op is Ops.BUFFER: memo[u] = param(buffers[u])
    elif u.op is Ops.CONST: memo[u] = UOp.const(u.dtype, u.arg)
    elif u.op is Ops.IOTA: memo[u] = UOp(Ops.IOTA, u.dtype, (), u.arg)
    elif u.op is Ops.BIND:
      var, val = u.unbind()
      var_vals[var.arg[0]] = val
      memo[u] = var
    elif u.op in _PASSTHROUGH or u.op is Ops.CONTIGUOUS: memo[u] = memo[u.src[0]]
    elif u.op is Ops.DEVICE: memo[u] = u
    else: memo[u] = u.replace(src=tuple(memo[s] for s in u.src))
  out = UOp(Ops.DEFINE_GLOBAL, bufs[0].dtype.ptr(bufs[0].size), (), 0)
  return ScheduleItem(UOp(Ops.SINK, dtypes.void, (out.store(memo[value]),)), bufs, var_vals)

def _plan_memory(items: list[ScheduleItem], keep: set[Buffer]) -> None:
  """Intermediate buffers whose last reader has run are reused by later kernels of the same size and dtype."""
  intermediates = {si.bufs[0] for si in items} - keep
  last_use: dict[Buffer, int] = {}
  for i, si in enumerate(items):
    for b in si.bufs: last_use[b] = i
  pool: dict[tuple, list[Buffer]] = defaultdict(list)
  remap: dict[Buffer, Buffer] = {}
  for i, si in enumerate(items):
    orig, out = list(si.bufs), si.bufs[0]
    if out in intermediates and pool[(out.device, out.dtype, out.size)]: remap[out] = pool[(out.device, out.dtype, out.size)].pop()
    si.bufs = [remap.get(b, b) for b in orig]
    for b in dict.fromkeys(orig):
      if b in intermediates and last_use[b] == i: pool[(b.device, b.dtype, b.size)].append(remap.get(b, b))
