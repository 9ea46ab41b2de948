"""WEBGPU driver: opens a wgpu-native adapter, loads WGSL into compute pipelines and dispatches them within the adapter's limits."""
from __future__ import annotations
import math, os, re, time
import numpy as np
from tinycore.helpers import prod
from tinycore.runtime.device import Driver
from tinycore.runtime.errors import CompileError, DeviceError, PluginError, UnsupportedError
from tinygrad_webgpu.renderer import dispatch_for, launch_shape, loop_passes, uniform_binding
from tinygrad_webgpu.allocator import check_alive

# limits raised to what the adapter offers (the WebGPU defaults are lower); kernels and buffers are checked against them
LIMITS = ("max-storage-buffers-per-shader-stage", "max-buffer-size", "max-storage-buffer-binding-size",
          "max-compute-workgroups-per-dimension", "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
          "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
          "max-bindings-per-bind-group", "max-uniform-buffer-binding-size")

def request_adapter():
  """The wgpu adapter, or None when this machine has no WebGPU-capable driver. wgpu's own WGPU_BACKEND_TYPE (Vulkan,
  OpenGL, Metal, D3D12, ...) picks which of its backends the adapter comes from."""
  import wgpu
  try: return wgpu.gpu.request_adapter_sync(power_preference="high-performance")
  except Exception: return None

def describe(info: dict) -> str:
  """The adapter and the wgpu backend behind it, as `tinycore devices` shows them: 'llvmpipe (...) via OpenGL'."""
  return f"{info.get('device') or info.get('description') or 'unnamed adapter'} via {info.get('backend_type', '?')}"

def compile_error(name: str, src: str, err: Exception) -> CompileError:
  """A CompileError quoting the WGSL line the compiler points at (naga reports `:line:col`)."""
  msg = str(err)
  lines = src.splitlines()
  if (m := re.search(r":(\d+):(\d+)", msg)) and 0 < int(m.group(1)) <= len(lines):
    where = f" at line {m.group(1)}: {lines[int(m.group(1)) - 1].strip()}"
  else: where = ""
  return CompileError(f"WEBGPU: kernel {name} failed to compile{where}\n{msg}")

def probe(gpu, src: str, data: np.ndarray) -> np.ndarray:
  """Run `src`'s entry point `probe` on one thread over a buffer holding `data`; the buffer's contents after it."""
  import wgpu
  buf = gpu.create_buffer_with_data(data=data.tobytes(), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
  pipeline = gpu.create_compute_pipeline(layout="auto", compute={"module": gpu.create_shader_module(code=src), "entry_point": "probe"})
  group = gpu.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}])
  enc = gpu.create_command_encoder()
  cp = enc.begin_compute_pass()
  cp.set_pipeline(pipeline)
  cp.set_bind_group(0, group)
  cp.dispatch_workgroups(1)
  cp.end()
  gpu.queue.submit([enc.finish()])
  return np.frombuffer(gpu.queue.read_buffer(buf), data.dtype)

# WGSL lets a device flush f32 subnormals to zero (Vulkan, Metal and D3D drivers differ): halving the smallest normal
# float32 on the device says which kind this one is
SUBNORMAL_PROBE = """@group(0) @binding(0) var<storage, read_write> d: array<f32>;
@compute @workgroup_size(1) fn probe() { d[1] = d[0] * 0.5f; }"""

def flushes_subnormals(gpu) -> bool: return bool(probe(gpu, SUBNORMAL_PROBE, np.array([2.0**-126, 1.0], np.float32))[1] != np.float32(2.0**-127))

# a loop of 2^20 trips (a bound read at run time: nothing to unroll) counts the trips it really made
LOOP_PROBE = """@group(0) @binding(0) var<storage, read_write> d: array<u32>;
@compute @workgroup_size(1) fn probe() { var n = 0u; for (var i = 0u; i < d[0]; i++) { n++; } d[1] = n; }"""

def loop_pass_limit(gpu) -> int | None:
  """How many loop passes a shader invocation makes before the device ends its loops (Mesa's software drivers: 65535),
  None when a long loop runs to its end."""
  trips = int(probe(gpu, LOOP_PROBE, np.array([1 << 20, 0], np.uint32))[1])
  return None if trips == 1 << 20 else trips

class WebGPUProgram:
  """One compute pipeline; calling it binds the buffers (and integer variables) and dispatches the flat thread grid."""
  def __init__(self, driver: WebGPUDriver, name: str, src: str):
    import wgpu
    self.driver, self.name, self.src = driver, name, src
    self.params = [int(p) for p in re.findall(r"@binding\((\d+)\) var<storage", src)]
    self.vars_binding = uniform_binding(src)
    self.workgroup, self.counts_groups = launch_shape(src)
    lim = driver.limits
    if (any(w > lim[f"max-compute-workgroup-size-{d}"] for w, d in zip(self.workgroup, "xyz"))
        or prod(self.workgroup) > lim["max-compute-invocations-per-workgroup"]):
      raise UnsupportedError(f"backend WEBGPU: kernel {name} has workgroup size {self.workgroup}, this adapter allows "
                             f"{tuple(lim[f'max-compute-workgroup-size-{d}'] for d in 'xyz')} and "
                             f"{lim['max-compute-invocations-per-workgroup']} invocations (max-compute-invocations-per-workgroup)")
    if driver.loop_pass_limit is not None and (passes := loop_passes(src)) > driver.loop_pass_limit:
      raise UnsupportedError(f"backend WEBGPU: kernel {name} makes up to {passes} loop passes per thread, but this adapter "
                             f"({driver.description}) ends a shader's loops after {driver.loop_pass_limit} passes in all, "
                             "which would cut the loops short: make the reduction smaller, or use another adapter")
    limit = driver.limits["max-storage-buffers-per-shader-stage"]
    if len(self.params) > limit:
      raise UnsupportedError(f"backend WEBGPU: kernel {name} binds {len(self.params)} storage buffers, this adapter allows {limit} "
                             "(max-storage-buffers-per-shader-stage)")
    gpu = driver.gpu
    entries = [{"binding": p, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.storage}} for p in self.params]
    if self.vars_binding is not None:
      entries.append({"binding": self.vars_binding, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.uniform}})
    try:
      module = gpu.create_shader_module(code=src)
      self.layout = gpu.create_bind_group_layout(entries=entries)
      self.pipeline = gpu.create_compute_pipeline(layout=gpu.create_pipeline_layout(bind_group_layouts=[self.layout]),
                                                  compute={"module": module, "entry_point": name})
    except wgpu.GPUError as e: raise compile_error(name, src, e) from e

  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals: tuple[int, ...] = (), wait: bool = False):
    import wgpu
    # WGSL fixes the workgroup size in the source: a launch must ask for the one the kernel was rendered with
    asked = None if local_size is None else tuple(local_size) + (1,) * (3 - len(local_size))
    if (asked != self.workgroup) if self.counts_groups else (asked is not None and prod(asked) != 1):
      raise UnsupportedError(f"backend WEBGPU: kernel {self.name} launched with local_size {local_size}, but it was rendered "
                             + (f"for workgroups of {self.workgroup}" if self.counts_groups else "without local ids (global_size counts threads)"))
    if prod(global_size) == 0: return 0.0 if wait else None
    gpu, align = self.driver.gpu, self.driver.limits["min-storage-buffer-offset-alignment"]
    entries = []
    for p in self.params:
      b = bufs[p]
      check_alive(b)
      lo, hi = b.word_range
      if hi == lo: lo, hi = 0, 4   # an empty view: nothing is read, but a binding of size 0 is invalid; every buffer has a word
      if hi > b.buf.size: raise DeviceError(f"WEBGPU: kernel {self.name} binds bytes [{lo}, {hi}) of a {b.buf.size}-byte buffer")
      # a binding starts at a multiple of the alignment and kernels index from its start: a view anywhere else (a byte
      # into a word of packed uint8s, say) would be read and written at the wrong elements
      if b.offset % align: raise UnsupportedError(f"backend WEBGPU: kernel {self.name} binds a view at byte offset {b.offset}, "
                                                  f"not a multiple of min-storage-buffer-offset-alignment ({align})")
      entries.append({"binding": p, "resource": {"buffer": b.buf, "offset": lo, "size": hi - lo}})
    if self.vars_binding is not None:
      data = np.zeros(math.ceil(len(vals) / 4) * 4, np.int32)
      data[:len(vals)] = vals
      ubuf = gpu.create_buffer_with_data(data=data.tobytes(), usage=wgpu.BufferUsage.UNIFORM)
      entries.append({"binding": self.vars_binding, "resource": {"buffer": ubuf, "offset": 0, "size": ubuf.size}})
    st = time.perf_counter()
    try:
      group = gpu.create_bind_group(layout=self.layout, entries=entries)
      enc = gpu.create_command_encoder()
      cp = enc.begin_compute_pass()
      cp.set_pipeline(self.pipeline)
      cp.set_bind_group(0, group)
      cp.dispatch_workgroups(*dispatch_for(self.src, global_size, self.driver.limits["max-compute-workgroups-per-dimension"]))
      cp.end()
      gpu.queue.submit([enc.finish()])
    except wgpu.GPUError as e: raise DeviceError(f"WEBGPU: launching kernel {self.name} failed: {e}") from e
    if not wait: return None
    self.driver.synchronize()
    return time.perf_counter() - st

class WebGPUDriver(Driver):
  def __init__(self, index: int = 0):  # one instance: the adapter wgpu picks
    if index != 0: raise DeviceError(f"WEBGPU: only instance 0 exists (the adapter wgpu picks), WEBGPU:{index} was asked for")
    super().__init__("WEBGPU")
    adapter, forced = request_adapter(), os.environ.get("WGPU_BACKEND_TYPE", "").strip()
    if adapter is None:
      raise DeviceError("WEBGPU: no WebGPU adapter found" + (f" for WGPU_BACKEND_TYPE={forced}" if forced else "") +
                        "; install a Vulkan, OpenGL, Metal or D3D12 driver (headless Linux: mesa-vulkan-drivers or Mesa's "
                        "libgl1-mesa-dri + libegl1, see .ci/install-webgpu.sh)")
    self.adapter_info = dict(adapter.info)
    self.description = describe(self.adapter_info)
    # wgpu only logs an unknown WGPU_BACKEND_TYPE and hands out some other adapter: running on it would ignore the request
    if forced and self.adapter_info.get("backend_type") != forced:
      raise DeviceError(f"WEBGPU: WGPU_BACKEND_TYPE={forced} asked for that wgpu backend, but wgpu offered {self.description}; "
                        "use one of Vulkan, OpenGL, OpenGLES, Metal, D3D12 that this machine has, or unset it")
    self.adapter_limits = dict(adapter.limits)
    self.gpu = adapter.request_device_sync(required_limits={k: adapter.limits[k] for k in LIMITS})
    self.limits = dict(self.gpu.limits)
    # the renderer the registry hands out for WEBGPU describes this device from now on (more storage buffers per kernel
    # than WebGPU's guaranteed 8 where the adapter allows them); WebGPUProgram still asserts the limit at load
    from tinycore.runtime.device import Device
    try: ren = Device.renderer("WEBGPU")
    except PluginError: ren = None   # a driver opened outside the registry (no plugin entry point): nothing to describe
    if ren is not None and hasattr(ren, "use_device_limits"): ren.use_device_limits(self.limits)
    # a device that flushes subnormals says so: in its description, and in the capability the conformance suite reads
    if (flushes := flushes_subnormals(self.gpu)): self.description += ", f32 subnormals flush to zero"
    if (spec := Device.specs.get("WEBGPU")) is not None: spec.capabilities["denormals"] = not flushes
    if (limit := loop_pass_limit(self.gpu)) is not None: self.description += f", loops stop after {limit} passes"
    self.loop_pass_limit = limit
    if ren is not None and limit is not None: ren.loop_pass_max = limit   # the scheduler keeps kernels under it
    import wgpu
    self.fence = self.gpu.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
  def load(self, name: str, binary: bytes, spec=None) -> WebGPUProgram:
    try: src = binary.decode()
    except UnicodeDecodeError as e: raise CompileError(f"WEBGPU: kernel {name!r} is not WGSL text") from e
    return WebGPUProgram(self, name, src)
  def synchronize(self) -> None:
    # reading a buffer back maps it, which waits for all work submitted before (wgpu 0.32's work-done callback is broken)
    self.gpu.queue.read_buffer(self.fence, 0, 4)
