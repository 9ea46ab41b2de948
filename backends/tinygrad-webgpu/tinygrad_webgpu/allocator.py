"""WEBGPU allocator: storage buffers (padded to 4-byte words), views as (buffer, offset), copies through the queue."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from tinycore.runtime.device import LRUAllocator
from tinycore.runtime.errors import UnsupportedError

def round_up(n: int, m: int) -> int: return (n + m - 1) // m * m

@dataclass(frozen=True)
class GPUView:
  """A byte range of a GPU buffer: what kernels bind and copies address."""
  buf: Any
  offset: int
  size: int
  @property
  def word_range(self) -> tuple[int, int]:
    """The 4-byte aligned span covering this view (copies and bindings move whole words)."""
    return self.offset & ~3, round_up(self.offset + self.size, 4)

class WebGPUAllocator(LRUAllocator):
  supports_offset = True
  def __init__(self, driver):
    super().__init__("WEBGPU")
    self.driver = driver
  def _alloc(self, size: int, options) -> GPUView:
    import wgpu
    lim = self.driver.limits
    most = min(lim["max-buffer-size"], lim["max-storage-buffer-binding-size"])
    if round_up(size, 4) > most:
      raise UnsupportedError(f"backend WEBGPU: a buffer of {size} bytes exceeds this adapter's limit of {most} bytes "
                             "(max-storage-buffer-binding-size / max-buffer-size)")
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    return GPUView(self.driver.gpu.create_buffer(size=round_up(size, 4), usage=usage), 0, size)
  def _free(self, buf: GPUView, size: int, options) -> None: buf.buf.destroy()
  def _offset(self, buf: GPUView, size: int, offset: int) -> GPUView: return GPUView(buf.buf, buf.offset + offset, size)
  def _copyin(self, dest: GPUView, src: memoryview) -> None:
    lo, hi = dest.word_range
    data = bytes(src)
    if (lo, hi) != (dest.offset, dest.offset + dest.size):
      # a partial word: past the end of the buffer it is padding, elsewhere it holds a neighbour's bytes to keep
      at_tail = dest.offset == lo and hi == dest.buf.size
      word = bytearray(hi - lo) if at_tail else bytearray(self.driver.gpu.queue.read_buffer(dest.buf, lo, hi - lo))
      word[dest.offset - lo:dest.offset - lo + dest.size] = data
      data = bytes(word)
    self.driver.gpu.queue.write_buffer(dest.buf, lo, data)
  def _copyout(self, dest: memoryview, src: GPUView) -> None:
    lo, hi = src.word_range
    data = self.driver.gpu.queue.read_buffer(src.buf, lo, hi - lo)
    dest[:] = memoryview(data)[src.offset - lo:src.offset - lo + src.size]
