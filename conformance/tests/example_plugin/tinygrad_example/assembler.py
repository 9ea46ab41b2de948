"""EXAMPLE's assembler: kernel text to a compressed binary with a magic header (deterministic: the disk cache keys on it)."""
import zlib
from tinycore.runtime.device import Assembler

MAGIC = b"EXMP1\n"

class ExampleAssembler(Assembler):
  target = "example-v1"   # part of the disk-cache key: bump it when the binary format changes
  def assemble(self, src: str) -> bytes: return MAGIC + zlib.compress(src.encode(), 9)
