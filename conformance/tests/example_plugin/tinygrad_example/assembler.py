"""EXAMPLE's assembler: C -> a shared object by the system's C compiler, in tinycore's checksummed binary container."""
import os, subprocess, tempfile
from tinycore.runtime.binary import pack_binary
from tinycore.runtime.device import Assembler
from tinycore.runtime.errors import CompileError

MAGIC = b"EXMP2\n"
# IEEE semantics (no fused multiply-add, no fast-math) and signed overflow that wraps, as tinycore defines them
FLAGS = ["-shared", "-fPIC", "-O1", "-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-x", "c", "-"]

class ExampleAssembler(Assembler):
  target = "example-c1:cc " + " ".join(FLAGS)   # part of the disk-cache key: what decides the bytes (bump it when they change)
  def assemble(self, src: str) -> bytes:
    name, *var_types = src.split("\n", 1)[0].split()[2:]   # "// tinygrad-example NAME VAR_TYPES..."
    with tempfile.TemporaryDirectory() as d:
      proc = subprocess.run(["cc", *FLAGS, "-o", os.path.join(d, "k.so")], input=src.encode(), capture_output=True)
      if proc.returncode != 0: raise CompileError(f"EXAMPLE: cc rejected kernel {name}:\n{proc.stderr.decode()[-3000:]}")
      with open(os.path.join(d, "k.so"), "rb") as f: return pack_binary(MAGIC, {"fn": name, "vars": var_types}, f.read())
