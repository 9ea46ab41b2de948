"""ONNX operators as Tensor programs: one function per op, its ONNX attributes as keyword arguments with the spec's defaults."""
from __future__ import annotations
import math
from typing import Any, Callable
from tinycore.dtype import dtypes, DType, dtype_min, dtype_max
from tinycore.helpers import prod, normalize_axis
from tinycore.tensor import Tensor

# TensorProto.DataType -> tinycore dtype
ONNX_DTYPES: dict[int, DType] = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32,
                                 7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32,
                                 13: dtypes.uint64, 16: dtypes.bfloat16}

class Ctx:
  """What an op may ask of the runner: the opset it runs under, the Python value of a (small, shape-like) input, subgraphs,
  and the dtype standing in for each ONNX type (int64 is int32 on a backend without 64-bit ints)."""
  def __init__(self, opset: int, device: str | None, static: dict[int, tuple[Tensor, list]], run_graph: Callable, narrow: dict[DType, DType]):
    self.opset, self.device, self.static, self.run_graph, self.narrow = opset, device, static, run_graph, narrow
  def dt(self, to: int | DType) -> DType:
    d = _dt(to) if isinstance(to, int) else to
    return self.narrow.get(d, d)
  @property
  def long(self) -> DType: return self.dt(dtypes.int64)
  def py(self, t: Tensor | None, default=None) -> Any:
    """A small tensor's values as Python numbers (shape arguments): from the build-time value when known, else read back."""
    if t is None: return default
    known = self.static.get(id(t))
    return known[1] if known is not None and known[0] is t else t.tolist()
  def know(self, t: Tensor, value: list) -> None:
    """Remember t's value, known while building (a shape); the entry holds t, so its id is never reused for another tensor."""
    self.static[id(t)] = (t, value)
  def scalar(self, t: Tensor | None, default=None) -> Any:
    v = self.py(t, default)
    return v[0] if isinstance(v, list) else v
  def ints(self, t: Tensor | None, default=None) -> list[int] | None:
    v = self.py(t, default)
    return v if v is None or isinstance(v, list) else [v]

def _axes(axes, ndim: int) -> list[int]: return sorted(normalize_axis(a, ndim) for a in axes)
def _dt(to: int) -> DType:
  if to not in ONNX_DTYPES: raise NotImplementedError(f"ONNX data type {to} (float8/int4/string/complex) is not supported by tinycore")
  return ONNX_DTYPES[to]
def _bcast(*ts: Tensor) -> list[Tensor]:
  nd = max(t.ndim for t in ts)
  shape = tuple(max(s) if all(isinstance(x, int) for x in s) else next(x for x in s if x != 1) for s in
                zip(*[(1,) * (nd - t.ndim) + tuple(t.shape) for t in ts]))
  return [t.reshape((1,) * (nd - t.ndim) + tuple(t.shape)).expand(shape) if t.shape != shape else t for t in ts]

# ***** elementwise *****

def _same(x: Tensor, r: Tensor) -> Tensor: return r if r.dtype == x.dtype else r.cast(x.dtype)
def _div(c, a, b): return a.div(b, rounding_mode="trunc").cast(a.dtype) if dtypes.is_int(a.dtype) else a / b
def _mod(c, a, b, fmod=0):
  if not dtypes.is_float(a.dtype): return a - a.div(b, rounding_mode="trunc") * b if fmod else a.mod(b)
  if fmod: return a.fmod(b)
  r = a.fmod(b)
  return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
def _pow(c, x, y):
  if dtypes.is_int(x.dtype) and dtypes.is_float(y.dtype): return x.cast(y.dtype).pow(y).cast(x.dtype)
  return _same(x, x.pow(y.cast(x.dtype) if dtypes.is_int(y.dtype) or dtypes.is_float(x.dtype) else y))
def _variadic(fn): return lambda c, *xs: fn(_bcast(*xs))
def _gelu(c, x, approximate="none"): return x.gelu(approximate)
def _clip(c, x, mn=None, mx=None, min=None, max=None):  # noqa: A002  (opset < 11 passes min and max as attributes)
  lo, hi = (c.py(mn) if mn is not None else min), (c.py(mx) if mx is not None else max)
  if lo is not None: x = x.maximum(Tensor(lo, dtype=x.dtype, device=x.device))
  if hi is not None: x = x.minimum(Tensor(hi, dtype=x.dtype, device=x.device))
  return x
def _cast(c, x, to, saturate=1, round_mode="up"): return x.cast(c.dt(to))
def _isinf(c, x, detect_negative=1, detect_positive=1): return x.isinf(bool(detect_positive), bool(detect_negative))
def _shrink(c, x, bias=0.0, lambd=0.5): return _same(x, (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)))
def _bitshift(c, x, y, direction):
  out = (y < 0) | (y >= x.dtype.itemsize * 8)  # shifting by the width or more (or a negative count) empties the value
  ys = out.where(0, y)
  fill = (x < 0).where(-1, 0) if direction == "RIGHT" and not dtypes.is_unsigned(x.dtype) else 0
  return out.where(fill, x.lshift(ys) if direction == "LEFT" else x.rshift(ys)).cast(x.dtype)
def _round(c, x):  # half to even, like numpy
  f = x.floor()
  d = x - f
  return (d > 0.5).where(f + 1, (d < 0.5).where(f, (f / 2).floor().eq(f / 2).where(f, f + 1)))

# ***** reductions *****

def _reduce(kind: str):
  def op(c, x, axes_in=None, axes=None, keepdims=1, noop_with_empty_axes=0):
    ax = c.ints(axes_in, axes)
    if not ax:
      if noop_with_empty_axes: return x
      ax = list(range(x.ndim))
    ax = _axes(ax, x.ndim)
    if any(x.shape[a] == 0 for a in ax):
      out = tuple(1 if i in ax else s for i, s in enumerate(x.shape) if keepdims or i not in ax)
      empty = {"sum": 0, "l1": 0, "l2": 0, "sumsq": 0, "mean": math.nan, "prod": 1, "max": -math.inf if dtypes.is_float(x.dtype) else dtype_min(x.dtype),
               "min": math.inf if dtypes.is_float(x.dtype) else dtype_max(x.dtype), "logsum": -math.inf, "logsumexp": -math.inf}[kind]
      return Tensor.full(out, empty, dtype=x.dtype, device=x.device)
    kd = bool(keepdims)
    r = {"sum": lambda: x.sum(ax, kd, dtype=x.dtype), "mean": lambda: x.mean(ax, kd), "max": lambda: x.max(ax, kd), "min": lambda: x.min(ax, kd),
         "prod": lambda: x.prod(ax, kd, dtype=x.dtype), "l1": lambda: x.abs().sum(ax, kd, dtype=x.dtype),
         "l2": lambda: x.square().sum(ax, kd).sqrt(), "sumsq": lambda: x.square().sum(ax, kd, dtype=x.dtype),
         "logsum": lambda: x.sum(ax, kd).log(), "logsumexp": lambda: x.logsumexp(ax, kd)}[kind]()
    return _same(x, r)
  return op

def _arg(largest: bool):
  def op(c, x, axis=0, keepdims=1, select_last_index=0):
    a = normalize_axis(axis, x.ndim)
    y = x.flip(a) if select_last_index else x
    i = y.argmax(a, keepdim=True) if largest else y.argmin(a, keepdim=True)
    if select_last_index: i = (x.shape[a] - 1) - i
    return (i if keepdims else i.squeeze(a)).cast(c.long)
  return op

# ***** shapes and movement *****

def _reshape(c, x, shape, allowzero=0):
  s = c.ints(shape)
  s = [x.shape[i] if v == 0 and not allowzero else v for i, v in enumerate(s)]
  return x.reshape(s)
def _flatten(c, x, axis=1):
  a = axis + x.ndim if axis < 0 else axis
  return x.reshape(prod(x.shape[:a]), prod(x.shape[a:]))
def _squeeze(c, x, axes_in=None, axes=None):
  ax = c.ints(axes_in, axes)
  ax = [i for i, s in enumerate(x.shape) if s == 1] if ax is None else _axes(ax, x.ndim)
  return x.reshape([s for i, s in enumerate(x.shape) if i not in ax])
def _unsqueeze(c, x, axes_in=None, axes=None):
  ax = _axes(c.ints(axes_in, axes), x.ndim + len(c.ints(axes_in, axes)))
  shape = list(x.shape)
  for a in ax: shape.insert(a, 1)
  return x.reshape(shape)
def _transpose(c, x, perm=None): return x.permute(perm if perm is not None else list(range(x.ndim))[::-1])
def _concat(c, *xs, axis): return xs[0].cat(*xs[1:], dim=axis) if len(xs) > 1 else xs[0]
def _split(c, x, split_in=None, axis=0, split=None, num_outputs=None, n_out=1):
  a = normalize_axis(axis, x.ndim)
  sizes = c.ints(split_in, split)
  if sizes is None:
    n = num_outputs or n_out
    each = -(-x.shape[a] // n)
    sizes = [min(each, x.shape[a] - i * each) for i in range(n)]
  return tuple(x.split(sizes, a))
def _slice(c, x, starts=None, ends=None, axes_in=None, steps_in=None, **attrs):
  if starts is None: st, en, ax, sp = attrs["starts_attr"], attrs["ends_attr"], attrs.get("axes_attr"), None
  else: st, en, ax, sp = c.ints(starts), c.ints(ends), c.ints(axes_in), c.ints(steps_in)
  ax = list(range(len(st))) if ax is None else [normalize_axis(a, x.ndim) for a in ax]
  sp = sp or [1] * len(st)
  idx: list[Any] = [slice(None)] * x.ndim
  for a, s, e, k in zip(ax, st, en, sp):
    n = x.shape[a]
    s, e = s + n if s < 0 else s, e + n if e < 0 else e
    if k > 0: s, e = min(max(s, 0), n), min(max(e, 0), n)
    else: s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
    idx[a] = slice(s, e if e >= 0 else None, k)
  return x[tuple(idx)]
def _expand(c, x, shape):
  s = c.ints(shape)
  nd = max(len(s), x.ndim)
  xs, s = (1,) * (nd - x.ndim) + tuple(x.shape), (1,) * (nd - len(s)) + tuple(s)
  return x.reshape(xs).expand([a if b == 1 else b for a, b in zip(xs, s)])
def _tile(c, x, repeats): return x.repeat(c.ints(repeats))
def _pad(c, x, pads_in=None, constant_value=None, axes_in=None, mode="constant", pads=None, value=0.0):
  p = c.ints(pads_in, pads)
  ax = list(range(x.ndim)) if axes_in is None else [normalize_axis(a, x.ndim) for a in c.ints(axes_in)]
  pairs = [(0, 0)] * x.ndim
  for i, a in enumerate(ax): pairs[a] = (p[i], p[i + len(ax)])
  if any(b < 0 or e < 0 for b, e in pairs):  # negative pads crop
    x = x.shrink(tuple((max(-b, 0), s - max(-e, 0)) for (b, e), s in zip(pairs, x.shape)))
    pairs = [(max(b, 0), max(e, 0)) for b, e in pairs]
  v = c.scalar(constant_value, value)
  return x.pad(tuple(pairs), mode={"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode], value=v or 0)
def _shape(c, x, start=0, end=None):
  n = x.ndim
  s, e = max(min(start + n if start < 0 else start, n), 0), n if end is None else max(min(end + n if end < 0 else end, n), 0)
  vals = list(x.shape[s:e])
  t = Tensor(vals, dtype=c.long, device=c.device) if all(isinstance(v, int) for v in vals) else \
      Tensor.stack(*[Tensor(v, dtype=c.long, device=c.device) for v in vals]) if vals else Tensor.zeros(0, dtype=c.long, device=c.device)
  c.know(t, vals)
  return t
def _size(c, x): return Tensor(prod(x.shape), dtype=c.long, device=c.device)
def _const_of_shape(c, shape, value=None):
  v = value if value is not None else Tensor([0.0], dtype=dtypes.float32, device=c.device)
  return v.reshape(()).expand(c.ints(shape)).contiguous() if c.ints(shape) else v.reshape(())
def _range(c, start, limit, delta):
  s, l, d = c.scalar(start), c.scalar(limit), c.scalar(delta)
  n = max(math.ceil((l - s) / d), 0)
  return (Tensor.arange(n, device=c.device).cast(start.dtype) * d + s).cast(start.dtype)
def _gather(c, x, idx, axis=0):
  a = normalize_axis(axis, x.ndim)
  idx = (idx < 0).where(idx + x.shape[a], idx)
  flat = idx.reshape(-1) if idx.ndim != 1 else idx
  r = x[(slice(None),) * a + (flat,)]
  return r.reshape((*x.shape[:a], *idx.shape, *x.shape[a + 1:]))
def _gather_elements(c, x, idx, axis=0):
  a = normalize_axis(axis, x.ndim)
  return x.gather(a, (idx < 0).where(idx + x.shape[a], idx))
def _gather_nd(c, x, idx, batch_dims=0):
  b, k = batch_dims, idx.shape[-1]
  B = prod(x.shape[:b])
  xb, ib = x.reshape(B, *x.shape[b:]), idx.reshape(B, -1, k)
  lin = Tensor.zeros(*ib.shape[:-1], dtype=idx.dtype, device=x.device)
  for j in range(k):
    n = x.shape[b + j]
    v = ib[..., j]
    lin = lin * n + (v < 0).where(v + n, v)
  rest = xb.shape[1 + k:]
  flat = xb.reshape(B * prod(x.shape[b:b + k]), *rest)
  lin = lin + Tensor.arange(B, device=x.device).cast(lin.dtype).reshape(B, 1) * prod(x.shape[b:b + k])
  return flat[lin.reshape(-1)].reshape(*idx.shape[:-1], *rest)
def _scatter_elements(c, x, idx, upd, axis=0, reduction="none"):
  a = normalize_axis(axis, x.ndim)
  idx = (idx < 0).where(idx + x.shape[a], idx)
  if reduction == "none": return x.scatter(a, idx, upd)
  return x.scatter_reduce(a, idx, upd, {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction])
def _scatter_nd(c, x, idx, upd, reduction="none"):
  k = idx.shape[-1]
  P, rest = prod(x.shape[:k]), x.shape[k:]
  lin = Tensor.zeros(*idx.shape[:-1], dtype=idx.dtype, device=x.device)
  for j in range(k): lin = lin * x.shape[j] + idx[..., j]
  U = prod(idx.shape[:-1])
  hot = (lin.reshape(U, 1) == Tensor.arange(P, device=x.device).cast(lin.dtype)).reshape(U, P, *[1] * len(rest))
  u = upd.reshape(U, 1, *rest)
  flat = x.reshape(P, *rest)
  hit = hot.any(0)
  if reduction == "none":
    pos = Tensor.arange(U, device=x.device).reshape(U, 1, *[1] * len(rest))
    last = hot.where(pos, -1).max(0, keepdim=True)
    out = hit.where((hot & (pos == last)).where(u, 0).sum(0, dtype=x.dtype), flat)
  elif reduction == "add": out = flat + hot.where(u, 0).sum(0, dtype=x.dtype)
  elif reduction == "mul": out = flat * hot.where(u, 1).prod(0, dtype=x.dtype)
  elif reduction == "max": out = hit.where(flat.maximum(hot.where(u, dtype_min(x.dtype)).max(0)), flat)
  else: out = hit.where(flat.minimum(hot.where(u, dtype_max(x.dtype)).min(0)), flat)
  return out.reshape(x.shape)
def _one_hot(c, idx, depth, values, axis=-1):
  d = int(c.py(depth) if not isinstance(c.py(depth), list) else c.py(depth)[0])
  a = normalize_axis(axis, idx.ndim + 1)
  idx = (idx < 0).where(idx + d, idx)
  cls = Tensor.arange(d, device=c.device).cast(idx.dtype).reshape(d, *[1] * (idx.ndim - a))
  hot = idx.unsqueeze(a) == cls
  return hot.where(values[1], values[0])
def _cumsum(c, x, axis, exclusive=0, reverse=0):
  a = normalize_axis(c.ints(axis)[0], x.ndim)
  y = x.flip(a) if reverse else x
  if exclusive: y = y.pad(tuple((1, 0) if i == a else (0, 0) for i in range(x.ndim))).shrink(tuple((0, s) if i == a else None for i, s in enumerate(x.shape)))
  y = _same(x, y.cumsum(a))
  return y.flip(a) if reverse else y
def _topk(c, x, k_in=None, axis=-1, largest=1, sorted=1, k=None):  # noqa: A002
  kv = c.ints(k_in, [k])[0]
  v, i = x.topk(kv, axis, bool(largest))
  return v, i.cast(c.long)
def _trilu(c, x, k=None, upper=1):
  kv = c.ints(k, [0])[0]
  return x.triu(kv) if upper else x.tril(kv)
def _eye_like(c, x, dtype=None, k=0):
  n, m = x.shape
  r = Tensor.arange(n, device=c.device).reshape(n, 1) + k == Tensor.arange(m, device=c.device).reshape(1, m)
  return r.cast(c.dt(dtype) if dtype is not None else x.dtype)
def _depth_to_space(c, x, blocksize, mode="DCR"):
  b, (n, ch, h, w) = blocksize, x.shape
  if mode == "DCR": y = x.reshape(n, b, b, ch // b ** 2, h, w).permute(0, 3, 4, 1, 5, 2)
  else: y = x.reshape(n, ch // b ** 2, b, b, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(n, ch // b ** 2, h * b, w * b)
def _space_to_depth(c, x, blocksize, mode="DCR"):
  b, (n, ch, h, w) = blocksize, x.shape
  y = x.reshape(n, ch, h // b, b, w // b, b)
  y = y.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
  return y.reshape(n, ch * b * b, h // b, w // b)
def _nonzero(c, x): return x.nonzero().transpose().cast(c.long)
def _compress(c, x, cond, axis=None):
  keep = [i for i, v in enumerate(c.ints(cond)) if v]
  if axis is None: return x.reshape(-1)[Tensor(keep, dtype=dtypes.int32, device=c.device)] if keep else x.reshape(-1)[:0]
  a = normalize_axis(axis, x.ndim)
  return x[(slice(None),) * a + (Tensor(keep, dtype=dtypes.int32, device=c.device),)] if keep else x.shrink(tuple((0, 0) if i == a else None for i in range(x.ndim)))

# ***** neural-network ops *****

def _auto_pads(auto_pad: str, pads, sp, k_, s_, d_) -> list[tuple[int, int]]:
  nd = len(k_)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for i, k, s, d in zip(sp, k_, s_, d_):
      tot = max((math.ceil(i / s) - 1) * s + (k - 1) * d + 1 - i, 0)
      out.append((tot // 2, tot - tot // 2) if auto_pad == "SAME_UPPER" else (tot - tot // 2, tot // 2))
    return out
  if auto_pad == "VALID" or pads is None: return [(0, 0)] * nd
  return [(pads[i], pads[i + nd]) for i in range(nd)]

def _conv(c, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
  k_ = tuple(w.shape[2:])
  nd = len(k_)
  s_, d_ = strides or [1] * nd, dilations or [1] * nd
  pp = _auto_pads(auto_pad, pads, x.shape[2:], k_, s_, d_)
  x = x.pad(((0, 0), (0, 0), *pp))
  return x.conv2d(w, b, groups=group, stride=tuple(s_), dilation=tuple(d_))

def _conv_transpose(c, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, output_padding=None,
                    output_shape=None, pads=None, strides=None):
  k_ = tuple(w.shape[2:])
  nd = len(k_)
  s_, d_, op_ = strides or [1] * nd, dilations or [1] * nd, output_padding or [0] * nd
  full = [(i - 1) * s + (k - 1) * d + 1 + o for i, s, k, d, o in zip(x.shape[2:], s_, k_, d_, op_)]
  if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    outs = output_shape[-nd:] if output_shape is not None else [i * s for i, s in zip(x.shape[2:], s_)]
    op_ = [o + max(o_ - f, 0) for o, o_, f in zip(op_, outs, full)]  # an output larger than the full result: more output padding
    full = [max(f, o_) for f, o_ in zip(full, outs)]
    tots = [f - o for f, o in zip(full, outs)]
    pp = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in tots]
  else: pp = _auto_pads(auto_pad, pads, None, k_, s_, d_)
  y = x.conv_transpose2d(w, b, groups=group, stride=tuple(s_), dilation=tuple(d_), padding=0, output_padding=tuple(op_))
  return y.shrink(((0, y.shape[0]), (0, y.shape[1]), *[(bp, f - ep) for (bp, ep), f in zip(pp, full)]))

def _flat_pads(pp: list[tuple[int, int]]) -> tuple[int, ...]: return tuple(v for b, e in pp[::-1] for v in (b, e))  # torch order: last dim first

def _pool_setup(x, kernel_shape, auto_pad, pads, strides, dilations):
  nd = len(kernel_shape)
  s_, d_ = strides or [1] * nd, dilations or [1] * nd
  pp = _auto_pads(auto_pad, pads, x.shape[2:], kernel_shape, s_, d_)
  return tuple(kernel_shape), tuple(s_), tuple(d_), pp

def _max_pool(c, x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None, storage_order=0, strides=None, n_out=1):
  k_, s_, d_, pp = _pool_setup(x, kernel_shape, auto_pad, pads, strides, dilations)
  nd = len(k_)
  y = x.pad(((0, 0),) * (x.ndim - nd) + tuple(pp), value=dtype_min(x.dtype)) if any(b or e for b, e in pp) and n_out == 1 else x
  pad_arg = 0 if y is not x else _flat_pads(pp)
  r = y.max_pool2d(k_, s_, d_, pad_arg, bool(ceil_mode), return_indices=n_out > 1)
  if n_out == 1: return r
  m, idx = r
  sp = x.shape[2:]
  if storage_order:  # column-major: index = col * H + row for 2-D
    rows, cols = idx // sp[-1], idx % sp[-1]
    idx = cols * sp[0] + rows
  base = Tensor.arange(prod(x.shape[:2]), device=c.device).reshape(*x.shape[:2], *[1] * nd) * prod(sp)
  return m, (idx + base.cast(idx.dtype)).cast(c.long)

def _avg_pool(c, x, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, kernel_shape=None, pads=None, strides=None):
  k_, s_, d_, pp = _pool_setup(x, kernel_shape, auto_pad, pads, strides, dilations)
  return x.avg_pool2d(k_, s_, d_, _flat_pads(pp), bool(ceil_mode), count_include_pad=bool(count_include_pad))

def _lp_pool(c, x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None, strides=None):
  k_, s_, d_, pp = _pool_setup(x, kernel_shape, auto_pad, pads, strides, dilations)
  y = x.abs().pow(p).avg_pool2d(k_, s_, d_, _flat_pads(pp), bool(ceil_mode), count_include_pad=True) * prod(k_)
  return y.pow(1.0 / p)

def _global(kind):
  def op(c, x):
    ax = tuple(range(2, x.ndim))
    return x.mean(ax, keepdim=True) if kind == "avg" else x.max(ax, keepdim=True) if kind == "max" else x.square().sum(ax, keepdim=True).sqrt()
  return op

def _batchnorm(c, x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, training_mode=0, spatial=1, is_test=0, n_out=1):
  shape = (1, -1) + (1,) * (x.ndim - 2)
  if training_mode or n_out > 1 and c.opset >= 14:
    ax = tuple(i for i in range(x.ndim) if i != 1)
    bm, bv = x.mean(ax), x.var(ax, correction=0)
    y = (x - bm.reshape(shape)) * (bv.reshape(shape) + epsilon).rsqrt() * scale.reshape(shape) + bias.reshape(shape)
    return y, mean * momentum + bm * (1 - momentum), var * momentum + bv * (1 - momentum)
  return (x - mean.reshape(shape)) * (var.reshape(shape) + epsilon).rsqrt() * scale.reshape(shape) + bias.reshape(shape)

def _instancenorm(c, x, scale, bias, epsilon=1e-5):
  shape = (1, -1) + (1,) * (x.ndim - 2)
  return x.layernorm(tuple(range(2, x.ndim)), epsilon) * scale.reshape(shape) + bias.reshape(shape)

def _layernorm(c, x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=1, n_out=1):
  a = normalize_axis(axis, x.ndim)
  ax = tuple(range(a, x.ndim))
  xf = x.cast(dtypes.float32) if stash_type == 1 and x.dtype != dtypes.float64 else x
  mean = xf.mean(ax, keepdim=True)
  inv = ((xf - mean).square().mean(ax, keepdim=True) + epsilon).rsqrt()
  y = ((xf - mean) * inv).cast(x.dtype) * scale
  if bias is not None: y = y + bias
  return (y, mean, inv)[:n_out] if n_out > 1 else y

def _groupnorm(c, x, scale, bias, epsilon=1e-5, num_groups=1, stash_type=1):
  n, ch = x.shape[:2]
  y = x.reshape(n, num_groups, -1).layernorm(-1, epsilon).reshape(x.shape)
  shape = (1, -1) + (1,) * (x.ndim - 2)
  if scale.shape[0] != ch:  # opset 18: one scale per group
    scale, bias = scale.repeat_interleave(ch // num_groups), bias.repeat_interleave(ch // num_groups)
  return y * scale.reshape(shape) + bias.reshape(shape)

def _lrn(c, x, alpha=1e-4, beta=0.75, bias=1.0, size=1):
  n, ch = x.shape[:2]
  sq = x.square().reshape(n, 1, ch, -1)
  win = sq.pad(((0, 0), (0, 0), ((size - 1) // 2, size - 1 - (size - 1) // 2), (0, 0)))._pool((size, 1)).sum((-2, -1))
  return x / (bias + alpha / size * win.reshape(x.shape)).pow(beta)

def _lp_norm(c, x, axis=-1, p=2):
  n = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
  return n.eq(0).where(0, x / n)

def _mvn(c, x, axes=(0, 2, 3)):
  m = x.mean(axes, keepdim=True)
  return (x - m) / ((x - m).square().mean(axes, keepdim=True).sqrt() + 1e-9)

def _softmax(fn: str):
  def op(c, x, axis=None):
    if c.opset < 13:  # the input is seen as 2-D: [prod(dims before axis), prod(the rest)]
      a = normalize_axis(1 if axis is None else axis, x.ndim)
      flat = x.reshape(prod(x.shape[:a]), prod(x.shape[a:]))
      return (flat.softmax(-1) if fn == "softmax" else flat.log_softmax(-1) if fn == "log_softmax" else _hardmax(flat, -1)).reshape(x.shape)
    a = -1 if axis is None else axis
    return x.softmax(a) if fn == "softmax" else x.log_softmax(a) if fn == "log_softmax" else _hardmax(x, a)
  return op
def _hardmax(x, a):
  a = normalize_axis(a, x.ndim)
  return (x.argmax(a, keepdim=True) == Tensor.arange(x.shape[a], device=x.device).reshape(-1, *[1] * (x.ndim - a - 1))).cast(x.dtype)

def _gemm(c, a, b, cc=None, alpha=1.0, beta=1.0, transA=0, transB=0):
  y = (a.T if transA else a) @ (b.T if transB else b)
  if alpha != 1.0: y = y * alpha
  if cc is not None: y = y + (cc * beta if beta != 1.0 else cc)
  return y

def _dropout(c, x, ratio=None, training_mode=None, seed=None, is_test=0, n_out=1):
  if training_mode is not None and c.py(training_mode) and (c.py(ratio, 0.5) if ratio is not None else 0.5) > 0:
    raise NotImplementedError("Dropout in training mode draws random numbers: export the model in eval mode")
  return (x, Tensor.ones(*x.shape, dtype=dtypes.bool, device=c.device)) if n_out > 1 else x

def _einsum(c, *xs, equation): return Tensor.einsum(equation.replace(" ", ""), *xs)

def _prelu(c, x, slope): return (x < 0).where(x * slope, x)

# ***** resize *****

def _resize_axis(x: Tensor, a: int, out_n: int, scale: float, mode: str, coord: str, nearest_mode: str, cubic_a: float,
                 exclude_outside: int, roi: tuple[float, float] | None, extrapolation: float) -> Tensor:
  """Resample one axis with a small table of source indices and weights computed from the (static) sizes."""
  in_n = x.shape[a]
  pos = []
  for o in range(out_n):
    if coord == "half_pixel": s = (o + 0.5) / scale - 0.5
    elif coord == "half_pixel_symmetric": s = in_n / 2 * (1 - out_n / (scale * in_n)) + (o + 0.5) / scale - 0.5
    elif coord == "pytorch_half_pixel": s = (o + 0.5) / scale - 0.5 if out_n > 1 else 0.0
    elif coord == "align_corners": s = o * (in_n - 1) / (scale * in_n - 1) if scale * in_n > 1 else 0.0
    elif coord == "asymmetric": s = o / scale
    elif coord == "tf_crop_and_resize":
      r0, r1 = roi
      s = r0 * (in_n - 1) + o * (r1 - r0) * (in_n - 1) / (out_n - 1) if out_n > 1 else 0.5 * (r0 + r1) * (in_n - 1)
    else: raise NotImplementedError(f"Resize: coordinate_transformation_mode {coord!r} is not supported")
    pos.append(s)
  taps: list[list[tuple[int, float]]] = []
  for s in pos:
    if mode == "nearest":
      if nearest_mode == "round_prefer_floor": i = math.ceil(s - 0.5)
      elif nearest_mode == "round_prefer_ceil": i = math.floor(s + 0.5)
      elif nearest_mode == "floor": i = math.floor(s)
      else: i = math.ceil(s)
      taps.append([(min(max(i, 0), in_n - 1), 1.0)])
    elif mode == "linear":
      s = min(max(s, 0.0), in_n - 1.0) if coord != "tf_crop_and_resize" else s
      f = math.floor(s)
      t = [(min(max(f, 0), in_n - 1), 1 - (s - f)), (min(max(f + 1, 0), in_n - 1), s - f)]
      taps.append(t)
    elif mode == "cubic":
      f = math.floor(s)
      r = s - f
      ws = [((cubic_a * (r + 1) - 5 * cubic_a) * (r + 1) + 8 * cubic_a) * (r + 1) - 4 * cubic_a, ((cubic_a + 2) * r - (cubic_a + 3)) * r * r + 1,
            ((cubic_a + 2) * (1 - r) - (cubic_a + 3)) * (1 - r) * (1 - r) + 1,
            ((cubic_a * (2 - r) - 5 * cubic_a) * (2 - r) + 8 * cubic_a) * (2 - r) - 4 * cubic_a]
      idx = [f - 1, f, f + 1, f + 2]
      if exclude_outside:
        ws = [w if 0 <= i < in_n else 0.0 for i, w in zip(idx, ws)]
        tot = sum(ws)
        ws = [w / tot for w in ws]
      taps.append([(min(max(i, 0), in_n - 1), w) for i, w in zip(idx, ws)])
    else: raise NotImplementedError(f"Resize: mode {mode!r} is not supported")
  ntap = len(taps[0])
  idx = Tensor([[t[j][0] for t in taps] for j in range(ntap)], dtype=dtypes.int32, device=x.device)
  wts = Tensor([[t[j][1] for t in taps] for j in range(ntap)], dtype=dtypes.float32, device=x.device)
  tail = (1,) * (x.ndim - a - 1)
  xf = x if dtypes.is_float(x.dtype) else x.cast(dtypes.float32)
  out = None
  for j in range(ntap):
    g = xf[(slice(None),) * a + (idx[j],)]
    term = g if mode == "nearest" else g * wts[j].cast(xf.dtype).reshape(out_n, *tail)
    out = term if out is None else out + term
  if coord == "tf_crop_and_resize":
    inside = Tensor([0 <= s <= in_n - 1 for s in pos], dtype=dtypes.bool, device=x.device).reshape(out_n, *tail)
    out = inside.where(out, extrapolation)
  return out if out.dtype == x.dtype else (_round(None, out) if dtypes.is_int(x.dtype) else out).cast(x.dtype)

def _resize(c, x, roi=None, scales=None, sizes=None, antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
            cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
            nearest_mode="round_prefer_floor"):
  if antialias: raise NotImplementedError("Resize: antialias=1 is not supported")
  ax = list(range(x.ndim)) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
  sc, sz, rv = c.py(scales), c.py(sizes), c.py(roi)
  sc = sc if sc else None
  if sz:
    if keep_aspect_ratio_policy != "stretch":
      pick = min if keep_aspect_ratio_policy == "not_larger" else max
      r = pick(s / x.shape[a] for s, a in zip(sz, ax))
      sz = [int(x.shape[a] * r + 0.5) for a in ax]
      sc = [r] * len(ax)
    else: sc = [s / x.shape[a] for s, a in zip(sz, ax)]
  else: sz = [int(math.floor(x.shape[a] * s)) for s, a in zip(sc, ax)]
  rois = [(rv[i], rv[i + len(ax)]) for i in range(len(ax))] if rv else [None] * len(ax)
  for a, n, s, r in zip(ax, sz, sc, rois):
    if n == x.shape[a] and s == 1.0 and coordinate_transformation_mode != "tf_crop_and_resize": continue
    x = _resize_axis(x, a, n, s, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, r, extrapolation_value)
  return x

def _upsample(c, x, scales_in=None, mode="nearest", scales=None):
  sc = c.py(scales_in, scales)
  return _resize(c, x, scales=None, sizes=Tensor([int(math.floor(s * n)) for s, n in zip(sc, x.shape)], dtype=c.long),
                 mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor")

# ***** quantization *****

def _dequantize(c, x, scale, zero_point=None, axis=1, block_size=0, output_dtype=0):
  if block_size: raise NotImplementedError("DequantizeLinear: blocked quantization (block_size) is not supported")
  shape = (-1,) + (1,) * (x.ndim - normalize_axis(axis, x.ndim) - 1) if scale.ndim == 1 and x.ndim > 0 else scale.shape
  xf = x.cast(scale.dtype)
  if zero_point is not None: xf = xf - zero_point.cast(scale.dtype).reshape(shape)
  return xf * scale.reshape(shape)

def _quantize(c, x, scale, zero_point=None, axis=1, block_size=0, output_dtype=0, saturate=1, precision=0):
  if block_size: raise NotImplementedError("QuantizeLinear: blocked quantization (block_size) is not supported")
  shape = (-1,) + (1,) * (x.ndim - normalize_axis(axis, x.ndim) - 1) if scale.ndim == 1 and x.ndim > 0 else scale.shape
  dt = zero_point.dtype if zero_point is not None else _dt(output_dtype) if output_dtype else dtypes.uint8
  y = _round(c, x.cast(dtypes.float32) / scale.cast(dtypes.float32).reshape(shape))
  if zero_point is not None: y = y + zero_point.cast(dtypes.float32).reshape(shape)
  return y.clip(dtype_min(dt), dtype_max(dt)).cast(dt)

def _matmul_integer(c, a, b, a_zp=None, b_zp=None):
  a32, b32 = a.cast(dtypes.int32), b.cast(dtypes.int32)
  if a_zp is not None: a32 = a32 - a_zp.cast(dtypes.int32).reshape(-1, 1) if a_zp.ndim == 1 and a_zp.shape[0] > 1 else a32 - a_zp.cast(dtypes.int32)
  if b_zp is not None: b32 = b32 - b_zp.cast(dtypes.int32)
  return a32 @ b32

def _qlinear_matmul(c, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
  af = _dequantize(c, a, a_s, a_zp, axis=0)
  bf = _dequantize(c, b, b_s, b_zp, axis=-1)
  return _quantize(c, af @ bf, y_s, y_zp, axis=-1)

def _qlinear_conv(c, x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b=None, **attrs):
  y = _conv(c, _dequantize(c, x, x_s, x_zp), _dequantize(c, w, w_s, w_zp, axis=0),
            None if b is None else b.cast(dtypes.float32) * (x_s * w_s), **attrs)
  return _quantize(c, y, y_s, y_zp)

def _conv_integer(c, x, w, x_zp=None, w_zp=None, **attrs):
  xi = x.cast(dtypes.int32) - (x_zp.cast(dtypes.int32) if x_zp is not None else 0)
  wi = w.cast(dtypes.int32) - (w_zp.cast(dtypes.int32).reshape(-1, *[1] * (w.ndim - 1)) if w_zp is not None else 0)
  return _conv(c, xi, wi, None, **attrs)

# ***** recurrent layers *****

_ACTS: dict[str, Callable] = {"Sigmoid": lambda x, a, b: x.sigmoid(), "Tanh": lambda x, a, b: x.tanh(), "Relu": lambda x, a, b: x.relu(),
                              "Affine": lambda x, a, b: x * a + b, "LeakyRelu": lambda x, a, b: x.leaky_relu(a),
                              "ThresholdedRelu": lambda x, a, b: (x > a).where(x, 0), "ScaledTanh": lambda x, a, b: (x * b).tanh() * a,
                              "HardSigmoid": lambda x, a, b: (x * a + b).clip(0, 1), "Elu": lambda x, a, b: x.elu(a),
                              "Softsign": lambda x, a, b: x.softsign(), "Softplus": lambda x, a, b: x.softplus()}

def _recurrent(kind: str):
  gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
  defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
  def op(c, X, W, R, B=None, seq_lens=None, h0=None, c0=None, P=None, activation_alpha=None, activation_beta=None, activations=None,
         clip=None, direction="forward", hidden_size=None, layout=0, linear_before_reset=0, input_forget=0, n_out=1):
    if layout: X = X.transpose(0, 1)
    if layout and h0 is not None: h0 = h0.transpose(0, 1)
    if layout and c0 is not None: c0 = c0.transpose(0, 1)
    T, N = X.shape[:2]
    H = R.shape[-1]
    ndir = 2 if direction == "bidirectional" else 1
    if seq_lens is not None and any(v != T for v in c.ints(seq_lens)):
      raise NotImplementedError(f"{kind}: sequence_lens shorter than the sequence are not supported")
    acts = [a.decode() if isinstance(a, bytes) else a for a in (activations or defaults * ndir)]
    alphas, betas = list(activation_alpha or []), list(activation_beta or [])
    fns = []
    for i, name in enumerate(acts):
      default_a = {"LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "HardSigmoid": 0.2, "Elu": 1.0}.get(name, 1.0)
      fns.append((_ACTS[name], alphas[i] if i < len(alphas) else default_a, betas[i] if i < len(betas) else (0.5 if name == "HardSigmoid" else 0.0)))
    def f(j, x): return fns[j][0](x, fns[j][1], fns[j][2])
    ys, hs, cs = [], [], []
    for d in range(ndir):
      reverse = direction == "reverse" or d == 1
      w, r = W[d], R[d]
      b = B[d] if B is not None else Tensor.zeros(2 * gates * H, dtype=X.dtype, device=X.device)
      wb, rb = b[:gates * H], b[gates * H:]
      h = h0[d] if h0 is not None else Tensor.zeros(N, H, dtype=X.dtype, device=X.device)
      cell = c0[d] if c0 is not None else Tensor.zeros(N, H, dtype=X.dtype, device=X.device)
      p = P[d] if P is not None else None
      fo = 3 * d if kind == "LSTM" else 2 * d if kind == "GRU" else d
      xw = X @ w.T + wb  # every step's input projection at once
      outs = [None] * T
      for t in (range(T - 1, -1, -1) if reverse else range(T)):
        g = xw[t]
        def cl(v): return v.clip(-clip, clip) if clip is not None else v
        if kind == "RNN": h = f(fo, cl(g + h @ r.T + rb))
        elif kind == "GRU":
          gz, gr, gh = g.chunk(3, -1)
          rz, rr, rh = r.chunk(3, 0)
          bz, br, bh = rb.chunk(3, 0)
          z, rt = f(fo, cl(gz + h @ rz.T + bz)), f(fo, cl(gr + h @ rr.T + br))
          hh = f(fo + 1, cl(gh + (rt * (h @ rh.T + bh) if linear_before_reset else (rt * h) @ rh.T + bh)))
          h = (1 - z) * hh + z * h
        else:
          gg = g + h @ r.T + rb
          gi, go, gf, gc = gg.chunk(4, -1)
          if p is not None: gi, gf = gi + p[:H] * cell, gf + p[2 * H:] * cell
          i_, f_ = f(fo, cl(gi)), f(fo, cl(gf))
          if input_forget: f_ = 1 - i_
          cell = f_ * cell + i_ * f(fo + 1, cl(gc))
          if p is not None: go = go + p[H:2 * H] * cell
          h = f(fo, cl(go)) * f(fo + 2, cell)
        outs[t] = h
      ys.append(Tensor.stack(*outs))
      hs.append(h)
      cs.append(cell)
    Y, Yh, Yc = Tensor.stack(*ys, dim=1), Tensor.stack(*hs), Tensor.stack(*cs)
    if layout: Y, Yh, Yc = Y.permute(2, 0, 1, 3), Yh.transpose(0, 1), Yc.transpose(0, 1)
    return (Y, Yh, Yc)[:n_out] if kind == "LSTM" else (Y, Yh)[:n_out]
  return op

# ***** control flow *****

def _if(c, cond, then_branch, else_branch, n_out=1):
  return tuple(c.run_graph(then_branch if c.py(cond) not in (0, False, [0], [False]) else else_branch, []))

def _loop(c, M=None, cond=None, *carried, body, n_out=1):
  trips, go, vals, scans = c.py(M), True if cond is None else bool(c.py(cond)), list(carried), []
  i = 0
  while go and (trips is None or i < trips):
    outs = c.run_graph(body, [Tensor(i, dtype=c.long, device=c.device), Tensor(go, dtype=dtypes.bool, device=c.device), *vals])
    go, vals = bool(c.py(outs[0])), outs[1:1 + len(vals)]
    scans.append(outs[1 + len(vals):])
    i += 1
  n_scan = n_out - len(carried)
  return tuple(vals) + tuple(Tensor.stack(*[s[j] for s in scans]) for j in range(n_scan))


# ***** losses, attention and newer opsets *****

def _nll(c, x, target, weight=None, ignore_index=None, reduction="mean"):
  C = x.shape[1]
  cls = Tensor.arange(C, device=x.device).cast(target.dtype).reshape(1, C, *[1] * (x.ndim - 2))
  hot = target.unsqueeze(1) == cls
  picked = hot.where(x, 0).sum(1)
  w = hot.where(weight.reshape(1, C, *[1] * (x.ndim - 2)), 0).sum(1) if weight is not None else Tensor.ones(*target.shape, dtype=x.dtype, device=x.device)
  if ignore_index is not None: w = (target != ignore_index).where(w, 0)
  loss = -picked * w
  if reduction == "none": return loss
  return loss.sum() if reduction == "sum" else loss.sum() / w.sum()

def _sce(c, scores, labels, weights=None, ignore_index=None, reduction="mean", n_out=1):
  logp = scores.log_softmax(1)
  loss = _nll(c, logp, labels, weights, ignore_index, reduction)
  return (loss, logp) if n_out > 1 else loss

def _attention(c, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, is_causal=0, kv_num_heads=None,
               q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None, left_window_size=-1,
               right_window_size=-1, n_out=1):
  rank3 = q.ndim == 3
  if rank3:
    q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2) for t, h in ((q, q_num_heads), (k, kv_num_heads), (v, kv_num_heads)))
  if past_key is not None: k, v = past_key.cat(k, dim=2), past_value.cat(v, dim=2)
  present_k, present_v = k, v
  sq, skv = q.shape[2], k.shape[2]
  s = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[3]))
  bias = Tensor.zeros(sq, skv, dtype=q.dtype, device=q.device)
  if attn_mask is not None:
    if attn_mask.shape[-1] < skv:
      attn_mask = attn_mask.pad(((0, 0),) * (attn_mask.ndim - 1) + ((0, skv - attn_mask.shape[-1]),), value=False if attn_mask.dtype == dtypes.bool else -math.inf)
    bias = bias + (attn_mask.where(0.0, -math.inf).cast(q.dtype) if attn_mask.dtype == dtypes.bool else attn_mask)
  if nonpad_kv_seqlen is not None: offset = (nonpad_kv_seqlen - sq).reshape(-1, 1, 1, 1)
  else: offset = past_key.shape[2] if past_key is not None else 0
  diff = Tensor.arange(sq, device=q.device).reshape(sq, 1) + offset - Tensor.arange(skv, device=q.device).reshape(1, skv)
  allowed = None
  if is_causal: allowed = diff >= 0
  if left_window_size >= 0: allowed = (diff <= left_window_size) if allowed is None else allowed & (diff <= left_window_size)
  if right_window_size >= 0: allowed = (-diff <= right_window_size) if allowed is None else allowed & (-diff <= right_window_size)
  if allowed is not None: bias = bias + allowed.where(0.0, -math.inf).cast(q.dtype)
  if nonpad_kv_seqlen is not None:
    bias = bias + (Tensor.arange(skv, device=q.device).reshape(1, 1, 1, skv) < nonpad_kv_seqlen.reshape(-1, 1, 1, 1)).where(0.0, -math.inf).cast(q.dtype)
  hq, hk = q.shape[1], k.shape[1]
  if hq != hk: k, v = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
  qk = (q * s) @ (k * s).transpose(-1, -2)
  if softcap and softcap > 0: qk = (qk / softcap).tanh() * softcap
  qk_out = qk
  biased = qk + bias
  if qk_matmul_output_mode == 1 and not softcap: qk_out = biased
  elif qk_matmul_output_mode == 1: qk_out = qk
  sm_in = biased.cast(_dt(softmax_precision)) if softmax_precision else biased
  p = sm_in.softmax(-1)
  p = bias.max(-1, keepdim=True).eq(-math.inf).where(0, p)
  if qk_matmul_output_mode == 2: qk_out = sm_in
  if qk_matmul_output_mode == 3: qk_out = p
  y = p.cast(q.dtype) @ v
  if rank3: y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
  return (y, present_k, present_v, qk_out.cast(q.dtype))[:n_out] if n_out > 1 else y

def _rms_norm(c, x, scale, axis=-1, epsilon=1e-5, stash_type=1):
  ax = tuple(range(normalize_axis(axis, x.ndim), x.ndim))
  xf = x.cast(dtypes.float32) if stash_type == 1 and x.dtype != dtypes.float64 else x
  return (xf * (xf.square().mean(ax, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale

def _rotary(c, x, cos, sin, position_ids=None, interleaved=0, num_heads=0, rotary_embedding_dim=0):
  shape4 = x.ndim == 4
  y = x.transpose(1, 2) if shape4 else x.reshape(x.shape[0], x.shape[1], num_heads, -1)
  d = rotary_embedding_dim or y.shape[3]
  rot, keep = y[..., :d], y[..., d:]
  if position_ids is not None: cos, sin = _gather(c, cos, position_ids), _gather(c, sin, position_ids)
  cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
  x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :d // 2], rot[..., d // 2:])
  real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = real.unsqueeze(-1).cat(imag.unsqueeze(-1), dim=-1).reshape(rot.shape) if interleaved else real.cat(imag, dim=-1)
  out = rot.cat(keep, dim=-1) if keep.shape[-1] else rot
  return out.transpose(1, 2) if shape4 else out.reshape(x.shape)

def _window(kind: str):
  def op(c, size, output_datatype=1, periodic=1):
    n = c.ints(size)[0]
    den = n if periodic else n - 1
    t = Tensor.arange(n, device=c.device).cast(dtypes.float32) * (2 * math.pi / den)
    w = {"hann": lambda: 0.5 - 0.5 * t.cos(), "hamming": lambda: 25 / 46 - (21 / 46) * t.cos(),
         "blackman": lambda: 0.42 - 0.5 * t.cos() + 0.08 * (t * 2).cos()}[kind]()
    return w.cast(c.dt(output_datatype))
  return op

def _center_crop_pad(c, x, shape, axes=None):
  ax = list(range(x.ndim)) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
  for a, n in zip(ax, c.ints(shape)):
    cur = x.shape[a]
    if n < cur: x = x.shrink(tuple(((cur - n) // 2, (cur - n) // 2 + n) if i == a else None for i in range(x.ndim)))
    elif n > cur: x = x.pad(tuple(((n - cur) // 2, n - cur - (n - cur) // 2) if i == a else (0, 0) for i in range(x.ndim)))
  return x

def _dynamic_quantize(c, x):
  lo, hi = x.min().minimum(0), x.max().maximum(0)
  scale = (hi - lo) / 255
  zp = _round(c, (0 - lo) / scale).clip(0, 255)
  return _quantize(c, x, scale, zp.cast(dtypes.uint8)), scale, zp.cast(dtypes.uint8)

def _cumprod(c, x, axis, exclusive=0, reverse=0):
  a = normalize_axis(c.ints(axis)[0], x.ndim)
  y = x.flip(a) if reverse else x
  if exclusive: y = y.pad(tuple((1, 0) if i == a else (0, 0) for i in range(x.ndim)), value=1).shrink(tuple((0, s) if i == a else None for i, s in enumerate(x.shape)))
  y = _same(x, y.cumprod(a))
  return y.flip(a) if reverse else y

def _reverse_sequence(c, x, seq_lens, batch_axis=1, time_axis=0):
  T = x.shape[time_axis]
  t = Tensor.arange(T, device=x.device).reshape(*[T if i == time_axis else 1 for i in range(x.ndim)])
  ln = seq_lens.cast(dtypes.int32).reshape(*[-1 if i == batch_axis else 1 for i in range(x.ndim)])
  src = (t < ln).where(ln - 1 - t, t)
  return x.gather(time_axis, src.expand(x.shape))

def _max_unpool(c, x, idx, output_shape=None, kernel_shape=None, pads=None, strides=None):
  nd = len(kernel_shape)
  s_ = strides or [1] * nd
  pp = pads or [0] * (2 * nd)
  out = c.ints(output_shape) if output_shape is not None else \
    list(x.shape[:2]) + [(i - 1) * s - pp[j] - pp[j + nd] + k for j, (i, s, k) in enumerate(zip(x.shape[2:], s_, kernel_shape))]
  n_out = prod(out)
  flat = (idx.reshape(-1, 1) == Tensor.arange(n_out, device=x.device).cast(idx.dtype).reshape(1, -1))
  return flat.where(x.reshape(-1, 1), 0).sum(0, dtype=x.dtype).reshape(out)

def _bitcast(c, x, to): return x.bitcast(_dt(to))

# ONNX op -> its Tensor program: f(ctx, *inputs, **attributes). An attribute the function does not name is an error.
OPS: dict[str, Callable] = {
  "Identity": lambda c, x: x, "Abs": lambda c, x: x.abs(), "Neg": lambda c, x: x.neg(), "Sign": lambda c, x: _same(x, x.sign()),
  "Exp": lambda c, x: x.exp(), "Log": lambda c, x: x.log(), "Sqrt": lambda c, x: x.sqrt(), "Reciprocal": lambda c, x: x.reciprocal(),
  "Floor": lambda c, x: x.floor(), "Ceil": lambda c, x: x.ceil(), "Round": _round, "Erf": lambda c, x: x.erf(),
  "Sin": lambda c, x: x.sin(), "Cos": lambda c, x: x.cos(), "Tan": lambda c, x: x.tan(), "Asin": lambda c, x: x.asin(),
  "Acos": lambda c, x: x.acos(), "Atan": lambda c, x: x.atan(), "Sinh": lambda c, x: x.sinh(), "Cosh": lambda c, x: x.cosh(),
  "Asinh": lambda c, x: x.asinh(), "Acosh": lambda c, x: x.acosh(), "Atanh": lambda c, x: x.atanh(), "Tanh": lambda c, x: x.tanh(),
  "Relu": lambda c, x: x.relu(), "Sigmoid": lambda c, x: x.sigmoid(), "Softplus": lambda c, x: x.softplus(),
  "Softsign": lambda c, x: x.softsign(), "Mish": lambda c, x: x.mish(), "HardSwish": lambda c, x: x.hardswish(),
  "HardSigmoid": lambda c, x, alpha=0.2, beta=0.5: (x * alpha + beta).clip(0, 1), "Elu": lambda c, x, alpha=1.0: x.elu(alpha),
  "Selu": lambda c, x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875: x.selu(alpha, gamma),
  "Celu": lambda c, x, alpha=1.0: x.celu(alpha), "LeakyRelu": lambda c, x, alpha=0.01: x.leaky_relu(alpha),
  "ThresholdedRelu": lambda c, x, alpha=1.0: (x > alpha).where(x, 0), "Gelu": _gelu, "PRelu": _prelu, "Shrink": _shrink,
  "Swish": lambda c, x, alpha=1.0: x * (x * alpha).sigmoid(),
  "Not": lambda c, x: x.logical_not(), "IsNaN": lambda c, x: x.isnan(), "IsInf": _isinf, "BitwiseNot": lambda c, x: x.bitwise_not(),
  "Add": lambda c, a, b: _same(a, a + b), "Sub": lambda c, a, b: _same(a, a - b), "Mul": lambda c, a, b: _same(a, a * b), "Div": _div,
  "Pow": _pow, "Mod": _mod, "BitShift": _bitshift,
  "And": lambda c, a, b: a & b, "Or": lambda c, a, b: a | b, "Xor": lambda c, a, b: a ^ b,
  "BitwiseAnd": lambda c, a, b: a & b, "BitwiseOr": lambda c, a, b: a | b, "BitwiseXor": lambda c, a, b: a ^ b,
  "Equal": lambda c, a, b: a.eq(b), "Greater": lambda c, a, b: a > b, "Less": lambda c, a, b: a < b,
  "GreaterOrEqual": lambda c, a, b: a >= b, "LessOrEqual": lambda c, a, b: a <= b, "Where": lambda c, m, a, b: m.where(a, b),
  "Max": _variadic(lambda xs: _fold(xs, lambda a, b: a.maximum(b))), "Min": _variadic(lambda xs: _fold(xs, lambda a, b: a.minimum(b))),
  "Sum": _variadic(lambda xs: _fold(xs, lambda a, b: a + b)), "Mean": _variadic(lambda xs: _fold(xs, lambda a, b: a + b) / len(xs)),
  "Clip": _clip, "Cast": _cast, "CastLike": lambda c, x, like, saturate=1, round_mode="up": x.cast(like.dtype),
  "ReduceSum": _reduce("sum"), "ReduceMean": _reduce("mean"), "ReduceMax": _reduce("max"), "ReduceMin": _reduce("min"),
  "ReduceProd": _reduce("prod"), "ReduceL1": _reduce("l1"), "ReduceL2": _reduce("l2"), "ReduceSumSquare": _reduce("sumsq"),
  "ReduceLogSum": _reduce("logsum"), "ReduceLogSumExp": _reduce("logsumexp"), "ArgMax": _arg(True), "ArgMin": _arg(False),
  "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Transpose": _transpose, "Concat": _concat,
  "Split": _split, "Slice": _slice, "Expand": _expand, "Tile": _tile, "Pad": _pad, "Shape": _shape, "Size": _size,
  "ConstantOfShape": _const_of_shape, "Range": _range, "Gather": _gather, "GatherElements": _gather_elements, "GatherND": _gather_nd,
  "ScatterElements": _scatter_elements, "Scatter": _scatter_elements, "ScatterND": _scatter_nd, "OneHot": _one_hot, "CumSum": _cumsum,
  "TopK": _topk, "Trilu": _trilu, "EyeLike": _eye_like, "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth,
  "NonZero": _nonzero, "Compress": _compress,
  "MatMul": lambda c, a, b: a @ b, "Gemm": _gemm, "Conv": _conv, "ConvTranspose": _conv_transpose, "MaxPool": _max_pool,
  "AveragePool": _avg_pool, "LpPool": _lp_pool, "GlobalAveragePool": _global("avg"), "GlobalMaxPool": _global("max"),
  "GlobalLpPool": lambda c, x, p=2: x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1 / p),
  "BatchNormalization": _batchnorm, "InstanceNormalization": _instancenorm, "LayerNormalization": _layernorm,
  "GroupNormalization": _groupnorm, "LRN": _lrn, "MeanVarianceNormalization": _mvn,
  "LpNormalization": _lp_norm,
  "Softmax": _softmax("softmax"), "LogSoftmax": _softmax("log_softmax"), "Hardmax": _softmax("hardmax"),
  "Dropout": _dropout, "Einsum": _einsum, "Resize": _resize, "Upsample": _upsample,
  "DequantizeLinear": _dequantize, "QuantizeLinear": _quantize, "MatMulInteger": _matmul_integer, "QLinearMatMul": _qlinear_matmul,
  "QLinearConv": _qlinear_conv, "ConvInteger": _conv_integer,
  "NegativeLogLikelihoodLoss": _nll, "SoftmaxCrossEntropyLoss": _sce, "Attention": _attention, "RMSNormalization": _rms_norm,
  "RotaryEmbedding": _rotary, "HannWindow": _window("hann"), "HammingWindow": _window("hamming"), "BlackmanWindow": _window("blackman"),
  "CenterCropPad": _center_crop_pad, "DynamicQuantizeLinear": _dynamic_quantize, "CumProd": _cumprod, "ReverseSequence": _reverse_sequence,
  "MaxUnpool": _max_unpool, "BitCast": _bitcast, "SwiGLU": lambda c, a, b, alpha=1.0: a * (a * alpha).sigmoid() * b,
  "RNN": _recurrent("RNN"), "GRU": _recurrent("GRU"), "LSTM": _recurrent("LSTM"), "If": _if, "Loop": _loop,
}

def _fold(xs: list[Tensor], fn) -> Tensor:
  out = xs[0]
  for x in xs[1:]: out = fn(out, x)
  return out

# ops whose positional ONNX inputs and attributes share a name: the inputs are renamed so both can be passed
INPUT_NAMES = {"Slice": ("starts", "ends", "axes_in", "steps_in")}
ATTR_RENAMES = {"Slice": {"starts": "starts_attr", "ends": "ends_attr", "axes": "axes_attr"}}
