"""QCOM's assembler: OpenCL C -> the device compiler's program binary where an OpenCL runtime is present (cacheable), else the source."""
from __future__ import annotations
import ctypes
from tinycore.runtime.device import Assembler
from tinycore.runtime.binary import pack_binary, unpack_binary
from tinycore.runtime.errors import CompileError, DeviceError
from tinygrad_qcom.renderer import kernel_info

MAGIC = b"TCQCOM1\n"   # tinycore's binary container (runtime/binary.py): header {kind, src}, payload a program binary or the source

def pack(kind: str, src: str, payload: bytes) -> bytes:
  return pack_binary(MAGIC, {"kind": kind, "src": src if kind == "binary" else None}, payload)

def unpack(binary: bytes) -> tuple[str, str, bytes]:
  """(kind, kernel source, payload) of a binary, checked: anything else raises CompileError naming QCOM."""
  header, payload = unpack_binary(MAGIC, binary, "QCOM")
  try:
    if header.get("kind") not in ("binary", "source"): raise ValueError(f"unknown kind {header.get('kind')!r}")
    src = header["src"] if header["kind"] == "binary" else payload.decode()
    kernel_info(src)
    return header["kind"], src, payload
  except Exception as e: raise CompileError(f"QCOM: corrupt kernel binary ({type(e).__name__}: {e}); it was not produced by this backend's assembler") from e

def build(rt, name: str, src: str | None = None, binary: bytes | None = None):
  """An OpenCL program built for rt's device from source or from its own binary; CompileError with the build log."""
  cl, st = rt.cl, ctypes.c_int32()
  if binary is None:
    text = ctypes.c_char_p(src.encode())
    prog = cl.clCreateProgramWithSource(rt.ctx, 1, ctypes.byref(text), None, ctypes.byref(st))
  else:
    data, size, bst = ctypes.c_char_p(binary), ctypes.c_size_t(len(binary)), ctypes.c_int32()
    prog = cl.clCreateProgramWithBinary(rt.ctx, 1, ctypes.byref(ctypes.c_void_p(rt.device)), ctypes.byref(size), ctypes.byref(data), ctypes.byref(bst), ctypes.byref(st))
    if st.value != 0 or bst.value != 0: raise CompileError(f"QCOM: the OpenCL runtime refused the program binary of kernel {name} ({st.value}, {bst.value})")
  if st.value != 0: raise CompileError(f"QCOM: clCreateProgram for kernel {name} failed ({st.value})")
  if cl.clBuildProgram(prog, 1, ctypes.byref(ctypes.c_void_p(rt.device)), rt.build_options, None, None) != 0:
    size = ctypes.c_size_t()
    cl.clGetProgramBuildInfo(prog, rt.device, 0x1183, 0, None, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    cl.clGetProgramBuildInfo(prog, rt.device, 0x1183, size.value, log, None)
    cl.clReleaseProgram(prog)
    raise CompileError(f"QCOM: the OpenCL compiler ({rt.name}) failed on kernel {name}:\n{log.value.decode(errors='replace')[-4000:]}")
  return prog

def program_binary(rt, prog) -> bytes:
  cl, size = rt.cl, ctypes.c_size_t()
  cl.check(cl.clGetProgramInfo(prog, 0x1165, ctypes.sizeof(size), ctypes.byref(size), None), "clGetProgramInfo(BINARY_SIZES)")
  out = ctypes.create_string_buffer(size.value)
  cl.check(cl.clGetProgramInfo(prog, 0x1166, ctypes.sizeof(ctypes.c_void_p), ctypes.byref(ctypes.c_void_p(ctypes.addressof(out))), None), "clGetProgramInfo(BINARIES)")
  return out.raw

class QCOMAssembler(Assembler):
  """With a vendor OpenCL runtime: the program binary its compiler builds (the disk cache keeps it, keyed by the device and
  driver version). With pocl, which caches compiled kernels itself, or without a runtime (a machine that only renders): the
  OpenCL C source, which the driver builds at load."""
  def __init__(self, renderer=None):
    super().__init__(renderer)
    from tinygrad_qcom.opencl import runtime
    try: self.rt = runtime()
    except DeviceError: self.rt = None
    self.keeps_binary = self.rt is not None and not self.rt.caches_kernels
    self.target = f"{self.rt.target}:binary" if self.keeps_binary else "opencl-c-source"
  def assemble(self, src: str) -> bytes:
    name = kernel_info(src).name
    if not self.keeps_binary: return pack("source", src, src.encode())
    prog = build(self.rt, name, src)
    try: return pack("binary", src, program_binary(self.rt, prog))
    finally: self.rt.cl.clReleaseProgram(prog)
