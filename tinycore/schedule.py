"""The scheduler: decides which lazy nodes become buffers (fusion), builds one kernel AST per buffer, orders them, plans memory."""
from __future__ import annotations
import itertools, math, weakref
from typing import Any
from collections import defaultdict
from dataclasses import dataclass, field
from tinycore.dtype import dtypes, truncate
from tinycore.helpers import DEBUG, all_int, prod, ceildiv
from tinycore import trace
from tinycore.uop import UOp, Ops, GroupOp, resolve, ssimplify, identity_element
from tinycore.rewrite import graph_rewrite, PatternMatcher, UPat
from tinycore.runtime.device import Buffer, Device
from tinycore.runtime.errors import UnsupportedError
from tinycore.multi import MultiBuffer, make_buffer, multi_pm
from tinycore.codegen.opt.gpu import has_rows, row_split, tile_parts, GROUP_LEAST, TILE_SPLIT_LEAST
from tinycore.codegen.reduce import SUM_CHUNK

STORAGE = "storage"   # the key of a BUFFER node's Buffer in the node's __dict__ (NodeStorage)

class NodeStorage:
  """BUFFER node -> the runtime storage behind it, kept on the node itself: freed with the node, as a weak-keyed dict's
  entry would be, without a weak reference made per lookup and a callback per freed node (the schedule cache looks up
  every input of every realize; its loops read `node.__dict__.get(STORAGE)` directly)."""
  __slots__ = ()
  def __getitem__(self, u: UOp) -> Buffer | MultiBuffer:
    if (b := u.__dict__.get(STORAGE)) is None: raise KeyError(f"{u.op} node has no storage (only BUFFER nodes that were given one have)")
    return b
  def get(self, u: UOp, default=None): return u.__dict__.get(STORAGE, default)
  def __setitem__(self, u: UOp, b: Buffer | MultiBuffer) -> None: u.__dict__[STORAGE] = b

# the runtime storage behind every BUFFER node; freed with the node (state lives here, nowhere else)
buffers = NodeStorage()
# ASSIGNs that have run -> their target. A graph built before the realize still holds the ASSIGN node: scheduling it
# again reads the target instead of assigning twice. (Each assign() builds a distinct node, see unique_id.)
done_assigns: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
_unique = itertools.count()

def unique_id() -> int:
  """An arg that keeps a node from being merged with an equal one by hash-consing: buffers, assigns, contiguous copies."""
  return next(_unique)

def mark_done(becomes: dict[UOp, UOp]) -> None:
  """Called once a schedule from create_schedule has run."""
  for x, v in becomes.items():
    if x.op is Ops.ASSIGN: done_assigns[x] = v

def new_buffer_uop(device: str | tuple[str, ...], size: int, dtype, buf: Buffer | MultiBuffer | None = None) -> UOp:
  u = UOp(Ops.BUFFER, dtype, (UOp(Ops.DEVICE, arg=device), UOp(Ops.UNIQUE, arg=unique_id())), size)
  buffers[u] = buf if buf is not None else make_buffer(device, size, dtype)
  return u

# ops that move data rather than compute it: each is a schedule item of its own, on a contiguous source
TRANSFERS = (Ops.COPY, Ops.ALLREDUCE, Ops.ALLGATHER)

@dataclass
class ScheduleItem:
  ast: UOp                  # SINK(STORE...) for a kernel, or a transfer (COPY, ALLREDUCE, ALLGATHER)
  bufs: list[Buffer]        # parameters in order: outputs first (MultiBuffers on a tuple of devices)
  var_vals: dict[str, int] = field(default_factory=dict)

_PASSTHROUGH = (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD)

def _through(u: UOp, ops) -> UOp:
  """Walk src[0] while the op is in `ops`; an ASSIGN stands for its target, which holds its value once it has run."""
  while u.op in ops or u.op in _PASSTHROUGH or u.op is Ops.ASSIGN: u = u.src[0]
  return u

def is_plain_view(u: UOp) -> bool:
  """A BUFFER behind reshapes only (or an assign to one): its memory already is the tensor, in order; contiguous() is free."""
  return _through(u, (Ops.RESHAPE,)).op is Ops.BUFFER

def _plain_buffer(u: UOp) -> UOp: return _through(u, (Ops.RESHAPE,))

def _buffer_under_movement(u: UOp) -> UOp | None:
  u = _through(u, GroupOp.Movement)
  return u if u.op is Ops.BUFFER else None

def max_size(shape) -> int:
  """Elements a buffer for `shape` needs: symbolic dims take their upper bound."""
  return int(prod(s if isinstance(s, int) else s.vmax for s in shape))

def _expand_ratio(u: UOp) -> float:
  """Copies an EXPAND makes of each source element (1 for any other op); a symbolic one counts as unbounded."""
  if u.op is not Ops.EXPAND: return 1
  return prod(u.shape) // max(prod(u.src[0].shape), 1) if all_int(u.shape) and all_int(u.src[0].shape) else float("inf")

def _broadcast_const(u: UOp) -> Any:
  """The value a node broadcasts from a CONST through movement ops and casts (the casts applied, innermost first), or
  None where it is not one (a PAD of another value adds zeros): such a value costs nothing in any kernel."""
  steps = []
  while u.op in GroupOp.Movement or u.op is Ops.CAST:
    if u.op in (Ops.CAST, Ops.PAD): steps.append(u)
    u = u.src[0]
  if u.op is not Ops.CONST: return None
  v = u.arg
  for s in reversed(steps):
    if s.op is Ops.CAST: v = truncate(s.dtype, v)
    elif v != 0: return None
  return v

def _in_kernel(value: UOp, realize: set[UOp]) -> dict[UOp, None]:
  """The nodes the kernel computing `value` computes or reads: realized nodes are read, not walked into."""
  return value.toposort(gate=lambda y: y is value or y not in realize and y.op is not Ops.BUFFER)

def _reads_shifted(value: UOp, target: UOp, realize: set[UOp]) -> bool:
  """Does the kernel computing `value` read the buffer `target` at an element other than the one being written
  (through a non-reshape view)? Reads behind realized nodes happen in earlier kernels."""
  for x in _in_kernel(value, realize):
    if x.op in GroupOp.Movement and x.op is not Ops.RESHAPE and _buffer_under_movement(x) is target: return True
  return False

# Chains are cut by depth: the longest chain of ALU ops and reductions a node ends inside its kernel. Past
# KERNEL_DEPTH_MAX the node there is computed into a buffer of its own, so codegen and the backend's compiler see kernels
# of bounded size and compile time per op stays flat however long a lazy chain grows (an unrolled recurrence, a loss
# summed over an epoch). A value computed in several kernels is computed once past SHARED_DEPTH_MAX: each kernel would
# repeat the whole chain (t = t - t.mean() in a loop: every mean's kernel would recompute all earlier steps).
KERNEL_DEPTH_MAX, SHARED_DEPTH_MAX = 1000, 32
_EXPAND_COST, _EXPAND_COST_MAX = 6, 64   # cheap-op equivalents (a relu with a scale is 4: it fuses); the cap bounds the sums
# what a kernel of its own costs (the launch, writing the buffer and reading it back), in cheap-op equivalents: a value
# recomputed per copy behind an expand is computed once in a kernel of its own only when the repeats cost more than this
_KERNEL_COST = 1 << 17
_COSTLY = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.FDIV, Ops.IDIV, Ops.MOD}

_ROW, _ANY = 1, 2   # find_realizes' in_reduce: inside reductions of its kernel's row only, inside any other reduction

def _renderer(device: str | tuple[str, ...] | None):
  """The device's renderer; None where there is none (an unknown device fails later, with the device's own error)."""
  try: return Device.renderer(device[0] if isinstance(device, tuple) else device)
  except Exception: return None

def _users(order: list[UOp]) -> dict[UOp, list[UOp]]:
  """The nodes of `order` that read each node, in order."""
  users: dict[UOp, list[UOp]] = defaultdict(list)
  for u in order:
    for s in u.src: users[s].append(u)
  return users

def find_realizes(outs: list[UOp], order: list[UOp], users: dict[UOp, list[UOp]]) -> set[UOp]:
  """The fusion decision: which nodes get their own buffer. Elementwise and movement ops fuse into their user;
  a reduction fuses into its one user kernel unless that would compute it more than once. A row's reductions (a
  softmax's max and sum, a layernorm's mean and variance: over the last axis, broadcast back along it, on a target that
  keeps a row in one block) fuse into the kernel writing the row: there they are computed once per row."""
  def free_contiguous(u: UOp) -> bool: return u.op is Ops.CONTIGUOUS and is_plain_view(u.src[0])  # becomes its source's buffer
  realize: set[UOp] = {o for o in outs if not o.is_realized and not free_contiguous(o)}
  for u in order:
    # a contiguous constant that is not an output (a parameter made by Tensor.ones(n, requires_grad=True) and never
    # realized) is folded into its users: nothing sees its buffer
    if u.op is Ops.CONTIGUOUS and not free_contiguous(u) and _broadcast_const(u.src[0]) is None: realize.add(u)
    if u.op in TRANSFERS:
      realize.add(u)
      if not is_plain_view(u.src[0]): realize.add(u.src[0])
    if u.op is Ops.ASSIGN: realize.add(u)
  roots: dict[UOp, frozenset[UOp]] = {}   # the kernels (realized nodes) a node is computed in
  copies: dict[UOp, float] = {}           # most times a kernel computes each element of a node (the expands on the way)
  # reaches a kernel through a reduce: would be recomputed per iteration (_ROW: only through reductions of its kernel's
  # row, which an expand of a row's value along the row leaves, as that value does not change along it)
  in_reduce: dict[UOp, int] = {}
  # the length of the row of the kernel a node is computed in, where its last axis runs along that row (the row's own
  # elements) or it is a value of the row (its last axis 1): reached through elementwise ops, reductions of the row
  # and expands of their values along it; 0 where not
  on_row: dict[UOp, int] = {}
  # (a graph whose outputs' devices run no row kernels, a CPU's, skips the row tests)
  rows = any(has_rows(ren) for d in {o.device for o in outs} if (ren := _renderer(d)) is not None)
  fits: dict[tuple, bool] = {}
  def row(x: UOp) -> bool:
    """Does the device keep the row a reduction of x's last axis (or an expand along it) runs along in one block?"""
    shape = x.src[0].shape if x.op is Ops.REDUCE_AXIS else x.shape
    if not shape or not all_int(shape): return False
    if (key := (x.device, x.src[0].dtype, shape[-1])) not in fits:
      fits[key] = (ren := _renderer(key[0])) is not None and row_split(ren, key[1], key[2]) is not None
    return fits[key]
  def last(x: UOp) -> int: return x.shape[-1] if x.shape and all_int(x.shape) else 0
  def row_reduce(x: UOp) -> bool: return x.op is Ops.REDUCE_AXIS and x.arg[1] == (len(x.shape) - 1,) and row(x)
  def row_expand(x: UOp) -> bool:
    return x.op is Ops.EXPAND and all_int(x.src[0].shape) and x.src[0].shape[-1:] == (1,) and x.src[0].shape[:-1] == x.shape[:-1] and row(x)
  feeds_reduce: dict[UOp, bool] = {}      # in_reduce, or reaches a realized reduction's input (read per iteration)
  # ALU ops a node's value costs to compute inside its kernel (capped): an expand repeats all of them per copy
  cost: dict[UOp, int] = {}
  alu: dict[UOp, frozenset[UOp] | None] = {}   # the distinct ALU nodes a node's value is computed from (None: too many)
  for u in order:
    own = frozenset({u}) if u.op in GroupOp.Elementwise else frozenset()
    srcs = [] if u.op is Ops.REDUCE_AXIS or u in realize else [alu.get(s, frozenset()) for s in u.src]
    alu[u] = None if any(x is None for x in srcs) else own.union(*srcs)
    if alu[u] is not None and len(alu[u]) > _EXPAND_COST_MAX: alu[u] = None
    cost[u] = _EXPAND_COST_MAX if alu[u] is None else sum(4 if x.op in _COSTLY else 1 for x in alu[u])
  def repeats_cost(u: UOp, per_element: float) -> float:
    """The work computing u per copy adds over computing it once."""
    return (copies[u] - 1) * max_size(u.shape) * per_element if copies[u] > 1 and per_element > 0 else 0
  for u in reversed(order):
    r, c, ir, fr, lengths = frozenset(), 1, 0, False, set()
    for x in users[u]:
      if x in realize:
        r, fr = r | {x}, fr or x.op is Ops.REDUCE_AXIS
        # (a reduction summed directly by a realized one, a split reduction's partials whose total has several users, is
        # nested in its loop as it is in an unrealized one's)
        if x.op is Ops.REDUCE_AXIS and u.op is Ops.REDUCE_AXIS: ir |= _ANY
        lengths.add(last(u) if rows and (x.op in GroupOp.Elementwise or x.op is Ops.CONTIGUOUS) and x.shape == u.shape else 0)
      else:
        # (a reduction's own row must be the kernel's: a row of 512's max expanded along rows of 1024 is no row value)
        along = rows and (n := on_row[x]) > 0 and (row_expand(x) or row_reduce(x) and last(u) == n or x.op in GroupOp.Elementwise and x.shape == u.shape) \
          and (u.op is not Ops.REDUCE_AXIS or row_reduce(u) and last(u.src[0]) == n)
        lengths.add(n if along else 0)
        r, c = r | roots[x], max(c, copies[x] * (1 if along and x.op is Ops.EXPAND else _expand_ratio(x)))
        ir |= in_reduce[x] & ~_ROW if along and x.op is Ops.EXPAND else in_reduce[x]
        if x.op is Ops.REDUCE_AXIS: ir |= _ROW if along else _ANY
        fr = fr or feeds_reduce[x] or x.op is Ops.REDUCE_AXIS
    roots[u], copies[u], in_reduce[u], feeds_reduce[u], on_row[u] = r, c, ir, fr, lengths.pop() if len(lengths) == 1 else 0
    # a reduction is computed once: in one kernel, not per iteration of an outer reduction, and not per copy behind an
    # expand unless it ends in an elementwise kernel and the copies cost less than a kernel of its own (a softmax's row
    # sum over ten classes, a scalar). Nested in an outer reduction with no expand on the way (c 1: a conv's input
    # gradient, whose windows of products are summed back into pixels) each of its values is still computed once, so
    # it fuses there on a target without blocks (a CPU: its caches serve the reused operands; a GPU's kernel tiles them
    # through shared memory only as one reduction, codegen/opt/gpu.py _matmul) where each output of the kernel then
    # reduces at most REDUCE_SPLIT terms (not a split reduction's partials, not the sum of a large matmul)
    if u.op is Ops.REDUCE_AXIS and ir == _ANY and not rows and c <= 1 and len(r) == 1 and max_size(u.src[0].shape) <= REDUCE_SPLIT * max_size(next(iter(r)).shape): ir = 0
    if u.op is Ops.REDUCE_AXIS and u not in realize and (len(r) > 1 or ir or c > 1 and fr or
        repeats_cost(u, max_size(u.src[0].shape) // max(max_size(u.shape), 1) * (cost[u.src[0]] + 1)) >= _KERNEL_COST): realize.add(u)
    # an elementwise chain behind an expand is recomputed for every copy (a gradient chain feeding the 16x3x3 copies of a
    # conv backward is ~150x its own cost): past a few ops it is computed once into a buffer, where it feeds a reduction
    # always, else where the repeats cost more than a kernel
    if u.op in GroupOp.Elementwise and u not in realize and cost[u] >= _EXPAND_COST and c > 1 and (fr or repeats_cost(u, cost[u]) >= _KERNEL_COST):
      realize.add(u)
    if u in realize: roots[u], copies[u], in_reduce[u], feeds_reduce[u], on_row[u] = frozenset({u}), 1, 0, False, last(u) if rows else 0
  depth: dict[UOp, int] = {}   # the longest chain of ALU ops and reductions ending at u inside its kernel
  for u in order:
    d = max([depth[s] for s in u.src if s in depth and s not in realize], default=0) + (u.op in GroupOp.Elementwise or u.op is Ops.REDUCE_AXIS)
    if u.op in GroupOp.Elementwise and (d >= KERNEL_DEPTH_MAX or d >= SHARED_DEPTH_MAX and len(roots[u]) > 1): realize.add(u)
    depth[u] = d
  # writing a buffer while reading it elsewhere than the element being written needs a temporary; a reduction over the
  # buffer (LAMB's weight norm, fused per copy behind an expand) would read elements the kernel has already written, so
  # it is computed before, in a kernel of its own
  for u in order:
    if u.op is not Ops.ASSIGN: continue
    target = _plain_buffer(u.src[0])
    for x in _in_kernel(u.src[1], realize):
      if x.op is Ops.REDUCE_AXIS and x not in realize and target in _in_kernel(x, realize): realize.add(x)
    if _reads_shifted(u.src[1], target, realize): realize.add(u.src[1])
  return realize

# A kernel reduces at most this many elements per output: a longer reduction first reduces into partials, one kernel
# with the partials along a new axis (threads on every target: a full sum no longer runs on one core), then reduces
# those. It also keeps loops short where a target bounds them (Mesa's software GPUs stop any loop after 65535 trips).
REDUCE_SPLIT = 1 << 15
# A split makes up to this many partials in all (a GPU's worth of blocks: 132 multiprocessors hold 8 of 256 threads
# each), as long as each still sums SPLIT_LEAST or more: a batch norm's 16 channel sums of 86528 terms were 3 partials
# each, 48 blocks, each warp 10k instructions long; they are 32 now (512 blocks). A sum of 2^20 is 256 partials of 4096,
# not 32 of 32768 (a block's 256 threads take 16 terms each). The sum of the partials is split again where it is long.
SPLIT_OUTPUTS, SPLIT_LEAST = 1024, 4096

def split_parts(n: int, outputs: int) -> int:
  """The fewest partials a reduction of n > REDUCE_SPLIT elements for each of `outputs` outputs is cut into (split_reduce
  may take up to twice as many where that count divides an axis)."""
  return max(ceildiv(n, REDUCE_SPLIT), min(ceildiv(SPLIT_OUTPUTS, outputs), n // SPLIT_LEAST))

_VIEWS = (*GroupOp.Movement, Ops.CAST)
def _tiled_product(x: UOp) -> bool:
  """Is x (a sum's terms) a float product of two operands each broadcast along GROUP_LEAST or more of its elements (a
  matmul's, a convolution's): what a GPU's kernel tiles through shared memory (codegen/opt/gpu.py _matmul)?"""
  if not dtypes.is_float(x.dtype): return False
  while x.op is Ops.CAST: x = x.src[0]
  return x.op is Ops.MUL and all(max_size(x.shape) >= GROUP_LEAST * max_size(_through(s, _VIEWS).shape) for s in x.src)

def split_reduce(u: UOp) -> UOp | None:
  """REDUCE_AXIS over n > REDUCE_SPLIT elements -> REDUCE_AXIS over `parts` partials (split_parts), each a REDUCE_AXIS
  of at most about n/parts elements; on a target with blocks, a tiled product's sum whose outputs fill few blocks is
  cut too, however short (codegen/opt/gpu.py tile_parts). A reduced axis is cut into (parts, rest), the outermost that a
  part count of up to twice as many divides where there is one (no padding), else the outermost long enough, padded
  with the reduction's identity (each part then a multiple of SUM_CHUNK where that adds at most an eighth).
  Depends on the shapes and on whether the device runs blocks sharing memory, not on its thread count. The partials
  are their own kernel (find_realizes), the sum of them another."""
  x, (op, axes) = u.src[0], u.arg
  if not all_int(x.shape): return None
  n, outputs = prod(x.shape[a] for a in axes), max(prod(u.shape), 1)
  least = split_parts(n, outputs) if n > REDUCE_SPLIT else 1
  if op is Ops.ADD and n >= TILE_SPLIT_LEAST and _tiled_product(x) and (ren := _renderer(u.device)) is not None and \
     (t := tile_parts(ren, outputs, n)) > least and (cut := _tile_cut(x.shape, axes, t)) is not None and cut[0] >= least:
    return _parted(x, op, axes, cut[1], cut[0], tiled=True).reshape(u.shape)
  if least < 2: return None
  exact = [(p, a) for a in axes for p in range(least, min(2 * least, x.shape[a]) + 1) if x.shape[a] % p == 0]
  if exact: parts, a = min(exact, key=lambda pa: (axes.index(pa[1]), pa[0]))   # the outermost axis: parts of whole rows
  else:
    a = next((a for a in axes if x.shape[a] >= least), max(axes, key=lambda a: x.shape[a]))
    parts = min(least, x.shape[a])
  # a padded part that is a whole number of codegen's chunks (SUM_CHUNK terms, at most an eighth more): a chunk's loop
  # then runs whole vectors, where one a few terms short masked its loads element by element (on a CPU, 64 sums over
  # GPT-2's vocabulary of 50257 in 4 parts of 12565 each took 3.3x as long as in parts of 12800)
  step = ceildiv(x.shape[a], parts)
  if x.shape[a] % parts and step >= 8 * SUM_CHUNK: step = ceildiv(step, SUM_CHUNK) * SUM_CHUNK
  size = step * parts
  if size != x.shape[a]:  # the padded elements must not change the result: the identity, not PAD's zero, where it differs
    pad = tuple((0, size - s if i == a else 0) for i, s in enumerate(x.shape))
    ident = identity_element(op, x.dtype)
    # the identity itself fills the new elements: a padded constant would be 0 there (a max of negatives gave 0)
    x = x.pad(pad) if ident == 0 else x.const_like(True).cast(dtypes.bool).pad(pad).where(x.pad(pad), x.pad(pad).const_like(ident))
  return _parted(x, op, axes, a, parts).reshape(u.shape)

def _tile_cut(shape: tuple[int, ...], axes: tuple[int, ...], least: int) -> tuple[int, int] | None:
  """(parts, axis) of a tiled product's sum cut into about `least` partials: its outermost summed axis (a weight
  gradient's images, a conv's input channels, a matmul's K), in the fewest parts of least or more that divide it (up to
  twice as many), else in the most fewer; None where it has no divisor but 1. Only the outermost: the parts' sums keep
  the inner axes whole, which the kernel stages (a weight gradient's 32 rows cut in 16 parts of 2 left it a tile of
  rows no block could stage well)."""
  a = next((a for a in axes if shape[a] > 1), None)
  if a is None: return None
  divisors = [p for p in range(2, min(shape[a], 2 * least) + 1) if shape[a] % p == 0]
  parts = next((p for p in divisors if least <= p <= 2 * least), max([p for p in divisors if p < least], default=None))
  return None if parts is None else (parts, a)

def _parted(x: UOp, op: Ops, axes: tuple[int, ...], a: int, parts: int, tiled: bool = False) -> UOp:
  """x's reduction over axes, axis a summed first in `parts` partials, then those: the partials realize as a kernel of
  their own (find_realizes). `tiled`: the partials' axis outermost (a grid axis of blocks), the product's own output
  axes keep their order, the output's contiguous one (a conv's pixels) innermost, which the kernel's tile is laid along."""
  shape = x.shape[:a] + (parts, x.shape[a] // parts) + x.shape[a+1:]
  red = tuple(b + (b >= a) for b in axes)
  if not tiled: return x.reshape(shape).r(op, red).r(op, (a,))
  order = (a, *(i for i in range(len(shape)) if i != a))
  return x.reshape(shape).permute(order).r(op, tuple(order.index(b) for b in red)).r(op, (0,))

def fold_const_reduce(u: UOp) -> UOp | None:
  """A reduction of a broadcast constant is a constant: the MAX of it, and a sum where n*c is exactly what adding c
  n times gives (integers wrap the same way; floats of at least 32 bits while every partial sum is an exact integer)."""
  if (v := _broadcast_const(u.src[0])) is None or not all_int(u.src[0].shape) or (n := prod(u.src[0].shape) // max(prod(u.shape), 1)) == 0: return None
  op = u.arg[0]
  if op is Ops.MAX: return u.const_like(v)
  if op is not Ops.ADD: return None
  if dtypes.is_int(u.dtype): return u.const_like(truncate(u.dtype, v * n))
  if dtypes.is_float(u.dtype) and u.dtype.itemsize >= 4 and math.isfinite(v) and v == int(v) and abs(v) * n <= 2 ** 24:
    return u.const_like(v * n + 0.0)  # + 0.0: a sum of -0.0 starts from the identity +0.0
  return None

# constant reductions fold first (a sum of ones is a count), then long ones split
def _reduce_rule(u: UOp) -> UOp | None: return folded if (folded := fold_const_reduce(u)) is not None else split_reduce(u)
reduce_rules = PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="u"), _reduce_rule)])
custom_gradient_value = PatternMatcher([(UPat(Ops.CUSTOM_GRADIENT, name="u"), lambda u: u.src[0])])

def _value(x: UOp) -> UOp:
  """What the kernel of realized node x computes: a contiguous copy's source, an assign's new value, else x itself."""
  return x.src[0] if x.op is Ops.CONTIGUOUS else x.src[1] if x.op is Ops.ASSIGN else x

def _reads_in_place(value: UOp, x: UOp, realize: set[UOp]) -> bool:
  """Does the kernel computing `value` read realized node x only at the element it writes itself? Through elementwise ops
  and reshapes, and through a reduction that reads x broadcast along exactly the axes it reduces (a row's mean in the row's
  variance): then x can be another output of the same kernel, each element computed where it is read (codegen computes a
  reduction that does not depend on an enclosing loop before that loop)."""
  # node -> the sets of its axes indexed by a reduction's loop rather than the output's index (None: indexed otherwise)
  loops: dict[UOp, set[frozenset[int] | None]] = defaultdict(set)
  loops[value].add(frozenset())
  for u in reversed(list(_in_kernel(value, realize))):
    if u is x: continue
    for r in loops[u]:
      if r is None: pass
      elif u.op is Ops.REDUCE_AXIS: r = r | set(u.arg[1])
      elif u.op is Ops.EXPAND:
        bcast = {i for i, (s, d) in enumerate(zip(u.src[0].shape, u.shape)) if s != d}
        r = r - bcast if bcast <= r else None
      elif u.op in GroupOp.Movement and (u.op is not Ops.RESHAPE or r and u.shape != u.src[0].shape): r = None
      for s in u.src: loops[s].add(r if r is None else frozenset(r))
  return loops.get(x) == {frozenset()}

# Outputs one kernel may have: merging kernels saves launches and shared loads, the cap bounds how large a kernel grows
GROUP_MAX = 4

def _group_outputs(order: list[UOp], realize: set[UOp]) -> dict[UOp, tuple[UOp, ...]]:
  """Realized nodes computed together, by one kernel with several outputs (node -> its group, for groups of two or more).
  Kernels of one output size merge where no other kernel runs between them: a node into the kernel reading it in place
  (layernorm's mean, variance and reciprocal deviation; a softmax's max and sum), and siblings reading a common input of
  that size (the several elementwise pieces of a backward pass); an assign with them (Adam's m, v and parameter, with the
  gradient). A kernel never reads another output of its own at an element other than the one it writes, nor an assigned
  buffer other than in its own assign, and each output keeps its own buffer."""
  nodes = [x for x in order if x in realize]
  pos = {x: i for i, x in enumerate(nodes)}
  ins: dict[UOp, set[UOp]] = {}     # realized nodes each kernel reads
  reads: dict[UOp, set[UOp]] = {}   # BUFFER nodes each kernel reads
  loops: dict[UOp, tuple] = {}      # the sizes of the reductions each kernel loops over
  depth: dict[UOp, int] = {}        # the longest chain of ALU ops and reductions in each kernel
  for x in nodes:
    walked = _value(x).toposort(gate=lambda u: u is x or u not in realize and u.op is not Ops.BUFFER)
    ins[x] = {u for u in walked if u is not x and u in realize}
    reads[x] = {u for u in walked if u.op is Ops.BUFFER}
    loops[x] = tuple(sorted(max_size(u.src[0].shape) for u in walked if u.op is Ops.REDUCE_AXIS))
    d: dict[UOp, int] = {}
    for u in walked:
      d[u] = 0 if u in ins[x] else max([d[s] for s in u.src if s in d], default=0) + (u.op in GroupOp.Elementwise or u.op is Ops.REDUCE_AXIS)
    depth[x] = max(d.values(), default=0)
  deps = {x: set(ins[x]) for x in nodes}  # an assign runs after every kernel reading its target's old contents
  readers: dict[UOp, list[UOp]] = defaultdict(list)
  for x in nodes:
    for b in reads[x]: readers[b].append(x)
  for x in nodes:
    if x.op is Ops.ASSIGN: deps[x] |= {y for y in readers[_plain_buffer(x.src[0])] if y is not x}
  leader = {x: x for x in nodes}
  members = {x: [x] for x in nodes}
  def find(x: UOp) -> UOp:
    while leader[x] is not x: x = leader[x]
    return x
  def needs(a: UOp, b: UOp, direct: bool) -> bool:
    """Does group a's kernel need group b's output (directly too, or only through another kernel)?"""
    stack, seen = [g for m in members[a] for d in deps[m] if (g := find(d)) is not a and (direct or g is not b)], set()
    while stack:
      if (g := stack.pop()) is b: return True
      if g in seen: continue
      seen.add(g)
      stack.extend(h for m in members[g] for d in deps[m] if (h := find(d)) is not g)
    return False
  def fits(a: UOp, b: UOp) -> bool:
    ms = members[a] + members[b]
    # a bounded kernel: a chain cut by depth (find_realizes) stays cut
    if len(ms) > GROUP_MAX or sum(depth[m] for m in ms) > KERNEL_DEPTH_MAX: return False
    # every read of one group's output by the other is in place: there it is computed, not loaded
    if any(q in ins[m] and not _reads_in_place(_value(m), q, realize) for m in members[b] for q in members[a]): return False
    # an assigned buffer is read by its own assign only (its old value, in place: loaded before it is stored), through
    # no other view of its memory
    targets = {buffers[_plain_buffer(m.src[0])].base: m for m in ms if m.op is Ops.ASSIGN}
    if len(targets) < sum(m.op is Ops.ASSIGN for m in ms): return False
    if any(targets.get(buffers[u].base, m) is not m for m in ms for u in reads[m]): return False
    if (passes := _renderer_limit(a.device, "loop_pass_max")) and _kernel_passes([_value(m) for m in ms], realize) > passes: return False
    limit = _max_buffers(a.device)
    return not limit or len(ms) + len(set().union(*(ins[m] for m in ms)) - set(ms)) + len(set().union(*(reads[m] for m in ms))) <= limit
  def merge(a: UOp, b: UOp) -> None:  # b's group joins a's
    leader[b] = a
    members[a] = sorted(members[a] + members.pop(b), key=pos.__getitem__)
  recent: dict[tuple, list[UOp]] = defaultdict(list)   # (device, size) -> the latest nodes with outputs of that size
  for x in nodes:
    if x.op in TRANSFERS or not all_int(x.shape): continue
    for p in ins[x]:  # a node read in place joins its reader's kernel (contiguous() stays a boundary: the user asked for one)
      if (g := find(p)) is not find(x) and p.op not in (*TRANSFERS, Ops.CONTIGUOUS) and p.device == x.device and all_int(p.shape) \
          and prod(p.shape) == prod(x.shape) and fits(g, find(x)) and not needs(find(x), g, direct=False): merge(g, find(x))
    # a sibling sharing an input of its size, with loops of the same sizes (an elementwise store added to a matmul's
    # kernel would only get in the way of the matmul's optimisations)
    big = {u for u in ins[x] | reads[x] if max_size(u.shape) == max_size(x.shape)}
    for g in [find(y) for y in recent[(x.device, prod(x.shape))][-GROUP_MAX:]]:
      if g is find(x) or not any(loops[m] == loops[x] for m in members[g]) or not big & set().union(*(ins[m] | reads[m] for m in members[g])): continue
      if fits(g, find(x)) and not needs(g, find(x), direct=True) and not needs(find(x), g, direct=True):
        merge(g, find(x))
        break
    recent[(x.device, prod(x.shape))].append(x)
  return {m: tuple(ms) for ms in members.values() if len(ms) > 1 for m in ms}

@dataclass
class _Kernel:
  nodes: tuple[UOp, ...]    # the realized nodes this kernel computes (its outputs, in order)
  item: ScheduleItem
  after: set[UOp]           # realized nodes whose kernels must run first (their values are read)
  reads: set[UOp]           # BUFFER nodes read directly: an ASSIGN to one of them must wait for this kernel

@trace.traced("schedule", lambda ret: ({"kernels": len(ret[0])}, {"items": [si.ast for si in ret[0]]}))
def create_schedule(outs: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Kernels (in dependency order) that realize `outs`, and the map from each realized node to its buffer view."""
  asked = list(outs)
  sink = UOp(Ops.SINK, dtypes.void, tuple(outs))
  order = sink.toposort(gate=lambda u: u.op is not Ops.BUFFER and u not in done_assigns)
  if any(u in done_assigns for u in order):
    sink = sink.substitute({u: done_assigns[u] for u in order if u in done_assigns})
    outs = list(sink.src)
    order = sink.toposort(gate=lambda u: u.op is not Ops.BUFFER)
  if any(u.op is Ops.CUSTOM_GRADIENT for u in order):  # a gradient rule's carrier, nothing to compute: its value
    sink = graph_rewrite(sink, custom_gradient_value)
    outs = list(sink.src)
    order = sink.toposort(gate=lambda u: u.op is not Ops.BUFFER)
  tensor_outs, multi_outs = outs, None
  if any(u.op is Ops.MULTI or u.op is Ops.DEVICE and isinstance(u.arg, tuple) for u in order):
    # sharded tensors: per-shard work on the tuple of devices; a MULTI left on top says how the result is sharded
    tensor_order = order
    multi_outs = list(graph_rewrite(sink, multi_pm).src)
    outs = [o.src[0] if o.op is Ops.MULTI else o for o in multi_outs]
    sink = UOp(Ops.SINK, dtypes.void, tuple(outs))
    order = sink.toposort(gate=lambda u: u.op is not Ops.BUFFER)
  if any(u.op is Ops.REDUCE_AXIS and (fold_const_reduce(u) is not None or split_reduce(u) is not None) for u in order):
    sink = graph_rewrite(sink, reduce_rules)
    outs = list(sink.src)
    order = sink.toposort(gate=lambda u: u.op is not Ops.BUFFER)
  order = [u for u in order if u.op not in (Ops.SINK, Ops.DEVICE, Ops.UNIQUE)]
  users = _users(order)
  realize = find_realizes(outs, order, users)
  grouped = True
  while True:
    kernels, out_buf = _kernels(order, realize, _group_outputs(order, realize) if grouped else {}, _layouts(users, realize, outs))
    # more parameters than the device binds, or more loop passes than it runs: compute a part first
    if (part := _split_wide_kernels(kernels, realize) or _split_long_kernels(kernels, realize)):
      realize |= part
      continue
    ran, stuck = _order_kernels(kernels)
    if not stuck: break
    if grouped:  # kernels with several outputs are never needed: first try without them
      grouped = False
      continue
    # reads and writes of assigned buffers form a cycle: compute the assigned values into temporaries first
    temps = {x.src[1] for k in stuck for x in k.nodes if x.op is Ops.ASSIGN and x.src[1] not in realize and x.src[1].op is not Ops.BUFFER}
    if not temps:
      raise RuntimeError("this schedule reads a buffer both before and after an assign to it; realize the read "
                         f"or the assign separately ({[x.op.name for k in stuck for x in k.nodes]})")
    realize |= temps
  items = [k.item for k in ran]
  becomes = {x: _buffer_view(x, out_buf[x]) for x in outs if x in realize and x.op is not Ops.ASSIGN}
  for x in realize:
    if x.op is Ops.ASSIGN: becomes[x] = x.src[0]
  for x in order:  # a contiguous() of data already in order (or of an assign's target) needs no kernel
    if x.op is Ops.CONTIGUOUS and x not in realize and is_plain_view(x.src[0]): becomes[x] = _plain_buffer(x.src[0]).reshape(x.shape)
  if multi_outs is not None:  # back to the tensor level: the caller holds the global nodes
    for t, m, x in zip(tensor_outs, multi_outs, outs):
      v = becomes.get(x, x)
      becomes[t] = UOp(Ops.MULTI, v.dtype, (v,), m.arg) if m.op is Ops.MULTI else v
    for t in tensor_order:
      if t.op is Ops.ASSIGN: becomes[t] = t.src[0]
  for a, x in zip(asked, outs if multi_outs is None else tensor_outs):  # what the caller holds, where a rewrite replaced it
    if a is not x: becomes[a] = becomes.get(x, x)
  # only what was asked for (and assigned) keeps its buffer: intermediates' memory is recycled by the planner below
  _plan_memory(items, {out_buf[x] for x in realize if x in outs or x.op is Ops.ASSIGN})
  if DEBUG >= 3:
    for i, si in enumerate(items): print(f"schedule {i}: {si.ast.op.name} {[b.size for b in si.bufs]}\n{si.ast}")
  return items, becomes

def _layouts(users: dict[UOp, list[UOp]], realize: set[UOp], outs: list[UOp]) -> dict[UOp, tuple[int, ...]]:
  """Realized reductions no tensor holds whose every reader permutes them the same way (reshapes that only add or drop
  axes of 1, then a PERMUTE), where that brings a longer axis innermost: the order of their non-1 axes to store them
  in, the readers' own. A conv's input gradient sums each tap's product (b, c, y, x, ky, kx) into pixels through a
  permute to (b, c, ky, y, kx, x): stored so, a GPU kernel's threads write and read along x, where neighbouring
  threads' words lay 9 or more apart (every lane its own 32-byte sector)."""
  held = set(outs)
  out: dict[UOp, tuple[int, ...]] = {}
  for x in realize:
    if x.op is not Ops.REDUCE_AXIS or x in held or not all_int(x.shape) or not users.get(x): continue
    dims = [s for s in x.shape if s != 1]
    perms = set()
    for r in users[x]:
      while r.op is Ops.RESHAPE and r not in realize and [s for s in r.shape if s != 1] == dims and len(users.get(r, ())) == 1: r = users[r][0]
      if r.op is not Ops.PERMUTE or r in realize: break
      rank = {i: n for n, i in enumerate(i for i, s in enumerate(r.src[0].shape) if s != 1)}   # a non-1 axis -> its place in dims
      perms.add(tuple(rank[i] for i in r.arg if i in rank))
    else:
      if len(perms) == 1 and (perm := perms.pop()) != tuple(range(len(dims))) and dims[perm[-1]] > dims[-1]: out[x] = perm
  return out

def _kernels(order: list[UOp], realize: set[UOp], groups: dict[UOp, tuple[UOp, ...]], layouts: dict[UOp, tuple[int, ...]]) -> tuple[list[_Kernel], dict[UOp, Buffer]]:
  out_buf: dict[UOp, Buffer] = {}     # realized node -> the buffer it is written to
  kernels: list[_Kernel] = []
  for x in order:
    if x not in realize: continue
    if x.op is Ops.ASSIGN: out_buf[x] = buffers[_plain_buffer(x.src[0])]
    else: out_buf[x] = make_buffer(x.device, max_size(x.shape), x.dtype)
    if x.op in TRANSFERS:
      src = x.src[0]
      if src in out_buf: kernels.append(_Kernel((x,), ScheduleItem(x, [out_buf[x], out_buf[src]]), {src}, set()))
      else:  # a view of a buffer, or of an assign to one in this schedule: then it reads the assigned value, after the assign
        assigns = {u for u in src.toposort(gate=lambda u: u.op is not Ops.BUFFER) if u.op is Ops.ASSIGN and u in realize}
        kernels.append(_Kernel((x,), ScheduleItem(x, [out_buf[x], buffers[_plain_buffer(src)]]), assigns, set() if assigns else {_plain_buffer(src)}))
    elif x is (group := groups.get(x, (x,)))[-1]: kernels.append(_kernel(group, realize, out_buf, layouts))  # once all its outputs have buffers
  return kernels, out_buf

def _renderer_limit(device: str | tuple[str, ...], name: str) -> int:
  """A limit the device's renderer declares (`max_buffers`, `loop_pass_max`); 0: none."""
  return (getattr(ren, name, 0) or 0) if (ren := _renderer(device)) is not None else 0
def _max_buffers(device: str | tuple[str, ...]) -> int: return _renderer_limit(device, "max_buffers")

def _reduce_passes(u: UOp) -> int:
  """Loop passes one thread makes for reduction u, from above: its elements per output, plus codegen's nested loops'
  exit passes (loops of at least 128 trips each)."""
  n = max_size(tuple(u.src[0].shape[a] for a in u.arg[1]))
  return n + 2 * ceildiv(n, 128) + 2

def _kernel_passes(values: list[UOp], realize: set[UOp]) -> int:
  """Loop passes one thread of the kernel computing `values` makes: its reductions run one after another (the scheduler
  never computes one inside another's loop), so their passes add up."""
  return sum(_reduce_passes(u) for u in dict.fromkeys(x for v in values for x in _in_kernel(v, realize)) if u.op is Ops.REDUCE_AXIS)

def _split_long_kernels(kernels: list[_Kernel], realize: set[UOp]) -> set[UOp]:
  """For each kernel making more loop passes per thread than its device runs (`loop_pass_max`: Mesa's software GPUs end
  a shader's loops after 65535 passes in all, cutting a sum short), its longest reduction other than its own value, to
  compute in a kernel of its own (a sum and a max of 32768 elements each, added: two kernels). A single reduction that
  long is split by split_reduce already."""
  out: set[UOp] = set()
  for k in kernels:
    if len(k.nodes) > 1 or (node := k.nodes[0]).op in TRANSFERS or not (limit := _renderer_limit(node.device, "loop_pass_max")): continue
    value = _value(node)
    if _kernel_passes([value], realize) <= limit: continue
    inner = [u for u in _in_kernel(value, realize) if u.op is Ops.REDUCE_AXIS and u is not value and u not in realize]
    if inner: out.add(max(inner, key=_reduce_passes))
  return out

def _split_wide_kernels(kernels: list[_Kernel], realize: set[UOp]) -> set[UOp]:
  """For each kernel with more parameters than its device's renderer allows (`max_buffers`, e.g. WebGPU's storage
  buffers per shader), one node of its graph to realize separately: the one that folds the most inputs into one buffer
  while itself fitting, the smallest of those. Repeated by the caller until every kernel fits."""
  out: set[UOp] = set()
  for k in kernels:
    # (kernels with several outputs are only made where they fit)
    if len(k.nodes) > 1 or (node := k.nodes[0]).op in TRANSFERS or not (limit := _max_buffers(node.device)) or len(k.item.bufs) <= limit: continue
    value = _value(node)
    inputs: dict[UOp, frozenset] = {}  # node -> the realized nodes and BUFFERs it reads
    best, best_key = None, None
    for u in value.toposort(gate=lambda u: u is node or u not in realize and u.op is not Ops.BUFFER):
      if u is not node and (u in realize or u.op is Ops.BUFFER): inputs[u] = frozenset({u}); continue
      inputs[u] = frozenset().union(*(inputs.get(s, frozenset()) for s in u.src))
      n = len(inputs[u])
      if u is value or n < 2 or u.op in GroupOp.Movement: continue  # realizing a view of its inputs gains nothing
      key = (min(n, limit - 1), -max_size(u.shape))
      if best_key is None or key > best_key: best, best_key = u, key
    if best is None:
      raise UnsupportedError(f"backend {node.device}: a kernel needs {len(k.item.bufs)} buffers but the device binds at most "
                             f"{limit}, and the scheduler found no part of it to compute separately")
    out.add(best)
  return out

def _order_kernels(kernels: list[_Kernel]) -> tuple[list[_Kernel], list[_Kernel]]:
  """Dependency order, stable otherwise; an ASSIGN runs after every kernel reading the old contents of its target.
  Returns the ordered kernels and those left stuck in a cycle (none when the schedule is valid)."""
  by_node = {x: k for k in kernels for x in k.nodes}
  readers: dict[UOp, list[_Kernel]] = defaultdict(list)
  for k in kernels:
    for b in k.reads: readers[b].append(k)
  deps: dict[int, set[int]] = {}
  idx = {id(k): i for i, k in enumerate(kernels)}
  for i, k in enumerate(kernels):
    d = {idx[id(by_node[n])] for n in k.after if n in by_node}
    for x in k.nodes:
      if x.op is Ops.ASSIGN: d |= {idx[id(r)] for r in readers[_plain_buffer(x.src[0])] if r is not k}
    deps[i] = d
  done: list[int] = []
  placed: set[int] = set()
  progress = True
  while progress and len(done) < len(kernels):
    progress = False
    for i in range(len(kernels)):
      if i not in placed and deps[i] <= placed:
        done.append(i); placed.add(i); progress = True
  return [kernels[i] for i in done], [kernels[i] for i in range(len(kernels)) if i not in placed]

def _buffer_view(x: UOp, buf: Buffer) -> UOp:
  u = UOp(Ops.BUFFER, x.dtype, (UOp(Ops.DEVICE, arg=x.device), UOp(Ops.UNIQUE, arg=unique_id())), buf.size)
  buffers[u] = buf
  if all_int(x.shape): return u.reshape(x.shape)
  # a symbolic shape: the kernel wrote the first prod(shape) elements, contiguously, into a buffer sized for the maximum
  return u.shrink(((0, ssimplify(prod(x.shape))),)).reshape(x.shape)

def _kernel(nodes: tuple[UOp, ...], realize: set[UOp], out_buf: dict[UOp, Buffer], layouts: dict[UOp, tuple[int, ...]]) -> _Kernel:
  """Kernel AST computing realized nodes `nodes` (its outputs, stored in order): realized inputs become numbered
  parameters, so equal kernels share one AST; an output read by another is computed once, where it is read. An output's
  own buffer read in place (an assign reading its target's old value) is read through the output's parameter: no two
  parameters share memory a kernel writes, so a renderer may declare them restrict/noalias. A node with a layout
  (_layouts) is stored with its non-1 axes in that order and read back through the inverse permute."""
  bufs: list[Buffer] = [out_buf[x] for x in nodes]
  params: dict[int, UOp] = {id(b): UOp(Ops.DEFINE_GLOBAL, b.dtype.ptr(b.size), (), i) for i, b in enumerate(bufs)}
  var_vals: dict[str, int] = {}
  memo: dict[UOp, UOp] = {}
  after: set[UOp] = set()
  reads: set[UOp] = set()
  def param(buf: Buffer) -> UOp:
    if id(buf) not in params:
      params[id(buf)] = UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf.size), (), len(bufs))
      bufs.append(buf)
    return params[id(buf)]
  walk: dict[UOp, None] = {}
  # an assign of this kernel read by another output is its new value, walked first (outputs are in dependency order)
  for x in nodes: walk.update(_value(x).toposort(gate=lambda u: u.op is not Ops.ASSIGN and (u in nodes or u not in realize and u.op is not Ops.BUFFER)))
  for u in walk:
    if u in nodes and u.op is Ops.ASSIGN: memo[u] = memo[u.src[1]]
    elif u not in nodes and u in realize:
      after.add(u)
      p = param(out_buf[u])
      if (perm := layouts.get(u)) is not None:
        dims = [s for s in u.shape if s != 1]
        memo[u] = p.reshape(tuple(dims[i] for i in perm)).permute(tuple(perm.index(i) for i in range(len(perm)))).reshape(u.shape)
      else: memo[u] = p if u.shape == (out_buf[u].size,) else UOp(Ops.RESHAPE, u.dtype, (p,), _unbind_arg(u.shape, var_vals))
    elif u.op is Ops.BUFFER:
      reads.add(u)
      memo[u] = param(buffers[u])
    elif u.op is Ops.CONST: memo[u] = UOp.const(u.dtype, u.arg)
    elif u.op is Ops.IOTA: memo[u] = UOp(Ops.IOTA, u.dtype, (), u.arg)
    elif u.op is Ops.BIND:
      var, val = u.unbind()
      var_vals[var.arg[0]] = val
      memo[u] = var
    elif u.op in _PASSTHROUGH or u.op is Ops.CONTIGUOUS: memo[u] = memo[u.src[0]]
    elif u.op is Ops.DEVICE: memo[u] = u
    elif u.op in GroupOp.Movement and not all_int(_flat_arg(u.arg)):
      memo[u] = u.replace(src=tuple(memo[s] for s in u.src), arg=_unbind_arg(u.arg, var_vals))
    else: memo[u] = u.replace(src=tuple(memo[s] for s in u.src))
  # outputs of one size share one loop: each is stored in the first one's shape (the same elements, in order)
  values = [memo[_value(x)] if (perm := layouts.get(x)) is None else memo[_value(x)].reshape(tuple(s for s in x.shape if s != 1)).permute(perm) for x in nodes]
  values = [v if v.shape == values[0].shape else v.reshape(values[0].shape) for v in values]
  stores = tuple(UOp(Ops.DEFINE_GLOBAL, b.dtype.ptr(b.size), (), i).store(v) for i, (v, b) in enumerate(zip(values, bufs)))
  return _Kernel(nodes, ScheduleItem(UOp(Ops.SINK, dtypes.void, stores), bufs, var_vals), after, reads)

def _flat_arg(arg) -> list:
  return [y for x in arg for y in (_flat_arg(x) if isinstance(x, tuple) else (x,))] if isinstance(arg, tuple) else [arg]

def _unbind_arg(arg, var_vals: dict[str, int]):
  """A movement op's symbolic arg with each bound variable replaced by its variable; the values go to var_vals,
  so kernels that differ only in the bound values share one AST (and one compiled binary)."""
  if isinstance(arg, tuple): return tuple(_unbind_arg(x, var_vals) for x in arg)
  if not isinstance(arg, UOp): return arg
  out, vals = arg.unbind_all()
  for name, val in vals.items():
    if var_vals.setdefault(name, val) != val: raise ValueError(f"Variable {name} is bound to both {var_vals[name]} and {val} in one kernel")
  return out

def _outputs(si: ScheduleItem) -> list[Buffer]:
  """The buffers a schedule item writes: the first parameters, one per store of a kernel (a transfer writes one)."""
  return si.bufs[:len(si.ast.src)] if si.ast.op is Ops.SINK else si.bufs[:1]

def _plan_memory(items: list[ScheduleItem], keep: set[Buffer]) -> None:
  """Intermediate buffers whose last reader has run are reused by later kernels of the same size and dtype."""
  intermediates = {b for si in items for b in _outputs(si)} - keep
  last_use: dict[Buffer, int] = {}
  for i, si in enumerate(items):
    for b in si.bufs: last_use[b] = i
  pool: dict[tuple, list[Buffer]] = defaultdict(list)
  remap: dict[Buffer, Buffer] = {}
  for i, si in enumerate(items):
    orig = list(si.bufs)
    for out in _outputs(si):
      if out in intermediates and pool[(out.device, out.dtype, out.size)]: remap[out] = pool[(out.device, out.dtype, out.size)].pop()
    si.bufs = [remap.get(b, b) for b in orig]
    for b in dict.fromkeys(orig):
      if b in intermediates and last_use[b] == i: pool[(b.device, b.dtype, b.size)].append(remap.get(b, b))
