"""tinygrad-cpu: the CPU backend (LLVM IR, or C with CPU_RENDERER=C, compiled in process), registered through the tinycore.backends entry point."""
from __future__ import annotations
import os
from tinycore.runtime.plugin import BackendSpec, hookimpl, virtual_instances

def renderer_factory():
  from tinygrad_cpu.renderer import LLVMRenderer, CRenderer
  kind = os.environ.get("CPU_RENDERER", "LLVM").upper()
  if kind not in ("LLVM", "C"): raise ValueError(f"CPU_RENDERER={kind!r}: use LLVM (the default) or C")
  return CRenderer() if kind == "C" else LLVMRenderer()

def assembler_factory(renderer):
  from tinygrad_cpu.renderer import CRenderer
  from tinygrad_cpu.assembler import LLVMAssembler, ClangAssembler
  return ClangAssembler(renderer) if isinstance(renderer, CRenderer) else LLVMAssembler(renderer)

def driver_factory(index: int):
  from tinygrad_cpu.driver import CPUDriver
  return CPUDriver(index)

def allocator_factory(driver):
  from tinygrad_cpu.allocator import CPUAllocator
  return CPUAllocator(driver)

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec("CPU", (2, 3), renderer_factory, assembler_factory, driver_factory, allocator_factory, priority=100, instances=virtual_instances,
                      capabilities={"dtypes": "all", "renderers": "LLVM (default), C (CPU_RENDERER=C, needs clang or gcc)",
                                    "threads": "CPU_THREADS (default: every core)", "instances": "virtual: CPU:0, CPU:1, ... as many as asked", "index_bits": 64})]
