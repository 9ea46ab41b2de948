"""NV renderer: linear UOps -> one PTX kernel (ISA 8.0, sm_90 by default, NV_ARCH to choose) with the core's exact semantics."""
from __future__ import annotations
import os, re, struct
from collections import defaultdict
from tinycore.dtype import DType, dtypes, ALL_DTYPES
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.renderer import Renderer, TensorCore
from tinycore.codegen.transcendental import sin_rules, fmod_rules, exp2_log2_f64_rules
from tinycore.runtime.errors import UnsupportedError

PTX_VERSION = "8.0"
GRID_YZ_MAX = 65535    # gridDim.y/z limit: the driver launches taller grids in slices, passing each slice's first block
LAUNCH_THREADS, LAUNCH_GROUPS = "// launch: threads", "// launch: groups"   # what global_size counts, read by the driver

# registers by the kind of value they hold: small ints live sign/zero-extended in 32 bits, half and bfloat16 values in f32
# registers (always exactly a value of their type: every op result is rounded back), bool in predicates
REG_DECL = {"p": ".pred", "r": ".b32", "rd": ".b64", "f": ".f32", "fd": ".f64", "h": ".b16"}
SMALL_INTS = {dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16}
def reg_kind(dt: DType) -> str:
  dt = dt.scalar
  if dt == dtypes.bool: return "p"
  if dt in (dtypes.int64, dtypes.uint64): return "rd"
  if dt == dtypes.float64: return "fd"
  if dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32): return "f"
  return "r"

def op_type(dt: DType) -> str:
  """The PTX instruction type a value of dt is computed with."""
  dt = dt.scalar
  if dt == dtypes.float64: return "f64"
  if dtypes.is_float(dt): return "f32"
  if dt == dtypes.bool: return "pred"
  bits = 64 if dt.itemsize == 8 else 32
  return f"{'u' if dtypes.is_unsigned(dt) else 's'}{bits}"

def mem_type(dt: DType) -> str:
  """The PTX type of dt in memory (ld/st)."""
  dt = dt.scalar
  if dt == dtypes.bool: return "u8"
  if dt in (dtypes.float16, dtypes.bfloat16): return "b16"
  if dtypes.is_float(dt): return f"f{8 * dt.itemsize}"
  return f"{'u' if dtypes.is_unsigned(dt) else 's'}{8 * dt.itemsize}"

def render_const(x, dt: DType) -> str:
  dt = dt.scalar
  if dt == dtypes.float64: return "0d%016X" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]
  if dtypes.is_float(dt): return "0f%08X" % struct.unpack("<I", struct.pack("<f", float(x)))[0]   # f16/bf16 values are exact in f32
  if dt == dtypes.bool: return "1" if x else "0"
  return str(int(x))

class PTXRenderer(Renderer):
  """The NVIDIA target: every dtype, a 3-d grid of thread blocks (y/z sliced by the driver past 65535), 64-bit addressing."""
  device = "NV"
  supported_dtypes = frozenset(ALL_DTYPES)
  global_dims = 3
  global_max = (2**31 - 1,) * 3       # gridDim.y/z <= 65535 is met by the driver launching slices, never by truncating
  has_local = True                    # SPECIAL lidxN: threads of a block; global_size then counts blocks
  fma = True                          # a product joining a float32/float64 accumulator is one fma.rn
  has_shared = True                   # DEFINE_LOCAL: .shared arrays (the layout of global memory); BARRIER: bar.sync
  shared_max = 48 << 10               # static .shared per block without opting in to more
  local_max = (1024, 1024, 64)
  max_threads_per_group = 1024
  index_bits = 64
  # PTX has no float remainder, no float64 transcendentals, and a sin.approx good to 2**-20.5 only inside +-100 pi
  extra_matcher = sin_rules + fmod_rules + exp2_log2_f64_rules
  # mma.sync m16n8k16 (sm_80+), fragments as the PTX ISA lays them out: lane = groupID*4 + threadID_in_group; A's element
  # i at row groupID + 8*((i>>1)&1), column tig*2 + (i&1) + 8*(i>>2); B's at row tig*2 + (i&1) + 8*(i>>1), column
  # groupID; C's and D's at row groupID + 8*(i>>1), column tig*2 + (i&1)
  tensor_cores = tuple(TensorCore(f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32", (16, 8, 16), dt, dtypes.float32, 32,
                                  a=((("k", 1), ("k", 2), ("m", 0), ("m", 1), ("m", 2)), (("k", 0), ("m", 3), ("k", 3))),
                                  b=((("k", 1), ("k", 2), ("n", 0), ("n", 1), ("n", 2)), (("k", 0), ("k", 3))),
                                  c=((("n", 1), ("n", 2), ("m", 0), ("m", 1), ("m", 2)), (("n", 0), ("m", 3))))
                       for dt, t in ((dtypes.float16, "f16"), (dtypes.bfloat16, "bf16")))
  def __init__(self, arch: str | None = None):
    self.arch = arch or os.environ.get("NV_ARCH", "sm_90")
    if not re.fullmatch(r"sm_\d+a?", self.arch): raise ValueError(f"NV_ARCH={self.arch!r}: expected an NVIDIA arch like sm_80 or sm_90")
    if int(re.sub(r"\D", "", self.arch)) < 80:
      raise UnsupportedError(f"backend NV: {self.arch} is not supported (bfloat16 conversions and PTX {PTX_VERSION} need sm_80 or newer)")
  def render(self, name: str, uops: list[UOp]) -> str: return _Kernel(name, uops, self.arch).source()

class _Kernel:
  """The state of rendering one kernel: registers given to values, the instructions written, the labels used."""
  def __init__(self, name: str, uops: list[UOp], arch: str):
    self.name, self.uops, self.arch = name, uops, arch
    self.regs: dict[UOp, str] = {}
    self.counts: dict[str, int] = defaultdict(int)
    self.lines: list[str] = []
    self.shared: list[str] = []   # .shared declarations, before the instructions
    self.params = sorted({u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}.items())
    self.vars = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg)

  def reg(self, kind: str) -> str:
    n = self.counts[kind]
    self.counts[kind] += 1
    return f"%{kind}{n}"
  def new(self, dt: DType) -> str: return self.reg(reg_kind(dt))
  def ins(self, s: str) -> None: self.lines.append(f"\t{s};")
  def ref(self, u: UOp) -> str:
    if u not in self.regs: raise UnsupportedError(f"backend NV: kernel {self.name} uses {u.op} before it is computed")
    return self.regs[u]

  def source(self) -> str:
    specials = [u for u in self.uops if u.op is Ops.SPECIAL]
    groups = any(s.arg.startswith("lidx") for s in specials)
    for u in self.uops: self.emit(u, groups)
    params = [f".param .u64 data{p}" for p, _ in self.params] + [f".param .{op_type(v.dtype)} var{i}" for i, v in enumerate(self.vars)]
    params += [".param .u32 block_y0", ".param .u32 block_z0"]
    head = [f"// {self.name}", LAUNCH_GROUPS if groups else LAUNCH_THREADS, f".version {PTX_VERSION}", f".target {self.arch}",
            ".address_size 64", f".visible .entry {self.name}(", "\t" + ",\n\t".join(params) + ")", "{"]
    decls = [f"\t.reg {REG_DECL[k]} %{k}<{n}>;" for k, n in sorted(self.counts.items())] + self.shared
    return "\n".join(head + decls + self.lines + ["\tret;", "}", ""])

  # ***** thread ids *****

  def special(self, u: UOp, groups: bool) -> None:
    """gidxN: with local ids the block id, else the thread id along N; lidxN the thread within its block. Dimensions y
    and z add the slice's first block (a kernel parameter); threads past a size (a partial last block) exit."""
    d = int(u.arg[4:])
    axis = "xyz"[d]
    out = self.reg("r")
    if u.arg.startswith("lidx"):
      self.ins(f"mov.u32 {out}, %tid.{axis}")
    else:
      self.ins(f"mov.u32 {out}, %ctaid.{axis}")
      if d > 0:
        first = self.reg("r")
        self.ins(f"ld.param.u32 {first}, [block_{axis}0]")
        self.ins(f"add.s32 {out}, {out}, {first}")
      if not groups:
        size, tid = self.reg("r"), self.reg("r")
        self.ins(f"mov.u32 {size}, %ntid.{axis}")
        self.ins(f"mov.u32 {tid}, %tid.{axis}")
        self.ins(f"mad.lo.s32 {out}, {out}, {size}, {tid}")
        outside = self.reg("p")
        self.ins(f"setp.ge.s32 {outside}, {out}, {self.as32(u.src[0])}")
        self.ins(f"@{outside} exit")
    if u.dtype.itemsize == 8:
      wide = self.reg("rd")
      self.ins(f"cvt.s64.s32 {wide}, {out}")
      out = wide
    self.regs[u] = out

  def as32(self, u: UOp) -> str:
    """A 32-bit register (or immediate) holding the launch size u (sizes fit 32 bits: global_max)."""
    if u.op is Ops.CONST: return str(int(u.arg))
    r = self.ref(u)
    if u.dtype.itemsize != 8: return r
    out = self.reg("r")
    self.ins(f"cvt.u32.u64 {out}, {r}")
    return out

  # ***** one UOp *****

  def emit(self, u: UOp, groups: bool) -> None:
    op, dt = u.op, u.dtype
    if op is Ops.DEFINE_GLOBAL:
      r = self.new(dtypes.uint64)
      self.ins(f"ld.param.u64 {r}, [data{u.arg}]")
      self.ins(f"cvta.to.global.u64 {r}, {r}")
      self.regs[u] = r
    elif op is Ops.DEFINE_VAR:
      self.regs[u] = r = self.new(dt)
      self.ins(f"ld.param.{op_type(dt)} {r}, [var{self.vars.index(u)}]")
    elif op is Ops.SPECIAL: self.special(u, groups)
    elif op is Ops.CONST and dt.count > 1: self.regs[u] = self.vector(dt, render_const(u.arg, dt))
    elif op is Ops.CONST:
      self.regs[u] = r = self.new(dt)
      if dt == dtypes.bool: self.ins(f"setp.ne.u32 {r}, {1 if u.arg else 0}, 0")
      else: self.ins(f"mov.{op_type(dt)} {r}, {render_const(u.arg, dt)}")
    elif op is Ops.VECTORIZE: self.regs[u] = tuple(self.ref(s) for s in u.src)   # a vector is its elements' registers
    elif op is Ops.GEP: self.regs[u] = self.ref(u.src[0])[u.arg]
    elif op is Ops.WMMA: self.regs[u] = self.wmma(u)
    elif op is Ops.RANGE:
      self.regs[u] = r = self.new(dt)
      t, n = op_type(dt), u.arg[0]
      self.ins(f"mov.{t} {r}, 0")
      self.lines.append(f"$loop{n}:")
      done = self.reg("p")
      self.ins(f"setp.ge.{t} {done}, {r}, {self.ref(u.src[0])}")
      self.ins(f"@{done} bra $end{n}")
    elif op is Ops.ENDRANGE:
      r, n = self.ref(u.src[0]), u.src[0].arg[0]
      self.ins(f"add.{op_type(u.src[0].dtype)} {r}, {r}, 1")
      self.ins(f"bra $loop{n}")
      self.lines.append(f"$end{n}:")
    elif op is Ops.DEFINE_ACC and dt.count > 1: self.regs[u] = self.vector(dt, *self.ref(u.src[0]))
    elif op is Ops.DEFINE_ACC:
      self.regs[u] = r = self.new(dt)
      self.mov(r, self.ref(u.src[0]), dt)
    elif op is Ops.ASSIGN:
      for dst, src in zip(*((r,) if isinstance(r := self.ref(x), str) else r for x in u.src)): self.mov(dst, src, dt.scalar)
      self.regs[u] = self.ref(u.src[0])
    elif op is Ops.DEFINE_LOCAL:
      self.shared.append(f"\t.shared .align 16 .b8 smem{u.arg}[{u.dtype.size * u.dtype.base.itemsize}];")
      self.regs[u] = r = self.new(dtypes.uint64)
      self.ins(f"mov.u64 {r}, smem{u.arg}")
    elif op is Ops.BARRIER: self.ins("bar.sync 0")
    elif op is Ops.INDEX:
      buf, idx = u.src[0], u.src[1]
      size = buf.dtype.base.itemsize
      off = self.new(dtypes.uint64)
      if idx.dtype.itemsize == 8: self.ins(f"mul.lo.s64 {off}, {self.ref(idx)}, {size}")
      else: self.ins(f"mul.wide.s32 {off}, {self.ref(idx)}, {size}")
      self.ins(f"add.s64 {off}, {off}, {self.ref(buf)}")
      self.regs[u] = off
    elif op is Ops.LOAD: self.regs[u] = self.load(u.src[0], dt)
    elif op is Ops.STORE:
      gate = next((g for g in u.src[2:] if g.dtype == dtypes.bool), None)
      self.store(u.src[0], u.src[1], None if gate is None else self.ref(gate))
    elif op is Ops.CAST: self.regs[u] = self.cast(u.src[0], dt)
    elif op is Ops.BITCAST: self.regs[u] = self.bitcast(u.src[0], dt)
    elif op in GroupOp.ALU: self.regs[u] = self.alu(op, dt, u.src)
    else: raise UnsupportedError(f"backend NV cannot render {op} in kernel {self.name}")

  def vector(self, dt: DType, *init: str) -> tuple[str, ...]:
    """dt.count fresh registers, each set to its init (one init: all the same)."""
    regs = tuple(self.new(dt.scalar) for _ in range(dt.count))
    for r, v in zip(regs, init * dt.count if len(init) == 1 else init): self.mov(r, v, dt.scalar)
    return regs

  def wmma(self, u: UOp) -> tuple[str, ...]:
    """mma.sync: A's and B's 16-bit elements packed two to a .b32 register (the lower element in the low half), the
    f32 accumulators as they are."""
    tc, (a, b, c) = u.arg, (self.ref(s) for s in u.src)
    t = "f16" if tc.dtype_in == dtypes.float16 else "bf16"
    def pack(regs: tuple[str, ...]) -> list[str]:   # exact: the f32 registers hold values of the type
      out = []
      for lo, hi in zip(regs[0::2], regs[1::2]):
        out.append(r := self.reg("r"))
        if t == "f16":
          h = (self.reg("h"), self.reg("h"))
          for x, y in zip(h, (lo, hi)): self.ins(f"cvt.rn.f16.f32 {x}, {y}")
          self.ins(f"mov.b32 {r}, {{{h[0]}, {h[1]}}}")
        else:   # a bfloat16 is the top half of its f32
          top, low = self.reg("r"), self.reg("r")
          self.ins(f"mov.b32 {top}, {hi}")
          self.ins(f"and.b32 {top}, {top}, -65536")
          self.ins(f"mov.b32 {low}, {lo}")
          self.ins(f"shr.u32 {low}, {low}, 16")
          self.ins(f"or.b32 {r}, {top}, {low}")
      return out
    d = tuple(self.new(dtypes.float32) for _ in c)
    self.ins(f"{tc.name} {{{', '.join(d)}}}, {{{', '.join(pack(a))}}}, {{{', '.join(pack(b))}}}, {{{', '.join(c)}}}")
    return d

  def mov(self, dst: str, src: str, dt: DType) -> None:
    self.ins(f"mov.{'pred' if dt == dtypes.bool else 'b' + op_type(dt)[1:]} {dst}, {src}")

  # ***** memory *****

  def load(self, idx: UOp, dt: DType) -> str:
    addr, s, space = self.ref(idx), dt.scalar, "shared" if idx.src[0].op is Ops.DEFINE_LOCAL else "global"
    if s == dtypes.bool:
      raw, out = self.reg("r"), self.reg("p")
      self.ins(f"ld.{space}.u8 {raw}, [{addr}]")
      self.ins(f"setp.ne.u32 {out}, {raw}, 0")
      return out
    if s == dtypes.float16:
      h, out = self.reg("h"), self.reg("f")
      self.ins(f"ld.{space}.b16 {h}, [{addr}]")
      self.ins(f"cvt.f32.f16 {out}, {h}")
      return out
    if s == dtypes.bfloat16:
      raw, out = self.reg("r"), self.reg("f")
      self.ins(f"ld.{space}.u16 {raw}, [{addr}]")
      self.ins(f"shl.b32 {raw}, {raw}, 16")
      self.ins(f"mov.b32 {out}, {raw}")
      return out
    out = self.new(s)
    self.ins(f"ld.{space}.{mem_type(s)} {out}, [{addr}]")   # 8/16-bit ints are sign/zero-extended into the 32-bit register
    return out

  def store(self, idx: UOp, val: UOp, gate: str | None = None) -> None:
    addr, v, s, space = self.ref(idx), self.ref(val), val.dtype.scalar, "shared" if idx.src[0].op is Ops.DEFINE_LOCAL else "global"
    if s == dtypes.bool:
      raw = self.reg("r")
      self.ins(f"selp.u32 {raw}, 1, 0, {v}")
      v = raw
    elif s == dtypes.float16:
      h = self.reg("h")
      self.ins(f"cvt.rn.f16.f32 {h}, {v}")   # exact: the register holds a half value
      v = h
    elif s == dtypes.bfloat16:
      raw = self.reg("r")
      self.ins(f"mov.b32 {raw}, {v}")
      self.ins(f"shr.u32 {raw}, {raw}, 16")
      v = raw
    self.ins(f"{'' if gate is None else f'@{gate} '}st.{space}.{mem_type(s)} [{addr}], {v}")

  # ***** rounding values back to their type *****

  def fit(self, r: str, dt: DType) -> str:
    """r (an f32 or 32-bit int register) made a value of dt again: small ints wrap, half and bfloat16 round to nearest even."""
    dt = dt.scalar
    if dt in SMALL_INTS:
      if dtypes.is_unsigned(dt): self.ins(f"and.b32 {r}, {r}, {(1 << SMALL_INTS[dt]) - 1}")
      else: self.ins(f"cvt.s32.s{SMALL_INTS[dt]} {r}, {r}")
    elif dt == dtypes.float16:
      h = self.reg("h")
      self.ins(f"cvt.rn.f16.f32 {h}, {r}")
      self.ins(f"cvt.f32.f16 {r}, {h}")
    elif dt == dtypes.bfloat16: self.bf16_round(r, r)
    return r

  def bf16_round(self, dst: str, src: str) -> None:
    """The f32 in src rounded to the nearest bfloat16 (ties to even), NaN made quiet keeping its top bits (the reference's rule)."""
    b, lsb, nan, q = self.reg("r"), self.reg("r"), self.reg("p"), self.reg("r")
    self.ins(f"mov.b32 {b}, {src}")
    self.ins(f"bfe.u32 {lsb}, {b}, 16, 1")
    self.ins(f"add.s32 {lsb}, {lsb}, 32767")
    self.ins(f"and.b32 {q}, {b}, 2147483647")
    self.ins(f"setp.gt.u32 {nan}, {q}, 2139095040")
    self.ins(f"or.b32 {q}, {b}, 4194304")   # quiet NaN: bit 6 of the bfloat16
    self.ins(f"add.s32 {b}, {b}, {lsb}")
    self.ins(f"selp.b32 {b}, {q}, {b}, {nan}")
    self.ins(f"and.b32 {b}, {b}, -65536")
    self.ins(f"mov.b32 {dst}, {b}")

  # ***** casts *****

  def int_to_f64(self, a: str, src: DType) -> str:
    """An integer as an f64: exact, 64-bit ones past 2**53 first rounded to odd at bit 11 (the bits below cut, bit 11 set
    if any was), so rounding the double on to a narrower float rounds the integer once."""
    d = self.reg("fd")
    if src.itemsize < 8:
      self.ins(f"cvt.rn.f64.{op_type(src)} {d}, {a}")
      return d
    lo, y, sticky, nz, big, big2 = self.reg("rd"), self.reg("rd"), self.reg("rd"), self.reg("p"), self.reg("p"), self.reg("p")
    self.ins(f"and.b64 {lo}, {a}, 2047")
    self.ins(f"setp.ne.u64 {nz}, {lo}, 0")
    self.ins(f"sub.s64 {y}, {a}, {lo}")
    self.ins(f"selp.b64 {sticky}, 2048, 0, {nz}")
    self.ins(f"or.b64 {y}, {y}, {sticky}")
    if dtypes.is_unsigned(src): self.ins(f"setp.ge.u64 {big}, {a}, {2**53}")
    else:
      self.ins(f"setp.ge.s64 {big}, {a}, {2**53}")
      self.ins(f"setp.le.s64 {big2}, {a}, {-2**53}")
      self.ins(f"or.pred {big}, {big}, {big2}")
    self.ins(f"selp.b64 {y}, {y}, {a}, {big}")
    self.ins(f"cvt.rn.f64.{op_type(src)} {d}, {y}")
    return d

  def odd_f32(self, out: str, d: str) -> None:
    """The f64 in d as an f32 rounded to odd (toward zero, the last bit set where that dropped anything): rounded on to
    bfloat16 it rounds d once. From the nearest f32: one step back toward zero where that rounded away, then the bit."""
    back, bits, step, away, neg, inexact = self.reg("fd"), self.reg("r"), self.reg("r"), self.reg("p"), self.reg("p"), self.reg("p")
    self.ins(f"cvt.rn.f32.f64 {out}, {d}")
    self.ins(f"cvt.f64.f32 {back}, {out}")
    self.ins(f"setp.neu.f64 {inexact}, {back}, {d}")
    self.ins(f"setp.gt.f64 {away}, {back}, {d}")
    self.ins(f"setp.lt.f64 {neg}, {d}, {render_const(0, dtypes.float64)}")
    self.ins(f"xor.pred {away}, {away}, {neg}")   # past d, away from zero: above a positive d, below a negative one
    self.ins(f"and.pred {away}, {away}, {inexact}")
    self.ins(f"mov.b32 {bits}, {out}")
    self.ins(f"selp.b32 {step}, 1, 0, {away}")
    self.ins(f"sub.s32 {bits}, {bits}, {step}")
    self.ins(f"selp.b32 {step}, 1, 0, {inexact}")
    self.ins(f"or.b32 {bits}, {bits}, {step}")
    self.ins(f"mov.b32 {out}, {bits}")

  def bitcast(self, x: UOp, dt: DType) -> str:
    src, dst, a = x.dtype.scalar, dt.scalar, self.ref(x)
    if src.itemsize != dst.itemsize or dtypes.bool in (src, dst): raise UnsupportedError(f"backend NV cannot bitcast {src.name} to {dst.name}")
    out = self.new(dst)
    if src.itemsize == 2:   # half/bfloat16 live in f32 registers, 16-bit ints sign/zero-extended in 32: go through the 16 bits
      bits = self.reg("r")
      if src == dtypes.float16:
        h = self.reg("h")
        self.ins(f"cvt.rn.f16.f32 {h}, {a}")
        self.ins(f"cvt.u32.u16 {bits}, {h}")
      elif src == dtypes.bfloat16:
        self.ins(f"mov.b32 {bits}, {a}")
        self.ins(f"shr.u32 {bits}, {bits}, 16")
      else: self.ins(f"and.b32 {bits}, {a}, 65535")
      if dst == dtypes.float16:
        h = self.reg("h")
        self.ins(f"cvt.u16.u32 {h}, {bits}")
        self.ins(f"cvt.f32.f16 {out}, {h}")
      elif dst == dtypes.bfloat16:
        self.ins(f"shl.b32 {bits}, {bits}, 16")
        self.ins(f"mov.b32 {out}, {bits}")
      else:
        self.ins(f"mov.b32 {out}, {bits}")
        self.fit(out, dst)
      return out
    self.ins(f"mov.b{64 if dst.itemsize == 8 else 32} {out}, {a}")   # 8-bit ints live in 32-bit registers
    return self.fit(out, dst)

  def cast(self, x: UOp, dt: DType) -> str:
    src, dst, a = x.dtype.scalar, dt.scalar, self.ref(x)
    if src == dst: return a
    out = self.new(dst)
    if dst == dtypes.bool:
      self.ins(f"setp.{'neu' if dtypes.is_float(src) else 'ne'}.{op_type(src)} {out}, {a}, {render_const(0, src)}")   # NaN is true
      return out
    if src == dtypes.bool:
      one = render_const(1, dst)
      self.ins(f"selp.{'b' + op_type(dst)[1:]} {out}, {one}, {render_const(0, dst)}, {a}")
      return out
    ts, td = op_type(src), op_type(dst)
    if dst == dtypes.bfloat16 and (src == dtypes.float64 or dtypes.is_int(src)):   # rounded once: through an exact double
      self.odd_f32(out, self.int_to_f64(a, src) if dtypes.is_int(src) else a)
      return self.fit(out, dst)
    if dtypes.is_float(dst):
      if dst == dtypes.float16 and src == dtypes.float64:   # one rounding, straight to half
        h = self.reg("h")
        self.ins(f"cvt.rn.f16.f64 {h}, {a}")
        self.ins(f"cvt.f32.f16 {out}, {h}")
        return out
      if ts == td: self.ins(f"mov.f32 {out}, {a}")   # between f32, half and bfloat16: the value is exact in f32
      else: self.ins(f"cvt{'.rn' if not (ts == 'f32' and td == 'f64') else ''}.{td}.{ts} {out}, {a}")
      return self.fit(out, dst)
    if dtypes.is_float(src):
      it = "s32" if dst in SMALL_INTS else td   # small ints saturate in 32 bits, then clamp to their range
      self.ins(f"cvt.rzi.{it}.{ts} {out}, {a}")   # PTX float->int conversions saturate
      self.nan_to_zero(out, a, it, ts)
      if dst in SMALL_INTS:
        bits = SMALL_INTS[dst]
        lo, hi = (0, (1 << bits) - 1) if dtypes.is_unsigned(dst) else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        self.ins(f"max.s32 {out}, {out}, {lo}")
        self.ins(f"min.s32 {out}, {out}, {hi}")
      return out
    # int -> int: the bits, truncated or extended by the source's signedness, then wrapped to a small type
    if reg_kind(src) == reg_kind(dst): self.ins(f"mov.b{td[1:]} {out}, {a}")
    else: self.ins(f"cvt.{td}.{ts} {out}, {a}")
    return self.fit(out, dst)

  def nan_to_zero(self, out: str, a: str, it: str, ft: str) -> None:
    """The core's float->int cast gives 0 for NaN. PTX's cvt does so only from a float narrower than 64 bits into an integer
    narrower than 64 bits: from an .f64, or into an .s64/.u64, NaN gives 1 << (bits - 1) (the ISA's Integer Notes; an H100
    gives exactly that, tests/data/h100_cvt_rzi.json), so there NaN is selected to 0 explicitly."""
    if ft != "f64" and it[1:] != "64": return
    nan = self.reg("p")
    self.ins(f"setp.nan.{ft} {nan}, {a}, {a}")
    self.ins(f"selp.b{it[1:]} {out}, 0, {out}, {nan}")

  # ***** arithmetic *****

  def alu(self, op: Ops, dt: DType, srcs: tuple[UOp, ...]) -> str:
    s = [self.ref(x) for x in srcs]
    t = srcs[-1].dtype.scalar   # the operands' dtype (comparisons give bool)
    ty = op_type(t)
    out = self.new(dt)
    if op is Ops.ADD and srcs[0].op is Ops.DEFINE_ACC and srcs[1].op is Ops.MUL and t in (dtypes.float32, dtypes.float64):
      # a product joining a reduction's accumulator: one fma, one rounding (the reduction's own order, as the CPU's)
      self.ins(f"fma.rn.{ty} {out}, {self.ref(srcs[1].src[0])}, {self.ref(srcs[1].src[1])}, {s[0]}")
      return out
    if op is Ops.WHERE:
      if t == dtypes.bool:
        other = self.reg("p")
        self.ins(f"not.pred {other}, {s[0]}")
        self.ins(f"and.pred {other}, {other}, {s[2]}")
        self.ins(f"and.pred {out}, {s[0]}, {s[1]}")
        self.ins(f"or.pred {out}, {out}, {other}")
      else: self.ins(f"selp.{'b' + ty[1:]} {out}, {s[1]}, {s[2]}, {s[0]}")
      return out
    if op in GroupOp.Comparison:
      if t == dtypes.bool:
        if op is Ops.CMPLT:
          self.ins(f"not.pred {out}, {s[0]}")
          self.ins(f"and.pred {out}, {out}, {s[1]}")
        else:
          self.ins(f"xor.pred {out}, {s[0]}, {s[1]}")
          if op is Ops.CMPEQ: self.ins(f"not.pred {out}, {out}")
        return out
      cmp = {Ops.CMPLT: "lt", Ops.CMPNE: "neu" if dtypes.is_float(t) else "ne", Ops.CMPEQ: "eq"}[op]
      self.ins(f"setp.{cmp}.{ty} {out}, {s[0]}, {s[1]}")
      return out
    if t == dtypes.bool:
      logic = {Ops.ADD: "or", Ops.OR: "or", Ops.MAX: "or", Ops.MUL: "and", Ops.AND: "and", Ops.XOR: "xor"}
      if op in logic: self.ins(f"{logic[op]}.pred {out}, {s[0]}, {s[1]}")
      elif op is Ops.NEG: self.ins(f"not.pred {out}, {s[0]}")
      else: raise UnsupportedError(f"backend NV has no {op} on bool")
      return out
    if dtypes.is_float(t): return self.fit(self.float_alu(op, t, ty, s, out), t)
    bits = ty[1:]
    if op in (Ops.ADD, Ops.SUB): self.ins(f"{op.name.lower()}.{ty} {out}, {s[0]}, {s[1]}")
    elif op is Ops.MUL: self.ins(f"mul.lo.{ty} {out}, {s[0]}, {s[1]}")
    elif op is Ops.MULACC: self.ins(f"mad.lo.{ty} {out}, {s[0]}, {s[1]}, {s[2]}")
    elif op in (Ops.XOR, Ops.OR, Ops.AND): self.ins(f"{op.name.lower()}.b{bits} {out}, {s[0]}, {s[1]}")
    elif op is Ops.NEG: self.ins(f"neg.s{bits} {out}, {s[0]}")
    elif op is Ops.MAX: self.ins(f"max.{ty} {out}, {s[0]}, {s[1]}")
    elif op is Ops.TRUNC: self.mov(out, s[0], t)
    elif op in (Ops.SHL, Ops.SHR):   # the count is taken mod the width (the reference semantics), as a u32
      width = 8 * t.itemsize
      n = self.reg("r")
      if bits == "64": self.ins(f"cvt.u32.u64 {n}, {s[1]}")
      else: self.mov(n, s[1], dtypes.int32)
      self.ins(f"and.b32 {n}, {n}, {width - 1}")
      kind = "shl.b" if op is Ops.SHL else ("shr.u" if dtypes.is_unsigned(t) else "shr.s")
      self.ins(f"{kind}{bits} {out}, {s[0]}, {n}")
    elif op in (Ops.IDIV, Ops.MOD): self.int_divide(op, t, ty, s, out)
    else: raise UnsupportedError(f"backend NV has no {op} on {t.name}")
    return self.fit(out, t)

  def int_divide(self, op: Ops, t: DType, ty: str, s: list[str], out: str) -> None:
    """C division: truncating, a zero divisor gives 0, MIN / -1 wraps to MIN (and MIN % -1 is 0); PTX leaves those undefined."""
    bits = ty[1:]
    zero, b = self.reg("p"), self.new(t)
    self.ins(f"setp.eq.{ty} {zero}, {s[1]}, 0")
    self.ins(f"selp.b{bits} {b}, 1, {s[1]}, {zero}")
    self.ins(f"{'div' if op is Ops.IDIV else 'rem'}.{ty} {out}, {s[0]}, {b}")
    if not dtypes.is_unsigned(t):
      minus1 = self.reg("p")
      self.ins(f"setp.eq.{ty} {minus1}, {b}, -1")
      alt = self.new(t)
      if op is Ops.IDIV: self.ins(f"neg.s{bits} {alt}, {s[0]}")
      else: self.ins(f"mov.b{bits} {alt}, 0")
      self.ins(f"selp.b{bits} {out}, {alt}, {out}, {minus1}")
    self.ins(f"selp.b{bits} {out}, 0, {out}, {zero}")

  def float_alu(self, op: Ops, t: DType, ty: str, s: list[str], out: str) -> str:
    """f32 (also for half and bfloat16, rounded after) and f64 arithmetic: IEEE rounding (.rn, never contracted into an fma,
    never .ftz); EXP2 and LOG2 in f32 use .approx, whose documented error is inside the float32 tolerance (SIN, float MOD and
    the f64 transcendentals arrive decomposed: transcendental.py)."""
    if op in (Ops.ADD, Ops.SUB, Ops.MUL): self.ins(f"{op.name.lower()}.rn.{ty} {out}, {s[0]}, {s[1]}")
    elif op is Ops.MULACC:   # a product rounded to the type, then the add: what the two ops would give
      self.ins(f"mul.rn.{ty} {out}, {s[0]}, {s[1]}")
      self.fit(out, t)
      self.ins(f"add.rn.{ty} {out}, {out}, {s[2]}")
    elif op is Ops.FDIV: self.ins(f"div.rn.{ty} {out}, {s[0]}, {s[1]}")
    elif op is Ops.RECIP: self.ins(f"rcp.rn.{ty} {out}, {s[0]}")
    elif op is Ops.SQRT: self.ins(f"sqrt.rn.{ty} {out}, {s[0]}")
    elif op is Ops.NEG: self.ins(f"neg.{ty} {out}, {s[0]}")
    elif op is Ops.TRUNC: self.ins(f"cvt.rzi.{ty}.{ty} {out}, {s[0]}")
    elif op is Ops.MAX:   # NaN in either operand gives NaN; of equal values (0 and -0) the first, like the reference
      nan, first = self.reg("p"), self.reg("p")
      self.ins(f"setp.nan.{ty} {nan}, {s[0]}, {s[0]}")
      self.ins(f"setp.ge.or.{ty} {first}, {s[0]}, {s[1]}, {nan}")
      self.ins(f"selp.{ty} {out}, {s[0]}, {s[1]}, {first}")
    elif op in (Ops.EXP2, Ops.LOG2) and ty == "f32": self.ins(f"{'ex2' if op is Ops.EXP2 else 'lg2'}.approx.f32 {out}, {s[0]}")
    else: raise UnsupportedError(f"backend NV has no {op} on {t.name}")
    return out
