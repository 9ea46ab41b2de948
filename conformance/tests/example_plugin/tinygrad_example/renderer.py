"""EXAMPLE's renderer: C on tinycore's C-style base, one function per kernel, every dtype (the core emulates half and bfloat16)."""
from tinycore.dtype import dtypes, ALL_DTYPES
from tinycore.uop import Ops
from tinycore.renderer.cstyle import CStyleRenderer, CStyleKernel

class ExampleRenderer(CStyleRenderer):
  device = "EXAMPLE"
  supported_dtypes = frozenset(ALL_DTYPES)   # what kernels may use: any other dtype is refused with UnsupportedError
  # C computes every one of them but the 16-bit floats: the core does those in float and holds them as their bits (uint16)
  alu_dtypes = supported_dtypes - {dtypes.float16, dtypes.bfloat16}
  def render_kernel(self, k: CStyleKernel) -> str:   # a first line telling the assembler the function's name and variables' types
    header = " ".join(["// tinygrad-example", k.name] + [v.dtype.name for v in k.uops if v.op is Ops.DEFINE_VAR])
    return header + "\n" + super().render_kernel(k)
