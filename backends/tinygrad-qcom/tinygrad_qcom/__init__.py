"""tinygrad-qcom: the QCOM backend (OpenCL C for Adreno, run through KGSL or any OpenCL runtime), registered through the tinycore.backends entry point."""
from tinycore.runtime.plugin import BackendSpec, hookimpl

def _renderer():
  from tinygrad_qcom.renderer import OpenCLRenderer
  from tinygrad_qcom.opencl import device_info
  return OpenCLRenderer.for_device(device_info())   # reads the device's description (no context); Adreno's without a runtime
def _assembler(renderer):
  from tinygrad_qcom.assembler import QCOMAssembler
  return QCOMAssembler(renderer)
def _driver(index: int):
  from tinygrad_qcom.driver import QCOMDriver
  return QCOMDriver(index)
def _allocator(driver):
  from tinygrad_qcom.allocator import QCOMAllocator
  return QCOMAllocator(driver)

def _instances() -> int:
  """One device where an OpenCL runtime lists one (or KGSL is here), none elsewhere; no context is created."""
  from tinygrad_qcom import kgsl, opencl
  return int(kgsl.available() or opencl.device_info() is not None)

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec("QCOM", (2, 3), _renderer, _assembler, _driver, _allocator, priority=5, instances=_instances,
                      capabilities={"dtypes": "bool, 8-64 bit ints, half (cl_khr_fp16, else float math rounded to half), float, double with cl_khr_fp64",
                                    "images": "QCOM_IMAGE=1: float/half tensors a kernel only reads or writes as image2d_t",
                                    "runtime": "KGSL (/dev/kgsl-3d0) or any OpenCL runtime through libOpenCL.so.1 (QCOM_OPENCL=1)"})]
