"""Export a tinycore function to the browser: a folder with a JS module that runs the same WGSL kernels via navigator.gpu, and its weights."""
from __future__ import annotations
import json, math
from pathlib import Path
import numpy as np
from tinycore.dtype import dtypes
from tinycore.uop import Ops
from tinycore.runtime.errors import UnsupportedError
from tinygrad_webgpu.renderer import dispatch_for

JS_TYPED_ARRAYS = {dtypes.float32: "Float32Array", dtypes.int32: "Int32Array", dtypes.uint32: "Uint32Array", dtypes.bool: "Uint8Array",
                   dtypes.int8: "Int8Array", dtypes.uint8: "Uint8Array", dtypes.int16: "Int16Array", dtypes.uint16: "Uint16Array",
                   dtypes.float16: "Uint16Array", dtypes.bfloat16: "Uint16Array"}   # half and bfloat16: their raw 16-bit words

RUNTIME_JS = """
const STORAGE = 0x80 | 0x4 | 0x8;  // GPUBufferUsage.STORAGE | COPY_SRC | COPY_DST, without needing the global at import
const roundUp4 = (n) => Math.ceil(Math.max(n, 1) / 4) * 4;

function readSafetensors(bytes) {
  const view = new DataView(bytes);
  const headerLen = Number(view.getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(bytes, 8, headerLen)));
  const out = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    out[name] = new Uint8Array(bytes, 8 + headerLen + info.data_offsets[0], info.data_offsets[1] - info.data_offsets[0]);
  }
  return out;
}

function padded(bytes) {
  const out = new Uint8Array(roundUp4(bytes.byteLength));
  out.set(bytes);
  return out;
}

// load(device?, weightsUrl?) -> { run(...inputs) -> outputs }: inputs and outputs are typed arrays (bool as Uint8Array,
// half and bfloat16 as Uint16Array holding their bits)
export async function load(device, weightsUrl = new URL("./weights.safetensors", import.meta.url)) {
  if (!device) {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) throw new Error("WebGPU: no adapter (navigator.gpu.requestAdapter returned null)");
    device = await adapter.requestDevice({ requiredLimits: {
      maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize } });
  }
  const needed = Math.max(0, ...KERNELS.map((k) => k.bindings.length));
  if (device.limits.maxStorageBuffersPerShaderStage < needed)
    throw new Error(`WebGPU: a kernel binds ${needed} storage buffers, this device allows ${device.limits.maxStorageBuffersPerShaderStage} (maxStorageBuffersPerShaderStage)`);
  const weights = readSafetensors(await (await fetch(weightsUrl)).arrayBuffer());
  const buffers = BUFFERS.map((b) => device.createBuffer({ size: roundUp4(b.nbytes), usage: STORAGE }));
  BUFFERS.forEach((b, i) => { if (b.kind === "weight") device.queue.writeBuffer(buffers[i], 0, padded(weights[b.name])); });
  device.pushErrorScope("validation");
  const pipelines = KERNELS.map((k) => device.createComputePipeline({
    layout: "auto", compute: { module: device.createShaderModule({ code: k.src }), entryPoint: k.name } }));
  const err = await device.popErrorScope();
  if (err) throw new Error("WebGPU: kernels failed to compile: " + err.message);
  const groups = KERNELS.map((k, i) => device.createBindGroup({ layout: pipelines[i].getBindGroupLayout(0),
    entries: k.bindings.map(([binding, buf]) => ({ binding, resource: { buffer: buffers[buf] } })) }));
  async function run(...inputs) {
    if (inputs.length !== INPUTS.length) throw new Error(`expected ${INPUTS.length} inputs, got ${inputs.length}`);
    inputs.forEach((x, i) => {
      const b = BUFFERS[INPUTS[i]];
      if (x.byteLength !== b.nbytes) throw new Error(`input ${i}: expected ${b.nbytes} bytes of ${b.dtype}, got ${x.byteLength}`);
      device.queue.writeBuffer(buffers[INPUTS[i]], 0, padded(new Uint8Array(x.buffer, x.byteOffset, x.byteLength)));
    });
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    KERNELS.forEach((k, i) => { pass.setPipeline(pipelines[i]); pass.setBindGroup(0, groups[i]); pass.dispatchWorkgroups(...k.dispatch); });
    pass.end();
    const staging = OUTPUTS.map((o) => device.createBuffer({ size: roundUp4(BUFFERS[o].nbytes), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST }));
    OUTPUTS.forEach((o, i) => enc.copyBufferToBuffer(buffers[o], 0, staging[i], 0, roundUp4(BUFFERS[o].nbytes)));
    device.queue.submit([enc.finish()]);
    return Promise.all(OUTPUTS.map(async (o, i) => {
      await staging[i].mapAsync(GPUMapMode.READ);
      const bytes = staging[i].getMappedRange().slice(0, BUFFERS[o].nbytes);
      staging[i].unmap();
      staging[i].destroy();
      return new ARRAY_TYPES[BUFFERS[o].dtype](bytes);
    }));
  }
  return { run, outputShapes: OUTPUTS.map((o) => BUFFERS[o].shape) };
}
"""

def json_values(a: np.ndarray) -> list:
  """a's elements for JSON, which has no NaN or infinities: those become the strings "NaN", "Infinity" and "-Infinity",
  what JavaScript's String() writes and Number() reads back (Python's float() reads them too)."""
  vals = a.ravel().tolist()
  if not np.issubdtype(a.dtype, np.floating) or np.isfinite(a).all(): return vals
  return [v if math.isfinite(v) else "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity" for v in vals]

def export(fn, *example_inputs, path) -> Path:
  """Run `fn(*example_inputs)` on WEBGPU and write `path/`: model.js (kernels + launch plan), weights.safetensors
  (every buffer the kernels read that is neither an input nor computed), and example.json (the inputs and outputs of this
  run, non-finite floats as the strings json_values writes)."""
  # the tensor layer is imported here: this module is imported with the plugin, while tinycore may still be importing
  from tinycore.tensor import Tensor
  from tinycore.schedule import create_schedule
  from tinycore.engine import run_schedule
  from tinycore.codegen import get_program
  from tinycore.runtime.device import Device
  from tinycore.nn.serialization import safetensors_save_arrays
  if any(t.device != "WEBGPU" for t in example_inputs): raise ValueError("export: example inputs must be tensors on WEBGPU")
  Tensor.realize_all(*example_inputs)
  in_bufs = [t._buffer() for t in example_inputs]
  outs = fn(*example_inputs)
  outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
  outs = [o.contiguous() for o in outs]
  items, becomes = create_schedule([o.uop for o in outs])
  renderer = Device.renderer("WEBGPU")
  buf_ids: dict[int, int] = {}
  buffers: list[dict] = []
  def buf_id(b, kind: str) -> int:
    if id(b) not in buf_ids:
      buf_ids[id(b)] = len(buffers)
      buffers.append({"name": f"b{len(buffers)}", "kind": kind, "nbytes": b.nbytes, "dtype": b.dtype.name, "shape": [b.size], "_buf": b})
    return buf_ids[id(b)]
  for b in in_bufs: buf_id(b, "input")
  kernels = []
  for si in items:
    if si.ast.op is not Ops.SINK: raise UnsupportedError(f"export: the function needs a {si.ast.op.name} (copy between devices); keep every tensor on WEBGPU")
    spec = get_program(si.ast, renderer)
    if spec.vars or not all(isinstance(g, int) for g in spec.global_size): raise UnsupportedError("export: symbolic shapes are not supported")
    for p in spec.outs: buf_id(si.bufs[p], "temp")
    for p in spec.ins: buf_id(si.bufs[p], "weight")
    params = sorted({u.arg for u in spec.uops if u.op is Ops.DEFINE_GLOBAL})
    kernels.append({"name": spec.name, "src": spec.src, "bindings": [[p, buf_ids[id(si.bufs[p])]] for p in params],
                    "dispatch": list(dispatch_for(spec.src, spec.global_size))})
  run_schedule(items)
  for o in outs: o.uop = becomes.get(o.uop, o.uop)   # as realize() does: the outputs now point at their buffers
  out_bufs = [o._buffer() for o in outs]
  out_ids = [buf_ids[id(b)] for b in out_bufs]
  for o, i in zip(outs, out_ids): buffers[i]["kind"], buffers[i]["shape"] = "output", list(o.shape)
  for i, t in zip(range(len(in_bufs)), example_inputs): buffers[i]["shape"] = list(t.shape)
  names = [f"{k['name']}_{i}" for i, k in enumerate(kernels)]   # one entry point name per kernel, unique in the page
  for k, n in zip(kernels, names): k["src"], k["name"] = k["src"].replace(f"fn {k['name']}(", f"fn {n}("), n
  path = Path(path)
  path.mkdir(parents=True, exist_ok=True)
  safetensors_save_arrays(path / "weights.safetensors",
                          {b["name"]: b["_buf"].numpy() for b in buffers if b["kind"] == "weight"}, metadata={"format": "tinygrad-webgpu"})
  plan = [{k: v for k, v in b.items() if k != "_buf"} for b in buffers]
  js = ["// generated by tinygrad_webgpu.export: the WGSL kernels tinycore ran, and the order to run them in",
        f"const BUFFERS = {json.dumps(plan)};", f"const INPUTS = {json.dumps(list(range(len(in_bufs))))};",
        f"const OUTPUTS = {json.dumps(out_ids)};", f"const KERNELS = {json.dumps(kernels, indent=1)};",
        "const ARRAY_TYPES = {" + ", ".join(f"{dt.name}: {ta}" for dt, ta in JS_TYPED_ARRAYS.items()) + "};", RUNTIME_JS]
  (path / "model.js").write_text("\n".join(js))
  example = {"inputs": [json_values(t.numpy()) for t in example_inputs], "outputs": [json_values(o.numpy()) for o in outs],
             "dtypes": [t.dtype.name for t in example_inputs] + [o.dtype.name for o in outs]}
  (path / "example.json").write_text(json.dumps(example, allow_nan=False))
  return path
