"""KFD: AMD's compute kernel driver (/dev/kfd plus the GPU's DRM render node) through ioctls with ctypes: GPU memory
allocation and mapping, an AQL compute queue with its doorbell, completion signals, and kernel dispatch.
The structures mirror include/uapi/linux/kfd_ioctl.h (a test compares them with the installed header)."""
from __future__ import annotations
import ctypes, ctypes.util, errno, mmap, os, struct, time
from tinycore.runtime.errors import DeviceError

KFD_PATH = "/dev/kfd"
TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"

# ***** the ioctl structures (field names as in kfd_ioctl.h) *****
u32, u64 = ctypes.c_uint32, ctypes.c_uint64
def _struct(name: str, fields: list[tuple[str, type]]) -> type:
  return type(name, (ctypes.Structure,), {"_fields_": fields})

GetVersion = _struct("kfd_ioctl_get_version_args", [("major_version", u32), ("minor_version", u32)])
CreateQueue = _struct("kfd_ioctl_create_queue_args", [
  ("ring_base_address", u64), ("write_pointer_address", u64), ("read_pointer_address", u64), ("doorbell_offset", u64),
  ("ring_size", u32), ("gpu_id", u32), ("queue_type", u32), ("queue_percentage", u32), ("queue_priority", u32), ("queue_id", u32),
  ("eop_buffer_address", u64), ("eop_buffer_size", u64), ("ctx_save_restore_address", u64), ("ctx_save_restore_size", u32),
  ("ctl_stack_size", u32)])
AcquireVM = _struct("kfd_ioctl_acquire_vm_args", [("drm_fd", u32), ("gpu_id", u32)])
AllocMemory = _struct("kfd_ioctl_alloc_memory_of_gpu_args", [("va_addr", u64), ("size", u64), ("handle", u64), ("mmap_offset", u64),
  ("gpu_id", u32), ("flags", u32)])
FreeMemory = _struct("kfd_ioctl_free_memory_of_gpu_args", [("handle", u64)])
MapMemory = _struct("kfd_ioctl_map_memory_to_gpu_args", [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)])
UnmapMemory = _struct("kfd_ioctl_unmap_memory_from_gpu_args", [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)])

# _IOC(dir, 'K', nr, size): dir 1 write (to the kernel), 2 read, 3 both
def _ioc(direction: int, nr: int, st: type) -> int: return (direction << 30) | (ctypes.sizeof(st) << 16) | (ord("K") << 8) | nr
IOCTLS = {"GET_VERSION": (2, 0x01, GetVersion), "CREATE_QUEUE": (3, 0x02, CreateQueue), "ACQUIRE_VM": (1, 0x15, AcquireVM),
          "ALLOC_MEMORY_OF_GPU": (3, 0x16, AllocMemory), "FREE_MEMORY_OF_GPU": (1, 0x17, FreeMemory),
          "MAP_MEMORY_TO_GPU": (3, 0x18, MapMemory), "UNMAP_MEMORY_FROM_GPU": (3, 0x19, UnmapMemory)}
IOCTL_NUMBERS = {name: _ioc(d, nr, st) for name, (d, nr, st) in IOCTLS.items()}

QUEUE_TYPE_COMPUTE_AQL = 2
MEM_VRAM, MEM_GTT, MEM_USERPTR = 1 << 0, 1 << 1, 1 << 2
MEM_WRITABLE, MEM_EXECUTABLE, MEM_PUBLIC, MEM_NO_SUBSTITUTE, MEM_COHERENT = 1 << 31, 1 << 30, 1 << 29, 1 << 28, 1 << 26

# ***** AQL (HSA architected queuing language) *****
AQL_PACKET_BYTES = 64
AQL_KERNEL_DISPATCH, AQL_BARRIER_BIT, AQL_SCOPE_SYSTEM = 2, 1 << 8, 2
AQL_HEADER = AQL_KERNEL_DISPATCH | AQL_BARRIER_BIT | (AQL_SCOPE_SYSTEM << 9) | (AQL_SCOPE_SYSTEM << 11)
DISPATCH_FMT = "<HHHHHHIIIIIQQQQ"   # header, setup, workgroup x y z, reserved, grid x y z, private, group, kernel object, kernargs, reserved, signal
assert struct.calcsize(DISPATCH_FMT) == AQL_PACKET_BYTES
# amd_signal_t: kind, value, event mailbox, event id, reserved, start and end timestamps (the packet processor fills them)
SIGNAL_VALUE_OFFSET, SIGNAL_START_TS, SIGNAL_END_TS, SIGNAL_BYTES, SIGNAL_KIND_USER = 8, 32, 40, 64, 1

def dispatch_packet(kernel_object: int, kernargs: int, signal: int, grid: tuple[int, int, int], group: tuple[int, int, int], lds: int) -> bytes:
  """One AQL kernel dispatch packet, header included (the caller publishes the header word last)."""
  return struct.pack(DISPATCH_FMT, AQL_HEADER, 3, *group, 0, *grid, 0, lds, kernel_object, kernargs, 0, signal)

# ***** sysfs topology *****
def gpu_nodes() -> list[dict[str, int]]:
  """KFD's GPU nodes (gpu_id != 0) with their properties, by node number. Reads sysfs only: opens no device."""
  try: names = sorted(os.listdir(TOPOLOGY), key=lambda n: int(n) if n.isdigit() else -1)
  except OSError: return []
  out = []
  for node in names:
    try:
      with open(f"{TOPOLOGY}/{node}/gpu_id") as f: gpu_id = int(f.read().strip() or 0)
      if gpu_id == 0: continue
      with open(f"{TOPOLOGY}/{node}/properties") as f:
        props = {k: int(v) for k, v in (line.split() for line in f if len(line.split()) == 2)}
      out.append({"node": int(node), "gpu_id": gpu_id, **props})
    except (OSError, ValueError): continue
  return out

def gpu_count() -> int: return len(gpu_nodes())

# ***** the device *****
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
MAP_FAILED = ctypes.c_void_p(-1).value

class GPUMemory:
  """One KFD allocation: its GPU virtual address (also its CPU address when mapped), size and handle."""
  def __init__(self, addr: int, size: int, handle: int, cpu: bool):
    self.addr, self.size, self.handle, self.cpu = addr, size, handle, cpu

class KFDDevice:
  """One GPU opened through KFD: a VM on its render node, an AQL queue, memory, and kernels loaded as code objects."""
  def __init__(self, index: int):
    if not os.path.exists(KFD_PATH):
      raise DeviceError(f"AMD: {KFD_PATH} not found: this machine has no AMD GPU driver (amdgpu with KFD); "
                        "set AMD_EMULATE=1 to run kernels on the RDNA3 emulator")
    nodes = gpu_nodes()
    if index >= len(nodes): raise DeviceError(f"AMD: GPU {index} requested, KFD lists {len(nodes)} GPU(s) in {TOPOLOGY}")
    self.node = nodes[index]
    self.gpu_id = self.node["gpu_id"]
    version = self.node.get("gfx_target_version", 0)
    if version // 100 != 1100: raise DeviceError(f"AMD: GPU {index} is gfx{version // 100} (gfx_target_version {version}); this backend targets gfx1100 (RDNA3)")
    try:
      self.kfd = os.open(KFD_PATH, os.O_RDWR | os.O_CLOEXEC)
      self.drm = os.open(f"/dev/dri/renderD{self.node['drm_render_minor']}", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e: raise DeviceError(f"AMD: cannot open the GPU's device files: {e} (is this user in the 'render' group?)") from e
    if (v := self.ioctl("GET_VERSION")).major_version != 1: raise DeviceError(f"AMD: KFD interface version {v.major_version}.{v.minor_version}, this driver speaks 1.x")
    self.ioctl("ACQUIRE_VM", drm_fd=self.drm, gpu_id=self.gpu_id)
    self.queue_setup()

  def ioctl(self, name: str, **fields) -> ctypes.Structure:
    _, _, st = IOCTLS[name]
    args = st(**fields)
    if libc.ioctl(self.kfd, IOCTL_NUMBERS[name], ctypes.byref(args)) < 0:
      err = ctypes.get_errno()
      raise DeviceError(f"AMD: KFD ioctl {name} failed: {errno.errorcode.get(err, err)} ({os.strerror(err)})")
    return args

  def alloc(self, size: int, vram: bool = True, cpu: bool = True, executable: bool = False) -> GPUMemory:
    """GPU memory at a virtual address reserved in this process (the same address on the CPU side when `cpu`)."""
    size = -(-max(size, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
    addr = libc.mmap(None, size, mmap.PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, -1, 0)   # MAP_NORESERVE
    if addr in (None, MAP_FAILED): raise MemoryError(f"AMD: cannot reserve {size} bytes of address space")
    flags = (MEM_VRAM | (MEM_PUBLIC if cpu else 0) if vram else MEM_GTT | MEM_COHERENT) | MEM_WRITABLE | MEM_NO_SUBSTITUTE
    if executable: flags |= MEM_EXECUTABLE
    try: a = self.ioctl("ALLOC_MEMORY_OF_GPU", va_addr=addr, size=size, gpu_id=self.gpu_id, flags=flags)
    except DeviceError as e:
      libc.munmap(addr, size)
      raise MemoryError(f"AMD: cannot allocate {size} bytes of GPU memory: {e}") from e
    if cpu and libc.mmap(addr, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | mmap.MAP_FIXED, self.drm, a.mmap_offset) in (None, MAP_FAILED):
      raise DeviceError(f"AMD: cannot map GPU memory for the CPU (errno {ctypes.get_errno()})")
    ids = (u32 * 1)(self.gpu_id)
    self.ioctl("MAP_MEMORY_TO_GPU", handle=a.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1)
    return GPUMemory(addr, size, a.handle, cpu)

  def free(self, mem: GPUMemory) -> None:
    ids = (u32 * 1)(self.gpu_id)
    self.ioctl("UNMAP_MEMORY_FROM_GPU", handle=mem.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1)
    self.ioctl("FREE_MEMORY_OF_GPU", handle=mem.handle)
    libc.munmap(mem.addr, mem.size)

  def queue_setup(self, ring_bytes: int = 1 << 16) -> None:
    """An AQL compute queue: the ring, its end-of-pipe buffer and context save area, and the doorbell page mapped."""
    self.ring = self.alloc(ring_bytes, vram=False)
    self.eop = self.alloc(4096)
    # the context save area the firmware needs to preempt waves: sized from the topology (per-CU control stack + wave state)
    cus = self.node.get("simd_count", 0) // max(self.node.get("simd_per_cu", 2), 1)
    ctl_stack = -(-(cus * 4 * 8 * 8 + 8 + 40) // mmap.PAGESIZE) * mmap.PAGESIZE
    wg_data = -(-cus * 4 * (0x80000 + 0x40000 + 0x1000) // mmap.PAGESIZE) * mmap.PAGESIZE
    self.cwsr = self.alloc(ctl_stack + wg_data, vram=False)
    q = self.ioctl("CREATE_QUEUE", ring_base_address=self.ring.addr, ring_size=ring_bytes, gpu_id=self.gpu_id,
                   queue_type=QUEUE_TYPE_COMPUTE_AQL, queue_percentage=100, queue_priority=7, eop_buffer_address=self.eop.addr,
                   eop_buffer_size=4096, ctx_save_restore_address=self.cwsr.addr, ctx_save_restore_size=ctl_stack + wg_data,
                   ctl_stack_size=ctl_stack)
    self.queue_id, self.ring_slots = q.queue_id, ring_bytes // AQL_PACKET_BYTES
    self.write_ptr = ctypes.c_uint64.from_address(q.write_pointer_address)
    self.read_ptr = ctypes.c_uint64.from_address(q.read_pointer_address)
    page = q.doorbell_offset & ~(mmap.PAGESIZE - 1)
    self.doorbell_page = mmap.mmap(self.kfd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=page)
    self.doorbell = ctypes.c_uint64.from_buffer(self.doorbell_page, q.doorbell_offset - page)
    self.signal_mem = self.alloc(SIGNAL_BYTES, vram=False)
    ctypes.c_int64.from_address(self.signal_mem.addr).value = SIGNAL_KIND_USER
    self.last_dispatch: int | None = None

  def submit(self, kernel_object: int, kernargs: int, grid, group, lds: int) -> None:
    """Write a dispatch packet, publish its header last, ring the doorbell."""
    n = self.write_ptr.value
    if n - self.read_ptr.value >= self.ring_slots: self.synchronize()
    struct.pack_into("<q", (ctypes.c_char * SIGNAL_BYTES).from_address(self.signal_mem.addr), SIGNAL_VALUE_OFFSET, 1)
    pkt = dispatch_packet(kernel_object, kernargs, self.signal_mem.addr, grid, group, lds)
    slot = self.ring.addr + (n % self.ring_slots) * AQL_PACKET_BYTES
    ctypes.memmove(slot + 4, pkt[4:], AQL_PACKET_BYTES - 4)
    ctypes.c_uint32.from_address(slot).value = struct.unpack_from("<I", pkt)[0]   # header + setup: the packet becomes valid
    self.write_ptr.value = n + 1
    self.doorbell.value = n
    self.last_dispatch = n

  def synchronize(self, timeout: float = 30.0) -> float | None:
    """Wait for the last dispatch's completion signal; its duration in seconds from the packet processor's timestamps."""
    if self.last_dispatch is None: return None
    value = ctypes.c_int64.from_address(self.signal_mem.addr + SIGNAL_VALUE_OFFSET)
    deadline = time.monotonic() + timeout
    while value.value > 0:
      if time.monotonic() > deadline: raise DeviceError(f"AMD: a kernel did not finish within {timeout} s (GPU hang or fault)")
    start = ctypes.c_uint64.from_address(self.signal_mem.addr + SIGNAL_START_TS).value
    end = ctypes.c_uint64.from_address(self.signal_mem.addr + SIGNAL_END_TS).value
    self.last_dispatch = None
    return (end - start) / 1e8 if end > start else 0.0   # timestamps tick at 100 MHz

  def load(self, name: str, binary: bytes):
    from tinygrad_amd.codeobject import parse, CodeObjectError
    from tinycore.runtime.errors import CompileError
    try: lo = parse(binary)
    except CodeObjectError as e: raise CompileError(f"AMD: cannot load kernel {name!r}: {e}") from e
    return KFDProgram(self, lo)

class KFDProgram:
  """A code object copied into executable GPU memory; calling it writes the kernel arguments and dispatches."""
  def __init__(self, dev: KFDDevice, lo):
    self.dev, self.lo, self.name = dev, lo, lo.name
    self.image = dev.alloc(len(lo.image), executable=True)
    ctypes.memmove(self.image.addr, lo.image, len(lo.image))   # segments sit at vaddr == file offset
    self.kernargs = dev.alloc(max(lo.kernarg_size, 8), vram=False)
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait: bool = False):
    from tinygrad_amd.driver import launch_shape, kernargs
    grid, group = launch_shape(global_size, local_size)
    self.dev.synchronize()   # one kernel argument buffer per program: the previous launch must have read it
    args = kernargs(self.name, self.lo.kernarg_size, [b.addr for b in bufs], vals)
    ctypes.memmove(self.kernargs.addr, args.ctypes.data, args.nbytes)
    self.dev.submit(self.image.addr + self.lo.kd_offset, self.kernargs.addr, grid, group, self.lo.lds)
    return self.dev.synchronize() if wait else None
