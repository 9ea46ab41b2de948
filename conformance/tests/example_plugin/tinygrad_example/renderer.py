"""EXAMPLE's renderer: C on tinycore's C-style base, one function per kernel, every dtype (the core emulates half and bfloat16)."""
from tinycore.dtype import dtypes, ALL_DTYPES
from tinycore.uop import Ops
from tinycore.renderer.cstyle import CStyleRenderer, CStyleKernel

class ExampleRenderer(CStyleRenderer):
  device = "EXAMPLE"
  # what the target computes; anything else is refused with UnsupportedError before a kernel is built
  supported_dtypes = frozenset(ALL_DTYPES)
  # C computes every one of them but the 16-bit floats: the core does those in float and holds them as their bits (uint16)
  alu_dtypes = frozenset(ALL_DTYPES) - {dtypes.float16, dtypes.bfloat16}
  def render_kernel(self, k: CStyleKernel) -> str:
    # the first line tells the assembler the function's name and the types of its launch variables, in order
    header = " ".join(["// tinygrad-example", k.name] + [v.dtype.name for v in k.uops if v.op is Ops.DEFINE_VAR])
    return header + "\n" + super().render_kernel(k)
