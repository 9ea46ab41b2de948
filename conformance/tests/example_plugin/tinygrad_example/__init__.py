"""The EXAMPLE backend's registration: one hook that describes the device, its four roles and its capabilities."""
from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl
from tinygrad_example.renderer import ExampleRenderer
from tinygrad_example.assembler import ExampleAssembler
from tinygrad_example.driver import ExampleDriver
from tinygrad_example.allocator import ExampleAllocator

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec(
    name="EXAMPLE", contract_version=CONTRACT_VERSION,
    renderer=ExampleRenderer,                          # called with no arguments, never opens the device
    assembler=ExampleAssembler,                        # called with the renderer
    driver=ExampleDriver,                              # called with the instance index: opens the device
    allocator=lambda driver: ExampleAllocator("EXAMPLE"),
    priority=-10,                                      # never the default device over a real one
    # instances=...,                                   # how many EXAMPLE:i this machine has (default: one)
    capabilities={"inf_nan": True, "denormals": True, "max_alloc_bytes": 1 << 30})]
