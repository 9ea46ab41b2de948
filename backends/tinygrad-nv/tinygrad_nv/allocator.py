"""NV allocator: device memory as integer addresses (CUdeviceptr, or the emulator's), views as address + offset."""
from __future__ import annotations
from tinycore.runtime.device import LRUAllocator

class NVAllocator(LRUAllocator):
  supports_offset = True
  supports_transfer = True   # between NV instances: a device-to-device copy, never through the host
  def __init__(self, driver):
    super().__init__(driver.device)
    self.driver = driver
  def _alloc(self, size: int, options) -> int: return self.driver.mem_alloc(size)
  def _free(self, buf: int, size: int, options) -> None: self.driver.mem_free(buf)
  def _offset(self, buf: int, size: int, offset: int) -> int: return buf + offset
  def _copyin(self, dest: int, src: memoryview) -> None: self.driver.copyin(dest, src)
  def _copyout(self, dest: memoryview, src: int) -> None: self.driver.copyout(dest, src)
  def _transfer(self, dest: int, src: int, size: int, src_dev, dest_dev) -> None: self.driver.transfer(dest, src, size, dest_dev.driver)
