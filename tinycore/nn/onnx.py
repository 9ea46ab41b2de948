"""Run ONNX models: OnnxRunner reads the protobuf itself and builds each node from Tensor methods; `python -m tinycore.nn.onnx`."""
from __future__ import annotations
import argparse, inspect, io, os, sys, time
from types import SimpleNamespace
from typing import Any
import numpy as np
from tinycore.dtype import dtypes, DType, to_np_dtype
from tinycore.tensor import Tensor
from tinycore.runtime.device import Device
from tinycore.nn.onnx_proto import parse, tensor_to_numpy, ONNX_TYPE_NAMES
from tinycore.nn.onnx_ops import OPS, Ctx, ONNX_DTYPES, INPUT_NAMES, ATTR_RENAMES

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

def _np_to_tensor(arr: np.ndarray, dt: DType, device: str | None) -> Tensor:
  if dt == dtypes.bfloat16: return Tensor(np.asarray(arr, np.float32, order="C"), device=device).cast(dt)
  return Tensor(np.asarray(arr).astype(to_np_dtype(dt), order="C", copy=False), device=device, dtype=dt)

class OnnxRunner:
  """An ONNX model as a Tensor program. `runner({name: array or Tensor})` returns {output name: Tensor}.
  A dimension the model names (dim_param, e.g. a batch size) takes any size; each new size is scheduled (and compiled) anew."""
  def __init__(self, model, device: str | None = None):
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
    self.initializers = {t.name: self._tensor(t) for t in self.graph.initializer}
    self.inputs = [i for i in self.graph.input if i.name not in self.initializers]
    self.output_names = [o.name for o in self.graph.output]

  def _tensor(self, t: SimpleNamespace) -> Tensor:
    if t.data_type not in ONNX_DTYPES:
      raise OnnxError(f"tensor {t.name!r} has type {ONNX_TYPE_NAMES.get(t.data_type, t.data_type)}, which tinycore does not support")
    arr = tensor_to_numpy(t, self.base_dir)
    return _np_to_tensor(self._fit(arr, t.name), self._dt(t.data_type), self.device).realize()

  def _dt(self, onnx_type: int) -> DType: return self.narrow.get(ONNX_DTYPES[onnx_type], ONNX_DTYPES[onnx_type])
  def _fit(self, arr: np.ndarray, name: str) -> np.ndarray:
    """An int64 array for a backend without int64: int32, where slice bounds like INT64_MAX clamp (they only ever clamp)."""
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize < 8 or dtypes.int64 not in self.narrow: return arr
    lo, hi = np.iinfo(np.int32 if arr.dtype.kind == "i" else np.uint32).min, np.iinfo(np.int32 if arr.dtype.kind == "i" else np.uint32).max
    return np.clip(arr, lo, hi)

  def _input(self, info: SimpleNamespace, value) -> Tensor:
    tt = info.type.tensor_type if info.type is not None else None
    if tt is None: raise OnnxError(f"input {info.name!r} is not a tensor (sequences, maps and optionals are not supported)")
    if tt.elem_type not in ONNX_DTYPES:
      raise OnnxError(f"input {info.name!r} has type {ONNX_TYPE_NAMES.get(tt.elem_type, tt.elem_type)}, which tinycore does not support")
    dt = self._dt(tt.elem_type)
    if not isinstance(value, Tensor) and dt != ONNX_DTYPES[tt.elem_type] and dtypes.is_int(dt):
      value = np.asarray(value)
      if value.size and (value.min() < dtypes.min(dt) or value.max() > dtypes.max(dt)):
        raise OnnxError(f"input {info.name!r}: values outside {dt.name} on {self.device}, which has no 64-bit integers")
    t = value if isinstance(value, Tensor) else _np_to_tensor(np.asarray(value), dt, self.device)
    if t.dtype != dt: t = t.cast(dt)
    if tt.shape is None: return t
    if len(tt.shape.dim) != t.ndim: raise OnnxError(f"input {info.name!r} needs {len(tt.shape.dim)} dims, got shape {t.shape}")
    for i, (d, n) in enumerate(zip(tt.shape.dim, t.shape)):
      if d.dim_value and d.dim_value != n: raise OnnxError(f"input {info.name!r} dim {i} must be {d.dim_value}, got shape {t.shape}")
    return t

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Tensor]:
    names = {i.name for i in self.inputs}
    if missing := names - set(inputs): raise OnnxError(f"missing inputs {sorted(missing)}; the model takes {sorted(names)}")
    if extra := set(inputs) - names - set(self.initializers): raise OnnxError(f"unknown inputs {sorted(extra)}; the model takes {sorted(names)}")
    env: dict[str, Any] = dict(self.initializers)
    for i in self.graph.input:
      if i.name in inputs: env[i.name] = self._input(i, inputs[i.name])
    outs = self._run(self.graph, env, {})
    return dict(zip(self.output_names, outs))

  def _run(self, graph: SimpleNamespace, env: dict[str, Any], static: dict[int, tuple[Tensor, list]]) -> list:
    """Run one graph's nodes in order over `env` (name -> Tensor; outer scopes included) and return its outputs."""
    for t in graph.initializer:
      if t.name not in env: env[t.name] = self._tensor(t)
    def run_graph(g, args: list) -> list:
      inner = dict(env)
      inner.update({i.name: a for i, a in zip(g.input, args)})
      return self._run(g, inner, static)
    ctx = Ctx(self.opset, self.device, static, run_graph, self.narrow)
    for n in graph.node:
      where = f"node {n.name or n.output[0]!r} (op {n.op_type}, opset {self.opset})"
      if n.domain not in ("", "ai.onnx"): raise OnnxError(f"{where}: domain {n.domain!r} is not supported, only the default ai.onnx ops")
      try: outs = self._node(n, env, ctx)
      except OnnxError: raise
      except (NotImplementedError, ValueError, TypeError, KeyError, IndexError, AssertionError, ZeroDivisionError) as e:
        raise OnnxError(f"{where}: {type(e).__name__}: {e}") from e
      for name, v in zip(n.output, outs if isinstance(outs, (tuple, list)) else (outs,)):
        if name: env[name] = v
    return [env[o.name] for o in graph.output]

  def _attr(self, a: SimpleNamespace) -> Any:
    field = _ATTR_FIELD.get(a.type)
    if field is None: raise NotImplementedError(f"attribute {a.name!r} of type {a.type} is not supported")
    v = getattr(a, field)
    if field == "s": return v.decode("utf-8", "replace")
    if field == "t": return self._tensor(v)
    if field == "tensors": return [self._tensor(t) for t in v]
    if field in ("sparse_tensor", "tp"): raise NotImplementedError(f"attribute {a.name!r}: sparse tensors and type protos are not supported")
    return v

  def _node(self, n: SimpleNamespace, env: dict[str, Any], ctx: Ctx):
    for i in n.input:
      if i and i not in env: raise OnnxError(f"node {n.name!r} (op {n.op_type}): input {i!r} is not produced by any earlier node or input")
    ins = [env[i] if i else None for i in n.input]
    while ins and ins[-1] is None: ins.pop()
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
    if INPUT_NAMES.get(n.op_type) and len(ins) > 1: return fn(ctx, ins[0], **dict(zip(INPUT_NAMES[n.op_type], ins[1:])), **attrs)
    return fn(ctx, *ins, **attrs)

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
    out[i.name] = arr.astype(np.float32 if dt == dtypes.bfloat16 else to_np_dtype(dt))
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
