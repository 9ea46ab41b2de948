"""NV driver: the CUDA driver API through ctypes on libcuda.so.1 (no toolkit at run time), or the PTX emulator with NV_EMULATE=1."""
from __future__ import annotations
import ctypes, math, re, threading, time
import numpy as np
from tinycore.helpers import getenv
from tinycore.runtime.device import Driver
from tinycore.runtime.errors import CompileError, DeviceError, UnsupportedError
from tinycore.runtime.plugin import instance_name
from tinygrad_nv.assembler import unpack
from tinygrad_nv.renderer import GRID_YZ_MAX, LAUNCH_GROUPS

THREADS_PER_BLOCK = 256   # for kernels without local ids: the driver picks the block shape, the kernel bounds-checks

def launches(src: str, global_size, local_size) -> list[tuple[tuple[int, int, int], tuple[int, int, int], int, int]]:
  """(grid, block, first block y, first block z) of each launch covering global_size: grids taller than 65535 in y or z
  are cut into slices (the kernel adds its slice's first block), never truncated."""
  g = tuple(int(x) for x in global_size) + (1,) * (3 - len(global_size))
  if LAUNCH_GROUPS in src:
    block = tuple(int(x) for x in (local_size or ())) + (1,) * (3 - len(local_size or ()))
    grid = g
  else:
    if local_size is not None and math.prod(local_size) != 1:
      raise UnsupportedError(f"backend NV: this kernel has no local ids (global_size counts threads), it takes no local_size {local_size}")
    b = [1, 1, 1]
    for d, cap in enumerate((THREADS_PER_BLOCK, THREADS_PER_BLOCK, 64)):
      room = THREADS_PER_BLOCK // math.prod(b)
      b[d] = min(1 << max(g[d] - 1, 0).bit_length(), room, cap)
    block, grid = (b[0], b[1], b[2]), tuple(-(-g[d] // b[d]) for d in range(3))
  if min(grid) == 0: return []
  if grid[0] >= 2**31: raise UnsupportedError(f"backend NV: grid {grid} has more than 2**31-1 blocks in x")
  return [((grid[0], min(GRID_YZ_MAX, grid[1] - y0), min(GRID_YZ_MAX, grid[2] - z0)), block, y0, z0)
          for z0 in range(0, grid[2], GRID_YZ_MAX) for y0 in range(0, grid[1], GRID_YZ_MAX)]

def param_types(src: str) -> list[tuple[str, str]]:
  """(name, PTX type) of the kernel's parameters, in order."""
  head = src[src.index(".entry"):src.index(")")]
  return [(n, t) for t, n in re.findall(r"\.param\s+\.(\w+)\s+(\w+)", head)]

def param_layout(types) -> tuple[list[tuple[int, int]], list[tuple[int, int]], tuple[int, int] | None]:
  """Where each argument goes, worked out once per kernel: (parameter, buffer number) pairs (data<i> is bufs[i]),
  (parameter, variable number) pairs (var<i>), and the parameters of the slice's first blocks (block_y0, block_z0)."""
  bufs = [(k, int(n[4:])) for k, (n, _) in enumerate(types) if n.startswith("data")]
  vals = [(k, int(n[3:])) for k, (n, _) in enumerate(types) if n.startswith("var")]
  names = [n for n, _ in types]
  return bufs, vals, ((names.index("block_y0"), names.index("block_z0")) if "block_y0" in names else None)

class LaunchPlans:
  """The launches (grid, block, first y and z block) of each (global_size, local_size) a program was called with: worked
  out on the first call with those sizes, a dictionary lookup after."""
  def __init__(self, ptx: str):
    self.ptx, self.plans = ptx, {}
    self.last: tuple = (None, None, None)   # (global_size, local_size, plan) of the last call: a loaded kernel's runner passes
                                            # the same size objects at every launch, so they are compared by identity first
  def __call__(self, global_size, local_size) -> list:
    if global_size is (last := self.last)[0] and local_size is last[1]: return last[2]
    sizes = global_size, local_size
    if type(global_size) is not tuple: global_size, local_size = tuple(global_size), (None if local_size is None else tuple(local_size))
    if (plan := self.plans.get(key := (global_size, local_size))) is None:
      if len(self.plans) >= 256: self.plans.clear()   # sizes that follow a Variable: keep the dictionary small
      plan = self.plans[key] = launches(self.ptx, global_size, local_size)
    self.last = (*sizes, plan)
    return plan

U64 = (1 << 64) - 1
def arg_values(layout, n: int, bufs, vals, y0: int, z0: int) -> list[int]:
  """The value of each of a kernel's n parameters for one launch: buffers, variables (as 64-bit patterns), the slice's first blocks."""
  buf_at, val_at, slice_at = layout
  out = [0] * n
  for k, i in buf_at: out[k] = int(bufs[i])
  for k, i in val_at: out[k] = int(vals[i]) & U64
  if slice_at is not None: out[slice_at[0]], out[slice_at[1]] = y0, z0
  return out

# ***** the emulator *****

_memory = None
def emulated_memory():
  """One host-RAM memory for every emulated NV instance, so transfers between them are plain copies."""
  global _memory
  if _memory is None:
    from tinygrad_nv.emulator import EmulatedMemory
    _memory = EmulatedMemory()
  return _memory

class EmulatedProgram:
  """A kernel run by the PTX emulator; `counters` holds what its last launch did (also logged in emulator.LAUNCHES)."""
  def __init__(self, driver: NVDriver, name: str, ptx: str):
    from tinygrad_nv.emulator import EmulatedKernel, LaunchCounters
    types = param_types(ptx)
    self.name, self.names, self.layout, self.plan = name, [n for n, _ in types], param_layout(types), LaunchPlans(ptx)
    self.kernel = EmulatedKernel(ptx, name, driver.memory)
    self.counters = LaunchCounters()
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
    from tinygrad_nv.emulator import EmulatorError, LaunchCounters, LAUNCHES
    st = time.perf_counter()
    self.counters = total = LaunchCounters()
    for grid, block, y0, z0 in self.plan(global_size, local_size):
      try: total += self.kernel(dict(zip(self.names, arg_values(self.layout, len(self.names), bufs, vals, y0, z0))), grid, block)
      except EmulatorError as e: raise DeviceError(f"NV: kernel {self.name} failed on the emulator: {e}") from e
    LAUNCHES.append((self.name, total))
    return time.perf_counter() - st if wait else None

def emulated_graph(launches: list):
  """The emulator's graph: the launches replayed in order (the core's graph path, checked on every CI run)."""
  def replay(launches: list) -> None:
    for prog, bufs, global_size, local_size, vals in launches: prog(*bufs, global_size=global_size, local_size=local_size, vals=vals)
  return replay

# ***** the CUDA driver API *****

_cuda = None
def libcuda() -> ctypes.CDLL:
  """libcuda.so.1, initialised; a DeviceError saying what is missing when it is not there."""
  global _cuda
  if _cuda is None:
    try: lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
      raise DeviceError(f"NV: cannot load libcuda.so.1, the NVIDIA driver ({e}); install the NVIDIA driver, "
                        "or set NV_EMULATE=1 to run kernels on the PTX emulator") from None
    check(lib, lib.cuInit(0), "cuInit")
    _cuda = lib
  return _cuda

def check(lib, status: int, what: str) -> None:
  if status != 0:
    msg = ctypes.c_char_p()
    lib.cuGetErrorString(status, ctypes.byref(msg))
    raise DeviceError(f"NV: {what} failed: CUDA error {status} ({msg.value.decode() if msg.value else 'unknown'})")

def gpu_count() -> int:
  """How many NVIDIA GPUs the driver sees (0 without libcuda or a GPU): the registry's `instances`."""
  try: lib = libcuda()
  except DeviceError: return 0
  n = ctypes.c_int(0)
  return n.value if lib.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0

_current = threading.local()   # the CUDA context current on each thread, as tinycore last made it (cuCtxSetCurrent is per thread)

class CUDAProgram:
  """A loaded kernel. Its arguments live in one 8-byte slot per parameter (a 32-bit parameter reads the slot's low half),
  pointed at by an array made once: a launch writes the slots and calls cuLaunchKernel, nothing else."""
  def __init__(self, driver: NVDriver, name: str, ptx: str, image: bytes):
    self.driver, self.name = driver, name
    lib = driver.lib
    driver.activate()
    self.module, self.func = ctypes.c_void_p(), ctypes.c_void_p()
    log = ctypes.create_string_buffer(4096)
    # JIT options: CU_JIT_ERROR_LOG_BUFFER (5) and its size (6), so a PTX the driver refuses says why
    opts = (ctypes.c_int * 2)(5, 6)
    optvals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
    status = lib.cuModuleLoadDataEx(ctypes.byref(self.module), ctypes.c_char_p(image), 2, opts, optvals)
    if status != 0:
      raise CompileError(f"NV: the CUDA driver cannot load kernel {name} (error {status}): {log.value.decode(errors='replace').strip()}")
    check(lib, lib.cuModuleGetFunction(ctypes.byref(self.func), self.module, name.encode()), f"cuModuleGetFunction({name})")
    types = param_types(ptx)
    self.layout = self.buf_at, self.val_at, self.slice_at = param_layout(types)
    self.plan = LaunchPlans(ptx)
    self.args, self.argptrs = arg_slots(len(types))
    self.calls_plan, self.calls = None, []   # cuLaunchKernel's whole argument tuple per launch of the last plan, built once

  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
    d, args = self.driver, self.args
    if getattr(_current, "ctx", None) != d.ctx_id: d.activate()
    for k, i in self.buf_at: args[k] = bufs[i]
    for k, i in self.val_at: args[k] = vals[i] & U64
    lib = d.lib
    if (plan := self.plan(global_size, local_size)) is not self.calls_plan:
      self.calls = [((self.func, *grid, *block, 0, d.stream, self.argptrs, None), y0, z0) for grid, block, y0, z0 in plan]
      self.calls_plan = plan
    if wait: check(lib, lib.cuEventRecord(d.events[0], d.stream), "cuEventRecord")
    for call, y0, z0 in self.calls:
      if self.slice_at is not None: args[self.slice_at[0]], args[self.slice_at[1]] = y0, z0
      if lib.cuLaunchKernel(*call) != 0:
        d.activate(force=True)   # another library may have made its own context current on this thread: retry once in ours
        check(lib, lib.cuLaunchKernel(*call), f"launching kernel {self.name}")
    if not wait: return None
    check(lib, lib.cuEventRecord(d.events[1], d.stream), "cuEventRecord")
    check(lib, lib.cuEventSynchronize(d.events[1]), "cuEventSynchronize")
    ms = ctypes.c_float()
    check(lib, lib.cuEventElapsedTime(ctypes.byref(ms), d.events[0], d.events[1]), "cuEventElapsedTime")
    return ms.value / 1e3
  def __del__(self):
    try:
      if self.module: self.driver.lib.cuModuleUnload(self.module)
    except Exception: pass

def arg_slots(n: int):
  """n 8-byte argument slots and the array of pointers to them that cuLaunchKernel takes (NULL-terminated: the test
  stand-in for libcuda reads up to it)."""
  args = (ctypes.c_uint64 * max(n, 1))()
  return args, (ctypes.c_void_p * (n + 1))(*[ctypes.addressof(args) + 8 * k for k in range(n)], None)

class KernelNodeParams(ctypes.Structure):   # CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h)
  _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("sharedMemBytes", ctypes.c_uint),
              ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]

class CUDAGraph:
  """Consecutive launches as one CUDA graph: a chain of kernel nodes, each after the one before, instantiated once. A
  replay gives the nodes whose arguments or sizes changed their new ones (cuGraphExecKernelNodeSetParams) and launches
  the graph: one cuGraphLaunch for the whole batch. Other programs, or another number of grid slices, build it anew."""
  def __init__(self, driver: NVDriver, launches: list):
    self.driver, self.graph, self.exec = driver, None, None
    self.build(self.nodes(launches))
  def nodes(self, launches: list) -> list[tuple]:
    return [(prog, grid, block, tuple(arg_values(prog.layout, len(prog.argptrs) - 1, bufs, vals, y0, z0)))
            for prog, bufs, gsize, lsize, vals in launches for grid, block, y0, z0 in prog.plan(gsize, lsize)]
  def build(self, nodes: list[tuple]) -> None:
    d = self.driver
    lib = d.lib
    self.free()
    self.graph, self.exec, prev = ctypes.c_void_p(), ctypes.c_void_p(), None
    check(lib, lib.cuGraphCreate(ctypes.byref(self.graph), 0), "cuGraphCreate")
    self.handles, self.params, self.slots, self.last = [], [], [], []
    for prog, grid, block, values in nodes:
      args, ptrs = arg_slots(len(values))
      args[:len(values)] = values
      p = KernelNodeParams(prog.func, grid, block, 0, ctypes.cast(ptrs, ctypes.c_void_p), None, None, None)
      node = ctypes.c_void_p()
      check(lib, lib.cuGraphAddKernelNode_v2(ctypes.byref(node), self.graph, ctypes.byref(prev) if prev else None, ctypes.c_size_t(1 if prev else 0),
                                             ctypes.byref(p)), f"cuGraphAddKernelNode({prog.name})")
      self.handles.append(node); self.params.append(p); self.slots.append((args, ptrs)); self.last.append((grid, block, values))
      prev = node
    check(lib, lib.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), self.graph, ctypes.c_ulonglong(0)), "cuGraphInstantiateWithFlags")
    self.shape = [n[0] for n in nodes]
  def __call__(self, launches: list) -> None:
    d = self.driver
    lib = d.lib
    if getattr(_current, "ctx", None) != d.ctx_id: d.activate()
    nodes = self.nodes(launches)
    if len(nodes) != len(self.shape) or any(a is not b for a, (b, *_) in zip(self.shape, nodes)): self.build(nodes)
    else:
      for k, (prog, grid, block, values) in enumerate(nodes):
        if (grid, block, values) == self.last[k]: continue
        p, (args, _) = self.params[k], self.slots[k]
        args[:len(values)] = values
        p.grid[:], p.block[:] = grid, block
        check(lib, lib.cuGraphExecKernelNodeSetParams_v2(self.exec, self.handles[k], ctypes.byref(p)), f"cuGraphExecKernelNodeSetParams({prog.name})")
        self.last[k] = (grid, block, values)
    check(lib, lib.cuGraphLaunch(self.exec, d.stream), "cuGraphLaunch")
  def free(self) -> None:
    lib = self.driver.lib
    if self.exec: lib.cuGraphExecDestroy(self.exec)
    if self.graph: lib.cuGraphDestroy(self.graph)
    self.graph = self.exec = None
  def __del__(self):
    try: self.free()
    except Exception: pass

STAGING_SLOTS, STAGING_BYTES = 4, 1 << 20   # pinned host memory that small copies go through, without waiting for the device

class NVDriver(Driver):
  """Instance `index`: GPU number index through libcuda, or with NV_EMULATE=1 an emulated GPU (any number of them). All
  work goes in order on one stream of the instance: launches, graphs and copies; waiting is for that stream only."""
  def __init__(self, index: int = 0):
    super().__init__(instance_name("NV", index))
    self.emulate = bool(getenv("NV_EMULATE", 0))
    if self.emulate:
      self.memory = emulated_memory()
      self.graph = emulated_graph
      return
    self.lib = lib = libcuda()
    count = gpu_count()
    if index >= count: raise DeviceError(f"NV: no NVIDIA GPU number {index}: the driver sees {count}; set NV_EMULATE=1 to use the PTX emulator")
    dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
    check(lib, lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
    check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
    self.ctx_id = self.ctx.value   # compared at every launch: an int, not the ctypes object's getter
    major, minor, name = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(256)
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)   # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / MINOR
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    self.arch = f"sm_{major.value}{minor.value}"
    if lib.cuDeviceGetName(name, len(name), dev) == 0: self.description = f"{name.value.decode(errors='replace')} ({self.arch}, CUDA driver API)"
    self.activate(force=True)
    self.stream = ctypes.c_void_p()
    check(lib, lib.cuStreamCreate(ctypes.byref(self.stream), 0), "cuStreamCreate")   # blocking: ordered with the legacy default stream too
    self.events = [ctypes.c_void_p(), ctypes.c_void_p()]
    for e in self.events: check(lib, lib.cuEventCreate(ctypes.byref(e), 0), "cuEventCreate")
    self.staging: list | None = None   # [(pinned address, numpy view, event after its last copy)], made on first use
    self.next_slot = 0
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]

  def activate(self, force: bool = False) -> None:
    """Make this instance's context current on this thread, unless tinycore already did."""
    if force or getattr(_current, "ctx", None) != self.ctx_id:
      check(self.lib, self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
      _current.ctx = self.ctx_id

  def load(self, name: str, binary: bytes, spec=None):
    try: arch, ptx, cubin = unpack(binary)
    except Exception as e: raise CompileError(f"NV: cannot load kernel {name!r}: {type(e).__name__}: {e}") from e
    if self.emulate:
      from tinygrad_nv.emulator import EmulatorError
      try: return EmulatedProgram(self, name, ptx)
      except EmulatorError as e: raise CompileError(f"NV: cannot load kernel {name!r}: {e}") from e
    # the cubin where it was built for this GPU, else the PTX for the driver to JIT-compile
    return CUDAProgram(self, name, ptx, cubin if cubin and arch == self.arch else ptx.encode() + b"\0")

  def graph(self, launches: list) -> CUDAGraph:
    """Optional driver capability (contract 2.1, docs/writing-a-backend.md): launches [(program, bufs, global_size,
    local_size, vals)] of programs this driver loaded; the result replays such a list as one CUDA graph."""
    return CUDAGraph(self, launches)

  def synchronize(self) -> None:
    if not self.emulate:
      self.activate()
      check(self.lib, self.lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

  # ***** memory: what the allocator calls *****

  def mem_alloc(self, size: int) -> int:
    if self.emulate: return self.memory.alloc(size)
    self.activate()
    ptr = ctypes.c_uint64()
    status = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), size)
    if status == 2: raise MemoryError(f"NV: out of device memory allocating {size} bytes")   # CUDA_ERROR_OUT_OF_MEMORY
    check(self.lib, status, f"cuMemAlloc({size})")
    return ptr.value
  def mem_free(self, ptr: int) -> None:
    if self.emulate: return self.memory.free(ptr)
    self.activate()
    check(self.lib, self.lib.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")

  def slot(self) -> tuple[int, np.ndarray, ctypes.c_void_p]:
    """The next pinned staging slot, once the copy that last used it has finished (normally long since)."""
    lib = self.lib
    if self.staging is None:
      self.staging = []
      for _ in range(STAGING_SLOTS):
        host, event = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib, lib.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(STAGING_BYTES), 0), "cuMemHostAlloc")
        check(lib, lib.cuEventCreate(ctypes.byref(event), 2), "cuEventCreate")   # CU_EVENT_DISABLE_TIMING
        self.staging.append((host.value, np.ctypeslib.as_array((ctypes.c_uint8 * STAGING_BYTES).from_address(host.value)), event))
    s = self.staging[self.next_slot]
    self.next_slot = (self.next_slot + 1) % STAGING_SLOTS
    check(lib, lib.cuEventSynchronize(s[2]), "cuEventSynchronize")
    return s

  def copyin(self, dest: int, src: memoryview) -> None:
    """Host to device through the pinned staging slots, in order on the stream: the call returns once the bytes are staged,
    the device copies them after the work launched before (never before a kernel still reading dest finished)."""
    if self.emulate:
      self.memory.span(dest, src.nbytes)[:] = src
      return
    self.activate()
    data, lib = np.frombuffer(src, np.uint8), self.lib
    for off in range(0, len(data), STAGING_BYTES):
      host, view, event = self.slot()
      n = min(STAGING_BYTES, len(data) - off)
      view[:n] = data[off:off + n]
      check(lib, lib.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(dest + off), ctypes.c_void_p(host), ctypes.c_size_t(n), self.stream), "cuMemcpyHtoDAsync")
      check(lib, lib.cuEventRecord(event, self.stream), "cuEventRecord")
  def copyout(self, dest: memoryview, src: int) -> None:
    """Device to host after the work on the stream (Buffer.copyout synchronized it): a small copy through a pinned slot."""
    if self.emulate:
      dest[:] = self.memory.span(src, dest.nbytes)
      return
    self.activate()
    out, lib, n = np.frombuffer(dest, np.uint8), self.lib, dest.nbytes
    if n <= STAGING_BYTES:
      host, view, _ = self.slot()
      check(lib, lib.cuMemcpyDtoHAsync_v2(ctypes.c_void_p(host), ctypes.c_uint64(src), ctypes.c_size_t(n), self.stream), "cuMemcpyDtoHAsync")
      check(lib, lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
      out[:] = view[:n]
    else:
      check(lib, lib.cuMemcpyDtoHAsync_v2(ctypes.c_void_p(out.ctypes.data), ctypes.c_uint64(src), ctypes.c_size_t(n), self.stream), "cuMemcpyDtoHAsync")
      check(lib, lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
  def transfer(self, dest: int, src: int, size: int, dest_driver: NVDriver) -> None:
    """Device to device, also between two GPUs: after the destination's pending work (which may still read dest), on this
    instance's stream after the source's writers, finished before returning (later work on either instance sees it)."""
    if self.emulate:
      self.memory.span(dest, size)[:] = self.memory.span(src, size)
      return
    if dest_driver is not self: dest_driver.synchronize()
    self.activate()
    check(self.lib, self.lib.cuMemcpyPeerAsync(ctypes.c_uint64(dest), dest_driver.ctx, ctypes.c_uint64(src), self.ctx, ctypes.c_size_t(size),
                                               self.stream), "cuMemcpyPeerAsync")
    check(self.lib, self.lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
