"""tinygrad-amd: the AMD backend (RDNA3 machine code from our own assembler; the RDNA3 emulator with AMD_EMULATE=1, else
KFD), registered through the tinycore.backends entry point."""
import os
from tinycore.runtime.plugin import BackendSpec, hookimpl

def _renderer():
  from tinygrad_amd.renderer import RDNA3Renderer
  return RDNA3Renderer()
def _assembler(renderer):
  from tinygrad_amd.assembler import RDNA3Assembler
  return RDNA3Assembler(renderer)
def _driver(index: int):
  from tinygrad_amd.driver import AMDDriver
  return AMDDriver(index)
def _allocator(driver):
  if driver.emulated:
    from tinygrad_amd.allocator import AMDEmulatedAllocator
    return AMDEmulatedAllocator(driver)
  from tinygrad_amd.allocator import KFDAllocator
  return KFDAllocator(driver)
def _instances() -> int:
  if os.environ.get("AMD_EMULATE", "") not in ("", "0"): return 1
  from tinygrad_amd.kfd import gpu_count
  return gpu_count()

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec("AMD", (2, 6), _renderer, _assembler, _driver, _allocator, priority=5, instances=_instances,
                      capabilities={"dtypes": "all", "index_bits": 32, "isa": "gfx1100 (RDNA3, wave32)",
                                    "emulator": "AMD_EMULATE=1",
                                    # the emulator runs each wave's loop trips one by one, in Python: smaller random programs
                                    **({"fuzz_elements": 10_000} if os.environ.get("AMD_EMULATE", "") not in ("", "0") else {})})]
