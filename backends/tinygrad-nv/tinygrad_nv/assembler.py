"""NV assembler: PTX -> a small container of the PTX and, where ptxas is found, the cubin it assembles for the target arch."""
from __future__ import annotations
import os, re, shutil, subprocess, tempfile
from pathlib import Path
from tinycore.runtime.device import Assembler
from tinycore.runtime.binary import pack_binary, unpack_binary, disassemble_with
from tinycore.runtime.errors import CompileError

# The binary: tinycore's container (runtime/binary.py) with header {"arch", "ptx": its byte length} and payload the PTX text
# then the cubin. The CUDA driver loads the cubin when it was built for the GPU's arch, else JIT-compiles the PTX; the
# emulator runs the PTX.
MAGIC = b"TCNV2\n"

def find_ptxas() -> str | None:
  """NV_PTXAS, else the ptxas of NVIDIA's nvidia-cuda-nvcc wheel (the tinygrad-nv[ptxas] extra), else ptxas on PATH."""
  if (env := os.environ.get("NV_PTXAS")): return env
  try:
    import nvidia.cuda_nvcc  # type: ignore[import-not-found]
    for root in nvidia.cuda_nvcc.__path__:
      if (p := Path(root) / "bin" / "ptxas").exists(): return str(p)
  except ImportError: pass
  return shutil.which("ptxas")

def kernel_name(ptx: str) -> str:
  return m.group(1) if (m := re.search(r"\.entry\s+(\w+)", ptx)) else "?"

def run_ptxas(ptx: str, arch: str, ptxas: str, *flags: str) -> tuple[bytes, str]:
  """(cubin, ptxas's messages); a CompileError naming the backend, the kernel and ptxas's message when it refuses."""
  with tempfile.TemporaryDirectory(prefix="tinycore-nv-") as d:
    src, out = Path(d) / "kernel.ptx", Path(d) / "kernel.cubin"
    src.write_text(ptx)
    try: r = subprocess.run([ptxas, f"-arch={arch}", *flags, "-o", str(out), str(src)], capture_output=True, text=True, timeout=300)
    except OSError as e: raise CompileError(f"NV: cannot run ptxas ({ptxas}): {e}") from e
    if r.returncode != 0: raise CompileError(f"NV: ptxas rejected kernel {kernel_name(ptx)} for {arch}:\n{(r.stderr or r.stdout).strip()}")
    return out.read_bytes(), r.stderr + r.stdout

def pack(arch: str, ptx: bytes, cubin: bytes) -> bytes: return pack_binary(MAGIC, {"arch": arch, "ptx": len(ptx)}, ptx + cubin)

def unpack(binary: bytes) -> tuple[str, str, bytes]:
  """(arch, PTX text, cubin or b""); CompileError naming NV for anything that is not a whole container."""
  header, payload = unpack_binary(MAGIC, binary, "NV")
  try: return str(header["arch"]), payload[:int(header["ptx"])].decode(), payload[int(header["ptx"]):]
  except (KeyError, ValueError, TypeError) as e: raise CompileError(f"NV: corrupt kernel binary (header {header}: {e})") from e

class PTXAssembler(Assembler):
  def __init__(self, renderer=None):
    super().__init__(renderer)
    self.arch = getattr(renderer, "arch", "sm_90")
    self.ptxas = find_ptxas()
    self.target = f"{self.arch}+{'cubin' if self.ptxas else 'ptx'}:{MAGIC.strip().decode()}"   # the disk cache keeps PTX-only binaries and older formats apart
  def assemble(self, src: str) -> bytes:
    cubin = run_ptxas(src, self.arch, self.ptxas)[0] if self.ptxas else b""
    return pack(self.arch, src.encode(), cubin)
  def disassemble(self, binary: bytes) -> str | None:
    """The cubin's SASS where CUDA's cuobjdump is installed (the PTX is the rendered source); None without either."""
    cubin = unpack(binary)[2]
    return disassemble_with(("cuobjdump",), ("-sass",), cubin) if cubin else None
