"""The OpenCL runtime through ctypes on libOpenCL.so.1 (no compiled extension): the first GPU-or-any device, its context and queue."""
from __future__ import annotations
import ctypes, ctypes.util, functools, os, re
from tinycore.runtime.errors import DeviceError

# the constants used here, from Khronos' CL/cl.h
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_READ_IMAGE_ARGS, CL_DEVICE_MAX_WRITE_IMAGE_ARGS = 0x1004, 0x100E, 0x100F
CL_DEVICE_MAX_MEM_ALLOC_SIZE, CL_DEVICE_IMAGE2D_MAX_WIDTH, CL_DEVICE_IMAGE2D_MAX_HEIGHT = 0x1010, 0x1011, 0x1012
CL_DEVICE_IMAGE_SUPPORT, CL_DEVICE_MEM_BASE_ADDR_ALIGN = 0x1016, 0x1019
CL_DEVICE_NAME, CL_DRIVER_VERSION, CL_DEVICE_VERSION, CL_DEVICE_EXTENSIONS, CL_PLATFORM_NAME = 0x102B, 0x102D, 0x102F, 0x1030, 0x0902
CL_DEVICE_OPENCL_C_VERSION = 0x103D
CL_MEM_READ_WRITE, CL_MEM_WRITE_ONLY, CL_MEM_READ_ONLY = 1, 2, 4
CL_R, CL_HALF_FLOAT, CL_FLOAT, CL_MEM_OBJECT_IMAGE2D = 0x10B0, 0x10DD, 0x10DE, 0x10F1
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES, CL_PROGRAM_BUILD_LOG = 0x1165, 0x1166, 0x1183
CL_BUFFER_CREATE_TYPE_REGION = 0x1220
ERRORS = {-1: "DEVICE_NOT_FOUND", -2: "DEVICE_NOT_AVAILABLE", -4: "MEM_OBJECT_ALLOCATION_FAILURE", -5: "OUT_OF_RESOURCES",
          -6: "OUT_OF_HOST_MEMORY", -11: "BUILD_PROGRAM_FAILURE", -13: "MISALIGNED_SUB_BUFFER_OFFSET", -30: "INVALID_VALUE",
          -38: "INVALID_MEM_OBJECT", -39: "INVALID_IMAGE_FORMAT_DESCRIPTOR", -40: "INVALID_IMAGE_SIZE", -42: "INVALID_BINARY",
          -46: "INVALID_KERNEL_NAME", -48: "INVALID_KERNEL", -49: "INVALID_ARG_INDEX", -50: "INVALID_ARG_VALUE", -51: "INVALID_ARG_SIZE",
          -52: "INVALID_KERNEL_ARGS", -54: "INVALID_WORK_GROUP_SIZE", -55: "INVALID_WORK_ITEM_SIZE", -61: "INVALID_BUFFER_SIZE",
          -63: "INVALID_GLOBAL_WORK_SIZE", -1001: "PLATFORM_NOT_FOUND_KHR"}

class ImageFormat(ctypes.Structure): _fields_ = [("order", ctypes.c_uint32), ("type", ctypes.c_uint32)]
class ImageDesc(ctypes.Structure):
  _fields_ = [("type", ctypes.c_uint32), ("width", ctypes.c_size_t), ("height", ctypes.c_size_t), ("depth", ctypes.c_size_t),
              ("array_size", ctypes.c_size_t), ("row_pitch", ctypes.c_size_t), ("slice_pitch", ctypes.c_size_t),
              ("mip_levels", ctypes.c_uint32), ("samples", ctypes.c_uint32), ("buffer", ctypes.c_void_p)]

def find_library() -> str | None:
  """The OpenCL ICD loader (or a vendor's libOpenCL, as on Android) this machine has, or None."""
  for name in ("libOpenCL.so.1", "libOpenCL.so", "/vendor/lib64/libOpenCL.so", "/system/vendor/lib64/libOpenCL.so"):
    try: ctypes.CDLL(name); return name
    except OSError: pass
  return ctypes.util.find_library("OpenCL")

class CL:
  """libOpenCL's functions with their C signatures; `check` turns an error code into a DeviceError naming QCOM."""
  def __init__(self, path: str):
    lib = ctypes.CDLL(path)
    P, U, S, I = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_int32
    PI, PS = ctypes.POINTER(I), ctypes.POINTER(S)
    sigs = {  # name: (return type, argument types)
      "clGetPlatformIDs": (I, [U, ctypes.POINTER(P), ctypes.POINTER(U)]),
      "clGetPlatformInfo": (I, [P, U, S, P, PS]),
      "clGetDeviceIDs": (I, [P, ctypes.c_uint64, U, ctypes.POINTER(P), ctypes.POINTER(U)]),
      "clGetDeviceInfo": (I, [P, U, S, P, PS]),
      "clCreateContext": (P, [P, U, ctypes.POINTER(P), P, P, PI]),
      "clCreateCommandQueue": (P, [P, P, ctypes.c_uint64, PI]),
      "clCreateBuffer": (P, [P, ctypes.c_uint64, S, P, PI]),
      "clCreateSubBuffer": (P, [P, ctypes.c_uint64, U, P, PI]),
      "clCreateImage": (P, [P, ctypes.c_uint64, ctypes.POINTER(ImageFormat), ctypes.POINTER(ImageDesc), P, PI]),
      "clReleaseMemObject": (I, [P]),
      "clEnqueueWriteBuffer": (I, [P, P, U, S, S, P, U, P, P]),
      "clEnqueueReadBuffer": (I, [P, P, U, S, S, P, U, P, P]),
      "clEnqueueCopyBuffer": (I, [P, P, P, S, S, S, U, P, P]),
      "clEnqueueCopyBufferToImage": (I, [P, P, P, S, PS, PS, U, P, P]),
      "clEnqueueCopyImageToBuffer": (I, [P, P, P, PS, PS, S, U, P, P]),
      "clCreateProgramWithSource": (P, [P, U, ctypes.POINTER(ctypes.c_char_p), PS, PI]),
      "clCreateProgramWithBinary": (P, [P, U, ctypes.POINTER(P), PS, ctypes.POINTER(ctypes.c_char_p), PI, PI]),
      "clBuildProgram": (I, [P, U, ctypes.POINTER(P), ctypes.c_char_p, P, P]),
      "clGetProgramBuildInfo": (I, [P, P, U, S, P, PS]),
      "clGetProgramInfo": (I, [P, U, S, P, PS]),
      "clReleaseProgram": (I, [P]),
      "clCreateKernel": (P, [P, ctypes.c_char_p, PI]),
      "clReleaseKernel": (I, [P]),
      "clSetKernelArg": (I, [P, U, S, P]),
      "clEnqueueNDRangeKernel": (I, [P, P, U, PS, PS, PS, U, P, P]),
      "clFinish": (I, [P]),
    }
    for name, (res, args) in sigs.items():
      fn = getattr(lib, name)
      fn.restype, fn.argtypes = res, args
      setattr(self, name, fn)
  @staticmethod
  def check(status: int, what: str) -> None:
    if status != 0: raise DeviceError(f"QCOM (OpenCL): {what} failed with {ERRORS.get(status, 'error')} ({status})")
  def created(self, handle, status: ctypes.c_int32, what: str):
    self.check(status.value, what)
    return handle

class DeviceInfo:
  """What an OpenCL device reports about itself (read without a context: the renderer describes the target from it)."""
  def __init__(self, cl: CL, device, platform: str):
    self.cl, self.device, self.platform = cl, device, platform
    self.name, self.version, self.driver_version = (self.info_str(k) for k in (CL_DEVICE_NAME, CL_DEVICE_VERSION, CL_DRIVER_VERSION))
    self.extensions = set(self.info_str(CL_DEVICE_EXTENSIONS).split())
    self.has_images = bool(self.info_int(CL_DEVICE_IMAGE_SUPPORT, ctypes.c_uint32))
    self.image_max = (self.info_int(CL_DEVICE_IMAGE2D_MAX_WIDTH), self.info_int(CL_DEVICE_IMAGE2D_MAX_HEIGHT))
    self.max_read_images, self.max_write_images = (self.info_int(k, ctypes.c_uint32) for k in (CL_DEVICE_MAX_READ_IMAGE_ARGS, CL_DEVICE_MAX_WRITE_IMAGE_ARGS))
    self.base_align = self.info_int(CL_DEVICE_MEM_BASE_ADDR_ALIGN, ctypes.c_uint32) // 8   # bits -> bytes: sub-buffer offsets
    self.max_alloc = self.info_int(CL_DEVICE_MAX_MEM_ALLOC_SIZE, ctypes.c_uint64)
    # pocl (the CPU stand-in CI runs) keeps every kernel it compiles in its own disk cache (POCL_CACHE_DIR): handing it the
    # source is cheaper than a program binary (serializing one makes it compile a second, generic work-group function), and
    # a built program it holds (~1 MB of LLVM IR) can be released to bound memory, since rebuilding it hits that cache
    self.caches_kernels = platform.startswith("Portable Computing Language") and os.environ.get("POCL_KERNEL_CACHE", "1") != "0"
    # the kernels are OpenCL C 1.2, the language clBuildProgram's spec defaults to; pocl 3 defaults to 3.0, whose builtin
    # declarations (2.0's atomics, pipes, device-side enqueue...) make its frontend ~15% slower for the same result
    c_version = re.match(r"OpenCL C (\d+)\.(\d+)", self.info_str(CL_DEVICE_OPENCL_C_VERSION))
    self.build_options = b"-cl-std=CL1.2" if c_version and (int(c_version[1]), int(c_version[2])) >= (1, 2) else b""
    self.max_built = 256 if self.caches_kernels else 4096   # built programs a driver keeps (least recently launched go first)
  def info_str(self, key: int) -> str:
    size = ctypes.c_size_t()
    self.cl.check(self.cl.clGetDeviceInfo(self.device, key, 0, None, ctypes.byref(size)), "clGetDeviceInfo")
    out = ctypes.create_string_buffer(size.value)
    self.cl.check(self.cl.clGetDeviceInfo(self.device, key, size.value, out, None), "clGetDeviceInfo")
    return out.value.decode(errors="replace")
  def info_int(self, key: int, ctype=ctypes.c_size_t) -> int:
    out = ctype()
    self.cl.check(self.cl.clGetDeviceInfo(self.device, key, ctypes.sizeof(out), ctypes.byref(out), None), "clGetDeviceInfo")
    return out.value
  @property
  def target(self) -> str: return f"opencl:{self.platform}:{self.name}:{self.version}:{self.driver_version}"

class Runtime(DeviceInfo):
  """One OpenCL device with a context and an in-order queue."""
  def __init__(self, cl: CL, device, platform: str):
    super().__init__(cl, device, platform)
    st = ctypes.c_int32()
    self.ctx = cl.created(cl.clCreateContext(None, 1, ctypes.byref(ctypes.c_void_p(device)), None, None, ctypes.byref(st)), st, "clCreateContext")
    self.queue = cl.created(cl.clCreateCommandQueue(self.ctx, device, 0, ctypes.byref(st)), st, "clCreateCommandQueue")

@functools.cache
def _device() -> tuple[CL, int, str]:
  """The OpenCL device this process uses: the first device of the first platform that has one (QCOM_CL_DEVICE=i picks another)."""
  path = find_library()
  if path is None:
    raise DeviceError("QCOM: no OpenCL runtime found (libOpenCL.so.1) and no KGSL device (/dev/kgsl-3d0); on a Linux "
                      "machine install one, e.g. apt-get install pocl-opencl-icd ocl-icd-libopencl1")
  cl = CL(path)
  n = ctypes.c_uint32()
  status = cl.clGetPlatformIDs(0, None, ctypes.byref(n))
  if status != 0 or n.value == 0:
    raise DeviceError(f"QCOM: the OpenCL loader {path} finds no platform (no ICD installed: e.g. apt-get install pocl-opencl-icd)")
  platforms = (ctypes.c_void_p * n.value)()
  cl.check(cl.clGetPlatformIDs(n.value, platforms, None), "clGetPlatformIDs")
  devices = []
  for p in platforms:
    count = ctypes.c_uint32()
    if cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(count)) != 0 or count.value == 0: continue
    ids = (ctypes.c_void_p * count.value)()
    cl.check(cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, count.value, ids, None), "clGetDeviceIDs")
    name = ctypes.create_string_buffer(256)
    cl.clGetPlatformInfo(p, CL_PLATFORM_NAME, 256, name, None)
    devices += [(d, name.value.decode(errors="replace")) for d in ids]
  pick = int(os.environ.get("QCOM_CL_DEVICE", "0"))
  if not 0 <= pick < len(devices): raise DeviceError(f"QCOM: OpenCL device {pick} asked for (QCOM_CL_DEVICE), but {len(devices)} found")
  return (cl, *devices[pick])

@functools.cache
def device_info() -> DeviceInfo | None:
  """The OpenCL device's description, or None without a runtime (the renderer then describes an Adreno GPU)."""
  try: return DeviceInfo(*_device())
  except (DeviceError, OSError, AttributeError): return None

@functools.cache
def runtime() -> Runtime:
  """The process' OpenCL context and queue on that device (DeviceError saying what to install without one)."""
  return Runtime(*_device())
