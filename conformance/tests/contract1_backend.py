"""A backend written for plugin contract 1.0, tinycore's first: its driver factory takes no instance index. The core adapts
it (one instance) with a deprecation warning, and it passes the suite; registered through a test entry point."""
from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
from tinycore.runtime.device import Assembler
from tinycore.runtime.plugin import BackendSpec, hookimpl

class Contract1Renderer(PythonRenderer): device = "CONTRACT1"

class Contract1Driver(PythonDriver):
  def __init__(self):   # contract 1 called driver() with no argument: the one device
    super().__init__()
    self.device = "CONTRACT1"

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec("CONTRACT1", (1, 0), Contract1Renderer, Assembler, Contract1Driver, lambda drv: HostAllocator("CONTRACT1"),
                      priority=-50, capabilities={"reduce_scale_elements": 1 << 18})]   # an interpreter, as PYTHON declares
