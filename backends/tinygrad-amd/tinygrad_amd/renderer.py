"""AMD renderer: linear UOps -> RDNA3 (gfx1100, wave32) assembly for tinygrad_amd's assembler. Every value lives in
VGPRs (one per 32-bit lane value); buffer pointers and launch variables arrive in SGPRs from the kernarg segment."""
from __future__ import annotations
import math, struct
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.renderer import Renderer
from tinycore.runtime.errors import UnsupportedError
from tinygrad_amd.isa import TABLE, SGPRS, VGPRS
from tinycore.codegen.transcendental import sin_rules, fmod_rules, exp2_log2_f64_rules

GROUP = 128          # work-items per workgroup of a launch without local sizes (4 waves of 32)
FIRST_PARAM_SGPR = 6  # s[0:1] kernarg pointer, s2..s4 workgroup ids, s5 spare; buffer pointers from s6 in pairs
F32_INLINE = {0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0}

def f32_bits(x: float) -> int: return struct.unpack("<I", struct.pack("<f", x))[0]

def const_text(value, dt: DType) -> str:
  """A constant as an operand of an instruction on dt: an inline constant where the hardware has one, else a literal."""
  if dtypes.is_float(dt):
    v = float(value)
    if v == 0.0 and math.copysign(1, v) > 0: return "0"
    if v in F32_INLINE: return repr(v)
    return f"0x{f32_bits(v):08x}"
  v = int(value) & 0xffffffff
  sv = v - (1 << 32) if v >= 1 << 31 else v
  return str(sv) if -16 <= sv <= 64 else f"0x{v:08x}"

# 8- and 16-bit integers live in 32-bit registers sign- or zero-extended, wrapped back to their width after every op that
# can leave it; half and bfloat16 live as float32 holding a value of their type, rounded back (to nearest even) after
# every op. A single float32 add, mul, div or sqrt rounded once to half is the correctly rounded half result.
SMALL_INTS = {dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16}
HALFS = (dtypes.float16, dtypes.bfloat16)
EXACT_FLOAT_OPS = (Ops.NEG, Ops.MAX, Ops.TRUNC, Ops.WHERE)   # results already values of the operands' type
LOADS = {dtypes.bool: "u8", dtypes.int8: "i8", dtypes.uint8: "u8", dtypes.int16: "i16", dtypes.uint16: "u16", dtypes.float16: "u16",
         dtypes.bfloat16: "u16"}
STORES = {1: "b8", 2: "b16", 4: "b32", 8: "b64"}
WIDE_INTS = (dtypes.int64, dtypes.uint64)   # in VGPR pairs (low word first); arithmetic through carry chains

def halves(pair: str) -> tuple[str, str]:
  lo = int(pair[2:].split(":")[0])
  return f"v{lo}", f"v{lo + 1}"

def signed(dt: DType) -> bool: return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)

def is_vgpr(x: str) -> bool: return x.startswith("v")
def is_literal(x: str) -> bool: return x.startswith("0x")

class RDNA3Renderer(Renderer):
  """gfx1100, wave32. global ids from workgroup ids and work-item ids; local ids when the kernel has lidx SPECIALs."""
  device = "AMD"
  supported_dtypes = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})
  global_dims = 3
  global_max = (2**31 - 1,) * 3
  has_local = True
  local_max = (1024, 1024, 1024)
  max_threads_per_group = 1024
  max_buffers = 32
  index_bits = 32
  upcast_max = 4
  # v_sin_f32 is good near zero only, and the hardware has no float remainder and no float64 transcendentals
  extra_matcher = sin_rules + fmod_rules + exp2_log2_f64_rules
  def render(self, name: str, uops: list[UOp]) -> str: return _Kernel(name, uops).source()

class _Kernel:
  """Rendering one kernel: register allocation by last use, and the instruction lines."""
  def __init__(self, name: str, uops: list[UOp]):
    self.name, self.uops = name, uops
    self.lines: list[str] = []
    self.loc: dict[UOp, str] = {}
    self.free_v = list(range(1, VGPRS))   # v0 holds the packed work-item ids for the whole kernel
    self.max_v = 1
    self.nlabel = 0
    self.params = sorted({u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}.items())
    self.nbufs = max((a for a, _ in self.params), default=-1) + 1
    self.vars = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg)
    self.next_s = FIRST_PARAM_SGPR + 2 * self.nbufs + len(self.vars)
    self.max_s = self.next_s
    self.local = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in uops)
    self.loops: list[tuple[str, str, int]] = []   # (top label, end label, exec save SGPR)
    self.last = self.last_uses()

  def last_uses(self) -> dict[UOp, int]:
    """The position after which each value is dead. A value made before a loop and read inside it lives to the loop's end
    (the next iteration reads it again), the loop's bound too (every iteration compares with it at the top); an accumulator
    also lives while its ASSIGNs are read."""
    pos = {u: i for i, u in enumerate(self.uops)}
    last: dict[UOp, int] = {u: i for i, u in enumerate(self.uops)}
    for i, u in enumerate(self.uops):
      for s in u.src: last[s] = max(last.get(s, i), i)
    for u in self.uops:
      if u.op is Ops.ASSIGN: last[u.src[0]] = max(last[u.src[0]], last[u])
    loops = sorted(((pos[u.src[0]], i) for i, u in enumerate(self.uops) if u.op is Ops.ENDRANGE), key=lambda x: x[1])
    for start, end in loops:
      for u, l in list(last.items()):
        if pos.get(u, 0) < start and start <= l < end: last[u] = end
    return last

  # ***** registers *****
  def vreg(self, n: int = 1) -> str:
    for i, r in enumerate(self.free_v):
      if all(r + k in self.free_v for k in range(n)):
        for k in range(n): self.free_v.remove(r + k)
        self.max_v = max(self.max_v, r + n)
        return f"v{r}" if n == 1 else f"v[{r}:{r + n - 1}]"
    raise UnsupportedError(f"backend AMD: kernel {self.name} needs more than {VGPRS} VGPRs (simplify or split the kernel)")
  def release(self, reg: str) -> None:
    if reg.startswith("v["):
      lo, hi = map(int, reg[2:-1].split(":"))
      self.free_v.extend(range(lo, hi + 1))
    else: self.free_v.append(int(reg[1:]))
    self.free_v.sort()
  def sreg(self) -> str:
    if self.next_s >= SGPRS: raise UnsupportedError(f"backend AMD: kernel {self.name} needs more than {SGPRS} SGPRs (too many buffers or nested loops)")
    self.next_s += 1
    self.max_s = max(self.max_s, self.next_s)
    return f"s{self.next_s - 1}"

  def emit(self, line: str) -> None: self.lines.append("  " + line)
  def label(self) -> str:
    self.nlabel += 1
    return f"L{self.nlabel}"

  def vop(self, name: str, dst: str, *srcs: str) -> None:
    """One VALU instruction, in its 32-bit form when the operands allow, else the 64-bit (VOP3) one. A second distinct
    literal goes through a register first (an instruction holds one)."""
    inst = TABLE[name]
    srcs = list(srcs)
    temps = []
    lits = [s for s in srcs if is_literal(s)]
    for i, s in enumerate(srcs):
      if is_literal(s) and s != lits[0]:
        t = self.vreg(); temps.append(t)
        self.emit(f"v_mov_b32_e32 {t}, {s}")
        srcs[i] = t
    if inst.fmt in ("VOP1", "VOP2", "VOPC"):
      plain = not any(s.startswith(("-", "|")) for s in srcs) and (inst.fmt == "VOP1" or is_vgpr(srcs[1]))
      if name == "v_cndmask_b32": plain = plain and srcs[2] == "vcc_lo"
      if plain:
        if name == "v_cndmask_b32": self.emit(f"{name}_e32 {dst}, {srcs[0]}, {srcs[1]}, vcc_lo")
        else: self.emit(f"{name}_e32 {dst}, {', '.join(srcs)}")
      else: self.emit(f"{name}_e64 {dst}, {', '.join(srcs)}")
    else: self.emit(f"{name} {dst}, {', '.join(srcs)}")
    for t in temps: self.release(t)

  def ref(self, u: UOp, dt: DType | None = None) -> str:
    """u's operand text: its register, or a constant formatted for an operation on dt (default u's own dtype)."""
    if u.op is Ops.CONST: return const_text(u.arg, dt or u.dtype)
    return self.loc[u]

  def vref(self, u: UOp) -> str: return self.to_vgpr(self.ref(u))

  # ***** the kernel *****
  def source(self) -> str:
    for i, (a, _) in enumerate(self.params): self.emit(f"s_load_b64 s[{FIRST_PARAM_SGPR + 2 * a}:{FIRST_PARAM_SGPR + 2 * a + 1}], s[0:1], {8 * a:#x}")
    vbase = FIRST_PARAM_SGPR + 2 * self.nbufs
    for j, _ in enumerate(self.vars): self.emit(f"s_load_b32 s{vbase + j}, s[0:1], {8 * self.nbufs + 4 * j:#x}")
    if self.params or self.vars: self.emit("s_waitcnt lgkmcnt(0)")
    for i, u in enumerate(self.uops):
      self.temps: list[str] = []
      self.render_uop(u)
      for t in self.temps: self.release(t)
      for s in set(u.src) | {u}:
        if self.last.get(s) == i and s in self.loc and s.op not in (Ops.DEFINE_GLOBAL, Ops.ASSIGN) and is_vgpr(self.loc[s]):
          self.release(self.loc.pop(s))
    self.emit("s_endpgm")
    head = [f".kernel {self.name}", f".vgprs {self.max_v}", f".sgprs {self.max_s}", f".args {self.nbufs}", f".vars {len(self.vars)}"]
    return "\n".join(head + self.lines) + "\n"

  def render_uop(self, u: UOp) -> None:
    op = u.op
    if op is Ops.CONST: return
    if op is Ops.DEFINE_GLOBAL: self.loc[u] = f"s[{FIRST_PARAM_SGPR + 2 * u.arg}:{FIRST_PARAM_SGPR + 2 * u.arg + 1}]"; return
    if op is Ops.DEFINE_VAR:
      d = self.loc[u] = self.vreg()
      self.emit(f"v_mov_b32_e32 {d}, s{FIRST_PARAM_SGPR + 2 * self.nbufs + self.vars.index(u)}")
      return
    if op is Ops.SPECIAL: return self.special(u)
    if op is Ops.INDEX:
      d = self.loc[u] = self.vreg()
      size = u.src[0].dtype.base.itemsize
      idx = u.src[1]
      if idx.op is Ops.CONST: self.emit(f"v_mov_b32_e32 {d}, {const_text(idx.arg * size, dtypes.uint32)}")
      else: self.vop("v_lshlrev_b32", d, str(size.bit_length() - 1), self.ref(idx))
      return
    if op is Ops.LOAD:
      idx, dt = u.src[0], u.dtype.scalar
      d = self.loc[u] = self.vreg(self.nregs(dt))
      self.emit(f"global_load_{LOADS.get(dt, 'b64' if dt.itemsize == 8 else 'b32')} {d}, {self.loc[idx]}, {self.loc[idx.src[0]]}")
      self.emit("s_waitcnt vmcnt(0)")
      if dt == dtypes.float16: self.vop("v_cvt_f32_f16", d, d)
      if dt == dtypes.bfloat16: self.vop("v_lshlrev_b32", d, "16", d)
      return
    if op is Ops.STORE:
      idx, val = u.src[0], u.src[1]
      v = self.pair(val) if val.dtype.itemsize == 8 else self.vref(val)
      if val.dtype.scalar in HALFS: v = self.half_bits(v, val.dtype.scalar)
      self.emit(f"global_store_{STORES[val.dtype.itemsize]} {self.loc[idx]}, {v}, {self.loc[idx.src[0]]}")
      return
    if op is Ops.RANGE:
      top, end, save = self.label(), self.label(), self.sreg()
      d = self.loc[u] = self.vreg()
      self.emit(f"v_mov_b32_e32 {d}, 0")
      self.emit(f"s_mov_b32 {save}, exec_lo")
      self.lines.append(f"{top}:")
      # lanes whose counter reached the end stop (exec), the loop ends when no lane is left
      self.vop("v_cmp_gt_i32", "vcc_lo", self.ref(u.src[0], dtypes.int32), d)
      self.emit("s_and_b32 exec_lo, exec_lo, vcc_lo")
      self.emit(f"s_cbranch_execz {end}")
      self.loops.append((top, end, save))
      return
    if op is Ops.ENDRANGE:
      top, end, save = self.loops.pop()
      d = self.loc[u.src[0]]
      self.vop("v_add_nc_u32", d, "1", d)
      self.emit(f"s_branch {top}")
      self.lines.append(f"{end}:")
      self.emit(f"s_mov_b32 exec_lo, {save}")
      self.next_s -= 1
      return
    if op is Ops.DEFINE_ACC:
      d = self.loc[u] = self.vreg(self.nregs(u.dtype))
      self.move(d, u.src[0])
      return
    if op is Ops.ASSIGN:
      self.loc[u] = self.loc[u.src[0]]
      self.move(self.loc[u], u.src[1])
      return
    if op is Ops.CAST: return self.cast(u)
    if op is Ops.BITCAST: return self.bitcast(u)
    if op in GroupOp.ALU: return self.alu(u)
    raise UnsupportedError(f"backend AMD cannot render {op} in kernel {self.name}")

  def nregs(self, dt: DType) -> int: return 2 if dt.itemsize == 8 else 1

  def move(self, d: str, x: UOp) -> None:
    """d = x, for one register or a pair."""
    if self.ref(x) == d: return
    if d.startswith("v["):
      for dh, xh in zip(halves(d), self.words(x)): self.emit(f"v_mov_b32_e32 {dh}, {xh}")
    else: self.emit(f"v_mov_b32_e32 {d}, {self.ref(x)}")

  def words(self, x: UOp) -> tuple[str, str]:
    """The low and high 32-bit words of a 64-bit value: registers, or constants."""
    if x.op is Ops.CONST:
      v = struct.unpack("<Q", struct.pack("<d", float(x.arg)))[0] if x.dtype.scalar == dtypes.float64 else int(x.arg) & (2**64 - 1)
      return const_text(v & 0xffffffff, dtypes.uint32), const_text(v >> 32, dtypes.uint32)
    return halves(self.loc[x])

  def pair(self, x: UOp) -> str:
    """x's 64-bit value in a VGPR pair (a constant is moved into a temporary pair)."""
    if x.op is not Ops.CONST: return self.loc[x]
    t = self.vreg(2)
    self.temps.append(t)
    for th, xh in zip(halves(t), self.words(x)): self.emit(f"v_mov_b32_e32 {th}, {xh}")
    return t

  def special(self, u: UOp) -> None:
    kind, dim = u.arg[:4], int(u.arg[4:])
    d = self.loc[u] = self.vreg()
    if kind == "lidx": self.emit(f"v_bfe_u32 {d}, v0, {10 * dim}, 10")
    elif self.local or dim > 0: self.emit(f"v_mov_b32_e32 {d}, s{2 + dim}")
    else: self.emit(f"v_lshl_add_u32 {d}, s2, {GROUP.bit_length() - 1}, v0")   # workgroup id x * GROUP + work-item id x

  def select(self, d: str, cond_true: str, if_false: str) -> None:
    """d = vcc ? cond_true : if_false."""
    self.vop("v_cndmask_b32", d, if_false, cond_true, "vcc_lo")

  def bool_from_vcc(self, d: str) -> None: self.vop("v_cndmask_b32", d, "0", "1", "vcc_lo")

  def half_bits(self, v: str, dt: DType) -> str:
    """The 16 bits of a half/bfloat16 value held as float32 (exact: the value is one of the type), in a temporary."""
    t = self.vreg()
    self.temps.append(t)
    if dt == dtypes.float16:
      self.vop("v_cvt_f16_f32", t, v)
      self.vop("v_and_b32", t, "0xffff", t)
    else: self.vop("v_lshrrev_b32", t, "16", v)
    return t

  def round_to(self, d: str, dt: DType) -> None:
    """d (a float32) rounded to the nearest half/bfloat16, ties to even, kept as float32."""
    if dt == dtypes.float16:
      self.vop("v_cvt_f16_f32", d, d)
      return self.vop("v_cvt_f32_f16", d, d)
    t = self.vreg()
    self.vop("v_bfe_u32", t, d, "16", "1")
    self.vop("v_add3_u32", t, d, t, "0x7fff")
    self.vop("v_and_b32", t, "0xffff0000", t)
    self.vop("v_cmp_u_f32", "vcc_lo", d, d)
    self.select(d, "0x7fc00000", t)   # NaN stays NaN (the carry could have made it infinite)
    self.release(t)

  def wrap(self, d: str, dt: DType) -> None:
    """d wrapped to an 8/16-bit integer's width: sign- or zero-extended from its low bits."""
    bits = SMALL_INTS[dt]
    if signed(dt): self.vop("v_bfe_i32", d, d, "0", str(bits))
    else: self.vop("v_and_b32", d, const_text((1 << bits) - 1, dtypes.uint32), d)

  def saturate(self, d: str, dt: DType) -> None:
    """A float conversion's 32-bit result (already saturated to 32 bits) clamped to an 8/16-bit integer's range."""
    if dt not in SMALL_INTS: return
    bits = SMALL_INTS[dt]
    if signed(dt):
      self.vop("v_max_i32", d, const_text(-(1 << (bits - 1)), dtypes.int32), d)
      self.vop("v_min_i32", d, const_text((1 << (bits - 1)) - 1, dtypes.int32), d)
    else: self.vop("v_min_u32", d, const_text((1 << bits) - 1, dtypes.uint32), d)

  def bitcast(self, u: UOp) -> None:
    x, src, dst = u.src[0], u.src[0].dtype.scalar, u.dtype.scalar
    if dst.itemsize != src.itemsize or dtypes.bool in (src, dst): raise UnsupportedError(f"backend AMD cannot bitcast {src.name} to {dst.name}")
    if dst.itemsize == 8:
      self.loc[u] = self.vreg(2)
      return self.move(self.loc[u], x)
    d = self.loc[u] = self.vreg()
    v = self.half_bits(self.vref(x), src) if src in HALFS else self.ref(x)
    self.emit(f"v_mov_b32_e32 {d}, {v}")
    if dst == dtypes.float16: self.vop("v_cvt_f32_f16", d, d)
    elif dst == dtypes.bfloat16: self.vop("v_lshlrev_b32", d, "16", d)
    elif dst in SMALL_INTS: self.wrap(d, dst)

  def cast(self, u: UOp) -> None:
    x, src, dst = u.src[0], u.src[0].dtype.scalar, u.dtype.scalar
    if dtypes.float64 in (src, dst): return self.cast_f64(u, x, src, dst)
    if src in WIDE_INTS or dst in WIDE_INTS: return self.cast64(u, x, src, dst)
    d = self.loc[u] = self.vreg()
    a = self.ref(x)
    if dst == dtypes.bool:
      self.vop("v_cmp_neq_f32" if dtypes.is_float(src) else "v_cmp_ne_u32", "vcc_lo", "0", self.vref(x))
      return self.bool_from_vcc(d)
    if dst == dtypes.bfloat16 and dtypes.is_int(src): return self.int_to_bf16(d, x, src)
    if dtypes.is_float(dst):   # every float here is a float32 register: from an int convert, then round to half/bfloat16
      if dtypes.is_float(src): self.emit(f"v_mov_b32_e32 {d}, {a}")
      else: self.vop("v_cvt_f32_i32" if signed(src) else "v_cvt_f32_u32", d, a)
      if dst in HALFS and src != dst: self.round_to(d, dst)
      return
    if dtypes.is_float(src):   # saturating conversion (NaN -> 0), then clamped to a narrower integer's range
      self.vop("v_cvt_i32_f32" if signed(dst) else "v_cvt_u32_f32", d, a)
      return self.saturate(d, dst)
    self.emit(f"v_mov_b32_e32 {d}, {a}")   # between integers (and from bool's 0/1): the same low bits, wrapped to a narrower type
    if dst in SMALL_INTS and (src == dtypes.bool or dst.itemsize < src.itemsize or signed(dst) != signed(src)): self.wrap(d, dst)

  def alu(self, u: UOp) -> None:
    op, srcs = u.op, u.src
    t = srcs[-1].dtype.scalar
    if t in WIDE_INTS: return self.alu64(u, t)
    if t == dtypes.float64: return self.alu_f64(u)
    isf, isb, sgn = dtypes.is_float(t), t == dtypes.bool, signed(t)
    a = [self.ref(s, t) for s in srcs]
    d = self.loc[u] = self.vreg()
    self.alu32(u, d, a, t, isf, isb, sgn)
    if op in GroupOp.Comparison or op is Ops.WHERE: return
    if t in SMALL_INTS and op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.SHL, Ops.IDIV, Ops.MULACC): self.wrap(d, t)
    if t in HALFS and op not in EXACT_FLOAT_OPS: self.round_to(d, t)

  def alu32(self, u: UOp, d: str, a: list[str], t: DType, isf: bool, isb: bool, signed: bool) -> None:
    """u computed on 32-bit registers (float32 for the float types, i32/u32 for the integers)."""
    op, srcs = u.op, u.src
    if op is Ops.WHERE:
      self.vop("v_cmp_ne_u32", "vcc_lo", "0", self.vref(srcs[0]))
      return self.select(d, a[1], a[2])
    if op in GroupOp.Comparison:
      if isf: name = {Ops.CMPLT: "v_cmp_lt_f32", Ops.CMPNE: "v_cmp_neq_f32", Ops.CMPEQ: "v_cmp_eq_f32"}[op]
      else: name = {Ops.CMPLT: "v_cmp_lt_i32" if signed else "v_cmp_lt_u32", Ops.CMPNE: "v_cmp_ne_u32", Ops.CMPEQ: "v_cmp_eq_u32"}[op]
      self.vop(name, "vcc_lo", a[0], a[1])
      return self.bool_from_vcc(d)
    if isb:
      name = {Ops.ADD: "v_or_b32", Ops.OR: "v_or_b32", Ops.MAX: "v_or_b32", Ops.MUL: "v_and_b32", Ops.AND: "v_and_b32", Ops.XOR: "v_xor_b32"}.get(op)
      if op is Ops.NEG: return self.vop("v_xor_b32", d, "1", a[0])
      if name is None: raise UnsupportedError(f"backend AMD has no {op} on bool")
      return self.vop(name, d, a[0], a[1])
    if isf: return self.float_alu(u, d, a)
    simple = {Ops.ADD: "v_add_nc_u32", Ops.SUB: "v_sub_nc_u32", Ops.MUL: "v_mul_lo_u32", Ops.AND: "v_and_b32", Ops.OR: "v_or_b32",
              Ops.XOR: "v_xor_b32", Ops.MAX: "v_max_i32" if signed else "v_max_u32"}
    if op in simple: return self.vop(simple[op], d, a[0], a[1])
    if op is Ops.NEG: return self.vop("v_sub_nc_u32", d, "0", a[0])
    if op in (Ops.SHL, Ops.SHR):   # the shift amount is the first operand, masked to 5 bits by the hardware
      if t in SMALL_INTS:   # narrower types mask it to their own width
        self.vop("v_and_b32", d, str(SMALL_INTS[t] - 1), a[1])
        a = [a[0], d]
      return self.vop("v_lshlrev_b32" if op is Ops.SHL else "v_ashrrev_i32" if signed else "v_lshrrev_b32", d, a[1], a[0])
    if op is Ops.MULACC:
      self.vop("v_mul_lo_u32", d, a[0], a[1])
      return self.vop("v_add_nc_u32", d, a[2], d)
    if op in (Ops.IDIV, Ops.MOD): return self.int_divmod(d, a[0], a[1], signed, op is Ops.MOD)
    raise UnsupportedError(f"backend AMD has no {op} on {t.name}")

  def float_alu(self, u: UOp, d: str, a: list[str]) -> None:
    op, srcs = u.op, u.src
    simple = {Ops.ADD: "v_add_f32", Ops.SUB: "v_sub_f32", Ops.MUL: "v_mul_f32"}
    if op in simple: return self.vop(simple[op], d, a[0], a[1])
    if op is Ops.SQRT: return self.square_root(d, self.to_vgpr(a[0]), "f32")
    if op is Ops.TRUNC: return self.vop("v_trunc_f32", d, a[0])
    if op in (Ops.EXP2, Ops.LOG2): return self.exp2_log2(d, self.to_vgpr(a[0]), op is Ops.EXP2)
    if op is Ops.NEG: return self.vop("v_xor_b32", d, "0x80000000", a[0])
    if op is Ops.MULACC:   # the product is rounded to the dtype before the add, as the two ops would be
      self.vop("v_mul_f32", d, a[0], a[1])
      if u.dtype.scalar in HALFS: self.round_to(d, u.dtype.scalar)
      return self.vop("v_add_f32", d, a[2], d)
    if op is Ops.MAX:   # NaN in either gives NaN; of equal values (0 and -0) the first
      self.vop("v_cmp_lt_f32", "vcc_lo", a[0], a[1])
      self.select(d, a[1], a[0])
      self.vop("v_cmp_u_f32", "vcc_lo", a[0], a[1])
      return self.select(d, "0x7fc00000", d)
    if op in (Ops.FDIV, Ops.RECIP): return self.divide(d, self.to_vgpr("1.0" if op is Ops.RECIP else a[0]), self.to_vgpr(a[-1]), "f32")
    raise UnsupportedError(f"backend AMD has no {op} on {u.dtype.scalar.name}")

  def divide(self, d: str, n: str, den: str, ft: str) -> None:
    """n / den correctly rounded (ft "f32" or "f64"), relying only on what the hardware guarantees: v_rcp is approximate
    (about 1 ulp in float32), fma and ldexp are exact. In the significands' space (frexp: magnitudes in [1/2, 1), no
    overflow or underflow there) a Newton-refined reciprocal gives a quotient within an ulp; exact residuals (fma) then
    pick the nearest of it and its two neighbours (a quotient is never a tie at full precision), and ldexp scales it back.
    A result in the subnormals rounds again on their coarser grid: where the quotient sat exactly on a midpoint of that
    grid, the residual's sign says which way the true value lies. div_fixup gives the sign and the IEEE special cases."""
    wide = ft == "f64"
    R, lowest = (2, 1074) if wide else (1, 149)   # registers per value; 2**-lowest is the least subnormal
    fma, add, sub = f"v_fma_{ft}", f"v_add_{ft}", (lambda dst, x, y: self.vop(f"v_add_{ft}", dst, x, f"-{y}"))
    a, b, y, q, e, t, u = (self.vreg(R) for _ in range(7))
    k, m, s = self.vreg(), self.vreg(), self.vreg()
    hi = lambda x: halves(x)[1] if wide else x   # the word holding the sign
    self.vop(f"v_frexp_mant_{ft}", a, f"|{n}|")
    self.vop(f"v_frexp_mant_{ft}", b, f"|{den}|")
    self.vop(f"v_frexp_exp_i32_{ft}", k, n)
    self.vop(f"v_frexp_exp_i32_{ft}", m, den)
    self.vop("v_sub_nc_u32", k, k, m)   # the quotient is a / b * 2**k
    self.vop(f"v_rcp_{ft}", y, b)
    for _ in range(2 if wide else 1):   # float64's reciprocal starts with fewer good bits
      self.vop(fma, e, f"-{b}", y, "1.0")
      self.vop(fma, y, e, y, y)
    self.vop(f"v_mul_{ft}", q, a, y)
    self.vop(fma, e, f"-{b}", q, a)
    self.vop(fma, q, e, y, q)           # within an ulp of a / b
    self.vop(fma, e, f"-{b}", q, a)     # b * (a/b - q), exact
    self.vop(add, e, e, e)
    self.step(t, q, 1)                  # the next float up: take it when a/b - q is over half the gap to it
    sub(u, t, q)
    self.vop(fma, u, f"-{b}", u, e)
    self.vop(f"v_cmp_lt_{ft}", "vcc_lo", "0", u)
    self.select_words(y, t, q)
    self.step(t, q, -1)                 # the next float down, the same way
    sub(u, q, t)
    self.vop(fma, u, b, u, e)
    self.vop(f"v_cmp_gt_{ft}", "vcc_lo", "0", u)
    self.select_words(q, t, y)
    self.vop(fma, e, f"-{b}", q, a)     # which side of q the exact quotient lies
    self.vop(f"v_ldexp_{ft}", t, q, k)  # the result, rounded again if subnormal
    self.vop("v_sub_nc_u32", m, "0", k)
    self.vop(f"v_ldexp_{ft}", y, t, m)
    sub(u, q, y)                        # what that rounding moved, exact
    self.vop("v_sub_nc_u32", m, const_text(-lowest - 1, dtypes.int32), k)
    self.vop("v_max_i32", m, const_text(-lowest, dtypes.int32), m)
    self.vop(f"v_ldexp_{ft}", y, "1.0", m)   # half the subnormal spacing, in the significands' space
    self.vop("v_ashrrev_i32", s, "31", hi(u))
    self.vop("v_or_b32", s, "1", s)     # one step the way the rounding moved, in the bits of the magnitude...
    self.vop(f"v_cmp_eq_{ft}", "vcc_lo", f"|{u}|", y)
    self.select(s, s, "0")              # ...where q was a midpoint of the subnormal grid,
    self.vop(f"v_cmp_neq_{ft}", "vcc_lo", "0", e)
    self.select(s, s, "0")              # not the exact quotient,
    self.vop("v_xor_b32", m, hi(e), hi(u))
    self.vop("v_cmp_le_i32", "vcc_lo", "0", m)
    self.select(s, s, "0")              # and the exact quotient lies beyond it
    if wide:
      self.vop("v_ashrrev_i32", m, "31", s)
      self.add64(t, (s, m), halves(t))
    else: self.vop("v_add_nc_u32", t, s, t)
    self.vop(f"v_div_fixup_{ft}", d, t, den, n)
    for x in (a, b, y, q, e, t, u, k, m, s): self.release(x)

  def exp2_log2(self, d: str, x: str, exp: bool) -> None:
    """v_exp_f32 / v_log_f32 (about 1 ulp) on normal numbers only, as the hardware may flush subnormals: a subnormal
    result of exp2 is exp2(x + 64) * 2**-64, the log2 of a subnormal x is log2(x * 2**32) - 32."""
    t = self.vreg()
    self.vop("v_cmp_gt_f32", "vcc_lo", "0xc2fc0000" if exp else const_text(2.0 ** -126, dtypes.float32), x)   # -126
    if exp:
      self.vop("v_add_f32", t, "0x42800000", x)   # 64
      self.select(t, t, x)
      self.vop("v_exp_f32", d, t)
      self.vop("v_mul_f32", t, const_text(2.0 ** -64, dtypes.float32), d)
    else:
      self.vop("v_mul_f32", t, "0x4f800000", x)   # 2**32
      self.select(t, t, x)
      self.vop("v_log_f32", d, t)
      self.vop("v_add_f32", t, "0xc2000000", d)   # -32
    self.select(d, t, d)
    self.release(t)

  def square_root(self, d: str, x: str, ft: str) -> None:
    """sqrt(x) correctly rounded (ft "f32" or "f64") from the hardware's approximate reciprocal square root: Goldschmidt
    steps to a root g within an ulp, then its neighbours by exact residuals: x - g * (g +- ulp) is a multiple of the
    ulps' product, so its sign alone says on which side of the midpoint the root lies (a root is never a tie). Tiny x is
    scaled up by an even power of two first, so those residuals do not underflow. Zero, negative, infinite and NaN x take
    v_sqrt's result, exact there."""
    wide = ft == "f64"
    R, tiny, scale = (2, -960, 128) if wide else (1, -64, 64)
    fma = f"v_fma_{ft}"
    xs, y, g, h, r = (self.vreg(R) for _ in range(5))
    k = self.vreg()
    self.emit(f"v_mov_b32_e32 {k}, 0")
    self.vop(f"v_cmp_gt_{ft}", "vcc_lo", self.pair(UOp.const(dtypes.float64, 2.0 ** tiny)) if wide else const_text(2.0 ** tiny, dtypes.float32), x)
    self.select(k, str(scale), k)
    self.vop(f"v_ldexp_{ft}", xs, x, k)
    self.vop(f"v_rsq_{ft}", y, xs)
    self.vop(f"v_mul_{ft}", g, xs, y)   # g -> sqrt(x), h -> 1 / (2 sqrt(x))
    self.vop(f"v_mul_{ft}", h, "0.5", y)
    for _ in range(2 if wide else 1):
      self.vop(fma, r, f"-{h}", g, "0.5")
      self.vop(fma, g, g, r, g)
      self.vop(fma, h, h, r, h)
    self.vop(fma, r, f"-{g}", g, xs)
    self.vop(fma, g, r, h, g)           # within an ulp of the root
    self.step(y, g, -1)                 # the float below when x <= g * below: the root is under the midpoint
    self.vop(fma, r, f"-{y}", g, xs)
    self.vop(f"v_cmp_ge_{ft}", "vcc_lo", "0", r)
    self.select_words(h, y, g)
    self.step(y, g, 1)                  # the float above when x > g * above
    self.vop(fma, r, f"-{y}", g, xs)
    self.vop(f"v_cmp_lt_{ft}", "vcc_lo", "0", r)
    self.select_words(h, y, h)
    self.vop("v_ashrrev_i32", k, "1", k)
    self.vop("v_sub_nc_u32", k, "0", k)
    self.vop(f"v_ldexp_{ft}", d, h, k)
    self.vop(f"v_sqrt_{ft}", y, x)
    self.vop(f"v_cmp_lt_{ft}", "vcc_lo", "0", x)
    self.select_words(d, d, y)
    self.vop(f"v_cmp_eq_{ft}", "vcc_lo", self.pair(UOp.const(dtypes.float64, math.inf)) if wide else const_text(math.inf, dtypes.float32), x)
    self.select_words(d, y, d)
    for t in (xs, y, g, h, r, k): self.release(t)

  def step(self, d: str, x: str, by: int) -> None:
    """d = the float next to the positive x, up (by 1) or down (by -1): its bits plus or minus one."""
    if not x.startswith("v["): return self.vop("v_add_nc_u32", d, str(by), x)
    self.add64(d, (str(by), str(min(by, 0))), halves(x))

  def select_words(self, d: str, if_true: str, if_false: str) -> None:
    """d = vcc ? if_true : if_false, for a register or a pair."""
    for dx, tx, fx in zip(*((halves(r) if r.startswith("v[") else (r,)) for r in (d, if_true, if_false))): self.select(dx, tx, fx)

  def to_vgpr(self, x: str) -> str:
    """x in a VGPR: a constant is moved into a temporary, freed after the current UOp."""
    if is_vgpr(x): return x
    t = self.vreg()
    self.temps.append(t)
    self.emit(f"v_mov_b32_e32 {t}, {x}")
    return t

  def int_divmod(self, d: str, a: str, b: str, signed: bool, mod: bool) -> None:
    """Exact 32-bit division: a float reciprocal of b scaled to 2^32, one Newton step in integers, the quotient from the
    high product, and two corrections. b == 0 gives 0; signed operands divide as magnitudes and take their signs back."""
    av, bv = self.to_vgpr(a), self.to_vgpr(b)
    inv, t, q, r = self.vreg(), self.vreg(), self.vreg(), self.vreg()
    tmps = [inv, t, q, r]
    if signed:
      sa, sb = self.vreg(), self.vreg()
      tmps += [sa, sb]
      ua, ub = self.vreg(), self.vreg()
      tmps += [ua, ub]
      for s, x, ux in ((sa, av, ua), (sb, bv, ub)):
        self.vop("v_ashrrev_i32", s, "31", x)
        self.vop("v_add_nc_u32", ux, x, s)
        self.vop("v_xor_b32", ux, ux, s)
      av, bv = ua, ub
    self.vop("v_cvt_f32_u32", inv, bv)
    self.vop("v_rcp_iflag_f32", inv, inv)
    self.vop("v_mul_f32", inv, "0x4f7ffffe", inv)
    self.vop("v_cvt_u32_f32", inv, inv)
    self.vop("v_sub_nc_u32", t, "0", bv)
    self.vop("v_mul_lo_u32", t, t, inv)
    self.vop("v_mul_hi_u32", t, inv, t)
    self.vop("v_add_nc_u32", inv, inv, t)
    self.vop("v_mul_hi_u32", q, av, inv)
    self.vop("v_mul_lo_u32", t, q, bv)
    self.vop("v_sub_nc_u32", r, av, t)
    for _ in range(2):
      self.vop("v_cmp_le_u32", "vcc_lo", bv, r)
      self.vop("v_add_nc_u32", t, "1", q)
      self.select(q, t, q)
      self.vop("v_sub_nc_u32", t, r, bv)
      self.select(r, t, r)
    res = r if mod else q
    if signed:   # the quotient's sign is sign(a) ^ sign(b), the remainder's sign(a): (x ^ s) - s negates where s = -1
      s = sa if mod else sb
      if not mod: self.vop("v_xor_b32", s, sa, sb)
      self.vop("v_xor_b32", res, res, s)
      self.vop("v_sub_nc_u32", res, res, s)
    self.vop("v_cmp_eq_u32", "vcc_lo", "0", bv)
    self.select(d, "0", res)
    for x in tmps: self.release(x)

  # ***** 64-bit integers: pairs of VGPRs *****

  def alu64(self, u: UOp, t: DType) -> None:
    op, srcs = u.op, u.src
    if op in GroupOp.Comparison:
      d = self.loc[u] = self.vreg()
      name = {Ops.CMPLT: "v_cmp_lt_i64" if signed(t) else "v_cmp_lt_u64", Ops.CMPNE: "v_cmp_ne_u64", Ops.CMPEQ: "v_cmp_eq_u64"}[op]
      self.vop(name, "vcc_lo", self.pair(srcs[0]), self.pair(srcs[1]))
      return self.bool_from_vcc(d)
    d = self.loc[u] = self.vreg(2)
    (dl, dh) = halves(d)
    if op is Ops.WHERE:
      self.vop("v_cmp_ne_u32", "vcc_lo", "0", self.vref(srcs[0]))
      for dx, a, b in zip((dl, dh), self.words(srcs[1]), self.words(srcs[2])): self.select(dx, a, b)
      return
    if op is Ops.MAX:
      self.vop("v_cmp_lt_i64" if signed(t) else "v_cmp_lt_u64", "vcc_lo", self.pair(srcs[0]), self.pair(srcs[1]))
      for dx, a, b in zip((dl, dh), self.words(srcs[0]), self.words(srcs[1])): self.select(dx, b, a)
      return
    if op in (Ops.AND, Ops.OR, Ops.XOR):
      name = {Ops.AND: "v_and_b32", Ops.OR: "v_or_b32", Ops.XOR: "v_xor_b32"}[op]
      for dx, a, b in zip((dl, dh), self.words(srcs[0]), self.words(srcs[1])): self.vop(name, dx, a, b)
      return
    if op in (Ops.SHL, Ops.SHR):   # the amount's low word; the hardware takes it mod 64
      name = "v_lshlrev_b64" if op is Ops.SHL else "v_ashrrev_i64" if signed(t) else "v_lshrrev_b64"
      return self.vop(name, d, self.words(srcs[1])[0], self.pair(srcs[0]))
    if op is Ops.NEG: return self.sub64(d, ("0", "0"), self.words(srcs[0]))
    if op in (Ops.ADD, Ops.SUB): return (self.add64 if op is Ops.ADD else self.sub64)(d, self.words(srcs[0]), self.words(srcs[1]))
    if op in (Ops.MUL, Ops.MULACC):
      self.mul64(d, self.words(srcs[0]), self.words(srcs[1]))
      if op is Ops.MULACC: self.add64(d, halves(d), self.words(srcs[2]))
      return
    if op in (Ops.IDIV, Ops.MOD): return self.divmod64(d, srcs[0], srcs[1], signed(t), op is Ops.MOD)
    raise UnsupportedError(f"backend AMD has no {op} on {t.name}")

  def vgpr_words(self, w: tuple[str, str]) -> tuple[str, str]: return (w[0], self.to_vgpr(w[1]))
  def add64(self, d: str, a: tuple[str, str], b: tuple[str, str]) -> None:
    dl, dh = halves(d)
    b = self.vgpr_words(b)
    self.vop("v_add_co_u32", dl, "vcc_lo", a[0], b[0])
    self.emit(f"v_add_co_ci_u32_e32 {dh}, vcc_lo, {a[1]}, {b[1]}, vcc_lo")
  def sub64(self, d: str, a: tuple[str, str], b: tuple[str, str]) -> None:
    dl, dh = halves(d)
    b = self.vgpr_words(b)
    self.vop("v_sub_co_u32", dl, "vcc_lo", a[0], b[0])
    self.emit(f"v_sub_co_ci_u32_e32 {dh}, vcc_lo, {a[1]}, {b[1]}, vcc_lo")
  def mul64(self, d: str, a: tuple[str, str], b: tuple[str, str]) -> None:
    """The low 64 bits of a * b: the full product of the low words, plus both cross products in the high word."""
    dl, dh = halves(d)
    t = self.vreg()
    self.vop("v_mad_u64_u32", d, "null", self.to_vgpr(a[0]), self.to_vgpr(b[0]), "0")
    for x, y in ((a[0], b[1]), (a[1], b[0])):
      self.vop("v_mul_lo_u32", t, x, y)
      self.vop("v_add_nc_u32", dh, t, dh)
    self.release(t)

  def abs64(self, d: str, w: tuple[str, str], sign: str) -> None:
    """d = |w| given sign = w's sign word (0 or -1): (w ^ sign) - sign."""
    dl, dh = halves(d)
    self.vop("v_xor_b32", dl, w[0], sign)
    self.vop("v_xor_b32", dh, w[1], sign)
    self.sub64(d, (dl, dh), (sign, sign))

  def divmod64(self, d: str, a: UOp, b: UOp, signed: bool, mod: bool) -> None:
    """Exact 64-bit division by shift and subtract, one quotient bit per step (64 steps, a uniform loop on an SGPR).
    Signed operands divide as magnitudes and take their signs back; b == 0 gives 0."""
    an, bn, q, r, t = (self.vreg(2) for _ in range(5))
    regs = [an, bn, q, r, t]
    aw, bw = self.words(a), self.words(b)
    if signed:
      sa, sb = self.vreg(), self.vreg()
      regs += [sa, sb]
      self.vop("v_ashrrev_i32", sa, "31", aw[1]); self.vop("v_ashrrev_i32", sb, "31", bw[1])
      self.abs64(an, aw, sa); self.abs64(bn, bw, sb)
    else:
      self.move(an, a); self.move(bn, b)
    for x in (q, r):
      for h in halves(x): self.emit(f"v_mov_b32_e32 {h}, 0")
    (ql, qh), (rl, rh), (tl, th) = halves(q), halves(r), halves(t)
    n, top = self.sreg(), self.label()
    self.emit(f"s_movk_i32 {n}, 0x3f")
    self.lines.append(f"{top}:")
    self.vop("v_lshlrev_b64", r, "1", r)
    self.vop("v_lshrrev_b64", t, n, an)
    self.vop("v_and_b32", tl, "1", tl)
    self.vop("v_or_b32", rl, rl, tl)
    self.vop("v_lshlrev_b64", q, "1", q)
    self.sub64(t, (rl, rh), halves(bn))
    self.vop("v_cmp_ge_u64", "vcc_lo", r, bn)
    self.select(rl, tl, rl); self.select(rh, th, rh)
    self.bool_from_vcc(tl)
    self.vop("v_or_b32", ql, ql, tl)
    self.emit(f"s_sub_u32 {n}, {n}, 1")
    self.emit(f"s_cbranch_scc0 {top}")
    self.next_s -= 1
    res = r if mod else q
    if signed:
      s = sa if mod else sb
      if not mod: self.vop("v_xor_b32", s, sa, sb)
      self.abs64(res, halves(res), s)   # (x ^ s) - s negates where s = -1
    self.vop("v_cmp_eq_u64", "vcc_lo", "0", bn)
    for dx, x in zip(halves(d), halves(res)): self.select(dx, "0", x)
    for x in regs: self.release(x)

  def cast64(self, u: UOp, x: UOp, src: DType, dst: DType) -> None:
    if dst in WIDE_INTS:
      d = self.loc[u] = self.vreg(2)
      dl, dh = halves(d)
      if src in WIDE_INTS: return self.move(d, x)
      if dtypes.is_float(src):
        wide = self.vreg(2)
        self.temps.append(wide)
        self.vop("v_cvt_f64_f32", wide, self.ref(x))   # exact
        return self.float_to_int64(d, wide, signed(dst))
      self.emit(f"v_mov_b32_e32 {dl}, {self.ref(x)}")   # from a 32-bit (or narrower, extended) integer or bool
      if signed(src): self.vop("v_ashrrev_i32", dh, "31", dl)
      else: self.emit(f"v_mov_b32_e32 {dh}, 0")
      return
    d = self.loc[u] = self.vreg()
    lo, hi = self.words(x)
    if dst == dtypes.bool:
      self.vop("v_or_b32", d, lo, hi)
      self.vop("v_cmp_ne_u32", "vcc_lo", "0", d)
      return self.bool_from_vcc(d)
    if dst == dtypes.bfloat16: return self.int_to_bf16(d, x, src)
    if dtypes.is_float(dst):
      self.int64_to_float(d, self.pair(x), signed(src))
      if dst in HALFS: self.round_to(d, dst)
      return
    self.emit(f"v_mov_b32_e32 {d}, {lo}")   # to a narrower integer: the low bits
    if dst in SMALL_INTS: self.wrap(d, dst)

  def int64_to_float(self, d: str, x: str, signed: bool) -> None:
    """A 64-bit integer to float32, rounded once: the magnitude shifted so its top bit is bit 63, the high word converted
    with the low word's bits as a sticky bit (so ties round right), scaled back by 2^(32 - shift)."""
    m, sh, t, ex = self.vreg(2), self.vreg(), self.vreg(), self.vreg()
    ml, mh = halves(m)
    xl, xh = halves(x)
    s = None
    if signed:
      s = self.vreg()
      self.vop("v_ashrrev_i32", s, "31", xh)
      self.abs64(m, (xl, xh), s)
      x, xl, xh = m, ml, mh
    self.vop("v_cvt_f32_u32", d, xl)   # exact rounding when the high word is 0
    self.vop("v_clz_i32_u32", sh, xh)  # -1 when the high word is 0
    self.vop("v_sub_nc_u32", ex, "32", sh)
    self.vop("v_lshlrev_b64", m, sh, x)
    self.vop("v_cmp_ne_u32", "vcc_lo", "0", ml)
    self.bool_from_vcc(t)
    self.vop("v_or_b32", t, mh, t)
    self.vop("v_cvt_f32_u32", t, t)
    self.vop("v_ldexp_f32", t, t, ex)
    self.vop("v_cmp_ne_u32", "vcc_lo", "-1", sh)
    self.select(d, t, d)
    if s is not None:
      self.vop("v_and_b32", s, "0x80000000", s)
      self.vop("v_xor_b32", d, d, s)
      self.release(s)
    for r in (m, sh, t, ex): self.release(r)

  def float_to_int64(self, d: str, x: str, signed: bool) -> None:
    """float64 (a pair) to a 64-bit integer, truncating: the 53-bit significand shifted by the exponent; saturating at the
    type's limits, NaN to 0 (the hardware has no such conversion)."""
    dl, dh = halves(d)
    xl, xh = halves(x)
    e, m, t = self.vreg(), self.vreg(2), self.vreg(2)
    ml, mh = halves(m)
    tl, th = halves(t)
    def pick(vals: tuple[str, str]) -> None:   # d = vcc ? vals : d
      self.select(dl, vals[0], dl); self.select(dh, vals[1], dh)
    self.vop("v_bfe_u32", e, xh, "20", "11")
    self.vop("v_sub_nc_u32", e, e, "0x3ff")
    self.emit(f"v_mov_b32_e32 {ml}, {xl}")
    self.vop("v_and_b32", mh, "0xfffff", xh)
    self.vop("v_or_b32", mh, "0x100000", mh)
    self.vop("v_sub_nc_u32", tl, e, "52")
    self.vop("v_lshlrev_b64", d, tl, m)    # exponent >= 52: the significand shifted left
    self.vop("v_sub_nc_u32", tl, "52", e)
    self.vop("v_lshrrev_b64", t, tl, m)    # below: shifted right, truncating
    self.vop("v_cmp_gt_i32", "vcc_lo", "52", e)
    pick((tl, th))
    self.vop("v_cmp_gt_i32", "vcc_lo", "0", e)   # |x| < 1
    pick(("0", "0"))
    if signed:
      self.sub64(t, ("0", "0"), (dl, dh))
      self.vop("v_cmp_gt_i32", "vcc_lo", "0", xh)   # x < 0: its sign bit
      pick((tl, th))
      self.vop("v_ashrrev_i32", th, "31", xh)
      self.vop("v_not_b32", tl, th)                  # the limit of x's sign: 0x7fff...ffff or 0x8000...0000
      self.vop("v_xor_b32", th, "0x7fffffff", th)
      self.vop("v_cmp_le_i32", "vcc_lo", "63", e)
      pick((tl, th))
    else:
      self.vop("v_cmp_le_i32", "vcc_lo", "64", e)
      pick(("-1", "-1"))
      self.vop("v_cmp_gt_i32", "vcc_lo", "0", xh)
      pick(("0", "0"))
    self.vop("v_cmp_u_f64", "vcc_lo", x, x)
    pick(("0", "0"))
    for r in (e, m, t): self.release(r)

  # ***** float64: VGPR pairs, the hardware's double-precision instructions *****

  def alu_f64(self, u: UOp) -> None:
    op, srcs = u.op, u.src
    if op in GroupOp.Comparison:
      d = self.loc[u] = self.vreg()
      name = {Ops.CMPLT: "v_cmp_lt_f64", Ops.CMPNE: "v_cmp_neq_f64", Ops.CMPEQ: "v_cmp_eq_f64"}[op]
      self.vop(name, "vcc_lo", self.pair(srcs[0]), self.pair(srcs[1]))
      return self.bool_from_vcc(d)
    d = self.loc[u] = self.vreg(2)
    dl, dh = halves(d)
    if op is Ops.WHERE:
      self.vop("v_cmp_ne_u32", "vcc_lo", "0", self.vref(srcs[0]))
      for dx, a, b in zip((dl, dh), self.words(srcs[1]), self.words(srcs[2])): self.select(dx, a, b)
      return
    a = [self.pair(x) for x in srcs]
    if op is Ops.ADD: return self.vop("v_add_f64", d, a[0], a[1])
    if op is Ops.SUB: return self.vop("v_add_f64", d, a[0], f"-{a[1]}")
    if op is Ops.MUL: return self.vop("v_mul_f64", d, a[0], a[1])
    if op is Ops.MULACC:
      self.vop("v_mul_f64", d, a[0], a[1])
      return self.vop("v_add_f64", d, d, a[2])
    if op is Ops.NEG:
      xl, xh = halves(a[0])
      self.emit(f"v_mov_b32_e32 {dl}, {xl}")
      return self.vop("v_xor_b32", dh, "0x80000000", xh)
    if op is Ops.TRUNC: return self.vop("v_trunc_f64", d, a[0])
    if op is Ops.SQRT: return self.square_root(d, a[0], "f64")
    if op is Ops.MAX:   # NaN in either gives NaN; of equal values the first
      self.vop("v_cmp_lt_f64", "vcc_lo", a[0], a[1])
      for dx, x, y in zip((dl, dh), halves(a[0]), halves(a[1])): self.select(dx, y, x)
      self.vop("v_cmp_u_f64", "vcc_lo", a[0], a[1])
      self.select(dl, "0", dl)
      return self.select(dh, "0x7ff80000", dh)
    if op in (Ops.FDIV, Ops.RECIP): return self.divide(d, self.pair(UOp.const(dtypes.float64, 1.0)) if op is Ops.RECIP else a[0], a[-1], "f64")
    raise UnsupportedError(f"backend AMD has no {op} on float64")

  def cast_f64(self, u: UOp, x: UOp, src: DType, dst: DType) -> None:
    if dst == dtypes.float64:
      d = self.loc[u] = self.vreg(2)
      if src == dtypes.float64: return self.move(d, x)
      if dtypes.is_float(src): return self.vop("v_cvt_f64_f32", d, self.ref(x))
      if src in WIDE_INTS: return self.int64_to_f64(d, *self.words(x), signed(src))
      return self.vop("v_cvt_f64_i32" if signed(src) else "v_cvt_f64_u32", d, self.ref(x))
    xp = self.pair(x)
    if dst in WIDE_INTS:
      d = self.loc[u] = self.vreg(2)
      return self.float_to_int64(d, xp, signed(dst))
    d = self.loc[u] = self.vreg()
    if dst == dtypes.bool:
      self.vop("v_cmp_neq_f64", "vcc_lo", "0", xp)
      return self.bool_from_vcc(d)
    if dst in HALFS:
      self.f64_to_odd_f32(d, xp)
      return self.round_to(d, dst)
    if dtypes.is_float(dst): return self.vop("v_cvt_f32_f64", d, xp)
    self.vop("v_cvt_i32_f64" if signed(dst) else "v_cvt_u32_f64", d, xp)
    self.saturate(d, dst)

  def int64_to_f64(self, d: str, lo: str, hi: str, sgn: bool) -> None:
    """A 64-bit integer (its words) to float64: high word * 2^32 + low word, both exact, one rounding in the add."""
    t = self.vreg(2)
    self.vop("v_cvt_f64_i32" if sgn else "v_cvt_f64_u32", d, hi)
    self.vop("v_ldexp_f64", d, d, "32")
    self.vop("v_cvt_f64_u32", t, lo)
    self.vop("v_add_f64", d, d, t)
    self.release(t)

  def int_to_bf16(self, d: str, x: UOp, src: DType) -> None:
    """An integer to bfloat16, rounded once: exact in float64 (a 64-bit one past 2**53 first rounded to odd at bit 11: its
    low 11 bits cleared, bit 11 set if any was), then float32 rounded to odd, then bfloat16."""
    wide = self.vreg(2)
    if src in WIDE_INTS:
      lo, hi = self.words(x)
      t, u = self.vreg(), self.vreg()
      self.vop("v_and_b32", t, "0x7ff", lo)
      self.vop("v_cmp_ne_u32", "vcc_lo", "0", t)
      self.vop("v_and_b32", t, "0xfffff800", lo)
      self.vop("v_or_b32", u, "0x800", t)
      self.select(t, u, t)   # the low word rounded to odd at bit 11
      if signed(src): self.vop("v_add_nc_u32", u, "0x200000", hi)   # |x| >= 2**53: the high word outside [-2**21, 2**21)
      self.vop("v_cmp_le_u32", "vcc_lo", "0x400000" if signed(src) else "0x200000", u if signed(src) else hi)
      self.select(t, t, lo)
      self.int64_to_f64(wide, t, hi, signed(src))
      self.release(t); self.release(u)
    else: self.vop("v_cvt_f64_i32" if signed(src) else "v_cvt_f64_u32", wide, self.vref(x))
    self.f64_to_odd_f32(d, wide)
    self.round_to(d, dtypes.bfloat16)
    self.release(wide)

  def f64_to_odd_f32(self, d: str, x: str) -> None:
    """float64 to float32 rounding to odd (truncate, then set the last bit when inexact): rounding that on to half or
    bfloat16 rounds x once, since it keeps the information a second rounding needs."""
    back, t = self.vreg(2), self.vreg()
    self.vop("v_cvt_f32_f64", d, x)
    self.vop("v_cvt_f64_f32", back, d)
    self.vop("v_cmp_gt_f64", "vcc_lo", f"|{back}|", f"|{x}|")
    self.vop("v_add_nc_u32", t, "-1", d)
    self.select(d, t, d)   # rounded away from zero: step back toward it
    self.vop("v_cmp_neq_f64", "vcc_lo", back, x)
    self.vop("v_or_b32", t, "1", d)
    self.select(d, t, d)   # inexact: odd
    self.vop("v_cmp_u_f64", "vcc_lo", x, x)
    self.select(d, "0x7fc00000", d)
    self.release(back); self.release(t)
