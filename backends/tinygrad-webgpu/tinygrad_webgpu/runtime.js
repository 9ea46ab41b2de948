// The runtime at the end of every exported model.js (tinygrad_webgpu/runtime.js): it loads the weights, compiles the
// kernels and runs them on typed arrays with navigator.gpu. INPUTS, OUTPUTS, VARS, BUFFERS, KERNELS, KERNEL_SIZES and
// OUTPUT_SHAPES above it describe the model.
const STORAGE = 0x80 | 0x4 | 0x8;  // GPUBufferUsage.STORAGE | COPY_SRC | COPY_DST, without needing the global at import
const UNIFORM = 0x40 | 0x8;        // GPUBufferUsage.UNIFORM | COPY_DST
const MAP_READ_COPY_DST = 0x1 | 0x8;
const MAX_GROUPS = 65535;          // WebGPU's guaranteed maxComputeWorkgroupsPerDimension
const roundUp4 = (n) => Math.ceil(Math.max(n, 1) / 4) * 4;
const prod = (xs) => xs.reduce((a, b) => a * b, 1);
const idiv = (a, b) => (b ? Math.trunc(a / b) : 0), imod = (a, b) => (b ? a % b : 0);  // tinycore's index division

// float16 and bfloat16 travel as their 16 bits; run() takes and gives them as Float32Array (every such value is a float32)
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
function halfToFloat(h) {
  const e = (h >> 10) & 31, m = h & 1023;
  const v = e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (1024 + m) * 2 ** (e - 25);
  return h & 0x8000 ? -v : v;
}
function floatToHalf(x) {  // rounded to nearest even, as numpy's astype(np.float16)
  f32[0] = x;
  const b = u32[0], sign = (b >>> 16) & 0x8000, a = b & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;                        // NaN
  if (a >= 0x477ff000) return sign | 0x7c00;                       // infinite, or rounds to it (>= 65520)
  if (a < 0x38800000) {                                            // under 2**-14: a multiple of 2**-24, exactly in a double
    const v = Math.abs(f32[0]) * 2 ** 24, lo = Math.floor(v);
    return sign | (v - lo > 0.5 || (v - lo === 0.5 && lo & 1) ? lo + 1 : lo);
  }
  const h = (a >>> 13) - (112 << 10), rest = a & 0x1fff;           // the exponent rebiased from 127 to 15
  return sign | (h + (rest > 0x1000 || (rest === 0x1000 && h & 1) ? 1 : 0));
}
function bf16ToFloat(h) { u32[0] = h << 16; return f32[0]; }
function floatToBf16(x) {
  f32[0] = x;
  const b = u32[0];
  return (b & 0x7fffffff) > 0x7f800000 ? ((b >>> 16) | 0x40) & 0xffff : ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}
// dtype -> [the typed array run() takes and gives, and for the 16-bit floats: the array of their bits, decode, encode]
const DTYPES = {
  float32: [Float32Array], int32: [Int32Array], uint32: [Uint32Array], int16: [Int16Array], uint16: [Uint16Array],
  int8: [Int8Array], uint8: [Uint8Array], bool: [Uint8Array],
  float16: [Float32Array, Uint16Array, halfToFloat, floatToHalf], bfloat16: [Float32Array, Uint16Array, bf16ToFloat, floatToBf16],
};

function dispatchDims(items, perGroup) {  // workgroups as (x, y, z), each at most MAX_GROUPS: the shader rebuilds the flat id
  const groups = Math.ceil(items / perGroup), x = Math.min(groups, MAX_GROUPS), y = x ? Math.ceil(groups / x) : 0;
  return [x, Math.min(y, MAX_GROUPS), y > MAX_GROUPS ? Math.ceil(y / MAX_GROUPS) : 1];
}
const article = (word) => `${/^[aeiou]/i.test(word) ? "an" : "a"} ${word}`;
const describe = (x) => (x === null || x === undefined ? String(x) : typeof x.length === "number" && (ArrayBuffer.isView(x) || Array.isArray(x)) ?
  `${article(x.constructor.name)} of ${x.length}` : article(x.constructor?.name ?? typeof x));
const shapeText = (shape) => `[${shape.join(", ")}]`;
const info = ({ name, dtype, shape }) => ({ name, dtype, shape, arrayType: DTYPES[dtype][0].name });

/** What the model takes and gives, before anything loads: [{name, dtype, shape, arrayType}] each. A symbolic dimension is
 * its name in `shape`; `vars` gives its range: {batch: [1, 64]}. */
export const inputs = INPUTS.map(info), outputs = OUTPUTS.map(info), vars = VARS;

// the bits of input `inp` from the typed array x, checked in JS terms; a symbolic dimension is read off x's length into v
function inputBits(inp, x, v) {
  const [Type, Bits, , encode] = DTYPES[inp.dtype];
  if (!(x instanceof Type || (Bits && x instanceof Bits)))
    throw new TypeError(`run(): input '${inp.name}' (${inp.dtype}, shape ${shapeText(inp.shape)}) must be a ${Type.name}` +
      `${Bits ? ` (or a ${Bits.name} of its bits)` : ""}, got ${describe(x)}${Array.isArray(x) ? `: convert it with ${Type.name}.from(array)` : ""}`);
  const fixed = prod(inp.shape.filter((d) => typeof d === "number")), sym = inp.shape.find((d) => typeof d === "string");
  if (sym === undefined && x.length !== fixed)
    throw new RangeError(`run(): input '${inp.name}' has shape ${shapeText(inp.shape)}: it takes ${fixed} elements, got ${describe(x)}`);
  if (sym !== undefined) {
    const [lo, hi] = VARS[sym], n = x.length / fixed;
    if (!Number.isInteger(n) || n < lo || n > hi)
      throw new RangeError(`run(): input '${inp.name}' has shape ${shapeText(inp.shape)} with ${sym} from ${lo} to ${hi}: it takes ` +
        `${fixed} elements per ${sym}, ${lo * fixed} to ${hi * fixed} in all, got ${describe(x)}`);
    if (sym in v && v[sym] !== n) throw new RangeError(`run(): input '${inp.name}' gives ${sym} = ${n}, but an earlier input gave ${v[sym]}`);
    v[sym] = n;
  }
  return Bits && x instanceof Type ? Bits.from(x, encode) : x;
}

async function fetchBytes(url) {
  let response;
  try { response = await fetch(url); } catch (e) {
    throw new Error(`load(): could not fetch ${url} (${e.message}): serve the model's folder over http ` +
      "(python -m tinygrad_webgpu serve DIR); a page opened from file:// cannot fetch or import modules");
  }
  if (!response.ok) throw new Error(`load(): fetching ${url} failed: HTTP ${response.status} ${response.statusText}`.trimEnd());
  return response.arrayBuffer();
}

// the weights this model.js needs, by name, from a safetensors file; anything else is refused before it reaches the GPU
function readWeights(bytes, url) {
  const wrong = (why) => new Error(`load(): ${url} is not the weights file of this model.js (${why}); ` +
    "export the model again, or pass the right weightsUrl");
  if (bytes.byteLength < 8) throw wrong(`${bytes.byteLength} bytes, not a safetensors file`);
  const headerLen = Number(new DataView(bytes).getBigUint64(0, true));
  if (8 + headerLen > bytes.byteLength) throw wrong(`its header claims ${headerLen} bytes, the file has ${bytes.byteLength}`);
  let header;
  try { header = JSON.parse(new TextDecoder().decode(new Uint8Array(bytes, 8, headerLen))); } catch (e) { throw wrong(`its header is not JSON: ${e.message}`); }
  return Object.fromEntries(BUFFERS.filter((b) => b.weight).map((b) => {
    const at = header[b.weight]?.data_offsets;
    if (!at || at[1] - at[0] !== b.nbytes || 8 + headerLen + at[1] > bytes.byteLength)
      throw wrong(`tensor ${b.weight} should have ${b.nbytes} bytes, ${at ? `has ${at[1] - at[0]}` : "is missing"}`);
    return [b.weight, new Uint8Array(bytes, 8 + headerLen + at[0], b.nbytes)];
  }));
}

function padded(bytes) {  // writeBuffer moves whole 4-byte words
  if (bytes.byteLength % 4 === 0) return bytes;
  const out = new Uint8Array(roundUp4(bytes.byteLength));
  out.set(bytes);
  return out;
}

async function requestDevice(limits) {
  if (!globalThis.navigator?.gpu)
    throw new Error("load(): WebGPU is not available here (navigator.gpu is undefined): it needs a secure context (https://, or " +
      "http://127.0.0.1 or localhost; not file://) and a browser with WebGPU on (Chrome or Edge 113+; Chromium on Linux: --enable-unsafe-webgpu)");
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error("load(): WebGPU has no adapter here (navigator.gpu.requestAdapter() returned null): the browser found no GPU it will use");
  const over = Object.keys(limits).filter((k) => adapter.limits[k] < limits[k]);
  if (over.length) throw new Error(`load(): this model needs ${over.map((k) => `${k} ${limits[k]}`).join(", ")}; this adapter allows ` +
    over.map((k) => adapter.limits[k]).join(", "));
  return adapter.requestDevice({ requiredLimits: Object.fromEntries(Object.keys(limits).map((k) => [k, adapter.limits[k]])) });
}

/** load({device, weightsUrl, halfBits}) -> {inputs, outputs, vars, device, run}. run(...arrays) or run({name: array}) takes one
 * typed array per input (inputs[i].arrayType; float16 and bfloat16 also as a Uint16Array of their bits) and resolves to one
 * typed array per output, with .shape and .dtype; float16 and bfloat16 outputs come as Float32Array, or with halfBits: true
 * as a Uint16Array of their bits. device: a GPUDevice of your own (else one is requested with the limits the model needs). */
export async function load({ device, weightsUrl = new URL("./weights.safetensors", import.meta.url), halfBits = false } = {}) {
  const limits = { maxStorageBuffersPerShaderStage: Math.max(0, ...KERNELS.map((k) => k.bindings.length)),
    maxStorageBufferBindingSize: roundUp4(Math.max(...BUFFERS.map((b) => b.nbytes))) };
  limits.maxBufferSize = limits.maxStorageBufferBindingSize;
  if (!device) device = await requestDevice(limits);
  const short = Object.keys(limits).filter((k) => device.limits[k] < limits[k]);
  if (short.length) throw new Error(`load(): the GPUDevice passed allows ${short.map((k) => `${k} ${device.limits[k]}`).join(", ")}, this model ` +
    `needs ${short.map((k) => limits[k]).join(", ")}: request them with adapter.requestDevice({requiredLimits: ${JSON.stringify(limits)}})`);
  const weights = readWeights(await fetchBytes(weightsUrl), weightsUrl);
  const buffers = BUFFERS.map((b) => device.createBuffer({ size: roundUp4(b.nbytes), usage: STORAGE }));
  BUFFERS.forEach((b, i) => { if (b.weight) device.queue.writeBuffer(buffers[i], 0, padded(weights[b.weight])); });
  const uniforms = KERNELS.map((k) => (k.vars.length ? device.createBuffer({ size: 16 * Math.ceil(k.vars.length / 4), usage: UNIFORM }) : null));
  device.pushErrorScope("validation");
  const pipelines = KERNELS.map((k) => device.createComputePipeline({
    layout: "auto", compute: { module: device.createShaderModule({ code: k.src }), entryPoint: k.name } }));
  const err = await device.popErrorScope();
  if (err) throw new Error("load(): WebGPU refused the model's kernels: " + err.message);
  const groups = KERNELS.map((k, i) => device.createBindGroup({ layout: pipelines[i].getBindGroupLayout(0), entries: [
    ...k.bindings.map(([binding, buf]) => ({ binding, resource: { buffer: buffers[buf] } })),
    ...(uniforms[i] ? [{ binding: k.varsBinding, resource: { buffer: uniforms[i] } }] : [])] }));

  async function run(...args) {
    const named = args.length === 1 && args[0]?.constructor === Object;
    if (named) {
      const unknown = Object.keys(args[0]).filter((k) => !INPUTS.some((inp) => inp.name === k));
      if (unknown.length) throw new TypeError(`run(): no input is named '${unknown[0]}'; the inputs are ${INPUTS.map((i) => i.name).join(", ")}`);
    }
    const arrays = named ? INPUTS.map((inp) => args[0][inp.name]) : args;
    if (arrays.length !== INPUTS.length)
      throw new TypeError(`run(): the model takes ${INPUTS.length} input(s) (${INPUTS.map((i) => i.name).join(", ")}), got ${arrays.length}`);
    const v = {}, bits = INPUTS.map((inp, i) => inputBits(inp, arrays[i], v));
    // everything of this run is queued before its submit: runs that overlap never see each other's inputs
    bits.forEach((x, i) => device.queue.writeBuffer(buffers[INPUTS[i].buffer], 0, padded(new Uint8Array(x.buffer, x.byteOffset, x.byteLength))));
    KERNELS.forEach((k, i) => { if (uniforms[i]) device.queue.writeBuffer(uniforms[i], 0, Int32Array.from({ length: uniforms[i].size / 4 }, (_, j) => v[k.vars[j]] ?? 0)); });
    const enc = device.createCommandEncoder(), pass = enc.beginComputePass();
    KERNELS.forEach((k, i) => { pass.setPipeline(pipelines[i]); pass.setBindGroup(0, groups[i]); pass.dispatchWorkgroups(...dispatchDims(KERNEL_SIZES[i](v), k.perGroup)); });
    pass.end();
    const shapes = OUTPUT_SHAPES.map((f) => f(v));
    const reads = OUTPUTS.map((o, i) => {
      const [Type, Bits] = DTYPES[o.dtype], nbytes = prod(shapes[i]) * (Bits || Type).BYTES_PER_ELEMENT;
      const staging = device.createBuffer({ size: roundUp4(nbytes), usage: MAP_READ_COPY_DST });
      enc.copyBufferToBuffer(buffers[o.buffer], 0, staging, 0, roundUp4(nbytes));
      return [staging, nbytes];
    });
    device.queue.submit([enc.finish()]);
    return Promise.all(OUTPUTS.map(async (o, i) => {
      const [staging, nbytes] = reads[i], [Type, Bits, decode] = DTYPES[o.dtype];
      await staging.mapAsync(1);  // GPUMapMode.READ
      const raw = new (Bits || Type)(staging.getMappedRange().slice(0, nbytes));
      staging.unmap();
      staging.destroy();
      const out = Bits && !halfBits ? Type.from(raw, decode) : raw;
      return Object.assign(out, { shape: shapes[i], dtype: o.dtype });
    }));
  }
  return { inputs, outputs, vars, device, run };
}
