"""tinygrad-nv: the NV backend (PTX through ptxas and the CUDA driver, or the PTX emulator with NV_EMULATE=1), registered
through the tinycore.backends entry point."""
from tinycore.helpers import getenv
from tinycore.runtime.plugin import BackendSpec, hookimpl, virtual_instances

def _renderer():
  from tinygrad_nv.renderer import PTXRenderer
  return PTXRenderer()
def _assembler(renderer):
  from tinygrad_nv.assembler import PTXAssembler
  return PTXAssembler(renderer)
def _driver(index: int):
  from tinygrad_nv.driver import NVDriver
  return NVDriver(index)
def _allocator(driver):
  from tinygrad_nv.allocator import NVAllocator
  return NVAllocator(driver)
def _instances() -> int:
  from tinygrad_nv.driver import gpu_count
  return gpu_count()

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  emulate = bool(getenv("NV_EMULATE", 0))
  return [BackendSpec("NV", (2, 6), _renderer, _assembler, _driver, _allocator, priority=-10 if emulate else 2,
                      instances=virtual_instances if emulate else _instances,
                      capabilities={"dtypes": "all", "index_bits": 64, "arch": "NV_ARCH (default sm_90)",
                                    "runs on": "the PTX emulator (NV_EMULATE=1)" if emulate else "an NVIDIA GPU through libcuda.so.1",
                                    "assembler": "ptxas (tinygrad-nv[ptxas], or on PATH) -> cubin; else PTX for the driver's JIT",
                                    # the emulator runs each thread's loop trips one by one, in Python: smaller random programs
                                    **({"fuzz_elements": 20_000} if emulate else {})})]
