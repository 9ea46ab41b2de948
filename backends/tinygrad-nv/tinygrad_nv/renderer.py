"""NV renderer: linear UOps -> one PTX kernel (ISA 8.0, sm_90 by default, NV_ARCH to choose) with the core's exact semantics."""
from __future__ import annotations
import os, re, struct
from tinycore.dtype import DType, dtypes, ALL_DTYPES
from tinycore.uop import UOp, Ops, GroupOp, split_terms
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.renderer import TensorCore, on, async_copies
from tinycore.renderer.isa import ISARenderer, ISAKernel, shift_of_divisor, unsigned_divisor, fragment_rules
from tinycore.codegen.transcendental import sin_rules, fmod_rules, exp2_log2_f64_rules
from tinycore.runtime.errors import UnsupportedError

PTX_VERSION = "8.0"
GRID_YZ_MAX = 65535    # gridDim.y/z limit: the driver launches taller grids in slices, passing each slice's first block
WARP = 32              # lanes of a warp
LAUNCH_THREADS, LAUNCH_GROUPS = "// launch: threads", "// launch: groups"   # what global_size counts, read by the driver

# registers by the kind of value they hold: bool in predicates, 8/16-bit ints sign/zero-extended in 32 bits (the core computes
# them in 32 bits), half in 16-bit registers (the core computes it in float32 and converts), bfloat16 never (the core holds
# it as its bits, a uint16)
REG_DECL = {"p": ".pred", "r": ".b32", "rd": ".b64", "f": ".f32", "fd": ".f64", "h": ".b16"}
MOV = {"p": "pred", "h": "b16", "r": "b32", "f": "b32", "rd": "b64", "fd": "b64"}   # a register kind's untyped moves and selects
def reg_kind(dt: DType) -> str:
  return {dtypes.bool: "p", dtypes.int64: "rd", dtypes.uint64: "rd", dtypes.float64: "fd", dtypes.float32: "f", dtypes.float16: "h"}.get(dt.scalar, "r")

def op_type(dt: DType) -> str:
  """The PTX instruction type a value of dt is computed with."""
  dt = dt.scalar
  if dtypes.is_float(dt): return f"f{8 * dt.itemsize}"
  if dt == dtypes.bool: return "pred"
  return f"{'u' if dtypes.is_unsigned(dt) else 's'}{64 if dt.itemsize == 8 else 32}"

def mem_type(dt: DType) -> str:
  """The PTX type of dt in memory (ld/st)."""
  dt = dt.scalar
  if dt == dtypes.bool: return "u8"
  if dtypes.is_float(dt): return "b16" if dt.itemsize == 2 else f"f{8 * dt.itemsize}"
  return f"{'u' if dtypes.is_unsigned(dt) else 's'}{8 * dt.itemsize}"

def render_const(x, dt: DType) -> str:
  dt = dt.scalar
  if dt == dtypes.float64: return "0d%016X" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]
  if dt == dtypes.float32: return "0f%08X" % struct.unpack("<I", struct.pack("<f", float(x)))[0]
  if dt == dtypes.float16: return "0x%04X" % struct.unpack("<H", struct.pack("<e", float(x)))[0]
  return ("1" if x else "0") if dt == dtypes.bool else str(int(x))

# the op table: each op on a kind of operand, as instruction templates ({t} the operands' type, {b} their bits)
INT_OPS = {Ops.ADD: "add.{t}", Ops.SUB: "sub.{t}", Ops.MUL: "mul.lo.{t}", Ops.MULACC: "mad.lo.{t}", Ops.XOR: "xor.b{b}", Ops.OR: "or.b{b}",
           Ops.AND: "and.b{b}", Ops.NEG: "neg.s{b}", Ops.MAX: "max.{t}", Ops.TRUNC: "mov.b{b}"}
# IEEE rounding (.rn, never contracted into an fma, never .ftz); EXP2 and LOG2 in f32 are .approx, whose documented error is
# inside the float32 tolerance (SIN, float MOD and the f64 transcendentals arrive decomposed: transcendental.py)
FLOAT_OPS = {Ops.ADD: "add.rn.{t}", Ops.SUB: "sub.rn.{t}", Ops.MUL: "mul.rn.{t}", Ops.FDIV: "div.rn.{t}", Ops.RECIP: "rcp.rn.{t}",
             Ops.SQRT: "sqrt.rn.{t}", Ops.NEG: "neg.{t}", Ops.TRUNC: "cvt.rzi.{t}.{t}", Ops.EXP2: "ex2.approx.{t}", Ops.LOG2: "lg2.approx.{t}"}
BOOL_OPS = {Ops.ADD: "or", Ops.OR: "or", Ops.MAX: "or", Ops.MUL: "and", Ops.AND: "and", Ops.XOR: "xor", Ops.NEG: "not", Ops.CMPNE: "xor"}
CMP = {Ops.CMPLT: "lt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}

def emit(ctx: ISAKernel, x: UOp, template: str, *args: str) -> str:
  """One instruction writing a fresh register of x's dtype (an accumulator's own where ISAKernel.into_acc says): template's
  types filled from the operands' dtype."""
  t = x.src[-1].dtype
  out = ctx[ctx.into_acc[x]] if x in ctx.into_acc else ctx.new(x.dtype)
  ctx.ins(f"{template.format(t=op_type(t), b=8 * max(t.itemsize, 4))} {out}, {', '.join(args or ctx.args(x))}")
  return out

def special(ctx: ISAKernel, x: UOp) -> str:
  """gidxN: with local ids the block id, else the thread id along N; lidxN the thread within its block. Dimensions y
  and z add the slice's first block (a kernel parameter); threads past a size (a partial last block) exit."""
  axis, out = "xyz"[int(x.arg[4:])], ctx.reg("r")
  if x.arg.startswith("lidx"): ctx.ins(f"mov.u32 {out}, %tid.{axis}")
  else:
    ctx.ins(f"mov.u32 {out}, %ctaid.{axis}")
    if axis != "x": ctx.ins(f"ld.param.u32 {(first := ctx.reg('r'))}, [block_{axis}0]", f"add.s32 {out}, {out}, {first}")
    if not any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in ctx.uops):
      size = ctx[x.src[0]]
      if x.src[0].dtype.itemsize == 8: ctx.ins(f"cvt.u32.u64 {(size := ctx.reg('r'))}, {ctx[x.src[0]]}")   # sizes fit 32 bits: global_max
      ctx.ins(f"mov.u32 {(n := ctx.reg('r'))}, %ntid.{axis}", f"mov.u32 {(tid := ctx.reg('r'))}, %tid.{axis}", f"mad.lo.s32 {out}, {out}, {n}, {tid}",
              f"setp.ge.s32 {(outside := ctx.reg('p'))}, {out}, {size}", f"@{outside} exit")
  if x.dtype.itemsize == 8: return ctx.ins(f"cvt.s64.s32 {(wide := ctx.reg('rd'))}, {out}") or wide
  return out

def move(ctx: ISAKernel, dst, src, dt: DType) -> str:
  """dst = src, for registers or vectors of them (nothing where they are the same: an mma's accumulator written in place)."""
  for d, s in zip(*((r,) if isinstance(r, str) else r for r in (dst, src))):
    if d != s: ctx.ins(f"mov.{MOV[reg_kind(dt)]} {d}, {s}")
  return dst

class PTXKernel(ISAKernel):
  """A PTX kernel being written; `words` holds a vector of 8/16-bit elements as .b32 registers where it has them: a
  tensor-core fragment (a WMMA's A or B) packed where it is made, once for every mma that reads it, and a wide load."""
  def __init__(self, *args):
    super().__init__(*args)
    self.fragments = {s for u in self.uops if u.op is Ops.WMMA for s in u.src[:2]}
    self.words: dict[UOp, list[str]] = {}
    self.read = {s for u in self.uops if u.op is not Ops.STORE for s in u.src}   # values something but a store reads
    # copies from global to shared memory as cp.async: no register holds the data (the load emits nothing), and every
    # barrier, and the kernel's end, first waits for the thread's copies (cp.async.wait_all: a barrier alone does not)
    self.async_stores = async_copies(self.uops, self.ren)
    self.async_loads = {st.src[1] for st in self.async_stores}

def packed(dt: DType) -> bool:
  """A vector PTX moves as .b32 words: its elements are narrower (8 or 16 bits) and more than a PTX vector's 4."""
  return dt.count > 4 and dt.itemsize < 4

def pack(ctx: ISAKernel, regs, dt: DType) -> list[str]:
  """8/16-bit elements in .b32 registers, the first in the low bits: halves two to a word (their 16-bit registers), an
  integer held in 32 bits (a bfloat16's bits, an 8/16-bit int) inserted at its place."""
  per, bits, words = 4 // dt.itemsize, 8 * dt.itemsize, []
  for group in (regs[i:i + per] for i in range(0, len(regs), per)):
    words.append(w := ctx.reg("r"))
    if reg_kind(dt) == "h": ctx.ins(f"mov.b32 {w}, {{{', '.join(group)}}}")
    else: ctx.ins(*(f"bfi.b32 {w}, {e}, {w if i > 1 else group[0]}, {bits * i}, {bits}" for i, e in enumerate(group) if i))
  return words

def unpack(ctx: ISAKernel, words: list[str], dt: DType) -> tuple[str, ...]:
  """The elements of dt's vector from its .b32 words: halves as the words' 16-bit halves, integers extended by their type."""
  per, bits = 4 // dt.itemsize, 8 * dt.itemsize
  out = tuple(ctx.new(dt.scalar) for _ in range(dt.count))
  for i, w in enumerate(words):
    mine = out[i * per:(i + 1) * per]
    if reg_kind(dt) == "h": ctx.ins(f"mov.b32 {{{', '.join(mine)}}}, {w}")
    else: ctx.ins(*(f"bfe.{'u' if dtypes.is_unsigned(dt.scalar) else 's'}32 {e}, {w}, {bits * j}, {bits}" for j, e in enumerate(mine)))
  return out

def vectorize(ctx: PTXKernel, x: UOp) -> tuple[str, ...]:
  """A vector is its elements' registers; a fragment's are also packed in words (pack), as mma reads them."""
  regs = tuple(ctx.args(x))
  if x in ctx.fragments: ctx.words[x] = pack(ctx, regs, x.dtype)
  return regs

def wmma(ctx: PTXKernel, x: UOp) -> tuple[str, ...]:
  """mma.sync on A's and B's packed words (a fragment ldmatrix loaded is its words) and the f32 accumulators as they are.
  A sum's accumulator (the linearizer's DEFINE_ACC, assigned the result right after: ISAKernel.into_acc) is written in
  place: d is c."""
  a, b = (ctx.words.get(s, ctx[s]) for s in x.src[:2])
  c = ctx[x.src[2]]
  d = ctx[ctx.into_acc[x]] if x in ctx.into_acc else tuple(ctx.new(dtypes.float32) for _ in c)
  ctx.ins(f"{x.arg.name} {{{', '.join(d)}}}, {{{', '.join(a)}}}, {{{', '.join(b)}}}, {{{', '.join(c)}}}")
  return d

# ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lanes
# 8j..8j+7 give the addresses of the 8 rows of 8x8 matrix j, each 16-byte aligned; lane l receives in its register j the
# elements (l >> 2, 2 (l % 4)) and (l >> 2, 2 (l % 4) + 1) of matrix j (of its transpose with .trans), the first in the low
# half. So element e of a lane's fragment (register e >> 1, half e & 1) is at (matrix, row, column):
def ldmatrix_place(lane: int, e: int, trans: bool) -> tuple[int, int, int]:
  return (e >> 1, 2 * (lane & 3) + (e & 1), lane >> 2) if trans else (e >> 1, lane >> 2, 2 * (lane & 3) + (e & 1))

def _lane_values(term: UOp, lane: UOp, seen: dict[UOp, list[int] | None]) -> list[int] | None:
  """term's value at each lane of the warp, where the lane is all it reads."""
  if term not in seen:
    free = any(u.op in (Ops.SPECIAL, Ops.RANGE, Ops.DEFINE_VAR, Ops.LOAD) and u is not lane for u in term.toposort())
    vals = None if free else [term.substitute({lane: UOp.const(lane.dtype, l)}).simplify() for l in range(WARP)]
    seen[term] = None if vals is None or any(v.op is not Ops.CONST for v in vals) else [v.arg for v in vals]
  return seen[term]

def matrix_load(frag: UOp) -> UOp | None:
  """A tensor-core fragment of 16-bit elements each lane reads from shared memory one by one, as one ldmatrix where it
  puts the same elements in the same lanes and registers: a LOAD of the fragment (arg: the instruction and a byte offset)
  from the address of the row each lane gives. Proven from the addresses: each element's is the same sum of the other ids and loops plus
  a term of the lane id (a tensor core's lanes are lidx0) that must be ldmatrix's, and every row 16-byte aligned. None
  where they are not (the elements are then loaded one by one)."""
  if frag.dtype.scalar.itemsize != 2 or len(frag.src) not in (2, 4, 8): return None
  lds, buf = frag.src, frag.src[0].src[0].src[0]
  idxs = [ld.src[0].src[1] for ld in lds]
  lane = next((u for u in idxs[0].toposort() if u.op is Ops.SPECIAL and u.arg == "lidx0"), None)
  if lane is None or lane.src[0].op is not Ops.CONST or lane.src[0].arg != WARP: return None
  rest, seen, offs = None, {}, []   # offs[e][l]: element e of lane l, in elements from element 0 of lane 0
  for idx in idxs:
    terms, c = split_terms(idx)
    mine = {t: k for t, k in terms.items() if lane in t.toposort()}
    if rest is None: rest = {t: k for t, k in terms.items() if t not in mine}
    elif {t: k for t, k in terms.items() if t not in mine} != rest: return None
    if any((v := _lane_values(t, lane, seen)) is None for t in mine): return None
    offs.append([c + sum(k * seen[t][l] for t, k in mine.items()) for l in range(WARP)])
  base, offs = offs[0][0], [[o - offs[0][0] for o in row] for row in offs]
  num, per_row = len(lds) // 2, 16 // frag.dtype.scalar.itemsize
  for trans in (False, True):
    # row r of matrix j: where its column 0 is, read from the element there
    row = {}
    for l in range(WARP):
      for e in range(len(lds)):
        j, r, col = ldmatrix_place(l, e, trans)
        if col == 0: row[8 * j + r] = offs[e][l]
    if not all(offs[e][l] == row[8 * j + r] + col for l in range(WARP) for e in range(len(lds)) for j, r, col in [ldmatrix_place(l, e, trans)]): continue
    if any(o % per_row for o in row.values()) or base % per_row or any(k % per_row for k in rest.values()): return None
    # the row each lane gives (lanes past 8 num give none), bit by bit of the lane where the rows are not one stride
    bits = (8 * num).bit_length() - 1
    if any(row[l] != sum(row[1 << b] for b in range(bits) if l >> b & 1) for l in range(8 * num)): return None
    at = idxs[0].substitute({lane: UOp.const(lane.dtype, 0)})
    b = 0
    while b < bits:   # a run of bits whose offsets double: one (lane // 2^b % 2^n) * stride
      n = 1
      while b + n < bits and row[1 << (b + n)] == 2 * row[1 << (b + n - 1)]: n += 1
      if row[1 << b]: at = at + (lane // (1 << b)) % (1 << n) * row[1 << b]
      b += n
    # the constant part of the address is the instruction's offset: the fragments of one operand share one address register
    name, at = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16", at.simplify()
    at, off = (at.src[0], at.src[1].arg) if at.op is Ops.ADD and at.src[1].op is Ops.CONST else (at, 0)
    return UOp(Ops.LOAD, frag.dtype, (buf.index(at), *lds[0].src[1:]), (name, off * frag.dtype.scalar.itemsize))
  return None


def shared_index(ctx: ISAKernel, x: UOp) -> str:
  """The 32-bit shared address of element x.src[1] of a DEFINE_LOCAL (an index is below 2^31 there: shared memory is
  at most 228 KiB a block)."""
  idx = ctx[x.src[1]]
  if x.src[1].dtype.itemsize == 8: ctx.ins(f"cvt.u32.u64 {(idx := ctx.reg('r'))}, {ctx[x.src[1]]}")
  return ctx.ins(f"mad.lo.s32 {(off := ctx.reg('r'))}, {idx}, {x.src[0].dtype.base.itemsize}, {ctx[x.src[0]]}") or off

def space(x: UOp) -> str: return "shared" if x.src[0].src[0].op is Ops.DEFINE_LOCAL else "global"
def load(ctx: ISAKernel, x: UOp) -> str | tuple[str, ...]:   # 8/16-bit ints are sign/zero-extended; bool is a byte in memory
  if x in ctx.async_loads: return ""   # its store copies it (cp.async), from the address this load would read
  if x.arg is not None:   # ldmatrix (matrix_load) at a byte offset: the fragment as its .b32 registers, two elements each (mma reads them so)
    out = [ctx.reg("r") for _ in range(x.dtype.count // 2)]
    return ctx.ins(f"{x.arg[0]} {{{', '.join(out)}}}, [{ctx[x.src[0]]}{f'+{x.arg[1]}' if x.arg[1] else ''}]") or out
  if (n := x.dtype.count) > 1:   # a thread's n consecutive elements (codegen/widen.py proved the address aligned to their size)
    if packed(x.dtype):   # as its .b32 words (unpacked only where something but a store reads the elements)
      ctx.words[x] = [ctx.reg("r") for _ in range(x.dtype.nbytes // 4)]
      ctx.ins(f"ld.{space(x)}.v{len(ctx.words[x])}.b32 {{{', '.join(ctx.words[x])}}}, [{ctx[x.src[0]]}]")
      return unpack(ctx, ctx.words[x], x.dtype) if x in ctx.read else tuple(ctx.words[x])
    out = tuple(ctx.new(x.dtype.scalar) for _ in range(n))
    return ctx.ins(f"ld.{space(x)}.v{n}.{mem_type(x.dtype)} {{{', '.join(out)}}}, [{ctx[x.src[0]]}]") or out
  ctx.ins(f"ld.{space(x)}.{mem_type(x.dtype)} {(out := ctx.reg('r') if x.dtype == dtypes.bool else ctx.new(x.dtype))}, [{ctx[x.src[0]]}]")
  return ctx.ins(f"setp.ne.u32 {(p := ctx.reg('p'))}, {out}, 0") or p if x.dtype == dtypes.bool else out
def store(ctx: ISAKernel, x: UOp) -> str:
  if x in ctx.async_stores:   # .cg (cached in L2 only, the tile is read from shared memory) takes 16 bytes; .ca 4, 8 or 16
    gate, n = next((f"@{ctx[g]} " for g in x.src[2:] if g.dtype == dtypes.bool), ""), x.src[1].dtype.nbytes
    return ctx.ins(f"{gate}cp.async.{'cg' if n == 16 else 'ca'}.shared.global [{ctx[x.src[0]]}], [{ctx[x.src[1].src[0]]}], {n}")
  v, dt = ctx[x.src[1]], x.src[1].dtype
  if dt == dtypes.bool: ctx.ins(f"selp.u32 {(v := ctx.reg('r'))}, 1, 0, {ctx[x.src[1]]}")
  gate = next((f"@{ctx[g]} " for g in x.src[2:] if g.dtype == dtypes.bool), "")
  if packed(dt):   # as words: a wide load's as loaded
    words = ctx.words.get(x.src[1]) or pack(ctx, v, dt)
    return ctx.ins(f"{gate}st.{space(x)}.v{len(words)}.b32 [{ctx[x.src[0]]}], {{{', '.join(words)}}}")
  if dt.count > 1: return ctx.ins(f"{gate}st.{space(x)}.v{dt.count}.{mem_type(dt)} [{ctx[x.src[0]]}], {{{', '.join(v)}}}")
  return ctx.ins(f"{gate}st.{space(x)}.{mem_type(dt)} [{ctx[x.src[0]]}], {v}")

def cast(ctx: ISAKernel, x: UOp) -> str:
  src, dst, a = x.src[0].dtype.scalar, x.dtype.scalar, ctx[x.src[0]]
  if dst == dtypes.bool: return emit(ctx, x, f"setp.{'neu' if dtypes.is_float(src) else 'ne'}.{{t}}", a, render_const(0, src))   # NaN is true
  if src == dtypes.bool: return emit(ctx, x, f"selp.{op_type(dst)}", render_const(1, dst), render_const(0, dst), a)
  ts, td, out = op_type(src), op_type(dst), ctx.new(dst)
  if dtypes.is_float(dst):   # int -> float and float narrowing round to nearest even, widening is exact
    ctx.ins(f"cvt{'.rn' if dst.itemsize < src.itemsize or not dtypes.is_float(src) else ''}.{td}.{ts} {out}, {a}")
  elif dtypes.is_float(src):   # PTX float->int conversions saturate; an 8/16-bit int saturates in 32 bits, then clamps
    ctx.ins(f"cvt.rzi.{(it := 's32' if dst.itemsize < 4 else td)}.{ts} {out}, {a}")
    # NaN gives 0 only from a float narrower than 64 bits into an int narrower than 64 bits: else 1 << (bits - 1) (the ISA's
    # Integer Notes; an H100 gives exactly that, tests/data/h100_cvt_rzi.json), so there NaN is selected to 0
    if ts == "f64" or it[1:] == "64": ctx.ins(f"setp.nan.{ts} {(nan := ctx.reg('p'))}, {a}, {a}", f"selp.b{it[1:]} {out}, 0, {out}, {nan}")
    if dst.itemsize < 4: ctx.ins(f"max.s32 {out}, {out}, {dtypes.min(dst)}", f"min.s32 {out}, {out}, {dtypes.max(dst)}")
  else:   # int -> int: the bits, truncated or extended by the source's signedness, then wrapped to an 8/16-bit type
    ctx.ins(f"mov.{MOV[reg_kind(dst)]} {out}, {a}" if reg_kind(src) == reg_kind(dst) else f"cvt.{td}.{ts} {out}, {a}")
    if dst.itemsize < 4: ctx.ins(f"and.b32 {out}, {out}, {(1 << 8 * dst.itemsize) - 1}" if dtypes.is_unsigned(dst) else f"cvt.s32.s{8 * dst.itemsize} {out}, {out}")
  return out

def bitcast(ctx: ISAKernel, x: UOp) -> str:
  """Between a half (a 16-bit register) and a 16-bit int (extended in 32 bits) through the bits; else a move of the bits."""
  src, dst, a = x.src[0].dtype.scalar, x.dtype.scalar, ctx[x.src[0]]
  if dst == dtypes.float16: return emit(ctx, x, "cvt.u16.u32", a)
  if src == dtypes.float16: return emit(ctx, x, f"cvt.{op_type(dst)}.{'u' if dtypes.is_unsigned(dst) else 's'}16", a)
  return emit(ctx, x, f"mov.b{8 * dst.itemsize}", a)

def int_divide(ctx: ISAKernel, x: UOp) -> str:
  """C division: truncating, a zero divisor gives 0, MIN / -1 wraps to MIN (and MIN % -1 is 0); PTX leaves those undefined.
  By a constant other than 0 and -1 (address math's) neither case arises: one div or rem, unsigned for a dividend whose
  bounds are never negative nor past the dtype's (ptxas makes an unsigned one by a constant a high product and a shift,
  a signed one also corrects for the sign), so by a power of two a shift or a mask."""
  (a, b), t, ty = ctx.args(x), x.dtype, op_type(x.dtype)
  bits = ty[1:]
  if (c := x.src[1]).op is Ops.CONST and c.arg not in (0, -1):
    if (k := shift_of_divisor(x)) is not None:
      return emit(ctx, x, f"shr.u{bits}", a, str(k)) if x.op is Ops.IDIV else emit(ctx, x, f"and.b{bits}", a, str((1 << k) - 1))
    return emit(ctx, x, f"{'div' if x.op is Ops.IDIV else 'rem'}.{'u' + bits if unsigned_divisor(x) is not None else ty}", a, b)
  ctx.ins(f"setp.eq.{ty} {(zero := ctx.reg('p'))}, {b}, 0", f"selp.b{bits} {(safe := ctx.new(t))}, 1, {b}, {zero}")
  out = emit(ctx, x, f"{'div' if x.op is Ops.IDIV else 'rem'}.{{t}}", a, safe)
  if not dtypes.is_unsigned(t):
    ctx.ins(f"setp.eq.{ty} {(minus1 := ctx.reg('p'))}, {safe}, -1", f"neg.s{bits} {(alt := ctx.new(t))}, {a}" if x.op is Ops.IDIV else f"mov.b{bits} {(alt := ctx.new(t))}, 0",
            f"selp.b{bits} {out}, {alt}, {out}, {minus1}")
  return ctx.ins(f"selp.b{bits} {out}, 0, {out}, {zero}") or out

def shift(ctx: ISAKernel, x: UOp) -> str:
  """The count is taken mod the width (the reference semantics), as a u32."""
  (a, n), t = ctx.args(x), x.dtype
  ctx.ins(f"cvt.u32.u64 {(m := ctx.reg('r'))}, {n}" if t.itemsize == 8 else f"mov.b32 {(m := ctx.reg('r'))}, {n}", f"and.b32 {m}, {m}, {8 * t.itemsize - 1}")
  return emit(ctx, x, "shl.b{b}" if x.op is Ops.SHL else "shr.u{b}" if dtypes.is_unsigned(t) else "shr.s{b}", a, m)

def loop(ctx: ISAKernel, x: UOp) -> str:
  ctx.ins(f"mov.{op_type(x.dtype)} {(r := ctx.new(x.dtype))}, 0")
  return ctx.label(f"$loop{x.arg[0]}") or ctx.ins(f"setp.ge.{op_type(x.dtype)} {(done := ctx.reg('p'))}, {r}, {ctx[x.src[0]]}", f"@{done} bra $end{x.arg[0]}") or r

FLOATS32 = (dtypes.float32, dtypes.float64)
INTS32 = (dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64)

class PTXRenderer(ISARenderer):
  """The NVIDIA target: every dtype, a 3-d grid of thread blocks (y/z sliced by the driver past 65535), 64-bit addressing."""
  device, language = "NV", "PTX"
  supported_dtypes = frozenset(ALL_DTYPES)
  alu_dtypes = frozenset(ALL_DTYPES) - {dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16}
  float_conversions = frozenset({dtypes.float16})   # cvt.rn.f16.f32 and cvt.f32.f16
  mulacc_dtypes = frozenset({dtypes.float16, dtypes.float32, dtypes.float64})   # fma.rn (half: the core's, in float32)
  global_dims = 3
  global_max = (2**31 - 1,) * 3       # gridDim.y/z <= 65535 is met by the driver launching slices, never by truncating
  has_local = True                    # SPECIAL lidxN: threads of a block; global_size then counts blocks
  has_shared = True                   # DEFINE_LOCAL: .shared arrays (the layout of global memory); BARRIER: bar.sync
  shared_max = 48 << 10               # static .shared per block without opting in to more
  local_max = (1024, 1024, 64)
  max_threads_per_group = 1024
  shuffle_width = 32                  # SHUFFLE_XOR: shfl.sync.bfly.b32 across a warp's 32 lanes
  registers = 255                     # per thread (ptxas spills past it)
  memory_vector = 16                  # ld/st .v2 and .v4, 16 bytes at most, aligned to their size (8/16-bit elements past 4: .b32 words)
  async_copy_bytes = (4, 8, 16)       # cp.async (sm_80+): global to shared memory without registers, landing at cp.async.wait_all
  index_bits = 64
  # PTX has no float remainder, no float64 transcendentals, and a sin.approx good to 2**-20.5 only inside +-100 pi
  # and a tensor core's fragments are loaded from shared memory with ldmatrix where their layout is its
  extra_matcher = sin_rules + fmod_rules + exp2_log2_f64_rules + fragment_rules(matrix_load)
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
  kernel = PTXKernel
  def reg_kind(self, dt: DType) -> str: return reg_kind(dt)
  def render_kernel(self, k: ISAKernel) -> str:
    groups = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in k.uops)
    params = [f".param .u64 data{u.arg}" for u in k.uops if u.op is Ops.DEFINE_GLOBAL]
    params += [f".param .{op_type(v.dtype)} var{i}" for i, v in enumerate(u for u in k.uops if u.op is Ops.DEFINE_VAR)] + [".param .u32 block_y0", ".param .u32 block_z0"]
    # a tensor-core kernel's block shape (fixed by its local ids) is said to ptxas (.maxntid, CUDA's __launch_bounds__),
    # which then fits its registers to more blocks per SM: fp16 matmul 4096² 172 -> 168 registers, a third block per SM,
    # 257 -> 275 TFLOP/s on an H200, nothing spilled. Other kernels keep ptxas's own choice: told their block, ptxas trades
    # spills for blocks (a conv's backward kernel: 48 -> 40 registers and 8 bytes spilled), a trade no GPU has measured
    bounds = []
    if groups and any(u.op is Ops.WMMA for u in k.uops):
      block = {u.arg: u.src[0].arg for u in k.uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx") and u.src[0].op is Ops.CONST}
      bounds.append(".maxntid " + ", ".join(str(block.get(f"lidx{d}", 1)) for d in range(3)))
    head = [f"// {k.name}", LAUNCH_GROUPS if groups else LAUNCH_THREADS, f".version {PTX_VERSION}", f".target {self.arch}",
            ".address_size 64", f".visible .entry {k.name}(", "\t" + ",\n\t".join(params) + ")", *bounds, "{"]
    decls = [f"\t.reg {REG_DECL[kind]} %{kind}<{n}>;" for kind, n in sorted(k.counts.items())]
    decls += [f"\t.shared .align 16 .b8 smem{u.arg}[{u.dtype.size * u.dtype.base.itemsize}];" for u in k.uops if u.op is Ops.DEFINE_LOCAL]
    # a double-buffered tile's last copy (never read) is still in flight at the end: waited for, as every copy
    return "\n".join(head + decls + k.lines + (["\tcp.async.wait_all;"] if k.async_stores else []) + ["\tret;", "}", ""])

  rules = PatternMatcher([
    (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: ctx.ins(f"ld.param.u64 {(r := ctx.reg('rd'))}, [data{x.arg}]", f"cvta.to.global.u64 {r}, {r}") or r),
    (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.ins(f"ld.param.{op_type(x.dtype)} {(r := ctx.new(x.dtype))}, "
                                                           f"[var{[u for u in ctx.uops if u.op is Ops.DEFINE_VAR].index(x)}]") or r),
    (UPat(Ops.SPECIAL, name="x"), special),
    (UPat(Ops.CONST, dtypes.bool, name="x"), lambda ctx, x: ctx.ins(f"setp.ne.u32 {(r := ctx.reg('p'))}, {1 if x.arg else 0}, 0") or r),
    (UPat(Ops.CONST, name="x"), lambda ctx, x: move(ctx, tuple(ctx.new(x.dtype) for _ in range(x.dtype.count)) if x.dtype.count > 1 else ctx.new(x.dtype),
                                                 (render_const(x.arg, x.dtype),) * x.dtype.count, x.dtype)),
    (UPat(Ops.VECTORIZE, name="x"), vectorize),
    (UPat(Ops.GEP, name="x"), lambda ctx, x: ctx[x.src[0]][x.arg]),
    (UPat(Ops.WMMA, name="x"), wmma),
    (UPat(Ops.RANGE, name="x"), loop),
    (UPat(Ops.ENDRANGE, name="x"), lambda ctx, x: ctx.ins(f"add.{op_type(x.src[0].dtype)} {ctx[x.src[0]]}, {ctx[x.src[0]]}, 1", f"bra $loop{x.src[0].arg[0]}")
     or ctx.label(f"$end{x.src[0].arg[0]}")),
    (UPat(Ops.DEFINE_ACC, name="x"), lambda ctx, x: move(ctx, tuple(ctx.new(x.dtype) for _ in range(x.dtype.count)) if x.dtype.count > 1 else ctx.new(x.dtype),
                                                      ctx[x.src[0]], x.dtype)),
    (UPat(Ops.ASSIGN, name="x"), lambda ctx, x: move(ctx, ctx[x.src[0]], ctx[x.src[1]], x.dtype)),
    # shared memory by 32-bit addresses (what the hardware computes them in): an element's address is one mad.lo, and
    # ptxas folds the constant part of an index into the load's offset (64-bit addresses cost a mul.wide, an add.s64
    # and in SASS an LEA per access: 11% of a 4096^2 fp32 matmul's main loop)
    (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: ctx.ins(f"mov.u32 {(r := ctx.reg('r'))}, smem{x.arg}") or r),
    (UPat(Ops.BARRIER), lambda ctx: ctx.ins(*(["cp.async.wait_all"] if ctx.async_stores else []), "bar.sync 0")),
    # the core shuffles only 32-bit values, in blocks of whole warps: every lane is named in the member mask
    (UPat(Ops.SHUFFLE_XOR, name="x"), lambda ctx, x: ctx.ins(f"shfl.sync.bfly.b32 {(r := ctx.new(x.dtype))}, {ctx[x.src[0]]}, {x.arg}, 31, -1") or r),
    (UPat(Ops.INDEX, src=(UPat(Ops.DEFINE_LOCAL), UPat()), name="x"), shared_index),
    (UPat(Ops.INDEX, name="x"), lambda ctx, x: ctx.ins(f"mul.{'lo.s64' if x.src[1].dtype.itemsize == 8 else 'wide.s32'} {(off := ctx.reg('rd'))}, {ctx[x.src[1]]}, "
                                                    f"{x.src[0].dtype.base.itemsize}", f"add.s64 {off}, {off}, {ctx[x.src[0]]}") or off),
    (UPat(Ops.LOAD, name="x"), load),
    (UPat(Ops.STORE, name="x"), store),
    (UPat(GroupOp.ALU, name="x"), lambda ctx, x: ctx.lanes(x) if x.dtype.count > 1 else None),   # vectors: their registers
    (UPat(Ops.CAST, name="x"), cast),
    (UPat(Ops.BITCAST, name="x"), bitcast),
    # bool values are predicates
    (UPat(Ops.WHERE, dtypes.bool, name="x"), lambda ctx, x: ctx.ins("not.pred {3}, {0}\nand.pred {3}, {3}, {2}\nand.pred {4}, {0}, {1}\nor.pred {4}, {4}, {3}".format(
      *ctx.args(x), ctx.reg("p"), (out := ctx.reg("p")))) or out),
    (on(Ops.CMPLT, dtypes.bool), lambda ctx, x: ctx.ins("not.pred {2}, {0}\nand.pred {2}, {2}, {1}".format(*ctx.args(x), (out := ctx.reg("p")))) or out),
    (on(Ops.CMPEQ, dtypes.bool), lambda ctx, x: ctx.ins("xor.pred {2}, {0}, {1}\nnot.pred {2}, {2}".format(*ctx.args(x), (out := ctx.reg("p")))) or out),
    (on(tuple(BOOL_OPS), dtypes.bool), lambda ctx, x: emit(ctx, x, f"{BOOL_OPS[x.op]}.pred")),
    (UPat(Ops.WHERE, name="x"), lambda ctx, x: emit(ctx, x, f"selp.{MOV[reg_kind(x.dtype)]}", *ctx.args(x)[1:], ctx[x.src[0]])),
    (UPat(GroupOp.Comparison, name="x"), lambda ctx, x: emit(ctx, x, f"setp.{'neu' if x.op is Ops.CMPNE and dtypes.is_float(x.src[0].dtype) else CMP[x.op]}.{{t}}")),
    # floats: NaN in either operand of a MAX gives NaN, of equal values (0 and -0) the first; MULACC is rounded once
    (on(Ops.MAX, FLOATS32), lambda ctx, x: ctx.ins("setp.nan.{t} {2}, {0}, {0}\nsetp.ge.or.{t} {3}, {0}, {1}, {2}\nselp.{t} {4}, {0}, {1}, {3}".format(
      *ctx.args(x), ctx.reg("p"), ctx.reg("p"), (out := ctx.new(x.dtype)), t=op_type(x.dtype))) or out),
    (on(Ops.MULACC, FLOATS32), lambda ctx, x: emit(ctx, x, "fma.rn.{t}")),
    (on(tuple(FLOAT_OPS), FLOATS32), lambda ctx, x: emit(ctx, x, FLOAT_OPS[x.op])),
    (on((Ops.IDIV, Ops.MOD), INTS32), int_divide),
    (on((Ops.SHL, Ops.SHR), INTS32), shift),
    (on(tuple(INT_OPS), INTS32), lambda ctx, x: emit(ctx, x, INT_OPS[x.op])),
  ])
