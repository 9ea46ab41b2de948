"""tinygrad-webgpu: the WEBGPU backend (WGSL through wgpu-native), registered through the tinycore.backends entry point."""
from tinycore.runtime.plugin import BackendSpec, hookimpl
from tinygrad_webgpu.export import export, ExportError  # noqa: F401  (binding the function also keeps the submodule from shadowing it)

def _renderer():
  from tinygrad_webgpu.renderer import WGSLRenderer
  return WGSLRenderer()
def _assembler(renderer):
  from tinygrad_webgpu.assembler import WGSLAssembler
  return WGSLAssembler(renderer)
def _driver(index: int):
  from tinygrad_webgpu.driver import WebGPUDriver
  return WebGPUDriver(index)
def _allocator(driver):
  from tinygrad_webgpu.allocator import WebGPUAllocator
  return WebGPUAllocator(driver)

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec("WEBGPU", (2, 3), _renderer, _assembler, _driver, _allocator, priority=1,
                      capabilities={"dtypes": "bool int8 uint8 int16 uint16 int32 uint32 float16 bfloat16 float32", "index_bits": 32, "export": "browser (navigator.gpu)"})]
