"""Cross-checks against LLVM (tests and CI only, never at run time): our encodings vs `llvm-mc -show-encoding`, and our
disassembly of code objects vs `llvm-objdump`. `python -m tinygrad_amd.llvm_check DIR` checks every code object in DIR
(the disk cache of a conformance run)."""
from __future__ import annotations
import os, re, shutil, subprocess, sys
from tinygrad_amd.isa import TABLE, Inst, regs
from tinygrad_amd.asm import assemble_code, disassemble

def find_tool(name: str) -> str | None:
  return next((p for p in (shutil.which(f"{name}-19"), f"/usr/lib/llvm-19/bin/{name}") if p and os.path.exists(p)), None)

# ***** sample lines: every instruction form with registers, inline constants, literals and modifiers *****

def _reg(file: str, n: int, t: str) -> str:
  k = regs(t)
  return f"{file}{n}" if k == 1 else f"{file}[{n}:{n + k - 1}]"

def _source_variants(kind: str, t: str, fld: str) -> list[str]:
  vs = [_reg("v", 7, t)] if kind == "a" else [_reg("s", 10, t)]
  if kind == "a": vs.append(_reg("s", 12, t))
  vs += ["0", "-3", "64"]
  if regs(t) == 1 or t == "f64": vs += ["1.0", "-0.5"] + (["0.15915494"] if t != "f64" else [])
  if regs(t) == 1 and t != "f16" and fld in ("src0", "ssrc0"): vs += ["0x3f8ccccd" if t[0] == "f" else "0x12345", "0x40000000"]
  return vs

def sample_lines(inst: Inst) -> list[str]:
  """Assembly lines exercising inst: all-register operands, then each source with other operand kinds, then modifiers."""
  if inst.fmt == "SOPP":
    t = inst.types[0] if inst.types else ""
    return {"label": [f"{inst.name} 0"], "waitcnt": [f"{inst.name} vmcnt(0)", f"{inst.name} lgkmcnt(0)", f"{inst.name} vmcnt(1) lgkmcnt(2)"],
            "i32": [f"{inst.name} 3"], "": [inst.name]}[t]
  base: list[str] = []
  for i, ((fld, kind), t) in enumerate(zip(inst.operands, inst.types)):
    if kind == "i": base.append("0x10" if inst.fmt == "SMEM" else "5")
    elif kind == "m": base.append("vcc_lo")
    elif fld == "sbase": base.append("s[2:3]")
    elif fld == "saddr": base.append("s[4:5]")
    elif kind == "v": base.append(_reg("v", 1 + 3 * i, t))
    elif kind == "s": base.append(_reg("s", 4 * i + 8, t) if regs(t) > 1 else f"s{i + 5}")
    else: base.append(_reg("v", 1 + 3 * i, t))
  lines = [f"{inst.name} {', '.join(base)}"]
  for i, ((fld, kind), t) in enumerate(zip(inst.operands, inst.types)):
    if kind not in ("a", "s") or fld in ("sdst", "sdata", "sbase", "saddr"): continue
    if kind == "s" and fld.startswith("sdst"): continue
    if inst.fmt in ("VOP1", "VOP2", "VOPC") and fld != "src0": continue
    for v in _source_variants(kind, t, fld):
      args = list(base); args[i] = v
      lines.append(f"{inst.name} {', '.join(args)}")
    if inst.fmt in ("VOP3", "VOP3SD") and t[0] == "f":
      for mod in (f"-{base[i]}", f"|{base[i]}|", f"-|{base[i]}|") if inst.fmt == "VOP3" else (f"-{base[i]}",):
        args = list(base); args[i] = mod
        lines.append(f"{inst.name} {', '.join(args)}")
  if inst.fmt in ("GLOBAL", "DS"): lines.append(lines[0] + " offset:16")
  if inst.fmt == "SMEM": lines.append(lines[0].replace("0x10", "0x100"))
  return lines

def all_samples() -> list[str]: return [line for inst in TABLE.values() for line in sample_lines(inst)]

def ours(line: str) -> bytes:
  """Our encoding of one line (a branch's numeric offset becomes a label that far away)."""
  m = re.fullmatch(r"(s_c?branch\w*) (-?\d+)", line)
  if m: return assemble_code([f"{m.group(1)} T"] + ["s_nop 0"] * int(m.group(2)) + ["T:"])[:4]
  return assemble_code([line])

def llvm_mc(lines: list[str], mc: str) -> dict[int, bytes | str]:
  """line index -> llvm-mc's bytes for it, or its error message."""
  r = subprocess.run([mc, "-arch=amdgcn", "-mcpu=gfx1100", "-show-encoding"], input="\n".join(lines) + "\n", capture_output=True, text=True)
  errors: dict[int, str] = {}
  for m in re.finditer(r"<stdin>:(\d+):\d+: error: (.*)", r.stderr): errors.setdefault(int(m.group(1)) - 1, m.group(2))
  encs = [bytes(int(x, 16) for x in m.group(1).split(",")) for m in re.finditer(r"encoding: \[(.*?)\]", r.stdout)]
  ok = [i for i in range(len(lines)) if i not in errors]
  if len(ok) != len(encs): raise RuntimeError(f"llvm-mc gave {len(encs)} encodings for {len(ok)} accepted lines")
  return {**errors, **dict(zip(ok, encs))}

def compare_encodings(mc: str) -> list[str]:
  """Every sample line: our bytes vs llvm-mc's; the mismatches as messages."""
  lines = all_samples()
  theirs = llvm_mc(lines, mc)
  bad = []
  for i, line in enumerate(lines):
    try: mine = ours(line)
    except Exception as e: bad.append(f"{line}: our assembler refuses it: {e}"); continue
    t = theirs[i]
    if isinstance(t, str): bad.append(f"{line}: llvm-mc refuses it ({t}), we encode {mine.hex()}")
    elif t != mine: bad.append(f"{line}: ours {mine.hex()}, llvm-mc {t.hex()}")
  return bad

# ***** code objects vs llvm-objdump *****

def normalize(text: str) -> str:
  """One instruction's text in a form both disassemblers agree on (suffixes, spacing, constant spelling)."""
  text = re.sub(r"_e(32|64)\b", "", text.strip().split("//")[0].split(";")[0].strip())
  text = re.sub(r"\s+", " ", text)
  text = re.sub(r"0x([0-9a-f]+)", lambda m: str(int(m.group(1), 16)), text)
  text = text.replace(", ", ",")
  # llvm-objdump names a ds_swizzle_b32 xor pattern (and_mask 31, or_mask 0) symbolically; we print its offset's number
  text = re.sub(r"offset:swizzle\(SWAP,(\d+)\)", lambda m: f"offset:{31 | int(m.group(1)) << 10}", text)
  return re.sub(r"^(s_load_\w+ .*),null$", r"\1,0", text)   # llvm-objdump names a zero offset by its null soffset

def objdump_lines(paths: list[str], objdump: str) -> dict[str, list[str]]:
  """Each file's instructions as llvm-objdump prints them (one llvm-objdump run for all the files)."""
  r = subprocess.run([objdump, "-d", "--mcpu=gfx1100", "--no-show-raw-insn", *paths], capture_output=True, text=True)
  if r.returncode != 0: raise RuntimeError(f"llvm-objdump failed: {r.stderr.strip()[:500]}")
  out: dict[str, list[str]] = {}
  current: list[str] = []
  for line in r.stdout.splitlines():
    if (m := re.match(r"^(.*):\s+file format ", line)): out[m.group(1)] = current = []
    elif line.startswith(("\t", " ")) and line.strip() and not line.strip().endswith(":") and not line.strip().startswith("s_code_end"):
      current.append(line.strip())
  return out

def compare_code_objects(blobs: dict[str, bytes], objdump: str) -> list[str]:
  """Our disassembly of each code object (path -> its bytes) vs llvm-objdump's."""
  from tinygrad_amd.codeobject import parse
  theirs_all = objdump_lines(list(blobs), objdump)
  bad = []
  # branches: llvm-objdump prints the target address where we print the offset; compare the mnemonic only
  strip = lambda s: s.split(" ")[0] if s.startswith(("s_branch", "s_cbranch")) else s
  for path, blob in blobs.items():
    mine = [strip(normalize(x)) for x in disassemble(parse(blob).code)]
    theirs = [strip(normalize(x)) for x in theirs_all.get(path, [])]
    if mine != theirs:
      i = next(i for i, (a, b) in enumerate(zip(mine + [""] * len(theirs), theirs + [""] * len(mine))) if a != b)
      bad.append(f"{path}: instruction {i}: ours {mine[i] if i < len(mine) else '(end)'!r}, llvm-objdump {theirs[i] if i < len(theirs) else '(end)'!r}")
  return bad

def check_cache_dir(root: str, objdump: str, batch: int = 200) -> tuple[int, list[str]]:
  """Every AMD code object under a tinycore disk cache directory (entries are a 32-byte digest + payload)."""
  import tempfile
  blobs: list[bytes] = []
  for dirpath, _, files in os.walk(root):
    for f in files:
      with open(os.path.join(dirpath, f), "rb") as fh: blob = fh.read()[32:]
      if blob[:4] == b"\x7fELF" and int.from_bytes(blob[18:20], "little") == 224: blobs.append(blob)
  bad = []
  with tempfile.TemporaryDirectory() as tmp:
    for start in range(0, len(blobs), batch):
      chunk = {}
      for i, blob in enumerate(blobs[start:start + batch]):
        path = os.path.join(tmp, f"k{start + i}.co")
        with open(path, "wb") as fh: fh.write(blob)
        chunk[path] = blob
      bad += compare_code_objects(chunk, objdump)
  return len(blobs), bad

if __name__ == "__main__":
  objdump = find_tool("llvm-objdump")
  if objdump is None:
    why = "llvm_check: llvm-objdump-19 is not installed (apt-get install llvm-19)"
    if os.environ.get("CI"): sys.exit(why + ", and CI must run this check")
    sys.exit(print(why + "; the code objects were not cross-checked") or 0)
  count, problems = check_cache_dir(sys.argv[1], objdump)
  print(f"llvm_check: {count} AMD code objects disassembled by llvm-objdump, {len(problems)} differ from ours")
  for p in problems[:20]: print("  " + p)
  sys.exit(1 if problems or count == 0 else 0)
