"""QCOM's driver: loads OpenCL programs and launches them; images and views the device cannot bind in place are staged by copies."""
from __future__ import annotations
import ctypes, os, time
from collections import OrderedDict
from typing import Callable
from tinycore.helpers import prod
from tinycore.runtime.device import Driver
from tinycore.runtime.errors import CompileError, DeviceError
from tinycore.runtime.plugin import instance_name
from tinygrad_qcom import kgsl
from tinygrad_qcom.allocator import CLView
from tinygrad_qcom.assembler import unpack, build
from tinygrad_qcom.opencl import (runtime, ImageFormat, ImageDesc, CL_MEM_READ_WRITE, CL_MEM_READ_ONLY, CL_MEM_WRITE_ONLY, CL_R, CL_FLOAT,
                                  CL_HALF_FLOAT, CL_MEM_OBJECT_IMAGE2D, CL_BUFFER_CREATE_TYPE_REGION)
from tinygrad_qcom.renderer import kernel_info, ImageParam

VAR_TYPES = {"int": ctypes.c_int32, "uint": ctypes.c_uint32, "long": ctypes.c_int64, "ulong": ctypes.c_uint64, "short": ctypes.c_int16,
             "ushort": ctypes.c_uint16, "char": ctypes.c_int8, "uchar": ctypes.c_uint8}

class QCOMProgram:
  """One kernel. A call binds each parameter in place (a buffer, or a sub-buffer for an aligned view), or stages it: an image
  parameter, or a view at an offset the device cannot bind, gets a copy before the kernel and is copied back if written.
  The OpenCL program itself is the driver's (shared by equal sources, released when launched least recently)."""
  def __init__(self, driver: QCOMDriver, name: str, binary: bytes):
    self.driver, self.name = driver, name
    kind, src, payload = unpack(binary)
    self.info = kernel_info(src)
    self.images = {i.param: i for i in self.info.images}
    self.key = (kind, payload)
    driver.kernel(self)   # built now: a kernel that does not compile fails at load

  def stage(self, p: int, view: CLView) -> tuple[int, list]:
    """(the memory object to bind for parameter p, the copies back after the kernel); what it creates is released at synchronize."""
    rt, cl, st = self.driver.rt, self.driver.rt.cl, ctypes.c_int32()
    written = p in self.info.writes
    if (img := self.images.get(p)) is not None:
      fmt = ImageFormat(CL_R, CL_FLOAT if img.dtype.itemsize == 4 else CL_HALF_FLOAT)
      desc = ImageDesc(CL_MEM_OBJECT_IMAGE2D, img.width, img.height, 1, 1, 0, 0, 0, 0, None)
      flags = CL_MEM_WRITE_ONLY if img.access == "write" else CL_MEM_READ_ONLY
      mem = cl.created(cl.clCreateImage(rt.ctx, flags, ctypes.byref(fmt), ctypes.byref(desc), None, ctypes.byref(st)), st,
                       f"clCreateImage({img.width}x{img.height} {img.dtype.name}) for kernel {self.name}")
      origin, region = (ctypes.c_size_t * 3)(0, 0, 0), (ctypes.c_size_t * 3)(img.width, img.height, 1)
      # a written image starts as the buffer's contents too: texels the kernel does not write keep their value
      cl.check(cl.clEnqueueCopyBufferToImage(rt.queue, view.mem, mem, view.offset, origin, region, 0, None, None), "clEnqueueCopyBufferToImage")
      back = [lambda: cl.check(cl.clEnqueueCopyImageToBuffer(rt.queue, mem, view.mem, origin, region, view.offset, 0, None, None), "clEnqueueCopyImageToBuffer")] if written else []
      self.driver.release_later(mem)
      return mem, back
    if view.offset == 0: return view.mem, []
    if view.offset % rt.base_align == 0:
      region = (ctypes.c_size_t * 2)(view.offset, view.size)
      mem = cl.created(cl.clCreateSubBuffer(view.mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, region, ctypes.byref(st)), st, "clCreateSubBuffer")
      self.driver.release_later(mem)
      return mem, []
    mem = cl.created(cl.clCreateBuffer(rt.ctx, CL_MEM_READ_WRITE, view.size, None, ctypes.byref(st)), st, "clCreateBuffer (staging)")
    cl.check(cl.clEnqueueCopyBuffer(rt.queue, view.mem, mem, view.offset, 0, view.size, 0, None, None), "clEnqueueCopyBuffer")
    back = [lambda: cl.check(cl.clEnqueueCopyBuffer(rt.queue, mem, view.mem, 0, view.offset, view.size, 0, None, None), "clEnqueueCopyBuffer")] if written else []
    self.driver.release_later(mem)
    return mem, back

  def __call__(self, *bufs: CLView, global_size=(1, 1, 1), local_size=None, vals: tuple[int, ...] = (), wait: bool = False):
    rt, cl = self.driver.rt, self.driver.rt.cl
    if prod(global_size) == 0: return 0.0 if wait else None
    if len(self.driver.pending) > 256: self.driver.synchronize()   # bound the staging memory of launches never waited for
    kernel, after = self.driver.kernel(self), []
    try:
      for p, view in enumerate(bufs):
        mem, back = self.stage(p, view)
        after += back
        cl.check(cl.clSetKernelArg(kernel, p, ctypes.sizeof(ctypes.c_void_p), ctypes.byref(ctypes.c_void_p(mem))), f"clSetKernelArg({p})")
      for i, (t, v) in enumerate(zip(self.info.vars, vals)):
        arg = VAR_TYPES[t](v)
        cl.check(cl.clSetKernelArg(kernel, len(bufs) + i, ctypes.sizeof(arg), ctypes.byref(arg)), f"clSetKernelArg(var {i})")
      gs = list(global_size) + [1] * (3 - len(global_size))
      ls = None if local_size is None else list(local_size) + [1] * (3 - len(local_size))
      gws = (ctypes.c_size_t * 3)(*(g * l for g, l in zip(gs, ls)) if ls else gs)
      lws = (ctypes.c_size_t * 3)(*ls) if ls else None
      st = time.perf_counter()
      cl.check(cl.clEnqueueNDRangeKernel(rt.queue, kernel, 3, None, gws, lws, 0, None, None), f"launching kernel {self.name}")
    finally:
      for fn in after: fn()
    if not wait: return None
    self.driver.synchronize()
    return time.perf_counter() - st

class QCOMDriver(Driver):
  """One OpenCL device: the one the renderer was described from (tinygrad_qcom.opencl.device_info). On an Adreno with KGSL,
  only with QCOM_OPENCL=1 for now."""
  def __init__(self, index: int = 0):
    super().__init__(instance_name("QCOM", index))
    if index != 0: raise DeviceError(f"QCOM: only instance 0 exists (one OpenCL device per process), {self.device} was asked for")
    if kgsl.available() and os.environ.get("QCOM_OPENCL") != "1":
      raise DeviceError(f"QCOM: {kgsl.KGSL_PATH} is here, but launching kernels through raw KGSL command streams is not implemented "
                        "yet (tinygrad_qcom.kgsl has the context, memory, submission and wait ioctls); set QCOM_OPENCL=1 to run them "
                        "through the vendor's libOpenCL")
    self.rt = runtime()
    # (kind, payload) -> (cl_program, cl_kernel), the most recently launched last
    self.built: OrderedDict[tuple[str, bytes], tuple[int, int]] = OrderedDict()
    # objects queued launches may still use (staging memory, released programs): released at synchronize
    self.pending: list[tuple[Callable, int]] = []
  def load(self, name: str, binary: bytes, spec=None) -> QCOMProgram:
    try: return QCOMProgram(self, name, binary)
    except (CompileError, DeviceError): raise
    except Exception as e: raise CompileError(f"QCOM: cannot load kernel {name!r}: {type(e).__name__}: {e}") from e
  def kernel(self, prg: QCOMProgram) -> int:
    """prg's cl_kernel, building its program if no loaded program of the same bytes is built; past rt.max_built built
    programs, the least recently launched is released (and built again if launched again)."""
    if (hit := self.built.get(prg.key)) is not None:
      self.built.move_to_end(prg.key)
      return hit[1]
    cl, (kind, payload), st = self.rt.cl, prg.key, ctypes.c_int32()
    prog = build(self.rt, prg.name, binary=payload) if kind == "binary" else build(self.rt, prg.name, payload.decode())
    kernel = cl.clCreateKernel(prog, prg.info.name.encode(), ctypes.byref(st))
    if st.value != 0: cl.clReleaseProgram(prog)
    self.built[prg.key] = (prog, cl.created(kernel, st, f"clCreateKernel({prg.info.name})"))
    while len(self.built) > self.rt.max_built:
      old_prog, old_kernel = self.built.popitem(last=False)[1]
      self.release_later(old_kernel, cl.clReleaseKernel)
      self.release_later(old_prog, cl.clReleaseProgram)
    return kernel
  def release_later(self, obj: int, release: Callable | None = None) -> None:
    """Release an OpenCL object (a memory object by default) at the next synchronize, when no queued launch uses it."""
    self.pending.append((release or self.rt.cl.clReleaseMemObject, obj))
  def synchronize(self) -> None:
    self.rt.cl.check(self.rt.cl.clFinish(self.rt.queue), "clFinish")
    for release, obj in self.pending: release(obj)
    self.pending.clear()
