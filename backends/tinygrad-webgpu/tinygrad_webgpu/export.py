"""Export a tinycore function to the browser: a folder with model.js (the WGSL kernels, their launch plan and a runtime for
navigator.gpu), the weights, an example and a page, every input flowing into the kernels."""
from __future__ import annotations
import inspect, json, math, os, shutil, sys, traceback
from pathlib import Path
import numpy as np
from tinycore.dtype import dtypes
from tinycore.helpers import all_int, prod
from tinycore.uop import UOp, Ops, sym_eval, ssimplify
from tinycore.runtime.device import Buffer
from tinycore.runtime.errors import TinycoreError, UnsupportedError
from tinygrad_webgpu.renderer import dispatch_for, launch_shape, uniform_binding

HERE = Path(__file__).resolve().parent
# each dtype's name in model.js, whose runtime (runtime.js) maps it to the typed array run() takes and gives
JS_DTYPES = {dtypes.float32: "float32", dtypes.float16: "float16", dtypes.bfloat16: "bfloat16", dtypes.int32: "int32", dtypes.uint32: "uint32",
             dtypes.int16: "int16", dtypes.uint16: "uint16", dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.bool: "bool"}
# index math as JavaScript of `v` (the Variables' values by name): output shapes and kernel sizes of a symbolic dimension
JS_INDEX_OPS = {Ops.ADD: "({0} + {1})", Ops.SUB: "({0} - {1})", Ops.MUL: "({0} * {1})", Ops.IDIV: "idiv({0}, {1})", Ops.MOD: "imod({0}, {1})",
                Ops.MAX: "Math.max({0}, {1})", Ops.NEG: "(-{0})", Ops.CMPLT: "({0} < {1})", Ops.CMPNE: "({0} !== {1})",
                Ops.CMPEQ: "({0} === {1})", Ops.WHERE: "({0} ? {1} : {2})"}

class ExportError(TinycoreError, ValueError):
  """The function cannot become a page that computes its outputs from its inputs; the message says why and where."""

def js_size(x) -> str:
  """A size (an int, or index math of Variables) as a JavaScript expression of `v`."""
  if not isinstance(x, UOp): return str(x)
  txt: dict[UOp, str] = {}
  for u in x.toposort():
    s = [txt[y] for y in u.src]
    if u.op is Ops.CONST: txt[u] = json.dumps(u.arg)
    elif u.op is Ops.DEFINE_VAR: txt[u] = f"v[{json.dumps(u.arg[0])}]"
    elif u.op is Ops.BIND: txt[u] = s[0]
    elif u.op in JS_INDEX_OPS: txt[u] = JS_INDEX_OPS[u.op].format(*s)
    else: raise UnsupportedError(f"export: the size {x.render()} uses {u.op.name}, which model.js cannot compute")
  return txt[x]

def json_values(a: np.ndarray) -> list:
  """a's elements for JSON, which has no NaN or infinities: those become the strings "NaN", "Infinity" and "-Infinity",
  what JavaScript's String() writes and Number() reads back (Python's float() reads them too)."""
  vals = a.ravel().tolist()
  if not np.issubdtype(a.dtype, np.floating) or np.isfinite(a).all(): return vals
  return [v if math.isfinite(v) else "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity" for v in vals]

def user_line() -> str:
  """Where the running code left the user's own: the innermost caller outside tinycore and this backend, as file:line: code."""
  inside = tuple(os.path.join(folder, "") for folder in (Path(sys.modules["tinycore"].__file__).parent, HERE))   # each with a trailing "/"
  for fr in reversed(traceback.extract_stack()):
    if not fr.filename.startswith(inside): return f"{fr.filename}:{fr.lineno}" + (f": {fr.line.strip()}" if fr.line else "")
  return "(no caller outside tinycore)"

def defined_at(fn) -> str:
  code = getattr(fn, "__code__", None) or getattr(getattr(type(fn), "__call__", None), "__code__", None)
  return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(fn)

class TracedInput(Buffer):
  """An input's buffer while the function is traced: it has no memory yet, so whatever needs the input's values before
  the kernels are exported (a realize, numpy(), item() or tolist() of something computed from it) stops right there,
  naming the input and the user's line, instead of baking the example's values into the page as a constant."""
  def __init__(self, device: str, size: int, dtype, name: str):
    super().__init__(device, size, dtype)
    self.input_name, self.tracing = name, True
  def ensure_allocated(self) -> Buffer:
    if self.tracing:
      raise ExportError(f"export: input '{self.input_name}' is read while the function is traced, at {user_line()}. Something computed "
                        "from it is realized inside the function (realize(), numpy(), item(), tolist(), or Python deciding on its value), "
                        "so the page would answer every input with this example's result. Keep the function lazy from its inputs to "
                        "the tensors it returns; only weights (tensors not computed from an input) may be realized in it")
    return super().ensure_allocated()

def input_names(fn, n: int) -> list[str]:
  """The function's parameter names, for the inputs they receive (input0, input1, ... where it has none)."""
  try: params = [p.name for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  except (TypeError, ValueError): params = []
  return params[:n] if len(params) >= n else [f"input{i}" for i in range(n)]

def traced_input(t, name: str):
  """A fresh tensor for the example input t, on a TracedInput buffer (sized for the largest values of t's Variables) whose
  contents arrive once the trace is over; a symbolic shape lays the elements out contiguously, as run() receives them."""
  from tinycore.tensor import Tensor
  from tinycore.schedule import new_buffer_uop
  dims = []
  for d in t.shape:
    if isinstance(d, UOp) and (d.unbind_all()[0].op is not Ops.DEFINE_VAR or any(isinstance(e, str) for e in dims)):
      raise ExportError(f"export: input '{name}' has the shape {tuple(s.render() if isinstance(s, UOp) else s for s in t.shape)}; the page reads a "
                        "symbolic dimension off the length of the array it is given, so an input may have one, and it must be a bound "
                        "Variable itself (Variable('batch', 1, 64).bind(16)), not an expression of one")
    dims.append(d.unbind_all()[0].arg[0] if isinstance(d, UOp) else d)
  size = prod(int(d.vmax) if isinstance(d, UOp) else d for d in t.shape)
  buf = TracedInput("WEBGPU", size, t.dtype, name)
  u = new_buffer_uop("WEBGPU", size, t.dtype, buf)
  x = Tensor(u.reshape(t.shape) if all_int(t.shape) else u.shrink(((0, ssimplify(prod(t.shape))),)).reshape(t.shape))
  raw = t._buffer().as_bytes()[:t.numpy().size * t.dtype.itemsize]   # a symbolic shape's elements come first in its buffer
  buf.initial = raw + bytes(buf.nbytes - len(raw))
  return x, buf, dims

def export(fn, *example_inputs, path) -> Path:
  """Trace `fn(*example_inputs)` (Tensors on WEBGPU; Tensor.training off) and write `path/`: model.js (the kernels, their
  launch plan and a loader for navigator.gpu), weights.safetensors (every buffer the kernels read that is neither an
  input nor computed from one), example.json (this run's inputs and outputs, non-finite floats as the strings
  json_values writes) and index.html (a page that runs the model; serve the folder with `python -m tinygrad_webgpu serve`).

  Inputs are named after fn's parameters, outputs after the keys of a returned dict (else output, or output0, output1...).
  A dimension of an example input that is a bound Variable stays symbolic: the page takes any size in its range.
  Raises ExportError when the page would not compute from every input: fn reads an input's values while traced (a
  realize or numpy() of something computed from it), no output depends on an input, or fn writes a tensor in place."""
  # the tensor layer is imported here: this module is imported with the plugin, while tinycore may still be importing
  from tinycore.tensor import Tensor
  from tinycore.schedule import create_schedule, buffers as buffers_of
  from tinycore.engine import run_schedule
  from tinycore.codegen import get_program
  from tinycore.runtime.device import Device
  from tinycore.nn.serialization import safetensors_save_arrays
  if not all(isinstance(t, Tensor) and t.device == "WEBGPU" for t in example_inputs):
    raise ValueError("export: example inputs must be tensors on WEBGPU (move them with .to('WEBGPU'))")
  Tensor.realize_all(*example_inputs)
  names = input_names(fn, len(example_inputs))
  traced = [traced_input(t, name) for t, name in zip(example_inputs, names)]
  in_bufs = [buf for _, buf, _ in traced]
  try:
    with Tensor.train(False): outs = fn(*(x for x, _, _ in traced))
  finally:
    for b in in_bufs: b.tracing = False
  if isinstance(outs, dict): out_names, outs = [str(k) for k in outs], list(outs.values())
  else:
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    out_names = ["output"] if len(outs) == 1 else [f"output{i}" for i in range(len(outs))]
  if not outs or not all(isinstance(o, Tensor) for o in outs):
    raise ExportError(f"export: the function must return Tensors (one, a tuple or list of them, or a dict of name: Tensor), got {outs!r}")
  if any(u.op is Ops.ASSIGN for u in UOp(Ops.SINK, dtypes.void, tuple(o.uop for o in outs)).toposort()):
    raise ExportError(f"export: the function defined at {defined_at(fn)} writes a tensor in place (assign(), an optimizer step); the page "
                      "runs the same kernels for every input and keeps no state between runs: export the function that only computes")
  outs = [o.contiguous() for o in outs]
  items, becomes = create_schedule([o.uop for o in outs])
  renderer = Device.renderer("WEBGPU")
  var_bounds = {d.unbind_all()[0].arg[0]: d.unbind_all()[0].arg[1:] for t in example_inputs for d in t.shape if isinstance(d, UOp)}
  most = {name: hi for name, (_, hi) in var_bounds.items()}
  buf_ids: dict[int, int] = {}
  buffers: list[dict] = []
  def buf_id(b: Buffer, weight: bool) -> int:
    if id(b) not in buf_ids:
      buf_ids[id(b)] = len(buffers)
      buffers.append({"nbytes": b.nbytes, **({"weight": f"w{len(buffers)}"} if weight else {}), "_buf": b})
    return buf_ids[id(b)]
  for b in in_bufs: buf_id(b, False)
  kernels, sizes, read = [], [], set()
  for si in items:
    if si.ast.op is not Ops.SINK:
      raise UnsupportedError(f"export: the function needs a {si.ast.op.name} between devices ({si.bufs[1].device} to {si.bufs[0].device}); the page "
                             "has WEBGPU only: move the weights there first (t.to_('WEBGPU') for every t in get_state_dict(model).values())")
    spec = get_program(si.ast, renderer)
    if (unknown := [v.arg[0] for v in spec.vars if v.arg[0] not in var_bounds]):
      raise ExportError(f"export: the kernels use the Variable {unknown[0]!r}, which is no dimension of an input: the page could not know its "
                        "value. Make it the symbolic dimension of an input, or export with a plain int in its place")
    dispatch_for(spec.src, [sym_eval(g, most) for g in spec.global_size])   # refuses here a launch too large for one dispatch
    for p in spec.outs: buf_id(si.bufs[p], False)
    for p in spec.ins: read.add(buf_id(si.bufs[p], True))
    wg, counts_groups = launch_shape(spec.src)
    params = sorted({u.arg for u in spec.uops if u.op is Ops.DEFINE_GLOBAL})
    kernels.append({"name": spec.name, "src": spec.src, "bindings": [[p, buf_ids[id(si.bufs[p])]] for p in params],
                    "perGroup": 1 if counts_groups else prod(wg), "vars": [v.arg[0] for v in spec.vars], "varsBinding": uniform_binding(spec.src)})
    sizes.append(js_size(prod(spec.global_size)))
  run_schedule(items)
  for o in outs: o.uop = becomes.get(o.uop, o.uop)   # as realize() does: the outputs now point at their buffers
  # each output's buffer, under the views of it (a symbolic shape's elements come first); one that no kernel wrote and no
  # input holds is a weight returned as it is
  out_ids = [buf_id(buffers_of[next(u for u in o.uop.toposort() if u.op is Ops.BUFFER)], True) for o in outs]
  if (ignored := [n for i, n in enumerate(names) if i not in read and i not in out_ids]):
    raise ExportError(f"export: no output of the function defined at {defined_at(fn)} depends on input '{ignored[0]}': the page would ignore "
                      "it. Use it, or drop the parameter (an input read to the host inside the function, with numpy() or item(), "
                      "becomes a constant and is ignored the same way)")
  names_js = [f"{k['name']}_{i}" for i, k in enumerate(kernels)]   # one entry point name per kernel, unique in the page
  for k, n in zip(kernels, names_js): k["src"], k["name"] = k["src"].replace(f"fn {k['name']}(", f"fn {n}("), n
  def described(name: str, t, dims: list, buf: int) -> dict: return {"name": name, "dtype": JS_DTYPES[t.dtype], "shape": dims, "buffer": buf}
  inputs = [described(n, t, dims, i) for i, (n, t, (_, _, dims)) in enumerate(zip(names, example_inputs, traced))]
  outputs = [described(n, o, [s.render() if isinstance(s, UOp) else s for s in o.uop.shape], i) for n, o, i in zip(out_names, outs, out_ids)]
  path = Path(path)
  path.mkdir(parents=True, exist_ok=True)
  safetensors_save_arrays(path / "weights.safetensors", {b["weight"]: b["_buf"].numpy() for b in buffers if "weight" in b},
                          metadata={"format": "tinygrad-webgpu"})
  js = ["// generated by tinygrad_webgpu.export: the WGSL kernels tinycore ran, the order to run them in, and the runtime that runs them",
        f"const INPUTS = {json.dumps(inputs)};", f"const OUTPUTS = {json.dumps(outputs)};",
        f"const VARS = {json.dumps(var_bounds)};",   # each symbolic dimension's name: [smallest, largest]
        f"const BUFFERS = {json.dumps([{k: v for k, v in b.items() if k != '_buf'} for b in buffers])};",
        f"const KERNELS = {json.dumps(kernels, indent=1)};",
        # the sizes that follow the symbolic dimensions: threads (or workgroups) per kernel, each output's shape
        "const KERNEL_SIZES = [" + ", ".join(f"(v) => {s}" for s in sizes) + "];",
        "const OUTPUT_SHAPES = [" + ", ".join(f"(v) => [{', '.join(js_size(s) for s in o.uop.shape)}]" for o in outs) + "];",
        (HERE / "runtime.js").read_text()]
  (path / "model.js").write_text("\n".join(js))
  example = {"inputs": [json_values(t.numpy()) for t in example_inputs], "outputs": [json_values(o.numpy()) for o in outs]}
  (path / "example.json").write_text(json.dumps(example, allow_nan=False))
  shutil.copyfile(HERE / "index.html", path / "index.html")
  return path
