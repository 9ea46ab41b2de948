"""RDNA3 assembly text <-> machine-code bytes, driven by the instruction table in isa.py (encoder and disassembler)."""
from __future__ import annotations
import re, struct
from dataclasses import dataclass, field
from tinygrad_amd.isa import FORMATS, DECODE_ORDER, TABLE, BY_OPCODE, SPECIAL_REGS, INLINE_FLOATS, INV_2PI, LITERAL, NULL, Inst, inline_int, regs

class AsmError(ValueError): pass

@dataclass
class Operand:
  """One source/destination as encoded: the field value, an optional 32-bit literal, and VOP3 modifiers."""
  code: int
  literal: int | None = None
  neg: bool = False
  abs: bool = False

REG_RE = re.compile(r"^([sv])(\d+)$|^([sv])\[(\d+):(\d+)\]$")
FLOAT_INLINE = {v: k for k, v in INLINE_FLOATS.items()}
INV_2PI_VALUE = 0.15915494309189535
F32_INLINE_BITS = {struct.unpack("<I", struct.pack("<f", v))[0]: k for k, v in {**INLINE_FLOATS, INV_2PI: INV_2PI_VALUE}.items()}

def parse_reg(text: str) -> tuple[str, int, int] | None:
  """("s"/"v", first register, count) of a register operand, else None."""
  if (m := REG_RE.match(text)) is None: return None
  if m.group(1): return m.group(1), int(m.group(2)), 1
  lo, hi = int(m.group(4)), int(m.group(5))
  if hi < lo: raise AsmError(f"bad register range {text}")
  return m.group(3), lo, hi - lo + 1

def float_bits(value: float, t: str) -> int:
  return struct.unpack("<I", struct.pack("<f", value))[0] if t != "f16" else struct.unpack("<H", struct.pack("<e", value))[0]

def parse_constant(text: str, t: str) -> Operand:
  """An inline constant where the hardware has one for this value and operand type, else a 32-bit literal."""
  is_float_text = re.fullmatch(r"-?\d+\.\d*(e[-+]?\d+)?", text) is not None
  if is_float_text:
    v = float(text)   # on a 32-bit integer operand a float constant means its float32 bits, as in LLVM's syntax
    if v in FLOAT_INLINE: return Operand(FLOAT_INLINE[v])
    if v == 0.0 and not text.startswith("-"): return Operand(128)
    if t != "f64" and float_bits(v, "f32") == float_bits(INV_2PI_VALUE, "f32"): return Operand(INV_2PI)
    if regs(t) == 2: raise AsmError(f"no 32-bit literal for the 64-bit operand {text}: load it into registers")
    return Operand(LITERAL, float_bits(v, "f16" if t == "f16" else "f32"))
  try: v = int(text, 0)
  except ValueError: raise AsmError(f"cannot parse operand {text!r}") from None
  if 0 <= v <= 64: return Operand(128 + v)
  if -16 <= v <= -1: return Operand(192 - v)
  if regs(t) == 2: raise AsmError(f"no literal for the 64-bit operand {text}: load it into registers")
  if not -(1 << 31) <= v < (1 << 32): raise AsmError(f"constant {text} does not fit 32 bits")
  if t != "f16" and (code := F32_INLINE_BITS.get(v & 0xffffffff)) is not None: return Operand(code)   # as LLVM: the inline float
  return Operand(LITERAL, v & 0xffffffff)

def parse_operand(text: str, kind: str, t: str) -> Operand:
  neg = text.startswith("-") and not re.fullmatch(r"-[\d.]+(e[-+]?\d+)?|-0x[0-9a-f]+", text)
  if neg: text = text[1:]
  absolute = text.startswith("|") and text.endswith("|")
  if absolute: text = text[1:-1]
  if text in SPECIAL_REGS: op = Operand(SPECIAL_REGS[text])
  elif text == "off": op = Operand(NULL)
  elif (r := parse_reg(text)) is not None:
    file, first, count = r
    if count != regs(t): raise AsmError(f"operand {text} spans {count} registers, a {t} operand takes {regs(t)}")
    if file == "v":
      if kind not in ("v", "a", "w"): raise AsmError(f"{text}: a VGPR is not allowed here")
      op = Operand(first + (256 if kind in ("a", "w") else 0))
    else:
      if kind in ("v", "w"): raise AsmError(f"{text}: this operand must be a VGPR")
      op = Operand(first)
  else:
    if kind not in ("a", "s"): raise AsmError(f"{text}: a constant is not allowed here")
    op = parse_constant(text, t)
  op.neg, op.abs = neg, absolute
  return op

WAITCNT_FIELDS = {"vmcnt": (10, 6), "expcnt": (0, 3), "lgkmcnt": (4, 6)}
def parse_waitcnt(text: str) -> int:
  v = (0x3f << 10) | (0x3f << 4) | 0x7   # every counter at its maximum (wait for nothing), then the ones named
  for name, n in re.findall(r"(\w+)\((\d+)\)", text):
    lo, w = WAITCNT_FIELDS[name]
    v = (v & ~(((1 << w) - 1) << lo)) | (int(n) << lo)
  return v

def split_operands(text: str) -> list[str]: return [x.strip() for x in text.split(",")] if text.strip() else []

def encode(inst: Inst, args: list[str], pc: int, labels: dict[str, int], mods: dict[str, int]) -> bytes:
  """One instruction at byte offset pc: fields from its operands, packed in its format's layout, then any literal."""
  size, (plo, pw, pval), layout = FORMATS[inst.fmt]
  vals: dict[str, int] = {f: 0 for f in layout} | {"op": inst.op}
  if inst.fmt == "SMEM": vals["soffset"] = NULL
  if inst.fmt == "GLOBAL": vals["seg"] = 2
  if inst.fmt in ("VOP3", "VOP3SD"): vals.update(src0=0, src1=0, src2=0)
  if inst.fmt == "VOP3P": vals.update(opsel_hi=3, opsel_hi2=1)
  literal: int | None = None
  if len(args) != len(inst.operands): raise AsmError(f"{inst.name} takes {len(inst.operands)} operands, got {len(args)}: {', '.join(args)}")
  for i, ((fld, kind), t, a) in enumerate(zip(inst.operands, inst.types, args)):
    if t == "label":
      if a not in labels: raise AsmError(f"unknown label {a}")
      delta = (labels[a] - (pc + 4)) // 4
      vals[fld] = delta & 0xffff
      continue
    if t == "waitcnt": vals[fld] = parse_waitcnt(a); continue
    if kind == "i":
      vals[fld] = int(a, 0) & ((1 << layout[fld][1]) - 1)
      continue
    op = parse_operand(a, kind, t)
    if fld == "vcc":   # an implicit operand: only vcc_lo can be written
      if op.code != SPECIAL_REGS["vcc_lo"]: raise AsmError(f"{inst.name}: the 32-bit encoding uses vcc_lo here, got {a} (use _e64)")
      continue
    if op.literal is not None:
      if literal is not None and literal != op.literal: raise AsmError(f"{inst.name}: two different literals")
      literal = op.literal
    if op.neg or op.abs:
      if inst.fmt not in ("VOP3", "VOP3SD") or not fld.startswith("src"): raise AsmError(f"{inst.name}: modifiers need the _e64 form")
      bit = 1 << int(fld[3])
      if op.neg: vals["neg"] |= bit
      if op.abs:
        if inst.fmt == "VOP3SD": raise AsmError(f"{inst.name}: no abs modifier")
        vals["abs"] |= bit
    code = op.code
    if fld == "sbase": code >>= 1
    if fld in ("vdst", "vsrc1", "addr", "data", "data0") and code >= 256: code -= 256
    if code >= (1 << layout[fld][1]): raise AsmError(f"{inst.name}: operand {a} cannot be encoded in {fld}")
    vals[fld] = code
  for k, v in mods.items():
    # an offset the field cannot hold is an error, not its low bits (another address): DS's 16 bits unsigned, the
    # memory instructions' signed field
    if k == "offset" and inst.fmt == "DS":
      if not 0 <= v < 1 << 16: raise AsmError(f"{inst.name}: offset:{v} is outside 0..65535")
      vals["offset0"], vals["offset1"] = v & 0xff, (v >> 8) & 0xff
    elif k in vals:
      w = layout[k][1]
      if k == "offset" and not -(1 << (w - 1)) <= v < 1 << (w - 1): raise AsmError(f"{inst.name}: offset:{v} is outside {-(1 << (w - 1))}..{(1 << (w - 1)) - 1}")
      vals[k] = v & ((1 << w) - 1)
    else: raise AsmError(f"{inst.name} has no modifier {k}")
  word = pval << plo
  for f, v in vals.items():
    lo, w = layout[f]
    word |= (v & ((1 << w) - 1)) << lo
  out = word.to_bytes(size, "little")
  return out + (literal.to_bytes(4, "little") if literal is not None else b"")

def parse_line(line: str) -> tuple[str, list[str], dict[str, int]]:
  """(mnemonic, operand texts, modifiers like offset:16) of one instruction line."""
  parts = line.split(None, 1)
  name, rest = parts[0], (parts[1] if len(parts) > 1 else "")
  mods: dict[str, int] = {}
  def take(m): mods[m.group(1)] = int(m.group(2), 0); return ""
  rest = re.sub(r"\b(offset|glc|dlc):(-?\w+)", take, rest).strip()
  if name == "s_waitcnt": return name, [rest], mods
  return name, split_operands(rest), mods

def instruction_size(inst: Inst, args: list[str]) -> int:
  """The encoded size without knowing labels: the format's size plus 4 when an operand needs a literal."""
  size = FORMATS[inst.fmt][0]
  for (fld, kind), t, a in zip(inst.operands, inst.types, args):
    if kind in ("a", "s") and t not in ("label", "waitcnt") and fld != "vcc":
      try: op = parse_operand(a, kind, t)
      except AsmError: continue
      if op.literal is not None: return size + 4
  return size

def lookup(name: str) -> Inst:
  if name in TABLE: return TABLE[name]
  if name.endswith("_e32") and name[:-4] in TABLE: return TABLE[name[:-4]]
  raise AsmError(f"unknown instruction {name}")

def assemble_code(lines: list[str]) -> bytes:
  """Instruction lines (and `label:` lines) -> machine code. Two passes: label addresses, then encodings."""
  labels: dict[str, int] = {}
  parsed: list[tuple[Inst, list[str], dict[str, int]]] = []
  pc = 0
  for line in lines:
    line = line.split(";")[0].strip()
    if not line: continue
    if line.endswith(":"): labels[line[:-1]] = pc; continue
    name, args, mods = parse_line(line)
    try:
      inst = lookup(name)
      parsed.append((inst, args, mods))
      pc += instruction_size(inst, args)
    except AsmError as e: raise AsmError(f"{e} in: {line}") from None
  out, pc = bytearray(), 0
  for inst, args, mods in parsed:
    try: b = encode(inst, args, pc, labels, mods)
    except AsmError as e: raise AsmError(f"{e} in: {inst.name} {', '.join(args)}") from None
    out += b
    pc += len(b)
  return bytes(out)

# ***** disassembler *****

@dataclass
class Decoded:
  """One decoded instruction: table entry, field values, the literal if any, its byte offset and size."""
  inst: Inst
  fields: dict[str, int]
  literal: int | None
  pc: int
  size: int

def _field(word: int, lo: int, w: int) -> int: return (word >> lo) & ((1 << w) - 1)

def decode_one(code: bytes, pc: int) -> Decoded:
  if pc + 4 > len(code): raise AsmError(f"truncated instruction at byte {pc}")
  w32 = int.from_bytes(code[pc:pc + 4], "little")
  for fmt in DECODE_ORDER:
    size, (plo, pw, pval), layout = FORMATS[fmt]
    if _field(w32, plo, pw) != pval: continue
    if pc + size > len(code): raise AsmError(f"truncated {fmt} instruction at byte {pc}")
    word = int.from_bytes(code[pc:pc + size], "little")
    op = _field(word, *layout["op"])
    inst = BY_OPCODE.get((fmt, op))
    if inst is None: raise AsmError(f"unknown {fmt} opcode {op:#x} at byte {pc} (word {w32:#010x})")
    lay = FORMATS[inst.fmt][2]
    fields = {f: _field(word, lo, w) for f, (lo, w) in lay.items()}
    literal = None
    if any(fields.get(f) == LITERAL for f, k in inst.operands if k in ("a", "s")):
      if pc + size + 4 > len(code): raise AsmError(f"truncated literal at byte {pc + size}")
      literal = int.from_bytes(code[pc + size:pc + size + 4], "little")
      size += 4
    return Decoded(inst, fields, literal, pc, size)
  raise AsmError(f"no RDNA3 encoding matches word {w32:#010x} at byte {pc}")

def decode(code: bytes) -> list[Decoded]:
  out, pc = [], 0
  while pc < len(code):
    d = decode_one(code, pc)
    out.append(d)
    pc += d.size
  return out

NAMES = {v: k for k, v in SPECIAL_REGS.items()}
def operand_text(code: int, t: str, literal: int | None, kind: str) -> str:
  n = regs(t)
  if kind == "v" or code >= 256:
    r = code - 256 if code >= 256 else code
    return f"v{r}" if n == 1 else f"v[{r}:{r + n - 1}]"
  if code < 106: return f"s{code}" if n == 1 else f"s[{code}:{code + n - 1}]"
  if code in NAMES: return NAMES[code]
  if (i := inline_int(code)) is not None: return str(i)
  if code in INLINE_FLOATS: return str(INLINE_FLOATS[code])
  if code == INV_2PI: return "0.15915494"
  if code == LITERAL: return f"0x{literal:x}"
  return f"?{code}"

def disassemble_one(d: Decoded) -> str:
  inst, f = d.inst, d.fields
  if inst.fmt == "SOPP":
    t = inst.types[0] if inst.types else ""
    if t == "label": return f"{inst.name} {struct.unpack('<h', f['simm16'].to_bytes(2, 'little'))[0]}"
    if t == "waitcnt":
      v = f["simm16"]
      parts = [f"{n}({_field(v, lo, w)})" for n, (lo, w) in WAITCNT_FIELDS.items() if _field(v, lo, w) != (1 << w) - 1]
      return f"s_waitcnt {' '.join(parts) or '0'}"
    return inst.name if not inst.types else f"{inst.name} {f['simm16']}"
  args = []
  for i, ((fld, kind), t) in enumerate(zip(inst.operands, inst.types)):
    if fld == "vcc": args.append("vcc_lo"); continue
    v = f[fld]
    if fld == "sbase": v <<= 1
    if kind == "i": args.append(f"{v:#x}" if inst.fmt != "SOPK" else str(v)); continue
    s = operand_text(v, t, d.literal, kind)
    if fld.startswith("src") and inst.fmt in ("VOP3", "VOP3SD"):
      bit = 1 << int(fld[3])
      if f.get("abs", 0) & bit: s = f"|{s}|"
      if f.get("neg", 0) & bit: s = f"-{s}"
    if inst.fmt == "GLOBAL" and fld == "saddr" and v == NULL: s = "off"
    args.append(s)
  text = f"{inst.name} {', '.join(args)}"
  if inst.fmt == "GLOBAL" and (off := f["offset"]): text += f" offset:{off - (1 << 13) if off >> 12 else off}"
  if inst.fmt == "DS" and (off := f["offset0"] | f["offset1"] << 8): text += f" offset:{off}"
  return text

def disassemble(code: bytes) -> list[str]: return [disassemble_one(d) for d in decode(code)]
