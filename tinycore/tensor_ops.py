"""Tensor methods built from the primitives in tensor.py: indexing, pooling windows, convolution, normalisation, losses."""
from __future__ import annotations
import math, string
from typing import TYPE_CHECKING, Any
import numpy as np
from tinycore.dtype import DType, dtypes, dtype_min, dtype_max
from tinycore.helpers import make_tuple, prod, argfix, normalize_axis, ceildiv, TRAINING
from tinycore.uop import UOp, Ops, GroupOp, resolve, ssimplify
if TYPE_CHECKING: from tinycore.tensor import Tensor

def _broadcast_shape(*shapes: tuple) -> tuple:
  n = max(map(len, shapes))
  out = []
  for dims in zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes]):
    size = 1  # the one size other than 1 along this dim (plain loops: this runs for every binary op built)
    for d in dims:
      if d != 1:
        if size == 1: size = d
        elif d != size: raise ValueError(f"shapes {shapes} cannot be broadcast together")
    out.append(size)
  return tuple(out)

# ***** indexing *****

def _show(x: Any) -> str: return x.render() if isinstance(x, UOp) else str(x)

def _symbolic_slice(i: slice, n: Any, dim: int) -> tuple[Any, Any]:
  """(start, stop) of a step-1 slice whose bounds or dimension hold a Variable (`cache[:, pos:pos+len]`, the KV-cache
  idiom): one kernel then serves every bound value. Python's clamping needs the values, so a slice that may leave the
  dimension (by the Variables' ranges) is refused instead of clamped; a negative int bound counts from the end."""
  if i.step not in (None, 1): raise IndexError(f"a slice with a Variable needs step 1, got {i}")
  start = 0 if i.start is None else i.start + n if isinstance(i.start, int) and i.start < 0 else i.start
  stop = n if i.stop is None else i.stop + n if isinstance(i.stop, int) and i.stop < 0 else i.stop
  start, stop = ssimplify(start), ssimplify(stop)
  if resolve(start < 0, True) or resolve(stop > n, True) or resolve(start > stop, True):
    raise IndexError(f"slice {_show(i.start)}:{_show(i.stop)} may leave dimension {dim} of size {_show(n)} (by its Variables' ranges); "
                     "shrink the Variables' ranges so every value fits")
  return start, stop

def _over_storage(u: UOp) -> bool:
  """Whether u is a buffer seen through movement ops (a pending assign to one counts): what a write can go into."""
  if u.op is Ops.MULTI: u = u.src[0]
  while u.op in GroupOp.Movement or u.op in (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD): u = u.src[0]
  return u.op in (Ops.BUFFER, Ops.ASSIGN)

class _Movements:
  """The movement ops a basic index applied, recorded so __setitem__ can run them backwards."""
  def __init__(self): self.ops: list[tuple[str, Any, tuple]] = []
  def apply(self, x: Tensor, op: str, arg) -> Tensor:
    self.ops.append((op, arg, x.shape))
    return x.shrink(arg) if op == "shrink" else x.flip(*arg) if op == "flip" else x.pad(arg) if op == "pad" else x.reshape(arg)
  def inverse(self, y: Tensor) -> Tensor:
    """Undo the recorded ops; positions the forward ops dropped come back as zeros (False)."""
    for op, arg, in_shape in reversed(self.ops):
      if op == "shrink": y = y.pad(tuple((b, s - e) for (b, e), s in zip(arg, in_shape)))
      elif op == "flip": y = y.flip(*arg)
      elif op == "pad": y = y.shrink(tuple((b, b + s) for (b, _), s in zip(arg, in_shape)))
      else: y = y.reshape(in_shape)
    return y

class IndexingMixin:
  __slots__ = ()

  def __getitem__(self: Tensor, indices) -> Tensor:
    """numpy/torch indexing: ints (negative too), slices (any step), None, Ellipsis, int/bool Tensors and lists.
    Integer indices are applied first (like torch); advanced indices then broadcast together and their dims go
    where the first one was if they are adjacent, else to the front. An int Tensor index is not bounds-checked
    (it is lazy): an out-of-range entry reads 0. A bool index realizes its mask to find the selected count."""
    view, adv, _ = self._basic_index(indices)
    if not adv: return view
    return view._advanced_index(adv)[0]

  def __setitem__(self: Tensor, indices, v) -> None:
    """x[indices] = v: v (a scalar, list or Tensor) is cast to x's dtype, broadcast, and written with assign.
    x with storage (a buffer, or a view of one) is written in place, so other views see it. An unrealized float x, or a v that
    requires grad, gets the updated value as its graph instead (tinygrad's rule): the write is differentiable as in
    PyTorch, the written positions pass their gradient to v and the rest to x's old graph. A leaf that requires grad is refused."""
    Tensor = type(self)
    if self.requires_grad and not Tensor.no_grad:
      raise RuntimeError("setitem writes into a tensor that requires grad, whose gradient the write would lose (PyTorch refuses "
                         "it too); write into a copy (y = x.clone(); y[idx] = v) or build the value with where/pad/cat")
    if not isinstance(v, Tensor): v = Tensor(v, device=self.device, dtype=self.dtype) if isinstance(v, (list, tuple, np.ndarray)) else Tensor.full((), v, dtype=self.dtype, device=self.device)
    v = v.cast(self.dtype)
    differentiable = bool(v.requires_grad) and not Tensor.no_grad or (dtypes.is_float(self.dtype) and not _over_storage(self.uop))
    def write(new: Tensor) -> None:
      if differentiable: self.replace(new)
      else: self.assign(new).realize()
    # a boolean mask over the leading dims with one value: a lazy where, no host round trip
    if isinstance(indices, Tensor) and indices.dtype == dtypes.bool and indices.shape == self.shape[:indices.ndim] and v.numel() == 1:
      mask = indices.reshape(indices.shape + (1,) * (self.ndim - indices.ndim))
      return write(mask.where(v.reshape(()), self))
    view, adv, moves = self._basic_index(indices)
    if adv:
      val, mask = view._advanced_index(adv, v)
    else:
      val, mask = v._broadcast_to_index(view.shape), Tensor.ones(view.shape, dtype=dtypes.bool, device=self.device)
    write(moves.inverse(mask).where(moves.inverse(val), self))

  def _broadcast_to_index(self: Tensor, shape: tuple) -> Tensor:
    """numpy assignment broadcasting: leading size-1 dims of the value may be dropped."""
    x = self
    while x.ndim > len(shape) and x.shape[0] == 1: x = x.reshape(x.shape[1:])
    try: return x._broadcast_to(shape)
    except ValueError: raise ValueError(f"setitem: value of shape {self.shape} cannot be broadcast to the indexed shape {shape}") from None

  def _basic_index(self: Tensor, indices) -> tuple[Tensor, list[tuple[int, Tensor]], _Movements]:
    """Apply ints, slices, None and Ellipsis; return the view, the advanced indices as (view dim, int Tensor), and the moves."""
    Tensor = type(self)
    items: list[Any] = []
    for i in (indices if isinstance(indices, tuple) else (indices,)):
      # canonical forms: ("new", size) for None and python bools, numpy arrays for lists
      if i is None or isinstance(i, (bool, np.bool_)): items.append(("new", 1 if i is None or i else 0))
      elif isinstance(i, np.integer): items.append(int(i))
      elif isinstance(i, (list, tuple, np.ndarray)):
        arr = np.asarray(i)
        if arr.size and arr.dtype != np.bool_ and not np.issubdtype(arr.dtype, np.integer): raise IndexError(f"index {i!r} must contain only ints or only bools")
        items.append(arr if arr.size else arr.astype(np.int64))
      elif i is Ellipsis or isinstance(i, (int, slice, Tensor)): items.append(i)
      else: raise IndexError(f"unsupported index {i!r} of type {type(i).__name__}; use ints, slices, None, ..., lists or Tensors")
    def is_bool(i) -> bool: return isinstance(i, (np.ndarray, Tensor)) and (i.dtype == np.bool_ if isinstance(i, np.ndarray) else i.dtype == dtypes.bool)
    def consumed(i) -> int: return 0 if i is Ellipsis or isinstance(i, tuple) else i.ndim if is_bool(i) else 1
    if sum(i is Ellipsis for i in items) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(consumed(i) for i in items)
    if used > self.ndim: raise IndexError(f"too many indices for tensor of dimension {self.ndim}: {used} dims indexed")
    fill = [slice(None)] * (self.ndim - used)
    items = [y for i in items for y in (fill if i is Ellipsis else [i])] if any(i is Ellipsis for i in items) else items + fill
    # a bool index selects its nonzero coordinates (found on the host: the count decides the shape), one int index per dim
    flat: list[Any] = []
    dim = 0
    for i in items:
      if is_bool(i):
        if i.ndim == 0: flat.append(("new", int(bool(i.item() if isinstance(i, Tensor) else i)))); continue
        if tuple(i.shape) != tuple(self.shape[dim:dim + i.ndim]):
          raise IndexError(f"boolean index of shape {tuple(i.shape)} does not match the indexed dims {self.shape[dim:dim + i.ndim]}")
        flat.extend(np.nonzero(i.numpy() if isinstance(i, Tensor) else i))
      else: flat.append(i)
      dim += consumed(i)
    shrink, flips, strides, out_shape, empty, adv = [], [], [], [], [], []
    dim = 0
    for i in flat:
      if isinstance(i, tuple):
        if i[1] == 0: empty.append(len(out_shape))
        out_shape.append(1)
        continue
      n = self.shape[dim]
      if isinstance(i, int):
        # a symbolic dimension: refuse an index that may be out of range for some value of its Variables
        if not (resolve(-n <= i, False) and resolve(n > i, False)) if isinstance(n, UOp) else not -n <= i < n:
          raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {_show(n)}")
        i = ssimplify(i + n) if i < 0 else i
        shrink.append((i, i + 1)); flips.append(False); strides.append(1)
      elif isinstance(i, slice) and any(isinstance(x, UOp) for x in (i.start, i.stop, n)):
        start, stop = _symbolic_slice(i, n, dim)
        shrink.append((start, stop)); flips.append(False); strides.append(1)
        out_shape.append(ssimplify(stop - start))
      elif isinstance(i, slice):
        start, stop, step = i.indices(n)
        length = len(range(start, stop, step))
        if length == 0: shrink.append((0, 0)); flips.append(False); strides.append(1)
        elif step > 0: shrink.append((start, start + (length - 1) * step + 1)); flips.append(False); strides.append(step)
        else: shrink.append((start + (length - 1) * step, start + 1)); flips.append(True); strides.append(-step)
        out_shape.append(length)
      else:
        if isinstance(i, np.ndarray):  # a host list: checked here, where it is cheap
          if i.size and (i.max() >= n or i.min() < -n): raise IndexError(f"index {i.tolist()} is out of bounds for dimension {dim} with size {n}")
          i = Tensor(np.where(i < 0, i + n, i).astype(np.int32), device=self.device)
        elif not dtypes.is_int(i.dtype): raise IndexError(f"tensors used as indices must be int or bool, got {i.dtype}")
        shrink.append((0, n)); flips.append(False); strides.append(1)
        adv.append((len(out_shape), i))
        out_shape.append(n)
      dim += 1
    moves = _Movements()
    x = self
    if any(s != (0, n) for s, n in zip(shrink, self.shape)): x = moves.apply(x, "shrink", tuple(shrink))
    if any(flips): x = moves.apply(x, "flip", tuple(d for d, f in enumerate(flips) if f))
    if any(s > 1 for s in strides):  # every s-th element: pad to a multiple of s, split off an s axis, keep its first entry
      x = moves.apply(x, "pad", tuple((0, (-m) % s) for m, s in zip(x.shape, strides)))
      x = moves.apply(x, "reshape", tuple(y for m, s in zip(x.shape, strides) for y in (m // s, s)))
      x = moves.apply(x, "shrink", tuple(y for m in x.shape[::2] for y in ((0, m), (0, 1))))
    if x.shape != tuple(out_shape): x = moves.apply(x, "reshape", tuple(out_shape))
    if empty: x = moves.apply(x, "shrink", tuple((0, 0) if d in empty else (0, s) for d, s in enumerate(x.shape)))
    return x, adv, moves

  def _advanced_index(self: Tensor, adv: list[tuple[int, Tensor]], v: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Gather self[..., idx, ...] at the view dims in `adv` with one-hot masks (where + sum: inf/nan elsewhere stay out).
    With v: scatter v instead, returning the new values and the mask of written positions, both of self's shape."""
    Tensor = type(self)
    dims = [p for p, _ in adv]
    try: bshape = _broadcast_shape(*[t.shape for _, t in adv])
    except ValueError: raise IndexError(f"index tensors of shapes {[t.shape for _, t in adv]} cannot be broadcast together") from None
    rest = [d for d in range(self.ndim) if d not in dims]
    nb, k, nr = len(bshape), len(dims), len(rest)
    x = self.permute(*dims, *rest)  # advanced dims first
    mask = None
    for j, (p, t) in enumerate(adv):
      n = self.shape[p]
      t = t.cast(t.dtype if t.dtype.itemsize == 8 else dtypes.int32)
      if not dtypes.is_unsigned(t.dtype): t = (t < 0).where(t + n, t)
      hot = t._broadcast_to(bshape).unsqueeze(-1) == Tensor.arange(n, device=self.device, dtype=t.dtype)
      hot = hot.reshape(*bshape, *[n if i == j else 1 for i in range(k)], *[1] * nr)
      mask = hot if mask is None else mask & hot
    out_dims = list(range(nb)) if not all(b - a == 1 for a, b in zip(dims, dims[1:])) else None
    if v is None:
      out = mask.where(x.reshape(*[1] * nb, *x.shape), 0).sum(tuple(range(nb, nb + k)), dtype=self.dtype)
      if out_dims is None:  # adjacent advanced dims: the broadcast dims go where the first one was
        out = out.permute(*range(nb, nb + dims[0]), *range(nb), *range(nb + dims[0], nb + nr))
      return out, None
    # scatter: v is in the gathered layout; bring it to bshape + rest
    gathered_shape = bshape + tuple(self.shape[d] for d in rest) if out_dims is not None else \
      tuple(self.shape[d] for d in rest[:dims[0]]) + bshape + tuple(self.shape[d] for d in rest[dims[0]:])
    v = v._broadcast_to_index(gathered_shape)
    if 0 in bshape: return self.zeros_like(), Tensor.zeros(self.shape, dtype=dtypes.bool, device=self.device)
    if out_dims is None: v = v.permute(*range(dims[0], dims[0] + nb), *range(dims[0]), *range(dims[0] + nb, nb + nr))
    v = v.reshape(*bshape, *[1] * k, *v.shape[nb:])
    # repeated indices: the last write wins, as in numpy
    order = Tensor.arange(prod(bshape), device=self.device).reshape(*bshape, *[1] * (k + nr)) if bshape else Tensor(0, device=self.device)
    last = mask.where(order, -1).max(tuple(range(nb)), keepdim=True) if nb else order
    sel = mask & (order == last)
    val = sel.where(v, 0).sum(tuple(range(nb)), dtype=self.dtype)
    hit = mask.any(tuple(range(nb))) if nb else mask
    val, hit = val._broadcast_to(x.shape), hit._broadcast_to(x.shape)
    inv = [0] * self.ndim
    for i, d in enumerate(dims + rest): inv[d] = i
    return val.permute(*inv), hit.permute(*inv)

  # ***** gather / scatter *****

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j] = self[index[i][j]][j] (dim=0): torch.gather. index may be smaller than self off `dim`."""
    Tensor = type(self)
    d = normalize_axis(dim, self.ndim)
    if index.ndim != self.ndim: raise RuntimeError(f"gather: index has {index.ndim} dims, self has {self.ndim}")
    if any(i > s for a, (s, i) in enumerate(zip(self.shape, index.shape)) if a != d):
      raise RuntimeError(f"gather: index shape {index.shape} is larger than self {self.shape} outside dim {d}")
    n = self.shape[d]
    x = self.shrink(tuple((0, i) if a != d else None for a, i in enumerate(index.shape)))
    x = x.unsqueeze(-1).transpose(-1, d)  # the source dim moved to the end, a size-1 dim in its place
    hot = index.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    return hot.where(x, 0).sum(-1, dtype=self.dtype)

  def _scatter_prep(self: Tensor, dim: int, index: Tensor, src) -> tuple[int, Tensor, Tensor]:
    """One-hot mask (index.shape + (n,)) of where each source element lands, and src matching index's shape."""
    Tensor = type(self)
    d = normalize_axis(dim, self.ndim)
    if index.ndim != self.ndim: raise RuntimeError(f"scatter: index has {index.ndim} dims, self has {self.ndim}")
    if any(i > s for a, (s, i) in enumerate(zip(self.shape, index.shape)) if a != d):
      raise RuntimeError(f"scatter: index shape {index.shape} is larger than self {self.shape} outside dim {d}")
    if not isinstance(src, Tensor): src = Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
    if src.dtype != self.dtype: raise RuntimeError(f"scatter: src is {src.dtype} but self is {self.dtype}: cast src to it")
    if any(i > s for s, i in zip(src.shape, index.shape)): raise RuntimeError(f"scatter: index shape {index.shape} is larger than src {src.shape}")
    src = src.shrink(tuple((0, i) for i in index.shape)).cast(self.dtype)
    hot = index.unsqueeze(-1) == Tensor.arange(self.shape[d], device=self.device)
    return d, hot, src

  def _scatter_place(self: Tensor, d: int, t: Tensor) -> Tensor:
    """t has index's shape with dim d reduced to 1, plus a trailing dim of self's size at d: move that dim to d, pad to self."""
    t = t.transpose(-1, d).squeeze(-1)
    return t.pad(tuple((0, s - r) for s, r in zip(self.shape, t.shape)))

  def scatter(self: Tensor, dim: int, index: Tensor, src, reduce: str | None = None) -> Tensor:
    """self with self[index[i][j]][j] = src[i][j] (dim=0): torch.scatter. reduce: None (last write wins), 'add', 'multiply'."""
    d, hot, src = self._scatter_prep(dim, index, src)
    s = src.unsqueeze(-1)
    hit = self._scatter_place(d, hot.any(d, keepdim=True))
    if reduce is None:
      n_i = index.shape[d]
      pos = type(self).arange(n_i, device=self.device).reshape(*[n_i if a == d else 1 for a in range(self.ndim)], 1)
      last = hot.where(pos, -1).max(d, keepdim=True)
      return hit.where(self._scatter_place(d, (hot & (pos == last)).where(s, 0).sum(d, keepdim=True, dtype=self.dtype)), self)
    if reduce == "add": return hit.where(self + self._scatter_place(d, hot.where(s, 0).sum(d, keepdim=True, dtype=self.dtype)), self)
    if reduce == "multiply": return hit.where(self * self._scatter_place(d, hot.where(s, 1).prod(d, keepdim=True, dtype=self.dtype)), self)
    raise TypeError(f"scatter reduce must be None, 'add' or 'multiply', got {reduce!r} (scatter_reduce has the others)")

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    """torch.scatter_reduce: 'sum', 'prod', 'mean', 'amax' or 'amin' over every src element sent to a position
    (and the position's own value if include_self); positions nothing is sent to keep their value."""
    d, hot, src = self._scatter_prep(dim, index, src)
    s = src.unsqueeze(-1)
    hit = self._scatter_place(d, hot.any(d, keepdim=True))
    def place(t: Tensor) -> Tensor: return self._scatter_place(d, t)
    if reduce in ("sum", "mean"):
      tot = place(hot.where(s, 0).sum(d, keepdim=True, dtype=self.dtype))
      out = self + tot if include_self else tot
      if reduce == "mean":
        cnt = place(hot.sum(d, keepdim=True)) + (1 if include_self else 0)
        out = out / cnt if dtypes.is_float(self.dtype) else out.div(cnt, rounding_mode="floor").cast(self.dtype)
    elif reduce == "prod":
      red = place(hot.where(s, 1).prod(d, keepdim=True, dtype=self.dtype))
      out = self * red if include_self else red
    elif reduce in ("amax", "amin"):
      red = hot.where(s, dtype_min(self.dtype) if reduce == "amax" else dtype_max(self.dtype))
      red = place(red.max(d, keepdim=True) if reduce == "amax" else red.min(d, keepdim=True))
      out = (red.maximum(self) if reduce == "amax" else red.minimum(self)) if include_self else red
    else: raise RuntimeError(f"scatter_reduce reduce must be one of sum, prod, mean, amax, amin; got {reduce!r}")
    return hit.where(out, self)

  def one_hot(self: Tensor, num_classes: int | None = None) -> Tensor:
    """An int tensor with a trailing dim of num_classes: 1 where the class is self's value (None: max(self) + 1 classes)."""
    Tensor = type(self)
    if not dtypes.is_int(self.dtype): raise RuntimeError(f"one_hot needs an integer tensor, got {self.dtype}")
    if num_classes is None: num_classes = int(self.max().item()) + 1 if self.numel() else 0
    if num_classes < 0: raise ValueError(f"one_hot: num_classes must be non-negative (or None: from the data), got {num_classes}")
    # classes in self's own dtype when they fit: no promotion to a wider int (64-bit ints are missing on some backends)
    cls_dt = self.dtype if num_classes - 1 <= dtype_max(self.dtype) else dtypes.default_int
    return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device, dtype=cls_dt)).cast(dtypes.default_int)

  def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value=0) -> Tensor:
    """The elements where mask (bool, broadcast with self) is True, as a 1-D tensor. Without size the mask is realized (the
    count decides the shape); with size the result has that length, cut short or padded with fill_value, and no sync."""
    if mask.dtype != dtypes.bool: raise RuntimeError(f"masked_select needs a bool mask, got {mask.dtype}: compare first (x > 0) or .bool() it")
    shape = _broadcast_shape(self.shape, mask.shape)
    x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
    if size is None: return x[m]
    if x.shape[0] == 0: return type(self).full((size,), fill_value, dtype=self.dtype, device=self.device)
    picked = m.cast(dtypes.int32).cumsum()  # how many are picked up to each element
    slot = type(self).arange(size, device=self.device)
    # slot j takes the element after the j elements whose running count is <= j
    src = (picked.unsqueeze(0) <= slot.unsqueeze(1)).sum(1, dtype=dtypes.int32).minimum(x.shape[0] - 1)
    return (slot < picked[-1]).where(x[src], fill_value).cast(self.dtype)

  def nonzero(self: Tensor, size: int | None = None, fill_value=0) -> Tensor:
    """(count, ndim) coordinates of the nonzero elements in the default int (int32, as tinygrad's; PyTorch's are int64).
    Without size self is realized (the count decides the shape); with size there are that many rows, cut short or padded
    with fill_value (PyTorch's nonzero_static), and no sync."""
    Tensor, idx_dt = type(self), dtypes.default_int
    if size is None: return Tensor(np.argwhere(self.numpy()), device=self.device, dtype=idx_dt)  # (count, ndim), 0-d too
    if self.ndim == 0: return Tensor.zeros(size, 0, dtype=idx_dt, device=self.device)
    flat = Tensor.arange(self.numel(), device=self.device).masked_select(self.flatten() != 0, size=size, fill_value=-1)
    strides = [prod(self.shape[d + 1:]) for d in range(self.ndim)]
    coords = Tensor.stack(*[flat // st % n for n, st in zip(self.shape, strides)], dim=-1)
    return (flat.unsqueeze(-1) >= 0).where(coords, fill_value).cast(idx_dt)

  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes as a new last dim."""
    a, b = normalize_axis(dim1, self.ndim), normalize_axis(dim2, self.ndim)
    if a == b: raise RuntimeError("diagonal: dim1 and dim2 must differ")
    x = self.permute(*[d for d in range(self.ndim) if d not in (a, b)], a, b)
    x = x[..., max(-offset, 0):, max(offset, 0):]
    r, c = x.shape[-2:]
    n = min(r, c)
    # element (i, i) of an (n, c) block sits at i*(c+1) in its flattening
    x = x[..., :n, :].flatten(-2)
    x = x.pad(tuple([(0, 0)] * (x.ndim - 1) + [(0, n)]))
    return x.reshape(*x.shape[:-1], n, c + 1)[..., 0]

  def diag(self: Tensor) -> Tensor:
    """A 1-D tensor's values on the main diagonal of a square matrix."""
    if self.ndim != 1: raise ValueError(f"diag needs a 1-D tensor, got shape {self.shape}")
    n = self.shape[0]
    return self.unsqueeze(-1).pad(((0, 0), (0, n))).flatten()[:n * n].reshape(n, n)

  def pad_to(self: Tensor, shape, *args, value=0) -> Tensor:
    """Pad at the end of each dim up to `shape` (None keeps a dim)."""
    shape = argfix(shape, *args)
    if len(shape) != self.ndim: raise ValueError(f"pad_to: {shape} has {len(shape)} dims, tensor has {self.ndim}")
    if any(t is not None and t < s for s, t in zip(self.shape, shape)): raise ValueError(f"pad_to: {shape} is smaller than {self.shape}")
    return self.pad(tuple((0, 0 if t is None else t - s) for s, t in zip(self.shape, shape)), value=value)

  def shrink_to(self: Tensor, shape, *args) -> Tensor:
    """Keep the first `shape[d]` entries of each dim (None keeps a dim)."""
    shape = argfix(shape, *args)
    if len(shape) != self.ndim: raise ValueError(f"shrink_to: {shape} has {len(shape)} dims, tensor has {self.ndim}")
    if any(t is not None and t > s for s, t in zip(self.shape, shape)): raise ValueError(f"shrink_to: {shape} is larger than {self.shape}")
    return self.shrink(tuple(None if t is None else (0, t) for t in shape))

  def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` every `step` along dim: that dim becomes the window count, the window is a new last dim."""
    d = normalize_axis(dim, self.ndim)
    if not 0 <= size <= self.shape[d]: raise RuntimeError(f"unfold: size {size} must be in [0, {self.shape[d]}], the size of dimension {d}")
    if step <= 0: raise RuntimeError(f"unfold: step must be positive, got {step}")
    x = self.transpose(d, -1)
    if size == 0: return x[..., :0].unsqueeze(-2).expand(*x.shape[:-1], x.shape[-1] // step + 1, 0).transpose(d, -2)  # empty windows
    return x._pool((size,), step).transpose(d, -2)

  def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = (self,) + args
    shape = tuple(t.numel() for t in ts)
    if indexing == "xy" and len(ts) >= 2: shape = (shape[1], shape[0]) + shape[2:]
    out = []
    for i, t in enumerate(ts):
      pos = (1, 0)[i] if indexing == "xy" and i < 2 and len(ts) >= 2 else i
      out.append(t.reshape(*[-1 if j == pos else 1 for j in range(len(ts))])._broadcast_to(shape))
    return tuple(out)

  # ***** sorting *****

  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """Stable sort along dim: (values, int32 indices). NaN sorts as the largest value, like torch."""
    Tensor = type(self)
    if self.ndim == 0: return self, Tensor(0, dtype=dtypes.int32, device=self.device)
    d = normalize_axis(dim, self.ndim)
    x = self.transpose(d, -1)
    n = x.shape[-1]
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # a: element i (rows), b: element j (cols)
    if dtypes.is_float(x.dtype):
      an, bn = a.isnan(), b.isnan()
      before = ((b > a) | (bn & an.logical_not())) if descending else ((b < a) | (an & bn.logical_not()))
      tie = (b == a) | (an & bn)
    else:
      before, tie = (b > a) if descending else (b < a), b == a
    i = Tensor.arange(n, device=self.device)
    rank = (before | (tie & (i.reshape(1, n) < i.reshape(n, 1)))).sum(-1, dtype=dtypes.int32)  # final position of element i
    place = rank.unsqueeze(-1) == i.reshape(1, n)  # (..., i, r)
    vals = place.where(a, 0).sum(-2, dtype=self.dtype)
    idx = place.where(i.reshape(n, 1), 0).sum(-2, dtype=dtypes.int32)
    return vals.transpose(d, -1), idx.transpose(d, -1)

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor: return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    d = normalize_axis(dim, self.ndim) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n: raise ValueError(f"topk: k={k} is out of range for a dimension of size {n}")
    vals, idx = self.sort(d, descending=largest)
    sl = tuple(slice(None) if a != d else slice(0, k) for a in range(self.ndim))
    return vals[sl], idx[sl]

  # ***** random sampling built on rand *****

  def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Sample class indices from the (unnormalized) weights in the last dim of a 1-D or 2-D tensor. With replacement, each
    sample inverts the cumulative distribution at a uniform number; without, the num_samples largest keys log(u)/w
    (Efraimidis-Spirakis), which draws them as successive samples from the weights left would, in that order."""
    Tensor = type(self)
    if self.ndim not in (1, 2): raise ValueError(f"multinomial needs a 1-D or 2-D tensor, got {self.shape}")
    if num_samples <= 0: raise ValueError("multinomial: num_samples must be positive")
    w = self.unsqueeze(0) if self.ndim == 1 else self
    if not replacement and num_samples > 1:
      if num_samples > w.shape[1]: raise RuntimeError(f"multinomial: cannot draw {num_samples} samples without replacement from {w.shape[1]} classes")
      # a zero weight's key is -inf: topk would hand it out once the positive ones run out. PyTorch refuses; so do we (one sync)
      if (fewest := int((w > 0).sum(1).min().item())) < num_samples:
        raise RuntimeError(f"multinomial: a row has {fewest} positive weights, fewer than the {num_samples} samples asked without replacement; "
                           "ask for fewer samples or pass replacement=True")
      keys = Tensor.rand(*w.shape, device=self.device).log() / w.float()
      out = keys.topk(num_samples, dim=1)[1]
      return out[0] if self.ndim == 1 else out
    cdf = w.float().cumsum(1)
    cdf = cdf / cdf[:, -1:]
    u = Tensor.rand(w.shape[0], num_samples, 1, device=self.device)
    out = (u >= cdf.unsqueeze(1)).sum(2, dtype=dtypes.int32).minimum(w.shape[1] - 1)
    return out[0] if self.ndim == 1 else out

  # ***** einsum / rearrange *****

  @staticmethod
  def einsum(formula: str, *operands, dtype: DType | str | None = None) -> Tensor:
    """Einstein summation with broadcasting ('...'), repeated letters (diagonals) and implicit output."""
    ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    formula = formula.replace(" ", "")
    lhs, rhs = formula.split("->") if "->" in formula else (formula, None)
    ins = lhs.split(",")
    if len(ins) != len(ops): raise ValueError(f"einsum: {len(ins)} operand specs in {formula!r} but {len(ops)} tensors")
    free = [c for c in string.ascii_letters if c not in formula]
    ell_nd = max((t.ndim - len(s.replace("...", "")) for s, t in zip(ins, ops) if "..." in s), default=0)
    ell = "".join(free[:ell_nd])
    specs = []
    for s, t in zip(ins, ops):
      if s.count("...") > 1: raise RuntimeError(f"einsum: operand spec {s!r} has more than one '...'")
      if "..." in s:
        n = t.ndim - len(s.replace("...", ""))
        if n < 0: raise RuntimeError(f"einsum: operand spec {s!r} has more letters than the tensor's {t.ndim} dims")
        s = s.replace("...", ell[ell_nd - n:])
      if len(s) != t.ndim: raise RuntimeError(f"einsum: operand spec {s!r} does not match a tensor with {t.ndim} dims")
      specs.append(s)
    if rhs is None:
      counts = {c: "".join(specs).count(c) for c in "".join(specs)}
      rhs = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else: rhs = rhs.replace("...", ell)
    letters = list(dict.fromkeys("".join(specs) + rhs))
    if any(c not in "".join(specs) for c in rhs): raise RuntimeError(f"einsum: output letters {rhs!r} must appear in the inputs")
    sizes: dict[str, int] = {}
    aligned = []
    for s, t in zip(specs, ops):
      while len(set(s)) != len(s):  # a repeated letter: take the diagonal of those two dims
        c = next(ch for ch in s if s.count(ch) > 1)
        i, j = s.index(c), s.index(c, s.index(c) + 1)
        if t.shape[i] != t.shape[j]: raise RuntimeError(f"einsum: repeated index {c!r} has sizes {t.shape[i]} and {t.shape[j]}")
        t = t.diagonal(0, i, j)
        s = s[:i] + s[i + 1:j] + s[j + 1:] + c
      for c, n in zip(s, t.shape):
        if n != 1:
          if sizes.get(c, n) != n: raise RuntimeError(f"einsum: index {c!r} has sizes {sizes[c]} and {n}")
          sizes[c] = n
      t = t.permute([s.index(c) for c in letters if c in s]).reshape([t.shape[s.index(c)] if c in s else 1 for c in letters])
      aligned.append(t)
    prod_t = aligned[0]
    for t in aligned[1:]: prod_t = prod_t * t
    summed = tuple(i for i, c in enumerate(letters) if c not in rhs)
    out = prod_t.sum(summed, dtype=dtype) if summed else (prod_t.cast(dtype) if dtype is not None else prod_t)
    kept = [c for c in letters if c in rhs]
    return out.permute([kept.index(c) for c in rhs])

  def rearrange(self: Tensor, formula: str, **sizes) -> Tensor:
    """einops-style reshaping: 'b (h w) c -> b h w c', with '...' and size-1 literals; `sizes` resolve split groups."""
    def parse(side: str) -> list[list[str]]:
      groups, cur, depth = [], None, 0
      for tok in side.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
          if cur is not None: raise ValueError(f"rearrange: nested parentheses in {side!r}")
          cur = []
        elif tok == ")":
          if cur is None: raise ValueError(f"rearrange: unbalanced ')' in {side!r}")
          groups.append(cur); cur = None
        elif cur is not None: cur.append(tok)
        else: groups.append([tok])
      if cur is not None: raise ValueError(f"rearrange: unbalanced '(' in {side!r}")
      return groups
    if "->" not in formula: raise ValueError(f"rearrange formula {formula!r} needs '->'")
    lhs, rhs = (parse(s) for s in formula.split("->"))
    names_l = [n for g in lhs for n in g if n != "1"]
    names_r = [n for g in rhs for n in g if n != "1"]
    if sorted(names_l) != sorted(names_r) or len(set(names_l)) != len(names_l):
      raise ValueError(f"rearrange: both sides of {formula!r} must name the same axes once each")
    n_ell = self.ndim - (len(lhs) - (1 if ["..."] in lhs else 0))
    if n_ell < 0 or (n_ell and ["..."] not in lhs): raise ValueError(f"rearrange: {formula!r} does not match a tensor with {self.ndim} dims")
    dims: dict[str, int] = dict(sizes)
    flat_shape: list[int] = []
    axis = 0
    lhs_names: list[str] = []
    for g in lhs:
      if g == ["..."]:
        for i in range(n_ell):
          dims[f"...{i}"] = self.shape[axis]; flat_shape.append(self.shape[axis]); lhs_names.append(f"...{i}"); axis += 1
        continue
      n = self.shape[axis]
      unknown = [x for x in g if x != "1" and x not in dims]
      known = prod(dims[x] for x in g if x != "1" and x in dims)
      if len(unknown) > 1: raise ValueError(f"rearrange: cannot split {n} into {g} without sizes for {unknown[1:]}")
      if unknown: dims[unknown[0]] = n // known if known else 0
      if prod(dims[x] for x in g if x != "1") != n: raise ValueError(f"rearrange: group {g} does not multiply to the dim size {n}")
      for x in g:
        if x != "1": flat_shape.append(dims[x]); lhs_names.append(x)
      axis += 1
    rhs = [[f"...{i}" for i in range(n_ell)] if g == ["..."] else g for g in rhs]
    order = [lhs_names.index(x) for g in rhs for x in g if x != "1"]
    out = self.reshape(flat_shape).permute(*order)
    return out.reshape(tuple(prod(dims[x] for x in g if x != "1") for g in rhs))


class NNOpsMixin:
  __slots__ = ()
  def _pool(self: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1) -> Tensor:
    """Sliding windows over the last len(k_) dims: (..., i1, i2) -> (..., o1, o2, k1, k2), built from movement ops only."""
    nd = len(k_)
    s_, d_ = make_tuple(stride, nd), make_tuple(dilation, nd)
    if self.ndim < nd: raise ValueError(f"pooling over {nd} dims needs a tensor with at least {nd} dims, got {self.shape}")
    lead, i_ = self.shape[:-nd], self.shape[-nd:]
    o_ = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(i_, k_, s_, d_)]
    if any(o <= 0 or k <= 0 or s <= 0 or d <= 0 for o, k, s, d in zip(o_, k_, s_, d_)):
      raise RuntimeError(f"window {k_} (stride {s_}, dilation {d_}) does not fit the dims {i_}")
    keep = [None] * len(lead)
    def flat(pairs): return [y for p in pairs for y in p]
    if all(k <= s and d == 1 for k, s, d in zip(k_, s_, d_)):
      # windows do not overlap: cut each dim into o rows of s and keep the first k of every row
      x = self.shrink(tuple(keep + [(0, min(o * s, i)) for o, s, i in zip(o_, s_, i_)]))
      x = x.pad(tuple([(0, 0)] * len(lead) + [(0, max(o * s - i, 0)) for o, s, i in zip(o_, s_, i_)]))
      x = x.reshape(*lead, *flat((o, s) for o, s in zip(o_, s_))).shrink(tuple(keep + flat(((0, o), (0, k)) for o, k in zip(o_, k_))))
    else:
      # overlapping windows: repeat each dim and re-cut it into k rows of length L = i*f + d; row a then starts at a*d
      # (mod i), so row a, column c*s is x[a*d + c*s]; f makes a row long enough to hold o strides
      f_ = [max(1, ceildiv(o * s - d, i)) for o, s, i, d in zip(o_, s_, i_, d_)]
      L_ = [i * f + d for i, f, d in zip(i_, f_, d_)]
      x = self.repeat(*[1] * len(lead), *[ceildiv(k * L, i) for k, L, i in zip(k_, L_, i_)])
      x = x.shrink(tuple(keep + [(0, k * L) for k, L in zip(k_, L_)])).reshape(*lead, *flat((k, L) for k, L in zip(k_, L_)))
      x = x.shrink(tuple(keep + flat(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_)))).reshape(*lead, *flat((k, o, s) for k, o, s in zip(k_, o_, s_)))
      x = x.shrink(tuple(keep + flat(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_)))).reshape(*lead, *flat((k, o) for k, o in zip(k_, o_)))
      x = x.permute(*range(len(lead)), *[len(lead) + 2 * j + 1 for j in range(nd)], *[len(lead) + 2 * j for j in range(nd)])
      return x
    return x.permute(*range(len(lead)), *[len(lead) + 2 * j for j in range(nd)], *[len(lead) + 2 * j + 1 for j in range(nd)])

  # ***** convolution and pooling *****

  @staticmethod
  def _pad_pairs(padding, k_: tuple[int, ...], dilation=1) -> list[tuple[int, int]]:
    """(before, after) per spatial dim from an int, a per-dim tuple, a torch-style flat tuple (last dim first), or 'same'/'valid'."""
    nd = len(k_)
    if isinstance(padding, str):
      if padding == "valid": return [(0, 0)] * nd
      if padding == "same":
        tot = [d * (k - 1) for d, k in zip(make_tuple(dilation, nd), k_)]
        return [(t // 2, t - t // 2) for t in tot]
      raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    if isinstance(padding, int): return [(padding, padding)] * nd
    p = tuple(padding)
    if len(p) == nd: return [(x, x) for x in p]
    if len(p) == 2 * nd: return [(p[2 * i], p[2 * i + 1]) for i in range(nd)][::-1]
    raise ValueError(f"padding {padding} must have {nd} or {2 * nd} entries for {nd} spatial dims")

  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
             dtype: DType | str | None = None) -> Tensor:
    """Convolution (cross-correlation) over the last weight.ndim-2 dims: x (N, Cin, *S), weight (Cout, Cin/groups, *K).
    Built from windows (movement ops), a multiply and a sum, so it fuses with what follows into one kernel."""
    (bs, cin_), (cout, cin), k_ = self.shape[:2], weight.shape[:2], tuple(weight.shape[2:])
    nd = len(k_)
    if self.ndim != nd + 2: raise ValueError(f"conv: input {self.shape} must have {nd + 2} dims for weight {weight.shape}")
    if groups * cin != cin_: raise ValueError(f"conv: input has {cin_} channels but weight expects groups {groups} * {cin}")
    if cout % groups: raise ValueError(f"conv: {cout} output channels are not divisible by groups {groups}")
    if isinstance(padding, str) and padding == "same" and any(s != 1 for s in make_tuple(stride, nd)): raise ValueError("conv: padding='same' needs stride 1")
    pads = self._pad_pairs(padding, k_, dilation)
    x = self.pad(((0, 0), (0, 0), *pads))._pool(k_, stride, dilation)  # (bs, cin_, *out, *k)
    out_sp, rcout = x.shape[2:2 + nd], cout // groups
    x = x.reshape(bs, groups, cin, 1, *out_sp, *k_).expand(bs, groups, cin, rcout, *out_sp, *k_)
    x = x.permute(0, 1, 3, *range(4, 4 + nd), 2, *range(4 + nd, 4 + 2 * nd))  # (bs, groups, rcout, *out, cin, *k)
    w = weight.reshape(1, groups, rcout, *[1] * nd, cin, *k_)
    ret = (x * w).sum(tuple(range(-1 - nd, 0)), dtype=dtype).reshape(bs, cout, *out_sp)
    return ret if bias is None else ret + bias.reshape(1, -1, *[1] * nd)

  # tinygrad's IMAGE=1 path (Qualcomm GPUs) computes these two in a texture layout, channels packed by 4; tinycore has no image
  # dtype, so they compute the same numbers directly: the products summed in float32 (or dtype=), as that path sums them
  def image_conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
                   dtype: DType | str | None = None) -> Tensor:
    """conv2d of a 4-D input (N, C, H, W), summed in float32 unless dtype= says otherwise."""
    if self.ndim != 4 or weight.ndim != 4: raise ValueError(f"image_conv2d: input and weight must be 4-D (N, C, H, W), got {self.shape} and {weight.shape}")
    return self.conv2d(weight, bias, groups, stride, dilation, padding, dtype=dtype or dtypes.float32)
  def image_dot(self: Tensor, w: Tensor, dtype: DType | str | None = None) -> Tensor:
    """dot (a 1x1 image_conv2d in tinygrad), summed in float32 unless dtype= says otherwise."""
    return self.dot(w, dtype=dtype or dtypes.float32)

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
                       output_padding=0) -> Tensor:
    """Transposed convolution: weight (Cin, Cout/groups, *K). Zeros are inserted between inputs (stride), then a conv with the
    flipped, transposed weight and padding d*(k-1)-p."""
    k_ = tuple(weight.shape[2:])
    nd = len(k_)
    if self.ndim != nd + 2: raise ValueError(f"conv_transpose: input {self.shape} must have {nd + 2} dims for weight {weight.shape}")
    s_, d_, p_, op_ = (make_tuple(v, nd) for v in (stride, dilation, padding, output_padding))
    cin, rcout = weight.shape[:2]
    if cin % groups: raise ValueError(f"conv_transpose: {cin} input channels are not divisible by groups {groups}")
    if self.shape[1] != cin: raise ValueError(f"conv_transpose: input has {self.shape[1]} channels, weight expects {cin}")
    w = weight.reshape(groups, cin // groups, rcout, *k_).transpose(1, 2).flip(*range(3, 3 + nd)).reshape(groups * rcout, cin // groups, *k_)
    x = self
    if any(s > 1 for s in s_):
      sp = x.shape[2:]
      x = x.reshape(*x.shape[:2], *[y for n in sp for y in (n, 1)])
      x = x.pad(((0, 0), (0, 0), *[y for s in s_ for y in ((0, 0), (0, s - 1))]))
      x = x.reshape(*x.shape[:2], *[n * s for n, s in zip(sp, s_)])
      x = x.shrink(((0, x.shape[0]), (0, x.shape[1]), *[(0, n * s - (s - 1)) for n, s in zip(sp, s_)]))
    pads = [(d * (k - 1) - p, d * (k - 1) - p + o) for k, d, p, o in zip(k_, d_, p_, op_)]
    flat = [y for b, a in pads[::-1] for y in (b, a)]
    return x.conv2d(w, bias, groups=groups, dilation=dilation, padding=flat)

  def _pool_pads(self: Tensor, k_: tuple[int, ...], stride, dilation, padding, ceil_mode: bool) -> tuple[list, tuple, tuple, list]:
    nd = len(k_)
    s_ = make_tuple(k_ if stride is None else stride, nd)
    d_ = make_tuple(dilation, nd)
    pads = self._pad_pairs(padding, k_, dilation)
    if any(b > (d * (k - 1) + 1) // 2 or a > (d * (k - 1) + 1) // 2 for (b, a), k, d in zip(pads, k_, d_)) and isinstance(padding, int):
      raise ValueError(f"pool: padding {padding} must be at most half the kernel size {k_}")
    extra = []
    for (b, a), k, s, d, i in zip(pads, k_, s_, d_, self.shape[-nd:]):
      span = i + b + a - d * (k - 1) - 1
      if span < 0: raise ValueError(f"pool: kernel {k_} (dilation {d_}) is larger than the padded input {self.shape[-nd:]}")
      o = span // s + 1
      if ceil_mode:
        o = ceildiv(span, s) + 1
        if (o - 1) * s >= i + b: o -= 1  # the last window must start inside the input or its left padding
      extra.append(max(0, (o - 1) * s + d * (k - 1) + 1 - (i + b + a)))
    return pads, s_, d_, extra

  def avg_pool2d(self: Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """Average over windows of the last len(kernel_size) dims; the divisor counts padding like torch."""
    Tensor = type(self)
    k_ = make_tuple(kernel_size, 2)
    nd = len(k_)
    pads, s_, d_, extra = self._pool_pads(k_, stride, dilation, padding, ceil_mode)
    full = [(b, a + e) for (b, a), e in zip(pads, extra)]
    x = self._float().pad(((0, 0),) * (self.ndim - nd) + tuple(full))._pool(k_, s_, d_)
    tot = x.sum(tuple(range(-nd, 0)))
    # the divisor of each window: explicit padding counts (if count_include_pad), the ceil_mode overhang never does
    sp = self.shape[-nd:]
    ones = np.ones(sp, np.float32)
    ones = np.pad(ones, [(b, a) for b, a in pads], constant_values=1.0 if count_include_pad else 0.0)
    ones = np.pad(ones, [(0, e) for e in extra])
    win = np.lib.stride_tricks.sliding_window_view(ones, tuple(d * (k - 1) + 1 for k, d in zip(k_, d_)))
    win = win[tuple(slice(None, None, s) for s in s_)][(...,) + tuple(slice(None, None, d) for d in d_)]
    cnt = win.reshape(*win.shape[:nd], -1).sum(-1)
    if np.all(cnt == cnt.flat[0]): return tot / float(cnt.flat[0])
    return tot / Tensor(cnt.astype(np.float32), device=self.device).cast(tot.dtype)

  def max_pool2d(self: Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                 return_indices: bool = False):
    """Max over windows of the last len(kernel_size) dims; with return_indices also the flat (H*W) index of each max."""
    Tensor = type(self)
    k_ = make_tuple(kernel_size, 2)
    nd = len(k_)
    pads, s_, d_, extra = self._pool_pads(k_, stride, dilation, padding, ceil_mode)
    full = ((0, 0),) * (self.ndim - nd) + tuple((b, a + e) for (b, a), e in zip(pads, extra))
    lo = dtype_min(self.dtype)
    win = self.pad(full, value=lo)._pool(k_, s_, d_)
    axes = tuple(range(-nd, 0))
    m = win.max(axes)
    if not return_indices: return m
    sp = self.shape[-nd:]
    big = prod(sp)
    idx = Tensor.arange(big, device=self.device).reshape(sp).pad(tuple(full[-nd:]), value=big)._pool(k_, s_, d_)
    hit = (win == m.reshape(*m.shape, *[1] * nd))
    if dtypes.is_float(self.dtype): hit = hit | (win.isnan() & m.reshape(*m.shape, *[1] * nd).isnan())
    return m, hit.where(idx, big).min(axes)

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None) -> Tensor:
    """Inverse of max_pool2d: each value goes to its flat index in a zero output of output_size (default: the pooled input size)."""
    Tensor = type(self)
    k_ = make_tuple(kernel_size, 2)
    nd = len(k_)
    s_, d_ = make_tuple(k_ if stride is None else stride, nd), make_tuple(dilation, nd)
    pads = self._pad_pairs(padding, k_)
    if output_size is None: output_size = tuple((i - 1) * s - b - a + d * (k - 1) + 1 for i, s, (b, a), d, k in zip(self.shape[-nd:], s_, pads, d_, k_))
    else: output_size = tuple(output_size)[-nd:]
    lead = self.shape[:-nd]
    n_out = prod(output_size)
    hot = indices.reshape(*lead, -1, 1) == Tensor.arange(n_out, device=self.device)
    # overlapping windows can send one input element twice: its copies are equal, so max (not sum) merges them. Each copy
    # gets the output's whole gradient, as PyTorch's (a gather of it at the indices): the max gives the value, a sum of
    # zeros the gradient (zeros of the finite values: inf - inf would be NaN, so an infinite value passes no gradient)
    v = self.reshape(*lead, -1, 1)
    val = hot.where(v.detach(), dtype_min(self.dtype)).max(-2)
    if dtypes.is_float(self.dtype): val = val + (hot & v.isfinite()).where(v - v.detach(), 0).sum(-2)
    return hot.any(-2).where(val, 0).reshape(*lead, *output_size)

  def interpolate(self: Tensor, size, mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resize the last len(size) dims: 'nearest', 'nearest-exact', or 'linear' (bilinear/trilinear for 2/3 dims), like torch."""
    Tensor = type(self)
    size = make_tuple(size, 1)
    if not 0 < len(size) <= self.ndim: raise ValueError(f"interpolate: size {size} must name between 1 and {self.ndim} dims")
    if mode in ("bilinear", "trilinear"): mode = "linear"
    if mode not in ("linear", "nearest", "nearest-exact"): raise ValueError(f"interpolate mode must be linear, nearest or nearest-exact, got {mode!r}")
    if align_corners and mode != "linear": raise ValueError("interpolate: align_corners only applies to mode='linear'")
    # uint8 follows PyTorch's separable kernel: a pass per dim from the last, each rounding to uint8 with 2^P-scaled integer
    # weights (P the most bits that keep the largest weight under 2^15); other dtypes interpolate in float and cast back
    fixed = self.dtype == dtypes.uint8 and mode == "linear"
    x = self if dtypes.is_float(self.dtype) or fixed else self.float()
    for j, out_n in reversed(list(enumerate(size))) if fixed else enumerate(size):
      d = self.ndim - len(size) + j
      in_n = self.shape[d]
      o = np.arange(out_n, dtype=np.float64)
      if mode == "linear":
        if in_n == out_n and fixed: continue
        if align_corners: src = o * ((in_n - 1) / (out_n - 1)) if out_n > 1 else np.zeros_like(o)
        else: src = np.maximum((o + 0.5) * (in_n / out_n) - 0.5, 0.0)
        lo = np.minimum(np.floor(src).astype(np.int64), in_n - 1)
        hi = np.minimum(lo + 1, in_n - 1)
        w = src - lo
        sel = (slice(None),) * d
        a, b = x[sel + (Tensor(lo.astype(np.int32), device=self.device),)], x[sel + (Tensor(hi.astype(np.int32), device=self.device),)]
        def col(v: np.ndarray, dt) -> Tensor: return Tensor(v, device=self.device).cast(dt).reshape(out_n, *[1] * (self.ndim - d - 1))
        if fixed:
          p = next(p for p in range(22) if int(0.5 + np.maximum(w, 1 - w).max() * (1 << (p + 1))) >= 1 << 15)  # the largest weight is >= 1/2
          w0, w1 = np.floor(0.5 + (1 - w) * (1 << p)), np.floor(0.5 + w * (1 << p))
          x = ((a.cast(dtypes.int32) * col(w0, dtypes.int32) + b.cast(dtypes.int32) * col(w1, dtypes.int32) + (1 << p >> 1)) >> p).clip(0, 255).cast(dtypes.uint8)
        else: x = a + (b - a) * col(w.astype(np.float32), x.dtype)
      else:
        scale = in_n / out_n
        src = np.floor((o + 0.5) * scale) if mode == "nearest-exact" else np.floor(o * scale)
        idx = np.minimum(src.astype(np.int64), in_n - 1).astype(np.int32)
        x = x[(slice(None),) * d + (Tensor(idx, device=self.device),)]
    return x if x.dtype == self.dtype else x.cast(self.dtype)

  # ***** normalisation, dropout, attention *****

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """self / max(||self||_p along dim, eps)."""
    # p = 0 counts the nonzero elements (no slope), as PyTorch's norm
    if p == 0: return self / self.ne(0).sum(dim, keepdim=True).cast(self._float().dtype).maximum(eps)
    s = self.abs().pow(p).sum(dim, keepdim=True) if p != 2.0 else self.square().sum(dim, keepdim=True)
    # an all-zero slice's norm is 0 without a path through the root, whose slope there is infinite (0 * inf is NaN)
    nonzero = s > 0
    return self / nonzero.where(nonzero.where(s, 1).pow(1.0 / p), 0).maximum(eps)

  def layernorm(self: Tensor, axis=-1, eps: float = 1e-5) -> Tensor:
    y = self - self.mean(axis, keepdim=True)
    return y * (y.square().mean(axis, keepdim=True) + eps).rsqrt()

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor, axis=1) -> Tensor:
    """(x - mean) * invstd * weight + bias with the 1-D parameters laid along `axis` (one int or several)."""
    axes = tuple(normalize_axis(a, self.ndim) for a in make_tuple(axis, 1))
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    ret = x.mul(invstd.reshape(shape) if len(invstd.shape) == len(axes) else invstd)
    return (ret + bias.reshape(shape)) if bias is not None else ret

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p), only while training (Tensor.training)."""
    Tensor = type(self)
    if not 0 <= p <= 1: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not TRAINING or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = Tensor.rand(*self.shape, device=self.device, contiguous=False) >= p
    return keep.contiguous().where(self, 0) * (1.0 / (1.0 - p))

  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T / sqrt(d) + mask) @ v; a bool mask keeps True positions, is_causal keeps the lower triangle."""
    Tensor = type(self)
    if enable_gqa:
      key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
      value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
    qk = self.matmul(key.transpose(-2, -1)) * (1.0 / math.sqrt(self.shape[-1]))
    if is_causal:
      if attn_mask is not None: raise RuntimeError("scaled_dot_product_attention: pass either attn_mask or is_causal, not both")
      attn_mask = Tensor.ones(qk.shape[-2], qk.shape[-1], dtype=dtypes.bool, device=self.device).tril()
    if attn_mask is not None:
      qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype == dtypes.bool else qk + attn_mask
    return qk.softmax(-1).dropout(dropout_p) @ value

  def newton_schulz(self: Tensor, steps: int, params: tuple[float, ...], eps: float = 1e-7) -> Tensor:
    """Orthogonalize the last two dims: scale to Frobenius norm <= 1, then `steps` times G = sum_i params[i] (G G^T)^i G
    (an odd polynomial of G's singular values); a tall matrix is handled transposed."""
    if self.ndim < 2: raise ValueError(f"newton_schulz needs a matrix (2+ dims), got shape {self.shape}")
    if self.shape[-2] > self.shape[-1]: return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
    g = self / (self.square().sum((-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      ggt, term, out = g @ g.transpose(-2, -1), g, None
      for p in params:
        out = p * term if out is None else out + p * term
        term = ggt @ term
      g = out if out is not None else g
    return g

  # ***** losses *****

  def _do_reduction(self: Tensor, reduction: str) -> Tensor:
    if reduction == "none": return self
    if reduction == "sum": return self.sum()
    if reduction == "mean": return self.mean()
    raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """-(y log p + (1-y) log(1-p)) on probabilities; logs clamp at -100 like torch so p=0 or 1 stays finite."""
    return -(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100))._do_reduction(reduction)

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_crossentropy(sigmoid(x)) computed stably: log(1+exp(-|x|)) never overflows."""
    log_sig_neg = (-self).relu() + (1 + (-self.abs()).exp()).log()  # -log(sigmoid(x))
    if pos_weight is None: out = (1 - Y) * self + log_sig_neg
    else: out = (1 - Y) * self + (1 + (pos_weight - 1) * Y) * log_sig_neg
    return out._do_reduction(reduction)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy on logits: classes on dim 1 (dim 0 for 1-D input); Y class indices or probabilities."""
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    cdim = 1 if self.ndim > 1 else 0
    c = self.shape[cdim]
    if dtypes.is_int(Y.dtype):
      if Y.shape != self.shape[:cdim] + self.shape[cdim + 1:]: raise RuntimeError(f"cross_entropy: target {Y.shape} does not match input {self.shape} without the class dim")
      Y = Y.one_hot(c).cast(self._float().dtype)
      Y = Y.permute(*range(cdim), Y.ndim - 1, *range(cdim, Y.ndim - 1)) if cdim else Y
    elif Y.shape != self.shape: raise RuntimeError(f"cross_entropy: probability target {Y.shape} must match input {self.shape} (class indices must be an int tensor)")
    if label_smoothing: Y = Y * (1 - label_smoothing) + label_smoothing / c
    return -(self.log_softmax(cdim) * Y).sum(cdim)._do_reduction(reduction)

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    """Cross entropy with classes on the LAST dim and integer targets (tinygrad's); targets equal to ignore_index
    (other than -1) count nowhere, including the mean's denominator."""
    Tensor = type(self)
    log_probs = self.log_softmax(-1)
    # every target counts unless ignore_index is set: then no mask is built (an all-true one adds nodes and changes no value)
    keep = (Y != ignore_index) if ignore_index != -1 else None
    y = Y.unsqueeze(-1) == Tensor.arange(self.shape[-1], device=self.device)
    if keep is not None: y = y & keep.unsqueeze(-1)
    picked = y.where(log_probs, 0).sum(-1)
    # without smoothing the mean over classes is not computed at all (0 * it would be a kernel, and NaN where it is infinite)
    if label_smoothing:
      smooth = log_probs.mean(-1) if keep is None else keep.where(log_probs.mean(-1), 0)
      loss = -((1 - label_smoothing) * picked + label_smoothing * smooth)
    else: loss = -picked
    if reduction == "mean": return loss.sum() / (keep.sum() if keep is not None else Y.numel())
    return loss._do_reduction(reduction)

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.nll_loss on log-probabilities (classes on dim 1, or dim 0 for 1-D input)."""
    Tensor = type(self)
    cdim = 1 if self.ndim > 1 else 0
    c = self.shape[cdim]
    hot = Y.unsqueeze(cdim) == Tensor.arange(c, device=self.device).reshape(c, *[1] * (self.ndim - cdim - 1))
    w = hot.where(weight.reshape(c, *[1] * (self.ndim - cdim - 1)) if weight is not None else 1.0, 0.0)
    if ignore_index is not None: w = (Y.unsqueeze(cdim) != ignore_index).where(w, 0.0)
    loss = -(w * self).sum(cdim)
    if reduction == "mean": return loss.sum() / w.sum()
    return loss._do_reduction(reduction)
