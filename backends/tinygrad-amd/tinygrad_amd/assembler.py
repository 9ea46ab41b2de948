"""AMD assembler: the renderer's RDNA3 assembly -> machine code (our encoder, no LLVM) -> an HSA code object (ELF)."""
from tinycore.runtime.device import Assembler
from tinycore.runtime.errors import CompileError
from tinygrad_amd.asm import assemble_code, decode, disassemble_one, AsmError
from tinygrad_amd.codeobject import KernelInfo, build, parse

def parse_header(src: str) -> tuple[dict[str, str], list[str]]:
  """The `.key value` directives the renderer writes first, and the instruction lines after them."""
  head, body = {}, []
  for line in src.splitlines():
    s = line.strip()
    if s.startswith("."):
      k, _, v = s[1:].partition(" ")
      head[k] = v.strip()
    else: body.append(line)
  return head, body

class RDNA3Assembler(Assembler):
  target = "gfx1100-wave32-v1"
  def assemble(self, src: str) -> bytes:
    head, body = parse_header(src)
    try:
      code = assemble_code(body)
      info = KernelInfo(head["kernel"], int(head["vgprs"]), int(head["sgprs"]), int(head.get("lds", 0)), 8 * int(head["args"]) + 4 * int(head["vars"]),
                        int(head["args"]), int(head["vars"]))
    except (AsmError, KeyError, ValueError) as e: raise CompileError(f"AMD: cannot assemble kernel: {type(e).__name__}: {e}") from e
    return build(info, code)
  def disassemble(self, binary: bytes) -> str | None:
    """Our own disassembler's text of the code object's kernel, one instruction a line after its byte offset."""
    return "".join(f"{d.pc:5x}: {disassemble_one(d)}\n" for d in decode(parse(binary).code))
