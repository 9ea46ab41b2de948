"""AMD allocator: with AMD_EMULATE=1, device memory is host memory (numpy arrays the emulator addresses by host pointer);
on hardware, GPU memory allocated and mapped through KFD (at one address for the CPU and the GPU)."""
from __future__ import annotations
import ctypes
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

@dataclass(frozen=True)
class GPUView:
  """A byte range of a KFD allocation, mapped at the same address for the CPU and the GPU."""
  mem: object   # kfd.GPUMemory
  offset: int
  size: int
  @property
  def addr(self) -> int: return self.mem.addr + self.offset

class KFDAllocator(LRUAllocator):
  supports_offset = True
  def __init__(self, driver):
    super().__init__(driver.device)
    self.dev = driver.kfd
  def _alloc(self, size: int, options) -> GPUView: return GPUView(self.dev.alloc(size), 0, size)
  def _free(self, buf: GPUView, size: int, options) -> None: self.dev.free(buf.mem)
  def _copyin(self, dest: GPUView, src: memoryview) -> None:
    self.dev.synchronize()
    ctypes.memmove(dest.addr, (ctypes.c_char * len(src)).from_buffer_copy(src), len(src))
  def _copyout(self, dest: memoryview, src: GPUView) -> None:
    self.dev.synchronize()
    ctypes.memmove((ctypes.c_char * len(dest)).from_buffer(dest), src.addr, len(dest))
  def _offset(self, buf: GPUView, size: int, offset: int) -> GPUView: return GPUView(buf.mem, buf.offset + offset, size)
