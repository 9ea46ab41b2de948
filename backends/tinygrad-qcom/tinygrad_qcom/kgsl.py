"""The KGSL kernel interface (/dev/kgsl-3d0) through ctypes ioctls: a context, GPU memory by id, command submission, and
timestamp waits bounded by our own timeout. Layouts follow msm_kgsl.h (64-bit Linux/Android); test_qcom.py checks them."""
from __future__ import annotations
import ctypes, fcntl, mmap, os, time
from tinycore.runtime.errors import DeviceError

KGSL_PATH = "/dev/kgsl-3d0"
KGSL_IOC_TYPE = 0x09
KGSL_MEMFLAGS_USE_CPU_MAP = 1 << 28
KGSL_CACHEMODE_WRITEBACK = 3 << 26       # KGSL_CACHEMODE_SHIFT 26
KGSL_CONTEXT_NO_GMEM_ALLOC, KGSL_CONTEXT_PREAMBLE = 0x2, 0x10
KGSL_TIMESTAMP_RETIRED = 2
KGSL_CMDLIST_IB = 0x1
KGSL_CMDBATCH_PROFILING = 0x10

class DrawctxtCreate(ctypes.Structure): _fields_ = [("flags", ctypes.c_uint32), ("drawctxt_id", ctypes.c_uint32)]
class DrawctxtDestroy(ctypes.Structure): _fields_ = [("drawctxt_id", ctypes.c_uint32)]
class GpumemAllocId(ctypes.Structure):
  _fields_ = [("id", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("size", ctypes.c_size_t), ("mmapsize", ctypes.c_size_t),
              ("gpuaddr", ctypes.c_ulong), ("_pad", ctypes.c_ulong * 2)]
class GpumemFreeId(ctypes.Structure): _fields_ = [("id", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]
class CommandObject(ctypes.Structure):
  _fields_ = [("offset", ctypes.c_uint64), ("gpuaddr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("id", ctypes.c_uint32)]
class GpuCommand(ctypes.Structure):
  _fields_ = [("flags", ctypes.c_uint64), ("cmdlist", ctypes.c_uint64), ("cmdsize", ctypes.c_uint32), ("numcmds", ctypes.c_uint32),
              ("objlist", ctypes.c_uint64), ("objsize", ctypes.c_uint32), ("numobjs", ctypes.c_uint32),
              ("synclist", ctypes.c_uint64), ("syncsize", ctypes.c_uint32), ("numsyncs", ctypes.c_uint32),
              ("context_id", ctypes.c_uint32), ("timestamp", ctypes.c_uint32)]
class ReadTimestampCtxtid(ctypes.Structure):
  _fields_ = [("context_id", ctypes.c_uint32), ("type", ctypes.c_uint32), ("timestamp", ctypes.c_uint32)]

def _ioc(direction: int, nr: int, struct) -> int:
  """Linux's _IOC(dir, type, nr, size): dir 1 = write, 2 = read, 3 = both."""
  return (direction << 30) | (ctypes.sizeof(struct) << 16) | (KGSL_IOC_TYPE << 8) | nr

IOCTLS = {  # name: (request number, argument structure)
  "DRAWCTXT_CREATE": (_ioc(3, 0x13, DrawctxtCreate), DrawctxtCreate), "DRAWCTXT_DESTROY": (_ioc(1, 0x14, DrawctxtDestroy), DrawctxtDestroy),
  "CMDSTREAM_READTIMESTAMP_CTXTID": (_ioc(3, 0x16, ReadTimestampCtxtid), ReadTimestampCtxtid),
  "GPUMEM_ALLOC_ID": (_ioc(3, 0x34, GpumemAllocId), GpumemAllocId), "GPUMEM_FREE_ID": (_ioc(3, 0x35, GpumemFreeId), GpumemFreeId),
  "GPU_COMMAND": (_ioc(3, 0x4A, GpuCommand), GpuCommand),
}

def available() -> bool: return os.path.exists(KGSL_PATH)

class KGSL:
  """One open KGSL device with one context. `ioctl` is injectable so the logic runs (in tests) without the device."""
  def __init__(self, fd: int | None = None, ioctl=None):
    if fd is None:
      try: fd = os.open(KGSL_PATH, os.O_RDWR | os.O_CLOEXEC)
      except OSError as e: raise DeviceError(f"QCOM: cannot open {KGSL_PATH}: {e}") from e
    self.fd, self._ioctl = fd, ioctl or (lambda fd, req, arg: fcntl.ioctl(fd, req, arg))
    self.ctx = self.call("DRAWCTXT_CREATE", flags=KGSL_CONTEXT_PREAMBLE | KGSL_CONTEXT_NO_GMEM_ALLOC).drawctxt_id
  def call(self, name: str, **fields):
    req, struct = IOCTLS[name]
    arg = struct(**fields)
    try: self._ioctl(self.fd, req, arg)
    except OSError as e: raise DeviceError(f"QCOM: KGSL ioctl {name} failed: {e}") from e
    return arg
  def alloc(self, size: int) -> tuple[GpumemAllocId, mmap.mmap]:
    """GPU memory of `size` bytes (cached, CPU-mapped): its id, GPU address, and a host mapping."""
    got = self.call("GPUMEM_ALLOC_ID", size=size, flags=KGSL_MEMFLAGS_USE_CPU_MAP | KGSL_CACHEMODE_WRITEBACK)
    return got, mmap.mmap(self.fd, got.mmapsize, offset=got.id * 0x1000)   # KGSL maps an allocation at its id's page
  def free(self, mem: GpumemAllocId) -> None: self.call("GPUMEM_FREE_ID", id=mem.id)
  def submit(self, ib_gpuaddr: int, ib_bytes: int) -> int:
    """Queue one indirect buffer of command packets on our context; returns the timestamp it retires at."""
    cmd = CommandObject(gpuaddr=ib_gpuaddr, size=ib_bytes, flags=KGSL_CMDLIST_IB)
    return self.call("GPU_COMMAND", cmdlist=ctypes.addressof(cmd), cmdsize=ctypes.sizeof(CommandObject), numcmds=1,
                     objsize=ctypes.sizeof(CommandObject), context_id=self.ctx).timestamp
  def retired(self) -> int: return self.call("CMDSTREAM_READTIMESTAMP_CTXTID", context_id=self.ctx, type=KGSL_TIMESTAMP_RETIRED).timestamp
  def wait(self, timestamp: int, timeout_s: float, what: str = "a kernel") -> None:
    """Until the context retires `timestamp`; a GPU that does not get there in timeout_s is a hang, raised as a DeviceError
    (a blocking KGSL wait would hold the process for as long as the hang lasts). Timestamps wrap at 2**32."""
    deadline, pause = time.monotonic() + timeout_s, 1e-5
    while ((self.retired() - timestamp) & 0xffffffff) >= 1 << 31:
      if time.monotonic() > deadline:
        raise DeviceError(f"QCOM: {what} did not finish within {timeout_s:g} s (context {self.ctx} is at timestamp {self.retired()}, "
                          f"waiting for {timestamp}): the GPU hung or the kernel runs too long")
      time.sleep(pause)
      pause = min(pause * 2, 1e-3)
  def close(self) -> None:
    self.call("DRAWCTXT_DESTROY", drawctxt_id=self.ctx)
    os.close(self.fd)
