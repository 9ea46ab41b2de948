"""AMD renderer: linear UOps -> RDNA3 (gfx1100, wave32) assembly for tinygrad_amd's assembler. Every value lives in
VGPRs (one per 32-bit lane value, a float64 in a pair, a vector in consecutive ones); buffer pointers and launch
variables arrive in SGPRs from the kernarg segment; shared memory (DEFINE_LOCAL) is the workgroup's LDS, addressed by byte
offsets in VGPRs. The core computes half in float32 (converting with v_cvt), bfloat16 as its bits, 8/16-bit ints in 32
bits and 64-bit ints from 32-bit halves (codegen/emulate.py)."""
from __future__ import annotations
import collections, math, struct
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops, GroupOp, split_terms
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.renderer import TensorCore
from tinycore.renderer.isa import ISARenderer, ISAKernel, shift_of_divisor, unsigned_divisor, fragment_rules
from tinycore.codegen.widen import vector_index
from tinycore.runtime.errors import UnsupportedError
from tinygrad_amd.isa import TABLE, SGPRS, VGPRS
from tinycore.codegen.transcendental import sin_rules, fmod_rules, exp2_log2_f64_rules
from tinycore.codegen.emulate import rewrite_linear

GROUP = 128          # work-items per workgroup of a launch without local sizes (4 waves of 32)
FIRST_PARAM_SGPR = 6  # s[0:1] kernarg pointer, s2..s4 workgroup ids, s5 spare; buffer pointers from s6 in pairs
F32_INLINE = {0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0}

def f32_bits(x: float) -> int: return struct.unpack("<I", struct.pack("<f", x))[0]

def const_text(value, dt: DType) -> str:
  """A constant as an operand of an instruction on dt: an inline constant where the hardware has one, else a literal. A
  half is held as its 16 bits (selected, stored, converted by v_cvt), so it is its bits."""
  if dt.scalar == dtypes.float16: value, dt = struct.unpack("<H", struct.pack("<e", value))[0], dtypes.uint32
  # a float64 is used through its two words (AMDKernel.words, pair); as one operand its bits, which no instruction takes
  if dt.scalar == dtypes.float64: return f"0x{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016x}"
  if dtypes.is_float(dt):
    v = float(value)
    if v == 0.0 and math.copysign(1, v) > 0: return "0"
    if v in F32_INLINE: return repr(v)
    return f"0x{f32_bits(v):08x}"
  v = int(value) & 0xffffffff
  sv = v - (1 << 32) if v >= 1 << 31 else v
  return str(sv) if -16 <= sv <= 64 else f"0x{v:08x}"

LOADS = {dtypes.bool: "u8", dtypes.int8: "i8", dtypes.uint8: "u8", dtypes.int16: "i16", dtypes.uint16: "u16", dtypes.float16: "u16"}
STORES = {1: "b8", 2: "b16", 4: "b32", 8: "b64", 16: "b128"}
WIDE_LOADS = {2: "u16", 4: "b32", 8: "b64", 16: "b128"}   # a vector's bytes (codegen/widen.py), packed in consecutive VGPRs

def split(r: str) -> list[str]:
  """The VGPRs of a register range (a pair, a vector), or of one register."""
  if not r.startswith("v["): return [r]
  lo, hi = map(int, r[2:-1].split(":"))
  return [f"v{i}" for i in range(lo, hi + 1)]
def halves(pair: str) -> tuple[str, ...]: return tuple(split(pair))

def signed(dt: DType) -> bool: return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)
def is_vgpr(x: str) -> bool: return x.startswith("v")
def is_literal(x: str) -> bool: return x.startswith("0x")

def stores_early(uops: list[UOp]) -> list[UOp]:
  """uops with each store to global memory moved up to just after its last source, where no loop starts or ends and no
  load of its buffer lies in between: the same memory at the end, and its value's and address's VGPRs free at once (a
  tensor core's 64 outputs, each stored in float32 and half, and an optimiser's updates all waited for the kernel's end)."""
  out: list[UOp] = []
  for u in uops:
    if u.op is Ops.STORE and (buf := u.src[0].src[0]).op is Ops.DEFINE_GLOBAL:
      at = max(i for i, v in enumerate(out) if v in u.src) + 1
      if not any(v.op in (Ops.RANGE, Ops.ENDRANGE) or v.op is Ops.LOAD and v.src[0].src[0] is buf for v in out[at:]):
        out.insert(at, u)
        continue
    out.append(u)
  return out

PURE = {Ops.CONST, Ops.INDEX, Ops.GEP, Ops.VECTORIZE, Ops.CAST, Ops.BITCAST, Ops.WMMA, Ops.LOAD, *GroupOp.ALU}
def values_late(uops: list[UOp]) -> list[UOp]:
  """uops with each value computed just before its first use, never across a loop's start or end, a barrier or an
  accumulator's update (nor a load across a store to its buffer): a value loaded or computed long before its use holds a
  VGPR meanwhile (an optimiser's update fused after a tensor core's sum loads its 3 x 64 states, then computes)."""
  users: dict[UOp, list[int]] = collections.defaultdict(list)
  for i, u in enumerate(uops):
    for s in u.src: users[s].append(i)
  key = [float(i) for i in range(len(uops))]   # a value's key: a little under its first user's; sources sort first
  fence, stored = len(uops), {}   # the next position nothing may cross, and each buffer's next store
  for i in range(len(uops) - 1, -1, -1):
    u = uops[i]
    if u.op in (Ops.RANGE, Ops.ENDRANGE, Ops.BARRIER, Ops.ASSIGN): fence = i
    elif u.op is Ops.STORE: stored[u.src[0].src[0]] = i
    elif u.op in PURE and users[u]:
      limit = min(fence, stored.get(u.src[0].src[0], fence)) if u.op is Ops.LOAD else fence
      key[i] = max(float(i), min(min(key[j] for j in users[u]) - 1e-6, limit - 0.5))
  return [uops[i] for i in sorted(range(len(uops)), key=lambda i: (key[i], i))]

def vgprs(dt: DType) -> int: return max(1, dt.itemsize * dt.count // 4)   # a value's VGPRs (16-bit vector elements two to one)

LOADS_AHEAD = 64   # VGPRs the LDS loads issued early (lds_loads_early) may hold beyond what they would at their place
def lds_loads_early(uops: list[UOp], ahead: int) -> list[UOp]:
  """uops with each LDS load issued early: moved up to just after its sources and the LDS load before it, never across a
  loop's start or end, a branch, a barrier or a store to its array, while the loads moved hold at most `ahead` VGPRs more
  at any point. LDS loads retire in order and each is waited for where first read (AMDKernel.settle): loads issued ahead
  are in flight while the instructions before them run (a WMMA's next fragments load while it multiplies, a register
  tile's next vectors while it multiplies and adds), where each read would otherwise wait out its own load's latency."""
  pos = {u: i for i, u in enumerate(uops)}
  key, extra = [float(i) for i in range(len(uops))], [0] * len(uops)
  floor, stored = 0, {}   # the earliest place of the next LDS load (after a fence, or the LDS load before it); each array's last store
  for i, u in enumerate(uops):
    if u.op in (Ops.RANGE, Ops.ENDRANGE, Ops.BARRIER, Ops.IF, Ops.ENDIF): floor = i + 1
    elif u.op is Ops.STORE and shared(u.src[0]): stored[u.src[0].src[0]] = i
    elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and shared(u.src[0]):
      at = max([floor, stored.get(u.src[0].src[0], -1) + 1] + [pos[s] + 1 for s in u.src if s in pos])
      size, top = vgprs(u.dtype), i
      while top > at and extra[top - 1] + size <= ahead: top -= 1
      for j in range(top, i): extra[j] += size
      key[i], floor = top - 0.5, top   # before the instruction at `top` (loads moved there keep their order)
  return [uops[i] for i in sorted(range(len(uops)), key=lambda i: (key[i], i))]

class AMDKernel(ISAKernel):
  """Rendering one kernel: VGPRs allocated and freed after each value's last use, SGPRs for loops, the instruction lines."""
  def __init__(self, ren: RDNA3Renderer, name: str, uops: list[UOp], ahead: int = LOADS_AHEAD):
    super().__init__(ren, name, lds_loads_early(values_late(stores_early(rewrite_linear(uops, offset_rules, None))), ahead))
    uops = self.uops
    self.free_v = list(range(1, VGPRS))   # v0 holds the packed work-item ids for the whole kernel
    self.max_v, self.nlabel = 1, 0
    self.params = sorted({u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}.items())
    self.nbufs = max((a for a, _ in self.params), default=-1) + 1
    self.vars = [u for u in uops if u.op is Ops.DEFINE_VAR]
    self.next_s = self.max_s = FIRST_PARAM_SGPR + 2 * self.nbufs + len(self.vars)
    self.local = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in uops)
    self.loops: list[tuple[str, str | None, str | None]] = []   # (top label, end label, exec save SGPR; None: tested at its end)
    self.lds_bytes = 0   # LDS the shared arrays take so far (each 16-byte aligned)
    # loads in flight per s_waitcnt counter, in issue order (an LDS store counts on lgkmcnt too: None): a value is waited
    # for where an instruction first reads it (settle), so the loads issued before that are in flight together
    self.flight: dict[str, list[UOp | None]] = {"vmcnt": [], "lgkmcnt": []}
    self.aliases: set[UOp] = set()   # GEPs that are their vector's own VGPRs (gep): freed with the vector, not alone
    self.vcc: UOp | None = None
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
    for u in reversed(self.uops):   # an element of whole VGPRs is those VGPRs (gep): the vector lives while it is read
      if u.op is Ops.GEP and u.dtype.itemsize >= 4: last[u.src[0]] = max(last[u.src[0]], last[u])
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

  def new(self, dt: DType) -> str: return self.vreg(vgprs(dt))
  def fresh_label(self) -> str:
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
        self.ins(f"v_mov_b32_e32 {t}, {s}")
        srcs[i] = t
    if inst.fmt in ("VOP1", "VOP2", "VOPC"):
      plain = not any(s.startswith(("-", "|")) for s in srcs) and (inst.fmt == "VOP1" or is_vgpr(srcs[1]))
      if name == "v_cndmask_b32": plain = plain and srcs[2] == "vcc_lo"
      if plain:
        if name == "v_cndmask_b32": self.ins(f"{name}_e32 {dst}, {srcs[0]}, {srcs[1]}, vcc_lo")
        else: self.ins(f"{name}_e32 {dst}, {', '.join(srcs)}")
      else: self.ins(f"{name}_e64 {dst}, {', '.join(srcs)}")
    else: self.ins(f"{name} {dst}, {', '.join(srcs)}")
    for t in temps: self.release(t)

  # VCC holds the bool `vcc` (a comparison just made, or a bool tested) until an instruction writes VCC or EXEC, or
  # control flow joins: a selection or a gated store on that bool reads VCC as it is, not testing the bool's VGPR again
  def ins(self, *text: str) -> str:
    if any(("vcc" in i and not i.startswith("v_cndmask_b32")) or "exec" in i or "branch" in i for t in text for i in t.split("\n")): self.vcc = None
    return super().ins(*text)
  def label(self, name: str) -> str:
    self.vcc = None
    return super().label(name)
  def condition(self, b: UOp) -> None:
    """VCC = the bool b (each lane's 0/1)."""
    if self.vcc is not b: self.vop("v_cmp_ne_u32", "vcc_lo", "0", self.vref(b))
    self.vcc = b

  def vref(self, u: UOp) -> str: return self.to_vgpr(self[u])
  def element(self, vector: str, i: int) -> str: return split(vector)[i] if vector.startswith("v[") else vector   # (a constant: itself)

  def write_all(self) -> AMDKernel:
    for i, (a, _) in enumerate(self.params): self.ins(f"s_load_b64 s[{FIRST_PARAM_SGPR + 2 * a}:{FIRST_PARAM_SGPR + 2 * a + 1}], s[0:1], {8 * a:#x}")
    vbase = FIRST_PARAM_SGPR + 2 * self.nbufs
    for j, _ in enumerate(self.vars): self.ins(f"s_load_b32 s{vbase + j}, s[0:1], {8 * self.nbufs + 4 * j:#x}")
    if self.params or self.vars: self.ins("s_waitcnt lgkmcnt(0)")
    for i, u in enumerate(self.uops):
      self.temps: list[str] = []
      # a loop that may run no trip would leave loads counted below it unissued: the counts after it would be too low
      if u.op is Ops.RANGE and not (u.src[0].op is Ops.CONST and u.src[0].arg >= 1): self.settle(None)
      # (an element a GEP names in place is waited for where it is read: as its vector)
      if not (u.op is Ops.GEP and u.dtype.itemsize >= 4): self.settle({s.src[0] if s in self.aliases else s for s in u.src})
      self.r[u] = self.write(u)
      for t in self.temps: self.release(t)
      for s in set(u.src) | {u}:   # a value's VGPRs are free after its last use
        if self.last.get(s) == i and isinstance(self.r.get(s), str) and s.op not in (Ops.DEFINE_GLOBAL, Ops.ASSIGN) and is_vgpr(self.r[s]) \
           and s not in self.into_acc and s not in self.aliases:   # (the accumulator's registers; a vector's own)
          self.settle({s})   # (a load nothing reads would land in them later)
          self.release(self.r.pop(s))
    return self

  def settle(self, values: set[UOp] | None) -> None:
    """s_waitcnt for the loads among `values` (None: every one) still in flight. A counter's accesses retire in issue
    order, so it waits until no more are in flight than were issued after the last of them."""
    for cnt, flight in self.flight.items():
      last = len(flight) - 1 if values is None else max((i for i, f in enumerate(flight) if f is not None and f in values), default=-1)
      if last < 0: continue
      self.ins(f"s_waitcnt {cnt}({min(len(flight) - last - 1, 63)})")
      del flight[:last + 1]

  def move(self, d: str, x: UOp) -> str:
    """d = x, for one register, a pair or a vector (a constant vector: its one value in every element)."""
    if self[x] == d: return d
    xs = self.words(x) if x.dtype.itemsize == 8 else [self[x]] * x.dtype.count if x.op is Ops.CONST else split(self[x])
    for dh, xh in zip(split(d), xs): self.ins(f"v_mov_b32_e32 {dh}, {xh}")
    return d

  def words(self, x: UOp) -> tuple[str, str]:
    """The low and high 32-bit words of a float64: registers, or constants."""
    if x.op is not Ops.CONST: return halves(self[x])
    v = struct.unpack("<Q", struct.pack("<d", float(x.arg)))[0]
    return const_text(v & 0xffffffff, dtypes.uint32), const_text(v >> 32, dtypes.uint32)

  def pair(self, x: UOp) -> str:
    """x's 64-bit value in a VGPR pair (a constant is moved into a temporary pair)."""
    if x.op is not Ops.CONST: return self[x]
    t = self.vreg(2)
    self.temps.append(t)
    for th, xh in zip(halves(t), self.words(x)): self.ins(f"v_mov_b32_e32 {th}, {xh}")
    return t

  def special(self, u: UOp) -> str:
    kind, dim = u.arg[:4], int(u.arg[4:])
    d = self.vreg()
    if kind == "lidx": self.ins(f"v_bfe_u32 {d}, v0, {10 * dim}, 10")
    elif self.local or dim > 0: self.ins(f"v_mov_b32_e32 {d}, s{2 + dim}")
    else: self.ins(f"v_lshl_add_u32 {d}, s2, {GROUP.bit_length() - 1}, v0")   # workgroup id x * GROUP + work-item id x
    return d

  def select(self, d: str, cond_true: str, if_false: str) -> None:
    """d = vcc ? cond_true : if_false."""
    self.vop("v_cndmask_b32", d, if_false, cond_true, "vcc_lo")

  def bool_from_vcc(self, d: str) -> str:
    self.vop("v_cndmask_b32", d, "0", "1", "vcc_lo")
    return d

  def saturate(self, d: str, dt: DType) -> None:
    """A float conversion's 32-bit result (already saturated to 32 bits) clamped to an 8/16-bit integer's range."""
    if dt.itemsize >= 4: return
    if signed(dt):
      self.vop("v_max_i32", d, const_text(dtypes.min(dt), dtypes.int32), d)
      self.vop("v_min_i32", d, const_text(dtypes.max(dt), dtypes.int32), d)
    else: self.vop("v_min_u32", d, const_text(dtypes.max(dt), dtypes.uint32), d)

  def wrap(self, d: str, dt: DType) -> str:
    """d wrapped to an 8/16-bit integer's width: sign- or zero-extended from its low bits."""
    if signed(dt): self.vop("v_bfe_i32", d, d, "0", str(8 * dt.itemsize))
    else: self.vop("v_and_b32", d, const_text((1 << 8 * dt.itemsize) - 1, dtypes.uint32), d)
    return d

  # ***** float arithmetic with what the hardware guarantees *****

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
    self.ins(f"v_mov_b32_e32 {k}, 0")
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

  def select_words(self, d: str, if_true: str, if_false: str) -> str:
    """d = vcc ? if_true : if_false, for a register or a pair."""
    for dx, tx, fx in zip(*((halves(r) if r.startswith("v[") else (r,)) for r in (d, if_true, if_false))): self.select(dx, tx, fx)
    return d

  def to_vgpr(self, x: str) -> str:
    """x in a VGPR: a constant is moved into a temporary, freed after the current UOp."""
    if is_vgpr(x): return x
    t = self.vreg()
    self.temps.append(t)
    self.ins(f"v_mov_b32_e32 {t}, {x}")
    return t

  def divide_by_constant(self, d: str, a: str, c: int, mod: bool) -> None:
    """a // c (or a % c) for 0 <= a < 2^31 and a constant c > 2 no power of two, in a high product and a shift where the
    general division takes ~30 instructions (Granlund and Montgomery's method). With L = ceil(log2 c) and
    m = ceil(2^(31+L) / c), under 2^32: a * m / 2^(31+L) = a / c + a * e / (c * 2^(31+L)) for e = m * c - 2^(31+L) < c
    <= 2^L, so the second term is under 1 / c (a < 2^31), too little to carry a / c past its floor."""
    L = (c - 1).bit_length()
    m = -(-(1 << (31 + L)) // c)
    q = self.vreg() if mod else d
    self.vop("v_mul_hi_u32", q, a, const_text(m, dtypes.uint32))
    self.vop("v_lshrrev_b32", q, const_text(L - 1, dtypes.uint32), q)
    if mod:
      self.vop("v_mul_lo_u32", q, q, const_text(c, dtypes.uint32))
      self.vop("v_sub_nc_u32", d, a, q)
      self.release(q)

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

  def add64(self, d: str, a: tuple[str, str], b: tuple[str, str]) -> None:
    """The bits of a float64 (a pair) plus a 64-bit step: the low words' carry into the high words."""
    self.vop("v_add_co_u32", halves(d)[0], "vcc_lo", a[0], b[0])
    self.ins(f"v_add_co_ci_u32_e32 {halves(d)[1]}, vcc_lo, {a[1]}, {self.to_vgpr(b[1])}, vcc_lo")

# ***** one UOp: the rules *****

def shared(idx: UOp) -> bool: return idx.src[0].op is Ops.DEFINE_LOCAL

def constant_offset(x: UOp) -> UOp | None:
  """A load or store at element a + c (c a constant) as one at a whose instruction adds c's bytes itself (its offset
  field: 16 bits unsigned in LDS, 13 bits signed in global memory), the arg: accesses a constant apart share one address
  (a register tile's reads of a shared tile). Only where a is never negative (a global access's VGPR is an unsigned
  offset from the buffer's base)."""
  idx = x.src[0]
  if x.arg is not None or idx.op is not Ops.INDEX or len(idx.src) != 2 or (a := idx.src[1]).op is not Ops.ADD or a.src[1].op is not Ops.CONST: return None
  off = a.src[1].arg * idx.src[0].dtype.base.itemsize
  if a.src[0].vmin < 0 or not (0 < off < 1 << 16 if shared(idx) else -(1 << 12) <= off < 1 << 12): return None
  return x.replace(src=(idx.replace(src=(idx.src[0], a.src[0])), *x.src[1:]), arg=off)
def fragment_load(frag: UOp) -> UOp | None:
  """A tensor-core fragment whose elements a lane reads from one LDS address plus constants: where they are consecutive
  and 16-byte aligned (A's row of K), one load of the whole fragment (its VGPRs as the WMMA takes them); else, of 16-bit
  elements (B's column of K, a row apart each), each element loaded into its half of its VGPR (ds_load_u16_d16(_hi),
  the arg: their byte offsets), not a ds_load_u16 per element and a pack per two."""
  size = frag.dtype.scalar.itemsize
  at = [split_terms(ld.src[0].src[1]) for ld in frag.src]   # each element's index: its terms and a constant
  consts = [c for _, c in at]
  if any(t != at[0][0] for t, _ in at): return None
  if consts == list(range(consts[0], consts[0] + len(consts))) and not any(k * size % 16 for k in at[0][0].values()) and consts[0] * size % 16 == 0:
    return UOp(Ops.LOAD, frag.dtype, (vector_index(frag.src[0], len(consts)), *frag.src[0].src[1:]))
  idx = frag.src[0].src[0].src[1]
  base = idx.src[0] if idx.op is Ops.ADD and idx.src[1].op is Ops.CONST else idx
  if size != 2 or split_terms(base) != (at[0][0], 0) or base.vmin < 0 or not all(0 <= c * size < 1 << 16 for c in consts): return None
  return UOp(Ops.LOAD, frag.dtype, (frag.src[0].src[0].replace(src=(frag.src[0].src[0].src[0], base)), *frag.src[0].src[1:]), tuple(c * size for c in consts))
# on the linear program the renderer is given (an access's arg, its offset, means nothing to the passes before)
offset_rules = PatternMatcher([(UPat((Ops.LOAD, Ops.STORE), name="x"), constant_offset)])
def offset_text(x: UOp) -> str: return f" offset:{x.arg}" if x.arg else ""
def load(ctx: AMDKernel, x: UOp) -> str:
  """Global memory through the buffer's address, LDS by its byte address; in flight until an instruction reads it
  (AMDKernel.settle waits for it there). A BARRIER source only orders the load after the barrier, which it follows."""
  idx, dt = x.src[0], x.dtype.scalar
  # a vector (consecutive elements, aligned to their bytes: codegen/widen.py) is one access of all its bytes, laid in
  # consecutive VGPRs as memory holds them (8/16-bit elements packed: GEP takes one out)
  if isinstance(x.arg, tuple) or x.dtype.count > 1 and (nbytes := dt.itemsize * x.dtype.count) > 16:
    # a tensor core's fragment (fragment_load, LDS): 16 consecutive bytes a ds_load_b128, or each 16-bit element at its
    # byte offset (the arg) into its half of a VGPR
    d = ctx.new(x.dtype)
    regs = split(d)
    parts = [(f"ds_load_u16_d16{'_hi' if e % 2 else ''}", regs[e // 2], off) for e, off in enumerate(x.arg)] if isinstance(x.arg, tuple) else \
            [("ds_load_b128", f"v[{regs[p // 4][1:]}:{regs[p // 4 + 3][1:]}]", (x.arg or 0) + p) for p in range(0, nbytes, 16)]
    for name, r, off in parts:
      ctx.ins(f"{name} {r}, {ctx[idx]}" + (f" offset:{off}" if off else ""))
      ctx.flight["lgkmcnt"].append(x)
    return d
  if x.dtype.count > 1: kind, d = WIDE_LOADS[dt.itemsize * x.dtype.count], ctx.new(x.dtype)
  else: kind, d = LOADS.get(dt, 'b64' if dt.itemsize == 8 else 'b32'), ctx.new(dt)
  if shared(idx): ctx.ins(f"ds_load_{kind} {d}, {ctx[idx]}{offset_text(x)}")
  else: ctx.ins(f"global_load_{kind} {d}, {ctx[idx]}, {ctx[idx.src[0]]}{offset_text(x)}")
  ctx.flight["lgkmcnt" if shared(idx) else "vmcnt"].append(x)
  return d
def store(ctx: AMDKernel, x: UOp) -> str:
  """A bool gate (a source past the value) stores from the lanes where it holds only: EXEC narrowed around the store."""
  idx, val = x.src[0], x.src[1]
  v = ctx.pair(val) if val.dtype.itemsize == 8 and val.dtype.count == 1 else ctx.vref(val)
  if (gate := next((g for g in x.src[2:] if g.dtype == dtypes.bool), None)) is not None:
    ctx.condition(gate)
    ctx.ins(f"s_mov_b32 {(save := ctx.sreg())}, exec_lo", "s_and_b32 exec_lo, exec_lo, vcc_lo")
  if shared(idx):
    ctx.ins(f"ds_store_{STORES[val.dtype.itemsize * val.dtype.count]} {ctx[idx]}, {v}{offset_text(x)}")
    ctx.flight["lgkmcnt"].append(None)
  else: ctx.ins(f"global_store_{STORES[val.dtype.itemsize * val.dtype.count]} {ctx[idx]}, {v}, {ctx[idx.src[0]]}{offset_text(x)}")
  if gate is not None:
    ctx.ins(f"s_mov_b32 exec_lo, {save}")
    ctx.next_s -= 1
  return ""
def index(ctx: AMDKernel, x: UOp) -> str:
  """A byte address: from the buffer's base address (global: the load's SGPR pair), or in LDS (the shared array's offset)."""
  size, i, d = x.src[0].dtype.base.itemsize, x.src[1], ctx.vreg()
  base = ctx[x.src[0]] if shared(x) else 0
  if i.op is Ops.CONST: ctx.ins(f"v_mov_b32_e32 {d}, {const_text(base + i.arg * size, dtypes.uint32)}")
  elif base: ctx.vop("v_lshl_add_u32", d, ctx[i], str(size.bit_length() - 1), const_text(base, dtypes.uint32))
  else: ctx.vop("v_lshlrev_b32", d, str(size.bit_length() - 1), ctx[i])
  return d
def shuffle_xor(ctx: AMDKernel, x: UOp) -> str:
  """The value of the lane arg apart (lane ^ arg) of the wave: ds_swizzle_b32's BitMode (and_mask 31, xor_mask arg),
  in flight on lgkmcnt like an LDS load."""
  d = ctx.new(x.dtype)
  ctx.ins(f"ds_swizzle_b32 {d}, {ctx.vref(x.src[0])} offset:{31 | x.arg << 10}")
  ctx.flight["lgkmcnt"].append(x)
  return d
def define_local(ctx: AMDKernel, x: UOp) -> int:
  """A shared array: the next 16-byte aligned bytes of the workgroup's LDS; its value is its first byte's offset."""
  base, ctx.lds_bytes = ctx.lds_bytes, ctx.lds_bytes + -(-x.dtype.size * x.dtype.base.itemsize // 16) * 16
  return base

def vectorize(ctx: AMDKernel, x: UOp) -> str:
  """Elements laid in consecutive VGPRs as memory holds them: 32-bit ones one a VGPR, 64-bit ones (a float64's words) a
  pair each, 16- and 8-bit ones (a WMMA's f16/bf16 fragment, a wide store's bytes) two or four to a VGPR, the first in
  the low bits. An 8/16-bit value is held sign- or zero-extended (computed ones with anything above): each is masked to
  its width, but one loaded zero-extended, whose high bits are zero."""
  d, size = ctx.new(x.dtype), x.dtype.itemsize
  if size >= 4:
    for i, s in enumerate(x.src):
      for k, w in enumerate(ctx.words(s) if size == 8 else [ctx[s]]): ctx.ins(f"v_mov_b32_e32 {split(d)[i * size // 4 + k]}, {w}")
    return d
  per, mask = 4 // size, const_text((1 << 8 * size) - 1, dtypes.uint32)
  def bits(s: UOp, into: str) -> str:   # s's own bits, nothing above them
    if s.op is Ops.LOAD and s.dtype.count == 1 and not signed(s.dtype): return ctx.to_vgpr(ctx[s])
    ctx.vop("v_and_b32", into, mask, ctx[s])
    return into
  for j, dh in enumerate(split(d)):
    elems = x.src[j * per:(j + 1) * per]
    low = bits(elems[0], dh)
    for k, e in enumerate(elems[1:], 1):
      t = ctx.vreg()
      ctx.vop("v_lshl_or_b32", dh, bits(e, t), str(8 * size * k), low)
      ctx.release(t)
      low = dh
    if low != dh: ctx.ins(f"v_mov_b32_e32 {dh}, {low}")
  return d
def gep(ctx: AMDKernel, x: UOp) -> str:
  """Element x.arg of a vector: of 32 or 64 bits, the vector's own VGPR or pair (the vector lives while they are read:
  last_uses; nothing writes a source's registers but an accumulator's step), else copied out: an 8/16-bit element's
  bits from its VGPR, sign- or zero-extended as a load of it would leave them."""
  vec, size, i = ctx[x.src[0]], x.dtype.itemsize, x.arg
  if size >= 4 and vec.startswith("v["):
    ctx.aliases.add(x)
    words = split(vec)[i * size // 4:(i + 1) * size // 4]
    return words[0] if size == 4 else f"v[{words[0][1:]}:{words[-1][1:]}]"
  if size == 8:
    d = ctx.vreg(2)
    for dh, w in zip(split(d), split(vec)[2 * i:2 * i + 2]): ctx.ins(f"v_mov_b32_e32 {dh}, {w}")
    return d
  d, word = ctx.vreg(), split(vec)[i * size // 4]
  if size == 4: ctx.ins(f"v_mov_b32_e32 {d}, {word}")
  else: ctx.vop("v_bfe_i32" if signed(x.dtype) else "v_bfe_u32", d, word, str(8 * (i * size % 4)), str(8 * size))
  return d
def wmma(ctx: AMDKernel, x: UOp) -> str:
  """D = A @ B + C (D = C's registers in a reduction's step)."""
  a, b, c = x.src
  d = ctx[ctx.into_acc[x]] if x in ctx.into_acc else ctx.move(ctx.new(x.dtype), c)
  return ctx.ins(f"{x.arg.name} {d}, {ctx[a]}, {ctx[b]}, {d}") or d
def vector_alu(ctx: AMDKernel, x: UOp) -> str:
  """A vector op (tensor-core accumulators summed) lane by lane (ISAKernel.lanes), the lanes moved into the vector's VGPRs."""
  d = ctx.new(x.dtype)
  for dh, r in zip(split(d), ctx.lanes(x)):
    ctx.ins(f"v_mov_b32_e32 {dh}, {r}")
    ctx.release(r)
  return d
def barrier(ctx: AMDKernel) -> str:
  """The workgroup's LDS stores done (lgkmcnt(0)) before its waves meet; global loads may stay in flight across it."""
  ctx.ins("s_waitcnt lgkmcnt(0)", "s_barrier")
  ctx.flight["lgkmcnt"].clear()
  return ""
def loop(ctx: AMDKernel, x: UOp) -> str:
  """A loop of a constant number of trips (one or more) is tested at its end: every lane counts alike, so the wave
  branches back while the count is short (VCC), 3 instructions a trip. Another (its bound a value, perhaps 0) is tested
  at its top: lanes whose counter reached the end stop (exec), the loop ends when no lane is left."""
  d = ctx.vreg()
  ctx.ins(f"v_mov_b32_e32 {d}, 0")
  if x.src[0].op is Ops.CONST and x.src[0].arg >= 1:
    ctx.label(top := ctx.fresh_label())
    ctx.loops.append((top, None, None))
    return d
  top, end, save = ctx.fresh_label(), ctx.fresh_label(), ctx.sreg()
  ctx.ins(f"s_mov_b32 {save}, exec_lo")
  ctx.label(top)
  ctx.vop("v_cmp_gt_i32", "vcc_lo", ctx[x.src[0]], d)
  ctx.ins("s_and_b32 exec_lo, exec_lo, vcc_lo", f"s_cbranch_execz {end}")
  ctx.loops.append((top, end, save))
  return d
def end_loop(ctx: AMDKernel, x: UOp) -> str:
  top, end, save = ctx.loops.pop()
  rng = x.src[0]
  ctx.vop("v_add_nc_u32", ctx[rng], "1", ctx[rng])
  if end is None:
    ctx.vop("v_cmp_gt_i32", "vcc_lo", ctx[rng.src[0]], ctx[rng])
    return ctx.ins(f"s_cbranch_vccnz {top}")
  ctx.ins(f"s_branch {top}")
  ctx.label(end)
  ctx.next_s -= 1
  return ctx.ins(f"s_mov_b32 exec_lo, {save}")

def cast(ctx: AMDKernel, x: UOp) -> str:
  y, src, dst = x.src[0], x.src[0].dtype.scalar, x.dtype.scalar
  a, d = ctx.pair(y) if src == dtypes.float64 else ctx[y], ctx.new(dst)
  if dst == dtypes.bool:
    ctx.vop(f"v_cmp_neq_{FT[src]}" if dtypes.is_float(src) else "v_cmp_ne_u32", "vcc_lo", "0", a if src == dtypes.float64 else ctx.vref(y))
    return ctx.bool_from_vcc(d)
  if dtypes.is_float(dst):   # between floats (half from and to float32 only: the core converts the rest through it), from ints
    ctx.vop(f"v_cvt_{FT[dst]}_{FT.get(src) or ('i32' if signed(src) else 'u32')}", d, a)
  elif dtypes.is_float(src):   # saturating conversion (NaN -> 0), then clamped to a narrower integer's range
    ctx.vop(f"v_cvt_{'i32' if signed(dst) else 'u32'}_{FT[src]}", d, a)
    ctx.saturate(d, dst)
  else:   # between integers (and from bool's 0/1): the same low bits, wrapped to a narrower type
    ctx.ins(f"v_mov_b32_e32 {d}, {a}")
    if dst.itemsize < 4 and (src == dtypes.bool or dst.itemsize < src.itemsize or signed(dst) != signed(src)): ctx.wrap(d, dst)
  return d

def bitcast(ctx: AMDKernel, x: UOp) -> str:
  y, src, dst = x.src[0], x.src[0].dtype.scalar, x.dtype
  if dst.itemsize * dst.count == 8: return ctx.move(ctx.vreg(2), y)   # float64 <-> its words (a uint32 pair)
  d = ctx.vreg()
  ctx.ins(f"v_mov_b32_e32 {d}, {ctx[y]}")
  return ctx.wrap(d, dst) if src == dtypes.float16 else d   # a half's 16 bits, as a 16-bit int

def alu32(ctx: AMDKernel, x: UOp) -> str:
  """x on 32-bit integer registers (and bool as 0/1); comparisons and selections of every dtype."""
  op, t = x.op, x.src[-1].dtype.scalar
  a = [ctx.pair(s) if s.dtype == dtypes.float64 else ctx[s] for s in x.src]
  if op is Ops.WHERE:
    ctx.condition(x.src[0])
    return ctx.select_words(ctx.new(t), a[1], a[2])
  if op in GroupOp.Comparison:
    name = {Ops.CMPLT: "lt", Ops.CMPNE: "neq" if dtypes.is_float(t) else "ne", Ops.CMPEQ: "eq"}[op]
    ctx.vop(f"v_cmp_{name}_{FT.get(t) or ('i32' if op is Ops.CMPLT and signed(t) else 'u32')}", "vcc_lo", a[0], a[1])
    ctx.vcc = x
    return ctx.bool_from_vcc(ctx.vreg())
  if dtypes.is_float(t): return float_alu(ctx, x, ctx[ctx.into_acc[x]] if x in ctx.into_acc else ctx.new(t), a, FT[t])
  d = ctx.vreg()
  if t == dtypes.bool: ctx.vop("v_xor_b32", d, "1", a[0]) if op is Ops.NEG else ctx.vop(BOOL_OPS[op], d, a[0], a[1])
  # a product with a power of two is a shift (v_mul_lo_u32 is a quarter-rate instruction; the low 32 bits are the same)
  elif op is Ops.MUL and (j := next((j for j, c in enumerate(x.src) if c.op is Ops.CONST and c.arg > 0 and c.arg & (c.arg - 1) == 0), None)) is not None:
    ctx.vop("v_lshlrev_b32", d, const_text(x.src[j].arg.bit_length() - 1, dtypes.uint32), a[1 - j])
  elif op in INT_OPS: ctx.vop(INT_OPS[op].format(s="i" if signed(t) else "u"), d, *a)
  elif op is Ops.NEG: ctx.vop("v_sub_nc_u32", d, "0", a[0])
  elif op in (Ops.SHL, Ops.SHR):   # the shift amount is the first operand, masked to 5 bits by the hardware
    ctx.vop("v_lshlrev_b32" if op is Ops.SHL else "v_ashrrev_i32" if signed(t) else "v_lshrrev_b32", d, a[1], a[0])
  elif op is Ops.MULACC:
    ctx.vop("v_mul_lo_u32", d, a[0], a[1])
    ctx.vop("v_add_nc_u32", d, a[2], d)
  # a shift or a mask where it is one (address math), not the ~30 instructions of a division
  elif (k := shift_of_divisor(x)) is not None:
    if op is Ops.IDIV: ctx.vop("v_lshrrev_b32", d, const_text(k, dtypes.uint32), a[0])
    else: ctx.vop("v_and_b32", d, const_text((1 << k) - 1, dtypes.uint32), a[0])
  elif (c := unsigned_divisor(x)) is not None and x.src[0].vmax < 1 << 31: ctx.divide_by_constant(d, a[0], c, op is Ops.MOD)
  else: ctx.int_divmod(d, a[0], a[1], signed(t), op is Ops.MOD)
  return d

def float_alu(ctx: AMDKernel, x: UOp, d: str, a: list[str], ft: str) -> str:
  """float32 in a VGPR, float64 in a pair: the hardware's instructions, exact division and square root built on them."""
  op, hi = x.op, (lambda r: halves(r)[1] if ft == "f64" else r)   # the word holding the sign
  if op in (Ops.ADD, Ops.MUL, Ops.TRUNC): ctx.vop(f"v_{op.name.lower()}_{ft}", d, *a)
  elif op is Ops.SUB: ctx.vop(f"v_add_{ft}", d, a[0], f"-{a[1]}") if ft == "f64" else ctx.vop("v_sub_f32", d, a[0], a[1])
  elif op is Ops.MULACC: ctx.vop(f"v_fma_{ft}", d, *a)   # rounded once
  elif op is Ops.NEG:
    if ft == "f64": ctx.ins(f"v_mov_b32_e32 {halves(d)[0]}, {halves(a[0])[0]}")
    ctx.vop("v_xor_b32", hi(d), "0x80000000", hi(a[0]))
  elif op is Ops.MAX:   # NaN in either gives NaN; of equal values (0 and -0) the first
    ctx.vop(f"v_cmp_lt_{ft}", "vcc_lo", a[0], a[1])
    ctx.select_words(d, a[1], a[0])
    ctx.vop(f"v_cmp_u_{ft}", "vcc_lo", a[0], a[1])
    ctx.select_words(d, ctx.pair(UOp.const(dtypes.float64, math.nan)) if ft == "f64" else "0x7fc00000", d)
  elif op is Ops.SQRT: ctx.square_root(d, ctx.to_vgpr(a[0]), ft)
  elif op in (Ops.EXP2, Ops.LOG2) and ft == "f32": ctx.exp2_log2(d, ctx.to_vgpr(a[0]), op is Ops.EXP2)
  elif op in (Ops.FDIV, Ops.RECIP):
    one = ctx.pair(UOp.const(dtypes.float64, 1.0)) if ft == "f64" else ctx.to_vgpr("1.0")
    ctx.divide(d, one if op is Ops.RECIP else ctx.to_vgpr(a[0]), ctx.to_vgpr(a[-1]), ft)
  else: raise UnsupportedError(f"backend AMD has no {op} on {x.dtype.scalar.name}")
  return d

BOOL_OPS = {Ops.ADD: "v_or_b32", Ops.OR: "v_or_b32", Ops.MAX: "v_or_b32", Ops.MUL: "v_and_b32", Ops.AND: "v_and_b32", Ops.XOR: "v_xor_b32"}
INT_OPS = {Ops.ADD: "v_add_nc_u32", Ops.SUB: "v_sub_nc_u32", Ops.MUL: "v_mul_lo_u32", Ops.AND: "v_and_b32", Ops.OR: "v_or_b32",
           Ops.XOR: "v_xor_b32", Ops.MAX: "v_max_{s}32"}
FT = {dtypes.float16: "f16", dtypes.float32: "f32", dtypes.float64: "f64"}   # the instructions' float types

class RDNA3Renderer(ISARenderer):
  """gfx1100, wave32. global ids from workgroup ids and work-item ids; local ids when the kernel has lidx SPECIALs."""
  device, language = "AMD", "RDNA3 assembly"
  supported_dtypes = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})
  alu_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.float64})
  float_conversions = frozenset({dtypes.float16})   # v_cvt_f16_f32 and v_cvt_f32_f16
  mulacc_dtypes = frozenset({dtypes.float16, dtypes.float32, dtypes.float64})   # v_fma_f32, v_fma_f64 (half: the core's, in float32)
  global_dims = 3
  global_max = (2**31 - 1,) * 3
  has_local = True
  has_shared = True        # DEFINE_LOCAL: LDS (ds_load/ds_store), BARRIER: s_barrier
  shared_max = 64 << 10    # LDS a workgroup may allocate on gfx11
  local_max = (1024, 1024, 1024)
  max_threads_per_group = 1024
  shuffle_width = 32       # SHUFFLE_XOR: ds_swizzle_b32 across a wave's 32 lanes
  max_buffers = 32
  registers = 256          # VGPRs per lane of a wave32 (the renderer refuses a kernel needing more)
  index_bits = 32
  upcast_max = 4
  memory_vector = 16       # global_load/store and ds_load/store of b64 and b128: 16 bytes of consecutive elements at most
  # v_sin_f32 is good near zero only, and the hardware has no float remainder and no float64 transcendentals
  # and a tensor core's fragment read from consecutive LDS elements is one load (fragment_load)
  extra_matcher = sin_rules + fmod_rules + exp2_log2_f64_rules + fragment_rules(fragment_load)
  # v_wmma_f32_16x16x16_{f16,bf16} in wave32, laid out as the RDNA3 ISA says: lane l holds row l % 16 of A and column
  # l % 16 of B (K = 0..15 its 16 elements; lanes 16-31 copies of lanes 0-15), and in element v of C and D the row
  # 2 v + l // 16 (rows interleaved by half-wave), column l % 16
  tensor_cores = tuple(TensorCore(f"v_wmma_f32_16x16x16_{t}", (16, 16, 16), dt, dtypes.float32, 32,
                                  a=((("m", 0), ("m", 1), ("m", 2), ("m", 3), None), (("k", 0), ("k", 1), ("k", 2), ("k", 3))),
                                  b=((("n", 0), ("n", 1), ("n", 2), ("n", 3), None), (("k", 0), ("k", 1), ("k", 2), ("k", 3))),
                                  c=((("n", 0), ("n", 1), ("n", 2), ("n", 3), ("m", 0)), (("m", 1), ("m", 2), ("m", 3))))
                       for dt, t in ((dtypes.float16, "f16"), (dtypes.bfloat16, "bf16")))
  instruction, kernel = "  {}", AMDKernel
  def render(self, name: str, uops: list[UOp]) -> str:
    try: return super().render(name, uops)
    # the LDS loads issued early took VGPRs the kernel needs: each at its place then (another error is raised again)
    except UnsupportedError: return self.render_kernel(self.kernel(self, name, uops, ahead=0).write_all())
  def render_kernel(self, k: AMDKernel) -> str:
    k.ins("s_endpgm")
    head = [f".kernel {k.name}", f".vgprs {k.max_v}", f".sgprs {k.max_s}", f".args {k.nbufs}", f".vars {len(k.vars)}", f".lds {k.lds_bytes}"]
    return "\n".join(head + k.lines) + "\n"

  rules = PatternMatcher([
    (UPat(Ops.CONST, name="x"), lambda ctx, x: const_text(x.arg, x.dtype)),
    (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: f"s[{FIRST_PARAM_SGPR + 2 * x.arg}:{FIRST_PARAM_SGPR + 2 * x.arg + 1}]"),
    (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.ins(f"v_mov_b32_e32 {(d := ctx.vreg())}, s{FIRST_PARAM_SGPR + 2 * ctx.nbufs + ctx.vars.index(x)}") or d),
    (UPat(Ops.SPECIAL, name="x"), lambda ctx, x: ctx.special(x)),
    (UPat(Ops.INDEX, name="x"), index),
    (UPat(Ops.LOAD, name="x"), load),
    (UPat(Ops.STORE, name="x"), store),
    (UPat(Ops.RANGE, name="x"), loop),
    (UPat(Ops.ENDRANGE, name="x"), end_loop),
    (UPat(Ops.DEFINE_ACC, name="x"), lambda ctx, x: ctx.move(ctx.new(x.dtype), x.src[0])),
    (UPat(Ops.ASSIGN, name="x"), lambda ctx, x: ctx.move(ctx[x.src[0]], x.src[1])),
    (UPat(Ops.CAST, name="x"), cast),
    (UPat(Ops.BITCAST, name="x"), bitcast),
    (UPat(Ops.DEFINE_LOCAL, name="x"), define_local),
    # every wave's LDS accesses done (lgkmcnt), then the workgroup's waves meet
    (UPat(Ops.BARRIER), barrier),
    (UPat(Ops.SHUFFLE_XOR, name="x"), shuffle_xor),
    # vectors (a float64's words, a WMMA's fragments and accumulator): an element is copied out, since a register is freed
    # after its own last use
    (UPat(Ops.VECTORIZE, name="x"), vectorize),
    (UPat(Ops.GEP, name="x"), gep),
    (UPat(Ops.WMMA, name="x"), wmma),
    (UPat(GroupOp.ALU, name="x"), lambda ctx, x: vector_alu(ctx, x) if x.dtype.count > 1 else None),
    (UPat(GroupOp.ALU, name="x"), alu32),
  ])
