"""A PTX interpreter (NV_EMULATE=1): each kernel is decoded once into Python closures, then run over numpy lanes (all
threads of many blocks at once), with per-lane program counters when branches diverge; global memory lives in host RAM."""
from __future__ import annotations
import bisect, re
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np

class EmulatorError(RuntimeError):
  """The emulated kernel did something PTX does not allow (or the emulator does not know): the message names it."""

NP = {"pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16, "s16": np.int16,
      "f16": np.float16, "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32, "b64": np.uint64,
      "u64": np.uint64, "s64": np.int64, "f64": np.float64}
LANES = 1 << 16   # threads run together: whole blocks, up to about this many (kernels without barriers are independent per thread)

# ***** global memory *****

class EmulatedMemory:
  """Buffers of host RAM at device-like addresses (never reused), so pointers, offsets and pointer arithmetic work as on a GPU."""
  def __init__(self):
    self.bases: list[int] = []
    self.bufs: dict[int, np.ndarray] = {}
    self.next = 1 << 32
  def alloc(self, size: int) -> int:
    arr = np.zeros((size + 15) // 16 * 16, np.uint8)   # raises MemoryError for impossible sizes
    addr, self.next = self.next, self.next + (size + 511) // 256 * 256
    bisect.insort(self.bases, addr)
    self.bufs[addr] = arr
    return addr
  def free(self, addr: int) -> None:
    if self.bufs.pop(addr, None) is None: raise EmulatorError(f"NV emulator: free of {addr:#x}, which is not an allocation")
    del self.bases[bisect.bisect_left(self.bases, addr)]
  def span(self, addr: int, size: int) -> np.ndarray:
    """The bytes [addr, addr + size) as a numpy view; an error unless they lie in one live buffer."""
    i = bisect.bisect_right(self.bases, addr) - 1
    if i < 0: raise EmulatorError(f"NV emulator: address {addr:#x} is not in any buffer")
    base = self.bases[i]
    arr = self.bufs[base]
    if addr + size > base + arr.size: raise EmulatorError(f"NV emulator: {size} bytes at {addr:#x} run past the end of the buffer at {base:#x} ({arr.size} bytes)")
    return arr[addr - base:addr - base + size]
  def elements(self, addrs: np.ndarray, ty: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(a typed view of the one buffer every address lies in, element indices), checking bounds and alignment."""
    size = np.dtype(NP[ty]).itemsize
    lo, hi = int(addrs.min()), int(addrs.max())
    i = bisect.bisect_right(self.bases, lo) - 1
    base = self.bases[i] if i >= 0 else 0
    arr = self.bufs.get(base)
    if arr is None or hi + size > base + arr.size:
      raise EmulatorError(f"NV emulator: {what} of {ty} at addresses [{lo:#x}, {hi:#x}] outside one allocated buffer")
    off = addrs - np.uint64(base)
    if size > 1 and np.any(off % np.uint64(size)): raise EmulatorError(f"NV emulator: misaligned {what} of {ty} (addresses must be multiples of {size})")
    return arr.view(NP[ty]), (off // np.uint64(size)).astype(np.int64)

# ***** decoding *****

@dataclass
class Thread:
  """What the instructions of one running batch see: registers (arrays over lanes), special registers, params, the mask."""
  regs: dict[str, np.ndarray]
  special: dict[str, Any]
  params: dict[str, Any]
  memory: EmulatedMemory
  n: int
  mask: np.ndarray | None = None   # lanes executing this instruction when branches diverged (None: all)
  def keep(self, alive: np.ndarray) -> None:
    """Drop the lanes that exited: nothing reads them again."""
    for k, v in self.regs.items(): self.regs[k] = v[alive]
    self.special = {k: (v[alive] if isinstance(v, np.ndarray) else v) for k, v in self.special.items()}
    self.n = int(alive.sum())

@dataclass
class Instr:
  text: str
  kind: str                               # "op", "bra", "exit"
  guard: tuple[str, bool] | None          # (predicate register, negated)
  run: Callable[[Thread], None] | None = None
  target: int = -1
  label: str = ""

def parse_imm(tok: str, ty: str):
  """An immediate operand as a value of type ty; 0f/0d literals are bit patterns (of an f32/f64, or of a .b32/.b64 operand)."""
  kind = ty[0]
  if tok.startswith(("0f", "0F", "0d", "0D")):
    bits = np.array(int(tok[2:], 16), np.uint32 if tok[1] in "fF" else np.uint64)
    if bits.dtype.itemsize != np.dtype(NP[ty]).itemsize: raise ValueError(f"{tok} is not a {ty} literal")
    return bits.view(NP[ty])
  v = int(tok, 0)
  if kind == "f": return np.array(v, NP[ty])
  if ty == "pred": return np.array(bool(v))
  bits = 8 * np.dtype(NP[ty]).itemsize
  return np.array(v & ((1 << bits) - 1), f"u{bits // 8}").view(NP[ty])

class Decoder:
  """Turns the text of one kernel into Instrs; unknown instructions are errors naming them."""
  def __init__(self, ptx: str, name: str):
    self.name = name
    text = re.sub(r"//[^\n]*", "", ptx)
    m = re.search(r"\.entry\s+(\w+)\s*\((.*?)\)\s*\{(.*)\}", text, re.S)
    if m is None: raise EmulatorError(f"NV emulator: kernel {name!r} has no .entry")
    self.entry = m.group(1)
    self.param_types = {p: t for t, p in re.findall(r"\.param\s+\.(\w+)\s+(\w+)", m.group(2))}
    self.param_order = re.findall(r"\.param\s+\.\w+\s+(\w+)", m.group(2))
    self.reg_types: dict[str, str] = {}
    body = m.group(3)
    for ty, prefix in re.findall(r"\.reg\s+\.(\w+)\s+%(\w+?)<\d+>\s*;", body): self.reg_types[prefix] = ty
    body = re.sub(r"\.reg\s+[^;]*;", "", body)
    self.instrs: list[Instr] = []
    labels: dict[str, int] = {}
    for stmt in re.split(r";|\n", body):
      stmt = stmt.strip()
      while (lm := re.match(r"(\$?\w+):\s*", stmt)):
        labels[lm.group(1)] = len(self.instrs)
        stmt = stmt[lm.end():]
      if stmt: self.instrs.append(self.decode(stmt))
    for ins in self.instrs:
      if ins.kind == "bra":
        if ins.label not in labels: raise EmulatorError(f"NV emulator: kernel {name}: branch to unknown label {ins.label}")
        ins.target = labels[ins.label]

  def rtype(self, reg: str) -> str:
    prefix = re.match(r"%([a-z]+)", reg).group(1)
    if prefix not in self.reg_types: raise EmulatorError(f"NV emulator: kernel {self.name}: register {reg} is not declared")
    return self.reg_types[prefix]

  def reader(self, tok: str, ty: str) -> Callable[[Thread], Any]:
    """A function giving operand tok's value as type ty: registers are reinterpreted (a wider one truncated, as PTX allows for
    ld/st/cvt), immediates are typed constants, %tid.x etc. are the special registers."""
    tok = tok.strip()
    want = NP[ty]
    if re.fullmatch(r"%(tid|ntid|ctaid|nctaid)\.[xyz]", tok): return lambda t: np.asarray(t.special[tok]).astype(want)
    if tok.startswith("%"):
      have = NP[self.rtype(tok)]
      if have == want: return lambda t: t.regs.get(tok, np.zeros(t.n, have))
      hs, ws = np.dtype(have).itemsize, np.dtype(want).itemsize
      if hs == ws: return lambda t: t.regs.get(tok, np.zeros(t.n, have)).view(want)
      if hs > ws:
        narrow = np.dtype(f"u{ws}")
        return lambda t: t.regs.get(tok, np.zeros(t.n, have)).astype(narrow).view(want)
      raise EmulatorError(f"NV emulator: kernel {self.name}: register {tok} ({self.rtype(tok)}) is narrower than {ty}")
    try: c = parse_imm(tok, ty)
    except ValueError: raise EmulatorError(f"NV emulator: kernel {self.name}: bad operand {tok!r}") from None
    return lambda t: c

  def writer(self, tok: str, ty: str) -> Callable[[Thread, Any], None]:
    """A function storing a value of type ty into register tok: widened by ty's signedness when the register is wider."""
    have = NP[self.rtype(tok)]
    hs, ws = np.dtype(have).itemsize, np.dtype(NP[ty]).itemsize
    signed = ty.startswith("s")
    def write(t: Thread, v) -> None:
      v = np.asarray(v)
      if v.dtype != NP[ty]: v = v.astype(NP[ty])
      if hs != ws: v = v.astype(f"i{hs}" if signed else f"u{hs}")
      v = v.view(have) if v.dtype != have and v.dtype.itemsize == hs else v.astype(have)
      if v.ndim == 0 or v.shape[0] != t.n: v = np.broadcast_to(v, (t.n,))
      if t.mask is None: t.regs[tok] = np.array(v)
      else: t.regs[tok] = np.where(t.mask, v, t.regs.get(tok, np.zeros(t.n, have)))
    if hs < ws: raise EmulatorError(f"NV emulator: kernel {self.name}: register {tok} is narrower than {ty}")
    return write

  def decode(self, stmt: str) -> Instr:
    guard = None
    if (gm := re.match(r"@(!?)(%\w+)\s+", stmt)):
      guard, stmt = (gm.group(2), gm.group(1) == "!"), stmt[gm.end():]
    opcode, _, rest = stmt.partition(" ")
    ops = [o.strip() for o in rest.split(",")] if rest.strip() else []
    parts = opcode.split(".")
    if parts[0] == "bra": return Instr(stmt, "bra", guard, label=ops[0])
    if parts[0] in ("exit", "ret"): return Instr(stmt, "exit", guard)
    fn = OPS.get(parts[0])
    if fn is None: raise EmulatorError(f"NV emulator: kernel {self.name}: instruction {parts[0]!r} is not implemented ({stmt})")
    try: run = fn(self, parts[1:], ops)
    except EmulatorError: raise
    except Exception as e: raise EmulatorError(f"NV emulator: kernel {self.name}: cannot decode {stmt!r}: {type(e).__name__}: {e}") from e
    return Instr(stmt, "op", guard, run)

# ***** instruction semantics: each builder gets the decoder, the opcode's modifiers and the operands, returns run(thread) *****

TYPES = set(NP)
def types_of(mods: list[str]) -> list[str]: return [m for m in mods if m in TYPES]

def sat_float_to_int(x: np.ndarray, ty: str) -> np.ndarray:
  """PTX float->int: rounded by the instruction, clamped to the destination's range, NaN -> 0."""
  info = np.iinfo(NP[ty])
  x = np.nan_to_num(np.asarray(x, np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf)
  over, under = x >= float(info.max), x <= float(info.min)
  safe = np.where(over | under, 0, x).astype(NP[ty])
  return np.where(over, NP[ty](info.max), np.where(under, NP[ty](info.min), safe))

def _unary(fn):
  def build(d: Decoder, mods, ops):
    ty = types_of(mods)[-1]
    a, out = d.reader(ops[1], ty), d.writer(ops[0], ty)
    def run(t):
      with np.errstate(all="ignore"): out(t, fn(a(t), ty))
    return run
  return build

def _binary(fn):
  def build(d: Decoder, mods, ops):
    ty = types_of(mods)[-1]
    a, b, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.writer(ops[0], ty)
    def run(t):
      with np.errstate(all="ignore"): out(t, fn(a(t), b(t), ty, mods))
    return run
  return build

def _int_div(a, b, ty, mods):
  if ty[0] == "f": return np.divide(a, b)
  b = np.where(b == 0, 1, b).astype(a.dtype)   # PTX leaves x / 0 undefined: any value will do, it must not trap
  q = np.floor_divide(a, b)
  fix = (a - q * b != 0) & ((a < 0) != (b < 0))
  return np.where(fix, q + 1, q).astype(a.dtype)

def _int_rem(a, b, ty, mods):
  return (a - _int_div(a, b, ty, mods) * np.where(b == 0, 1, b).astype(a.dtype)).astype(a.dtype)

def _mul(a, b, ty, mods):
  if "wide" in mods:
    wide = {"s32": np.int64, "u32": np.uint64, "s16": np.int32, "u16": np.uint32}[ty]
    return a.astype(wide) * b.astype(wide)
  if "hi" in mods: raise EmulatorError("NV emulator: mul.hi is not implemented")
  return a * b

def _shift(left: bool):
  def fn(a, n, ty, mods):
    bits = 8 * a.dtype.itemsize
    n = np.asarray(n).astype(np.uint64)
    big = n >= bits   # PTX clamps the shift amount to the width
    m = np.minimum(n, bits - 1).astype(a.dtype)
    if left: return np.where(big, 0, np.left_shift(a, m)).astype(a.dtype)
    r = np.right_shift(a, m)
    return np.where(big, np.where(a < 0, -1, 0) if ty.startswith("s") else 0, r).astype(a.dtype)
  return fn

def _build_shift(left: bool):
  sh = _shift(left)
  def build(d, mods, ops):
    ty = types_of(mods)[-1]
    a, n, out = d.reader(ops[1], ty), d.reader(ops[2], "u32"), d.writer(ops[0], ty)
    def run(t): out(t, sh(a(t), n(t), ty, mods))
    return run
  return build

def _mov(d, mods, ops):
  ty = types_of(mods)[-1]
  src, out = d.reader(ops[1], ty), d.writer(ops[0], ty)
  return lambda t: out(t, src(t))

def _fused(d, mods, ops):   # mad.lo (ints, wrapping) and fma.rn (floats: one rounding, via float64 for f32)
  ty = types_of(mods)[-1]
  a, b, c, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.reader(ops[3], ty), d.writer(ops[0], ty)
  def run(t):
    with np.errstate(all="ignore"):
      if ty == "f32": out(t, (a(t).astype(np.float64) * b(t) + c(t)).astype(np.float32))
      elif ty == "f64": raise EmulatorError("NV emulator: fma.f64 is not implemented")
      else: out(t, a(t) * b(t) + c(t))
  return run

CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
       "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}
def _setp(d, mods, ops):
  ty = types_of(mods)[-1]
  cmp = mods[0]
  boolop = next((m for m in mods[1:] if m in ("and", "or", "xor")), None)
  a, b = d.reader(ops[1], ty), d.reader(ops[2], ty)
  c = d.reader(ops[3].lstrip("!"), "pred") if boolop else None
  neg_c = boolop is not None and ops[3].startswith("!")
  out = d.writer(ops[0], "pred")
  def compare(x, y):
    if cmp == "nan": return np.isnan(x) | np.isnan(y)
    if cmp == "num": return ~(np.isnan(x) | np.isnan(y))
    if cmp.endswith("u") and cmp != "u":   # unordered forms: true when either is NaN
      return CMP[cmp[:-1]](x, y) | np.isnan(x) | np.isnan(y)
    if cmp not in CMP: raise EmulatorError(f"NV emulator: setp.{cmp} is not implemented")
    return CMP[cmp](x, y)   # ordered: NaN compares false (ne included)
  def run(t):
    with np.errstate(invalid="ignore"): p = compare(a(t), b(t))
    if boolop:
      q = c(t)
      q = ~q if neg_c else q
      p = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[boolop](p, q)
    out(t, p)
  return run

def _selp(d, mods, ops):
  ty = types_of(mods)[-1]
  a, b, p, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.reader(ops[3], "pred"), d.writer(ops[0], ty)
  return lambda t: out(t, np.where(p(t), a(t), b(t)))

def _logic(fn):
  def build(d, mods, ops):
    ty = types_of(mods)[-1]
    srcs, out = [d.reader(o, ty) for o in ops[1:]], d.writer(ops[0], ty)
    return lambda t: out(t, fn(*[s(t) for s in srcs]))
  return build

def _bfe(d, mods, ops):
  ty = types_of(mods)[-1]
  a, pos, ln, out = d.reader(ops[1], ty), d.reader(ops[2], "u32"), d.reader(ops[3], "u32"), d.writer(ops[0], ty)
  if ty != "u32": raise EmulatorError(f"NV emulator: bfe.{ty} is not implemented")
  def run(t):
    p, n = int(pos(t)), int(ln(t))
    out(t, (a(t) >> np.uint32(p)) & np.uint32((1 << n) - 1))
  return run

def _cvt(d, mods, ops):
  dt, at = types_of(mods)[-2:]
  rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), None)
  if "sat" in mods: raise EmulatorError("NV emulator: cvt.sat is not implemented")
  a, out = d.reader(ops[1], at), d.writer(ops[0], dt)
  fa, fd = at[0] == "f", dt[0] == "f"
  if fa and fd and dt == at:   # round to an integral value in the same type
    r = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}.get(rnd)
    if r is None: raise EmulatorError(f"NV emulator: cvt.{rnd}.{dt}.{at} is not implemented")
    return lambda t: out(t, r(a(t)))
  if fa and not fd:
    r = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}.get(rnd)
    if r is None: raise EmulatorError(f"NV emulator: cvt.{dt}.{at} needs an integer rounding modifier")
    def run(t):
      with np.errstate(invalid="ignore"): out(t, sat_float_to_int(r(a(t).astype(np.float64)), dt))
    return run
  if fd and rnd not in (None, "rn"): raise EmulatorError(f"NV emulator: cvt.{rnd}.{dt}.{at} is not implemented")
  def conv(t):
    with np.errstate(all="ignore"): out(t, a(t).astype(NP[dt]))   # float narrowing and int->float round to nearest even; ints wrap/extend
  return conv

def _ld(d, mods, ops):
  ty = types_of(mods)[-1]
  out = d.writer(ops[0], ty)
  addr = ops[1].strip("[] ")
  if "param" in mods:
    return lambda t: out(t, np.asarray(t.params[addr]).astype(NP[ty]))
  if "global" not in mods: raise EmulatorError(f"NV emulator: ld.{'.'.join(mods)} (only .param and .global) is not implemented")
  base, _, off = addr.partition("+")
  a = d.reader(base, "u64")
  offset = np.uint64(int(off, 0)) if off else np.uint64(0)
  def run(t):
    addrs = np.broadcast_to(a(t) + offset, (t.n,))
    if t.mask is not None:
      vals = np.zeros(t.n, NP[ty])
      if t.mask.any():
        view, idx = t.memory.elements(addrs[t.mask], ty, "load")
        vals[t.mask] = view[idx]
      return out(t, vals)
    view, idx = t.memory.elements(addrs, ty, "load")
    out(t, view[idx])
  return run

def _st(d, mods, ops):
  ty = types_of(mods)[-1]
  if "global" not in mods: raise EmulatorError(f"NV emulator: st.{'.'.join(mods)} (only .global) is not implemented")
  base, _, off = ops[0].strip("[] ").partition("+")
  a, v = d.reader(base, "u64"), d.reader(ops[1], ty)
  offset = np.uint64(int(off, 0)) if off else np.uint64(0)
  def run(t):
    addrs, vals = np.broadcast_to(a(t) + offset, (t.n,)), np.broadcast_to(v(t), (t.n,))
    if t.mask is not None: addrs, vals = addrs[t.mask], vals[t.mask]
    if addrs.size == 0: return
    view, idx = t.memory.elements(addrs, ty, "store")
    view[idx] = vals
  return run

def _approx(fn):
  def f(x, ty):
    if ty != "f32": raise EmulatorError(f"NV emulator: .approx.{ty} is not implemented")
    return fn(x.astype(np.float64)).astype(np.float32)   # modelled exactly: within the documented error of the hardware's
  return _unary(f)

def _maxmin(fn):
  def f(a, b, ty, mods):
    if ty[0] == "f": return np.where(np.isnan(a), b, np.where(np.isnan(b), a, fn(a, b)))   # PTX: NaN loses unless both are
    return fn(a, b)
  return _binary(f)

OPS: dict[str, Callable] = {
  "mov": _mov, "cvta": _mov, "ld": _ld, "st": _st, "cvt": _cvt, "setp": _setp, "selp": _selp, "bfe": _bfe,
  "add": _binary(lambda a, b, ty, m: a + b), "sub": _binary(lambda a, b, ty, m: a - b), "mul": _binary(_mul),
  "div": _binary(_int_div), "rem": _binary(_int_rem), "mad": _fused, "fma": _fused,
  "max": _maxmin(np.maximum), "min": _maxmin(np.minimum),
  "neg": _unary(lambda a, ty: -a), "not": _unary(lambda a, ty: ~a),
  "rcp": _unary(lambda a, ty: np.divide(a.dtype.type(1), a)), "sqrt": _unary(lambda a, ty: np.sqrt(a)),
  "ex2": _approx(np.exp2), "lg2": _approx(np.log2), "sin": _approx(np.sin),
  "and": _logic(np.bitwise_and), "or": _logic(np.bitwise_or), "xor": _logic(np.bitwise_xor),
  "shl": _build_shift(True), "shr": _build_shift(False),
}
# the wide multiply's result type is twice the instruction's: its writer must be built for that type
def _mul_build(d, mods, ops):
  ty = types_of(mods)[-1]
  if "wide" not in mods: return _binary(_mul)(d, mods, ops)
  wty = {"s32": "s64", "u32": "u64", "s16": "s32", "u16": "u32"}[ty]
  a, b, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.writer(ops[0], wty)
  return lambda t: out(t, _mul(a(t), b(t), ty, mods))
OPS["mul"] = _mul_build

# ***** running a launch *****

class EmulatedKernel:
  """One decoded kernel: call it with its parameter values, the grid and the block."""
  def __init__(self, ptx: str, name: str, memory: EmulatedMemory):
    dec = Decoder(ptx, name)
    self.name, self.memory, self.instrs, self.params = name, memory, dec.instrs, dec.param_order

  def __call__(self, params: dict[str, Any], grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    nblocks, per_block = int(np.prod(grid)), int(np.prod(block))
    if nblocks == 0 or per_block == 0: return
    step = max(1, LANES // per_block)   # blocks per batch
    lane = np.arange(per_block)
    tid = {"x": lane % block[0], "y": lane // block[0] % block[1], "z": lane // (block[0] * block[1])}
    for first in range(0, nblocks, step):
      ids = np.arange(first, min(first + step, nblocks))
      b = np.repeat(ids, per_block)
      special: dict[str, Any] = {f"%tid.{k}": np.tile(v, len(ids)) for k, v in tid.items()}
      special |= {"%ctaid.x": b % grid[0], "%ctaid.y": b // grid[0] % grid[1], "%ctaid.z": b // (grid[0] * grid[1])}
      special |= {f"%ntid.{k}": block[i] for i, k in enumerate("xyz")} | {f"%nctaid.{k}": grid[i] for i, k in enumerate("xyz")}
      self.run_batch(Thread({}, special, params, self.memory, len(b)))

  def run_batch(self, t: Thread) -> None:
    instrs, pc, pcs = self.instrs, 0, None   # pcs: per-lane program counters while the lanes are diverged
    while t.n:
      if pcs is not None:   # diverged: run the lowest pc's lanes (structured code reconverges there)
        pc = int(pcs.min())
        t.mask = pcs == pc
        if t.mask.all(): pcs, t.mask = None, None
      if pc >= len(instrs): return
      ins = instrs[pc]
      go = t.mask
      if ins.guard is not None:
        g = t.regs.get(ins.guard[0], np.zeros(t.n, bool))
        g = ~g if ins.guard[1] else g
        go = g if go is None else (go & g)
      if ins.kind == "op":
        if go is not t.mask:
          saved, t.mask = t.mask, go
          ins.run(t)
          t.mask = saved
        else: ins.run(t)
        if pcs is None: pc += 1
        else: pcs[t.mask] += 1
      elif ins.kind == "bra":
        taken = np.ones(t.n, bool) if go is None else go
        if pcs is None:
          if taken.all(): pc = ins.target; continue
          if not taken.any(): pc += 1; continue
          pcs = np.full(t.n, pc, np.int64)
          t.mask = np.ones(t.n, bool)
        pcs = np.where(t.mask & taken, ins.target, np.where(t.mask, pcs + 1, pcs))
      else:   # exit: these lanes are done
        leaving = np.ones(t.n, bool) if go is None else go
        if leaving.all(): return
        if pcs is not None: pcs[t.mask & ~leaving] += 1
        else: pc += 1
        if leaving.any():
          alive = ~leaving
          t.keep(alive)
          if pcs is not None: pcs = pcs[alive]
        t.mask = None
