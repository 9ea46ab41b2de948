"""NV driver: the CUDA driver API through ctypes on libcuda.so.1 (no toolkit at run time), or the PTX emulator with NV_EMULATE=1."""
from __future__ import annotations
import ctypes, math, re, time
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
    block = tuple(int(x) for x in (local_size or (1, 1, 1))) + (1,) * (3 - len(local_size or ()))
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

def param_values(types, bufs, vals, y0: int, z0: int) -> list[int]:
  """The value of each parameter: buffers (data<i> is bufs[i]), integer variables (var<i>), the slice's first blocks."""
  out = []
  for name, _ in types:
    if name.startswith("data"): out.append(int(bufs[int(name[4:])]))
    elif name.startswith("var"): out.append(int(vals[int(name[3:])]))
    else: out.append(y0 if name == "block_y0" else z0)
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
    from tinygrad_nv.emulator import EmulatedKernel, Counters
    self.name, self.ptx, self.types = name, ptx, param_types(ptx)
    self.kernel = EmulatedKernel(ptx, name, driver.memory)
    self.counters = Counters()
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
    from tinygrad_nv.emulator import EmulatorError, Counters, LAUNCHES
    st = time.perf_counter()
    self.counters = total = Counters()
    for grid, block, y0, z0 in launches(self.ptx, global_size, local_size):
      params = dict(zip((n for n, _ in self.types), param_values(self.types, bufs, vals, y0, z0)))
      try: total += self.kernel(params, grid, block)
      except EmulatorError as e: raise DeviceError(f"NV: kernel {self.name} failed on the emulator: {e}") from e
    LAUNCHES.append((self.name, total))
    return time.perf_counter() - st if wait else None

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

class CUDAProgram:
  def __init__(self, driver: NVDriver, name: str, ptx: str, image: bytes):
    self.driver, self.name, self.ptx, self.types = driver, name, ptx, param_types(ptx)
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
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
    d = self.driver
    lib = d.lib
    d.activate()
    ctype = {"u64": ctypes.c_uint64, "s64": ctypes.c_int64, "s32": ctypes.c_int32, "u32": ctypes.c_uint32}
    if wait: check(lib, lib.cuEventRecord(d.events[0], None), "cuEventRecord")
    for grid, block, y0, z0 in launches(self.ptx, global_size, local_size):
      args = [ctype[t](v) for (_, t), v in zip(self.types, param_values(self.types, bufs, vals, y0, z0))]
      ptrs = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
      check(lib, lib.cuLaunchKernel(self.func, *grid, *block, 0, None, ptrs, None), f"launching kernel {self.name}")
    if not wait: return None
    check(lib, lib.cuEventRecord(d.events[1], None), "cuEventRecord")
    check(lib, lib.cuEventSynchronize(d.events[1]), "cuEventSynchronize")
    ms = ctypes.c_float()
    check(lib, lib.cuEventElapsedTime(ctypes.byref(ms), d.events[0], d.events[1]), "cuEventElapsedTime")
    return ms.value / 1e3
  def __del__(self):
    try:
      if self.module: self.driver.lib.cuModuleUnload(self.module)
    except Exception: pass

class NVDriver(Driver):
  """Instance `index`: GPU number index through libcuda, or with NV_EMULATE=1 an emulated GPU (any number of them)."""
  def __init__(self, index: int = 0):
    super().__init__(instance_name("NV", index))
    self.emulate = bool(getenv("NV_EMULATE", 0))
    if self.emulate:
      self.memory = emulated_memory()
      return
    self.lib = lib = libcuda()
    count = gpu_count()
    if index >= count: raise DeviceError(f"NV: no NVIDIA GPU number {index}: the driver sees {count}; set NV_EMULATE=1 to use the PTX emulator")
    dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
    check(lib, lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
    check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)   # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / MINOR
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    self.arch = f"sm_{major.value}{minor.value}"
    self.activate()
    self.events = [ctypes.c_void_p(), ctypes.c_void_p()]
    for e in self.events: check(lib, lib.cuEventCreate(ctypes.byref(e), 0), "cuEventCreate")
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]

  def activate(self) -> None: check(self.lib, self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

  def load(self, name: str, binary: bytes, spec=None):
    try: arch, ptx, cubin = unpack(binary)
    except Exception as e: raise CompileError(f"NV: cannot load kernel {name!r}: {type(e).__name__}: {e}") from e
    if self.emulate:
      from tinygrad_nv.emulator import EmulatorError
      try: return EmulatedProgram(self, name, ptx)
      except EmulatorError as e: raise CompileError(f"NV: cannot load kernel {name!r}: {e}") from e
    # the cubin where it was built for this GPU, else the PTX for the driver to JIT-compile
    return CUDAProgram(self, name, ptx, cubin if cubin and arch == self.arch else ptx.encode() + b"\0")

  def synchronize(self) -> None:
    if not self.emulate:
      self.activate()
      check(self.lib, self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

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
  def copyin(self, dest: int, src: memoryview) -> None:
    if self.emulate:
      self.memory.span(dest, src.nbytes)[:] = src
      return
    self.activate()
    host = (ctypes.c_char * src.nbytes).from_buffer_copy(src)
    check(self.lib, self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dest), host, ctypes.c_size_t(src.nbytes)), "cuMemcpyHtoD")
  def copyout(self, dest: memoryview, src: int) -> None:
    if self.emulate:
      dest[:] = self.memory.span(src, dest.nbytes)
      return
    self.activate()
    host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    check(self.lib, self.lib.cuMemcpyDtoH_v2(host, ctypes.c_uint64(src), ctypes.c_size_t(dest.nbytes)), "cuMemcpyDtoH")
  def transfer(self, dest: int, src: int, size: int, dest_driver: NVDriver) -> None:
    """Device to device, also between two GPUs (cuMemcpyPeer)."""
    if self.emulate:
      self.memory.span(dest, size)[:] = self.memory.span(src, size)
      return
    self.activate()
    check(self.lib, self.lib.cuMemcpyPeer(ctypes.c_uint64(dest), dest_driver.ctx, ctypes.c_uint64(src), self.ctx, ctypes.c_size_t(size)), "cuMemcpyPeer")
