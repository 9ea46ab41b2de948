"""The kernel binary container an assembler may wrap its output in: magic, one JSON header line, sha256 of the payload, the
payload; and a disassembler run on bytes."""
from __future__ import annotations
import hashlib, json, os, shutil, subprocess, tempfile
from tinycore.runtime.errors import CompileError

def pack_binary(magic: bytes, header: dict, payload: bytes) -> bytes:
  """magic ends with a newline and names the backend and format version; the header is what the driver needs to load the payload."""
  return magic + json.dumps(header, sort_keys=True).encode() + b"\n" + hashlib.sha256(payload).digest() + payload

def unpack_binary(magic: bytes, binary: bytes, backend: str) -> tuple[dict, bytes]:
  """(header, payload) of a container pack_binary made with this magic; anything else raises CompileError naming the
  backend (a binary from another backend, another format version, or truncated/corrupted bytes)."""
  try:
    if not binary.startswith(magic): raise ValueError(f"bad magic (expected {magic!r})")
    end = binary.index(b"\n", len(magic))
    header = json.loads(binary[len(magic):end])
    digest, payload = binary[end+1:end+33], binary[end+33:]
    if hashlib.sha256(payload).digest() != digest: raise ValueError("checksum mismatch")
    if not isinstance(header, dict): raise ValueError("the header is not a JSON object")
    return header, payload
  except Exception as e:
    raise CompileError(f"{backend}: corrupt kernel binary ({type(e).__name__}: {e}); it was not produced by this backend's assembler") from e

def disassemble_with(tools: tuple[str, ...], args: tuple[str, ...], data: bytes) -> str | None:
  """What the first of `tools` found on PATH prints for `data` (written to a file named after `args`); None when none is
  installed or it refuses the bytes. Assemblers' `disassemble` uses it for vendor disassemblers (llvm-objdump, cuobjdump)."""
  if (tool := next((p for t in tools if (p := shutil.which(t))), None)) is None: return None
  with tempfile.TemporaryDirectory(prefix="tinycore-disasm-") as d:
    with open(path := os.path.join(d, "kernel"), "wb") as f: f.write(data)
    r = subprocess.run([tool, *args, path], capture_output=True, text=True)
  return r.stdout.replace(path, "kernel").strip() + "\n" if r.returncode == 0 and r.stdout.strip() else None
