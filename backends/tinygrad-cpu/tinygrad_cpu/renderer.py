"""CPU renderers: linear UOps -> LLVM IR (the default) or C source (CPU_RENDERER=C), both with the PYTHON device's semantics."""
from __future__ import annotations
import functools, math, os, re, struct
import numpy as np
from tinycore.dtype import DType, dtypes, ALL_DTYPES
from tinycore.helpers import getenv
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.renderer.isa import ISARenderer, ISAKernel
from tinycore.renderer.cstyle import CStyleRenderer, CStyleKernel
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
FMA_DTYPES = frozenset({dtypes.float32, dtypes.float64})   # llvm.fma / fma(), fmaf(): declared where the CPU has the instruction

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

def core_id(x: UOp) -> None:
  if x.arg != "gidx0": raise UnsupportedError(f"CPU: thread id {x.arg} is not supported, only gidx0 (the core id)")

# ***** LLVM IR *****

_LL = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16", dtypes.int32: "i32",
       dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double"}
_SUFFIX = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "half": "f16", "float": "f32", "double": "f64"}
_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "half": 16, "float": 32, "double": 64}

def _vec(s: str, n: int) -> str: return s if n == 1 else f"<{n} x {s}>"
def ltype(dt: DType, mem: bool = False) -> str:
  """dt's LLVM type; in memory a bool is a byte."""
  if dt.scalar not in _LL: raise UnsupportedError(f"CPU: dtype {dt.scalar.name} has no LLVM type")
  return _vec("i8" if mem and dt.scalar == dtypes.bool else _LL[dt.scalar], dt.count)
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

class LLVMKernel(ISAKernel):
  """One kernel being rendered: SSA values (%tN), the instruction lines, allocas, declarations, helper functions."""
  def __init__(self, ren: LLVMRenderer, name: str, uops: list[UOp]):
    super().__init__(ren, name, uops)
    self.allocas: list[str] = []
    self.decls: dict[str, str] = {}
    self.helpers: dict[str, str] = {}
    self.params: list[str] = []
    self.core = False
    self.loops: dict[UOp, int] = {}
  def let(self, text: str) -> str:
    """`%tN = text`, returning %tN."""
    self.ins(f"{(t := self.reg('t'))} = {text}")
    return t
  def call(self, ret: str, fn: str, args: list[tuple[str, str]]) -> str:
    if fn.startswith("llvm."): self.decls[fn] = f"declare {ret} @{fn}({', '.join(t for t, _ in args)})"
    return self.let(f"call {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")
  def intr(self, name: str, ty: str, *vals: str) -> str: return self.call(ty, f"llvm.{name}.{lsuffix(ty)}", [(ty, v) for v in vals])
  def __getitem__(self, u: UOp) -> str:
    if u.op is Ops.DEFINE_ACC: return self.let(f"load {ltype(u.dtype)}, ptr {self.r[u]}")  # an accumulator: its current value
    return self.r[u]
  def br(self, name: str) -> str: return self.ins(f"br label %{name}")
  def loop(self, name: str, ty: str, start: str, end: str) -> None:
    """A loop header: %name runs from start while below end (its latch adds 1, see end_loop)."""
    self.br(f"{name}_pre"); self.label(f"{name}_pre"); self.br(f"{name}_hdr"); self.label(f"{name}_hdr")
    self.ins(f"%{name} = phi {ty} [{start}, %{name}_pre], [%{name}_next, %{name}_latch]", f"%{name}_ok = icmp slt {ty} %{name}, {end}",
             f"br i1 %{name}_ok, label %{name}_body, label %{name}_exit")
    self.label(f"{name}_body")
  def end_loop(self, name: str, ty: str) -> str:
    self.br(f"{name}_latch"); self.label(f"{name}_latch")
    self.ins(f"%{name}_next = add {ty} %{name}, 1", f"br label %{name}_hdr")
    return self.label(f"{name}_exit")
  def helper(self, kind: str, ty: str) -> str:
    name = f"tc_{kind}_{lsuffix(ty)}"
    if name not in self.helpers: self.helpers[name] = _HELPERS[kind](self, name, ty)
    return name
  def declare(self, fn: str, ret: str, args: list[str]) -> None: self.decls[fn] = f"declare {ret} @{fn}({', '.join(args)})"

  # ***** casts *****
  def cast(self, x: UOp) -> str:
    sb, db, v = x.src[0].dtype.scalar, x.dtype.scalar, self[x.src[0]]
    st, dty = ltype(x.src[0].dtype), ltype(x.dtype)
    if db == dtypes.bool: return self.let(f"{'fcmp une' if dtypes.is_float(sb) else 'icmp ne'} {st} {v}, {lconst(st, 0)}")
    if dtypes.is_float(db):   # from float: fpext/fptrunc (half only from and to float: the core converts the rest through it)
      if dtypes.is_float(sb): return self.let(f"{'fpext' if _BITS[_scalar_of(st)] < _BITS[_scalar_of(dty)] else 'fptrunc'} {st} {v} to {dty}")
      return self.let(f"{'sitofp' if dtypes.is_int(sb) and not dtypes.is_unsigned(sb) else 'uitofp'} {st} {v} to {dty}")
    if dtypes.is_float(sb): return self.float_to_int(v, st, x.dtype)
    if st == dty: return v
    if _BITS[_scalar_of(st)] > _BITS[_scalar_of(dty)]: return self.let(f"trunc {st} {v} to {dty}")
    return self.let(f"{'zext' if sb == dtypes.bool or dtypes.is_unsigned(sb) else 'sext'} {st} {v} to {dty}")
  def float_to_int(self, x: str, st: str, d: DType) -> str:
    """Saturating float -> int, NaN -> 0 (the selects vectorize; llvm.fpto*i.sat would be split into scalars on x86)."""
    bits, signed, dty, bty = 8 * d.itemsize, not dtypes.is_unsigned(d), ltype(d), _vec("i1", d.count)
    lo, hi = (-2**(bits-1), 2**(bits-1)) if signed else (0, 2**bits)   # hi: the first value past the top, a power of two
    big, small = self.let(f"fcmp oge {st} {x}, {lconst(st, hi)}"), self.let(f"fcmp ole {st} {x}, {lconst(st, lo)}")
    nan = self.let(f"fcmp uno {st} {x}, {x}")
    out_of_range = self.let(f"or {bty} {self.let(f'or {bty} {big}, {small}')}, {nan}")
    safe = self.let(f"select {bty} {out_of_range}, {st} {lconst(st, 0)}, {st} {x}")
    conv = self.let(f"{'fptosi' if signed else 'fptoui'} {st} {safe} to {dty}")
    r = self.let(f"select {bty} {small}, {dty} {lconst(dty, lo)}, {dty} {conv}")
    return self.let(f"select {bty} {big}, {dty} {lconst(dty, hi - 1)}, {dty} {r}")
  def bitcast(self, x: UOp) -> str:
    st, v, n = ltype(x.src[0].dtype), self[x.src[0]], x.dtype.count
    # a bool is an i1 in registers and a byte in memory: its bits are that byte (0 or 1); a byte is true where nonzero
    if x.src[0].dtype.scalar == dtypes.bool: st, v = _vec("i8", n), self.let(f"zext {st} {v} to {_vec('i8', n)}")
    if x.dtype.scalar == dtypes.bool: return self.let(f"icmp ne {st} {v}, {lconst(st, 0)}")
    return v if st == ltype(x.dtype) else self.let(f"bitcast {st} {v} to {ltype(x.dtype)}")

  # ***** ALU *****
  def alu(self, u: UOp) -> str:
    op, dt = u.op, u.dtype
    a = [self[s] for s in u.src]
    ty = ltype(dt)
    if op is Ops.WHERE: return self.let(f"select {ltype(u.src[0].dtype)} {a[0]}, {ty} {a[1]}, {ty} {a[2]}")
    if op in GroupOp.Comparison:
      sdt, sty = u.src[0].dtype, ltype(u.src[0].dtype)
      if dtypes.is_float(sdt): return self.let(f"fcmp {({Ops.CMPLT: 'olt', Ops.CMPNE: 'une', Ops.CMPEQ: 'oeq'})[op]} {sty} {a[0]}, {a[1]}")
      lt = "ult" if dtypes.is_unsigned(sdt) or sdt.scalar == dtypes.bool else "slt"
      return self.let(f"icmp {({Ops.CMPLT: lt, Ops.CMPNE: 'ne', Ops.CMPEQ: 'eq'})[op]} {sty} {a[0]}, {a[1]}")
    if dtypes.is_float(dt): return self.float_alu(op, dt, ty, a)
    if dt.scalar == dtypes.bool: return self.bool_alu(op, ty, a)
    return self.int_alu(op, dt, ty, a)

  def float_alu(self, op: Ops, dt: DType, ty: str, a: list[str]) -> str:
    simple = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv", Ops.MOD: "frem"}
    if op in simple: return self.let(f"{simple[op]} {ty} {a[0]}, {a[1]}")
    if op is Ops.NEG: return self.let(f"fneg {ty} {a[0]}")
    if op is Ops.RECIP: return self.let(f"fdiv {ty} {lconst(ty, 1.0)}, {a[0]}")
    if op is Ops.IDIV: return self.intr("floor", ty, self.let(f"fdiv {ty} {a[0]}, {a[1]}"))
    if op is Ops.MAX:  # NaN in either operand gives NaN
      ge = self.let(f"fcmp oge {ty} {a[0]}, {a[1]}")
      nan = self.let(f"fcmp uno {ty} {a[0]}, {a[0]}")
      pick = self.let(f"or {_vec('i1', dt.count)} {ge}, {nan}")
      return self.let(f"select {_vec('i1', dt.count)} {pick}, {ty} {a[0]}, {ty} {a[1]}")
    # rounded once, everywhere (llvm.fmuladd would let LLVM choose per loop: a vector body and its scalar remainder disagreed)
    if op is Ops.MULACC: return self.intr("fma", ty, *a)
    if op in (Ops.SQRT, Ops.TRUNC, Ops.SIN): return self.intr({Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.SIN: "sin"}[op], ty, a[0])
    if op in (Ops.EXP2, Ops.LOG2):
      name = "exp2" if op is Ops.EXP2 else "log2"
      return self.intr(name, ty, a[0]) if dt.scalar == dtypes.float64 else self.call(ty, self.helper(name, ty), [(ty, a[0])])
    raise UnsupportedError(f"CPU: no float rule for {op}")

  def bool_alu(self, op: Ops, ty: str, a: list[str]) -> str:
    table = {Ops.ADD: "or", Ops.OR: "or", Ops.MAX: "or", Ops.MUL: "and", Ops.AND: "and", Ops.XOR: "xor", Ops.SUB: "xor"}
    if op in table: return self.let(f"{table[op]} {ty} {a[0]}, {a[1]}")
    if op is Ops.NEG: return self.let(f"xor {ty} {a[0]}, {lconst(ty, True)}")
    if op is Ops.MULACC: return self.let(f"or {ty} {self.let(f'and {ty} {a[0]}, {a[1]}')}, {a[2]}")
    raise UnsupportedError(f"CPU: no bool rule for {op}")

  def int_alu(self, op: Ops, dt: DType, ty: str, a: list[str]) -> str:
    signed = not dtypes.is_unsigned(dt)
    simple = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.XOR: "xor", Ops.OR: "or", Ops.AND: "and"}
    if op in simple: return self.let(f"{simple[op]} {ty} {a[0]}, {a[1]}")
    if op is Ops.NEG: return self.let(f"sub {ty} {lconst(ty, 0)}, {a[0]}")
    if op is Ops.MULACC: return self.let(f"add {ty} {self.let(f'mul {ty} {a[0]}, {a[1]}')}, {a[2]}")
    if op is Ops.MAX:
      gt = self.let(f"icmp {'sgt' if signed else 'ugt'} {ty} {a[0]}, {a[1]}")
      return self.let(f"select {_vec('i1', dt.count)} {gt}, {ty} {a[0]}, {ty} {a[1]}")
    if op in (Ops.SHL, Ops.SHR):  # the shift amount is taken modulo the bit width
      n = self.let(f"and {ty} {a[1]}, {lconst(ty, 8 * dt.itemsize - 1)}")
      return self.let(f"{'shl' if op is Ops.SHL else 'ashr' if signed else 'lshr'} {ty} {a[0]}, {n}")
    if op in (Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.RECIP):
      x, y = (lconst(ty, 1), a[0]) if op is Ops.RECIP else (a[0], a[1])
      return self.int_divide(op is Ops.MOD, signed, dt, ty, x, y)
    raise UnsupportedError(f"CPU: no integer rule for {op} on {dt.scalar.name}")

  def int_divide(self, mod: bool, signed: bool, dt: DType, ty: str, x: str, y: str) -> str:
    """Truncating division that never traps: a zero divisor gives 0, MIN / -1 wraps to MIN (remainder 0)."""
    bty = _vec("i1", dt.count)
    zero = self.let(f"icmp eq {ty} {y}, {lconst(ty, 0)}")
    bad = zero
    if signed:
      is_min = self.let(f"icmp eq {ty} {x}, {lconst(ty, -2**(8*dt.itemsize-1))}")
      is_m1 = self.let(f"icmp eq {ty} {y}, {lconst(ty, -1)}")
      bad = self.let(f"or {bty} {zero}, {self.let(f'and {bty} {is_min}, {is_m1}')}")
    safe = self.let(f"select {bty} {bad}, {ty} {lconst(ty, 1)}, {ty} {y}")
    q = self.let(f"{('s' if signed else 'u') + ('rem' if mod else 'div')} {ty} {x}, {safe}")
    return self.let(f"select {bty} {zero}, {ty} {lconst(ty, 0)}, {ty} {q}")

  def vectorize(self, u: UOp) -> str:
    ty, sty = ltype(u.dtype), ltype(u.dtype.scalar)
    if all(s.op is Ops.CONST for s in u.src): return "<" + ", ".join(f"{sty} {self.r[s]}" for s in u.src) + ">"
    if all(s is u.src[0] for s in u.src):  # a broadcast: insert once, shuffle to every lane
      one = self.let(f"insertelement {ty} poison, {sty} {self[u.src[0]]}, i32 0")
      return self.let(f"shufflevector {ty} {one}, {ty} poison, <{len(u.src)} x i32> zeroinitializer")
    v = "poison"
    for i, s in enumerate(u.src): v = self.let(f"insertelement {ty} {v}, {sty} {self[s]}, i32 {i}")
    return v

def load(ctx: LLVMKernel, x: UOp) -> str:
  dt, idx = x.dtype, x.src[0]
  if len(idx.src) > 2:  # lanes whose mask is off are not read (they read as 0)
    ty, mask = ltype(dt, mem=True), idx.src[2]
    raw = ctx.call(ty, f"llvm.masked.load.{lsuffix(ty)}.p0", [("ptr", ctx.r[idx]), ("i32", str(dt.scalar.itemsize)), (ltype(mask.dtype), ctx[mask]), (ty, lconst(ty, 0))])
  else: raw = ctx.let(f"load {ltype(dt, mem=True)}, ptr {ctx.r[idx]}, align {dt.itemsize}")
  return ctx.let(f"icmp ne {ltype(dt, mem=True)} {raw}, {lconst(ltype(dt, mem=True), 0)}") if dt.scalar == dtypes.bool else raw   # a bool is a byte
def store(ctx: LLVMKernel, x: UOp) -> str:
  vdt, v = x.src[1].dtype, ctx[x.src[1]]
  if vdt.scalar == dtypes.bool: v = ctx.let(f"zext {ltype(vdt)} {v} to {ltype(vdt, mem=True)}")
  return ctx.ins(f"store {ltype(vdt, mem=True)} {v}, ptr {ctx.r[x.src[0]]}, align {vdt.itemsize}")
def core_loop(ctx: LLVMKernel, x: UOp) -> str:   # the core loop around the whole body, closed in render_kernel
  core_id(x)
  ctx.core = True
  ctx.loop("core", "i32", "%core_start", "%core_end")
  return "%core" if ltype(x.dtype) == "i32" else ctx.let(f"sext i32 %core to {ltype(x.dtype)}")
def acc(ctx: LLVMKernel, x: UOp) -> str:
  ctx.allocas.append(f"  %acc{x.arg} = alloca {ltype(x.dtype)}, align 64")
  return ctx.ins(f"store {ltype(x.dtype)} {ctx[x.src[0]]}, ptr %acc{x.arg}") or f"%acc{x.arg}"

def _itype(fty: str, bits: int = 32) -> str: return _vec(f"i{bits}", _lanes(fty))

def _helper_text(name: str, ty: str, arg: str, body: list[str]) -> str:
  return f"define internal {ty} @{name}({arg}) #1 {{\n" + "\n".join(f"  {line}" for line in body) + "\n}"

def _exp2_f32(k: LLVMKernel, name: str, F: str) -> str:
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

def _log2_f32(k: LLVMKernel, name: str, F: str) -> str:
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

_HELPERS = {"exp2": _exp2_f32, "log2": _log2_f32}

class LLVMRenderer(ISARenderer):
  """LLVM IR for the host CPU. One function per kernel: void name(ptr data0.., iN var0.., i32 core_start, i32 core_end);
  the body runs once per core id in [core_start, core_end) (the chunks of the split outer loop). The target is described
  by the host's features (vector width, vector registers, FMA, L2 size) unless given: a description renders on any machine."""
  device, language = "CPU", "LLVM IR"
  global_dims = 0
  supported_dtypes = frozenset(ALL_DTYPES)
  alu_dtypes = frozenset(ALL_DTYPES) - {dtypes.float16, dtypes.bfloat16}   # half math in float (fpext/fptrunc), bfloat16 as its bits
  float_conversions = frozenset({dtypes.float16})
  upcast_max = 8
  max_buffers = 960   # the driver calls a kernel through ctypes, which passes at most 1024 arguments (buffers, variables, 2 core ids)
  instruction, kernel = "  {}", LLVMKernel
  def __init__(self, threads: int | None = None, vector_width: int | None = None, vector_registers: int | None = None, fma: bool | None = None,
               cache_bytes: int | None = None):
    self.threads = cpu_threads() if threads is None else threads
    self.cache_bytes = host_cache_bytes() if cache_bytes is None else cache_bytes
    self.vector_width = host_vector_width() if vector_width is None else vector_width
    self.vector_registers = host_vector_registers() if vector_registers is None else vector_registers
    self.mulacc_dtypes = FMA_DTYPES if (host_fma() if fma is None else fma) else frozenset()
  def reg_kind(self, dt: DType) -> str: return "t"
  def render_kernel(self, k: LLVMKernel) -> str:
    if k.core: k.end_loop("core", "i32")
    k.ins("ret void")
    params = k.params + ["i32 %core_start", "i32 %core_end"]
    head = [_signature_line(";", k.name, k.uops), f"define void @{k.name}({', '.join(params)}) #0 {{", "entry:"]
    return "\n".join(head + k.allocas + ["  br label %body", "body:"] + k.lines + ["}"] + list(k.helpers.values()) +
                     list(k.decls.values()) + ['attributes #0 = { nounwind "frame-pointer"="none" }', "attributes #1 = { alwaysinline nounwind }"]) + "\n"

  rules = PatternMatcher([
    (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: ctx.params.append(f"ptr %data{x.arg}") or f"%data{x.arg}"),
    (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.params.append(f"{ltype(x.dtype)} %var_{_fname(x.arg[0])}") or f"%var_{_fname(x.arg[0])}"),
    (UPat(Ops.CONST, name="x"), lambda ctx, x: lconst(ltype(x.dtype), x.arg)),
    (UPat(Ops.SPECIAL, name="x"), core_loop),
    (UPat(Ops.RANGE, name="x"), lambda ctx, x: ctx.loop(f"r{(i := ctx.loops.setdefault(x, len(ctx.loops)))}", ltype(x.dtype), "0", ctx[x.src[0]]) or f"%r{i}"),
    (UPat(Ops.ENDRANGE, name="x"), lambda ctx, x: ctx.end_loop(f"r{ctx.loops[x.src[0]]}", ltype(x.src[0].dtype))),
    (UPat(Ops.DEFINE_REG, name="x"), lambda ctx, x: ctx.allocas.append(f"  %local{x.arg} = alloca [{x.dtype.size} x {ltype(x.dtype.base.scalar, mem=True)}], "
                                                                          "align 64") or f"%local{x.arg}"),   # on the stack of the thread running the kernel
    (UPat(Ops.DEFINE_ACC, name="x"), acc),
    (UPat(Ops.ASSIGN, name="x"), lambda ctx, x: ctx.ins(f"store {ltype(x.dtype)} {(v := ctx[x.src[1]])}, ptr {ctx.r[x.src[0]]}") or v),
    # a masked vector's address (its third source is the mask) may start before the buffer: not inbounds
    (UPat(Ops.INDEX, name="x"), lambda ctx, x: ctx.let(f"getelementptr{'' if len(x.src) > 2 else ' inbounds'} {ltype(x.src[0].dtype.base.scalar, mem=True)}, "
                                                    f"ptr {ctx.r[x.src[0]]}, {ltype(x.src[1].dtype)} {ctx[x.src[1]]}")),
    (UPat(Ops.LOAD, name="x"), load),
    (UPat(Ops.STORE, name="x"), store),
    (UPat(Ops.GEP, name="x"), lambda ctx, x: ctx.let(f"extractelement {ltype(x.src[0].dtype)} {ctx[x.src[0]]}, i32 {x.arg}")),
    (UPat(Ops.VECTORIZE, name="x"), lambda ctx, x: ctx.vectorize(x)),
    (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.cast(x)),
    (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.bitcast(x)),
    (UPat(GroupOp.ALU, name="x"), lambda ctx, x: ctx.alu(x)),
  ])

# ***** C *****

class CRenderer(CStyleRenderer):
  """C for clang or gcc (CPU_RENDERER=C): scalar code with the same semantics and the same function signature as the LLVM
  renderer; the compiler's own vectorizer does the SIMD. Build flags keep IEEE semantics (no fast-math, no contraction)."""
  device = "CPU"
  global_dims = 0
  supported_dtypes = frozenset(ALL_DTYPES)
  alu_dtypes = frozenset(ALL_DTYPES) - {dtypes.float16, dtypes.bfloat16}   # half math in float, _Float16 for its conversions
  float_conversions = frozenset({dtypes.float16})
  upcast_max = 8
  max_buffers = 960   # the driver calls a kernel through ctypes, which passes at most 1024 arguments (buffers, variables, 2 core ids)
  def __init__(self, threads: int | None = None):
    self.threads = cpu_threads() if threads is None else threads
    self.mulacc_dtypes = FMA_DTYPES if host_fma() else frozenset()
  def render_special(self, ctx: CStyleKernel, x: UOp) -> str:   # the core loop around the whole body, closed at the end
    core_id(x)
    ctx.open("for (int32_t core = core_start; core < core_end; core++) {")
    return f"(({ctx.type(x.dtype)})core)"
  def render_kernel(self, k: CStyleKernel) -> str:
    params = ", ".join(k.params + ["int32_t core_start", "int32_t core_end"])
    core_end = ["  }"] if any(u.op is Ops.SPECIAL for u in k.uops) else []
    return "\n".join([_signature_line("//", k.name, k.uops), self.prelude, *k.helpers.values(),
                      f'__attribute__((visibility("default"))) void {k.name}({params}) {{', *k.lines, *core_end, "}", ""])
