"""AMD allocator: with AMD_EMULATE=1, device memory is host memory (numpy arrays the emulator addresses by host pointer);
on hardware, GPU memory allocated and mapped through KFD."""
from __future__ import annotations
from dataclasses import dataclass
import numpy as np
from tinycore.runtime.device import LRUAllocator

@dataclass(frozen=True)
class HostView:
  """A byte range of an emulated device allocation: kernels address mem.ctypes.data + offset."""
  mem: np.ndarray
  offset: int
  size: int
  @property
  def addr(self) -> int: return self.mem.ctypes.data + self.offset
  def bytes(self) -> np.ndarray: return self.mem[self.offset:self.offset + self.size]

class AMDEmulatedAllocator(LRUAllocator):
  supports_offset = True
  def __init__(self, driver): super().__init__(driver.device)
  def _alloc(self, size: int, options) -> HostView:
    return HostView(np.zeros(max(size, 1), np.uint8), 0, size)   # every allocation has an address, also an empty one
  def _copyin(self, dest: HostView, src: memoryview) -> None: dest.bytes()[:] = np.frombuffer(src, np.uint8)
  def _copyout(self, dest: memoryview, src: HostView) -> None: np.frombuffer(dest, np.uint8)[:] = src.bytes()
  def _offset(self, buf: HostView, size: int, offset: int) -> HostView: return HostView(buf.mem, buf.offset + offset, size)
  def _as_buffer(self, buf: HostView) -> memoryview: return memoryview(buf.bytes())
