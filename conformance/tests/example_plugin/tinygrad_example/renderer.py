"""EXAMPLE's renderer: the core's PYTHON kernel text, for a target that declares no float64 and no bfloat16."""
from tinycore.dtype import dtypes
from tinycore.runtime.builtin import PythonRenderer

class ExampleRenderer(PythonRenderer):
  device = "EXAMPLE"
  # what the target computes; anything else is refused with UnsupportedError before a kernel is built
  supported_dtypes = PythonRenderer.supported_dtypes - {dtypes.float64, dtypes.bfloat16}
  global_dims = 1        # one global id per output element
