"""Sharded tensors: the rules that turn ops on MULTI nodes into per-shard work, MultiBuffer, and the all-reduce itself.

A tensor on a tuple of devices is, at the tensor level, one global tensor. Its leaves are MULTI(shard graph, axis): the
shard graph has the shape of one shard (axis None: the whole tensor, replicated) and the tuple as its device. A node on
a tuple of devices that is not under a MULTI (a constant, an arange) is the same whole tensor on every device.
`multi_pm` pushes MULTI up through every op, so the scheduled graph is per-shard work whose size does not depend on the
number of devices: one kernel, launched once per device. Where a device's shard differs (taking its slice of a replicated
tensor), the kernel reads the variable `_device_num`, which the engine sets per launch."""
from __future__ import annotations
import os
import numpy as np
from tinycore.dtype import dtypes, to_np_dtype
from tinycore.helpers import prod
from tinycore.uop import UOp, Ops, GroupOp, bf16_to_f32, f32_to_bf16
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

def split(x: UOp, axis: int | None) -> UOp:
  """The whole tensor on every device (a replicated shard graph) -> each device's slice of it along axis."""
  if axis is None: return x
  n, size = len(x.device), x.shape[axis]
  if not isinstance(size, int) or size % n:
    raise ValueError(f"cannot shard dimension {axis} of shape {x.shape} over {n} devices: {size} does not split evenly; "
                     f"pad it to a multiple of {n} or shard another axis")
  dn, k = device_num(n), size // n
  return x.shrink(tuple((dn * k, dn * k + k) if i == axis else (0, s) for i, s in enumerate(x.shape)))

def gather(x: UOp, axis: int | None, dest) -> UOp:
  """A shard graph sharded along axis -> the whole tensor on every device of dest (a tuple) or on one device."""
  if axis is None: return x if dest == x.device else UOp(Ops.COPY, x.dtype, (x,), dest)
  order = (axis,) + tuple(i for i in range(len(x.shape)) if i != axis)
  whole = UOp(Ops.ALLGATHER, x.dtype, (x.permute(order),), dest)
  return whole.permute(tuple(sorted(range(len(order)), key=lambda i: order[i])))

def shard_of(s: UOp, axis: int | None) -> UOp:
  """The shard graph of tensor-level source s, sharded along axis."""
  if s.op is not Ops.MULTI: return split(s, axis)   # not under a MULTI: the whole tensor on every device
  return s.src[0] if s.arg == axis else split(gather(s.src[0], s.arg, s.device), axis)

def _multi(x: UOp, axis: int | None) -> UOp: return UOp(Ops.MULTI, x.dtype, (x,), axis)

def _elementwise(root: UOp) -> UOp | None:
  if not any(s.op is Ops.MULTI for s in root.src): return None
  axis = next((s.arg for s in root.src if s.op is Ops.MULTI and s.arg is not None), None)
  return _multi(root.replace(src=tuple(shard_of(s, axis) for s in root.src)), axis)

def _assign(root: UOp, target: UOp) -> UOp | None:
  if target.op is not Ops.MULTI and root.src[1].op is not Ops.MULTI: return None
  axis = target.arg if target.op is Ops.MULTI else None   # the buffer keeps its layout
  return _multi(root.replace(src=(shard_of(target, axis), shard_of(root.src[1], axis))), axis)

def _reduce(root: UOp, m: UOp) -> UOp:
  (x, axis), (op, axes) = (m.src[0], m.arg), root.arg
  partial = x.r(op, axes)
  if axis is None or axis not in axes: return _multi(partial, axis)
  return _multi(UOp(Ops.ALLREDUCE, partial.dtype, (partial,), op), None)

def _whole(root: UOp, m: UOp) -> UOp:
  """A movement that mixes the shard axis with data of other shards: gather first, then move the whole tensor."""
  return _multi(root.replace(src=(gather(m.src[0], m.arg, m.device),)), None)

def _reshape(root: UOp, m: UOp) -> UOp:
  x, axis, new = m.src[0], m.arg, root.arg
  if axis is None: return _multi(x.reshape(new), None)
  n, lead = len(m.device), prod(m.shape[:axis])
  # the new axis whose leading dims hold the same elements as the old shard axis's: each shard is then a contiguous
  # block of it, as long as that axis splits evenly
  b = next((i for i in range(len(new)) if prod(new[:i]) == lead and isinstance(new[i], int) and new[i] % n == 0), None)
  if b is None or not all(isinstance(s, int) for s in new + m.shape): return _whole(root, m)
  return _multi(x.reshape(tuple(s // n if i == b else s for i, s in enumerate(new))), b)

def _permute(root: UOp, m: UOp) -> UOp:
  return _multi(m.src[0].permute(root.arg), None if m.arg is None else root.arg.index(m.arg))

def _expand(root: UOp, m: UOp) -> UOp:
  x, axis = m.src[0], m.arg
  return _multi(x.expand(tuple(x.shape[i] if i == axis else s for i, s in enumerate(root.arg))), axis)

def _pad_shrink_flip(root: UOp, m: UOp) -> UOp:
  x, axis = m.src[0], m.arg
  if axis is not None:
    full = {Ops.PAD: (0, 0), Ops.SHRINK: (0, m.shape[axis]), Ops.FLIP: False}[root.op]
    if root.arg[axis] != full: return _whole(root, m)
  arg = tuple((0, x.shape[i]) if i == axis and root.op is Ops.SHRINK else a for i, a in enumerate(root.arg))
  return _multi(root.replace(src=(x,), arg=arg), axis)

def _copy(root: UOp, m: UOp) -> UOp:
  x, axis, dest = m.src[0], m.arg, root.arg
  if not isinstance(dest, tuple): return gather(x, axis, dest)
  return _multi(split(gather(x, axis, dest), axis), axis)

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

def chunk_bounds(m: int, n: int) -> list[int]: return [m * c // n for c in range(n + 1)]

def pick_strategy(nbytes: int, n: int) -> str:
  """ALLREDUCE=naive|ring|all2all forces one. Else: small tensors or 2 devices gather everything (fewest transfers);
  large ones go round the ring (each device sends 2(n-1)/n of the data); in between all-to-all (2 steps)."""
  if (forced := os.environ.get("ALLREDUCE")):
    if forced not in STRATEGIES: raise ValueError(f"ALLREDUCE={forced!r}: pick one of {', '.join(STRATEGIES)}")
    return forced
  return "naive" if n <= 2 or nbytes < (1 << 18) else "ring" if nbytes >= (1 << 22) else "all2all"

def acc_np_dtype(dt) -> np.dtype: return np.dtype(np.float32) if dt in (dtypes.float16, dtypes.bfloat16) else np.dtype(to_np_dtype(dt))

def _host_memory(b: Buffer) -> np.ndarray | None:
  """The buffer's memory itself, where the device's memory is host memory (the CPU): no copy."""
  mv = b.ensure_allocated().allocator._as_buffer(b._buf)
  return None if mv is None else np.frombuffer(mv, np.uint16 if b.dtype == dtypes.bfloat16 else to_np_dtype(b.dtype))

def to_host(b: Buffer, lo: int = 0, hi: int | None = None) -> np.ndarray:
  """Elements [lo, hi) of a buffer, copied to a numpy array in the all-reduce's accumulation dtype."""
  hi = b.size if hi is None else hi
  if (raw := _host_memory(b)) is not None: Device[b.device].synchronize()
  else:
    part = b.view(hi - lo, b.dtype, lo * b.dtype.itemsize) if (lo, hi) != (0, b.size) and b.allocator.supports_offset else b
    raw = np.frombuffer(part.as_bytes(), np.uint16 if b.dtype == dtypes.bfloat16 else to_np_dtype(b.dtype))
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

def allreduce(dest: MultiBuffer, src: MultiBuffer, op: Ops, strategy: str | None = None) -> str:
  """dest's every shard = the reduction of src's shards. The adds run in host memory (numpy, exact IEEE arithmetic: the
  same bits a device add gives); the strategies differ in the transfers. naive: every shard read whole, the result
  written whole to each device. ring: the buffer cut into n chunks, each chunk's partial passed from device to device
  (reduce-scatter, in device order), then each finished chunk sent to every device (all-gather). all2all: each chunk's
  owner reads that chunk from every device at once, folds it and sends it to all."""
  n, m = len(src.bufs), src.size
  strategy = strategy or pick_strategy(src.nbytes, n)
  if strategy == "naive":
    out = fold([to_host(b) for b in src.bufs], op)
    for b in dest.bufs: from_host(b, out)
    return strategy
  bounds, f, done = chunk_bounds(m, n), _NP_OP[op], []
  for c in range(n):
    lo, hi = bounds[c], bounds[c + 1]
    if strategy == "ring":
      acc = to_host(src.bufs[0], lo, hi)
      for b in src.bufs[1:]: f(acc, to_host(b, lo, hi), out=acc)  # the partial moves on to the next device, which adds its chunk
    else: acc = fold([to_host(b, lo, hi) for b in src.bufs], op)
    done.append((lo, acc))
  for b in dest.bufs:
    for lo, acc in done: from_host(b, acc, lo)
  return strategy
