"""CPU renderers: linear UOps -> LLVM IR (the default) or C source (CPU_RENDERER=C), both with the PYTHON device's semantics."""
from __future__ import annotations
import functools, math, os, re, struct
import numpy as np
from tinycore.dtype import DType, dtypes, ALL_DTYPES
from tinycore.helpers import getenv
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.renderer import Renderer
from tinycore.runtime.errors import UnsupportedError

def cpu_threads() -> int:
  """Threads kernels are split for: CPU_THREADS, else every core."""
  return max(1, getenv("CPU_THREADS", os.cpu_count() or 1))

@functools.cache
def host_features() -> dict[str, bool]:
  import llvmlite.binding as llvm
  return dict(llvm.get_host_cpu_features())

def host_vector_width() -> int:
  """float32 lanes in the host's widest SIMD registers (read from the CPU, no device needed)."""
  feats = host_features()
  if feats.get("avx512f"): return 16
  if feats.get("avx2") or feats.get("avx"): return 8
  return 4 if feats.get("sse2") or feats.get("neon") else 1

def host_vector_registers() -> int:
  """Architectural SIMD registers: 32 with AVX-512 (zmm0-31) or on AArch64 (v0-31), else 16 (x86-64's xmm/ymm0-15)."""
  feats = host_features()
  return 32 if feats.get("avx512f") or feats.get("neon") else 16

def host_fma() -> bool: return bool(host_features().get("fma") or host_features().get("neon"))

@functools.cache
def host_cache_bytes() -> int:
  """A core's L2 in bytes as Linux describes it (/sys), else 0: unknown."""
  base = "/sys/devices/system/cpu/cpu0/cache"
  try:
    for d in sorted(os.listdir(base)):
      with open(f"{base}/{d}/level") as f: level = f.read().strip()
      with open(f"{base}/{d}/type") as f: kind = f.read().strip()
      if level == "2" and kind in ("Unified", "Data"):
        with open(f"{base}/{d}/size") as f: size = f.read().strip()
        return int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[size[-1]] if size[-1] in "KM" else int(size)
  except (OSError, ValueError): pass
  return 0

def kernel_signature(src: str) -> tuple[str, int, tuple[str, ...]]:
  """(function name, buffer count, var types) from the first line of a rendered kernel."""
  m = re.match(r"^(?:;|//) tinycore-cpu (\w+) (\d+) ?([\w,]*)", src)
  if m is None: raise ValueError("not a tinycore CPU kernel: the signature line is missing")
  return m.group(1), int(m.group(2)), tuple(t for t in m.group(3).split(",") if t)

def _signature_line(comment: str, name: str, uops: list[UOp]) -> str:
  nbufs = sum(1 for u in uops if u.op is Ops.DEFINE_GLOBAL)
  return f"{comment} tinycore-cpu {name} {nbufs} " + ",".join(u.dtype.name for u in uops if u.op is Ops.DEFINE_VAR)

def _fname(name: str) -> str: return re.sub(r"\W", "_", name)

def _check_uops(device: str, uops: list[UOp]) -> None:
  for u in uops:
    if u.op is Ops.SPECIAL and u.arg != "gidx0": raise UnsupportedError(f"{device}: thread id {u.arg} is not supported, only gidx0 (the core id)")
    if u.op in (Ops.IF, Ops.ENDIF): raise UnsupportedError(f"{device}: {u.op} is not supported")

# ***** LLVM IR *****

_LL = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16", dtypes.int32: "i32",
       dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half", dtypes.bfloat16: "float",
       dtypes.float32: "float", dtypes.float64: "double"}
_LL_MEM = {**_LL, dtypes.bool: "i8", dtypes.bfloat16: "i16"}   # bool is a byte, bfloat16 its 16 bits, in memory
_SUFFIX = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "half": "f16", "float": "f32", "double": "f64"}
_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "half": 16, "float": 32, "double": 64}

def _vec(s: str, n: int) -> str: return s if n == 1 else f"<{n} x {s}>"
def ltype(dt: DType, mem: bool = False) -> str:
  if dt.scalar not in _LL: raise UnsupportedError(f"CPU: dtype {dt.scalar.name} has no LLVM type")
  return _vec((_LL_MEM if mem else _LL)[dt.scalar], dt.count)
def lsuffix(ty: str) -> str:
  m = re.match(r"<(\d+) x (\w+)>", ty)
  return f"v{m.group(1)}{_SUFFIX[m.group(2)]}" if m else _SUFFIX[ty]
def _scalar_of(ty: str) -> str: return m.group(2) if (m := re.match(r"<(\d+) x (\w+)>", ty)) else ty
def _lanes(ty: str) -> int: return int(m.group(1)) if (m := re.match(r"<(\d+) x (\w+)>", ty)) else 1
def _fhex(x: float) -> str: return f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"

def lconst(ty: str, v) -> str:
  """A constant of LLVM type ty (a vector type splats the value)."""
  s = _scalar_of(ty)
  one = ("true" if v else "false") if s == "i1" else str(int(v)) if s.startswith("i") else _fhex(float(v))
  n = _lanes(ty)
  if n == 1: return one
  return "zeroinitializer" if one in ("0", "false", _fhex(0.0)) else "<" + ", ".join([f"{s} {one}"] * n) + ">"

class LLVMRenderer(Renderer):
  """LLVM IR for the host CPU. One function per kernel: void name(ptr data0.., iN var0.., i32 core_start, i32 core_end);
  the body runs once per core id in [core_start, core_end) (the chunks of the split outer loop). The target is described
  by the host's features (vector width, vector registers, FMA, L2 size) unless given: a description renders on any machine."""
  device = "CPU"
  global_dims = 0
  supported_dtypes = frozenset(ALL_DTYPES)
  upcast_max = 8
  max_buffers = 960   # the driver calls a kernel through ctypes, which passes at most 1024 arguments (buffers, variables, 2 core ids)
  def __init__(self, threads: int | None = None, vector_width: int | None = None, vector_registers: int | None = None, fma: bool | None = None,
               cache_bytes: int | None = None):
    self.threads = cpu_threads() if threads is None else threads
    self.cache_bytes = host_cache_bytes() if cache_bytes is None else cache_bytes
    self.vector_width = host_vector_width() if vector_width is None else vector_width
    self.vector_registers = host_vector_registers() if vector_registers is None else vector_registers
    self.fma = host_fma() if fma is None else fma
  def render(self, name: str, uops: list[UOp]) -> str:
    _check_uops(self.device, uops)
    return _LLVMKernel(_fname(name), uops, self.fma).text()

class _LLVMKernel:
  """One kernel being rendered: value names per UOp, the instruction lines, allocas, declarations, helper functions."""
  def __init__(self, name: str, uops: list[UOp], fma: bool = False):
    self.name, self.uops, self.fma = name, uops, fma
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.decls: dict[str, str] = {}
    self.helpers: dict[str, str] = {}
    self.r: dict[UOp, str] = {}
    self.n = 0
    self.params: list[str] = []
    self.core = False
    self.loops: dict[UOp, int] = {}

  # ***** emission helpers *****
  def tmp(self) -> str:
    self.n += 1
    return f"%t{self.n}"
  def ins(self, text: str) -> str:
    """Emit `tmp = text`, return tmp."""
    t = self.tmp()
    self.lines.append(f"  {t} = {text}")
    return t
  def call(self, ret: str, fn: str, args: list[tuple[str, str]]) -> str:
    if fn.startswith("llvm."): self.decls[fn] = f"declare {ret} @{fn}({', '.join(t for t, _ in args)})"
    return self.ins(f"call {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")
  def intr(self, name: str, ty: str, *vals: str) -> str: return self.call(ty, f"llvm.{name}.{lsuffix(ty)}", [(ty, v) for v in vals])
  def val(self, u: UOp) -> str:
    if u.op is Ops.DEFINE_ACC: return self.ins(f"load {ltype(u.dtype)}, ptr {self.r[u]}")  # an accumulator: its current value
    return self.r[u]
  def label(self, name: str) -> None: self.lines.append(f"{name}:")
  def br(self, name: str) -> None: self.lines.append(f"  br label %{name}")

  def text(self) -> str:
    for u in self.uops: self.r[u] = self.render_uop(u)
    if self.core:
      self.br("core_latch"); self.label("core_latch")
      self.lines += ["  %core_next = add i32 %core, 1", "  br label %core_hdr", "core_exit:"]
    self.lines.append("  ret void")
    params = self.params + ["i32 %core_start", "i32 %core_end"]
    head = [_signature_line(";", self.name, self.uops), f"define void @{self.name}({', '.join(params)}) #0 {{", "entry:"]
    return "\n".join(head + self.allocas + ["  br label %body", "body:"] + self.lines + ["}"] + list(self.helpers.values()) +
                     list(self.decls.values()) + ['attributes #0 = { nounwind "frame-pointer"="none" }', "attributes #1 = { alwaysinline nounwind }"]) + "\n"

  # ***** one UOp *****
  def render_uop(self, u: UOp) -> str:
    op, dt = u.op, u.dtype
    if op is Ops.DEFINE_GLOBAL:
      self.params.append(f"ptr %data{u.arg}")
      return f"%data{u.arg}"
    if op is Ops.DEFINE_VAR:
      self.params.append(f"{ltype(dt)} %var_{_fname(u.arg[0])}")
      return f"%var_{_fname(u.arg[0])}"
    if op is Ops.CONST: return lconst(ltype(dt), u.arg)
    if op is Ops.SPECIAL:  # the core loop around the whole body
      self.core = True
      self.br("core_pre"); self.label("core_pre"); self.br("core_hdr"); self.label("core_hdr")
      self.lines += ["  %core = phi i32 [%core_start, %core_pre], [%core_next, %core_latch]", "  %core_ok = icmp slt i32 %core, %core_end",
                     "  br i1 %core_ok, label %core_body, label %core_exit", "core_body:"]
      return "%core" if ltype(dt) == "i32" else self.ins(f"sext i32 %core to {ltype(dt)}")
    if op is Ops.RANGE:
      i = self.loops[u] = len(self.loops)
      ty, end = ltype(dt), self.val(u.src[0])
      self.br(f"r{i}_pre"); self.label(f"r{i}_pre"); self.br(f"r{i}_hdr"); self.label(f"r{i}_hdr")
      self.lines += [f"  %r{i} = phi {ty} [0, %r{i}_pre], [%r{i}_next, %r{i}_latch]", f"  %r{i}_ok = icmp slt {ty} %r{i}, {end}",
                     f"  br i1 %r{i}_ok, label %r{i}_body, label %r{i}_exit", f"r{i}_body:"]
      return f"%r{i}"
    if op is Ops.ENDRANGE:
      i, ty = self.loops[u.src[0]], ltype(u.src[0].dtype)
      self.br(f"r{i}_latch"); self.label(f"r{i}_latch")
      self.lines += [f"  %r{i}_next = add {ty} %r{i}, 1", f"  br label %r{i}_hdr", f"r{i}_exit:"]
      return ""
    if op is Ops.DEFINE_REG:  # on the stack of the thread running the kernel
      self.allocas.append(f"  %local{u.arg} = alloca [{dt.size} x {ltype(dt.base.scalar, mem=True)}], align 64")
      return f"%local{u.arg}"
    if op is Ops.DEFINE_ACC:
      acc = f"%acc{u.arg}"
      self.allocas.append(f"  {acc} = alloca {ltype(dt)}, align 64")
      self.lines.append(f"  store {ltype(dt)} {self.val(u.src[0])}, ptr {acc}")
      return acc
    if op is Ops.ASSIGN:
      v = self.val(u.src[1])
      self.lines.append(f"  store {ltype(dt)} {v}, ptr {self.r[u.src[0]]}")
      return v
    if op is Ops.INDEX:  # a masked vector's address (its third source is the mask) may start before the buffer: not inbounds
      buf = u.src[0]
      gep = "getelementptr" if len(u.src) > 2 else "getelementptr inbounds"
      return self.ins(f"{gep} {ltype(buf.dtype.base.scalar, mem=True)}, ptr {self.r[buf]}, {ltype(u.src[1].dtype)} {self.val(u.src[1])}")
    if op is Ops.LOAD:
      if len(u.src[0].src) > 2:  # lanes whose mask is off are not read (they read as 0)
        ty, mask = ltype(dt, mem=True), u.src[0].src[2]
        raw = self.call(ty, f"llvm.masked.load.{lsuffix(ty)}.p0", [("ptr", self.r[u.src[0]]), ("i32", str(dt.scalar.itemsize)),
                                                                  (ltype(mask.dtype), self.val(mask)), (ty, lconst(ty, 0))])
      else: raw = self.ins(f"load {ltype(dt, mem=True)}, ptr {self.r[u.src[0]]}, align {dt.itemsize}")
      return self.from_mem(raw, dt)
    if op is Ops.STORE:
      vdt = u.src[1].dtype
      self.lines.append(f"  store {ltype(vdt, mem=True)} {self.to_mem(self.val(u.src[1]), vdt)}, ptr {self.r[u.src[0]]}, align {vdt.itemsize}")
      return ""
    if op is Ops.GEP: return self.ins(f"extractelement {ltype(u.src[0].dtype)} {self.val(u.src[0])}, i32 {u.arg}")
    if op is Ops.VECTORIZE: return self.vectorize(u)
    if op is Ops.CAST: return self.cast(self.val(u.src[0]), u.src[0].dtype, dt)
    if op is Ops.BITCAST: return self.bitcast(self.val(u.src[0]), u.src[0].dtype, dt)
    if op in GroupOp.ALU: return self.alu(u)
    raise UnsupportedError(f"CPU: the LLVM renderer has no rule for {op}")

  def vectorize(self, u: UOp) -> str:
    ty, sty = ltype(u.dtype), ltype(u.dtype.scalar)
    if all(s.op is Ops.CONST for s in u.src): return "<" + ", ".join(f"{sty} {self.r[s]}" for s in u.src) + ">"
    if all(s is u.src[0] for s in u.src):  # a broadcast: insert once, shuffle to every lane
      one = self.ins(f"insertelement {ty} poison, {sty} {self.val(u.src[0])}, i32 0")
      return self.ins(f"shufflevector {ty} {one}, {ty} poison, <{len(u.src)} x i32> zeroinitializer")
    v = "poison"
    for i, s in enumerate(u.src): v = self.ins(f"insertelement {ty} {v}, {sty} {self.val(s)}, i32 {i}")
    return v

  # ***** memory forms *****
  def from_mem(self, raw: str, dt: DType) -> str:
    if dt.scalar == dtypes.bool: return self.ins(f"icmp ne {ltype(dt, mem=True)} {raw}, {lconst(ltype(dt, mem=True), 0)}")
    if dt.scalar == dtypes.bfloat16: return self.bf16_bits_to_float(raw, dt.count)
    return raw
  def to_mem(self, v: str, dt: DType) -> str:
    if dt.scalar == dtypes.bool: return self.ins(f"zext {ltype(dt)} {v} to {ltype(dt, mem=True)}")
    if dt.scalar == dtypes.bfloat16: return self.float_to_bf16_bits(v, dt.count)
    return v
  def bf16_bits_to_float(self, bits: str, n: int) -> str:
    w = self.ins(f"zext {_vec('i16', n)} {bits} to {_vec('i32', n)}")
    s = self.ins(f"shl {_vec('i32', n)} {w}, {lconst(_vec('i32', n), 16)}")
    return self.ins(f"bitcast {_vec('i32', n)} {s} to {_vec('float', n)}")
  def float_to_bf16_bits(self, v: str, n: int) -> str:
    """The bits of a float that already holds a bfloat16 value."""
    b = self.ins(f"bitcast {_vec('float', n)} {v} to {_vec('i32', n)}")
    s = self.ins(f"lshr {_vec('i32', n)} {b}, {lconst(_vec('i32', n), 16)}")
    return self.ins(f"trunc {_vec('i32', n)} {s} to {_vec('i16', n)}")
  def round_bf16(self, v: str, n: int) -> str:
    """float -> the nearest bfloat16 (ties to even, NaN stays a quiet NaN), kept as a float."""
    return self.call(_vec("float", n), self.helper("bf16_round", _vec("float", n)), [(_vec("float", n), v)])

  # ***** casts *****
  def cast(self, x: str, s: DType, d: DType) -> str:
    sb, db = s.scalar, d.scalar
    st, dty = ltype(s), ltype(d)
    if sb == db: return x
    if db == dtypes.bool:
      return self.ins(f"{'fcmp une' if dtypes.is_float(sb) else 'icmp ne'} {st} {x}, {lconst(st, 0)}")
    if dtypes.is_float(db):
      if db == dtypes.bfloat16:  # rounded once: through double (exact) and a float rounded to odd where it is not exact
        if sb == dtypes.float16 or sb == dtypes.float32: return self.round_bf16(self.fp_resize(x, st, _vec("float", d.count)), d.count)
        if sb != dtypes.float64:
          wide = dtypes.float64.vec(d.count)
          x, st = self.cast(self.odd_int53(x, st, sb) if _scalar_of(st) == "i64" else x, s, wide), ltype(wide)
        return self.round_bf16(self.call(_vec("float", d.count), self.helper("f64_to_odd_f32", st), [(st, x)]), d.count)
      if sb == dtypes.bool or dtypes.is_int(sb):
        conv = "sitofp" if dtypes.is_int(sb) and not dtypes.is_unsigned(sb) else "uitofp"
        return self.ins(f"{conv} {st} {x} to {dty}")
      if sb == dtypes.float64 and db == dtypes.float16:   # rounded once: a float rounded to odd keeps every bit half needs
        return self.fp_resize(self.call(_vec("float", d.count), self.helper("f64_to_odd_f32", st), [(st, x)]), _vec("float", d.count), dty)
      return self.fp_resize(x, st, dty)
    # to an int
    if dtypes.is_float(sb): return self.float_to_int(x, st, d)
    if st == dty: return x
    if _BITS[_scalar_of(st)] > _BITS[_scalar_of(dty)]: return self.ins(f"trunc {st} {x} to {dty}")
    return self.ins(f"{'zext' if sb == dtypes.bool or dtypes.is_unsigned(sb) else 'sext'} {st} {x} to {dty}")
  def float_to_int(self, x: str, st: str, d: DType) -> str:
    """Saturating float -> int, NaN -> 0 (the selects vectorize; llvm.fpto*i.sat would be split into scalars on x86)."""
    if _scalar_of(st) == "half": x, st = self.fp_resize(x, st, _vec("float", d.count)), _vec("float", d.count)
    bits, signed, dty, bty = 8 * d.itemsize, not dtypes.is_unsigned(d), ltype(d), _vec("i1", d.count)
    lo, hi = (-2**(bits-1), 2**(bits-1)) if signed else (0, 2**bits)   # hi: the first value past the top, a power of two
    big, small = self.ins(f"fcmp oge {st} {x}, {lconst(st, hi)}"), self.ins(f"fcmp ole {st} {x}, {lconst(st, lo)}")
    nan = self.ins(f"fcmp uno {st} {x}, {x}")
    out_of_range = self.ins(f"or {bty} {self.ins(f'or {bty} {big}, {small}')}, {nan}")
    safe = self.ins(f"select {bty} {out_of_range}, {st} {lconst(st, 0)}, {st} {x}")
    conv = self.ins(f"{'fptosi' if signed else 'fptoui'} {st} {safe} to {dty}")
    r = self.ins(f"select {bty} {small}, {dty} {lconst(dty, lo)}, {dty} {conv}")
    return self.ins(f"select {bty} {big}, {dty} {lconst(dty, hi - 1)}, {dty} {r}")
  def odd_int53(self, x: str, st: str, s: DType) -> str:
    """A 64-bit integer past 2**53 rounded to odd at bit 11 (its bits below cut, bit 11 set if any was): then exact in a
    double, from which it rounds once to a narrower float."""
    bty = _vec("i1", _lanes(st))
    low = self.ins(f"and {st} {x}, {lconst(st, 0x7ff)}")
    dropped = self.ins(f"zext {bty} {self.ins(f'icmp ne {st} {low}, {lconst(st, 0)}')} to {st}")
    odd = self.ins(f"or {st} {self.ins(f'sub {st} {x}, {low}')}, {self.ins(f'shl {st} {dropped}, {lconst(st, 11)}')}")
    if dtypes.is_unsigned(s): big = self.ins(f"icmp uge {st} {x}, {lconst(st, 2**53)}")
    else: big = self.ins(f"or {bty} {self.ins(f'icmp sge {st} {x}, {lconst(st, 2**53)}')}, {self.ins(f'icmp sle {st} {x}, {lconst(st, -2**53)}')}")
    return self.ins(f"select {bty} {big}, {st} {odd}, {st} {x}")
  def fp_resize(self, x: str, st: str, dty: str) -> str:
    if st == dty: return x
    return self.ins(f"{'fpext' if _BITS[_scalar_of(st)] < _BITS[_scalar_of(dty)] else 'fptrunc'} {st} {x} to {dty}")
  def bitcast(self, x: str, s: DType, d: DType) -> str:
    n = s.count
    if s.scalar == dtypes.bfloat16: x, st = self.float_to_bf16_bits(x, n), _vec("i16", n)
    elif s.scalar == dtypes.bool: x, st = self.ins(f"zext {ltype(s)} {x} to {_vec('i8', n)}"), _vec("i8", n)
    else: st = ltype(s)
    if d.scalar == dtypes.bfloat16:
      bits = x if st == _vec("i16", n) else self.ins(f"bitcast {st} {x} to {_vec('i16', n)}")
      return self.bf16_bits_to_float(bits, n)
    if d.scalar == dtypes.bool: return self.ins(f"icmp ne {st} {x}, {lconst(st, 0)}")
    return x if st == ltype(d) else self.ins(f"bitcast {st} {x} to {ltype(d)}")

  # ***** ALU *****
  def alu(self, u: UOp) -> str:
    op, dt = u.op, u.dtype
    if self.fma and op is Ops.ADD and u.src[0].op is Ops.DEFINE_ACC and u.src[1].op is Ops.MUL and dt.scalar in (dtypes.float32, dtypes.float64):
      # a term of a sum of products joins its accumulator with one rounding (a reduction's order and rounding are free,
      # see docs/architecture.md); the same instruction in every tile and thread, so results stay bit-identical
      return self.intr("fma", ltype(dt), self.val(u.src[1].src[0]), self.val(u.src[1].src[1]), self.val(u.src[0]))
    a = [self.val(s) for s in u.src]
    ty = ltype(dt)
    if op is Ops.WHERE: return self.ins(f"select {ltype(u.src[0].dtype)} {a[0]}, {ty} {a[1]}, {ty} {a[2]}")
    if op in GroupOp.Comparison:
      sdt, sty = u.src[0].dtype, ltype(u.src[0].dtype)
      if dtypes.is_float(sdt): return self.ins(f"fcmp {({Ops.CMPLT: 'olt', Ops.CMPNE: 'une', Ops.CMPEQ: 'oeq'})[op]} {sty} {a[0]}, {a[1]}")
      lt = "ult" if dtypes.is_unsigned(sdt) or sdt.scalar == dtypes.bool else "slt"
      return self.ins(f"icmp {({Ops.CMPLT: lt, Ops.CMPNE: 'ne', Ops.CMPEQ: 'eq'})[op]} {sty} {a[0]}, {a[1]}")
    if dtypes.is_float(dt):
      out = self.float_alu(op, dt, ty, a)
      return self.round_bf16(out, dt.count) if dt.scalar == dtypes.bfloat16 and op not in (Ops.NEG, Ops.MAX, Ops.TRUNC) else out
    if dt.scalar == dtypes.bool: return self.bool_alu(op, ty, a)
    return self.int_alu(op, dt, ty, a)

  def float_alu(self, op: Ops, dt: DType, ty: str, a: list[str]) -> str:
    simple = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv", Ops.MOD: "frem"}
    if op in simple: return self.ins(f"{simple[op]} {ty} {a[0]}, {a[1]}")
    if op is Ops.NEG: return self.ins(f"fneg {ty} {a[0]}")
    if op is Ops.RECIP: return self.ins(f"fdiv {ty} {lconst(ty, 1.0)}, {a[0]}")
    if op is Ops.IDIV: return self.intr("floor", ty, self.ins(f"fdiv {ty} {a[0]}, {a[1]}"))
    if op is Ops.MAX:  # NaN in either operand gives NaN
      ge = self.ins(f"fcmp oge {ty} {a[0]}, {a[1]}")
      nan = self.ins(f"fcmp uno {ty} {a[0]}, {a[0]}")
      pick = self.ins(f"or {_vec('i1', dt.count)} {ge}, {nan}")
      return self.ins(f"select {_vec('i1', dt.count)} {pick}, {ty} {a[0]}, {ty} {a[1]}")
    # a*b rounded to the dtype (bfloat16 lives in float registers), then + c rounded, as defined: llvm.fmuladd lets LLVM fuse
    # where it likes (the vector body of a loop and its scalar remainder did not agree on FMA CPUs)
    if op is Ops.MULACC:
      prod = self.ins(f"fmul {ty} {a[0]}, {a[1]}")
      return self.ins(f"fadd {ty} {self.round_bf16(prod, dt.count) if dt.scalar == dtypes.bfloat16 else prod}, {a[2]}")
    if op in (Ops.SQRT, Ops.TRUNC, Ops.SIN): return self.intr({Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.SIN: "sin"}[op], ty, a[0])
    if op in (Ops.EXP2, Ops.LOG2):
      name = "exp2" if op is Ops.EXP2 else "log2"
      if dt.scalar == dtypes.float64: return self.intr(name, ty, a[0])
      fty = _vec("float", dt.count)  # half and bfloat16 compute in float, like the reference
      x = self.fp_resize(a[0], ty, fty)
      return self.fp_resize(self.call(fty, self.helper(name, fty), [(fty, x)]), fty, ty)
    raise UnsupportedError(f"CPU: no float rule for {op}")

  def bool_alu(self, op: Ops, ty: str, a: list[str]) -> str:
    table = {Ops.ADD: "or", Ops.OR: "or", Ops.MAX: "or", Ops.MUL: "and", Ops.AND: "and", Ops.XOR: "xor", Ops.SUB: "xor"}
    if op in table: return self.ins(f"{table[op]} {ty} {a[0]}, {a[1]}")
    if op is Ops.NEG: return self.ins(f"xor {ty} {a[0]}, {lconst(ty, True)}")
    if op is Ops.MULACC: return self.ins(f"or {ty} {self.ins(f'and {ty} {a[0]}, {a[1]}')}, {a[2]}")
    raise UnsupportedError(f"CPU: no bool rule for {op}")

  def int_alu(self, op: Ops, dt: DType, ty: str, a: list[str]) -> str:
    signed = not dtypes.is_unsigned(dt)
    simple = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.XOR: "xor", Ops.OR: "or", Ops.AND: "and"}
    if op in simple: return self.ins(f"{simple[op]} {ty} {a[0]}, {a[1]}")
    if op is Ops.NEG: return self.ins(f"sub {ty} {lconst(ty, 0)}, {a[0]}")
    if op is Ops.MULACC: return self.ins(f"add {ty} {self.ins(f'mul {ty} {a[0]}, {a[1]}')}, {a[2]}")
    if op is Ops.MAX:
      gt = self.ins(f"icmp {'sgt' if signed else 'ugt'} {ty} {a[0]}, {a[1]}")
      return self.ins(f"select {_vec('i1', dt.count)} {gt}, {ty} {a[0]}, {ty} {a[1]}")
    if op in (Ops.SHL, Ops.SHR):  # the shift amount is taken modulo the bit width
      n = self.ins(f"and {ty} {a[1]}, {lconst(ty, 8 * dt.itemsize - 1)}")
      return self.ins(f"{'shl' if op is Ops.SHL else 'ashr' if signed else 'lshr'} {ty} {a[0]}, {n}")
    if op in (Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.RECIP):
      x, y = (lconst(ty, 1), a[0]) if op is Ops.RECIP else (a[0], a[1])
      return self.int_divide(op is Ops.MOD, signed, dt, ty, x, y)
    raise UnsupportedError(f"CPU: no integer rule for {op} on {dt.scalar.name}")

  def int_divide(self, mod: bool, signed: bool, dt: DType, ty: str, x: str, y: str) -> str:
    """Truncating division that never traps: a zero divisor gives 0, MIN / -1 wraps to MIN (remainder 0)."""
    bty = _vec("i1", dt.count)
    zero = self.ins(f"icmp eq {ty} {y}, {lconst(ty, 0)}")
    bad = zero
    if signed:
      is_min = self.ins(f"icmp eq {ty} {x}, {lconst(ty, -2**(8*dt.itemsize-1))}")
      is_m1 = self.ins(f"icmp eq {ty} {y}, {lconst(ty, -1)}")
      bad = self.ins(f"or {bty} {zero}, {self.ins(f'and {bty} {is_min}, {is_m1}')}")
    safe = self.ins(f"select {bty} {bad}, {ty} {lconst(ty, 1)}, {ty} {y}")
    q = self.ins(f"{('s' if signed else 'u') + ('rem' if mod else 'div')} {ty} {x}, {safe}")
    return self.ins(f"select {bty} {zero}, {ty} {lconst(ty, 0)}, {ty} {q}")

  # ***** helper functions (internal, always inlined) *****
  def helper(self, kind: str, ty: str) -> str:
    name = f"tc_{kind}_{lsuffix(ty)}"
    if name not in self.helpers: self.helpers[name] = _HELPERS[kind](self, name, ty)
    return name
  def declare(self, fn: str, ret: str, args: list[str]) -> None: self.decls[fn] = f"declare {ret} @{fn}({', '.join(args)})"

def _itype(fty: str, bits: int = 32) -> str: return _vec(f"i{bits}", _lanes(fty))

def _helper_text(name: str, ty: str, arg: str, body: list[str]) -> str:
  return f"define internal {ty} @{name}({arg}) #1 {{\n" + "\n".join(f"  {line}" for line in body) + "\n}"

def _exp2_f32(k: _LLVMKernel, name: str, F: str) -> str:
  """2**x for float32: x = n + f with |f| <= 1/2, 2**f by its Taylor polynomial (degree 7, error < 1e-8 relative),
  then scaled by 2**n in two steps so results near overflow and in the denormal range round once, correctly placed."""
  I, B, c, ci = _itype(F), _vec("i1", _lanes(F)), (lambda v: lconst(F, float(np.float32(v)))), (lambda v: lconst(_itype(F), v))
  k.declare(f"llvm.roundeven.{lsuffix(F)}", F, [F])
  coef = [math.log(2) ** i / math.factorial(i) for i in range(8)]
  body = [f"%big = fcmp ogt {F} %x, {c(128)}", f"%x1 = select {B} %big, {F} {c(128)}, {F} %x",
          f"%small = fcmp olt {F} %x1, {c(-151)}", f"%x2 = select {B} %small, {F} {c(-151)}, {F} %x1",
          f"%n = call {F} @llvm.roundeven.{lsuffix(F)}({F} %x2)", f"%f = fsub {F} %x2, %n", f"%p7 = fmul {F} %f, {c(coef[7])}"]
  for i in range(6, -1, -1):
    body.append(f"%q{i} = fadd {F} %p{i+1}, {c(coef[i])}")
    if i: body.append(f"%p{i} = fmul {F} %q{i}, %f")
  body += [f"%nan = fcmp uno {F} %n, %n", f"%n0 = select {B} %nan, {F} {c(0)}, {F} %n", f"%ni = fptosi {F} %n0 to {I}",
           f"%e1 = ashr {I} %ni, {ci(1)}", f"%e2 = sub {I} %ni, %e1"]
  for j in (1, 2): body += [f"%b{j} = add {I} %e{j}, {ci(127)}", f"%s{j} = shl {I} %b{j}, {ci(23)}", f"%m{j} = bitcast {I} %s{j} to {F}"]
  body += [f"%r1 = fmul {F} %q0, %m1", f"%r = fmul {F} %r1, %m2", f"ret {F} %r"]
  return _helper_text(name, F, f"{F} %x", body)

def _log2_f32(k: _LLVMKernel, name: str, F: str) -> str:
  """log2(x) for float32: x = 2**e * m with m in [sqrt(1/2), sqrt(2)], log(m) = 2 atanh(t) with t = (m-1)/(m+1), |t| < 0.172,
  by its series to t**9 (error < 3e-9 relative). Denormals are scaled up first; zero, negatives, inf and NaN handled last."""
  I, B, c, ci = _itype(F), _vec("i1", _lanes(F)), (lambda v: lconst(F, float(np.float32(v)))), (lambda v: lconst(_itype(F), v))
  body = [f"%sub = fcmp olt {F} %x, {c(2.0**-126)}", f"%xs = fmul {F} %x, {c(2.0**23)}", f"%xm = select {B} %sub, {F} %xs, {F} %x",
          f"%ea = select {B} %sub, {I} {ci(-23)}, {I} {ci(0)}", f"%b = bitcast {F} %xm to {I}", f"%eb = lshr {I} %b, {ci(23)}",
          f"%ee = and {I} %eb, {ci(255)}", f"%mb = and {I} %b, {ci(0x7fffff)}", f"%mo = or {I} %mb, {ci(0x3f800000)}",
          f"%m = bitcast {I} %mo to {F}", f"%big = fcmp ogt {F} %m, {c(math.sqrt(2))}", f"%mh = fmul {F} %m, {c(0.5)}",
          f"%m2 = select {B} %big, {F} %mh, {F} %m", f"%bi = zext {B} %big to {I}", f"%e0 = add {I} %ee, %ea", f"%e1 = add {I} %e0, %bi",
          f"%e = sub {I} %e1, {ci(127)}", f"%num = fsub {F} %m2, {c(1)}", f"%den = fadd {F} %m2, {c(1)}", f"%t = fdiv {F} %num, %den",
          f"%t2 = fmul {F} %t, %t", f"%s4 = fmul {F} %t2, {c(1/9)}"]
  for i, d in ((3, 7), (2, 5), (1, 3)): body += [f"%a{i} = fadd {F} %s{i+1}, {c(1/d)}", f"%s{i} = fmul {F} %a{i}, %t2"]
  body += [f"%ts = fmul {F} %t, %s1", f"%w = fadd {F} %t, %ts", f"%lm = fmul {F} %w, {c(2/math.log(2))}", f"%ef = sitofp {I} %e to {F}",
           f"%r0 = fadd {F} %ef, %lm", f"%isinf = fcmp oeq {F} %x, {c(math.inf)}", f"%r1 = select {B} %isinf, {F} {c(math.inf)}, {F} %r0",
           f"%iszero = fcmp oeq {F} %x, {c(0)}", f"%r2 = select {B} %iszero, {F} {c(-math.inf)}, {F} %r1",
           f"%isneg = fcmp olt {F} %x, {c(0)}", f"%r3 = select {B} %isneg, {F} {c(math.nan)}, {F} %r2",
           f"%isnan = fcmp uno {F} %x, %x", f"%r = select {B} %isnan, {F} %x, {F} %r3", f"ret {F} %r"]
  return _helper_text(name, F, f"{F} %x", body)

def _bf16_round(k: _LLVMKernel, name: str, F: str) -> str:
  I, B, ci = _itype(F), _vec("i1", _lanes(F)), (lambda v: lconst(_itype(F), v))
  body = [f"%b = bitcast {F} %x to {I}", f"%nan = fcmp uno {F} %x, %x", f"%hi = lshr {I} %b, {ci(16)}", f"%lsb = and {I} %hi, {ci(1)}",
          f"%b1 = add {I} %b, {ci(0x7fff)}", f"%b2 = add {I} %b1, %lsb", f"%rounded = and {I} %b2, {ci(0xffff0000)}",
          f"%top = and {I} %b, {ci(0xffff0000)}", f"%quiet = or {I} %top, {ci(0x400000)}", f"%bits = select {B} %nan, {I} %quiet, {I} %rounded",
          f"%r = bitcast {I} %bits to {F}", f"ret {F} %r"]
  return _helper_text(name, F, f"{F} %x", body)

def _f64_to_odd_f32(k: _LLVMKernel, name: str, D: str) -> str:
  """double -> float rounded to odd (toward zero, the last bit set where that dropped anything): rounding it on to half or
  bfloat16 rounds the double once."""
  n = _lanes(D)
  F, I, B = _vec("float", n), _vec("i32", n), _vec("i1", n)
  body = [f"%f = fptrunc {D} %x to {F}", f"%back = fpext {F} %f to {D}", f"%exact = fcmp ueq {D} %back, %x",
          f"%ax = call {D} @llvm.fabs.{lsuffix(D)}({D} %x)", f"%aback = call {D} @llvm.fabs.{lsuffix(D)}({D} %back)",
          f"%away = fcmp ogt {D} %aback, %ax", f"%bits = bitcast {F} %f to {I}", f"%dec = sub {I} %bits, {lconst(I, 1)}",
          f"%tz = select {B} %away, {I} %dec, {I} %bits", f"%odd = or {I} %tz, {lconst(I, 1)}", f"%pick = select {B} %exact, {I} %bits, {I} %odd",
          f"%fo = bitcast {I} %pick to {F}", f"ret {F} %fo"]
  k.declare(f"llvm.fabs.{lsuffix(D)}", D, [D])
  return f"define internal {F} @{name}({D} %x) #1 {{\n" + "\n".join(f"  {line}" for line in body) + "\n}"

_HELPERS = {"exp2": _exp2_f32, "log2": _log2_f32, "bf16_round": _bf16_round, "f64_to_odd_f32": _f64_to_odd_f32}

# ***** C *****

_C = {dtypes.bool: "_Bool", dtypes.int8: "int8_t", dtypes.uint8: "uint8_t", dtypes.int16: "int16_t", dtypes.uint16: "uint16_t",
      dtypes.int32: "int32_t", dtypes.uint32: "uint32_t", dtypes.int64: "int64_t", dtypes.uint64: "uint64_t", dtypes.float16: "_Float16",
      dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double"}
_C_MEM = {**_C, dtypes.bfloat16: "uint16_t"}
_C_PRELUDE = """#include <stdint.h>
#include <string.h>
#include <math.h>
static inline float tc_bf16_round(float x) {  /* nearest bfloat16, ties to even; NaN stays a quiet NaN */
  uint32_t b; memcpy(&b, &x, 4);
  b = (x != x) ? ((b & 0xffff0000u) | 0x400000u) : ((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
  memcpy(&x, &b, 4); return x;
}
static inline float tc_bf16_load(uint16_t h) { uint32_t b = (uint32_t)h << 16; float x; memcpy(&x, &b, 4); return x; }
static inline uint16_t tc_bf16_bits(float x) { uint32_t b; memcpy(&b, &x, 4); return (uint16_t)(b >> 16); }
"""

def cconst(dt: DType, v) -> str:
  if dt == dtypes.bool: return "1" if v else "0"
  if dtypes.is_int(dt):
    if dt in (dtypes.int64,) and v == -2**63: return "((int64_t)(-9223372036854775807LL-1))"
    return f"(({_C[dt]}){int(v)}{'ULL' if dtypes.is_unsigned(dt) else 'LL'})"
  f = "f" if dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16) else ""
  if math.isnan(v): s = f"__builtin_nan{f}(\"\")"
  elif math.isinf(v): s = f"({'-' if v < 0 else ''}__builtin_inf{f}())"
  else: s = float(v).hex() + f
  return f"((_Float16){s})" if dt == dtypes.float16 else s

class CRenderer(Renderer):
  """C for clang or gcc (CPU_RENDERER=C): scalar code with the same semantics and the same function signature as the LLVM
  renderer; the compiler's own vectorizer does the SIMD. Build flags keep IEEE semantics (no fast-math, no contraction)."""
  device = "CPU"
  global_dims = 0
  supported_dtypes = frozenset(ALL_DTYPES)
  upcast_max = 8
  vector_width = 1
  max_buffers = 960   # the driver calls a kernel through ctypes, which passes at most 1024 arguments (buffers, variables, 2 core ids)
  def __init__(self, threads: int | None = None): self.threads = cpu_threads() if threads is None else threads
  def render(self, name: str, uops: list[UOp]) -> str:
    _check_uops(self.device, uops)
    return _CKernel(_fname(name), uops).text()

class _CKernel:
  def __init__(self, name: str, uops: list[UOp]):
    self.name, self.uops = name, uops
    self.lines: list[str] = []
    self.r: dict[UOp, str] = {}
    self.params: list[str] = []
    self.helpers: dict[str, str] = {}
    self.depth, self.core = 1, False
  def emit(self, line: str) -> None: self.lines.append("  " * self.depth + line)
  def let(self, dt: DType, expr: str, u: UOp) -> str:
    name = f"v{len(self.r)}"
    self.emit(f"{_C[dt]} {name} = {expr};")
    return name
  def text(self) -> str:
    for u in self.uops:
      if u.dtype.count > 1 or (u.op is Ops.INDEX and u.dtype.base.count > 1): raise UnsupportedError(f"CPU: the C renderer has no vector types ({u.dtype})")
      self.r[u] = self.render_uop(u)
    if self.core: self.depth -= 1; self.emit("}")
    head = [_signature_line("//", self.name, self.uops), _C_PRELUDE] + list(self.helpers.values())
    sig = ", ".join(self.params + ["int32_t core_start", "int32_t core_end"])
    return "\n".join(head + [f"__attribute__((visibility(\"default\"))) void {self.name}({sig}) {{"] + self.lines + ["}"]) + "\n"
  def render_uop(self, u: UOp) -> str:
    op, dt, r = u.op, u.dtype, self.r
    if op is Ops.DEFINE_GLOBAL:
      self.params.append(f"{_C_MEM[dt.base.scalar]}* data{u.arg}")
      return f"data{u.arg}"
    if op is Ops.DEFINE_VAR:
      self.params.append(f"{_C[dt]} var_{_fname(u.arg[0])}")
      return f"var_{_fname(u.arg[0])}"
    if op is Ops.CONST: return cconst(dt, u.arg)
    if op is Ops.SPECIAL:
      self.emit("for (int32_t core = core_start; core < core_end; core++) {")
      self.depth, self.core = self.depth + 1, True
      return f"(({_C[dt]})core)"
    if op is Ops.RANGE:
      name = f"ridx{len(r)}"
      self.emit(f"for ({_C[dt]} {name} = 0; {name} < {r[u.src[0]]}; {name}++) {{")
      self.depth += 1
      return name
    if op is Ops.ENDRANGE:
      self.depth -= 1
      self.emit("}")
      return ""
    if op is Ops.DEFINE_ACC:
      name = f"acc{u.arg}"
      self.emit(f"{_C[dt]} {name} = {r[u.src[0]]};")
      return name
    if op is Ops.ASSIGN:
      self.emit(f"{r[u.src[0]]} = {r[u.src[1]]};")
      return r[u.src[0]]
    if op is Ops.INDEX: return f"({r[u.src[0]]} + {r[u.src[1]]})"
    if op is Ops.LOAD: return self.let(dt, f"tc_bf16_load(*{r[u.src[0]]})" if dt == dtypes.bfloat16 else f"*{r[u.src[0]]}", u)
    if op is Ops.STORE:
      v = r[u.src[1]]
      self.emit(f"*{r[u.src[0]]} = {'tc_bf16_bits(' + v + ')' if u.src[1].dtype == dtypes.bfloat16 else v};")
      return ""
    if op is Ops.CAST: return self.let(dt, self.cast(r[u.src[0]], u.src[0].dtype, dt), u)
    if op is Ops.BITCAST: return self.let(dt, self.bitcast(r[u.src[0]], u.src[0].dtype, dt), u)
    if op in GroupOp.ALU: return self.let(dt, self.alu(u, [r[s] for s in u.src]), u)
    raise UnsupportedError(f"CPU: the C renderer has no rule for {op}")

  def cast(self, x: str, s: DType, d: DType) -> str:
    if s == d: return x
    if d == dtypes.bool: return f"({x} != 0)"
    if d == dtypes.bfloat16:   # rounded once: through double (exact) and a float rounded to odd where it is not exact
      if s in (dtypes.float16, dtypes.float32): return f"tc_bf16_round((float){x})"
      if s in (dtypes.int64, dtypes.uint64):   # past 2**53, to odd at bit 11 first: then exact in a double
        T = _C[s]
        self.helpers.setdefault(f"tc_{T}_odd", f"static inline double tc_{T}_odd({T} x) {{\n  {T} lo = x & 0x7ff;\n"
                                f"  return {'x >= (1ULL << 53)' if s == dtypes.uint64 else '(x >= (1LL << 53) || x <= -(1LL << 53))'} ? "
                                f"(double)((x - lo) | ((({T})(lo != 0)) << 11)) : (double)x;\n}}")
        x = f"tc_{T}_odd({x})"
      self.helpers.setdefault("tc_odd_f32", "static inline float tc_odd_f32(double x) {  /* to odd: on to bfloat16 it rounds x once */\n"
                              "  float f = (float)x; uint32_t b; memcpy(&b, &f, 4);\n"
                              "  if ((double)f != x && x == x) { if (fabs((double)f) > fabs(x)) b -= 1; b |= 1u; }\n  memcpy(&f, &b, 4); return f;\n}")
      return f"tc_bf16_round(tc_odd_f32((double){x}))"
    if dtypes.is_int(d) and dtypes.is_float(s):
      fn = f"tc_f2i_{d.name}"
      if fn not in self.helpers:
        lo, hi = (0, 2**(8*d.itemsize)-1) if dtypes.is_unsigned(d) else (-2**(8*d.itemsize-1), 2**(8*d.itemsize-1)-1)
        self.helpers[fn] = (f"static inline {_C[d]} {fn}(double x) {{  /* saturating, NaN -> 0 */\n  if (x != x) return 0;\n  double t = trunc(x);\n"
                            f"  if (t >= {float(hi)!r}) return {cconst(d, hi)};\n  if (t <= {float(lo)!r}) return {cconst(d, lo)};\n  return ({_C[d]})t;\n}}")
      return f"{fn}((double){x})"
    return f"({_C[d]}){x}"
  def bitcast(self, x: str, s: DType, d: DType) -> str:
    st = "uint16_t" if s == dtypes.bfloat16 else _C[s]
    if s == dtypes.bfloat16: x = f"tc_bf16_bits({x})"
    if d == dtypes.bfloat16: return f"({{ uint16_t _d; {st} _s = {x}; memcpy(&_d, &_s, 2); tc_bf16_load(_d); }})"
    if d == dtypes.bool: return f"({x} != 0)"
    return f"({{ {_C[d]} _d; {st} _s = {x}; memcpy(&_d, &_s, sizeof(_d)); _d; }})"
  def alu(self, u: UOp, a: list[str]) -> str:
    op, dt = u.op, u.dtype
    T = _C[dt]
    if op is Ops.WHERE: return f"({a[0]} ? {a[1]} : {a[2]})"
    if op in GroupOp.Comparison: return f"({a[0]} {({Ops.CMPLT: '<', Ops.CMPNE: '!=', Ops.CMPEQ: '=='})[op]} {a[1]})"
    infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.XOR: "^", Ops.OR: "|", Ops.AND: "&"}
    if dt == dtypes.bool:
      infix |= {Ops.ADD: "|", Ops.MAX: "|", Ops.MUL: "&", Ops.SUB: "^"}
      if op is Ops.NEG: return f"(!{a[0]})"
      if op is Ops.MULACC: return f"(({a[0]} & {a[1]}) | {a[2]})"
      if op in infix: return f"({a[0]} {infix[op]} {a[1]})"
      raise UnsupportedError(f"CPU: no bool rule for {op}")
    if dtypes.is_float(dt):
      f = "f" if dt in (dtypes.float32, dtypes.bfloat16, dtypes.float16) else ""
      cf = "(float)" if dt == dtypes.float16 else ""
      fn = {Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin"}
      if op in infix or op is Ops.FDIV: out = f"({a[0]} {infix.get(op, '/')} {a[1]})"
      elif op is Ops.NEG: out = f"(-{a[0]})"
      elif op is Ops.RECIP: out = f"(({T})1 / {a[0]})"
      elif op is Ops.MOD: out = f"fmod{f}({cf}{a[0]}, {cf}{a[1]})"
      elif op is Ops.IDIV: out = f"floor{f}({cf}({a[0]} / {a[1]}))"
      elif op is Ops.MAX: out = f"(({a[0]} >= {a[1]} || {a[0]} != {a[0]}) ? {a[0]} : {a[1]})"
      elif op is Ops.MULACC: out = f"({f'tc_bf16_round({a[0]} * {a[1]})' if dt == dtypes.bfloat16 else f'(({T})({a[0]} * {a[1]}))'} + {a[2]})"
      elif op in fn: out = f"{fn[op]}{f}({cf}{a[0]})"
      else: raise UnsupportedError(f"CPU: no float rule for {op}")
      if dt == dtypes.bfloat16 and op not in (Ops.NEG, Ops.MAX, Ops.TRUNC): return f"tc_bf16_round({out})"
      return f"(({T}){out})" if dt == dtypes.float16 else out
    bits = 8 * dt.itemsize
    if op in infix: return f"(({T})({a[0]} {infix[op]} {a[1]}))"
    if op is Ops.NEG: return f"(({T})(-{a[0]}))"
    if op is Ops.MULACC: return f"(({T})({a[0]} * {a[1]} + {a[2]}))"
    if op is Ops.MAX: return f"({a[0]} > {a[1]} ? {a[0]} : {a[1]})"
    if op is Ops.SHL: return f"(({T})({a[0]} << ({a[1]} & {bits - 1})))"
    if op is Ops.SHR: return f"(({T})({a[0]} >> ({a[1]} & {bits - 1})))"
    if op in (Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.RECIP):
      x, y = ("1", a[0]) if op is Ops.RECIP else (a[0], a[1])
      q = "%" if op is Ops.MOD else "/"
      if dtypes.is_unsigned(dt): return f"({y} == 0 ? ({T})0 : ({T})({x} {q} {y}))"
      mn = cconst(dt, -2**(bits-1))
      return f"({y} == 0 ? ({T})0 : ({x} == {mn} && {y} == -1) ? ({T})({x if q == '/' else 0}) : ({T})({x} {q} {y}))"
    raise UnsupportedError(f"CPU: no integer rule for {op} on {dt.name}")
