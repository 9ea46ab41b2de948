"""EXAMPLE's assembler, driver and allocator: C compiled by the system's C compiler, loaded with ctypes, run on numpy arrays."""
import ctypes, os, subprocess, tempfile, time
import numpy as np
from tinycore.runtime.binary import pack_binary, unpack_binary
from tinycore.runtime.device import Assembler, Driver, LRUAllocator
from tinycore.runtime.errors import CompileError
from tinycore.runtime.plugin import instance_name

MAGIC = b"EXMP2\n"
# IEEE semantics (no fused multiply-add, no fast-math) and signed overflow that wraps, as tinycore defines them
FLAGS = ["-shared", "-fPIC", "-O1", "-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-x", "c", "-"]

class ExampleAssembler(Assembler):
  target = "example-c1:cc " + " ".join(FLAGS)   # part of the disk-cache key: what decides the bytes (bump it when they change)
  def assemble(self, src: str) -> bytes:
    name, *var_types = src.split("\n", 1)[0].split()[2:]   # the renderer's first line: "// tinygrad-example NAME VAR_TYPES..."
    with tempfile.TemporaryDirectory() as d:
      proc = subprocess.run(["cc", *FLAGS, "-o", os.path.join(d, "k.so")], input=src.encode(), capture_output=True)
      if proc.returncode != 0: raise CompileError(f"EXAMPLE: cc rejected kernel {name}:\n{proc.stderr.decode()[-3000:]}")
      with open(os.path.join(d, "k.so"), "rb") as f: return pack_binary(MAGIC, {"fn": name, "vars": var_types}, f.read())

class ExampleDriver(Driver):
  # a real driver opens GPU number `index` here; the name ("EXAMPLE", "EXAMPLE:1", ...) says which one in every error
  def __init__(self, index: int = 0): super().__init__(instance_name("EXAMPLE", index))
  def load(self, name: str, binary: bytes, spec=None):
    header, so = unpack_binary(MAGIC, binary, "EXAMPLE")   # a binary from elsewhere, or corrupted, is a CompileError
    with tempfile.NamedTemporaryFile(suffix=".so") as f:   # dlopen needs a file; the library stays loaded once it is deleted
      f.write(so); f.flush()
      try: fn = getattr(ctypes.CDLL(f.name), header["fn"])   # the function holds its library
      except OSError as e: raise CompileError(f"EXAMPLE: cannot load kernel {name!r}: {e}") from e
    var_types = [{"int": ctypes.c_int32, "long": ctypes.c_int64}[t] for t in header["vars"]]
    def program(*bufs, global_size=(1, 1, 1), local_size=None, vals: tuple[int, ...] = (), wait: bool = False):
      st = time.perf_counter()
      fn(*[ctypes.c_void_p(b.ctypes.data) for b in bufs], *[t(v) for t, v in zip(var_types, vals)])
      return time.perf_counter() - st if wait else None   # one call runs the whole kernel (global_dims = 0: a loop nest)
    return program
  def synchronize(self) -> None: pass   # programs run to completion when called

class ExampleAllocator(LRUAllocator):
  supports_offset = True   # views at offsets are numpy slices of their buffer
  def _alloc(self, size: int, options) -> np.ndarray: return np.zeros(size, np.uint8)
  def _free(self, buf: np.ndarray, size: int, options) -> None: pass   # numpy frees it with the last reference
  def _copyin(self, dest: np.ndarray, src: memoryview) -> None: dest[:] = np.frombuffer(src, np.uint8)
  def _copyout(self, dest: memoryview, src: np.ndarray) -> None: np.frombuffer(dest, np.uint8)[:] = src
  def _offset(self, buf: np.ndarray, size: int, offset: int) -> np.ndarray: return buf[offset:offset + size]
