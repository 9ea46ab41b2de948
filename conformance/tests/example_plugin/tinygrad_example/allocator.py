"""EXAMPLE's allocator: device memory as numpy byte arrays; views at offsets are numpy slices of them."""
import numpy as np
from tinycore.runtime.device import LRUAllocator

class ExampleAllocator(LRUAllocator):
  supports_offset = True
  def _alloc(self, size: int, options) -> np.ndarray: return np.zeros(size, np.uint8)
  def _free(self, buf: np.ndarray, size: int, options) -> None: pass   # numpy frees it with the last reference
  def _copyin(self, dest: np.ndarray, src: memoryview) -> None: dest[:] = np.frombuffer(src, np.uint8)
  def _copyout(self, dest: memoryview, src: np.ndarray) -> None: np.frombuffer(dest, np.uint8)[:] = src
  def _offset(self, buf: np.ndarray, size: int, offset: int) -> np.ndarray: return buf[offset:offset + size]
