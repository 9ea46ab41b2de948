"""HSA code objects for gfx1100: an ELF shared object with the kernel's machine code, its 64-byte kernel descriptor and
the amdhsa metadata note (msgpack); and the reader the emulator and the driver use to take one apart."""
from __future__ import annotations
import struct
from dataclasses import dataclass

EM_AMDGPU, ELFOSABI_AMDGPU_HSA, ABI_V5 = 224, 64, 3
EF_AMDGPU_MACH_GFX1100 = 0x41
NT_AMDGPU_METADATA = 32
PAGE = 0x1000

@dataclass(frozen=True)
class KernelInfo:
  """What the descriptor and the launch need to know about a kernel."""
  name: str
  vgprs: int
  sgprs: int
  lds: int            # bytes of LDS (group segment)
  kernarg_size: int
  nbufs: int          # pointer arguments, 8 bytes each, then nvars int32 arguments
  nvars: int

# ***** the kernel descriptor (AMDGPUUsage: "Kernel Descriptor"), gfx11, wave32 *****
KD_FMT = "<IIIIq20sIIIHH4s"   # group, private, kernarg sizes, reserved, entry offset, reserved, rsrc3, rsrc1, rsrc2, properties, preload, reserved
assert struct.calcsize(KD_FMT) == 64
RSRC2_USER_SGPRS, RSRC2_WG_ID_XYZ, RSRC2_WORKITEM_ID_XYZ = 2 << 1, 0b111 << 7, 2 << 11
PROP_KERNARG_PTR, PROP_WAVE32 = 1 << 3, 1 << 10

def kernel_descriptor(k: KernelInfo, entry_offset: int) -> bytes:
  vgpr_blocks = max(1, -(-k.vgprs // 8)) - 1   # wave32: VGPRs are allocated 8 at a time
  rsrc1 = vgpr_blocks | (3 << 16) | (3 << 18) | (1 << 21) | (1 << 23) | (1 << 30)   # denormals kept (f32, f16/f64), dx10 clamp, IEEE, mem ordered
  rsrc2 = RSRC2_USER_SGPRS | RSRC2_WG_ID_XYZ | RSRC2_WORKITEM_ID_XYZ
  return struct.pack(KD_FMT, k.lds, 0, k.kernarg_size, 0, entry_offset, b"", 0, rsrc1, rsrc2, PROP_KERNARG_PTR | PROP_WAVE32, 0, b"")

# ***** msgpack, the subset the metadata uses *****
def msgpack(x) -> bytes:
  if isinstance(x, bool): return b"\xc3" if x else b"\xc2"
  if isinstance(x, int):
    if 0 <= x < 128: return bytes([x])
    if 0 <= x < 1 << 32: return b"\xce" + struct.pack(">I", x)
    raise ValueError(f"msgpack: integer {x} out of range")
  if isinstance(x, str):
    b = x.encode()
    return (bytes([0xa0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)]) if len(b) < 256 else b"\xda" + struct.pack(">H", len(b))) + b
  if isinstance(x, list): return (bytes([0x90 | len(x)]) if len(x) < 16 else b"\xdc" + struct.pack(">H", len(x))) + b"".join(msgpack(v) for v in x)
  if isinstance(x, dict):
    return (bytes([0x80 | len(x)]) if len(x) < 16 else b"\xde" + struct.pack(">H", len(x))) + b"".join(msgpack(k) + msgpack(v) for k, v in x.items())
  raise TypeError(f"msgpack: cannot encode {type(x).__name__}")

def metadata(k: KernelInfo) -> dict:
  args = [{".name": f"data{i}", ".offset": 8 * i, ".size": 8, ".value_kind": "global_buffer", ".address_space": "global"} for i in range(k.nbufs)]
  args += [{".name": f"var{j}", ".offset": 8 * k.nbufs + 4 * j, ".size": 4, ".value_kind": "by_value"} for j in range(k.nvars)]
  return {"amdhsa.version": [1, 2], "amdhsa.target": "amdgcn-amd-amdhsa--gfx1100", "amdhsa.kernels": [{
    ".name": k.name, ".symbol": k.name + ".kd", ".kernarg_segment_size": k.kernarg_size, ".kernarg_segment_align": 8,
    ".group_segment_fixed_size": k.lds, ".private_segment_fixed_size": 0, ".wavefront_size": 32, ".sgpr_count": k.sgprs,
    ".vgpr_count": k.vgprs, ".max_flat_workgroup_size": 1024, ".args": args}]}

# ***** the ELF file *****
def _note(name: bytes, ntype: int, desc: bytes) -> bytes:
  pad = lambda b: b + b"\0" * (-len(b) % 4)
  return struct.pack("<III", len(name) + 1, len(desc), ntype) + pad(name + b"\0") + pad(desc)

def build(k: KernelInfo, code: bytes) -> bytes:
  """The code object: segments at page-aligned offsets (vaddr = file offset), sections for tools, symbols for the loader."""
  dynstr = b"\0" + k.name.encode() + b"\0" + (k.name + ".kd").encode() + b"\0"
  note = _note(b"AMDGPU", NT_AMDGPU_METADATA, msgpack(metadata(k)))
  # layout: [ehdr, phdrs] note dynsym dynstr hash rodata(kd) | text | dynamic | symtab strtab shstrtab shdrs
  off = 64 + 56 * 5
  sec: dict[str, tuple[int, bytes]] = {}
  def place(name, data, align):
    nonlocal off
    off = -(-off // align) * align
    sec[name] = (off, data)
    off += len(data)
  place(".note", note, 4)
  place(".dynsym", b"\0" * 72, 8)   # filled once .text and .rodata have addresses
  place(".dynstr", dynstr, 1)
  place(".hash", struct.pack("<5I", 1, 3, 2, 0, 1), 4)   # one bucket holding the chain 2 -> 1 -> 0
  place(".rodata", b"\0" * 64, 64)
  off = -(-off // PAGE) * PAGE
  place(".text", code, 256)
  text_end = off
  off = -(-off // PAGE) * PAGE
  place(".dynamic", b"\0" * 16 * 6, 8)
  text_off, kd_off = sec[".text"][0], sec[".rodata"][0]
  sec[".rodata"] = (kd_off, kernel_descriptor(k, text_off - kd_off))
  shnames = [".note", ".dynsym", ".dynstr", ".hash", ".rodata", ".text", ".dynamic", ".symtab", ".strtab", ".shstrtab"]
  index = {n: i + 1 for i, n in enumerate(shnames)}
  # STB_GLOBAL|STT_FUNC for the code, STB_GLOBAL|STT_OBJECT for the descriptor; protected visibility as the loader expects
  syms = (b"\0" * 24 + struct.pack("<IBBHQQ", 1, 0x12, 3, index[".text"], text_off, len(code))
          + struct.pack("<IBBHQQ", 2 + len(k.name), 0x11, 3, index[".rodata"], kd_off, 64))
  sec[".dynsym"] = (sec[".dynsym"][0], syms)
  d = sec[".dynamic"][0]
  dyn = struct.pack("<12q", 4, sec[".hash"][0], 6, sec[".dynsym"][0], 11, 24, 5, sec[".dynstr"][0], 10, len(dynstr), 0, 0)
  sec[".dynamic"] = (d, dyn)
  place(".symtab", syms, 8)
  place(".strtab", dynstr, 1)
  shstr = b"\0" + b"".join(n.encode() + b"\0" for n in shnames)
  place(".shstrtab", shstr, 1)
  off = -(-off // 8) * 8
  shoff = off
  # section headers: (type, flags, link, info, align, entsize)
  kinds = {".note": (7, 2, 0, 0, 4, 0), ".dynsym": (11, 2, index[".dynstr"], 1, 8, 24), ".dynstr": (3, 2, 0, 0, 1, 0),
           ".hash": (5, 2, index[".dynsym"], 0, 4, 4), ".rodata": (1, 2, 0, 0, 64, 0), ".text": (1, 6, 0, 0, 256, 0),
           ".dynamic": (6, 3, index[".dynstr"], 0, 8, 16), ".symtab": (2, 0, index[".strtab"], 1, 8, 24),
           ".strtab": (3, 0, 0, 0, 1, 0), ".shstrtab": (3, 0, 0, 0, 1, 0)}
  shdrs = b"\0" * 64
  for n in shnames:
    o, data = sec[n]
    t, fl, link, info, al, es = kinds[n]
    addr = o if fl & 2 else 0
    shdrs += struct.pack("<IIQQQQIIQQ", shstr.index(n.encode() + b"\0"), t, fl, addr, o, len(data), link, info, al, es)
  ro_end = sec[".rodata"][0] + 64
  dyn_off = sec[".dynamic"][0]
  phdrs = (struct.pack("<IIQQQQQQ", 1, 4, 0, 0, 0, ro_end, ro_end, PAGE)                                   # PT_LOAD R
           + struct.pack("<IIQQQQQQ", 1, 5, text_off, text_off, text_off, len(code), len(code), PAGE)    # PT_LOAD R X
           + struct.pack("<IIQQQQQQ", 1, 6, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), PAGE)         # PT_LOAD R W
           + struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 8)            # PT_DYNAMIC
           + struct.pack("<IIQQQQQQ", 4, 4, sec[".note"][0], sec[".note"][0], sec[".note"][0], len(note), len(note), 4))  # PT_NOTE
  ehdr = (b"\x7fELF" + bytes([2, 1, 1, ELFOSABI_AMDGPU_HSA, ABI_V5]) + b"\0" * 7
          + struct.pack("<HHIQQQIHHHHHH", 3, EM_AMDGPU, 1, 0, 64, shoff, EF_AMDGPU_MACH_GFX1100, 64, 56, 5, 64, len(shnames) + 1, index[".shstrtab"]))
  out = bytearray(shoff + len(shdrs))
  out[:64] = ehdr
  out[64:64 + len(phdrs)] = phdrs
  for o, data in sec.values(): out[o:o + len(data)] = data
  out[shoff:] = shdrs
  assert text_end <= dyn_off
  return bytes(out)

class CodeObjectError(ValueError): pass

@dataclass(frozen=True)
class Loaded:
  """A code object taken apart: the kernel's name, its code, and its descriptor's fields."""
  name: str
  code: bytes
  lds: int
  kernarg_size: int
  rsrc1: int
  rsrc2: int
  properties: int
  image: bytes
  kd_offset: int

def parse(blob: bytes) -> Loaded:
  """The kernel of a code object this backend built (or any single-kernel gfx1100 code object)."""
  if len(blob) < 64 or blob[:4] != b"\x7fELF" or blob[4] != 2: raise CodeObjectError("not a 64-bit ELF file")
  (e_type, machine, _, _, _, shoff, flags, _, _, _, shentsize, shnum, shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", blob, 16)
  if machine != EM_AMDGPU: raise CodeObjectError(f"ELF machine {machine} is not AMDGPU ({EM_AMDGPU})")
  if flags & 0xff != EF_AMDGPU_MACH_GFX1100: raise CodeObjectError(f"code object is for GPU mach {flags & 0xff:#x}, not gfx1100")
  if shoff + shnum * 64 > len(blob) or shentsize != 64 or shstrndx >= shnum: raise CodeObjectError("section headers out of range")
  shdrs = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + 64 * i) for i in range(shnum)]
  def data(h):
    if h[4] + h[5] > len(blob): raise CodeObjectError("section data out of range")
    return blob[h[4]:h[4] + h[5]]
  shstr = data(shdrs[shstrndx])
  byname = {shstr[h[0]:shstr.index(b"\0", h[0])].decode(): h for h in shdrs[1:]}
  if ".dynsym" not in byname or ".dynstr" not in byname or ".text" not in byname: raise CodeObjectError("missing .text, .dynsym or .dynstr")
  strs = data(byname[".dynstr"])
  syms = data(byname[".dynsym"])
  kd = None
  for i in range(len(syms) // 24):
    st_name, _, _, _, value, size = struct.unpack_from("<IBBHQQ", syms, 24 * i)
    n = strs[st_name:strs.index(b"\0", st_name)].decode()
    if n.endswith(".kd"): kd = (n[:-3], value)
  if kd is None: raise CodeObjectError("no kernel descriptor symbol (NAME.kd)")
  name, kd_addr = kd
  # this backend's objects have vaddr == file offset; find the descriptor through the section holding it
  sec = next((h for h in byname.values() if h[3] <= kd_addr < h[3] + h[5] and h[3]), None)
  if sec is None or kd_addr - sec[3] + 64 > sec[5]: raise CodeObjectError("kernel descriptor outside every section")
  kd_file = sec[4] + kd_addr - sec[3]
  group, _, kernarg, _, entry, _, _, rsrc1, rsrc2, props, _, _ = struct.unpack_from(KD_FMT, blob, kd_file)
  text = byname[".text"]
  start = kd_addr + entry - text[3]
  if not 0 <= start < text[5]: raise CodeObjectError("kernel entry outside .text")
  return Loaded(name, data(text)[start:], group, kernarg, rsrc1, rsrc2, props, blob, kd_addr)
