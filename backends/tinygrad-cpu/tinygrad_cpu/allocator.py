"""CPU memory: 64-byte aligned host buffers (numpy-owned), zero-copy views at byte offsets."""
from __future__ import annotations
import numpy as np
from tinycore.runtime.device import LRUAllocator

class CPUBuffer:
  """An address kernels get, the bytes as a memoryview, and the array that owns them (kept alive by every view)."""
  __slots__ = ("addr", "mv", "owner")
  def __init__(self, addr: int, mv: memoryview, owner: np.ndarray): self.addr, self.mv, self.owner = addr, mv, owner

ALIGN = 64  # a cache line, and the widest vector load

class CPUAllocator(LRUAllocator):
  supports_offset = True
  def __init__(self, driver=None): super().__init__(driver.device if driver is not None else "CPU")
  def _alloc(self, size: int, options) -> CPUBuffer:
    raw = np.empty(size + ALIGN, np.uint8)
    off = -raw.ctypes.data % ALIGN
    return CPUBuffer(raw.ctypes.data + off, raw[off:off+size].data, raw)
  def _copyin(self, dest: CPUBuffer, src: memoryview) -> None: dest.mv[:] = src
  def _copyout(self, dest: memoryview, src: CPUBuffer) -> None: dest[:] = src.mv
  def _offset(self, buf: CPUBuffer, size: int, offset: int) -> CPUBuffer: return CPUBuffer(buf.addr + offset, buf.mv[offset:offset+size], buf.owner)
  def _as_buffer(self, buf: CPUBuffer) -> memoryview: return buf.mv
