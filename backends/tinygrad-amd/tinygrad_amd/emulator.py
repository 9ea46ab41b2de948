"""An RDNA3 (gfx1100, wave32) emulator: decodes a code object's machine code once, then runs every wave of a dispatch
together with numpy (registers are arrays over waves and lanes). Waves at the lowest program counter step together, so
waves that branch differently still make progress, and s_barrier holds a wave until every wave of its workgroup that has
not ended waits at one; as that order is only one the hardware may take, LDS accesses of two waves that nothing orders
are errors (LdsOrder). Every launch is counted (LaunchCounters: bytes moved, barriers, instructions)."""
from __future__ import annotations
import collections
import numpy as np
from tinycore.dtype import fma, tensor_core_dot
from tinycore.runtime.device import LaunchCounters
from tinygrad_amd.isa import EXEC, VCC, NULL, SCC, LITERAL, INLINE_FLOATS, INV_2PI, Inst, inline_int, regs
from tinygrad_amd.asm import decode, Decoded, AsmError
from tinygrad_amd.codeobject import Loaded

class EmulatorError(RuntimeError): pass

LAUNCHES: collections.deque[tuple[str, LaunchCounters]] = collections.deque(maxlen=10_000)   # (kernel name, counters) of recent launches
LDS_MAX = 64 * 1024   # bytes of LDS a workgroup may have on gfx11
# WMMA's adder: AMD documents neither its internal precision nor its rounding, and no RDNA3 GPU was at hand to measure;
# the emulator adds the exact products and c keeping 46 bits below the largest exponent (tensor_core_dot) and rounds
# once to nearest even: within 2**-44 of the exactly rounded sum
WMMA_FRACTION_BITS, WMMA_ROUNDING = 46, "rn"

LANES = 32
VM, LGKM = 1, 2   # the s_waitcnt counters a load is counted by (State.issue)
LANE_BITS = (np.uint32(1) << np.arange(LANES, dtype=np.uint32))
NP = {"f32": np.float32, "i32": np.int32, "u32": np.uint32, "b32": np.uint32, "f16": np.float16, "f64": np.float64,
      "i64": np.int64, "u64": np.uint64, "b64": np.uint64}

def lanes_of(mask: np.ndarray) -> np.ndarray:
  """(waves,) uint32 lane masks -> (waves, 32) bools."""
  return (mask[:, None] & LANE_BITS) != 0

def mask_of(bits: np.ndarray) -> np.ndarray:
  """(waves, 32) bools -> (waves,) uint32 lane masks."""
  return (bits.astype(np.uint32) * LANE_BITS).sum(axis=1, dtype=np.uint64).astype(np.uint32)

def to_typed(bits, t: str):
  """Register bits (uint32, or uint64 for 64-bit types) viewed as the operand type."""
  if t == "f16": return np.asarray(np.asarray(bits, np.uint32) & 0xffff, np.uint16).view(np.float16)
  if regs(t) == 2: return np.asarray(bits, np.uint64).view(NP[t])
  return np.asarray(bits, np.uint32).view(NP[t]) if t in NP else np.asarray(bits, np.uint32)

def to_bits(x, t: str):
  if t == "f16": return np.asarray(x, np.float16).view(np.uint16).astype(np.uint32)
  if regs(t) == 2: return np.asarray(x, NP[t]).view(np.uint64)
  return np.asarray(x, NP.get(t, np.uint32)).view(np.uint32)

def _f(x): return np.asarray(x, np.float64)

def _sat_int(x, lo, hi, dt):
  """Float -> int truncating toward zero, clamped to [lo, hi], NaN -> 0: what the conversion instructions do."""
  x = np.nan_to_num(np.trunc(_f(x)), nan=0.0, posinf=hi, neginf=lo)
  return np.clip(x, lo, hi).astype(dt)

def _fract(x, t):
  with np.errstate(invalid="ignore"):
    r = x - np.floor(x)
  return np.minimum(r, np.nextafter(NP[t](1), NP[t](0)))

# the significand in [1/2, 1) and the exponent of x = m * 2**e, subnormals too; an infinity or NaN keeps itself, exponent 0
def _frexp_mant(a): return np.where(np.isfinite(a), np.frexp(a)[0], a).astype(a.dtype)
def _frexp_exp(a): return np.where(np.isfinite(a), np.frexp(a)[1], 0).astype(np.int32)

def _div_fixup(q, d, n):
  """D = V_DIV_FIXUP(quotient q, denominator d, numerator n): the IEEE special cases of n / d, else q with the right sign."""
  sign = np.signbit(d) ^ np.signbit(n)
  out = np.where(sign, -np.abs(q), np.abs(q))
  inf, zero = np.copysign(np.inf, np.where(sign, -1.0, 1.0)).astype(q.dtype), np.where(sign, -0.0, 0.0).astype(q.dtype)
  out = np.where((np.abs(d) == np.inf) | (n == 0), zero, out)
  out = np.where((d == 0) | (np.abs(n) == np.inf), inf, out)
  nan = np.isnan(n) | np.isnan(d) | ((d == 0) & (n == 0)) | ((np.abs(d) == np.inf) & (np.abs(n) == np.inf))
  return np.where(nan, np.asarray(np.nan, q.dtype), out).astype(q.dtype)

def _cmp(kind: str):
  return {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
          "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
          "lg": lambda a, b: (a < b) | (a > b), "ne": np.not_equal, "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
          "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
          "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b)}[kind]

U32, U64 = np.uint32, np.uint64
def _sh(b): return np.asarray(b, U32) & U32(31)
# VALU semantics by base name: a function of the typed sources (after modifiers) returning the typed result;
# carry-writing instructions return (result, carry bools)
VALU = {
  "v_mov_b32": lambda a: a, "v_not_b32": lambda a: ~a,
  "v_clz_i32_u32": lambda a: np.where(a == 0, -1, 32 - np.frexp(np.asarray(a, np.float64))[1]).astype(np.int32),
  "v_add_f32": np.add, "v_sub_f32": np.subtract, "v_subrev_f32": lambda a, b: b - a, "v_mul_f32": np.multiply,
  "v_add_f64": np.add, "v_mul_f64": np.multiply,
  "v_min_f32": np.fmin, "v_max_f32": np.fmax, "v_min_f64": np.fmin, "v_max_f64": np.fmax,
  "v_min_i32": np.minimum, "v_max_i32": np.maximum, "v_min_u32": np.minimum, "v_max_u32": np.maximum,
  "v_lshlrev_b32": lambda a, b: b << _sh(a), "v_lshrrev_b32": lambda a, b: b >> _sh(a), "v_ashrrev_i32": lambda a, b: b >> _sh(a).astype(np.int32),
  "v_lshlrev_b64": lambda a, b: b << (np.asarray(a, U64) & U64(63)), "v_lshrrev_b64": lambda a, b: b >> (np.asarray(a, U64) & U64(63)),
  "v_ashrrev_i64": lambda a, b: b >> (np.asarray(a, np.int64) & 63),
  "v_and_b32": np.bitwise_and, "v_or_b32": np.bitwise_or, "v_xor_b32": np.bitwise_xor,
  "v_add_nc_u32": np.add, "v_sub_nc_u32": np.subtract, "v_subrev_nc_u32": lambda a, b: b - a,
  "v_mul_lo_u32": lambda a, b: (np.asarray(a, U64) * np.asarray(b, U64)).astype(U32),
  "v_mul_hi_u32": lambda a, b: ((np.asarray(a, U64) * np.asarray(b, U64)) >> U64(32)).astype(U32),
  "v_mul_hi_i32": lambda a, b: ((np.asarray(a, np.int64) * np.asarray(b, np.int64)) >> 32).astype(np.int32),
  "v_mad_u32_u24": lambda a, b, c: (a & U32(0xffffff)) * (b & U32(0xffffff)) + c,
  "v_bfe_u32": lambda a, b, c: (a >> _sh(b)) & ((U64(1) << (np.asarray(c, U64) & U64(31))) - U64(1)).astype(U32),
  "v_bfe_i32": lambda a, b, c: np.where((np.asarray(c) & 31) == 0, 0, (a.astype(np.int64) << (64 - (_sh(b) + (np.asarray(c) & 31)).astype(np.int64)) >> (64 - (np.asarray(c) & 31)).astype(np.int64)).astype(np.int32)),
  "v_bfi_b32": lambda a, b, c: (a & b) | (~a & c),
  "v_alignbit_b32": lambda a, b, c: (((np.asarray(a, U64) << U64(32)) | np.asarray(b, U64)) >> (np.asarray(c, U64) & U64(31))).astype(U32),
  "v_lshl_add_u32": lambda a, b, c: (a << _sh(b)) + c, "v_add3_u32": lambda a, b, c: a + b + c,
  "v_lshl_or_b32": lambda a, b, c: (a << _sh(b)) | c, "v_and_or_b32": lambda a, b, c: (a & b) | c, "v_or3_b32": lambda a, b, c: a | b | c,
  "v_fma_f32": fma, "v_fma_f64": fma, "v_fmac_f32": fma,
  "v_cvt_f32_i32": lambda a: a.astype(np.float32), "v_cvt_f32_u32": lambda a: a.astype(np.float32),
  "v_cvt_i32_f32": lambda a: _sat_int(a, -2**31, 2**31 - 1, np.int32), "v_cvt_u32_f32": lambda a: _sat_int(a, 0, 2**32 - 1, U32),
  "v_cvt_i32_f64": lambda a: _sat_int(a, -2**31, 2**31 - 1, np.int32), "v_cvt_u32_f64": lambda a: _sat_int(a, 0, 2**32 - 1, U32),
  "v_cvt_f64_i32": lambda a: a.astype(np.float64), "v_cvt_f64_u32": lambda a: a.astype(np.float64),
  "v_cvt_f32_f64": lambda a: a.astype(np.float32), "v_cvt_f64_f32": lambda a: a.astype(np.float64),
  "v_cvt_f16_f32": lambda a: a.astype(np.float16), "v_cvt_f32_f16": lambda a: a.astype(np.float32),
  "v_trunc_f32": np.trunc, "v_trunc_f64": np.trunc, "v_floor_f32": np.floor, "v_floor_f64": np.floor,
  "v_rndne_f32": np.rint, "v_rndne_f64": np.rint, "v_fract_f32": lambda a: _fract(a, "f32"),
  "v_exp_f32": np.exp2, "v_log_f32": np.log2, "v_rcp_f32": lambda a: np.float32(1) / a, "v_rcp_iflag_f32": lambda a: np.float32(1) / a,
  "v_rsq_f32": lambda a: np.float32(1) / np.sqrt(a), "v_rsq_f64": lambda a: 1.0 / np.sqrt(a), "v_sqrt_f32": np.sqrt, "v_sqrt_f64": np.sqrt, "v_rcp_f64": lambda a: 1.0 / a,
  # the hardware's sine and cosine take revolutions: sin(2*pi*x)
  "v_sin_f32": lambda a: np.sin(2 * np.pi * _f(a)).astype(np.float32), "v_cos_f32": lambda a: np.cos(2 * np.pi * _f(a)).astype(np.float32),
  "v_ldexp_f32": lambda a, b: np.ldexp(a, np.clip(b, -400, 400)).astype(np.float32), "v_ldexp_f64": lambda a, b: np.ldexp(a, np.clip(b, -3000, 3000)),
  "v_frexp_mant_f32": _frexp_mant, "v_frexp_mant_f64": _frexp_mant, "v_frexp_exp_i32_f32": _frexp_exp, "v_frexp_exp_i32_f64": _frexp_exp,
  "v_div_fixup_f32": _div_fixup, "v_div_fixup_f64": _div_fixup,
  "v_cndmask_b32": lambda a, b, m: np.where(m, b, a),
  "v_add_co_u32": lambda a, b: ((s := np.asarray(a, U64) + np.asarray(b, U64)).astype(U32), s >> U64(32) != 0),
  "v_sub_co_u32": lambda a, b: ((np.asarray(a, U64) - np.asarray(b, U64)).astype(U32), np.asarray(a, U64) < np.asarray(b, U64)),
  "v_add_co_ci_u32": lambda a, b, c: ((s := np.asarray(a, U64) + np.asarray(b, U64) + c).astype(U32), s >> U64(32) != 0),
  "v_sub_co_ci_u32": lambda a, b, c: ((np.asarray(a, U64) - np.asarray(b, U64) - c).astype(U32), np.asarray(a, U64) < np.asarray(b, U64) + c),
  "v_mad_u64_u32": lambda a, b, c: ((p := np.asarray(a, U64) * np.asarray(b, U64)) + c, (p + c) < p),
  "v_mad_i64_i32": lambda a, b, c: (np.asarray(a, np.int64) * np.asarray(b, np.int64) + c, np.zeros(np.broadcast(a, b, c).shape, bool)),
}
CARRY_OUT = {"v_add_co_u32", "v_sub_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_mad_u64_u32", "v_mad_i64_i32"}
MASK_IN = {"v_cndmask_b32", "v_add_co_ci_u32", "v_sub_co_ci_u32"}   # the last source is a lane mask (vcc_lo or an SGPR)
ACCUMULATE = {"v_fmac_f32"}   # the destination is also the last source: D = S0 * S1 + D

def _u(x): return np.asarray(x, U32)
def _i(x): return np.asarray(x, U32).view(np.int32)
# SALU semantics: name -> (function of the uint32 sources -> uint32 result, SCC function or None)
SALU = {
  "s_mov_b32": (lambda a: a, None), "s_not_b32": (lambda a: ~a, lambda r: r != 0),
  "s_add_u32": (lambda a, b: a + b, lambda a, b: (a.astype(U64) + b) >> U64(32) != 0),
  "s_sub_u32": (lambda a, b: a - b, lambda a, b: b > a),
  "s_add_i32": (lambda a, b: a + b, lambda a, b: ((_i(a) >= 0) == (_i(b) >= 0)) & ((_i(a + b) >= 0) != (_i(a) >= 0))),
  "s_lshl_b32": (lambda a, b: a << (b & U32(31)), lambda r: r != 0), "s_lshr_b32": (lambda a, b: a >> (b & U32(31)), lambda r: r != 0),
  "s_and_b32": (np.bitwise_and, lambda r: r != 0), "s_or_b32": (np.bitwise_or, lambda r: r != 0), "s_xor_b32": (np.bitwise_xor, lambda r: r != 0),
  "s_and_not1_b32": (lambda a, b: a & ~b, lambda r: r != 0), "s_or_not1_b32": (lambda a, b: a | ~b, lambda r: r != 0),
  "s_mul_i32": (lambda a, b: (a.astype(U64) * b).astype(U32), None),
  "s_cmp_eq_i32": (None, lambda a, b: a == b), "s_cmp_eq_u32": (None, lambda a, b: a == b), "s_cmp_lg_u32": (None, lambda a, b: a != b),
  "s_cmp_lt_u32": (None, lambda a, b: a < b),
}
def nwaves(st, w) -> int: return st.pc[w].shape[0]   # w: an index array of waves, or slice(None) for all of them
def scalar(x, n: int) -> np.ndarray: return np.broadcast_to(_u(x), (n, 1))[:, 0]   # a scalar source, one value per wave

BRANCHES = {"s_branch": lambda st, w: np.ones(nwaves(st, w), bool), "s_cbranch_scc0": lambda st, w: st.S[w, SCC] == 0,
            "s_cbranch_scc1": lambda st, w: st.S[w, SCC] != 0, "s_cbranch_vccz": lambda st, w: st.S[w, VCC] == 0,
            "s_cbranch_vccnz": lambda st, w: st.S[w, VCC] != 0, "s_cbranch_execz": lambda st, w: st.S[w, EXEC] == 0,
            "s_cbranch_execnz": lambda st, w: st.S[w, EXEC] != 0}

class Memory:
  """Global memory: host arrays at their host addresses (the allocator's buffers, the kernel arguments)."""
  WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
  def __init__(self, arrays: list[np.ndarray]):
    uniq = {a.ctypes.data: a.reshape(-1).view(np.uint8) for a in arrays}
    self.bases = np.array(sorted(uniq), U64)
    self.arrays = [uniq[int(b)] for b in self.bases]
    self.ends = self.bases + np.array([a.nbytes for a in self.arrays], U64)
    self.views: dict[tuple[int, int], np.ndarray] = {}
  def _find(self, addrs: np.ndarray, size: int, what: str) -> np.ndarray:
    idx = np.searchsorted(self.bases, addrs, side="right") - 1
    ok = (idx >= 0) & (addrs + U64(size) <= self.ends[np.maximum(idx, 0)])
    if not ok.all():
      bad = int(addrs[~ok][0])
      raise EmulatorError(f"memory fault: {what} of {size} bytes at address {bad:#x}, outside every buffer of this launch")
    return idx
  def _parts(self, addrs: np.ndarray, size: int, what: str):
    """(selected lanes, region, byte offsets) per region the addresses fall in (almost always one)."""
    idx = self._find(addrs, size, what)
    regions = [int(idx[0])] if idx.size and (idx == idx[0]).all() else [int(r) for r in np.unique(idx)]
    for r in regions:
      sel = slice(None) if len(regions) == 1 else idx == r
      yield sel, r, (addrs[sel] - self.bases[r]).astype(np.int64)
  def _words(self, r: int, size: int) -> np.ndarray:
    """Region r as an array of size-byte words (aligned accesses index it directly)."""
    if (v := self.views.get((r, size))) is None:
      a = self.arrays[r]
      v = self.views[(r, size)] = a[:a.size - a.size % size].view(self.WORDS[size])
    return v
  def read(self, addrs: np.ndarray, size: int) -> np.ndarray:
    out = np.empty((len(addrs), size), np.uint8)
    for sel, r, off in self._parts(addrs, size, "read"):
      if size in self.WORDS and not (off % size).any(): out[sel] = self._words(r, size)[off // size].view(np.uint8).reshape(-1, size)
      else: out[sel] = self.arrays[r][off[:, None] + np.arange(size)]
    return out
  def write(self, addrs: np.ndarray, data: np.ndarray) -> None:
    size = data.shape[1]
    for sel, r, off in self._parts(addrs, size, "write"):
      if size in self.WORDS and not (off % size).any(): self._words(r, size)[off // size] = np.ascontiguousarray(data[sel]).view(self.WORDS[size])[:, 0]
      else: self.arrays[r][off[:, None] + np.arange(size)] = data[sel]

def _bytes_to_regs(b: np.ndarray, t: str) -> list[np.ndarray]:
  """Loaded bytes (n, size) -> per-register uint32 values, sign- or zero-extending sub-dword loads."""
  n = b.shape[1]
  if n < 4:
    v = b.copy().view(np.int8 if t == "i8" else np.uint8 if t == "u8" else np.int16 if t == "i16" else np.uint16)[:, 0]
    return [v.astype(np.int32).view(U32) if t[0] == "i" else v.astype(U32)]
  words = np.ascontiguousarray(b).view(U32)
  return [words[:, i] for i in range(n // 4)]

STORE_BYTES = {"u8": 1, "u16": 2, "b32": 4, "b64": 8, "b128": 16}
LOAD_BYTES = {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "b32": 4, "b64": 8, "b128": 16}

class LdsOrder:
  """Which wave of a workgroup last wrote and read each LDS granule, and in which barrier epoch, so that two waves' accesses
  to one granule, one a write, that nothing orders are an error (the emulator runs the waves in one convenient order;
  the hardware gives any). What orders them, for GFX11 (LLVM AMDGPUUsage, "Memory Model GFX10-GFX11"): LDS operations
  of one wave complete in its execution order, but those of different waves of a workgroup "can be reordered relative
  to each other", and an s_barrier only synchronizes execution (AMDGPUExecutionSynchronization: barriers "do not affect
  the visibility of memory operations"; GFX11 has the back-off barrier, which does not wait for memory). A workgroup
  fence release is `s_waitcnt lgkmcnt(0)` after the wave's LDS accesses, so an access is ordered before another wave's
  only by an s_barrier both passed between them AND its wave retiring it (s_waitcnt lgkmcnt) before that barrier: an
  access still in flight at a barrier counts in the next epoch too (barrier()). A granule is 4 bytes, or the narrowest
  LDS access of the kernel (2 or 1), so two waves may write two halves of a word."""
  def __init__(self, waves: int, groups: int, first_group: int, lds_bytes: int, granule: int):
    self.granule, self.shift, self.per_group = granule, granule.bit_length() - 1, -(-max(lds_bytes, 4) // granule)
    self.wpg, self.first_group = waves // groups, first_group
    # per granule, stamps epoch << 16 | wave: its last write's, and the largest of its reads' and of their epoch << 16 |
    # 0xffff - wave. Epochs only grow, so the last two are the last epoch's highest and lowest reader (one: they agree);
    # a granule has one writer an epoch (a second is an error)
    self.write, self.read_hi, self.read_lo = np.full((3, groups * self.per_group), -1, np.int32)
    self.epoch = 0   # barriers the batch's workgroups have passed (they pass them together: Program.run), below EPOCHS
    self.wave_ids = np.arange(waves, dtype=np.int32)
    self.retired = np.zeros(waves, np.int64)   # per wave, the LGKM accesses retired by its s_waitcnt (issue numbers)
    # LDS accesses perhaps not retired yet: (waves, their issue numbers, each row's wave, its granules, a write?)
    self.in_flight: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]] = []
  EPOCHS = 1 << 15   # epochs a stamp holds: then the count starts again

  def note(self, b: np.ndarray, wv: np.ndarray, write: bool) -> None:
    """Granules b accessed in this epoch by waves wv (one each)."""
    base = self.epoch << 16
    if write: self.write[b] = base + wv
    else:
      np.maximum.at(self.read_hi, b, base + wv)   # (several waves reading one granule in one instruction too)
      np.maximum.at(self.read_lo, b, (base | 0xffff) - wv)

  def access(self, st: State, w, lanes: np.ndarray, g: np.ndarray, a: np.ndarray, size: int, write: bool, who: str) -> None:
    """Waves w's LDS access (just issued) of `size` bytes from a (per active lane; g: its workgroup): an error if another
    wave wrote one of its granules in this epoch (in this same instruction too), or, for a write, read one."""
    first = g * self.per_group + (a >> self.shift)
    at = first[:, None] + np.arange(size >> self.shift) if size > self.granule else first[:, None]
    if self.granule > 1 and (a & (self.granule - 1)).any():   # a misaligned access: its last byte's granule too
      at = np.concatenate([at, (g * self.per_group + ((a + size - 1) >> self.shift))[:, None]], axis=1)
    b, waves = at.reshape(-1), self.wave_ids[w]
    rows = np.broadcast_to(waves[:, None], lanes.shape)[lanes]
    base, wv = self.epoch << 16, rows if at.shape[1] == 1 else np.repeat(rows, at.shape[1])
    mine, ws = base + wv, self.write[b]
    other = (ws >= base) & (ws != mine)
    if write:
      hi, lo = self.read_hi[b], self.read_lo[b]
      other |= (hi >= base) & ((hi != mine) | (lo != (base | 0xffff) - wv))
      if not other.any():
        self.note(b, wv, True)
        other = (ws := self.write[b]) != mine   # two waves writing one granule in this one instruction
    if other.any():
      j = int(np.flatnonzero(other)[0])
      did, them = ("wrote", ws[j]) if ws[j] >= base and ws[j] != mine[j] else ("read", hi[j] if hi[j] != mine[j] else (base | 0xffff) - lo[j] + base)
      raise EmulatorError(f"{who} by wave {int(wv[j]) % self.wpg} of workgroup {self.first_group + int(b[j]) // self.per_group} "
                          f"{'writes' if write else 'reads'} LDS byte {int(b[j]) % self.per_group * self.granule}, which wave "
                          f"{int(them - base) % self.wpg} of the workgroup {did} with no s_barrier between them passed after waiting for the "
                          f"earlier one: a race (s_waitcnt lgkmcnt(0) then s_barrier, after the one and before the other, orders them)")
    if not write: self.note(b, wv, False)
    if len(self.in_flight) > 64: self.settled()
    self.in_flight.append((waves, st.issued[LGKM][w].copy(), rows, at, write))

  def retire(self, w, upto: np.ndarray) -> None:
    """s_waitcnt lgkmcnt: waves w's LGKM accesses numbered up to `upto` are done."""
    self.retired[w] = np.maximum(self.retired[w], upto)

  def settled(self) -> None:
    """Forget the accesses retired."""
    self.in_flight = [f for f in self.in_flight if (f[1] > self.retired[f[0]]).any()]

  def barrier(self) -> None:
    """The workgroups pass an s_barrier: a new epoch, into which the accesses still in flight are carried (nothing orders
    them before the barrier)."""
    self.epoch += 1
    if self.epoch == self.EPOCHS:   # (stamps of earlier epochs order nothing now)
      self.epoch = 0
      for x in (self.write, self.read_hi, self.read_lo): x.fill(-1)
    self.settled()
    for waves, seq, rows, at, write in self.in_flight:
      late = np.zeros(len(self.retired), bool)
      late[waves[seq > self.retired[waves]]] = True
      if (sel := late[rows]).any(): self.note(at[sel].reshape(-1), np.repeat(rows[sel], at.shape[1]), write)

class State:
  """The registers of a batch of waves: S (waves, 256) holding SGPRs, vcc, exec and scc at their operand encodings; V (vgprs, waves, 32)."""
  def __init__(self, waves: int, vgprs: int, lds_groups: int, lds_bytes: int):
    self.S = np.zeros((waves, 256), U32)
    self.V = np.zeros((vgprs, waves, LANES), U32)
    self.pc = np.zeros(waves, np.int64)
    self.done = np.zeros(waves, bool)
    self.waiting = np.zeros(waves, bool)   # at an s_barrier, until the other waves of its workgroup wait or end
    self.lds = np.zeros((lds_groups, max(lds_bytes, 4)), np.uint8)
    self.group = np.zeros(waves, np.int64)   # workgroup of each wave (its LDS)
    self.mem: Memory | None = None
    self.lanes_key, self.lanes_val, self.all_lanes = b"", None, False
    self.counters = LaunchCounters()
    # loads in flight, as the RDNA3 ISA's counters see them: VM_CNT counts global loads, LGKM_CNT LDS accesses and
    # scalar loads, each retiring in issue order. A VGPR load's data reaches its registers at the s_waitcnt that
    # retires it (the lanes it loaded: `landing`), not before; reading a VGPR a load in flight will write is an error
    # (the hardware would read the old value). Scalar loads write their SGPRs at once (every kernel waits for them
    # before their first use).
    self.issued = {VM: np.zeros(waves, np.int64), LGKM: np.zeros(waves, np.int64)}
    self.flying: set[int] = set()   # VGPRs some wave's load in flight will write
    self.landing: tuple[np.ndarray, ...] | None = None   # (counter, issue number, data, bits written) per VGPR and wave
    self.order: LdsOrder | None = None   # in a kernel with LDS and workgroups of several waves: their LDS accesses' order
  def active(self, lanes: np.ndarray) -> int: return int(np.count_nonzero(lanes))
  def issue(self, counter: int, w, dst: int = 0, values: list[np.ndarray] = (), lanes: np.ndarray | None = None, bits: int = 0xFFFFFFFF) -> None:
    """An access counted by `counter` issued by waves w; a load's values land in VGPRs dst.. (the lanes given) when it
    retires: the `bits` of each register (a D16 load writes one half and keeps the other: the last load of a register
    in flight lands the halves of every load of it before)."""
    self.issued[counter][w] += 1
    if not values: return
    if self.landing is None:
      self.landing = (np.zeros(self.V.shape[:2], np.int8), np.zeros(self.V.shape[:2], np.int64), np.zeros_like(self.V), np.zeros_like(self.V))
    kind, seq, data, written = self.landing
    loads = lanes.any(axis=1)   # a wave with no lane on writes nothing
    for k, v in enumerate(values):
      r = dst + k
      if ((kind[r, w] != 0) & (kind[r, w] != counter) & loads).any():
        raise EmulatorError(f"v{r}: two loads in flight on different counters would write it (their order is undefined)")
      dr, wr = data[r, w], written[r, w]
      dr[lanes] = (dr[lanes] & ~U32(bits)) | (v & U32(bits))
      wr[lanes] |= U32(bits)
      data[r, w], written[r, w] = dr, wr
      kind[r, w], seq[r, w] = np.where(loads, counter, kind[r, w]), np.where(loads, self.issued[counter][w], seq[r, w])
      self.flying.add(r)
  def retire(self, counter: int, left: int, w) -> None:
    """s_waitcnt: waves w wait until at most `left` accesses counted by `counter` are in flight; the loads retired land."""
    if counter == LGKM and self.order is not None: self.order.retire(w, self.issued[LGKM][w] - left)
    if not self.flying: return
    kind, seq, data, written = self.landing
    limit = self.issued[counter][w] - left
    for r in list(self.flying):   # a few registers, each over the waves (views where w is every wave)
      done = (kind[r, w] == counter) & (seq[r, w] <= limit)
      if not done.any(): continue
      bits = np.where(done[:, None], written[r, w], U32(0))
      self.V[r, w] = data[r, w] if (bits == 0xFFFFFFFF).all() else (self.V[r, w] & ~bits) | (data[r, w] & bits)
      written[r, w] = written[r, w] & ~bits
      kind[r, w] = np.where(done, 0, kind[r, w])
      if not kind[r].any(): self.flying.discard(r)
  def unsettled(self, r: int, n: int, w, d) -> None:
    """An error if a load in flight will write one of VGPRs r..r+n-1 of waves w, which instruction d reads."""
    for x in range(r, r + n):
      if x in self.flying and self.landing[0][x, w].any():
        raise EmulatorError(f"{d.inst.name} at byte {d.pc} reads v{x}, which a load in flight will write: an s_waitcnt is missing before it")
  def lanes(self, w) -> np.ndarray:
    """The exec masks of waves w as (waves, 32) bools, kept while they do not change (most instructions leave them)."""
    m = self.S[w, EXEC]
    if (key := m.tobytes()) != self.lanes_key:
      self.lanes_key, self.lanes_val = key, lanes_of(m)
      self.all_lanes = bool(self.lanes_val.all())
    return self.lanes_val

class Program:
  """A decoded kernel: each instruction turned into a step function once, run for every launch."""
  def __init__(self, loaded: Loaded):
    self.loaded = loaded
    self.vgprs = ((loaded.rsrc1 & 0x3f) + 1) * 8
    try: decoded = decode(loaded.code)
    except AsmError as e: raise EmulatorError(f"cannot decode kernel {loaded.name}: {e}") from None
    # the code may be followed by padding (s_code_end); stop at the last s_endpgm
    ends = [i for i, d in enumerate(decoded) if d.inst.name == "s_endpgm"]
    if not ends: raise EmulatorError(f"kernel {loaded.name} has no s_endpgm")
    self.decoded = decoded[:ends[-1] + 1]
    self.index = {d.pc: i for i, d in enumerate(self.decoded)}
    self.lds_granule = 0   # the narrowest LDS access's bytes, at most 4 (0: no LDS access), set by ds()
    self.steps = [self.compile(d) for d in self.decoded]
    self.control = {i for i, d in enumerate(self.decoded) if d.inst.fmt == "SOPP" and d.inst.name not in ("s_waitcnt", "s_nop")}

  # ***** operands *****
  def check_vgpr(self, r: int, n: int, d: Decoded) -> None:
    if r + n > self.vgprs:
      raise EmulatorError(f"{d.inst.name} at byte {d.pc} uses v{r + n - 1}, but the kernel descriptor allocates {self.vgprs} VGPRs")

  def reader(self, code: int, t: str, d: Decoded, vgpr_field: bool = False):
    """A function (state, waves) -> register bits of one source for those waves, shaped to broadcast over (waves, 32)."""
    n = regs(t)
    if vgpr_field or code >= 256:
      r = code - 256 if code >= 256 else code
      self.check_vgpr(r, n, d)
      if n == 1: return lambda st, w: st.V[r, w] if not st.flying else (st.unsettled(r, 1, w, d), st.V[r, w])[1]
      return lambda st, w: (st.flying and st.unsettled(r, 2, w, d), st.V[r, w].astype(U64) | (st.V[r + 1, w].astype(U64) << U64(32)))[1]
    if code < 128 or code == SCC:
      if n == 1: return lambda st, w: st.S[w, code][:, None]
      return lambda st, w: (st.S[w, code].astype(U64) | (st.S[w, code + 1].astype(U64) << U64(32)))[:, None]
    if (i := inline_int(code)) is not None: val = np.asarray(i, np.int64).view(U64) if n == 2 else np.asarray(i, np.int32).view(U32)
    elif code in INLINE_FLOATS or code == INV_2PI:
      f = INLINE_FLOATS.get(code, 0.15915494309189535)
      val = np.asarray(f, np.float64).view(U64) if t == "f64" else np.asarray(f, np.float16).view(np.uint16).astype(U32) if t == "f16" else np.asarray(f, np.float32).view(U32)
    elif code == LITERAL:
      lit = d.literal
      val = (np.asarray(lit, U64) << U64(32)) if t == "f64" else np.asarray(lit, U64) if n == 2 else np.asarray(lit, U32)
    else: raise EmulatorError(f"{d.inst.name} at byte {d.pc}: source operand {code} is not supported by the emulator")
    return lambda st, w: val

  def compile(self, d: Decoded):
    inst, f = d.inst, d.fields
    fmt = inst.fmt
    try:
      if fmt in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD"): return self.valu(d)
      if fmt in ("SOP1", "SOP2", "SOPC", "SOPK"): return self.salu(d)
      if fmt == "SOPP": return self.sopp(d)
      if fmt == "SMEM": return self.smem(d)
      if fmt == "GLOBAL": return self.global_mem(d)
      if fmt == "DS": return self.ds(d)
      if fmt == "VOP3P" and inst.base.startswith("v_wmma_"): return self.wmma(d)
    except KeyError as e: raise EmulatorError(f"the emulator does not implement {inst.name} (at byte {d.pc} of {self.loaded.name}): {e}") from None
    raise EmulatorError(f"the emulator does not implement {inst.name} (at byte {d.pc} of {self.loaded.name})")

  def valu(self, d: Decoded):
    inst, f = d.inst, d.fields
    base = inst.base
    fn = VALU.get(base) if not base.startswith("v_cmp_") else None
    if base.startswith("v_cmp_"):
      kind = base.split("_")[2]
      if kind == "class": raise KeyError(base)
      fn = _cmp(kind)
    if fn is None: raise KeyError(base)
    vop3 = inst.fmt in ("VOP3", "VOP3SD")
    neg, absb = f.get("neg", 0) if vop3 else 0, f.get("abs", 0) if vop3 else 0
    if vop3 and (f.get("omod", 0) or f.get("clamp", 0) or f.get("opsel", 0)):
      raise EmulatorError(f"{inst.name} at byte {d.pc}: omod/clamp/opsel are not supported by the emulator")
    srcs, mask_src, dst, sdst, compare = [], None, None, None, base.startswith("v_cmp_")
    for i, ((fld, kind), t) in enumerate(zip(inst.operands, inst.types)):
      if i == 0 and not compare: dst = (f["vdst"], t); continue
      if i == 0 and compare: sdst = VCC if fld == "vcc" else f["vdst"]; continue
      if kind == "m" and fld in ("sdst", "vcc") and i == 1 and base in CARRY_OUT: sdst = VCC if fld == "vcc" else f["sdst"]; continue
      if kind == "m":   # a lane mask source
        code = VCC if fld == "vcc" else f[fld]
        mask_src = self.reader(code, "b32", d)
        continue
      rd = self.reader(f[fld], t, d, vgpr_field=(fld == "vsrc1"))
      j = int(fld[3]) if fld.startswith("src") else 1
      if t[0] == "f" and (neg >> j & 1 or absb >> j & 1):
        rd = (lambda rd, t, n, a: lambda st, w: (lambda x: -x if n else x)(np.abs(to_typed(rd(st, w), t)) if a else to_typed(rd(st, w), t)))(rd, t, neg >> j & 1, absb >> j & 1)
        srcs.append((rd, None))
      else: srcs.append((rd, t))
    if base in ACCUMULATE: srcs.append((self.reader(dst[0], dst[1], d, vgpr_field=True), dst[1]))
    if dst is not None: self.check_vgpr(dst[0], regs(dst[1]), d)
    carry, wide = base in CARRY_OUT, dst is not None and regs(dst[1]) == 2
    def step(st: State, w):
      exec_lanes = st.lanes(w)
      args = [rd(st, w) if t is None else to_typed(rd(st, w), t) for rd, t in srcs]
      if mask_src is not None:
        m = lanes_of(scalar(mask_src(st, w), exec_lanes.shape[0]))
        args.append(m.astype(U64) if carry else m)
      out = fn(*args)
      if compare:
        st.S[w, sdst] = mask_of(np.broadcast_to(out, exec_lanes.shape) & exec_lanes) if sdst != NULL else 0
        return
      if carry:
        out, c = out
        if sdst != NULL: st.S[w, sdst] = mask_of(np.broadcast_to(c, exec_lanes.shape) & exec_lanes)
      r, t = dst
      bits = np.broadcast_to(to_bits(out, t), exec_lanes.shape)
      words = (bits.astype(U32), (bits >> U64(32)).astype(U32)) if wide else (bits,)
      for k, x in enumerate(words): st.V[r + k, w] = x if st.all_lanes else np.where(exec_lanes, x, st.V[r + k, w])
    return step

  def salu(self, d: Decoded):
    inst, f = d.inst, d.fields
    if inst.name == "s_movk_i32":
      val = U32(np.int16(f["simm16"] if f["simm16"] < 0x8000 else f["simm16"] - 0x10000).astype(np.int32).view(U32))
      sd = f["sdst"]
      def movk(st, w): st.S[w, sd] = val
      return movk
    if inst.name == "s_mov_b64":
      rd, sd = self.reader(f["ssrc0"], "b64", d), f["sdst"]
      def mov64(st, w):
        v = np.broadcast_to(rd(st, w), (nwaves(st, w), 1))[:, 0]
        st.S[w, sd], st.S[w, sd + 1] = v.astype(U32), (v >> U64(32)).astype(U32)
      return mov64
    if inst.name == "s_cselect_b32":
      r0, r1, sd = self.reader(f["ssrc0"], "b32", d), self.reader(f["ssrc1"], "b32", d), f["sdst"]
      def cselect(st, w): st.S[w, sd] = np.where(st.S[w, SCC] != 0, *(scalar(r(st, w), nwaves(st, w)) for r in (r0, r1)))
      return cselect
    fn, scc = SALU[inst.name]
    readers = [self.reader(f[fld], "b32", d) for fld, _ in inst.operands if fld.startswith("ssrc")]
    sd = f.get("sdst") if fn is not None else None
    def step(st: State, w):
      args = [scalar(rd(st, w), nwaves(st, w)) for rd in readers]
      if fn is not None:
        r = _u(fn(*args))
        if scc is not None: st.S[w, SCC] = (scc(r) if scc.__code__.co_argcount == 1 else scc(*args)).astype(U32)
        if sd != NULL: st.S[w, sd] = r
      else: st.S[w, SCC] = scc(*args).astype(U32)
    return step

  def sopp(self, d: Decoded):
    name, i = d.inst.name, self.index[d.pc]
    if name == "s_nop": return None
    if name == "s_waitcnt":   # simm16: vmcnt in bits 15:10, lgkmcnt in 9:4 (expcnt, 2:0, counts exports: none here)
      vm, lgkm = (d.fields["simm16"] >> 10) & 0x3f, (d.fields["simm16"] >> 4) & 0x3f
      def waitcnt(st, w):
        st.retire(VM, vm, w)
        st.retire(LGKM, lgkm, w)
      return waitcnt
    if name == "s_endpgm":
      def endpgm(st, w): st.done[w] = True
      return endpgm
    if name == "s_barrier":   # the waves wait here (run() passes them on once their workgroup's other waves wait or ended)
      def barrier(st, w):
        st.waiting[w] = True
        st.pc[w] -= 1   # the loop adds one
      return barrier
    if name in BRANCHES:
      off = d.fields["simm16"] - (0x10000 if d.fields["simm16"] & 0x8000 else 0)
      target_pc = d.pc + 4 + 4 * off
      if target_pc not in self.index: raise EmulatorError(f"{self.loaded.name}: branch at byte {d.pc} to byte {target_pc}, not an instruction")
      target, cond = self.index[target_pc], BRANCHES[name]
      def branch(st, w):
        st.pc[w] = np.where(cond(st, w), target - 1, st.pc[w])   # the loop adds one
      return branch
    raise KeyError(name)

  def smem(self, d: Decoded):
    f, n = d.fields, regs(d.inst.types[0])
    base, sd, off = f["sbase"] * 2, f["sdata"], f["offset"] - (1 << 21 if f["offset"] & (1 << 20) else 0)
    if f["soffset"] != NULL: raise EmulatorError(f"{d.inst.name} at byte {d.pc}: soffset is not supported by the emulator")
    def load(st: State, w):
      addr = (st.S[w, base].astype(U64) | (st.S[w, base + 1].astype(U64) << U64(32))) + U64(off & 0xffffffffffffffff)
      words = st.mem.read(addr, 4 * n).view(U32)
      for k in range(n): st.S[w, sd + k] = words[:, k]
      st.issue(LGKM, w)
    return load

  def global_mem(self, d: Decoded):
    inst, f = d.inst, d.fields
    off = f["offset"] - (1 << 13 if f["offset"] & (1 << 12) else 0)
    saddr, vaddr = f["saddr"], f["addr"]
    load = inst.name.startswith("global_load")
    t = inst.types[0] if load else inst.types[1]
    self.check_vgpr(vaddr, 1 if saddr != NULL else 2, d)
    def addresses(st: State, w, lanes):
      if st.flying: st.unsettled(vaddr, 1 if saddr != NULL else 2, w, d)
      if saddr != NULL:
        base = st.S[w, saddr].astype(U64) | (st.S[w, saddr + 1].astype(U64) << U64(32))
        a = base[:, None] + st.V[vaddr, w].astype(U64)
      else: a = st.V[vaddr, w].astype(U64) | (st.V[vaddr + 1, w].astype(U64) << U64(32))
      return (a + U64(off & 0xffffffffffffffff))[lanes]
    if load:
      dst, size = f["vdst"], LOAD_BYTES[t]
      self.check_vgpr(dst, max(1, size // 4), d)
      def gload(st: State, w):
        lanes = st.lanes(w)
        if not lanes.any(): return st.issue(VM, w)
        vals = _bytes_to_regs(st.mem.read(addresses(st, w, lanes), size), t)
        st.counters.global_read += st.active(lanes) * size
        st.issue(VM, w, dst, vals, lanes)   # in its VGPRs at the s_waitcnt vmcnt that retires it
      return gload
    data, size = f["data"], STORE_BYTES[t]
    self.check_vgpr(data, max(1, size // 4), d)
    def gstore(st: State, w):
      lanes = st.lanes(w)
      if not lanes.any(): return
      if st.flying: st.unsettled(data, max(1, size // 4), w, d)
      words = np.stack([st.V[data + k, w][lanes] for k in range(max(1, size // 4))], axis=1)
      st.mem.write(addresses(st, w, lanes), np.ascontiguousarray(words).view(np.uint8)[:, :size])
      st.counters.global_written += st.active(lanes) * size
    return gstore

  def ds(self, d: Decoded):
    inst, f = d.inst, d.fields
    off = f["offset0"] | (f["offset1"] << 8)
    if inst.name == "ds_swizzle_b32": return self.swizzle(d, off)
    load = inst.name.startswith("ds_load")
    t = inst.types[0] if load else inst.types[1]
    size = (LOAD_BYTES if load else STORE_BYTES)[t]
    addr_reg = f["addr"]
    self.check_vgpr(addr_reg, 1, d)
    lds_size = self.loaded.lds
    self.lds_granule = min(self.lds_granule or 4, size)
    who = f"{self.loaded.name}: {inst.name} at byte {d.pc}"
    def where(st: State, w, lanes):
      if st.flying: st.unsettled(addr_reg, 1, w, d)
      a = (st.V[addr_reg, w].astype(np.int64) + off)
      grp = np.broadcast_to(st.group[w][:, None], a.shape)[lanes]
      a = a[lanes]
      if ((a + size) > lds_size).any():
        raise EmulatorError(f"{self.loaded.name}: {inst.name} at byte {d.pc} addresses LDS byte {int(a.max())}, the kernel has {lds_size}")
      return grp, a   # each active lane's workgroup and first byte
    span = np.arange(size)
    if load:
      # a D16 load writes one half of its VGPR and keeps the other
      dst, bits = f["vdst"], 0xFFFF0000 if inst.name.endswith("_d16_hi") else 0xFFFF if inst.name.endswith("_d16") else 0xFFFFFFFF
      def dsload(st: State, w):
        lanes = st.lanes(w)
        if not lanes.any(): return st.issue(LGKM, w)
        g, a = where(st, w, lanes)
        st.counters.shared_read += st.active(lanes) * size
        vals = _bytes_to_regs(st.lds[g[:, None], a[:, None] + span], t)
        # in its VGPRs at the s_waitcnt lgkmcnt that retires it
        st.issue(LGKM, w, dst, [vals[0] << U32(16)] if bits == 0xFFFF0000 else vals, lanes, bits)
        if st.order is not None: st.order.access(st, w, lanes, g, a, size, False, who)
      return dsload
    data = f["data0"]
    def dsstore(st: State, w):
      lanes = st.lanes(w)
      st.issue(LGKM, w)
      if not lanes.any(): return
      g, a = where(st, w, lanes)
      if st.flying: st.unsettled(data, max(1, size // 4), w, d)
      words = np.stack([st.V[data + k, w][lanes] for k in range(max(1, size // 4))], axis=1)
      if st.order is not None: st.order.access(st, w, lanes, g, a, size, True, who)
      st.lds[g[:, None], a[:, None] + span] = np.ascontiguousarray(words).view(np.uint8)[:, :size]
      st.counters.shared_written += st.active(lanes) * size
    return dsstore

  def swizzle(self, d: Decoded, off: int):
    """ds_swizzle_b32 in BitMode (the RDNA3 ISA's pseudocode): lane i gets the source VGPR of lane j = ((i & and_mask) |
    or_mask) ^ xor_mask (offset bits 4:0, 9:5, 14:10) of its wave, or 0 where EXEC disables lane j; it returns through
    lgkmcnt like an LDS load. The other modes (offset >= 0x8000: quad permutes, rotations, FFT) are not implemented."""
    if off >= 0x8000: raise EmulatorError(f"{self.loaded.name}: ds_swizzle_b32 at byte {d.pc} offset:{off:#x}: only BitMode patterns (below 0x8000) are implemented")
    src, dst = d.fields["addr"], d.fields["vdst"]
    self.check_vgpr(src, 1, d); self.check_vgpr(dst, 1, d)
    j = ((np.arange(LANES) & (off & 31)) | (off >> 5 & 31)) ^ (off >> 10 & 31)
    def run(st: State, w):
      lanes = st.lanes(w)
      if not lanes.any(): return st.issue(LGKM, w)
      if st.flying: st.unsettled(src, 1, w, d)
      got = np.where(lanes[:, j], st.V[src, w][:, j], 0).astype(U32)
      st.issue(LGKM, w, dst, [got[lanes]], lanes)   # in its VGPR at the s_waitcnt lgkmcnt that retires it
    return run

  def wmma(self, d: Decoded):
    """v_wmma_f32_16x16x16_{f16,bf16} D, A, B, C in wave32, laid out as the RDNA3 ISA says: lane l (and lane l + 16,
    which must hold a copy) has in its 8 VGPRs row l % 16 of A (K = 0..15, two per register, the first in the low half)
    and column l % 16 of B; VGPR v of C and D holds in lane l the element (row 2 v + l // 16, column l % 16). EXEC must
    be all ones. The sum: exact products added as WMMA_FRACTION_BITS / WMMA_ROUNDING say."""
    f, ty = d.fields, "bf16" if "bf16" in d.inst.base else "f16"
    if f["neg"] or f["neg_hi"] or f["opsel"] or f["clamp"] or f["opsel_hi"] != 3 or f["opsel_hi2"] != 1:
      raise EmulatorError(f"{d.inst.name} at byte {d.pc}: neg/opsel/clamp modifiers are not supported by the emulator")
    dst, (a, b, c) = f["vdst"], (f[k] - 256 for k in ("src0", "src1", "src2"))
    for r in (dst, a, b, c): self.check_vgpr(r, 8, d)
    lane = np.arange(LANES)
    def values(regs: np.ndarray) -> np.ndarray:   # (8, waves, 32) words -> (waves, 16, 16) of lanes 0..15, K last
      halves = np.stack([regs & 0xffff, regs >> 16], axis=-1).transpose(1, 2, 0, 3).reshape(regs.shape[1], LANES, 16).astype(np.uint16)
      v = halves.view(np.float16).astype(np.float64) if ty == "f16" else (halves.astype(U32) << 16).view(np.float32).astype(np.float64)
      if not np.array_equal(halves[:, :16], halves[:, 16:]):
        raise EmulatorError(f"{self.loaded.name}: {d.inst.name} at byte {d.pc}: lanes 16-31 must hold a copy of lanes 0-15's A and B")
      return v[:, :16]
    def step(st: State, w):
      if not st.lanes(w).all(): raise EmulatorError(f"{self.loaded.name}: {d.inst.name} at byte {d.pc} with EXEC not all ones")
      if st.flying:
        for r in (a, b, c): st.unsettled(r, 8, w, d)
      A, Bt = values(st.V[a:a + 8, w]), values(st.V[b:b + 8, w])
      C = np.zeros((A.shape[0], 16, 16), np.float32)
      C[:, 2 * np.arange(8)[:, None] + lane // 16, lane % 16] = st.V[c:c + 8, w].transpose(1, 0, 2).view(np.float32)
      D = tensor_core_dot(A, Bt.transpose(0, 2, 1), C, -14 if ty == "f16" else -126, WMMA_FRACTION_BITS, WMMA_ROUNDING)
      st.V[dst:dst + 8, w] = D[:, 2 * np.arange(8)[:, None] + lane // 16, lane % 16].view(U32).transpose(1, 0, 2)
    return step

  # ***** running *****
  def run(self, st: State, max_steps: int = 50_000_000) -> None:
    steps, n, control = self.steps, len(self.steps), self.control
    everyone = slice(None)   # a view, not a copy: the common case, every wave at the same instruction
    together, p = False, -1
    with np.errstate(all="ignore"):   # infinities and NaN are results here, not warnings
      for _ in range(max_steps):
        if together and p not in control: p += 1   # every live wave still at one instruction: the same ones step on
        else:
          live = ~st.done & ~st.waiting
          if not live.any():
            if not st.waiting.any(): return
            # every wave not ended waits at an s_barrier: their workgroups pass (the RDNA3 ISA's S_BARRIER: waves that
            # ended do not hold it, and any s_barrier of the workgroup counts)
            st.counters.barriers += len(np.unique(st.group[st.waiting]))
            if st.order is not None: st.order.barrier()
            st.pc[st.waiting] += 1
            st.waiting[:] = False
            together = False
            continue
          pcs = st.pc[live]
          p = int(pcs.min())
          if p >= n: raise EmulatorError(f"{self.loaded.name}: ran past the end of the code")
          together = bool((pcs == p).all())
          w = everyone if together and live.all() else np.flatnonzero(live & (st.pc == p))
        if (fn := steps[p]) is not None: fn(st, w)
        ex = st.S[w, EXEC]
        st.counters.instructions += ex.size
        st.counters.thread_instructions += int(np.bitwise_count(ex).sum())
        st.pc[w] += 1
    raise EmulatorError(f"{self.loaded.name}: no s_endpgm after {max_steps} instructions (an endless loop?)")

def launch(prog: Program, memory_arrays: list[np.ndarray], kernarg: np.ndarray, grid: tuple[int, int, int], group: tuple[int, int, int],
           max_waves: int = 4096) -> LaunchCounters:
  """Run a dispatch: grid counts work-items per dimension (the last workgroup of a dimension may be partial), group the
  workgroup size. Workgroups run in batches of at most max_waves waves. Returns what the dispatch did."""
  lo = prog.loaded
  if lo.lds > LDS_MAX: raise EmulatorError(f"{lo.name}: the kernel descriptor asks for {lo.lds} bytes of LDS, a workgroup may have {LDS_MAX}")
  if lo.properties & (1 << 10) == 0: raise EmulatorError(f"{lo.name}: the emulator runs wave32 kernels only")
  user_sgprs = (lo.rsrc2 >> 1) & 0x1f
  wg_id_enabled = [(lo.rsrc2 >> (7 + k)) & 1 for k in range(3)]
  workitem_ids = ((lo.rsrc2 >> 11) & 3) + 1   # ENABLE_VGPR_WORKITEM_ID: x, x and y, or x, y and z, packed 10 bits each in v0
  if lo.properties & 0b111 or lo.properties & (1 << 3) == 0 or user_sgprs != 2:
    raise EmulatorError(f"{lo.name}: the emulator supports the kernarg pointer as the only user SGPRs")
  mem = Memory(memory_arrays + [kernarg])
  ngroups = [-(-g // l) for g, l in zip(grid, group)]
  per_group = group[0] * group[1] * group[2]
  wpg = -(-per_group // LANES)
  total = ngroups[0] * ngroups[1] * ngroups[2]
  counters = LaunchCounters(threads=grid[0] * grid[1] * grid[2], blocks=total)
  if total == 0: return counters
  batch = max(1, max_waves // wpg)
  t = np.arange(wpg * LANES)
  tx, ty, tz = t % group[0], t // group[0] % group[1], t // (group[0] * group[1])
  for start in range(0, total, batch):
    gids = np.arange(start, min(total, start + batch))
    gx, gy, gz = gids % ngroups[0], gids // ngroups[0] % ngroups[1], gids // (ngroups[0] * ngroups[1])
    st = State(len(gids) * wpg, prog.vgprs, len(gids), lo.lds)
    st.mem, st.counters = mem, counters
    if prog.lds_granule and wpg > 1: st.order = LdsOrder(len(gids) * wpg, len(gids), start, lo.lds, prog.lds_granule)
    valid = ((t < per_group)[None] & (gx[:, None] * group[0] + tx[None] < grid[0]) & (gy[:, None] * group[1] + ty[None] < grid[1])
             & (gz[:, None] * group[2] + tz[None] < grid[2])).reshape(-1, LANES)
    st.S[:, EXEC] = mask_of(valid)
    st.done = st.S[:, EXEC] == 0
    st.group = np.repeat(np.arange(len(gids)), wpg)
    addr = kernarg.ctypes.data
    st.S[:, 0], st.S[:, 1] = addr & 0xffffffff, addr >> 32
    s = user_sgprs
    for k, g in enumerate((gx, gy, gz)):
      if wg_id_enabled[k]: st.S[:, s], s = np.repeat(g, wpg), s + 1
    ids = sum(x << 10 * k for k, x in enumerate((tx, ty, tz)[:workitem_ids]))
    st.V[0] = np.broadcast_to(ids.reshape(wpg, LANES)[None], (len(gids), wpg, LANES)).reshape(-1, LANES)
    prog.run(st)
  return counters
