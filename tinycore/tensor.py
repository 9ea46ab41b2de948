"""Tensor: the lazy, tinygrad-compatible user API. Every method builds UOps; realize() schedules and runs them."""
from __future__ import annotations
import functools, math, pathlib, weakref
from typing import Any, Callable
import numpy as np
from tinycore.dtype import DType, dtypes, to_dtype, least_upper_dtype, least_upper_float, sum_acc_dtype, acc_dtype, to_np_dtype, from_np_dtype, \
  dtype_min, dtype_max, round_to_odd_f32
from tinycore.helpers import argfix, prod, make_tuple, normalize_axis, ceildiv, all_int, fetch, TRAINING
from tinycore.uop import UOp, Ops, GroupOp, resolve, seed, bf16_to_f32, f32_to_bf16, sym_eval, ssimplify
from tinycore.runtime.device import Device, Buffer, canonicalize_device
from tinycore.schedule import buffers, new_buffer_uop, create_schedule, mark_done, unique_id, is_plain_view
from tinycore.engine import run_schedule
from tinycore.schedule_cache import create_schedule_cached
from tinycore.multi import split, layout_arg
from tinycore.gradient import compute_gradient, differentiable_graph
from tinycore.tensor_ops import NNOpsMixin, IndexingMixin, _broadcast_shape

# every live Tensor, by weak reference: a set of refs whose callback is the set's own discard (a WeakSet's add and its
# removal callback are Python calls, made for every Tensor built and freed)
_tensor_refs: set[weakref.ref] = set()
_tensor_gone, _weakref = _tensor_refs.discard, weakref.ref
def _all_tensors() -> list[Tensor]: return [t for r in list(_tensor_refs) if (t := r()) is not None]
# Pending effects: tensors with an assign not yet run, and tensors backward() was called on. A lazy graph reads buffers
# when it runs, so the next realize that assigns (an optimizer step) runs all of them too, in the one schedule that orders
# every read before the write: `opt.step(); loss.item()` is the loss the step came from, and a BatchNorm's running-stat
# update sees the weights of its own forward pass, as in eager PyTorch.
_pending_effects: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()  # by id: Tensor == is elementwise
_ASSIGN = Ops.ASSIGN   # read at every realize: an enum member through its class is an attribute lookup of the enum's metaclass

def _device_grid(devices: tuple | list) -> tuple[list, tuple[int, ...]]:
  """A tuple of devices, or a grid of them as nested tuples -> (the devices in row-major order, the grid's sizes)."""
  if not devices or not isinstance(devices[0], (tuple, list)): return list(devices), (len(devices),)
  rows = [_device_grid(r) for r in devices]
  if any(g != rows[0][1] for _, g in rows): raise ValueError(f"a grid of devices needs rows of equal shape, got {devices}")
  return [d for r, _ in rows for d in r], (len(rows),) + rows[0][1]

def _replicate(u: UOp, devices: tuple[str, ...]) -> UOp:
  """A single-device tensor copied whole to every device of a tuple."""
  return UOp(Ops.MULTI, u.dtype, (UOp(Ops.COPY, u.dtype, (u,), devices),), None)

def _np_to_buffer_uop(arr: np.ndarray, device: str | tuple[str, ...], dtype: DType) -> UOp:
  if isinstance(device, tuple): return _replicate(_np_to_buffer_uop(arr, device[0], dtype), device)
  if dtype == dtypes.bfloat16: raw = f32_to_bf16(round_to_odd_f32(arr))   # rounded once, from float64 too
  else: raw = np.ascontiguousarray(arr, dtype=to_np_dtype(dtype))
  if raw.size == 0: return UOp.const(dtype, 0, device, arr.shape)  # nothing to hold: no buffer
  u = new_buffer_uop(device, raw.size, dtype)
  data = memoryview(raw.reshape(-1)).cast("B")
  # a device that does not open here gets the data at its first allocation: the program still schedules and renders
  # (DEBUG=4 shows every kernel's source without the hardware), then fails where it first needs the device, saying why
  if Device.opens(device)[0]: buffers[u].copyin(data)
  else: buffers[u].initial = bytes(data)
  return u.reshape(arr.shape)

class _TensorMeta(type):
  """Tensor.training is the Context variable TRAINING: `Tensor.training = True`, `with Tensor.train():` and
  `with Context(TRAINING=1):` are one switch, which dropout and BatchNorm read."""
  @property
  def training(cls) -> bool: return bool(TRAINING)
  @training.setter
  def training(cls, mode: bool) -> None: TRAINING.value = int(bool(mode))

class Tensor(NNOpsMixin, IndexingMixin, metaclass=_TensorMeta):
  """A lazy n-dimensional array on a device. `Tensor([1., 2.]) * 2` builds a graph; `.numpy()`/`.realize()` run it."""
  __slots__ = ("uop", "requires_grad", "grad", "__weakref__")
  __array_ufunc__ = None  # `np.float32(2) * t` defers to Tensor.__rmul__ instead of numpy converting t to an array
  no_grad: bool = False
  _seed: int = 0
  _rng_counter: int = 0

  class train:
    """`with Tensor.train():` (or as a decorator) sets Tensor.training (the TRAINING Context variable) for the block."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self): self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc): Tensor.training = self.prev
    def __call__(self, fn):
      @functools.wraps(fn)
      def wrapper(*a, **kw):
        with Tensor.train(self.mode): return fn(*a, **kw)
      return wrapper

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None, requires_grad: bool | None = None):
    if data.__class__ is UOp and dtype is None and device is None and not requires_grad and data.dtype != dtypes.index:
      # every Tensor method's result: a built node taken as it is (the checks below change nothing for it)
      self.uop, self.requires_grad, self.grad = data, requires_grad, None
      _tensor_refs.add(_weakref(self, _tensor_gone))
      return
    dtype = to_dtype(dtype) if dtype is not None else None
    if isinstance(data, pathlib.Path): data = data.read_bytes()  # a file's bytes (tinygrad maps it from disk)
    if isinstance(data, UOp):
      if data.dtype == dtypes.index and data.device is None:
        # a symbolic integer (bound Variables and math on them) as a scalar tensor: give it a device and a storable dtype
        nodes = data.toposort()
        binds = [b for b in nodes if b.op is Ops.BIND]
        if len(binds) != len([v for v in nodes if v.op is Ops.DEFINE_VAR]):
          raise ValueError(f"a Tensor needs bound variables: {data.render()} has an unbound one; use Variable(...).bind(n)")
        dev = canonicalize_device(device)
        data = data.substitute({b: UOp(Ops.BIND, b.dtype, (b.src[0], UOp.const(b.dtype, b.src[1].arg, dev))) for b in binds})
        data = data.cast(dtype or dtypes.default_int)
      if dtype is not None and data.dtype != dtype: data = data.cast(dtype)
      self.uop = data
    elif data is None or isinstance(data, (bool, int, float)):
      dtype = dtype or (dtypes.default_float if data is None else dtypes.from_py(data))
      self.uop = UOp.const(dtype, 0 if data is None else data, canonicalize_device(device))
    elif isinstance(data, (bytes, bytearray, memoryview)):
      raw = bytes(data)  # the bytes reinterpreted as `dtype`, like torch.frombuffer
      if dtype is not None and len(raw) % dtype.itemsize: raise ValueError(f"{len(raw)} bytes do not divide into {dtype} elements of {dtype.itemsize} bytes")
      arr = np.frombuffer(raw, np.uint8)
      self.uop = _np_to_buffer_uop(arr, canonicalize_device(device), dtypes.uint8)
      if dtype not in (None, dtypes.uint8): self.uop = Tensor(self.uop).bitcast(dtype).uop
    elif isinstance(data, (list, tuple)):
      if dtype is None: dtype = _infer_dtype(data)
      arr = np.array(data, dtype=np.float64 if dtypes.is_float(dtype) else (np.bool_ if dtype == dtypes.bool else object))
      if arr.dtype == object and any(isinstance(v, (list, tuple)) for v in arr.reshape(-1)): raise ValueError(f"ragged nested list: every row must have the same length, got {data!r}")
      if dtypes.is_int(dtype): arr = _wrap_ints(arr, dtype)
      self.uop = _np_to_buffer_uop(arr, canonicalize_device(device), dtype)
    elif isinstance(data, np.ndarray) or np.isscalar(data):
      arr = np.asarray(data)
      if dtype is None: dtype = from_np_dtype(arr.dtype)
      self.uop = _np_to_buffer_uop(arr, canonicalize_device(device), dtype)
    elif isinstance(data, Tensor): self.uop = data.uop if dtype is None else data.uop.cast(dtype)
    else: raise TypeError(f"cannot make a Tensor from {type(data).__name__}; pass a list, number, numpy array, bytes or UOp")
    if device is not None and isinstance(data, (UOp, Tensor)) and self.device != canonicalize_device(device): self.uop = self.to(device).uop
    # a tensor made to require grad is a leaf of its own: hash-consing would make two Tensor.zeros(3, requires_grad=True)
    # (two LayerNorm biases) one node, and the gradient of either would be that of both
    if requires_grad and not _plain(self.uop) and not (self.uop.op is Ops.CONTIGUOUS and self.uop.arg is not None):
      self.uop = UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), unique_id())
    self.requires_grad: bool | None = requires_grad
    self.grad: Tensor | None = None
    _tensor_refs.add(_weakref(self, _tensor_gone))

  # ***** properties *****
  @property
  def shape(self) -> tuple[Any, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self.uop.device
  @property
  def ndim(self) -> int: return len(self.uop.shape)
  def numel(self) -> Any: return prod(self.shape)
  @property
  def max_shape(self) -> tuple[int, ...]: return tuple(int(s.vmax) if isinstance(s, UOp) else s for s in self.shape)
  def max_numel(self) -> int: return prod(self.max_shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def size(self, dim: int | None = None): return self.shape if dim is None else self.shape[normalize_axis(dim, self.ndim)]
  @property
  def T(self) -> Tensor: return self.transpose()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __iter__(self):
    if not self.shape: raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))
  def __repr__(self) -> str: return f"<Tensor {self.shape} {self.dtype} on {self.device}{' with grad' if self.grad is not None else ''}>"
  __hash__ = object.__hash__  # identity (== is elementwise); a C slot, no Python call per set or dict use
  def __bool__(self): raise TypeError("the truth value of a Tensor is ambiguous; use .item(), .any() or .all()")

  # ***** realization *****
  def schedule(self, *others: Tensor):
    items, _ = create_schedule([t.uop for t in (self,) + others])
    return items
  def realize(self, *others: Tensor, do_update_stats: bool = True) -> Tensor:
    Tensor.realize_all(self, *others)
    return self
  @staticmethod
  def realize_all(*tensors: Tensor) -> None:
    # Separately built tensors can hold one node (hash-consing merges equal graphs: Tensor.zeros(3) twice). Each gets a
    # buffer of its own, so an assign to one never changes the other: in this call a later one computes into its own
    # buffer (a unique contiguous), and a tensor not asked for keeps its lazy graph.
    # (_pending_effects.data: the weak dictionary's own map, whose emptiness is read without a Python-level __len__; an
    # entry of a tensor just freed can linger in it, which only sends this call down the general path)
    if len(tensors) == 1 and not _pending_effects.data and (u := (t := tensors[0]).uop).op is not _ASSIGN:
      if u.is_realized: return
      owner, outs = {u: t}, [u]   # one tensor, no assign anywhere (x.realize() in a loop): nothing to work out
    else:
      owner, outs = {}, []
      if _pending_effects and any(t.uop.op is Ops.ASSIGN for t in tensors):
        asked = {id(t) for t in tensors}
        tensors = (*tensors, *[t for t in list(_pending_effects.values()) if not t.uop.is_realized and id(t) not in asked])
        _pending_effects.clear()
      for t in tensors:
        if t.uop.is_realized: continue
        if owner.setdefault(t.uop, t) is not t:
          t.uop = UOp(Ops.CONTIGUOUS, t.dtype, (t.uop,), unique_id())
          owner[t.uop] = t
        outs.append(t.uop)
      if not outs: return
    items, result_map = create_schedule_cached(outs, create_schedule)
    run_schedule(items)
    becomes = result_map()
    # re-point the tensors that held a realized node at its buffer. The common answer first: one node realized, asked
    # by one tensor, not an assign. Otherwise an asked node goes to its owner only (unless an assign), and every tensor
    # alive is searched only when some other node (an assign, an inner contiguous) was realized.
    if len(becomes) == 1 and len(owner) == 1 and (x := next(iter(becomes))).op is not _ASSIGN and (t := owner.get(x)) is not None:
      t.uop = becomes[x]
      return
    mark_done(becomes)
    holders = _all_tensors() if any(x not in owner or x.op is Ops.ASSIGN for x in becomes) else [t for u, t in owner.items() if u in becomes]
    for t in holders:
      if (nu := becomes.get(t.uop)) is not None and (t.uop.op is Ops.ASSIGN or owner.setdefault(t.uop, t) is t): t.uop = nu
  def _buffer(self) -> Buffer:
    """The realized, contiguous buffer holding this tensor's data (a sharded tensor's gathered on its first device)."""
    if isinstance(self.device, tuple): return self.to(self.device[0])._buffer()
    u = self.uop
    if not _plain(u): u = self.contiguous().realize().uop
    while u.op is not Ops.BUFFER: u = u.src[0]
    return buffers[u]
  def _concrete_shape(self) -> tuple[int, ...]:
    """The shape with each bound variable replaced by its value (symbolic shapes come from Variable.bind)."""
    if all_int(self.shape): return self.shape
    def value(s):
      if not isinstance(s, UOp): return s
      u, vals = s.unbind_all()
      if any(v.arg[0] not in vals for v in u.variables()):
        raise ValueError(f"shape {self.shape} has an unbound variable: bind it (Variable(...).bind(n)) to read the data")
      return sym_eval(u, vals)
    return tuple(value(s) for s in self.shape)
  def data(self) -> memoryview:
    shape = self._concrete_shape()
    fmt = to_np_dtype(self.dtype)().dtype.char if self.dtype != dtypes.bfloat16 else "H"
    try: memoryview(b"").cast(fmt)
    except ValueError: raise TypeError(f"data(): this Python's memoryview has no {self.dtype} format ({fmt!r}); use .numpy()") from None
    if 0 in shape: return memoryview(b"").cast(fmt)  # memoryview refuses a 0 in a shape: a flat empty one, as tinygrad's
    mv = memoryview(self._buffer().as_bytes()).cast(fmt)
    return mv[:prod(shape)].cast("B").cast(fmt, shape if shape else ())
  def numpy(self) -> np.ndarray:
    shape = self._concrete_shape()
    if 0 in shape: return np.zeros(shape, to_np_dtype(self.dtype) if self.dtype != dtypes.bfloat16 else np.float32)
    raw = self._buffer().numpy()[:prod(shape)]  # a symbolic shape's buffer is sized for the variables' maximum
    if self.dtype == dtypes.bfloat16: raw = bf16_to_f32(raw)
    return raw.reshape(shape)
  def tolist(self) -> Any: return self.numpy().tolist()
  def item(self) -> Any:
    if self.numel() != 1: raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return self.numpy().reshape(()).item()
  def __array__(self, dtype=None, copy=None): return self.numpy() if dtype is None else self.numpy().astype(dtype)
  def to(self, device: str | tuple | None) -> Tensor:
    """A copy on another device; to a tuple of devices, the whole tensor on each (replicated; see shard)."""
    device = canonicalize_device(device)
    if device == self.device: return self
    cp = UOp(Ops.COPY, self.dtype, (self.uop,), device)
    ret = Tensor(UOp(Ops.MULTI, self.dtype, (cp,), None) if isinstance(device, tuple) and isinstance(self.device, str) else cp)
    ret.requires_grad, ret.grad = self.requires_grad, None if self.grad is None else self.grad.to(device)
    return ret
  def to_(self, device: str | tuple | None) -> Tensor:
    moved = self.to(device).realize()
    self.uop, self.grad = moved.uop, moved.grad
    return self
  def shard(self, devices: tuple | list, axis: int | tuple | None = None) -> Tensor:
    """This tensor split along `axis` over a tuple of devices, shard i on devices[i] (axis None: the whole tensor on each).
    Over a grid of devices (a nested tuple, rows of equal length), `axis` names the tensor axis each grid dimension
    splits (None: replicated along it): `x.shard(((d0, d1), (d2, d3)), axis=(0, 1))` gives device (i, j) block (i, j).
    The result is one tensor whose device is the flat tuple: every op works on it, and reductions over a split axis
    all-reduce between the devices that split it."""
    flat, grid = _device_grid(devices)
    if isinstance(self.device, tuple): raise RuntimeError(f"shard: this tensor is already on {self.device}; .to() one device first")
    if len(flat) == 1: return self.to(flat[0])
    devices = canonicalize_device(flat)
    axes = axis if isinstance(axis, tuple) else (axis,)
    if len(axes) != len(grid): raise ValueError(f"shard over a grid of {'x'.join(map(str, grid))} devices needs one axis (or None) per grid dimension, got axis={axis}")
    axes = tuple(None if a is None else normalize_axis(a, self.ndim) for a in axes)
    if len(set(a for a in axes if a is not None)) < len([a for a in axes if a is not None]):
      raise ValueError(f"shard: axis={axis} splits one tensor axis along two grid dimensions; split each axis along at most one")
    layout = layout_arg(tuple(zip(axes, grid)))
    if layout is None: return self.to(devices)
    ret = Tensor(UOp(Ops.MULTI, self.dtype, (split(UOp(Ops.COPY, self.dtype, (self.uop,), devices), layout),), layout))
    ret.requires_grad = self.requires_grad
    return ret
  def shard_(self, devices: tuple | list, axis: int | None = None) -> Tensor:
    self.uop = self.shard(devices, axis).uop
    return self
  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor placed the way y is: on y's device, or split over y's devices along y's axis (replicated if y is)."""
    if isinstance(y.device, str): return self.to(y.device)
    axis = y.uop.arg if y.uop.op is Ops.MULTI else None
    if isinstance(self.device, tuple):
      if self.device == y.device and self.uop.op is Ops.MULTI and self.uop.arg == axis: return self
      raise RuntimeError(f"shard_like: this tensor is already on {self.device}; .to() one device first")
    if isinstance(axis, tuple): raise ValueError(f"shard_like: y is split over a grid of devices; use shard(grid, axis=(...)) for that")
    return self.shard(y.device, axis)
  def clone(self, device: str | None = None) -> Tensor:
    # a plain buffer is copied through an add (cast back: bool + 0 is an int, which the bool CONTIGUOUS would misread)
    ret = Tensor(UOp(Ops.CONTIGUOUS, self.dtype, ((self + 0).cast(self.dtype).uop if is_plain_view(self.uop) else self.uop,), unique_id()),
                 requires_grad=self.requires_grad)
    return ret if device is None else ret.to(device)
  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    self.requires_grad = requires_grad
    return self
  # tinygrad's spelling: a parameter is a tensor an optimizer updates (requires_grad not False); is_param_(False) makes a
  # buffer the optimizer only realizes (BatchNorm's running statistics)
  @property
  def is_param(self) -> bool: return self.requires_grad is not False
  def is_param_(self, is_param: bool = True) -> Tensor: return self.requires_grad_(is_param)
  # unique: two contiguous() calls are two buffers, so assigning to one never changes the other
  def contiguous(self, **kwargs) -> Tensor: return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), unique_id()))
  def contiguous_backward(self) -> Tensor: return self._unary(Ops.CONTIGUOUS_BACKWARD)
  def detach(self) -> Tensor: return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), requires_grad=False)
  def assign(self, x: Tensor | Any) -> Tensor:
    """Write x into this tensor's buffer (shape and dtype must match); other tensors viewing it see the change.
    On a view of a realized tensor (a slice, transpose, flip, reshape, pad... of it: `x[0:2].assign(v)`), the write goes
    through to the viewed tensor's buffer, at once (like `x[0:2] = v`); positions the view pads are not written, and a
    view that repeats elements (expand) is refused. A view of an unrealized computation has no buffer to write through
    to: it gets one of its own (realize the base first to write into it)."""
    if not isinstance(x, Tensor):
      x = Tensor(x, device=self.device, dtype=self.dtype) if isinstance(x, (list, tuple, np.ndarray)) else Tensor.full(self.shape, x, device=self.device, dtype=self.dtype)
    if x.uop is self.uop: return self  # writing a tensor into itself changes nothing
    if x.shape != self.shape:  # x broadcasts to self's shape, as in tinygrad and PyTorch's copy_
      try: x = x._broadcast_to(self.shape)
      except ValueError: raise ValueError(f"assign: shape {x.shape} does not match {self.shape} (nor broadcast to it)") from None
    if x.dtype != self.dtype: raise RuntimeError(f"assign: dtype {x.dtype} does not match {self.dtype}; cast it first (x.cast({self.dtype}))")
    if x.device != self.device: x = x.to(self.device)
    if self.uop.op is not Ops.ASSIGN and not _plain(self.uop) and (written := self._assign_through_view(x)) is not None: return written
    # a pending assign already names the buffer: chain onto it lazily (x's graph reads the earlier write)
    target = self.uop.src[0] if self.uop.op is Ops.ASSIGN else self.uop
    if not _plain(target): target = self.uop = self.contiguous().realize().uop
    self.uop = UOp(Ops.ASSIGN, self.dtype, (target, x.uop), unique_id())
    _pending_effects[id(self)] = self
    return self
  def _assign_through_view(self, x: Tensor) -> Tensor | None:
    """Write x through the movement ops of self.uop into the storage under them (a BUFFER, or a pending ASSIGN to one);
    None where there is no storage under them. The inverse movements carry x and a mask of the written positions back to
    the storage's shape, and an ASSIGN there keeps the rest."""
    chain, u = [], self.uop
    while u.op in GroupOp.Movement or u.op in (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD): chain.append(u); u = u.src[0]
    if u.op not in (Ops.BUFFER, Ops.ASSIGN) and not (u.op is Ops.MULTI and _plain(u)): return None  # MULTI: a sharded buffer
    base = u
    val, mask = x.uop, UOp.const(dtypes.bool, True, self.device, self.shape)
    for m in chain:  # from the view down to the storage: undo each movement
      src = m.src[0]
      if m.op is Ops.EXPAND and src.shape != m.shape:
        raise ValueError(f"assign: this view repeats elements of its tensor (an expand from {src.shape} to {m.shape}), so a write "
                         "to it has no single meaning; write the tensor itself (t.assign(...) or t[idx] = v)")
      if m.op is Ops.RESHAPE or m.op is Ops.EXPAND: inv = lambda y, m=m, src=src: y.reshape(src.shape)
      elif m.op is Ops.SHRINK: inv = lambda y, m=m, src=src: y.pad(tuple((b, n - e) for (b, e), n in zip(m.arg, src.shape)))
      elif m.op is Ops.PAD: inv = lambda y, m=m, src=src: y.shrink(tuple((b, b + n) for (b, _), n in zip(m.arg, src.shape)))
      elif m.op is Ops.PERMUTE: inv = lambda y, m=m, src=src: y.permute(tuple(sorted(range(len(m.arg)), key=lambda i: m.arg[i])))
      elif m.op is Ops.FLIP: inv = lambda y, m=m, src=src: y.flip(m.arg)
      else: inv = lambda y, m=m, src=src: y
      val, mask = inv(val), inv(mask)
    target = base.src[0] if base.op is Ops.ASSIGN else base
    Tensor(UOp(Ops.ASSIGN, self.dtype, (target, mask.where(val, base)), unique_id())).realize()
    self.uop = self.uop.substitute({base: target})  # the view, now of the written buffer
    return self
  def replace(self, x: Tensor) -> Tensor:
    """Make this tensor x (its graph, dtype and device; the shapes must match): no data is written, other views keep the old data."""
    if x.shape != self.shape: raise ValueError(f"replace: shape {x.shape} does not match {self.shape}")
    self.uop = x.uop
    return self

  # ***** creation *****
  @staticmethod
  def full(shape, fill_value: Any, dtype: DType | str | None = None, device: str | None = None, buffer: bool = True,
           requires_grad: bool | None = None) -> Tensor:
    # tinygrad's buffer=False asks for a broadcast constant, which is what this always builds; realizing it makes the buffer
    shape = argfix(shape) if not isinstance(shape, int) else (shape,)
    if any(resolve(s < 0, False) for s in shape): raise ValueError(f"negative dimension in shape {shape}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
    return Tensor(UOp.const(dt, fill_value, canonicalize_device(device), shape), requires_grad=requires_grad)
  @staticmethod
  def zeros(*shape, **kw) -> Tensor: return Tensor.full(argfix(*shape), 0.0 if "dtype" not in kw else 0, **({"dtype": dtypes.default_float} | kw))
  @staticmethod
  def ones(*shape, **kw) -> Tensor: return Tensor.full(argfix(*shape), 1.0 if "dtype" not in kw else 1, **({"dtype": dtypes.default_float} | kw))
  @staticmethod
  def empty(*shape, dtype: DType | str | None = None, device: str | None = None, **kw) -> Tensor:
    shape = argfix(*shape)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    return Tensor(new_buffer_uop(canonicalize_device(device), prod(shape), dt).reshape(shape), **kw)
  @staticmethod
  def from_url(url: str, gunzip: bool = False, **kw) -> Tensor:
    """The bytes at url as a uint8 Tensor (or `dtype=`), through helpers.fetch's download cache (offline: OSError)."""
    return Tensor(fetch(url, gunzip=gunzip), **kw)
  @staticmethod
  def from_blob(ptr, shape, **kw) -> Tensor: raise NotImplementedError("from_blob is not supported; use Tensor(numpy_array)")
  def const_like(self, b, dtype: DType | str | None = None) -> Tensor: return Tensor.full(self.shape, b, dtype=dtype or self.dtype, device=self.device)
  def full_like(self, fill_value, dtype: DType | str | None = None, device: str | None = None, buffer: bool = True, **kw) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=device or self.device, buffer=buffer, **kw)
  def zeros_like(self, **kw) -> Tensor: return self.full_like(0, **kw)
  def ones_like(self, **kw) -> Tensor: return self.full_like(1, **kw)
  def empty_like(self, dtype: DType | str | None = None, device: str | None = None, **kw) -> Tensor:
    dtype, device = dtype or self.dtype, device or self.device
    if self.uop.op is Ops.MULTI and device == self.device:  # sharded the same way
      shard = Tensor.empty(self.uop.src[0].shape, dtype=dtype, device=device, **kw)
      return Tensor(UOp(Ops.MULTI, shard.dtype, (shard.uop,), self.uop.arg), requires_grad=kw.get("requires_grad"))
    return Tensor.empty(self.shape, dtype=dtype, device=device, **kw)
  @staticmethod
  def arange(start, stop=None, step=1, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must not be zero")
    n = max(math.ceil((stop - start) / step), 0)
    ends = (start, start + (n - 1) * step) if n else ()
    if dtype is not None: dt = to_dtype(dtype)
    elif any(isinstance(x, float) for x in (start, stop, step)): dt = dtypes.default_float
    else:  # an int range past the default int is int64, as in tinygrad
      dt = dtypes.default_int if all(dtypes.default_int.min <= v <= dtypes.default_int.max for v in ends) else dtypes.int64
    if not all(dt.min <= v <= dt.max for v in ends): raise OverflowError(f"arange [{start}, {stop}) step {step} does not fit {dt}: pick a wider dtype")
    if n == 0: return Tensor.full((0,), 0, dtype=dt, device=device)
    iota = Tensor(UOp(Ops.IOTA, dt, (UOp(Ops.DEVICE, arg=canonicalize_device(device)),), n))
    out = iota * step + start if (start, step) != (0, 1) else iota
    out.requires_grad = requires_grad
    return out
  @staticmethod
  def linspace(start, stop, steps: int, dtype=None, device=None) -> Tensor:
    if steps < 0: raise ValueError("linspace: steps must be >= 0")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if dt == dtypes.bool: raise ValueError("linspace has no bool form: take a float or int dtype and compare")
    if steps == 1: return Tensor([start], dtype=dt, device=device)
    return (Tensor.arange(steps, device=device).cast(dtypes.float32) * ((stop - start) / (steps - 1)) + start).cast(dt)
  @staticmethod
  def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad=None) -> Tensor:
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye: the sizes must not be negative, got n={n}, m={m}")
    r = Tensor.arange(n, device=device).reshape(n, 1) == Tensor.arange(m, device=device).reshape(1, m)
    return Tensor(r.cast(dtype or dtypes.default_float).uop, requires_grad=requires_grad)

  # ***** random: threefry2x32, counter based, so a seed gives the same numbers on every backend *****
  # Each rand call reads its call index and key from a small device buffer of its own (a "slot") instead of having them
  # baked into the kernel as constants: every call then runs the same compiled kernel. While TinyJit traces a function
  # (its first two calls) _rng_slots is a list recording (slot, call index); TinyJit rewrites the slots before each
  # replay, so a replayed rand draws the numbers the same call would draw without the jit, and follows manual_seed.
  _rng_slots: list[tuple[Tensor, int]] | None = None
  @staticmethod
  def manual_seed(seed: int = 0) -> None: Tensor._seed, Tensor._rng_counter = int(seed), 0
  @staticmethod
  def _rng_words(call: int) -> list[int]:
    """What a slot holds: [call index, key word 0, key word 1] as uint32."""
    return [call & 0xffffffff, Tensor._seed & 0xffffffff, (Tensor._seed >> 32) & 0xffffffff]
  @staticmethod
  def _threefry(c0: Tensor, c1: Tensor | int, k0: Tensor | int, k1: Tensor | int) -> Tensor:
    """threefry2x32-20 of the uint32 counters (c0, c1) under the key (k0, k1); the first output word. The key and c1 are
    Python ints (constants) or uint32 scalar Tensors (read from a buffer, as _random_bits does). Built on UOps directly:
    it runs for every rand call, and Tensor's broadcasting checks cost more than the ~100 nodes themselves."""
    base = c0.uop
    consts: dict[int, UOp] = {}
    def word(x) -> UOp:
      if isinstance(x, Tensor): return x.uop.reshape((1,) * len(base.shape)).expand(base.shape) if x.shape != base.shape else x.uop
      if (c := consts.get(x)) is None: c = consts[x] = base.const_like(x & 0xffffffff)
      return c
    ks = [word(k0), word(k1)]
    ks.append(ks[0] ^ ks[1] ^ word(0x1BD11BDA))
    rot = [13, 15, 26, 6, 17, 29, 16, 24]
    x0, x1 = base + ks[0], word(c1) + ks[1]
    for i in range(5):
      for r in (rot[:4] if i % 2 == 0 else rot[4:]):
        x0 = x0 + x1
        x1 = x1.alu(Ops.SHL, word(r)) | x1.alu(Ops.SHR, word(32 - r))
        x1 = x1 ^ x0
      x0 = x0 + ks[(i + 1) % 3]
      x1 = x1 + (ks[(i + 2) % 3] + word(i + 1))
    return Tensor(x0)
  @staticmethod
  def _random_bits(n: int, device: str | None) -> Tensor:
    """n uint32 words: threefry2x32-20 of (counter, call index) under the key (seed, 0)."""
    Tensor._rng_counter += 1
    call = Tensor._rng_counter
    dev = canonicalize_device(device)
    c0 = Tensor.arange(n, device=dev, dtype=dtypes.uint32)
    if n == 0: return c0
    # on a tuple of devices the words live on the first and are copied to all: TinyJit rewrites that one buffer
    home = Tensor(np.array(Tensor._rng_words(call), np.uint32), device=dev[0] if isinstance(dev, tuple) else dev)
    if Tensor._rng_slots is not None: Tensor._rng_slots.append((home, call))
    slot = home.to(dev) if isinstance(dev, tuple) else home
    return Tensor._threefry(c0, *(slot.shrink(((i, i + 1),)).reshape(()) for i in range(3)))
  @staticmethod
  def rand(*shape, dtype=None, device=None, requires_grad=None, contiguous: bool = True) -> Tensor:
    """Uniform in [0, 1): the top m random bits times 2^-m, m the dtype's significand width, so no value rounds up to 1."""
    shape = argfix(*shape)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dtypes.is_float(dt): raise TypeError(f"rand makes floats, not {dt}; use randint for integers")
    m = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 32}[dt]
    bits = Tensor._random_bits(prod(shape), device)
    f = bits._shr(32 - m).cast(dtypes.float64 if m > 24 else dtypes.float32) * (2.0 ** -m)
    out = f.cast(dt).reshape(shape)
    if contiguous: out = out.contiguous()
    out.requires_grad = requires_grad
    return out
  @staticmethod
  def randn(*shape, dtype=None, device=None, requires_grad=None, contiguous: bool = True) -> Tensor:
    """Standard normal by Box-Muller."""
    shape = argfix(*shape)
    u1, u2 = Tensor.rand(2, *shape, device=device, contiguous=False).split(1, 0)
    z = ((u1 * (2 * math.pi)).cos() * ((1 - u2).log() * -2).sqrt()).reshape(shape)
    out = z.cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)
    if contiguous: out = out.contiguous()
    out.requires_grad = requires_grad
    return out
  @staticmethod
  def randint(*shape, low: int = 0, high: int = 10, dtype=dtypes.int32, device=None, contiguous: bool = True) -> Tensor:
    if high <= low: raise ValueError(f"randint: high ({high}) must be > low ({low})")
    out = (Tensor.rand(*shape, device=device, contiguous=False) * (high - low) + low).floor().cast(dtype)
    return out.contiguous() if contiguous else out
  @staticmethod
  def randperm(n: int, device=None, dtype=dtypes.int32, **kw) -> Tensor:
    """A random permutation of 0..n-1 (argsort of uniform noise)."""
    return Tensor.rand(n, device=device, **kw).argsort().cast(dtype)   # an unknown keyword is rand's TypeError
  @staticmethod
  def uniform(*shape, low: float = 0.0, high: float = 1.0, dtype=None, **kw) -> Tensor:
    requires_grad, contiguous = kw.pop("requires_grad", None), kw.pop("contiguous", True)
    out = (Tensor.rand(*shape, contiguous=False, **kw) * (high - low) + low).cast(to_dtype(dtype) if dtype else dtypes.default_float)
    if contiguous: out = out.contiguous()
    out.requires_grad = requires_grad
    return out
  @staticmethod
  def normal(*shape, mean: float = 0.0, std: float = 1.0, **kw) -> Tensor:
    requires_grad, contiguous = kw.pop("requires_grad", None), kw.pop("contiguous", True)
    out = Tensor.randn(*shape, contiguous=False, **kw) * std + mean   # an unknown keyword is randn's TypeError
    if contiguous: out = out.contiguous()
    out.requires_grad = requires_grad
    return out
  @staticmethod
  def scaled_uniform(*shape, **kw) -> Tensor: return Tensor.uniform(*shape, low=-1.0, high=1.0, **kw) * (prod(argfix(*shape)) ** -0.5)
  @staticmethod
  def glorot_uniform(*shape, **kw) -> Tensor:
    shape = argfix(*shape)
    bound = math.sqrt(6 / (shape[0] + prod(shape[1:])))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kw)
  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, **kw) -> Tensor:
    shape = argfix(*shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kw)
  @staticmethod
  def kaiming_normal(*shape, a: float = 0.01, **kw) -> Tensor:
    shape = argfix(*shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return Tensor.normal(*shape, mean=0.0, std=std, **kw)
  def rand_like(self, **kw) -> Tensor: return Tensor.rand(*self.shape, **({"device": self.device, "dtype": self.dtype if dtypes.is_float(self.dtype) else None} | kw))
  def randn_like(self, dtype: DType | str | None = None, **kw) -> Tensor:
    return Tensor.randn(*self.shape, **({"device": self.device, "dtype": dtype or (self.dtype if dtypes.is_float(self.dtype) else None)} | kw))

  # ***** autograd *****
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = True) -> list[Tensor]:
    """d(self)/d(targets), like torch.autograd.grad: lazy tensors, usable for higher-order derivatives. A target self does
    not depend on (not in its graph, or only through comparisons, casts to int or detach) gets zeros, as in tinygrad;
    materialize_grads=False raises RuntimeError there instead, as torch.autograd.grad without allow_unused."""
    self._check_differentiable()
    if (bad := [t.dtype for t in targets if not dtypes.is_float(t.dtype)]): raise RuntimeError(f"only float tensors have gradients, got targets of {bad}")
    return self._gradient(targets, gradient, materialize_grads, None)
  def _gradient(self, targets, gradient: Tensor | None, materialize_grads: bool, order: dict[UOp, None] | None) -> list[Tensor]:
    if gradient is None:
      if self.shape != (): raise ValueError(f"gradient of a non-scalar tensor {self.shape} needs an explicit `gradient=`")
      gradient = Tensor(1.0, dtype=self.dtype, device=self.device)
    if gradient.shape != self.shape: raise ValueError(f"gradient shape {gradient.shape} does not match tensor shape {self.shape}")
    grads = compute_gradient(self.uop, gradient.uop, {t.uop for t in targets}, order)
    out = []
    for t in targets:
      if t.uop not in grads:
        if not materialize_grads: raise RuntimeError(f"tensor {t} is not part of the graph of this value (or its path was detached); leave materialize_grads=True for zeros")
        out.append(t.zeros_like())
      else: out.append(Tensor(grads[t.uop]))
    return out
  def _check_differentiable(self) -> None:
    if not dtypes.is_float(self.dtype):
      raise RuntimeError(f"only float tensors have gradients: this value is {self.dtype} (a comparison, argmax or cast to int "
                         "is not differentiable); differentiate a float value")
  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d(self)/dt into t.grad for every float tensor t in self's graph with requires_grad=True, and for every
    one computed from such a tensor (intermediates, self too) unless marked requires_grad=False: tinygrad 0.14's rule,
    where an op's result requires grad when an input does. A graph where no tensor sets requires_grad (tinygrad master
    has no such flag) gets grads for every float tensor in it not marked requires_grad=False, as tinygrad master does."""
    self._check_differentiable()
    if _plain(self.uop) and not any(t.requires_grad and t.uop is self.uop for t in _all_tensors()):
      raise RuntimeError("backward() on a tensor that was already realized: realizing replaces its graph with the computed "
                         "buffer, so there is nothing left to differentiate. Call backward() before .realize()/.numpy()/.item() on the loss")
    graph = differentiable_graph(self.uop)  # ordered, sources first
    live = [t for t in _all_tensors() if t.uop in graph]
    carries = {t.uop for t in live if t.requires_grad} or {t.uop for t in live}  # the nodes computed from a tensor that requires grad
    for u in graph:  # sources come first
      if u not in carries and not carries.isdisjoint(u.src): carries.add(u)
    targets = [t for t in live if t.requires_grad is not False and t.uop in carries and dtypes.is_float(t.dtype)]
    grads = self._gradient(targets, gradient, True, graph)
    for t, g in zip(targets, grads):
      if g.shape != t.shape: raise RuntimeError(f"internal error: gradient shape {g.shape} != tensor shape {t.shape}")
      t.grad = g if t.grad is None else (t.grad + g)
    _pending_effects[id(self)] = self
    return self

  # ***** unary and elementwise building blocks *****
  def _unary(self, op: Ops) -> Tensor: return Tensor(seed(UOp(op, (u := self.uop).dtype, (u,)), u.shape, u.device))
  def _alu(self, op: Ops, *others: Tensor) -> Tensor:
    return Tensor(UOp(op, dtypes.bool if op in GroupOp.Comparison else (others[-1].dtype if op is Ops.WHERE else self.dtype), (self.uop,) + tuple(o.uop for o in others)))
  def _broadcasted(self, y: Tensor | Any, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    # (a tensor operand is never a number: a + b, which _arith already asked, does not ask again)
    if y.__class__ is not Tensor and (c := _same_kind_const(self.uop, y)) is not None:
      y = Tensor(c)
      return (y, self) if reverse else (self, y)
    x = self
    if isinstance(y, np.generic): y = y.item()  # numpy scalars act like the Python numbers they hold
    if not isinstance(y, Tensor):
      if isinstance(y, UOp) and y.dtype == dtypes.index: y = Tensor(y, device=x.device)  # a symbolic int
      else:
        if not isinstance(y, (bool, int, float)): raise TypeError(f"cannot combine a Tensor with {type(y).__name__}")
        dt = x.dtype
        if isinstance(y, float) and not dtypes.is_float(x.dtype): dt = dtypes.default_float
        elif isinstance(y, int) and not isinstance(y, bool) and x.dtype == dtypes.bool: dt = dtypes.default_int
        if dt != x.dtype: x = x.cast(dt)
        y = Tensor(x.uop.const_like(y))  # already x's dtype, device and shape: nothing below changes either
        return (y, x) if reverse else (x, y)
    xu, yu = x.uop, y.uop   # read from the nodes: a Tensor property is a Python call, and this runs for every binary op
    if xu.device != yu.device: raise ValueError(f"tensors on different devices: {x.device} and {y.device}; move one with .to()")
    if reverse: x, y, xu, yu = y, x, yu, xu
    if match_dtype and xu.dtype is not yu.dtype:
      out = least_upper_dtype(xu.dtype, yu.dtype)
      x, y = x.cast(out), y.cast(out)
      xu, yu = x.uop, y.uop
    if (shape := xu.shape) == (yshape := yu.shape): return x, y
    if len(shape) == len(yshape) and all(a == b or b == 1 for a, b in zip(shape, yshape)):
      return x, Tensor(yu.broadcast_unchecked(yshape, shape))   # y broadcast along x's dims (x - x.max(axis, keepdim=True))
    shape = _broadcast_shape(shape, yshape)
    return x._broadcast_to(shape), y._broadcast_to(shape)
  def _broadcast_to(self, shape: tuple) -> Tensor:
    if self.shape == shape: return self
    if len(self.shape) > len(shape): raise ValueError(f"cannot broadcast {self.shape} to {shape}")
    padded = (1,) * (len(shape) - len(self.shape)) + self.shape
    if any(s != 1 and s != t for s, t in zip(padded, shape)): raise ValueError(f"cannot broadcast {self.shape} to {shape}")
    return Tensor(self.uop.broadcast_unchecked(padded, shape))   # checked just above
  def broadcast_to(self, *shape) -> Tensor:
    shape = argfix(*shape)
    return self._broadcast_to(tuple(s if s != -1 else self.shape[i - (len(shape) - self.ndim)] for i, s in enumerate(shape)))

  # ***** math *****
  def add(self, x, reverse=False) -> Tensor: return _arith(Ops.ADD, self, x, reverse)
  def sub(self, x, reverse=False) -> Tensor: return _arith(Ops.SUB, self, x, reverse)
  def mul(self, x, reverse=False) -> Tensor: return _arith(Ops.MUL, self, x, reverse)
  def div(self, x, reverse=False, rounding_mode: str | None = None) -> Tensor:
    """self / x. rounding_mode None: true division in float; 'trunc' or 'floor': rounded quotient in the common dtype.
    An integer division by 0 gives 0 (either rounding mode), the kernel IDIV semantics (uop.exec_alu); floats give inf/NaN."""
    # true division by a Python number happens in float: the number is never squeezed into an int dtype first
    if rounding_mode is None and isinstance(x, (int, float, np.generic)) and not dtypes.is_float(self.dtype): return self._float().div(x, reverse)
    a, b = self._broadcasted(x, reverse)
    if rounding_mode is None:
      a, b = a.cast(least_upper_float(a.dtype)), b.cast(least_upper_float(b.dtype))
      return _bin(Ops.FDIV, a, b)
    if a.dtype in (dtypes.float16, dtypes.bfloat16): return a.float().div(b.float(), rounding_mode=rounding_mode).cast(a.dtype)
    if rounding_mode == "trunc": return _bin(Ops.IDIV, a, b) if dtypes.is_int(a.dtype) else _bin(Ops.FDIV, a, b).trunc()
    if rounding_mode == "floor":
      if not dtypes.is_int(a.dtype): return _bin(Ops.FDIV, a, b).floor()
      q = _bin(Ops.IDIV, a, b)
      return q - ((q * b).ne(a) & ((a < 0) ^ (b < 0)) & b.ne(0)).cast(q.dtype)
    raise RuntimeError(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
  def idiv(self, x, reverse=False) -> Tensor: return self.div(x, reverse, rounding_mode="trunc")
  def mod(self, x, reverse=False) -> Tensor:
    """Python's %: the remainder of floor division, with the sign of x. An integer x of 0 gives 0, like the kernel MOD
    (uop.exec_alu) and `//` by 0 (so a == (a // b) * b + a % b holds except there); a float x of 0 gives NaN."""
    a, b = self._broadcasted(x, reverse)
    if a.dtype in (dtypes.float16, dtypes.bfloat16): return a.float().mod(b.float()).cast(a.dtype)  # a half quotient loses the remainder
    r = a.fmod(b)  # C's truncated remainder (0 for an integer b == 0), moved onto b's side when the signs differ
    out = (r.ne(0) & ((r < 0) ^ (b < 0))).where(r + b, r)
    if not dtypes.is_float(a.dtype): return out
    return r.eq(0).where((b < 0).where(-0.0, 0.0).cast(a.dtype), out)  # a zero remainder takes b's sign too: -0.0 % 2 is 0.0
  def __floordiv__(self, x): return self.div(x, rounding_mode="floor")
  def __rfloordiv__(self, x): return self.div(x, True, rounding_mode="floor")
  def neg(self) -> Tensor: return self._unary(Ops.NEG) if self.dtype != dtypes.bool else self.logical_not()
  def reciprocal(self) -> Tensor: return self.cast(least_upper_float(self.dtype))._unary(Ops.RECIP)
  def _clamp_scalar(self, x):
    """A Python int outside an int dtype's range acts like the nearest value the dtype holds (for max/min/clip)."""
    if isinstance(x, int) and not isinstance(x, bool) and dtypes.is_int(self.dtype): return min(max(x, dtype_min(self.dtype)), dtype_max(self.dtype))
    return x
  def maximum(self, x) -> Tensor: return _bin(Ops.MAX, *self._broadcasted(self._clamp_scalar(x)))
  def minimum(self, x) -> Tensor:
    a, b = self._broadcasted(self._clamp_scalar(x))
    return a._inverse()._bin_max(b._inverse())._inverse()
  def _bin_max(self, x: Tensor) -> Tensor: return _bin(Ops.MAX, self, x)
  def _inverse(self) -> Tensor:
    """An order-reversing bijection of the dtype: negation for floats, bitwise not for ints."""
    if dtypes.is_float(self.dtype): return -self
    if self.dtype == dtypes.bool: return self.logical_not()
    return self ^ (dtype_max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)
  def clip(self, min_=None, max_=None) -> Tensor:
    """Bounds by where, not maximum/minimum: a value on a bound passes its whole gradient through, as in PyTorch."""
    if min_ is None and max_ is None: raise RuntimeError("clip needs at least one of min_ or max_")
    out = self
    if min_ is not None: out = (out < (lo := self._clamp_scalar(min_))).where(lo, out)
    if max_ is not None: out = (out > (hi := self._clamp_scalar(max_))).where(hi, out)
    return out
  clamp = clip
  def where(self, x, y) -> Tensor:
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
      dt = dtypes.from_py(x) if not isinstance(y, float) else dtypes.from_py(y) if not isinstance(x, float) else dtypes.default_float
      if isinstance(x, float) or isinstance(y, float): dt = dtypes.default_float
      x = Tensor(UOp.const(dt, x, self.device))
    if isinstance(x, Tensor): x, y = x._broadcasted(y)
    else: y, x = y._broadcasted(x)
    cond = self.cast(dtypes.bool) if self.dtype != dtypes.bool else self
    shape = _broadcast_shape(cond.shape, x.shape)
    return Tensor(UOp(Ops.WHERE, x.dtype, (cond._broadcast_to(shape).uop, x._broadcast_to(shape).uop, y._broadcast_to(shape).uop)))
  def masked_fill(self, mask: Tensor, value) -> Tensor: return mask.where(value, self)
  def cast(self, dtype: DType | str) -> Tensor:
    dt = to_dtype(dtype)
    return self if self.dtype == dt else Tensor(self.uop.cast(dt))
  def bitcast(self, dtype: DType | str) -> Tensor:
    dt = to_dtype(dtype)
    if self.dtype == dt: return self
    if dt.itemsize != self.dtype.itemsize:
      if not self.shape or self.shape[-1] * self.dtype.itemsize % dt.itemsize:
        raise RuntimeError(f"bitcast {self.dtype} -> {dt} of shape {self.shape}: changing the element size needs a last dimension whose "
                           f"bytes divide into whole {dt.itemsize}-byte elements; reshape it first")
      return self._bitcast_resize(dt)
    return Tensor(self.uop.bitcast(dt))
  def _bitcast_resize(self, dt: DType) -> Tensor:
    """Bitcast between sizes through unsigned words: split or join little-endian bytes with shifts."""
    src_u = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
    a, n_in, n_out = self.bitcast(src_u[self.dtype.itemsize]), self.dtype.itemsize, dt.itemsize
    if n_out > n_in:
      k = n_out // n_in
      parts = a.reshape(*a.shape[:-1], a.shape[-1] // k, k).cast(src_u[n_out])
      words = sum(parts[..., i]._shl(8 * n_in * i) for i in range(k))
      return words.bitcast(dt)
    k = n_in // n_out
    pieces = [(a._shr(8 * n_out * i)).cast(src_u[n_out]) for i in range(k)]
    return Tensor.stack(*pieces, dim=-1).reshape(*a.shape[:-1], a.shape[-1] * k).bitcast(dt)
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def short(self) -> Tensor: return self.cast(dtypes.int16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)

  def _float(self) -> Tensor: return self.cast(least_upper_float(self.dtype))
  def exp2(self) -> Tensor: return self._float()._unary(Ops.EXP2)
  def log2(self) -> Tensor: return self._float()._unary(Ops.LOG2)
  def exp(self) -> Tensor: return (self._float() * (1 / math.log(2))).exp2()
  def log(self) -> Tensor: return self.log2() * math.log(2)
  def log10(self) -> Tensor: return self.log2() * math.log10(2)
  def sqrt(self) -> Tensor: return self._float()._unary(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def sin(self) -> Tensor: return self._float()._unary(Ops.SIN)
  def cos(self) -> Tensor: return ((math.pi / 2) - self._float()).sin()
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def trunc(self) -> Tensor: return self._unary(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def floor(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self) -> Tensor:
    """Round half to even, like numpy and PyTorch."""
    if not dtypes.is_float(self.dtype): return self
    f = self.floor()
    d = self - f
    f_even = (f * 0.5).floor() * 2 == f
    return (d > 0.5).where(f + 1, (d < 0.5).where(f, f_even.where(f, f + 1)))
  def frac(self) -> Tensor: return self - self.trunc()
  def abs(self) -> Tensor:
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    if not dtypes.is_float(self.dtype): return (self < 0).where(-self, self)
    return (self == 0).where(0.0, self.maximum(-self))  # MAX keeps NaN; max(-0.0, 0.0) may be -0.0, so zeros are set to +0.0
  def sign(self) -> Tensor:
    if self.dtype == dtypes.bool: return self
    s = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return self.isnan().where(self, s) if dtypes.is_float(self.dtype) else s
  def square(self) -> Tensor: return self * self
  def relu(self) -> Tensor: return (self <= 0).where(self.zeros_like(), self) if dtypes.is_float(self.dtype) else self.maximum(0)  # NaN passes
  def relu6(self) -> Tensor: return self.relu() - (self - 6).relu()
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor: return (self > 0).where(self, self * neg_slope)
  def elu(self, alpha: float = 1.0) -> Tensor: return self.relu() - alpha * (1 - self.exp()).relu()
  def celu(self, alpha: float = 1.0) -> Tensor: return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def selu(self, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor: return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))
  def _neg_abs_exp(self, scale: float) -> tuple[Tensor, Tensor]:
    """(x < 0, exp(-scale*|x|)): the exponential in (0, 1] that sigmoid and tanh are built from, so neither it nor its
    gradient can overflow (exp of a large |x| would be inf, and inf * 0 = NaN in the backward pass, first in float16).
    -|x| is a where on the sign, not abs(), whose gradient at 0 is 0."""
    x = self._float()
    neg = x < 0
    return neg, (neg.where(x, -x) * (scale / math.log(2))).exp2()
  def sigmoid(self) -> Tensor:
    """1/(1+exp(-x)) for x >= 0 and exp(x)/(1+exp(x)) below: stable forward and backward at any |x|, in any float dtype."""
    neg, e = self._neg_abs_exp(1.0)
    return neg.where(e, 1.0) / (1 + e)
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor: return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def logsigmoid(self) -> Tensor: return -(-self).softplus()
  def softplus(self, beta: float = 1.0) -> Tensor:
    x = self._float() * beta
    return (x.relu() + (1 + (-x.abs()).exp()).log()) * (1 / beta)
  def tanh(self) -> Tensor:
    """sign(x) * (1-t)/(1+t) with t = exp(-2|x|) in (0, 1]: odd, stable at any |x| (its gradient too)."""
    neg, t = self._neg_abs_exp(2.0)
    r = (1 - t) / (1 + t)
    return neg.where(-r, r)
  def sinh(self) -> Tensor: return (self.exp() - (-self).exp()) / 2
  def cosh(self) -> Tensor: return (self.exp() + (-self).exp()) / 2
  def atanh(self) -> Tensor: return ((1 + self) / (1 - self)).log() / 2
  def asinh(self) -> Tensor: return (self + (self.square() + 1).sqrt()).log()
  def acosh(self) -> Tensor: return (self + (self.square() - 1).sqrt()).log()
  def hardtanh(self, min_val=-1, max_val=1) -> Tensor: return self.clip(min_val, max_val)
  def gelu(self, approximate: str = "tanh") -> Tensor:
    """x * Phi(x): approximate='tanh' (tinygrad's default) or 'none' (the exact erf form)."""
    if approximate == "none": return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
    if approximate != "tanh": raise RuntimeError(f"gelu approximate must be 'tanh' or 'none', got {approximate!r}")
    # 0.5*(1 + tanh(u)) = sigmoid(2u): no 1 + (-1) cancellation for x < 0. The cubic sees x clipped to [-30, 30], where the
    # sigmoid has saturated in every dtype (exp(-1974) = 0 even in float64), so x**3 (x*x in the backward) cannot overflow.
    xc = self.clip(-30.0, 30.0)
    return self * ((2 * math.sqrt(2 / math.pi)) * (xc + 0.044715 * xc ** 3)).sigmoid()
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  def silu(self) -> Tensor: return self * self.sigmoid()
  swish = silu
  def mish(self) -> Tensor: return self * self.softplus().tanh()
  def softsign(self) -> Tensor: return self / (1 + self.abs())
  def hardswish(self) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def erf(self) -> Tensor:
    # Abramowitz & Stegun 7.1.26 (max error 1.5e-7)
    t = 1.0 / (1.0 + 0.3275911 * self.abs())
    y = 1.0 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-(self.square())).exp()
    return self.sign() * y
  def lerp(self, end: Tensor, weight) -> Tensor: return self + (end - self) * weight
  def pow(self, x, reverse: bool = False) -> Tensor:
    base, exp = (self, x) if not reverse else (x, self)
    if isinstance(base, np.generic): base = base.item()
    if isinstance(exp, np.generic): exp = exp.item()
    if not isinstance(base, Tensor):  # a Python base takes the exponent tensor's dtype when it is of the same kind, like any scalar
      kind_ok = dtypes.is_float(exp.dtype) or (isinstance(base, int) and not isinstance(base, bool) and dtypes.is_int(exp.dtype))
      base = Tensor(UOp.const(exp.dtype if kind_ok else dtypes.from_py(base), base, exp.device))
    if base.dtype == dtypes.bool and not (isinstance(exp, float) or isinstance(exp, Tensor) and dtypes.is_float(exp.dtype)): base = base.cast(dtypes.default_int)
    if isinstance(exp, int) and not isinstance(exp, bool) and exp < 0 and dtypes.is_int(base.dtype):
      raise RuntimeError(f"an integer tensor to the negative power {exp} is not an integer; cast the base to float first")
    integral = isinstance(exp, (int, float)) and not isinstance(exp, bool) and float(exp).is_integer() and abs(exp) <= 64
    if integral and (isinstance(exp, int) and exp >= 0 or dtypes.is_float(base.dtype)):  # exact repeated squaring
      if exp == 1: return base + 0  # a new tensor, as PyTorch's: base itself would alias (y = x ** 1; y += 1 changed x)
      out, b, e = None, base, abs(int(exp))
      while e:
        if e & 1: out = b if out is None else out * b
        b, e = b * b, e >> 1
      out = base.ones_like() if out is None else out if exp > 0 else out.reciprocal()
      return _pow_slopes(out, base, exp) if dtypes.is_float(base.dtype) else out
    if isinstance(exp, float) and abs(exp) == 0.5:  # PyTorch's sqrt and rsqrt here, NaN at -inf (C's pow: inf and 0)
      return _pow_slopes(base.sqrt() if exp > 0 else base.rsqrt(), base, exp)
    b, e = base._broadcasted(exp)
    if dtypes.is_int(b.dtype): return _int_pow(b, e)
    if b.dtype in (dtypes.float16, dtypes.bfloat16): return b.float().pow(e.float()).cast(b.dtype)  # computed in float32
    # C's pow (PyTorch's for a float exponent) as exp2(e*log2(m)), m the base the log can take: |b| where the sign is set
    # after (an integer e) or ignored (the base -inf), b itself otherwise (a negative finite base with a fractional e is
    # NaN). 1 for e == 0 and for m == 1 (1 ** nan, (-1) ** inf), where the log meets 0 * inf or NaN.
    ef = float(exp) if not isinstance(exp, Tensor) else None
    neg = b.bitcast({4: dtypes.int32, 8: dtypes.int64}[b.dtype.itemsize]) < 0  # the sign bit: -0.0 ** -1 is -inf
    e_int = e.trunc() == e if ef is None else ef.is_integer() or math.isinf(ef)
    m = (neg & ((b == -math.inf) | e_int)).where(-b, b)
    r = ((m == 1) | (e == 0)).where(1.0, (e * m.log2()).exp2())
    odd = e_int & ((e * 0.5).trunc() * 2 != e) if ef is None else ef.is_integer() and ef % 2 == 1
    return _pow_slopes((neg & odd).where(-r, r) if odd is not False else r, b, e if ef is None else ef)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, reverse=True)

  # comparisons, logic, bits
  def _cmp(self, op: Ops, x, reverse: bool = False) -> Tensor:
    if isinstance(x, np.integer): x = int(x)
    if isinstance(x, int) and not isinstance(x, bool) and dtypes.is_int(self.dtype) and not dtype_min(self.dtype) <= x <= dtype_max(self.dtype):
      # a Python int the dtype cannot hold compares by its exact value: every element lies on the same side of it
      above = x > dtype_max(self.dtype)
      return Tensor.full(self.shape, {Ops.CMPLT: above != reverse, Ops.CMPEQ: False, Ops.CMPNE: True}[op], dtype=dtypes.bool, device=self.device)
    return _bin(op, *self._broadcasted(x, reverse))
  def __lt__(self, x) -> Tensor: return self._cmp(Ops.CMPLT, x)
  def __gt__(self, x) -> Tensor: return self._cmp(Ops.CMPLT, x, reverse=True)
  def __ge__(self, x) -> Tensor: return (self > x) | self.eq(x)  # not `not <`: NaN compares false both ways
  def __le__(self, x) -> Tensor: return (self < x) | self.eq(x)
  def ne(self, x) -> Tensor: return self._cmp(Ops.CMPNE, x)
  def eq(self, x) -> Tensor: return self._cmp(Ops.CMPEQ, x)
  def __eq__(self, x) -> Tensor: return self.eq(x)  # type: ignore[override]
  def __ne__(self, x) -> Tensor: return self.ne(x)  # type: ignore[override]
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor(UOp.const(dtypes.bool, True, self.device))._broadcast_to(self.shape))
  def _bitwise(self, op: Ops, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype): raise TypeError(f"bitwise {op.name.lower()} needs integer or bool tensors, got {a.dtype}")
    return _bin(op, a, b)
  def bitwise_and(self, x, reverse: bool = False) -> Tensor: return self._bitwise(Ops.AND, x, reverse)
  def bitwise_or(self, x, reverse: bool = False) -> Tensor: return self._bitwise(Ops.OR, x, reverse)
  def bitwise_xor(self, x, reverse: bool = False) -> Tensor: return self._bitwise(Ops.XOR, x, reverse)
  def xor(self, x, reverse: bool = False) -> Tensor: return self._bitwise(Ops.XOR, x, reverse)
  def bitwise_not(self) -> Tensor:
    if dtypes.is_float(self.dtype): raise TypeError(f"bitwise not needs an integer or bool tensor, got {self.dtype}")
    return self.logical_not() if self.dtype == dtypes.bool else self ^ (dtype_max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)
  def __invert__(self): return self.bitwise_not()
  def _shl(self, n: int) -> Tensor: return _bin(Ops.SHL, self, Tensor(UOp.const(self.dtype, n, self.device))._broadcast_to(self.shape))
  def _shr(self, n: int) -> Tensor: return _bin(Ops.SHR, self, Tensor(UOp.const(self.dtype, n, self.device))._broadcast_to(self.shape))
  def _shift(self, op: Ops, x, reverse: bool) -> Tensor:
    """a << b, a >> b (arithmetic for signed a) in the common integer dtype; an amount of the bit width or more shifts
    every bit out (0, or -1 for a negative a >> b), as PyTorch's, where the SHL/SHR ops take the amount modulo the width."""
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_int(a.dtype): raise RuntimeError(f"{'<<' if op is Ops.SHL else '>>'} needs integer tensors and amounts, got {a.dtype}")
    out = _bin(op, a, b)
    fill = 0 if op is Ops.SHL or dtypes.is_unsigned(a.dtype) else (a < 0).where(-1, 0)
    return (b < 8 * a.dtype.itemsize).where(out, fill) if isinstance(x, Tensor) or x >= 8 * a.dtype.itemsize else out
  def lshift(self, x, reverse: bool = False) -> Tensor: return self._shift(Ops.SHL, x, reverse)
  def rshift(self, x, reverse: bool = False) -> Tensor: return self._shift(Ops.SHR, x, reverse)
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __rlshift__(self, x): return self.lshift(x, True)
  def __rrshift__(self, x): return self.rshift(x, True)
  def __and__(self, x): return self.bitwise_and(x)
  def __or__(self, x): return self.bitwise_or(x)
  def __xor__(self, x): return self.xor(x)
  def __rand__(self, x): return self._bitwise(Ops.AND, x, True)
  def __ror__(self, x): return self._bitwise(Ops.OR, x, True)
  def __rxor__(self, x): return self._bitwise(Ops.XOR, x, True)
  def isnan(self) -> Tensor: return self.ne(self)
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    return (self.eq(math.inf) & detect_positive) | (self.eq(-math.inf) & detect_negative)
  def isfinite(self) -> Tensor: return (self.isinf() | self.isnan()).logical_not()
  def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol*|other| elementwise; an infinity is close only to itself, NaN only with equal_nan."""
    both_finite = self.isfinite() & (other.isfinite() if isinstance(other, Tensor) else math.isfinite(other))
    close = (self == other) | (both_finite & ((self - other).abs() <= atol + rtol * (other.abs() if isinstance(other, Tensor) else abs(other))))
    if equal_nan and dtypes.is_float(self.dtype): close = close | (self.isnan() & (other.isnan() if isinstance(other, Tensor) else math.isnan(other)))
    return close
  def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    return self.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan).all()

  # inverse trigonometry from one odd polynomial: atan on [0, tan(pi/8)] after two range reductions
  def atan(self) -> Tensor:
    x = self._float()
    a = x.abs()
    big = a > 1
    t = big.where(big.where(a, 1.0).reciprocal(), a)  # atan(a) = pi/2 - atan(1/a); the inner where keeps 1/a finite
    mid = t > 0.41421356237309503
    u = mid.where((t - 1) / (t + 1), t)  # atan(t) = pi/4 + atan((t-1)/(t+1)), |u| <= tan(pi/8)
    u2 = u * u
    p = 0.0
    for k in range(8, -1, -1): p = p * u2 + (-1) ** k / (2 * k + 1)  # Taylor to u^17: error < 3e-9
    r = u * p
    r = mid.where(r + math.pi / 4, r)
    r = big.where(math.pi / 2 - r, r)
    return (x < 0).where(-r, r)
  def asin(self) -> Tensor:
    x = self._float()
    return (x / ((1 - x) * (1 + x)).sqrt()).atan()  # (1-x)(1+x) keeps precision near |x| = 1
  def acos(self) -> Tensor:
    x = self._float()
    return ((1 - x) / (1 + x)).sqrt().atan() * 2
  def copysign(self, other) -> Tensor:
    """|self| with the sign bit of other (so -0.0 and negative NaN count as negative)."""
    mag = self._float().abs()
    if not isinstance(other, Tensor): return -mag if math.copysign(1.0, other) < 0 else mag
    neg = other.bitcast({1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[other.dtype.itemsize]) < 0 if dtypes.is_float(other.dtype) else other < 0
    return neg.where(-mag, mag)
  def fmod(self, x) -> Tensor:
    """C fmod: the remainder of truncating division, with the sign of self; exact for floats (the MOD op, not a - trunc(a/b)*b,
    which loses the remainder once the quotient passes the mantissa). A float x of 0 gives NaN, an integer x of 0 gives 0."""
    a, b = self._broadcasted(x)
    if a.dtype in (dtypes.float16, dtypes.bfloat16): return a.float().fmod(b.float()).cast(a.dtype)
    return _bin(Ops.MOD, a, b)
  def logaddexp(self, other) -> Tensor:
    """log(exp(a) + exp(b)) without overflow."""
    a, b = self._float()._broadcasted(other)
    out = a.maximum(b) + (1 + (-(a - b).abs()).exp()).log()
    return ((a == b) & a.isinf()).where(a, out)  # inf - inf would be NaN

  def __neg__(self): return self.neg()
  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x, True)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x, True)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return Tensor(x).matmul(self) if not isinstance(x, Tensor) else x.matmul(self)
  def __iadd__(self, x): return self.assign(self + x)
  def __isub__(self, x): return self.assign(self - x)
  def __imul__(self, x): return self.assign(self * x)
  def __itruediv__(self, x): return self.assign(self / x)
  def __ifloordiv__(self, x): return self.assign(self // x)
  def __imod__(self, x): return self.assign(self % x)
  def __ipow__(self, x): return self.assign(self ** x)
  def __imatmul__(self, x): return self.assign(self @ x)
  def __iand__(self, x): return self.assign(self & x)
  def __ior__(self, x): return self.assign(self | x)
  def __ixor__(self, x): return self.assign(self ^ x)
  def __ilshift__(self, x): return self.assign(self << x)
  def __irshift__(self, x): return self.assign(self >> x)

  # ***** movement *****
  def reshape(self, shape, *args) -> Tensor:
    """New shape (ints, or one sequence); -1 infers a dim, None keeps the dim at that position."""
    shape = argfix(shape, *args)
    if None in shape: shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    if shape.count(-1) > 1: raise RuntimeError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
      # a symbolic dim kept as it is cancels out of the division (the simplifier does not divide by a Variable)
      have, want = list(self.shape), [s for s in shape if s != -1]
      for s in [s for s in want if isinstance(s, UOp) and s in have]: have.remove(s); want.remove(s)
      total, known = prod(have), prod(want)
      rem = ssimplify(total % known) if known != 0 else 1
      if known == 0 or not isinstance(rem, int) or rem: raise ValueError(f"cannot reshape {self.shape} to {shape}")
      shape = tuple(ssimplify(total // known) if s == -1 else s for s in shape)
    return Tensor(self.uop.reshape(shape)) if shape != self.shape else self
  def view(self, shape, *args) -> Tensor: return self.reshape(shape, *args)
  def expand(self, shape, *args) -> Tensor:
    shape = argfix(shape, *args)
    if len(shape) < self.ndim: raise ValueError(f"expand: {shape} has fewer dimensions than {self.shape}")
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    return self._broadcast_to(tuple(p if s == -1 else s for s, p in zip(shape, padded)))
  def permute(self, order, *args) -> Tensor:
    order = argfix(order, *args)
    axes = tuple(normalize_axis(o, self.ndim) for o in order)
    if sorted(axes) != list(range(self.ndim)): raise RuntimeError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
    return Tensor(self.uop.permute(axes))
  def flip(self, axis, *args) -> Tensor:
    axes = [normalize_axis(a, self.ndim) for a in argfix(axis, *args)]
    if len(set(axes)) != len(axes): raise RuntimeError(f"flip: a dim can appear once, got {argfix(axis, *args)}")
    return Tensor(self.uop.flip(tuple(i in axes for i in range(self.ndim))))
  def shrink(self, arg: tuple) -> Tensor:
    if len(arg) != self.ndim: raise ValueError(f"shrink: {len(arg)} ranges for a {self.ndim}-d tensor")
    return Tensor(self.uop.shrink(tuple((0, s) if a is None else a for a, s in zip(arg, self.shape))))
  def pad(self, padding, mode: str = "constant", value: float = 0.0) -> Tensor:
    """padding: per-dim ((before, after), ...) or torch-style flat (last dim first). Modes: constant, reflect, replicate, circular."""
    if isinstance(padding[0], (tuple, list)) or padding[0] is None:
      if len(padding) != self.ndim: raise ValueError(f"pad: {len(padding)} pairs for a {self.ndim}-d tensor")
      pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    else:
      if len(padding) % 2 or len(padding) // 2 > self.ndim: raise ValueError(f"pad: flat padding {padding} must have an even length <= 2*ndim")
      flat = list(padding) + [0] * (2 * self.ndim - len(padding))
      pairs = [(flat[2*i], flat[2*i+1]) for i in range(self.ndim)][::-1]
    if mode not in ("constant", "reflect", "replicate", "circular"): raise NotImplementedError(f"pad mode {mode!r} is not one of constant, reflect, replicate, circular")
    x = self
    if any(b < 0 or a < 0 for b, a in pairs):  # negative padding crops, as PyTorch's: a reflect or replicate pad first reads
      grow = [(max(b, 0), max(a, 0)) for b, a in pairs]   # the whole input, a circular one wraps around what is left
      if mode in ("reflect", "replicate"): x = x.pad(grow, mode=mode)
      x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))
      if mode in ("reflect", "replicate"): return x
      pairs = grow
    if mode == "constant":
      out = Tensor(x.uop.pad(tuple(pairs)))
      # padding of zeros (+0.0: PAD's own fill) or of nothing (a pool without padding): no mask
      if (value == 0 and math.copysign(1.0, value) > 0) or out.uop is x.uop: return out
      mask = Tensor(Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device).uop.pad(tuple(pairs)))
      return mask.where(out, value)
    for d, (b, a) in enumerate(pairs):
      if b == 0 and a == 0: continue
      n = x.shape[d]
      if mode == "reflect" and (b >= n or a >= n): raise ValueError(f"reflect padding {(b, a)} must be smaller than the dimension {n}")
      if mode == "circular" and (b > n or a > n): raise ValueError(f"circular padding {(b, a)} must be at most the dimension {n}")
      def sl(s, e): return x.shrink(tuple((s, e) if i == d else None for i in range(x.ndim)))
      if mode == "reflect": parts = [sl(1, b + 1).flip(d), x, sl(n - a - 1, n - 1).flip(d)]
      elif mode == "replicate": parts = [sl(0, 1).expand(*[b if i == d else s for i, s in enumerate(x.shape)]), x, sl(n - 1, n).expand(*[a if i == d else s for i, s in enumerate(x.shape)])]
      else: parts = [sl(n - b, n), x, sl(0, a)]
      x = Tensor.cat(*[p for p in parts if p.shape[d] != 0], dim=d)
    return x
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    if self.ndim < 2 and dim0 in (0, 1) and dim1 in (0, 1): return self
    order = list(range(self.ndim))
    a, b = normalize_axis(dim0, self.ndim), normalize_axis(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = normalize_axis(start_dim, self.ndim), normalize_axis(end_dim, self.ndim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e+1]),) + self.shape[e+1:])
  def unflatten(self, dim: int, sizes: tuple) -> Tensor:
    d = normalize_axis(dim, self.ndim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d+1:])
  def squeeze(self, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """Drop size-1 dims: all of them, or those among dim (an int or a tuple); a named dim of another size stays."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    ds = {normalize_axis(d, self.ndim) for d in make_tuple(dim, 1)}
    if self.ndim == 0: return self
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in ds or s != 1))
  def unsqueeze(self, dim: int) -> Tensor:
    d = normalize_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def repeat(self, repeats, *args) -> Tensor:
    reps = argfix(repeats, *args)
    if len(reps) < self.ndim: raise ValueError(f"repeat: {len(reps)} repeats for a {self.ndim}-d tensor")
    base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
    new_shape = [x for s in base.shape for x in (1, s)]
    exp_shape = [x for r, s in zip(reps, base.shape) for x in (r, s)]
    return base.reshape(new_shape).expand(exp_shape).reshape(tuple(r * s for r, s in zip(reps, base.shape)))
  def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
    x, d = (self.flatten(), 0) if dim is None else (self, normalize_axis(dim, self.ndim))
    return x.unsqueeze(d + 1).expand(*x.shape[:d+1], repeats, *x.shape[d+1:]).flatten(d, d + 1)
  def roll(self, shifts, dims=None) -> Tensor:
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    shifts, dims = make_tuple(shifts, 1), make_tuple(dims, 1)
    if len(shifts) != len(dims): raise RuntimeError(f"roll: {len(shifts)} shifts for {len(dims)} dims; give one shift per dim")
    x = self
    for s, d in zip(shifts, dims):
      d = normalize_axis(d, x.ndim)
      n = x.shape[d]
      if n == 0: continue
      s %= n
      if s: x = Tensor.cat(x.shrink(tuple((n - s, n) if i == d else None for i in range(x.ndim))), x.shrink(tuple((0, n - s) if i == d else None for i in range(x.ndim))), dim=d)
    return x
  def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
    if isinstance(self, (list, tuple)): return Tensor.cat(*self, dim=_list_form_dim(args, dim))  # Tensor.cat([a, b], 1), torch's form
    ts = (self,) + args
    d = normalize_axis(dim, self.ndim)
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ValueError(f"cat: shapes {[t.shape for t in ts]} differ outside dimension {d}")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    total, off, out = sum(t.shape[d] for t in ts), 0, None
    for t in ts:
      pads = tuple((off, total - off - t.shape[d]) if i == d else (0, 0) for i in range(self.ndim))
      # each piece where its own mask is true (a sum of zero-padded pieces adds +0.0 to every element: -0.0 became +0.0)
      p = t.cast(dt).pad(pads)
      out = p if out is None else Tensor(Tensor.ones(t.shape, dtype=dtypes.bool, device=t.device).uop.pad(pads)).where(p, out)
      off += t.shape[d]
    return out
  def stack(self, *args: Tensor, dim: int = 0) -> Tensor:
    if isinstance(self, (list, tuple)): return Tensor.stack(*self, dim=_list_form_dim(args, dim))
    ts = (self,) + args
    d = normalize_axis(dim, self.ndim + 1)
    return Tensor.cat(*[t.unsqueeze(d) for t in ts], dim=d)
  def split(self, sizes, dim: int = 0) -> list[Tensor]:
    d = normalize_axis(dim, self.ndim)
    if isinstance(sizes, int):
      if sizes <= 0: raise ValueError("split size must be positive")
      sizes = [min(sizes, self.shape[d] - i) for i in range(0, max(self.shape[d], 1), sizes)]
    if sum(sizes) != self.shape[d]: raise ValueError(f"split sizes {sizes} do not add up to {self.shape[d]}")
    out, off = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((off, off + s) if i == d else None for i in range(self.ndim))))
      off += s
    return out
  def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
    if chunks <= 0: raise ValueError("chunk: chunks must be positive")
    d = normalize_axis(dim, self.ndim)
    return self.split(ceildiv(self.shape[d], chunks) if self.shape[d] else 1, dim)
  def tril(self, diagonal: int = 0) -> Tensor: return self._tri(diagonal, lower=True)
  def triu(self, diagonal: int = 0) -> Tensor: return self._tri(diagonal, lower=False)
  def _tri(self, k: int, lower: bool) -> Tensor:
    r, c = self.shape[-2], self.shape[-1]
    rows = _iota(r, self.device).reshape(r, 1)
    cols = _iota(c, self.device).reshape(1, c)
    mask = (cols <= rows + k) if lower else (cols >= rows + k)
    return mask.where(self, self.zeros_like())

  # ***** reductions *****
  def _axes(self, axis) -> tuple[int, ...]:
    if axis.__class__ is int: return (normalize_axis(axis, len(self.uop.shape)),)   # the common case: one axis, no set to build
    return tuple(range(self.ndim)) if axis is None else tuple(dict.fromkeys(normalize_axis(a, self.ndim) for a in make_tuple(axis, 1)))
  def _reduce(self, op: Ops, axis, keepdim: bool) -> Tensor:
    axes = self._axes(axis)
    if self.ndim == 0: return self
    ret = Tensor(self.uop.r(op, axes))
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def _check_nonempty(self, axis, name: str) -> None:
    if self.ndim and any(self.shape[a] == 0 for a in self._axes(axis)): raise ValueError(f"{name} of an empty dimension has no identity (shape {self.shape}, axis {axis})")
  def sum(self, axis=None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
    inner = acc_dtype(acc)  # half sums accumulate in float
    return self.cast(inner)._reduce(Ops.ADD, axis, keepdim).cast(acc)
  def prod(self, axis=None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
    return self.cast(acc)._reduce(Ops.MUL, axis, keepdim)
  def max(self, axis=None, keepdim: bool = False) -> Tensor:
    self._check_nonempty(axis, "max")
    return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis=None, keepdim: bool = False) -> Tensor:
    self._check_nonempty(axis, "min")
    return self._inverse()._reduce(Ops.MAX, axis, keepdim)._inverse()
  def any(self, axis=None, keepdim: bool = False) -> Tensor: return self.bool()._reduce(Ops.MAX, axis, keepdim)
  def all(self, axis=None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    """The average in float (half inputs accumulate in float32); an empty reduction gives NaN like numpy."""
    n = prod(self.shape[a] for a in self._axes(axis))
    out_dt = least_upper_float(self.dtype)
    total = self.sum(axis, keepdim, dtype=acc_dtype(out_dt))
    return total.div(n).cast(out_dt)
  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    n = prod(self.shape[a] for a in self._axes(axis))
    x = self._float()
    sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return sq.div(max(n - correction, 0))  # n <= correction divides by zero: inf or NaN, like torch
  def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor: return self.var(axis, keepdim, correction).sqrt()
  def var_mean(self, axis=None, keepdim=False, correction=1): return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis=None, keepdim=False, correction=1): return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def _softmax(self, axis, dtype=None):
    x = self.cast(dtype) if dtype is not None else self._float()
    m = x - x._reduce(Ops.MAX, axis, True).detach()  # no emptiness check: softmax over an empty dim is just empty
    e = m.exp()
    return m, e, e.sum(axis, keepdim=True)
  def softmax(self, axis: int = -1, dtype=None) -> Tensor:
    if dtype is None and axis.__class__ is int and dtypes.is_float(dt := (u := self.uop).dtype) and (dev := u.device).__class__ is str \
       and -len(sh := u.shape) <= axis < len(sh) and all(s.__class__ is int for s in sh) and sh[axis] > 1:
      return Tensor(_softmax_nodes(u, axis % len(sh), dt, dev))
    _, e, ss = self._softmax(axis, dtype)
    return e / ss
  def log_softmax(self, axis: int = -1, dtype=None) -> Tensor:
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()
  def softmin(self, axis: int = -1, dtype=None) -> Tensor: return (-self).softmax(axis, dtype)
  def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) without overflow; an empty reduction gives -inf."""
    axes = self._axes(axis)
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape)) if keepdim else tuple(s for i, s in enumerate(self.shape) if i not in axes)
    if self.ndim and any(self.shape[a] == 0 for a in axes): return Tensor.full(out_shape, -math.inf, dtype=self._float().dtype, device=self.device)
    m = self.max(axis, keepdim=True).detach()
    m = m.isinf().where(0, m)
    out = (self - m).exp().sum(axis, keepdim=True).log() + m
    return out.reshape(out_shape)
  def logcumsumexp(self, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along axis, stable for every prefix (each prefix window has its own max)."""
    d = normalize_axis(axis, self.ndim)
    if self.ndim == 0 or self.shape[d] == 0: return self._float()
    return self._float().transpose(d, -1)._prefix_windows(-math.inf).logsumexp(-1).transpose(d, -1)
  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum (of the first NaN, if any, like numpy and torch)."""
    if axis is None: return self.flatten().argmax(0)
    d = normalize_axis(axis, self.ndim)
    n = self.shape[d]
    mx = self.max(d, keepdim=True)
    m = self == mx
    if dtypes.is_float(self.dtype): m = m | self.isnan()
    idx = _iota(n, self.device, reverse=True).reshape(tuple(n if i == d else 1 for i in range(self.ndim)))
    return (n - (m.where(idx, 0)).max(d, keepdim)).cast(dtypes.int32)
  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor: return self._inverse().argmax(axis, keepdim)
  def _prefix_windows(self, pad_value) -> Tensor:
    """(..., n) -> (..., n, n): row i holds x[0..i] preceded by pad_value (sliding windows over x padded by n-1 on the left)."""
    n = self.shape[-1]
    return self.pad(tuple([(0, 0)] * (self.ndim - 1) + [(n - 1, 0)]), value=pad_value)._pool((n,))
  def _cumulative(self, axis: int, op: Ops) -> Tensor:
    acc = sum_acc_dtype(self.dtype) if op is not Ops.MAX else self.dtype
    d = normalize_axis(axis, self.ndim)
    if self.ndim == 0 or self.shape[d] == 0: return self.cast(acc)
    win = self.cast(acc).transpose(d, -1)._prefix_windows({Ops.ADD: 0, Ops.MUL: 1}.get(op, dtype_min(acc)))
    out = win.sum(-1, dtype=acc) if op is Ops.ADD else win.prod(-1, dtype=acc) if op is Ops.MUL else win._reduce(Ops.MAX, -1, False)
    return out.transpose(d, -1)
  def cumsum(self, axis: int = 0) -> Tensor: return self._cumulative(axis, Ops.ADD)
  def cumprod(self, axis: int = 0) -> Tensor: return self._cumulative(axis, Ops.MUL)
  def _cum_extreme(self, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    """Running max/min and the index where it was (the last one among ties, like torch)."""
    d = normalize_axis(axis, self.ndim)
    if self.ndim == 0: return self, Tensor(0, dtype=dtypes.int32, device=self.device)
    n = self.shape[d]
    if n == 0: return self, self.cast(dtypes.int32)
    x = self.transpose(d, -1)
    x = x if largest else x._inverse()
    win = x._prefix_windows(dtype_min(x.dtype))
    best = win._reduce(Ops.MAX, -1, False).unsqueeze(-1)
    hit = win == best
    if dtypes.is_float(x.dtype): hit = hit | win.isnan()
    pos = _iota(n, self.device).reshape(*[1] * (x.ndim - 1), n)._prefix_windows(-1)
    idx = hit.where(pos, -1)._reduce(Ops.MAX, -1, False)
    # the value read at idx: its gradient goes to that one element, as PyTorch's does, not shared among the ties
    vals = (pos == idx.unsqueeze(-1)).where(win, 0).sum(-1, dtype=x.dtype)
    return (vals if largest else vals._inverse()).transpose(d, -1), idx.transpose(d, -1)
  def cummax(self, axis: int = 0) -> tuple[Tensor, Tensor]: return self._cum_extreme(axis, True)
  def cummin(self, axis: int = 0) -> tuple[Tensor, Tensor]: return self._cum_extreme(axis, False)

  # ***** linear algebra *****
  def dot(self, w: Tensor, dtype: DType | None = None) -> Tensor:
    xu, wu = self.uop, w.uop
    if dtype is None and len(xs := xu.shape) == 2 and len(ws := wu.shape) == 2 and (dt := xu.dtype) is wu.dtype and dtypes.is_float(dt) \
       and (dev := xu.device).__class__ is str and dev == wu.device and xs[1] == ws[0] and \
       all(s.__class__ is int and s > 1 for s in (*xs, ws[1])):
      return Tensor(_matmul_2d(xu, wu, xs[0], xs[1], ws[1], dt, dev))
    return self._dot(w, dtype)
  def _dot(self, w: Tensor, dtype: DType | None = None) -> Tensor:
    """dot for every shape and dtype (broadcast batch dims, 1-d operands, an accumulation dtype)."""
    if self.ndim == 0 or w.ndim == 0: raise RuntimeError(f"dot needs tensors with at least 1 dimension, got {self.shape} and {w.shape}")
    k_w = w.shape[-min(w.ndim, 2)]
    if self.shape[-1] != k_w: raise RuntimeError(f"matmul shape mismatch: {self.shape} @ {w.shape} ({self.shape[-1]} != {k_w})")
    x = self.reshape(*self.shape[:-1], *[1] * min(self.ndim - 1, w.ndim - 1, 1), self.shape[-1])
    wt = w.reshape(*w.shape[:-2], *[1] * min(self.ndim - 1, w.ndim - 1, 1), *w.shape[-min(w.ndim, 2):]).transpose(-1, -min(w.ndim, 2))
    a, b = x._broadcasted(wt)
    return (a * b).sum(-1, dtype=dtype)
  def matmul(self, x: Tensor, reverse: bool = False, dtype: DType | None = None) -> Tensor:
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device)
    return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)
  def linear(self, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
    x = self.cast(dtype) if dtype is not None else self
    out = x.mul(weight) if weight.ndim == 1 else x.dot(weight, dtype=dtype)
    return out + bias if bias is not None else out
  def sequential(self, ll: list[Callable]) -> Tensor: return functools.reduce(lambda x, f: f(x), ll, self)
  def qr(self) -> tuple[Tensor, Tensor]:
    """Householder QR of the last two dims (reduced: Q (..., m, k), R (..., k, n), k = min(m, n)), with LAPACK's signs:
    reflection k maps column k onto -sign(x0)*|x| e_k and is skipped where the column is already zero below the diagonal."""
    if self.ndim < 2: raise ValueError(f"qr needs a matrix, got shape {self.shape}")
    m, n = self.shape[-2:]
    lead = self.shape[:-2]
    R = self._float()
    Q = Tensor.eye(m, dtype=R.dtype, device=self.device).reshape(*[1] * len(lead), m, m).expand(*lead, m, m)
    rows = Tensor.arange(m, device=self.device)
    for k in range(min(m - 1, n)):
      x = (rows >= k).where(R[..., :, k], 0)  # column k from the diagonal down
      x0 = R[..., k:k + 1, k]
      norm = x.square().sum(-1, keepdim=True).sqrt()
      alpha = (x0 < 0).where(norm, -norm)
      v = x - (rows == k).where(alpha, 0)
      vn = v.square().sum(-1, keepdim=True).sqrt()
      v = (norm == x0.abs()).where(0, v / (norm == x0.abs()).where(1, vn))  # nothing below the diagonal: no reflection
      R = R - 2 * v.unsqueeze(-1) * (v.unsqueeze(-2) @ R)
      Q = Q - 2 * (Q @ v.unsqueeze(-1)) * v.unsqueeze(-2)
    kk = min(m, n)
    return Q[..., :, :kk], R[..., :kk, :].triu()
  def svd(self, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, Vh of the last two dims (A = U diag(S) Vh, S descending and non-negative; U (..., m, m) and Vh (..., n, n), or
    (..., m, k) and (..., k, n) with k = min(m, n) when not full_matrices). One-sided Jacobi (Hestenes): rotate pairs of
    A's columns until they are orthogonal, the same rotations applied to V = I; the column norms are then S. Pairs are
    taken round-robin (all n/2 disjoint pairs of a round in one set of tensor ops, n-1 rounds a sweep, every pair once),
    an ordering that converges like the cyclic one: quadratically once the columns are nearly orthogonal, in about
    log2(n)+2 sweeps to float32 precision (measured on random, ill-conditioned and rank-deficient matrices up to 32x32),
    so a fixed ceil(log2(n))+3 sweeps keep a sweep of margin. U comes from a Householder QR of the rotated columns, whose
    Q is orthonormal even where a singular value is zero, and completes U to m x m."""
    if self.ndim < 2: raise ValueError(f"svd needs a matrix, got shape {self.shape}")
    m, n = self.shape[-2:]
    if m < n:
      U, S, Vh = self.transpose(-2, -1).svd(full_matrices)
      return Vh.transpose(-2, -1), S, U.transpose(-2, -1)
    A = self._float()
    lead = (1,) * len(self.shape[:-2])
    # A stacked on V: a rotation of columns applies to both; an odd n gets a zero column, which no rotation moves
    B = A.cat(Tensor.eye(n, dtype=A.dtype, device=A.device).reshape(*lead, n, n).expand(*A.shape[:-2], n, n), dim=-2)
    B = B.pad((None,) * (B.ndim - 1) + ((0, n % 2),))
    h = B.shape[-1] // 2
    for _ in range(((n - 1).bit_length() + 3) * (2 * h - 1) if n > 1 else 0):
      X, Y = B[..., :h], B[..., h:].flip(-1)  # column k pairs with column 2h-1-k
      alpha, beta, gamma = X[..., :m, :].square().sum(-2), Y[..., :m, :].square().sum(-2), (X[..., :m, :] * Y[..., :m, :]).sum(-2)
      rot = gamma != 0
      zeta = (beta - alpha) / (2 * rot.where(gamma, 1))
      t = rot.where((zeta >= 0).where(1, -1) / (zeta.abs() + (1 + zeta.square()).sqrt()), 0)  # the smaller root of t^2+2*zeta*t=1
      c = (1 + t.square()).rsqrt().unsqueeze(-2)
      s = c * t.unsqueeze(-2)
      B = (c * X - s * Y).cat((s * X + c * Y).flip(-1), dim=-1)
      # the next round: every column but the first moves on one place; a buffer per round keeps each kernel one round deep
      B = B[..., :1].cat(B[..., 1:].roll(1, -1), dim=-1).contiguous()
    W, V = B[..., :m, :n], B[..., m:, :n]  # 2h-1 rounds (a sweep) bring every column back to its place
    S, order = W.square().sum(-2).sqrt().sort(-1, descending=True)
    W, V = W.gather(-1, order.unsqueeze(-2).expand(W.shape)), V.gather(-1, order.unsqueeze(-2).expand(V.shape))
    # W = A V has orthogonal columns, so W = Q R with R diagonal (+-S); U is Q with R's signs. An identity beside W makes Q m x m
    eye = Tensor.eye(m, dtype=A.dtype, device=A.device).reshape(*lead, m, m).expand(*A.shape[:-2], m, m)
    Q, R = (W.cat(eye, dim=-1) if full_matrices and m > n else W).qr()
    sign = (R.diagonal(0, -2, -1)[..., :n] < 0).where(-1, 1).pad((None,) * len(lead) + ((0, Q.shape[-1] - n),), value=1)
    return Q * sign.unsqueeze(-2).cast(Q.dtype), S, V.transpose(-2, -1)

  # ***** hashing *****
  def keccak(self, cfg: str | tuple[int, int] = "sha3_256") -> Tensor:
    """SHA-3 or SHAKE (by name, or a (rate in bytes, domain suffix byte) sponge) over the last dim's little-endian bytes:
    (..., L) -> (..., (200 - rate) // 2) uint8, one digest per row (SHAKE: 16 or 32 bytes). Rows hash side by side; blocks one
    after another, each a Keccak-f[1600] permutation of 24 rounds, one kernel each (_keccak_round); realizes each block's state."""
    if isinstance(cfg, str) and cfg not in _KECCAK_CFGS: raise ValueError(f"unknown keccak config {cfg!r}: use one of {sorted(_KECCAK_CFGS)} or (rate, suffix)")
    rate, suffix = _KECCAK_CFGS[cfg] if isinstance(cfg, str) else cfg
    if not (isinstance(rate, int) and 0 < rate < 200 and rate % 8 == 0 and isinstance(suffix, int) and 0 < suffix < 0x80):
      raise ValueError(f"keccak needs a rate in bytes, a multiple of 8 below 200, and a domain suffix byte below 0x80, got {cfg!r}")
    if self.ndim == 0: raise ValueError("keccak hashes along the last dim, which a 0-d tensor lacks: reshape it to (1,)")
    if not all_int(self.shape): raise ValueError("keccak needs a concrete shape: bind or substitute the Variables first")
    data = self.bitcast(dtypes.uint8)
    lead, n = data.shape[:-1], data.shape[-1]
    rows, npad, out = prod(lead), rate - n % rate, (200 - rate) // 2
    if rows == 0: return Tensor.zeros(*lead, out, dtype=dtypes.uint8, device=self.device)
    # pad10*1 after the message: the suffix bits, zeros, a final 1 bit (one byte holds both ends when npad is 1)
    pad = np.zeros(npad, np.uint8)
    pad[0] = suffix
    pad[-1] |= 0x80
    data = data.reshape(rows, n).cat(Tensor(pad, device=self.device).reshape(1, npad).expand(rows, npad), dim=1)
    blocks = data.reshape(rows, -1, rate).pad((None, None, (0, 200 - rate))).bitcast(dtypes.uint64).reshape(rows, -1, 5, 5).contiguous().realize()
    permute = _keccak_permutation(self.device, rows)
    state = Tensor.zeros(rows, 5, 5, dtype=dtypes.uint64, device=self.device)
    block = UOp.variable("keccak_block", 0, blocks.shape[1] - 1)
    for b in range(blocks.shape[1]):
      # absorbing apart, so the permutation reads a plain buffer and its graph is the same each block: the schedule cache replays
      # it; the block is picked by a bound Variable, so one absorbing kernel serves every block
      v = block.bind(b)
      state = permute((state ^ blocks[:, v:v + 1].reshape(rows, 5, 5)).contiguous().realize()).realize()
    return state.reshape(rows, 25).bitcast(dtypes.uint8)[:, :out].reshape(*lead, out)

  def hash(self) -> Tensor:
    """tinygrad's 16-byte hash of the tensor's bytes: each MiB (zero-padded) is hashed as its 256 4-KiB pieces' shake_128
    digests (16 bytes each), hashed again with shake_128; more than one MiB gives a digest per MiB, hashed the same way."""
    data = self.flatten().bitcast(dtypes.uint8)
    if not isinstance(data.shape[0], int): raise ValueError("hash needs a concrete shape: bind or substitute the Variables first")
    mib = 1 << 20
    while True:
      chunks = max(1, ceildiv(data.shape[0], mib))
      data = data.pad(((0, chunks * mib - data.shape[0]),)).reshape(chunks * 256, 4096).keccak("shake_128")
      data = data.reshape(chunks, 4096).keccak("shake_128").flatten()
      if chunks == 1: return data

_KECCAK_CFGS = {"sha3_224": (144, 6), "sha3_256": (136, 6), "sha3_384": (104, 6), "sha3_512": (72, 6), "shake_128": (168, 31), "shake_256": (136, 31)}

def _keccak_constants() -> tuple[list[int], list[int]]:
  """From the spec's definitions: rho's rotation of each lane x+5y (walking (x,y) -> (y, 2x+3y) from (1,0), the t-th lane
  turns by (t+1)(t+2)/2), and iota's 24 round constants (bit 2^j-1 of round i from the LFSR x^8+x^6+x^5+x^4+1)."""
  rot, (x, y) = [0] * 25, (1, 0)
  for t in range(24): rot[x + 5 * y], (x, y) = (t + 1) * (t + 2) // 2 % 64, (y, (2 * x + 3 * y) % 5)
  lfsr, rcs = 1, []
  for _ in range(24):
    rc = 0
    for j in range(7):
      if lfsr & 1: rc |= 1 << ((1 << j) - 1)
      lfsr = ((lfsr << 1) ^ 0x171) if lfsr & 0x80 else lfsr << 1
    rcs.append(rc)
  return rot, rcs

def _cyclic(t: Tensor, axis: int, s: int) -> Tensor:
  """t[..., (i + s) % n, ...] along axis: a repeat and a shrink, so the kernel computes the index instead of selecting."""
  reps = [2 if i == axis else 1 for i in range(t.ndim)]
  return t.repeat(reps).shrink(tuple((s, s + t.shape[axis]) if i == axis else None for i in range(t.ndim)))

def _keccak_round(a: Tensor, rot_mul: Tensor, rot_div: Tensor, rc: Tensor) -> Tensor:
  """One Keccak-f[1600] round of states (rows, 5, 5) uint64, lane x+5y at [y, x]: theta, rho, pi, chi and iota read the
  previous state at index expressions only (no gather, no select), so the scheduler makes the round one kernel."""
  rows = a.shape[0]
  c = a[:, 0:1] ^ a[:, 1:2] ^ a[:, 2:3] ^ a[:, 3:4] ^ a[:, 4:5]  # theta: each column's parity
  c1 = _cyclic(c, 2, 1)
  a = a ^ _cyclic(c, 2, 4) ^ (c1 << 1) ^ (c1 >> 63)
  a = a * rot_mul | a // rot_div  # rho: rotate left by r as a wrapping multiply by 2^r and a divide by 2^(64-r)
  # pi: lane (x, y) moves to (y, 2x+3y), so out[y', x'] = a[x', (x'+3y') % 5]: read along row x' at flat 26x'+3y' of a
  # copy of a repeated 5 times along x (row x' starts at 25x')
  a = a.repeat(1, 1, 5).reshape(rows, 125).pad((None, (0, 5))).reshape(rows, 5, 26)[:, :, :15].reshape(rows, 5, 5, 3)[..., 0].transpose(1, 2)
  return a ^ (~_cyclic(a, 2, 1) & _cyclic(a, 2, 2)) ^ rc  # chi, then iota on lane 0

@functools.lru_cache(maxsize=8)  # each holds its round constants on the device
def _keccak_permutation(device: str, rows: int) -> Callable[[Tensor], Tensor]:
  """Keccak-f[1600] (24 rounds) of `rows` states on device. Every block of every message is the same graph on another
  state: it is built once, on a placeholder, and each call substitutes its state in (cheaper than building it again; the
  schedule cache then replays the 24 kernels, which share one compiled program: a round constant is a buffer)."""
  rot, rcs = _keccak_constants()
  u64 = lambda v: Tensor(np.array(v, np.uint64).reshape(5, 5), device=device).realize()
  rot_mul, rot_div = u64([(1 << r) % (1 << 64) if r else 0 for r in rot]), u64([1 << (64 - r) if r else 1 for r in rot])
  placeholder = state = Tensor.empty(rows, 5, 5, dtype=dtypes.uint64, device=device)
  for rc in rcs: state = _keccak_round(state, rot_mul, rot_div, u64([rc] + [0] * 24)).contiguous()
  graph = state.uop
  return lambda x: Tensor(graph.substitute({placeholder.uop: x.uop}))

def _pow_gradient(ctx: UOp, ret: UOp) -> tuple[UOp, ...]:
  """PyTorch's slopes of b ** e: d/db = e * b ** (e-1) (0 where e == 0), d/de = b ** e * ln(b) (0 where b == 0 and e >= 0).
  Given as formulas, not derived from how the value is built: there wheres pick the value at special bases and exponents
  (slope 0, or 0 * inf), and no composition of ops has the value +inf with the slope +inf of (-inf) ** 3.3."""
  g, b, e = Tensor(ctx), Tensor(ret.src[1]), Tensor(ret.src[2]) if len(ret.src) > 2 else ret.arg[1]
  if not isinstance(e, Tensor): return ((g * (e * b.pow(e - 1)) if e != 0 else g.zeros_like()).uop,)
  return ((g * (e == 0).where(0.0, e * b.pow(e - 1))).uop, (g * ((b == 0) & (e >= 0)).where(0.0, Tensor(ret) * b.log())).uop)

def _pow_slopes(value: Tensor, b: Tensor, e: Tensor | float) -> Tensor:
  """value (b ** e) with _pow_gradient's slopes; a Python exponent e is kept in the arg."""
  ins = (b.uop, e.uop) if isinstance(e, Tensor) else (b.uop,)
  return Tensor(UOp(Ops.CUSTOM_GRADIENT, value.dtype, (value.uop, *ins), (_pow_gradient, None if isinstance(e, Tensor) else e)))

def _int_pow(b: Tensor, e: Tensor) -> Tensor:
  """Exact integer power by square-and-multiply over the exponent's bits; negative exponents give 0 (|base|>1)."""
  e = e.cast(b.dtype)
  neg = e < 0
  ea = neg.where(0, e)
  out, base = b.ones_like(), b
  for i in range(8 * b.dtype.itemsize - (0 if dtypes.is_unsigned(b.dtype) else 1)):
    bit = (ea._shr(i) & 1).eq(1)
    out = bit.where(out * base, out)
    base = base * base
  inv = (b == 1).where(1, (b == -1).where((e & 1).eq(1).where(-1, 1), 0)) if not dtypes.is_unsigned(b.dtype) else (b == 1).where(1, 0)
  return neg.where(inv.cast(b.dtype), out)

def _list_form_dim(args: tuple, dim: int) -> int:
  """torch.cat/stack(tensors, dim): after the list, the one positional argument is the dim."""
  if not args: return dim
  if len(args) == 1 and isinstance(args[0], int): return args[0]
  raise ValueError(f"after a list of tensors the only positional argument is dim, got {args!r}: pass the tensors either as one list or as separate arguments")

def _same_kind_const(xu: UOp, y: Any) -> UOp | None:
  """A Python float with a float tensor's node, or an int with a non-bool one's (x * 2, x + 1): the constant of x's
  dtype, device and shape (no cast, no promotion); None for anything else."""
  if ((cls := y.__class__) is float and dtypes.is_float(xu.dtype)) or (cls is int and xu.dtype is not dtypes.bool): return xu.const_like(y)
  return None

def _arith(op: Ops, x: Tensor, y: Any, reverse: bool) -> Tensor:
  """x op y (y op x when reversed) for ADD, SUB and MUL. A Python number of x's kind goes into the node directly, without a
  tensor for it or broadcasting to work out (`x + 1` in a loop: the same node as through _broadcasted, tested)."""
  if (c := _same_kind_const(xu := x.uop, y)) is not None:
    return Tensor(seed(UOp(op, xu.dtype, (c, xu) if reverse else (xu, c)), xu.shape, xu.device))
  a, b = x._broadcasted(y, reverse)
  return _bin(op, a, b) if op is not Ops.SUB or a.dtype is not dtypes.bool else a ^ b   # a bool difference is xor

def _bin(op: Ops, a: Tensor, b: Tensor) -> Tensor:
  """a op b, of a's shape (operands broadcast already) and device."""
  au, bu = a.uop, b.uop
  return Tensor(seed(UOp(op, dtypes.bool if op in GroupOp.Comparison else au.dtype, (au, bu)), au.shape, au.device if au.device is not None else bu.device))

def _matmul_2d(xu: UOp, wu: UOp, n: int, k: int, m: int, dt: DType, dev: str) -> UOp:
  """(n, k) @ (k, m) of one float dtype, every size above 1: the nodes Tensor.dot's general path builds, node for node
  (hash-consing makes them the very same nodes: tested), without its eight intermediate tensors and shape checks. A
  matmul called from Python each time (a Linear layer, a benchmark) spent ~40 us building its graph through them."""
  nmk = (n, m, k)
  a = seed(UOp(Ops.EXPAND, dt, (seed(UOp(Ops.RESHAPE, dt, (xu,), (n, 1, k)), (n, 1, k), dev),), nmk), nmk, dev)
  wt = seed(UOp(Ops.PERMUTE, dt, (seed(UOp(Ops.RESHAPE, dt, (wu,), (1, k, m)), (1, k, m), dev),), (0, 2, 1)), (1, m, k), dev)
  prod_ = seed(UOp(Ops.MUL, dt, (a, seed(UOp(Ops.EXPAND, dt, (wt,), nmk), nmk, dev))), nmk, dev)
  inner = acc_dtype(dt)   # half sums accumulate in float (Tensor.sum)
  if inner is not dt: prod_ = seed(UOp(Ops.CAST, inner, (prod_,)), nmk, dev)
  out = seed(UOp(Ops.RESHAPE, inner, (seed(UOp(Ops.REDUCE_AXIS, inner, (prod_,), (Ops.ADD, (2,))), (n, m, 1), dev),), (n, m)), (n, m), dev)
  return out if inner is dt else seed(UOp(Ops.CAST, dt, (out,)), (n, m), dev)

def _softmax_nodes(xu: UOp, ax: int, dt: DType, dev: str) -> UOp:
  """softmax of a float tensor along axis `ax` (longer than 1): the nodes Tensor.softmax's general path builds, node for
  node (tested as _matmul_2d is), without its ten intermediate tensors (attention calls it from Python every step)."""
  shape = xu.shape
  kept = shape[:ax] + (1,) + shape[ax + 1:]
  wide = lambda u: seed(UOp(Ops.EXPAND, u.dtype, (u,), shape), shape, dev)
  top = seed(UOp(Ops.DETACH, dt, (seed(UOp(Ops.REDUCE_AXIS, dt, (xu,), (Ops.MAX, (ax,))), kept, dev),)), kept, dev)
  shifted = seed(UOp(Ops.SUB, dt, (xu, wide(top))), shape, dev)
  e = seed(UOp(Ops.EXP2, dt, (seed(UOp(Ops.MUL, dt, (shifted, UOp.const(dt, 1 / math.log(2), dev, shape))), shape, dev),)), shape, dev)
  inner = acc_dtype(dt)   # half sums accumulate in float (Tensor.sum)
  total = seed(UOp(Ops.REDUCE_AXIS, inner, (e if inner is dt else seed(UOp(Ops.CAST, inner, (e,)), shape, dev),), (Ops.ADD, (ax,))), kept, dev)
  if inner is not dt: total = seed(UOp(Ops.CAST, dt, (total,)), kept, dev)
  return seed(UOp(Ops.FDIV, dt, (e, wide(total))), shape, dev)

def _iota(n: int, device: str, reverse: bool = False) -> Tensor:
  """[0..n) (or [n..1] reversed) as int32 without host data."""
  i = Tensor.arange(n, device=device, dtype=dtypes.int32)
  return (n - i) if reverse else i

def _storage(u: UOp) -> UOp:
  """Through reshapes (and a sharded tensor's MULTI) to the node under them: a BUFFER for a plain realized tensor."""
  if u.op is Ops.MULTI: u = u.src[0]
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u

def _plain(u: UOp) -> bool: return _storage(u).op is Ops.BUFFER

def _infer_dtype(data) -> DType:
  flat = list(_flatten_list(data))
  if any(isinstance(x, Tensor) for x in flat): raise TypeError("cannot build a Tensor from a list of Tensors; use Tensor.stack")
  if any(isinstance(x, float) for x in flat): return dtypes.default_float
  if flat and all(isinstance(x, bool) for x in flat): return dtypes.bool
  if any(isinstance(x, int) for x in flat) or not flat: return dtypes.default_int if flat else dtypes.default_float
  raise TypeError(f"cannot infer a dtype from list elements of type {type(flat[0]).__name__}")
def _flatten_list(x):
  if isinstance(x, (list, tuple)):
    for y in x: yield from _flatten_list(y)
  else: yield x
def _wrap_ints(arr: np.ndarray, dt: DType) -> np.ndarray:
  bits = 8 * dt.itemsize
  a = np.asarray(arr, dtype=object)
  wrapped = np.vectorize(lambda v: ((int(v) + (0 if dtypes.is_unsigned(dt) else 1 << (bits-1))) % (1 << bits)) - (0 if dtypes.is_unsigned(dt) else 1 << (bits-1)), otypes=[object])(a) if a.size else a
  return np.asarray(wrapped.tolist() if a.size else [], dtype=to_np_dtype(dt)).reshape(arr.shape)
