"""The EXAMPLE backend's registration: one hook that describes the device, its four roles and its capabilities."""
from tinycore.runtime.plugin import BackendSpec, hookimpl

# the role factories import their modules when called: `python -m tinycore devices` imports every plugin, and a
# plugin's import should cost nothing until its device is used
def renderer(): from tinygrad_example.renderer import ExampleRenderer; return ExampleRenderer()
def assembler(renderer): from tinygrad_example.device import ExampleAssembler; return ExampleAssembler(renderer)
def driver(index: int): from tinygrad_example.device import ExampleDriver; return ExampleDriver(index)
def allocator(driver): from tinygrad_example.device import ExampleAllocator; return ExampleAllocator(driver.device)

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec(
    name="EXAMPLE",
    contract_version=(2, 3),                           # the contract it was written for, stated literally (section 11)
    renderer=renderer,                                 # called with no arguments, never opens the device
    assembler=assembler,                               # called with the renderer
    driver=driver,                                     # called with the instance index: opens the device
    allocator=allocator,                               # called with the driver, named for its instance ("EXAMPLE:1")
    priority=-10,                                      # never the default device over a real one
    capabilities={"inf_nan": True, "denormals": True, "max_alloc_bytes": 1 << 30})]
