"""Sharded tensors: the rules that turn ops on MULTI nodes into per-shard work, MultiBuffer, and the all-reduce's plans.

A tensor on a tuple of devices is, at the tensor level, one global tensor. Its leaves are MULTI(shard graph, layout): the
shard graph has the shape of one shard (layout None: the whole tensor, replicated; an axis; or a grid's layout, below)
and the tuple as its device. A node on a tuple of devices that is not under a MULTI (a constant, an arange) is the
same whole tensor on every device. `multi_pm` pushes MULTI up through every op, so the scheduled graph is per-shard
work whose size does not depend on the number of devices: one kernel, launched once per device. Where a device's shard
differs (taking its slice of a replicated tensor), the kernel reads the variable `_device_num`, which the engine sets
per launch."""
from __future__ import annotations
import os
import numpy as np
from tinycore.dtype import dtypes, to_np_dtype, acc_dtype
from tinycore.helpers import prod, all_int
from tinycore.uop import UOp, Ops, GroupOp, bf16_to_f32, f32_to_bf16, ssimplify
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.runtime.device import Buffer, Device

DEVICE_NUM = "_device_num"

def device_num(n: int) -> UOp: return UOp.variable(DEVICE_NUM, 0, n - 1)

class MultiBuffer:
  """One buffer per device of a tuple: shard i lives on device[i]. Behaves like a Buffer for the scheduler."""
  _base = None
  def __init__(self, device: tuple[str, ...], size: int, dtype, options=None):
    self.device, self.size, self.dtype, self.options = device, size, dtype, options
    self.bufs = [Buffer(d, size, dtype, options) for d in device]
  @property
  def base(self) -> MultiBuffer: return self
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def is_allocated(self) -> bool: return all(b.is_allocated for b in self.bufs)
  def ensure_allocated(self) -> MultiBuffer:
    for b in self.bufs: b.ensure_allocated()
    return self
  def __repr__(self): return f"<MultiBuffer {self.device} {self.size} {self.dtype}>"

def make_buffer(device: str | tuple[str, ...], size: int, dtype, options=None) -> Buffer | MultiBuffer:
  return MultiBuffer(device, size, dtype, options) if isinstance(device, tuple) else Buffer(device, size, dtype, options)

# ***** from global ops to per-shard ops *****
# A MULTI's arg says how the tensor is laid out on its devices: None (replicated), an axis (split over every device), or
# for a grid of devices ((axis or None, devices along it), ...), one pair per grid dimension, row-major: device i sits at
# coordinate (i // (product of the later sizes)) % size along each. The rules work on the grid form, a "layout".

Layout = tuple[tuple[int | None, int], ...]

def layout_of(arg, n: int) -> Layout: return arg if isinstance(arg, tuple) else ((arg, n),)

def layout_arg(layout: Layout):
  """The MULTI arg of a layout: None when nothing is split, the axis on a one-dimensional grid."""
  if all(a is None for a, _ in layout): return None
  return layout[0][0] if len(layout) == 1 else layout

def _multi(x: UOp, layout: Layout) -> UOp: return UOp(Ops.MULTI, x.dtype, (x,), layout_arg(layout))

def _layout(m: UOp) -> Layout: return layout_of(m.arg, len(m.device))

def _sizes(layout: Layout) -> tuple[int, ...]: return tuple(n for _, n in layout)

def split(x: UOp, arg, dims: set[int] | None = None) -> UOp:
  """The whole tensor on every device (a replicated shard graph) -> each device's slice of it for the layout `arg`
  (only along the grid dimensions `dims`, where x is already each device's slice along the others)."""
  layout = layout_of(arg, len(x.device))
  dn, ranges = device_num(len(x.device)), [(0, s) for s in x.shape]
  for g, (axis, n) in enumerate(layout):
    if axis is None or dims is not None and g not in dims: continue
    size, stride = x.shape[axis], prod(_sizes(layout)[g+1:])
    if not isinstance(size, int) or size % n:
      raise ValueError(f"cannot shard dimension {axis} of shape {x.shape} over {n} devices: {size} does not split evenly; "
                       f"pad it to a multiple of {n} or shard another axis")
    c, k = dn if stride == 1 else dn // stride, size // n
    if n * stride != len(x.device): c = c % n   # this device's coordinate along grid dimension g
    ranges[axis] = (c * k, c * k + k)
  return x.shrink(tuple(ranges)) if any(r != (0, s) for r, s in zip(ranges, x.shape)) else x

def gather(x: UOp, arg, dest) -> UOp:
  """A shard graph laid out by `arg` -> the whole tensor on every device of dest (a tuple) or on one device: every
  shard is gathered (device order, along a new first axis), then the grid's axes are moved next to the axes they split."""
  layout = layout_of(arg, len(x.device))
  if all(a is None for a, _ in layout): return x if dest == x.device else UOp(Ops.COPY, x.dtype, (x,), dest)
  if not all_int(x.shape):
    # a shard of symbolic shape fills the start of a buffer sized for the maximum, so shards cannot be laid end to end:
    # each is padded to the maximum shape, gathered, and the whole cut back (the split axes themselves are never symbolic)
    big = gather(x.pad(tuple((0, 0) if isinstance(s, int) else (0, int(s.vmax) - s) for s in x.shape)), arg, dest)
    return big.shrink(tuple((0, w) if isinstance(s, int) else (0, s) for s, w in zip(x.shape, big.shape)))
  k = len(layout)
  y = UOp(Ops.ALLGATHER, x.dtype, (x.reshape((1,) + x.shape),), dest).reshape(_sizes(layout) + x.shape)
  y = y.shrink(tuple((0, 1) if g < k and layout[g][0] is None else (0, s) for g, s in enumerate(y.shape)))  # copies: one
  order = [g for g in range(k) if layout[g][0] is None]
  for i in range(len(x.shape)): order += [g for g in range(k) if layout[g][0] == i] + [k + i]
  whole = tuple(s * prod(n for a, n in layout if a == i) for i, s in enumerate(x.shape))
  return y.permute(tuple(order)).reshape(whole)

def shard_of(s: UOp, layout: Layout) -> UOp:
  """The shard graph of tensor-level source s for a layout: its own where it matches, further split where s is
  replicated along grid dimensions the layout splits, else gathered and split again."""
  if s.op is not Ops.MULTI: return split(s, layout)   # not under a MULTI: the whole tensor on every device
  mine = _layout(s)
  if mine == layout: return s.src[0]
  if _sizes(mine) == _sizes(layout) and all(a is None or a == b for (a, _), (b, _) in zip(mine, layout)):
    return split(s.src[0], layout, {g for g, ((a, _), (b, _)) in enumerate(zip(mine, layout)) if a is None and b is not None})
  return split(gather(s.src[0], mine, s.device), layout)

def _common_layout(srcs: tuple[UOp, ...], n: int) -> Layout:
  """The layout an op on these sources computes in: the first split source's, with the grid dimensions it replicates
  taken from later sources on the same grid (x split by rows times w split by columns: blocks of rows by columns)."""
  split_ones = [_layout(s) for s in srcs if s.op is Ops.MULTI and s.arg is not None]
  if not split_ones: return ((None, n),)
  out = list(split_ones[0])
  for other in split_ones[1:]:
    if _sizes(other) != _sizes(split_ones[0]): continue
    for g, (a, size) in enumerate(other):
      if out[g][0] is None and a is not None and all(a != b for b, _ in out): out[g] = (a, size)
  return tuple(out)

def _elementwise(root: UOp) -> UOp | None:
  if not any(s.op is Ops.MULTI for s in root.src): return None
  layout = _common_layout(root.src, len(root.device))
  return _multi(root.replace(src=tuple(shard_of(s, layout) for s in root.src)), layout)

def _assign(root: UOp, target: UOp) -> UOp | None:
  if target.op is not Ops.MULTI and root.src[1].op is not Ops.MULTI: return None
  layout = _layout(target) if target.op is Ops.MULTI else ((None, len(root.device)),)   # the buffer keeps its layout
  return _multi(root.replace(src=(shard_of(target, layout), shard_of(root.src[1], layout))), layout)

def _reduce(root: UOp, m: UOp) -> UOp:
  (x, layout), (op, axes) = (m.src[0], _layout(m)), root.arg
  partial = x.r(op, axes)
  dims = tuple(g for g, (a, _) in enumerate(layout) if a is not None and a in axes)
  if not dims: return _multi(partial, layout)
  # the partial sums of the devices that differ only along the split grid dimensions are all-reduced among them
  reduced = UOp(Ops.ALLREDUCE, partial.dtype, (partial,), (op, _sizes(layout), dims))
  return _multi(reduced, tuple((None, n) if g in dims else (a, n) for g, (a, n) in enumerate(layout)))

def _whole(root: UOp, m: UOp) -> UOp:
  """A movement that mixes a split axis with data of other shards: gather first, then move the whole tensor."""
  return _multi(root.replace(src=(gather(m.src[0], m.arg, m.device),)), ((None, len(m.device)),))

def _reshape(root: UOp, m: UOp) -> UOp:
  x, layout, new = m.src[0], _layout(m), root.arg
  # each split axis goes to the new axis whose leading dims hold the same elements as the old axis's: each shard is then
  # a contiguous block of it, as long as that axis splits evenly (symbolic dims elsewhere stay as they are)
  out, shard = [], list(new)
  for a, n in layout:
    b = None if a is None else next((i for i in range(len(new)) if isinstance(new[i], int) and new[i] % n == 0 and
                                     isinstance(d := ssimplify(prod(new[:i]) - prod(m.shape[:a])), int) and d == 0), None)
    if a is not None and (b is None or any(b == c for c, _ in out)): return _whole(root, m)
    if b is not None: shard[b] //= n
    out.append((b, n))
  return _multi(x.reshape(tuple(shard)), tuple(out))

def _permute(root: UOp, m: UOp) -> UOp:
  return _multi(m.src[0].permute(root.arg), tuple((None if a is None else root.arg.index(a), n) for a, n in _layout(m)))

def _expand(root: UOp, m: UOp) -> UOp:
  x, axes = m.src[0], {a for a, _ in _layout(m)}
  return _multi(x.expand(tuple(x.shape[i] if i in axes else s for i, s in enumerate(root.arg))), _layout(m))

def _pad_shrink_flip(root: UOp, m: UOp) -> UOp:
  x, axes = m.src[0], {a for a, _ in _layout(m)} - {None}
  full = {Ops.PAD: lambda i: (0, 0), Ops.SHRINK: lambda i: (0, m.shape[i]), Ops.FLIP: lambda i: False}[root.op]
  if any(root.arg[i] != full(i) for i in axes): return _whole(root, m)
  arg = tuple((0, x.shape[i]) if i in axes and root.op is Ops.SHRINK else a for i, a in enumerate(root.arg))
  return _multi(root.replace(src=(x,), arg=arg), _layout(m))

def _copy(root: UOp, m: UOp) -> UOp:
  x, layout, dest = m.src[0], _layout(m), root.arg
  if not isinstance(dest, tuple): return gather(x, layout, dest)
  if len(layout) > 1 and len(dest) != len(m.device):
    raise ValueError(f"a tensor on a grid of {'x'.join(map(str, _sizes(layout)))} devices cannot be copied to {len(dest)} devices; "
                     "copy it to one device first, then shard it")
  if len(layout) == 1: layout = ((layout[0][0], len(dest)),)
  return _multi(split(gather(x, m.arg, dest), layout), layout)

multi_pm = PatternMatcher([
  (UPat(tuple(GroupOp.Elementwise) + (Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), name="root"), _elementwise),
  (UPat(Ops.ASSIGN, name="root", src=(UPat(name="target"), UPat())), _assign),
  (UPat(Ops.REDUCE_AXIS, name="root", src=(UPat(Ops.MULTI, name="m"),)), _reduce),
  (UPat(Ops.RESHAPE, name="root", src=(UPat(Ops.MULTI, name="m"),)), _reshape),
  (UPat(Ops.PERMUTE, name="root", src=(UPat(Ops.MULTI, name="m"),)), _permute),
  (UPat(Ops.EXPAND, name="root", src=(UPat(Ops.MULTI, name="m"),)), _expand),
  (UPat((Ops.PAD, Ops.SHRINK, Ops.FLIP), name="root", src=(UPat(Ops.MULTI, name="m"),)), _pad_shrink_flip),
  (UPat(Ops.COPY, name="root", src=(UPat(Ops.MULTI, name="m"),)), _copy),
])

# ***** all-reduce *****
# The reduction order is fixed, so every strategy, every run and every process layout gives the same bits: each element
# is the left fold of the shards in device order, ((s0 + s1) + s2) + ..., whatever chunk of the buffer it is in, so the
# result depends neither on the strategy nor on the tensor's layout. Half and bfloat16 are reduced in float32 and rounded
# once at the end. tinycore.distributed folds the ranks' contributions the same way (rank order).

STRATEGIES = ("naive", "ring", "all2all")
_NP_OP = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}

CHUNK_ALIGN = 16   # elements: a chunk's view starts at a multiple of 16 bytes whatever the dtype, as wide kernels need (codegen/widen.py)
def chunk_bounds(m: int, n: int) -> list[int]: return [m * c // n // CHUNK_ALIGN * CHUNK_ALIGN if c < n else m for c in range(n + 1)]

def pick_strategy(nbytes: int, n: int) -> str:
  """ALLREDUCE=naive|ring|all2all forces one. Else: small tensors or 2 devices gather everything (fewest transfers);
  large ones go round the ring (each device sends 2(n-1)/n of the data); in between all-to-all (2 steps)."""
  if (forced := os.environ.get("ALLREDUCE")):
    if forced not in STRATEGIES: raise ValueError(f"ALLREDUCE={forced!r}: pick one of {', '.join(STRATEGIES)}")
    return forced
  return "naive" if n <= 2 or nbytes < (1 << 18) else "ring" if nbytes >= (1 << 22) else "all2all"

Plan = list[tuple[int, int, list[tuple[int, list[int]]]]]

def allreduce_plan(n: int, m: int, strategy: str) -> Plan:
  """A strategy as data: for each chunk [lo, hi) of the buffer, its hops (device that folds, the shards it adds to the
  partial from the hop before). naive: one chunk, every shard folded on device 0. all2all: chunk c folded on device c.
  ring: each chunk's partial starts on device 0 and passes device to device, each adding its own piece. Every hop
  folds in device order, so every element is the left fold ((s0 op s1) op s2) ..., whatever the strategy. The result
  is then sent to every device."""
  if strategy == "naive" or n == 1: return [(0, m, [(0, list(range(n)))])]
  b = chunk_bounds(m, n)   # (a chunk of a small buffer may be empty: it has nothing to fold)
  if strategy == "all2all": return [(b[c], b[c + 1], [(c, list(range(n)))]) for c in range(n) if b[c] < b[c + 1]]
  return [(b[c], b[c + 1], [(1, [0, 1])] + [(j, [j]) for j in range(2, n)]) for c in range(n) if b[c] < b[c + 1]]

def device_groups(grid: tuple[int, ...], dims: tuple[int, ...]) -> list[list[int]]:
  """The devices of a grid that an all-reduce over grid dimensions `dims` combines: those equal in every other
  coordinate, each group in device order (the order of the fold)."""
  groups: dict[tuple, list[int]] = {}
  for i in range(prod(grid)):
    coord = [(i // prod(grid[g+1:])) % n for g, n in enumerate(grid)]
    groups.setdefault(tuple(c for g, c in enumerate(coord) if g not in dims), []).append(i)
  return list(groups.values())

def acc_np_dtype(dt) -> np.dtype: return np.dtype(to_np_dtype(acc_dtype(dt)))

def fold_ast(in_dtypes: list, out_dtype, op: Ops, size: int) -> UOp:
  """The kernel of one hop on a device: out = ((in1 op in2) op in3) ... in the accumulation dtype, rounded once to out's."""
  acc = acc_dtype(out_dtype)   # out is the partial's accumulation dtype, or the shards' own
  ins = [UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), (), i + 1).cast(acc) for i, dt in enumerate(in_dtypes)]
  value = ins[0]
  for x in ins[1:]: value = value.alu(op, x)
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, out_dtype.ptr(size), (), 0).store(value.cast(out_dtype)),))

def _host_memory(b: Buffer) -> np.ndarray | None:
  """The buffer's memory itself, where the device's memory is host memory (the CPU): no copy."""
  mv = b.ensure_allocated().allocator._as_buffer(b._buf)
  return None if mv is None else np.frombuffer(mv, to_np_dtype(b.dtype))

def to_host(b: Buffer, lo: int = 0, hi: int | None = None) -> np.ndarray:
  """Elements [lo, hi) of a buffer, copied to a numpy array in the all-reduce's accumulation dtype."""
  hi = b.size if hi is None else hi
  if (raw := _host_memory(b)) is not None: Device[b.device].synchronize()
  else:
    part = b.view(hi - lo, b.dtype, lo * b.dtype.itemsize) if (lo, hi) != (0, b.size) and b.allocator.supports_offset else b
    raw = np.frombuffer(part.as_bytes(), to_np_dtype(b.dtype))
    if part is not b: lo, hi = 0, hi - lo
  raw = raw[lo:hi]
  return (bf16_to_f32(raw) if b.dtype == dtypes.bfloat16 else raw).astype(acc_np_dtype(b.dtype))

def from_host(b: Buffer, arr: np.ndarray, lo: int = 0) -> None:
  """Write arr (in the accumulation dtype) into elements [lo, lo + arr.size) of a buffer, rounded to its dtype."""
  raw = np.ascontiguousarray(f32_to_bf16(arr.astype(np.float32)) if b.dtype == dtypes.bfloat16 else arr.astype(to_np_dtype(b.dtype)))
  if (mem := _host_memory(b)) is not None: mem[lo:lo + raw.size] = raw
  elif lo == 0 and raw.size == b.size: b.copyin(memoryview(raw).cast("B"))
  elif b.allocator.supports_offset: b.view(raw.size, b.dtype, lo * b.dtype.itemsize).copyin(memoryview(raw).cast("B"))
  else:
    whole = np.frombuffer(b.as_bytes(), raw.dtype).copy()
    whole[lo:lo + raw.size] = raw
    b.copyin(memoryview(whole).cast("B"))

def fold(parts: list[np.ndarray], op: Ops) -> np.ndarray:
  """The all-reduce of host arrays in the fixed order: ((p0 op p1) op p2) ..."""
  acc = parts[0].copy()
  for p in parts[1:]: _NP_OP[op](acc, p, out=acc)
  return acc

def allreduce_on_host(dests: list[Buffer], srcs: list[Buffer], op: Ops, plan: Plan) -> None:
  """A plan run in host memory (numpy, exact IEEE arithmetic: the bits a device kernel gives), for a backend that
  cannot run the hops' kernels (the dtype, or the chunks' views, unsupported)."""
  for lo, hi, hops in plan:
    acc = None
    for _, shards in hops: acc = fold(([] if acc is None else [acc]) + [to_host(srcs[i], lo, hi) for i in shards], op)
    for b in dests: from_host(b, acc, lo)
