"""EXAMPLE's driver: loads a kernel's shared object with ctypes and calls it on the allocator's numpy buffers."""
import ctypes, os, tempfile, time
from tinycore.runtime.binary import unpack_binary
from tinycore.runtime.device import Driver
from tinycore.runtime.errors import CompileError
from tinycore.runtime.plugin import instance_name
from tinygrad_example.assembler import MAGIC

class ExampleProgram:
  def __init__(self, lib: ctypes.CDLL, fn, var_types: list):
    self.lib, self.fn, self.var_types = lib, fn, var_types   # the library stays loaded while the program lives
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals: tuple[int, ...] = (), wait: bool = False):
    st = time.perf_counter()
    self.fn(*[ctypes.c_void_p(b.ctypes.data) for b in bufs], *[t(v) for t, v in zip(self.var_types, vals)])
    return time.perf_counter() - st if wait else None   # one call runs the whole kernel (global_dims = 0: a loop nest)

class ExampleDriver(Driver):
  # a real driver opens GPU number `index` here; the name ("EXAMPLE", "EXAMPLE:1", ...) says which one in every error
  def __init__(self, index: int = 0): super().__init__(instance_name("EXAMPLE", index))
  def load(self, name: str, binary: bytes, spec=None) -> ExampleProgram:
    header, so = unpack_binary(MAGIC, binary, "EXAMPLE")   # a binary from elsewhere, or corrupted, is a CompileError
    fd, path = tempfile.mkstemp(suffix=".so")
    try:
      with os.fdopen(fd, "wb") as f: f.write(so)
      lib = ctypes.CDLL(path)
    except OSError as e: raise CompileError(f"EXAMPLE: cannot load kernel {name!r}: {e}") from e
    finally: os.unlink(path)
    return ExampleProgram(lib, getattr(lib, header["fn"]), [{"int": ctypes.c_int32, "long": ctypes.c_int64}[t] for t in header["vars"]])
  def synchronize(self) -> None: pass   # programs run to completion when called
