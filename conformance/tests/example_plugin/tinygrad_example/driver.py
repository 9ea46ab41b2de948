"""EXAMPLE's driver: checks and unpacks a binary into a program (the core's PYTHON interpreter runs it)."""
import zlib
from tinycore.runtime.builtin import PythonProgram
from tinycore.runtime.device import Driver
from tinycore.runtime.errors import CompileError
from tinycore.runtime.plugin import instance_name
from tinygrad_example.assembler import MAGIC

class ExampleDriver(Driver):
  # a real driver opens GPU number `index` here; the name ("EXAMPLE", "EXAMPLE:1", ...) says which one in every error
  def __init__(self, index: int = 0): super().__init__(instance_name("EXAMPLE", index))
  def load(self, name: str, binary: bytes, spec=None) -> PythonProgram:
    try:
      if not binary.startswith(MAGIC): raise ValueError("bad magic header")
      return PythonProgram(name, zlib.decompress(binary[len(MAGIC):]).decode())
    except Exception as e:  # errors name this backend, whatever went wrong underneath
      raise CompileError(f"EXAMPLE: cannot load kernel {name!r}: {type(e).__name__}: {e}") from e
  def synchronize(self) -> None: pass   # programs run to completion when called
