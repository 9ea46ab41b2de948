"""WEBGPU allocator: storage buffers (padded to 4-byte words), views as (buffer, offset), copies through the queue."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from tinycore.runtime.device import LRUAllocator
from tinycore.runtime.errors import DeviceError, UnsupportedError

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

def check_alive(view: GPUView) -> None:
  """wgpu-native aborts the process on a released buffer handle: refuse one with a Python exception instead."""
  if getattr(view.buf, "_internal", None) is None:
    raise DeviceError(f"WEBGPU: buffer {view} was already released (freed twice, or used after its device went away)")

class WebGPUAllocator(LRUAllocator):
  supports_offset = True
  def __init__(self, driver):
    super().__init__(driver.device)
    self.driver = driver
    # every GPUBuffer from _alloc until _free, by id. wgpu releases a GPUBuffer in its __del__; a tinycore Buffer that dies
    # in a reference cycle (an exception's traceback, say) takes its GPUView and GPUBuffer into the same cyclic trash, whose
    # finalizers all run: Buffer.__del__ hands the view to the LRU cache, but the GPUBuffer would already be released and
    # the next kernel to bind it makes wgpu-native abort the process. Held here, a GPUBuffer is never trash while in use.
    self.owned: dict[int, Any] = {}
  def _alloc(self, size: int, options) -> GPUView:
    import wgpu
    lim = self.driver.limits
    most = min(lim["max-buffer-size"], lim["max-storage-buffer-binding-size"])
    if round_up(size, 4) > most:
      raise UnsupportedError(f"backend WEBGPU: a buffer of {size} bytes exceeds this adapter's limit of {most} bytes "
                             "(max-storage-buffer-binding-size / max-buffer-size)")
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    buf = self.driver.gpu.create_buffer(size=round_up(size, 4), usage=usage)
    self.owned[id(buf)] = buf
    return GPUView(buf, 0, size)
  def _free(self, buf: GPUView, size: int, options) -> None:
    if self.owned.pop(id(buf.buf), None) is not None: buf.buf.destroy()
  def _offset(self, buf: GPUView, size: int, offset: int) -> GPUView: return GPUView(buf.buf, buf.offset + offset, size)
  def _copyin(self, dest: GPUView, src: memoryview) -> None:
    check_alive(dest)
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
    check_alive(src)
    lo, hi = src.word_range
    data = self.driver.gpu.queue.read_buffer(src.buf, lo, hi - lo)
    dest[:] = memoryview(data)[src.offset - lo:src.offset - lo + src.size]
