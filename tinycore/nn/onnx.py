"""Run ONNX models: OnnxRunner reads the protobuf itself and builds each node from Tensor methods; `python -m tinycore.nn.onnx`."""
from __future__ import annotations
import argparse, inspect, io, os, sys, time, warnings
from types import SimpleNamespace
from typing import Any
import numpy as np
from tinycore.dtype import dtypes, DType, to_np_dtype, to_np_value_dtype
from tinycore.tensor import Tensor, _plain
from tinycore.schedule import buffers, new_buffer_uop, max_size
from tinycore.helpers import prod
from tinycore import engine
from tinycore.jit import TinyJit, _uops_in
from tinycore.uop import UOp, Ops, Variable, ssimplify
from tinycore.runtime.device import Device
from tinycore.nn.onnx_proto import parse, tensor_to_numpy, ONNX_TYPE_NAMES
from tinycore.nn.onnx_ops import OPS, KNOWN_OPS, Ctx, ONNX_DTYPES, SMALL, INPUT_NAMES, ATTR_RENAMES, to_small

NEWEST_OPSET = 28  # the newest ai.onnx opset this importer knows (onnx 1.23); 7 is the oldest it promises
# AttributeProto.AttributeType -> the field holding the value
_ATTR_FIELD = {1: "f", 2: "i", 3: "s", 4: "t", 5: "g", 6: "floats", 7: "ints", 8: "strings", 9: "tensors", 10: "graphs", 11: "sparse_tensor", 13: "tp"}

class OnnxError(Exception):
  """An ONNX model this importer cannot run, or inputs that do not fit it; the message names the node, op and opset."""

def _load_bytes(model) -> tuple[bytes, str | None]:
  if isinstance(model, (bytes, bytearray, memoryview)): return bytes(model), None
  if isinstance(model, (str, os.PathLike)):
    with open(model, "rb") as f: return f.read(), os.path.dirname(os.path.abspath(model))
  if isinstance(model, io.IOBase) or hasattr(model, "read"):
    name = getattr(model, "name", None)
    return model.read(), os.path.dirname(os.path.abspath(name)) if isinstance(name, str) else None
  raise TypeError(f"OnnxRunner takes a path, bytes or a file object, not {type(model).__name__}")

def _staged(t: Tensor, shape: tuple) -> Tensor:
  """t's elements at the front of a fresh buffer sized for `shape`'s maximum: a kernel is keyed by its buffers' sizes, so
  every size then reads the same kernels."""
  if not _plain(t.uop): t = t.contiguous()
  src = t.realize()._buffer()
  u = new_buffer_uop(src.device, max_size(shape), t.dtype)
  if buffers[u].allocator.supports_offset: engine.copy(buffers[u].view(src.size, src.dtype, 0), src)
  else: buffers[u].copyin(src.as_bytes() + bytes(buffers[u].nbytes - src.nbytes))
  return Tensor(u)

def _front(u: UOp) -> UOp | None:
  """The BUFFER that a realized tensor of symbolic shape fills from its start (RESHAPE(SHRINK(BUFFER))), else None."""
  if u.op is Ops.RESHAPE: u = u.src[0]
  if u.op is Ops.SHRINK and len(u.arg) == 1 and u.arg[0][0] == 0: u = u.src[0]
  return u if u.op is Ops.BUFFER else None

def _np_to_tensor(arr: np.ndarray, dt: DType, device: str | None) -> Tensor:
  if dt == dtypes.bfloat16: return Tensor(np.asarray(arr, np.float32, order="C"), device=device).cast(dt)
  return Tensor(np.asarray(arr).astype(to_np_dtype(dt), order="C", copy=False), device=device, dtype=dt)

class OnnxRunner:
  """An ONNX model as a Tensor program. `runner({name: array or Tensor})` returns {output name: Tensor}; a sequence is a list
  of them and an empty optional is None, on either side.
  A dimension the model names (dim_param, e.g. a batch size) is a Variable bound to each call's size, from 1 to `max_dim`
  (default: the ONNX_MAX_DIM environment variable, else 64): every size runs the same compiled kernels, and each
  intermediate buffer is sized for the maximum. A model whose shape arithmetic cannot stay symbolic falls back, with a
  warning, to building and compiling each size anew."""
  def __init__(self, model, device: str | None = None, jit: bool = True, max_dim: int | None = None):
    raw, self.base_dir = _load_bytes(model)
    try: self.model = parse("Model", raw)
    except (ValueError, UnicodeDecodeError) as e: raise OnnxError(f"not an ONNX model: {e}") from e
    if self.model.graph is None: raise OnnxError("the ONNX file has no graph")
    self.device = device
    # 64-bit types the backend lacks (WEBGPU) run in their 32-bit neighbours; values that do not fit are refused on load
    have = Device.renderer(Device.canonicalize(device)).supported_dtypes
    self.narrow = {d: n for d, n in ((dtypes.int64, dtypes.int32), (dtypes.uint64, dtypes.uint32), (dtypes.float64, dtypes.float32)) if d not in have}
    self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), NEWEST_OPSET)
    if self.opset > NEWEST_OPSET: raise OnnxError(f"the model needs ai.onnx opset {self.opset}; this importer knows opsets 7 to {NEWEST_OPSET}")
    self.graph = self.model.graph
    self.static: dict[int, tuple[Tensor, list]] = {}  # build-time values of shape-like tensors (Ctx.know), initializers' kept
    self.small: dict[int, tuple[Tensor, int]] = {}  # tensors standing in for 8/4/2-bit types (Ctx.small_type): initializers, then per call
    self.initializers = {t.name: self._tensor(t) for t in self.graph.initializer}
    self.small_initializers = dict(self.small)
    for t in self.initializers.values():  # small integer initializers are shape arguments: known while building, never read back
      if dtypes.is_int(t.dtype) and t.ndim <= 1 and t.numel() <= 64: self.static[id(t)] = (t, t.tolist())
    self.inputs = [i for i in self.graph.input if i.name not in self.initializers]
    self.output_names = [o.name for o in self.graph.output]
    # repeated calls replay the captured kernels (TinyJit, one per input signature) unless building reads input data
    self.jit, self.jits, self.data_uops, self.reads_data = jit, {}, set(), False
    self.max_dim = max_dim if max_dim is not None else int(os.environ.get("ONNX_MAX_DIM", 64))
    if self.max_dim < 1: raise ValueError(f"max_dim (ONNX_MAX_DIM) must be at least 1, got {self.max_dim}")
    self.variables: dict[str, UOp] = {}  # dim_param -> its Variable; cleared when the model falls back to fixed sizes
    self.symbolic = True

  def _tensor(self, t: SimpleNamespace) -> Tensor:
    if t.data_type not in ONNX_DTYPES:
      raise OnnxError(f"tensor {t.name!r} has type {ONNX_TYPE_NAMES.get(t.data_type, t.data_type)}, which tinycore does not support")
    arr = tensor_to_numpy(t, self.base_dir)
    out = _np_to_tensor(self._fit(arr, t.name), self._dt(t.data_type), self.device).realize()
    if t.data_type in SMALL: self.small[id(out)] = (out, t.data_type)
    return out

  def _dt(self, onnx_type: int) -> DType: return self.narrow.get(ONNX_DTYPES[onnx_type], ONNX_DTYPES[onnx_type])
  def _fit(self, arr: np.ndarray, name: str) -> np.ndarray:
    """An int64 array for a backend without int64: int32, where slice bounds like INT64_MAX clamp (they only ever clamp)."""
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize < 8 or dtypes.int64 not in self.narrow: return arr
    lo, hi = np.iinfo(np.int32 if arr.dtype.kind == "i" else np.uint32).min, np.iinfo(np.int32 if arr.dtype.kind == "i" else np.uint32).max
    return np.clip(arr, lo, hi)

  def _value(self, name: str, tp: SimpleNamespace | None, value) -> Any:
    """An input value as its ONNX type asks: a Tensor, a sequence (a list of them) or an optional (None when empty)."""
    if tp is not None and tp.optional_type is not None: return None if value is None else self._value(name, tp.optional_type.elem_type, value)
    if tp is not None and tp.sequence_type is not None:
      if not isinstance(value, (list, tuple)): raise OnnxError(f"input {name!r} is a sequence: pass a list of arrays, not {type(value).__name__}")
      return [self._value(f"{name}[{i}]", tp.sequence_type.elem_type, v) for i, v in enumerate(value)]
    tt = tp.tensor_type if tp is not None else None
    if tt is None: raise OnnxError(f"input {name!r} is not a tensor, sequence or optional (maps and sparse tensors are not supported)")
    if value is None: raise OnnxError(f"input {name!r} is a tensor, not an optional: None is not a value for it")
    if tt.elem_type not in ONNX_DTYPES:
      raise OnnxError(f"input {name!r} has type {ONNX_TYPE_NAMES.get(tt.elem_type, tt.elem_type)}, which tinycore does not support")
    dt = self._dt(tt.elem_type)
    if not isinstance(value, Tensor) and dt != ONNX_DTYPES[tt.elem_type] and dtypes.is_int(dt):
      value = np.asarray(value)
      if value.size and (value.min() < dtypes.min(dt) or value.max() > dtypes.max(dt)):
        raise OnnxError(f"input {name!r}: values outside {dt.name} on {self.device}, which has no 64-bit integers")
    if tt.elem_type in SMALL:  # any values are rounded onto the type's grid (exact values stay as they are)
      t = to_small(value if isinstance(value, Tensor) else Tensor(np.asarray(value).astype(np.float32), device=self.device), tt.elem_type)
      self.small[id(t)] = (t, tt.elem_type)
    else: t = value if isinstance(value, Tensor) else _np_to_tensor(np.asarray(value), dt, self.device)
    if t.dtype != dt: t = t.cast(dt)
    if tt.shape is None: return t
    if len(tt.shape.dim) != t.ndim: raise OnnxError(f"input {name!r} needs {len(tt.shape.dim)} dims, got shape {t.shape}")
    for i, (d, n) in enumerate(zip(tt.shape.dim, t.shape)):
      if d.dim_value and d.dim_value != n: raise OnnxError(f"input {name!r} dim {i} must be {d.dim_value}, got shape {t.shape}")
    return t

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Any]:
    names = {i.name for i in self.inputs}
    if missing := names - set(inputs): raise OnnxError(f"missing inputs {sorted(missing)}; the model takes {sorted(names)}")
    if extra := set(inputs) - names - set(self.initializers): raise OnnxError(f"unknown inputs {sorted(extra)}; the model takes {sorted(names)}")
    self.small = dict(self.small_initializers)
    feeds = {i.name: self._value(i.name, i.type, inputs[i.name]) for i in self.graph.input if i.name in inputs}
    shapes = self._named(feeds) if self.symbolic else {}
    if not shapes: return self._outputs(self._call(feeds, {}))
    try: return self._outputs(self._call(feeds, shapes))
    except Exception as e:  # noqa: BLE001  (the same call with fixed sizes raises the model's real error, if it has one)
      outs = self._outputs(self._call(feeds, {}))
      where = f"{type(e).__name__}: {e}".splitlines()[0]
      warnings.warn(f"OnnxRunner: this model's named dimensions ({', '.join(self.variables)}) cannot stay symbolic ({where}); "
                    "each size is built and compiled anew")
      self.symbolic, self.variables, self.reads_data = False, {}, False
      self.jits = {k: j for k, j in self.jits.items() if all(isinstance(d, int) for _, shape, _ in k for d in shape)}
      return outs

  def _named(self, feeds: dict[str, Any]) -> dict[str, tuple]:
    """The shape of each input with a named dimension (dim_param), that dimension a Variable bound to its size."""
    sizes: dict[str, int] = {}
    out = {}
    for i in self.inputs:
      t, tt = feeds.get(i.name), i.type.tensor_type if i.type is not None else None
      if not isinstance(t, Tensor) or t.numel() == 0 or tt is None or tt.shape is None: continue
      dims = []
      for ax, (d, n) in enumerate(zip(tt.shape.dim, t.shape)):
        if not d.dim_param or sizes.setdefault(d.dim_param, n) != n: dims.append(n)  # one name given two sizes: two dimensions
        elif n > self.max_dim:
          raise OnnxError(f"input {i.name!r} dim {ax} ({d.dim_param!r}) is {n}, above max_dim={self.max_dim}, the largest size named "
                          "dimensions are compiled for: pass OnnxRunner(..., max_dim=N) or set ONNX_MAX_DIM")
        else: dims.append(self.variables.setdefault(d.dim_param, Variable(d.dim_param, 1, self.max_dim)).bind(n))
      if not all(isinstance(d, int) for d in dims): out[i.name] = tuple(dims)
    return out

  def _call(self, feeds: dict[str, Any], shapes: dict[str, tuple]) -> dict[str, Any]:
    """Build (or replay) the graph; an input in `shapes` runs in that symbolic shape from a buffer sized for its maximum."""
    args = {k: _staged(v, shapes[k]) if k in shapes else v for k, v in feeds.items()}
    self.views = shapes
    if not self.jit or self.reads_data or not all(isinstance(v, Tensor) for v in feeds.values()): return self._build(self._view(args))
    key = tuple((k, tuple(d.unbind_all()[0] if isinstance(d, UOp) else d for d in shapes.get(k, v.shape)), v.dtype) for k, v in feeds.items())
    binds = list({d: None for s in shapes.values() for d in s if isinstance(d, UOp)})  # replays learn the sizes from these
    outs = self.jits.setdefault(key, TinyJit(self._jitted))(*args.values(), *binds, names=tuple(args))
    if self.reads_data: self.jits.clear()  # this build read input data: its kernels are right for this call only
    # the jit's output buffers are overwritten by its next replay: each call returns its own copies
    return {k: v.clone().realize() if isinstance(v, Tensor) else v for k, v in outs.items()}

  def _view(self, args: dict[str, Any]) -> dict[str, Any]:
    return {k: v.shrink(((0, ssimplify(prod(s))),)).reshape(s) if (s := self.views.get(k)) else v for k, v in args.items()}

  def _outputs(self, outs: dict[str, Any]) -> dict[str, Any]:
    """Outputs of a symbolic shape as plain tensors of this call's shape, so reading them compiles nothing per size."""
    def fixed(v):
      if isinstance(v, list): return [fixed(x) for x in v]
      if not isinstance(v, Tensor) or all(isinstance(d, int) for d in v.shape): return v
      shape = v._concrete_shape()
      # realized in a symbolic shape, a tensor is the first prod(shape) elements of a buffer sized for the maximum
      if (front := _front(v.uop)) is None: front = _front(v.contiguous().realize().uop)
      buf = buffers[front]
      if not buf.allocator.supports_offset: return Tensor(v.numpy(), device=v.device, dtype=v.dtype)
      return Tensor(new_buffer_uop(buf.device, prod(shape), v.dtype, buf.view(prod(shape), v.dtype, 0)).reshape(shape))
    return {k: fixed(v) for k, v in outs.items()}

  def _jitted(self, *args: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The graph over fresh copies of its outputs (an output that is an input must be recomputed at each replay)."""
    return {k: v.clone() if isinstance(v, Tensor) else v for k, v in self._build(self._view(dict(zip(names, args)))).items()}

  def _build(self, feeds: dict[str, Any]) -> dict[str, Any]:
    self.data_uops = {v.uop for v in feeds.values() if isinstance(v, Tensor)}
    env: dict[str, Any] = {**self.initializers, **feeds}
    return dict(zip(self.output_names, self._run(self.graph, env, dict(self.static))))

  def _read(self, t: Tensor) -> None:
    """Building reads t's values (a shape from data, a loop condition, a count): from the inputs' data or a symbolic size
    (whose value is this call's), the graph is right for this call only and the jit is off."""
    if self.reads_data: return
    nodes = t.uop.toposort()
    if not self.data_uops.isdisjoint(nodes) or any(u.op is Ops.BIND or _uops_in(u.arg) for u in nodes): self.reads_data = True

  def _run(self, graph: SimpleNamespace, env: dict[str, Any], static: dict[int, tuple[Tensor, list]]) -> list:
    """Run one graph's nodes in order over `env` (name -> Tensor; outer scopes included) and return its outputs."""
    for t in graph.initializer:
      if t.name not in env: env[t.name] = self._tensor(t)
    def run_graph(g, args: list) -> list:
      inner = dict(env)
      inner.update({i.name: a for i, a in zip(g.input, args)})
      return self._run(g, inner, static)
    ctx = Ctx(self.opset, self.device, static, run_graph, self.narrow, self.small, self._read)
    for n in graph.node:
      where = f"node {n.name or n.output[0]!r} (op {n.op_type}, opset {self.opset})"
      if n.domain not in ("", "ai.onnx"): raise OnnxError(f"{where}: domain {n.domain!r} is not supported, only the default ai.onnx ops")
      try: outs = self._node(n, env, ctx)
      except OnnxError: raise
      except (NotImplementedError, ValueError, TypeError, KeyError, IndexError, AssertionError, ZeroDivisionError) as e:
        raise OnnxError(f"{where}: {type(e).__name__}: {e}") from e
      for name, v in zip(n.output, outs if isinstance(outs, tuple) else (outs,)):  # a list is one sequence value
        if name: env[name] = v
    return [env[o.name] for o in graph.output]

  def _attr(self, a: SimpleNamespace) -> Any:
    field = _ATTR_FIELD.get(a.type)
    if field is None: raise NotImplementedError(f"attribute {a.name!r} of type {a.type} is not supported")
    v = getattr(a, field)
    if field == "s": return v.decode("utf-8", "replace")
    if field == "t": return self._tensor(v)
    if field == "tensors": return [self._tensor(t) for t in v]
    if field == "sparse_tensor": raise NotImplementedError(f"attribute {a.name!r}: sparse tensors are not supported")
    return v

  def _node(self, n: SimpleNamespace, env: dict[str, Any], ctx: Ctx):
    for i in n.input:
      if i and i not in env: raise OnnxError(f"node {n.name!r} (op {n.op_type}): input {i!r} is not produced by any earlier node or input")
    ins = [env[i] if i else None for i in n.input]
    while ins and not n.input[len(ins) - 1]: ins.pop()  # inputs left out at the end take their defaults (an empty optional stays)
    attrs = {a.name: self._attr(a) for a in n.attribute}
    if n.op_type == "Constant": return self._constant(attrs, ctx)
    fn = OPS.get(n.op_type)
    if fn is None: raise NotImplementedError(f"op {n.op_type} is not supported by tinycore's ONNX importer")
    attrs = {ATTR_RENAMES.get(n.op_type, {}).get(k, k): v for k, v in attrs.items()}
    params = inspect.signature(fn).parameters
    if "n_out" in params: attrs["n_out"] = len(n.output)
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
      if bad := [k for k in attrs if k not in params]:
        raise NotImplementedError(f"attribute(s) {bad} are not supported (supported: {[k for k in params if k not in ('c', 'n_out')]})")
    args, kw = (ins[:1], {**dict(zip(INPUT_NAMES[n.op_type], ins[1:])), **attrs}) if INPUT_NAMES.get(n.op_type) and len(ins) > 1 else (ins, attrs)
    out = fn(ctx, *args, **kw)
    if n.op_type in KNOWN_OPS and isinstance(out, Tensor) and dtypes.is_int(out.dtype) and out.ndim <= 1 and \
       all(ctx.known(t) is not None for t in ins if isinstance(t, Tensor)):  # shape arithmetic: its value is known too
      obj = lambda v: np.array(ctx.known(v), dtype=object) if isinstance(v, Tensor) else v  # noqa: E731
      try: value = KNOWN_OPS[n.op_type](ctx, *map(obj, args), **{k: obj(v) for k, v in kw.items()})
      except (TypeError, ValueError, IndexError): value = None  # e.g. a symbolic size where a number is needed: not known
      if value is not None and np.shape(value) == out.shape: ctx.know(out, np.asarray(value, dtype=object).tolist())
    return out

  def _constant(self, attrs: dict, ctx: Ctx) -> Tensor:
    (key, v), = attrs.items()
    if key == "value": t = v
    elif key in ("value_float", "value_floats"): t = Tensor(v, dtype=dtypes.float32, device=self.device)
    elif key in ("value_int", "value_ints"): t = Tensor(v, dtype=ctx.long, device=self.device)
    else: raise NotImplementedError(f"Constant with {key} is not supported")
    if dtypes.is_int(t.dtype) and t.ndim <= 1 and t.numel() <= 64: ctx.know(t, t.tolist())
    return t

# ***** command line *****

def _random_inputs(runner: OnnxRunner, seed: int = 0) -> dict[str, np.ndarray]:
  rng, out = np.random.default_rng(seed), {}
  for i in runner.inputs:
    tt = i.type.tensor_type
    shape = [d.dim_value or 1 for d in tt.shape.dim] if tt.shape is not None else []
    dt = ONNX_DTYPES[tt.elem_type]
    arr = rng.standard_normal(shape) if dtypes.is_float(dt) else rng.integers(0, 2 if dt == dtypes.bool else 10, shape)
    out[i.name] = arr.astype(to_np_value_dtype(dt))
  return out

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m tinycore.nn.onnx", description="Run an ONNX model with tinycore")
  ap.add_argument("model")
  ap.add_argument("--device", default=None, help="device to run on (default: the default device)")
  ap.add_argument("--inputs", default=None, help=".npz file of inputs by name (default: random inputs from the declared shapes)")
  ap.add_argument("--bench", action="store_true", help="time repeated runs")
  args = ap.parse_args(argv)
  runner = OnnxRunner(args.model, device=args.device)
  inputs = dict(np.load(args.inputs)) if args.inputs else _random_inputs(runner)
  t0 = time.perf_counter()
  outs = {k: v.numpy() for k, v in runner(inputs).items()}
  print(f"first run (build, compile, run): {(time.perf_counter() - t0) * 1e3:.1f} ms")
  for k, v in outs.items(): print(f"{k}: {v.dtype}{list(v.shape)} {np.array2string(v.reshape(-1)[:8], precision=5)}{' ...' if v.size > 8 else ''}")
  if args.bench:
    times = []
    for _ in range(10):
      t0 = time.perf_counter()
      for v in runner(inputs).values(): v.realize()
      times.append(time.perf_counter() - t0)
    print(f"time per run: {min(times) * 1e3:.3f} ms (best of {len(times)})")
  try: import onnxruntime as ort  # optional: only for the comparison
  except ImportError: return 0
  sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
  for k, ref in zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)):
    if k in outs:
      diff = np.abs(outs[k].astype(np.float64) - ref.astype(np.float64)).max() if ref.size else 0.0
      print(f"{k}: max |tinycore - onnxruntime| = {diff:.3g}")
  return 0

if __name__ == "__main__": sys.exit(main())
