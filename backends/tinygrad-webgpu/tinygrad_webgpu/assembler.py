"""WEBGPU assembler: WGSL is what the device eats, so assembling is encoding the text (the device validates it at load)."""
from tinycore.runtime.device import Assembler

class WGSLAssembler(Assembler):
  target = "wgsl"
  def assemble(self, src: str) -> bytes: return src.encode()
