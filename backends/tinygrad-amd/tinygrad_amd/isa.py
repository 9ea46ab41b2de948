"""The RDNA3 (gfx1100, wave32) instruction set as data: encodings, opcodes and operand types, read by the assembler,
the disassembler and the emulator alike (one table, not three)."""
from __future__ import annotations
from dataclasses import dataclass

# encoding formats: (bytes without literal, (lo bit, width, value) that identifies the format, {field: (lo bit, width)})
FORMATS: dict[str, tuple[int, tuple[int, int, int], dict[str, tuple[int, int]]]] = {
  "SOP1": (4, (23, 9, 0b101111101), {"sdst": (16, 7), "op": (8, 8), "ssrc0": (0, 8)}),
  "SOPC": (4, (23, 9, 0b101111110), {"op": (16, 7), "ssrc1": (8, 8), "ssrc0": (0, 8)}),
  "SOPP": (4, (23, 9, 0b101111111), {"op": (16, 7), "simm16": (0, 16)}),
  "SOPK": (4, (28, 4, 0b1011), {"op": (23, 5), "sdst": (16, 7), "simm16": (0, 16)}),
  "SOP2": (4, (30, 2, 0b10), {"op": (23, 7), "sdst": (16, 7), "ssrc1": (8, 8), "ssrc0": (0, 8)}),
  "SMEM": (8, (26, 6, 0b111101), {"op": (18, 8), "glc": (14, 1), "dlc": (13, 1), "sdata": (6, 7), "sbase": (0, 6),
                                 "offset": (32, 21), "soffset": (57, 7)}),
  "VOP1": (4, (25, 7, 0b0111111), {"vdst": (17, 8), "op": (9, 8), "src0": (0, 9)}),
  "VOPC": (4, (25, 7, 0b0111110), {"op": (17, 8), "vsrc1": (9, 8), "src0": (0, 9)}),
  "VOP2": (4, (31, 1, 0), {"op": (25, 6), "vdst": (17, 8), "vsrc1": (9, 8), "src0": (0, 9)}),
  "VOP3": (8, (26, 6, 0b110101), {"vdst": (0, 8), "abs": (8, 3), "opsel": (11, 4), "clamp": (15, 1), "op": (16, 10),
                                 "src0": (32, 9), "src1": (41, 9), "src2": (50, 9), "omod": (59, 2), "neg": (61, 3)}),
  # VOP3 with a scalar destination (carry out, division scale flags): same prefix, told apart by the opcode
  "VOP3SD": (8, (26, 6, 0b110101), {"vdst": (0, 8), "sdst": (8, 7), "clamp": (15, 1), "op": (16, 10),
                                   "src0": (32, 9), "src1": (41, 9), "src2": (50, 9), "omod": (59, 2), "neg": (61, 3)}),
  # packed math and the matrix instructions (WMMA): the "hi" operand selects default to set (opsel_hi, opsel_hi2)
  "VOP3P": (8, (23, 9, 0b110011000), {"vdst": (0, 8), "neg_hi": (8, 3), "opsel": (11, 3), "opsel_hi2": (14, 1), "clamp": (15, 1),
                                     "op": (16, 7), "src0": (32, 9), "src1": (41, 9), "src2": (50, 9), "opsel_hi": (59, 2), "neg": (61, 3)}),
  "DS": (8, (26, 6, 0b110110), {"op": (18, 8), "gds": (17, 1), "offset1": (8, 8), "offset0": (0, 8),
                               "addr": (32, 8), "data0": (40, 8), "data1": (48, 8), "vdst": (56, 8)}),
  "GLOBAL": (8, (26, 6, 0b110111), {"op": (18, 7), "seg": (16, 2), "slc": (15, 1), "glc": (14, 1), "dlc": (13, 1),
                                   "offset": (0, 13), "addr": (32, 8), "data": (40, 8), "saddr": (48, 7), "vdst": (56, 8)}),
}
# the order formats are tried when decoding: longer identifying prefixes first (SOP2's 2 bits would match the others)
DECODE_ORDER = sorted((f for f in FORMATS if f != "VOP3SD"), key=lambda f: -FORMATS[f][1][1])

# the operands each format writes in assembly, in order; (field, kind): kind s = scalar operand (SGPR or constant),
# v = VGPR, a = any 9-bit source, w = a 9-bit source that must be a VGPR, m = wave mask (vcc_lo or an SGPR), i = immediate
OPERANDS: dict[str, tuple[tuple[str, str], ...]] = {
  "SOP1": (("sdst", "s"), ("ssrc0", "s")), "SOP2": (("sdst", "s"), ("ssrc0", "s"), ("ssrc1", "s")),
  "SOPC": (("ssrc0", "s"), ("ssrc1", "s")), "SOPK": (("sdst", "s"), ("simm16", "i")), "SOPP": (("simm16", "i"),),
  "SMEM": (("sdata", "s"), ("sbase", "s"), ("offset", "i")),
  "VOP1": (("vdst", "v"), ("src0", "a")), "VOP2": (("vdst", "v"), ("src0", "a"), ("vsrc1", "v")),
  "VOPC": (("vcc", "m"), ("src0", "a"), ("vsrc1", "v")),
  "VOP3": (("vdst", "v"), ("src0", "a"), ("src1", "a"), ("src2", "a")),
  "VOP3SD": (("vdst", "v"), ("sdst", "m"), ("src0", "a"), ("src1", "a"), ("src2", "a")),
  "GLOBAL_LOAD": (("vdst", "v"), ("addr", "v"), ("saddr", "s")), "GLOBAL_STORE": (("addr", "v"), ("data", "v"), ("saddr", "s")),
  "WMMA": (("vdst", "v"), ("src0", "w"), ("src1", "w"), ("src2", "w")),
  "DS_LOAD": (("vdst", "v"), ("addr", "v")), "DS_STORE": (("addr", "v"), ("data0", "v")),
}

@dataclass(frozen=True)
class Inst:
  """One instruction: its encoding, and the type of each assembly operand (b32/u32/i32/f32/f16/f64/u64/i64/b64/b128 say
  how many registers it spans and how constants and the emulator read it; "-" an operand without a value type)."""
  name: str
  fmt: str                     # key of FORMATS
  op: int
  operands: tuple[tuple[str, str], ...]   # (field, kind) as written in assembly
  types: tuple[str, ...]

  @property
  def base(self) -> str: return self.name.removesuffix("_e64").removesuffix("_e32")

WIDTH = {"b128": 4, "f64": 2, "u64": 2, "i64": 2, "b64": 2, "f32x8": 8, "f16x16": 8, "bf16x16": 8}
def regs(t: str) -> int: return WIDTH.get(t, 1)

TABLE: dict[str, Inst] = {}
def _add(name: str, fmt: str, op: int, types: str, operands: tuple | None = None) -> None:
  ts = (("b32",) if fmt == "VOPC" else ()) + tuple(types.split())   # a compare's first operand is the lane mask it writes
  ops = operands if operands is not None else OPERANDS[fmt][:len(ts)]
  TABLE[name] = Inst(name, fmt, op, ops, ts)
  # VALU instructions have a 64-bit (VOP3) form: modifiers, constants and SGPRs in any source, a scalar mask for compares
  if fmt in ("VOP1", "VOP2", "VOPC"):
    e64_op = {"VOP1": 0x180, "VOP2": 0x100, "VOPC": 0}[fmt] + op
    if fmt == "VOPC": TABLE[name + "_e64"] = Inst(name + "_e64", "VOP3", e64_op, (("vdst", "m"), ("src0", "a"), ("src1", "a")), ts)
    elif name in CARRY: TABLE[name + "_e64"] = Inst(name + "_e64", "VOP3SD", e64_op, (("vdst", "v"), ("sdst", "m"), ("src0", "a"), ("src1", "a"), ("src2", "m")), ts)
    else:
      e64 = tuple((("src1" if f == "vsrc1" else "src2" if f == "vcc" else f), ("a" if k == "v" and f != "vdst" else k)) for f, k in ops)
      TABLE[name + "_e64"] = Inst(name + "_e64", "VOP3", e64_op, e64, ts)

# VOP2 ops with an implicit carry in/out in vcc_lo: v_add_co_ci_u32 v1, vcc_lo, v2, v3, vcc_lo
CARRY = {"v_add_co_ci_u32", "v_sub_co_ci_u32"}

for _n, _op in {"s_mov_b32": 0x0, "s_not_b32": 0x1e, "s_and_saveexec_b32": 0x20}.items(): _add(_n, "SOP1", _op, "b32 b32")
_add("s_mov_b64", "SOP1", 0x1, "b64 b64")
for _n, _op in {"s_add_u32": 0x0, "s_sub_u32": 0x1, "s_add_i32": 0x2, "s_lshl_b32": 0x8, "s_lshr_b32": 0xa, "s_and_b32": 0x16,
                "s_or_b32": 0x18, "s_xor_b32": 0x1a, "s_and_not1_b32": 0x22, "s_or_not1_b32": 0x24, "s_mul_i32": 0x2c,
                "s_cselect_b32": 0x30}.items(): _add(_n, "SOP2", _op, "b32 b32 b32")
for _n, _op in {"s_cmp_eq_i32": 0x0, "s_cmp_eq_u32": 0x6, "s_cmp_lg_u32": 0x7, "s_cmp_lt_u32": 0xa}.items(): _add(_n, "SOPC", _op, "b32 b32")
_add("s_movk_i32", "SOPK", 0x0, "b32 i32")
# SOPP: branches take a label (a signed dword offset from the next instruction); s_waitcnt counters; others nothing
for _n, _op in {"s_branch": 0x20, "s_cbranch_scc0": 0x21, "s_cbranch_scc1": 0x22, "s_cbranch_vccz": 0x23, "s_cbranch_vccnz": 0x24,
                "s_cbranch_execz": 0x25, "s_cbranch_execnz": 0x26}.items(): _add(_n, "SOPP", _op, "label")
_add("s_waitcnt", "SOPP", 0x9, "waitcnt")
_add("s_nop", "SOPP", 0x0, "i32")
for _n, _op in {"s_endpgm": 0x30, "s_barrier": 0x3d}.items(): _add(_n, "SOPP", _op, "", ())
_add("s_load_b32", "SMEM", 0x0, "b32 b64 i32"); _add("s_load_b64", "SMEM", 0x1, "b64 b64 i32"); _add("s_load_b128", "SMEM", 0x2, "b128 b64 i32")

for _n, (_op, _t) in {"v_mov_b32": (0x1, "b32 b32"), "v_cvt_i32_f64": (0x3, "i32 f64"), "v_cvt_f64_i32": (0x4, "f64 i32"),
                      "v_cvt_f32_i32": (0x5, "f32 i32"), "v_cvt_f32_u32": (0x6, "f32 u32"), "v_cvt_u32_f32": (0x7, "u32 f32"),
                      "v_cvt_i32_f32": (0x8, "i32 f32"), "v_cvt_f16_f32": (0xa, "f16 f32"), "v_cvt_f32_f16": (0xb, "f32 f16"),
                      "v_cvt_f32_f64": (0xf, "f32 f64"), "v_cvt_f64_f32": (0x10, "f64 f32"), "v_cvt_u32_f64": (0x15, "u32 f64"),
                      "v_cvt_f64_u32": (0x16, "f64 u32"), "v_trunc_f64": (0x17, "f64 f64"), "v_rndne_f64": (0x19, "f64 f64"),
                      "v_floor_f64": (0x1a, "f64 f64"), "v_fract_f32": (0x20, "f32 f32"), "v_trunc_f32": (0x21, "f32 f32"),
                      "v_rndne_f32": (0x23, "f32 f32"), "v_floor_f32": (0x24, "f32 f32"), "v_exp_f32": (0x25, "f32 f32"),
                      "v_log_f32": (0x27, "f32 f32"), "v_rcp_f32": (0x2a, "f32 f32"), "v_rcp_iflag_f32": (0x2b, "f32 f32"),
                      "v_rsq_f32": (0x2e, "f32 f32"), "v_rcp_f64": (0x2f, "f64 f64"), "v_rsq_f64": (0x31, "f64 f64"), "v_sqrt_f32": (0x33, "f32 f32"),
                      "v_sqrt_f64": (0x34, "f64 f64"), "v_sin_f32": (0x35, "f32 f32"), "v_cos_f32": (0x36, "f32 f32"),
                      "v_not_b32": (0x37, "b32 b32"), "v_clz_i32_u32": (0x39, "i32 u32"), "v_frexp_exp_i32_f64": (0x3c, "i32 f64"),
                      "v_frexp_mant_f64": (0x3d, "f64 f64"), "v_frexp_exp_i32_f32": (0x3f, "i32 f32"), "v_frexp_mant_f32": (0x40, "f32 f32"),
                      }.items(): _add(_n, "VOP1", _op, _t)
for _n, (_op, _t) in {"v_add_f32": (0x3, "f32"), "v_sub_f32": (0x4, "f32"), "v_subrev_f32": (0x5, "f32"), "v_mul_f32": (0x8, "f32"),
                      "v_min_f32": (0xf, "f32"), "v_max_f32": (0x10, "f32"), "v_min_i32": (0x11, "i32"), "v_max_i32": (0x12, "i32"),
                      "v_min_u32": (0x13, "u32"), "v_max_u32": (0x14, "u32"), "v_lshlrev_b32": (0x18, "b32"), "v_lshrrev_b32": (0x19, "b32"),
                      "v_ashrrev_i32": (0x1a, "i32"), "v_and_b32": (0x1b, "b32"), "v_or_b32": (0x1c, "b32"), "v_xor_b32": (0x1d, "b32"),
                      "v_add_nc_u32": (0x25, "u32"), "v_sub_nc_u32": (0x26, "u32"), "v_subrev_nc_u32": (0x27, "u32"),
                      "v_fmac_f32": (0x2b, "f32")}.items(): _add(_n, "VOP2", _op, f"{_t} {_t} {_t}")
_add("v_cndmask_b32", "VOP2", 0x1, "b32 b32 b32 b32", (("vdst", "v"), ("src0", "a"), ("vsrc1", "v"), ("vcc", "m")))
for _n, _op in {"v_add_co_ci_u32": 0x20, "v_sub_co_ci_u32": 0x21}.items():
  _add(_n, "VOP2", _op, "u32 b32 u32 u32 b32", (("vdst", "v"), ("vcc", "m"), ("src0", "a"), ("vsrc1", "v"), ("vcc", "m")))
_CMPS_F = {"f": 0, "lt": 1, "eq": 2, "le": 3, "gt": 4, "lg": 5, "ge": 6, "o": 7, "u": 8, "nge": 9, "nlg": 10, "ngt": 11,
           "nle": 12, "neq": 13, "nlt": 14, "tru": 15}
_CMPS_I = {"lt": 1, "eq": 2, "le": 3, "gt": 4, "ne": 5, "ge": 6}
for _c, _o in _CMPS_F.items():
  _add(f"v_cmp_{_c}_f32", "VOPC", 0x10 + _o, "f32 f32"); _add(f"v_cmp_{_c}_f64", "VOPC", 0x20 + _o, "f64 f64")
for _c, _o in _CMPS_I.items():
  for _t, _base in (("i32", 0x40), ("u32", 0x48), ("i64", 0x50), ("u64", 0x58)): _add(f"v_cmp_{_c}_{_t}", "VOPC", _base + _o, f"{_t} {_t}")
_add("v_cmp_class_f32", "VOPC", 0x7e, "f32 u32"); _add("v_cmp_class_f64", "VOPC", 0x7f, "f64 u32")
for _n, (_op, _t) in {"v_mad_u32_u24": (0x20b, "u32 u32 u32 u32"), "v_bfe_u32": (0x210, "u32 u32 u32 u32"), "v_bfe_i32": (0x211, "i32 i32 u32 u32"),
                      "v_bfi_b32": (0x212, "b32 b32 b32 b32"), "v_fma_f32": (0x213, "f32 f32 f32 f32"), "v_fma_f64": (0x214, "f64 f64 f64 f64"),
                      "v_alignbit_b32": (0x216, "b32 b32 b32 u32"), "v_div_fixup_f32": (0x227, "f32 f32 f32 f32"),
                      "v_div_fixup_f64": (0x228, "f64 f64 f64 f64"), "v_perm_b32": (0x244, "b32 b32 b32 b32"),
                      "v_lshl_add_u32": (0x246, "u32 u32 u32 u32"), "v_add3_u32": (0x255, "u32 u32 u32 u32"),
                      "v_lshl_or_b32": (0x256, "b32 b32 u32 b32"), "v_and_or_b32": (0x257, "b32 b32 b32 b32"), "v_or3_b32": (0x258, "b32 b32 b32 b32"),
                      "v_ldexp_f32": (0x31c, "f32 f32 i32"), "v_add_f64": (0x327, "f64 f64 f64"), "v_mul_f64": (0x328, "f64 f64 f64"),
                      "v_min_f64": (0x329, "f64 f64 f64"), "v_max_f64": (0x32a, "f64 f64 f64"), "v_ldexp_f64": (0x32b, "f64 f64 i32"),
                      "v_mul_lo_u32": (0x32c, "u32 u32 u32"), "v_mul_hi_u32": (0x32d, "u32 u32 u32"), "v_mul_hi_i32": (0x32e, "i32 i32 i32"),
                      "v_lshlrev_b64": (0x33c, "b64 u32 b64"), "v_lshrrev_b64": (0x33d, "b64 u32 b64"), "v_ashrrev_i64": (0x33e, "i64 u32 i64"),
                      }.items(): _add(_n, "VOP3", _op, _t)
for _n, (_op, _t) in {"v_add_co_u32": (0x300, "u32 b32 u32 u32"), "v_sub_co_u32": (0x301, "u32 b32 u32 u32"),
                      "v_mad_u64_u32": (0x2fe, "u64 b32 u32 u32 u64"), "v_mad_i64_i32": (0x2ff, "i64 b32 i32 i32 i64")}.items():
  _add(_n, "VOP3SD", _op, _t)
for _n, (_op, _t) in {"global_load_u8": (0x10, "u8"), "global_load_i8": (0x11, "i8"), "global_load_u16": (0x12, "u16"),
                      "global_load_i16": (0x13, "i16"), "global_load_b32": (0x14, "b32"), "global_load_b64": (0x15, "b64"),
                      "global_load_b128": (0x17, "b128")}.items(): _add(_n, "GLOBAL", _op, f"{_t} u32 b64", OPERANDS["GLOBAL_LOAD"])
for _n, (_op, _t) in {"global_store_b8": (0x18, "u8"), "global_store_b16": (0x19, "u16"), "global_store_b32": (0x1a, "b32"),
                      "global_store_b64": (0x1b, "b64"), "global_store_b128": (0x1d, "b128")}.items(): _add(_n, "GLOBAL", _op, f"u32 {_t} b64", OPERANDS["GLOBAL_STORE"])
for _n, (_op, _t) in {"ds_load_b32": (0x36, "b32"), "ds_load_i8": (0x39, "i8"), "ds_load_u8": (0x3a, "u8"), "ds_load_i16": (0x3b, "i16"),
                      "ds_load_u16": (0x3c, "u16"), "ds_load_b64": (0x76, "b64"), "ds_load_b128": (0xff, "b128"),
                      # 16 bits into the low (high) half of the VGPR, the other half kept
                      "ds_load_u16_d16": (0xa6, "u16"), "ds_load_u16_d16_hi": (0xa7, "u16")}.items(): _add(_n, "DS", _op, f"{_t} u32", OPERANDS["DS_LOAD"])
for _n, (_op, _t) in {"ds_store_b32": (0xd, "b32"), "ds_store_b8": (0x1e, "u8"), "ds_store_b16": (0x1f, "u16"),
                      "ds_store_b64": (0x4d, "b64"), "ds_store_b128": (0xdf, "b128")}.items(): _add(_n, "DS", _op, f"u32 {_t}", OPERANDS["DS_STORE"])
# ds_swizzle_b32 vdst, vsrc offset:pattern: lanes exchange a VGPR through the LDS crossbar, no LDS memory (its source is
# the DS address field); BitMode patterns (offset < 0x8000) read lane ((i & and) | or) ^ xor of the 32
_add("ds_swizzle_b32", "DS", 0x35, "b32 b32", OPERANDS["DS_LOAD"])
# WMMA (wave32): D (8 VGPRs of f32) = A (16x16 f16/bf16 in 8 VGPRs) x B (likewise) + C (8 VGPRs of f32)
for _n, (_op, _t) in {"v_wmma_f32_16x16x16_f16": (0x40, "f16x16"), "v_wmma_f32_16x16x16_bf16": (0x41, "bf16x16")}.items():
  _add(_n, "VOP3P", _op, f"f32x8 {_t} {_t} f32x8", OPERANDS["WMMA"])

# decoding: (format, opcode) -> instruction; VOP3 and VOP3SD share an encoding space
BY_OPCODE: dict[tuple[str, int], Inst] = {(("VOP3" if i.fmt == "VOP3SD" else i.fmt), i.op): i for i in TABLE.values()
                                          if not (i.fmt in ("VOP3", "VOP3SD") and i.name.endswith("_e32"))}

# scalar operand encodings (the 8-bit SSRC and the low half of the 9-bit SRC)
SPECIAL_REGS = {"vcc_lo": 106, "vcc_hi": 107, "null": 124, "m0": 125, "exec_lo": 126, "exec_hi": 127, "scc": 253}
VCC, EXEC, NULL, SCC, LITERAL = 106, 126, 124, 253, 255
# inline integers 0..64 (128..192) and -1..-16 (193..208); inline floats by their operand type
INLINE_FLOATS = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
INV_2PI = 248   # 1/(2*pi)
SGPRS, VGPRS = 106, 256   # addressable registers of one wave (wave32)

def inline_int(code: int) -> int | None:
  if 128 <= code <= 192: return code - 128
  if 193 <= code <= 208: return 192 - code
  return None
