"""QCOM memory: OpenCL buffers; a view is (buffer, byte offset, size), copies go through the queue at the view's offset."""
from __future__ import annotations
import ctypes
from dataclasses import dataclass
from tinycore.runtime.device import LRUAllocator
from tinygrad_qcom.opencl import CL_MEM_READ_WRITE

@dataclass(frozen=True)
class CLView:
  """Bytes [offset, offset + size) of an OpenCL buffer: what copies address and kernels bind (sub-buffer or staged copy)."""
  mem: int
  offset: int
  size: int

class QCOMAllocator(LRUAllocator):
  supports_offset = True
  def __init__(self, driver):
    super().__init__(driver.device)
    self.rt = driver.rt
  def _alloc(self, size: int, options) -> CLView:
    if size > self.rt.max_alloc: raise MemoryError(f"QCOM: {size} bytes exceed the device's largest allocation ({self.rt.max_alloc} bytes)")
    st = ctypes.c_int32()
    mem = self.rt.cl.clCreateBuffer(self.rt.ctx, CL_MEM_READ_WRITE, size, None, ctypes.byref(st))
    return CLView(self.rt.cl.created(mem, st, f"clCreateBuffer({size} bytes)"), 0, size)
  def _free(self, buf: CLView, size: int, options) -> None: self.rt.cl.clReleaseMemObject(buf.mem)
  def _offset(self, buf: CLView, size: int, offset: int) -> CLView: return CLView(buf.mem, buf.offset + offset, size)
  def _copyin(self, dest: CLView, src: memoryview) -> None:
    data = (ctypes.c_char * len(src)).from_buffer_copy(src)
    self.rt.cl.check(self.rt.cl.clEnqueueWriteBuffer(self.rt.queue, dest.mem, 1, dest.offset, len(src), data, 0, None, None), "clEnqueueWriteBuffer")
  def _copyout(self, dest: memoryview, src: CLView) -> None:
    out = (ctypes.c_char * len(dest)).from_buffer(dest)
    self.rt.cl.check(self.rt.cl.clEnqueueReadBuffer(self.rt.queue, src.mem, 1, src.offset, len(dest), out, 0, None, None), "clEnqueueReadBuffer")
