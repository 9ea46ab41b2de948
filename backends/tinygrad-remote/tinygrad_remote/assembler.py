"""REMOTE's assembler: the source itself; the server assembles it with its backend's assembler and caches the result there."""
from tinycore.runtime.device import Assembler

class RemoteAssembler(Assembler):
  target = "remote-source"
