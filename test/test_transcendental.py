"""codegen/transcendental.py: SIN, float MOD and float64 EXP2/LOG2 decomposed, run on the PYTHON interpreter, against numpy."""
import itertools, math
import numpy as np
import pytest
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops, GroupOp, f32_to_bf16, bf16_to_f32
from tinycore.codegen import get_program
from tinycore.codegen.transcendental import sin_rules, fmod_rules, exp2_log2_f64_rules, pi_bits, two_over_pi_bits
from tinycore.runtime.builtin import PythonRenderer, PythonProgram

class DecomposingRenderer(PythonRenderer):
  """PYTHON's exact interpreter of linear UOps, with the decompositions applied first: what runs is the decomposition."""
  extra_matcher = sin_rules + fmod_rules + exp2_log2_f64_rules

FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
NP = {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
MANT = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}
LD = np.longdouble
LD_ULPS = 2.0 ** (52 - np.finfo(LD).nmant)   # the long double reference's own error, in float64 ulps (0.5 where it is float64)
# what a decomposed kernel may contain: ops every target has (no SIN, float MOD, EXP2, LOG2, SQRT, RECIP, fused MULACC)
PLAIN = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.TRUNC, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
         Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.WHERE, Ops.CAST, Ops.BITCAST}

def as_values(x, dt: DType) -> np.ndarray:
  """x rounded to dt, as numpy values (bfloat16 as float32 numbers)."""
  return bf16_to_f32(f32_to_bf16(np.asarray(x, np.float32))) if dt == dtypes.bfloat16 else np.asarray(x, NP[dt])

def kernel(op: Ops, dt: DType, nin: int, n: int) -> list[UOp]:
  ins = [UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), i + 1) for i in range(nin)]
  ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), 0).store(UOp(op, dt, tuple(ins))),))
  return get_program(ast, DecomposingRenderer())

def run(op: Ops, dt: DType, *cols) -> np.ndarray:
  """out[i] = op(cols[0][i], ...) decomposed and interpreted; checks the kernel holds only plain ops."""
  vals = [as_values(c, dt) for c in cols]
  spec = kernel(op, dt, len(vals), len(vals[0]))
  alu = {u.op for u in spec.uops if u.op in GroupOp.ALU}
  assert alu <= PLAIN and not any(u.op is Ops.MOD and dtypes.is_float(u.dtype) for u in spec.uops), f"{op} {dt} kept {alu - PLAIN}"
  raw = [f32_to_bf16(v) if dt == dtypes.bfloat16 else v for v in vals]
  bufs = [np.zeros_like(raw[0])] + [np.ascontiguousarray(r) for r in raw]
  PythonProgram(spec.name, spec.src)(*[memoryview(b).cast("B") for b in bufs], global_size=tuple(int(g) for g in spec.global_size),
                                         local_size=spec.local_size)
  return bf16_to_f32(bufs[0]) if dt == dtypes.bfloat16 else bufs[0]

def ulps(got: np.ndarray, want: np.ndarray, dt: DType, absolute: float = 0.0) -> np.ndarray:
  """|got - want| less an allowed absolute error, in ulps of want in dt (subnormal spacing below the normal range)."""
  tiny = {dtypes.float16: 2.0 ** -14, dtypes.bfloat16: 2.0 ** -126, dtypes.float32: 2.0 ** -126, dtypes.float64: 2.0 ** -1022}[dt]
  w = np.abs(want.astype(LD))
  spacing = LD(2.0) ** (np.floor(np.log2(np.maximum(w, LD(tiny)))) - (MANT[dt] - 1))
  return np.maximum(np.abs(got.astype(LD) - want.astype(LD)) - LD(absolute), 0) / spacing

def all_patterns(dt: DType) -> np.ndarray:
  """Every value of a 16-bit float dtype."""
  bits = np.arange(1 << 16, dtype=np.uint16)
  return bf16_to_f32(bits) if dt == dtypes.bfloat16 else bits.view(np.float16)

def random_patterns(dt: DType, n: int, seed: int) -> np.ndarray:
  """n values of dt drawn uniformly over its bit patterns: every binade, subnormals, infinities and NaNs included."""
  u = UINT[dt.itemsize]
  return np.random.default_rng(seed).integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True).view(NP[dt])

# ***** exact constants *****

def test_constants_match_published_digits():
  assert pi_bits(64) == 0x3243F6A8885A308D3        # pi = 3.243F6A8885A308D3... (hex)
  assert two_over_pi_bits(64) == 0xA2F9836E4E441529  # 2/pi = 0.A2F9836E4E441529...
  assert pi_bits(1000) >> 936 == pi_bits(64) and two_over_pi_bits(1000) >> 936 == two_over_pi_bits(64)

# ***** SIN *****

def sin_edges(dt: DType) -> np.ndarray:
  """Zeros, subnormals, pi/4 (where the reduction starts) and its neighbours, the floats nearest multiples of pi/2 (where
  the reduction cancels most: the known hardest one of each dtype too), powers of two to the top of the range, the
  largest value, infinities and NaN."""
  f = np.finfo(NP[dt])
  near = [np.nextafter(NP[dt](np.pi / 4), NP[dt](0)), NP[dt](np.pi / 4), np.nextafter(NP[dt](np.pi / 4), NP[dt](np.inf))]
  ks = np.unique(np.concatenate([np.arange(1, 200), 2.0 ** np.arange(8, 60), np.random.default_rng(3).integers(1, 2**50, 300).astype(np.float64)]))
  multiples = (ks.astype(LD) * (LD(np.pi) / 2)).astype(NP[dt])
  hardest = math.ldexp(6381956970095103, 797) if dt == dtypes.float64 else math.ldexp(16367173, 72)   # closest to k*pi/2
  vals = np.concatenate([[0.0, f.smallest_subnormal, f.tiny, 1e-30 if dt == dtypes.float64 else 1e-20, 0.5, 1.0, np.pi / 4, 3.0, 1e4, 1e15, 1e22, 1e30, f.max, hardest],
                         near, multiples, 2.0 ** np.arange(0, int(np.log2(f.max)) + 1, 7)]).astype(NP[dt])
  vals = vals[np.isfinite(vals)]
  return np.concatenate([vals, -vals, [np.inf, -np.inf, np.nan]]).astype(NP[dt])

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=str)
def test_sin_within_2_5_ulps(dt):
  """Every finite argument, 1e30 and the largest value included: within 2.5 ulps of the exact sine (the conformance bound is
  4 ulps plus 2**-22 for float32, 2 ulps plus 2**-51 for float64: this is tighter, and relative even where sin is tiny)."""
  x = np.concatenate([sin_edges(dt), random_patterns(dt, 20000, seed=1)])
  x = x[np.isfinite(x)]
  got = run(Ops.SIN, dt, x)
  err = ulps(got, np.sin(x.astype(LD)), dt)
  allowed = 2.5 + (LD_ULPS if dt == dtypes.float64 else 0)
  i = int(np.argmax(err))
  assert err[i] <= allowed, f"sin {dt} at x = {x[i]!r}: got {got[i]!r}, exact {float(np.sin(LD(x[i])))!r}: {float(err[i]):.3g} ulps"

@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_sin_specials(dt):
  """sin(+-0) keeps the sign of zero, a subnormal is its own sine, and sin(+-inf), sin(NaN) are NaN."""
  f = np.finfo(np.float32 if dt == dtypes.bfloat16 else NP[dt])
  sub = 2.0 ** -133 if dt == dtypes.bfloat16 else float(f.smallest_subnormal)
  got = run(Ops.SIN, dt, [0.0, -0.0, sub, -sub, np.inf, -np.inf, np.nan])
  assert got[0] == 0 and not np.signbit(got[0]) and got[1] == 0 and np.signbit(got[1])
  assert got[2] == sub and got[3] == -sub
  assert np.isnan(got[4:]).all()

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_sin_half_every_value(dt):
  """Every half and bfloat16 value: float32 math rounded once, within one ulp of the exact sine (the conformance bound)."""
  x = all_patterns(dt)
  fin = np.isfinite(x)
  got = run(Ops.SIN, dt, x)
  assert np.isnan(got[~fin]).all()
  err = ulps(got[fin], np.sin(x[fin].astype(np.float64)), dt)
  i = int(np.argmax(err))
  assert err[i] <= 1, f"sin {dt} at x = {x[fin][i]!r}: got {got[fin][i]!r}, {float(err[i]):.3g} ulps"

def test_sin_float32_needs_only_32_bit_integers():
  """The float32 form (and so half and bfloat16) runs on targets without 64-bit types, like WGSL."""
  for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
    used = {u.dtype.scalar for u in kernel(Ops.SIN, dt, 1, 4).uops} | {u.dtype.scalar for u in kernel(Ops.MOD, dt, 2, 4).uops}
    assert not used & {dtypes.float64, dtypes.int64, dtypes.uint64}, f"{dt}: {used}"

# ***** MOD: fmod, exact *****

def mod_edges(dt: DType) -> np.ndarray:
  f = np.finfo(np.float32 if dt == dtypes.bfloat16 else NP[dt])
  big = 3.3895314e38 if dt == dtypes.bfloat16 else float(f.max)
  sub = 2.0 ** -133 if dt == dtypes.bfloat16 else float(f.smallest_subnormal)
  tiny = 2.0 ** -126 if dt == dtypes.bfloat16 else float(f.tiny)
  vals = [0.0, 1.0, 0.5, 1.5, 2.5, 3.0, 7.0, 1 / 3, 0.1, 1e4, 2.0 ** (MANT[dt]), 2.0 ** MANT[dt] + 2, big, tiny, sub, tiny - sub, 3 * sub, np.inf, np.nan]
  vals = [v for v in vals if math.isnan(v) or math.isinf(v) or v <= big]
  return as_values(vals + [-v for v in vals], dt)

def fmod_reference(a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
  """numpy's fmod (IEEE: exact), in float32 for bfloat16 (exact there too, and the result is a bfloat16 value)."""
  with np.errstate(all="ignore"): return as_values(np.fmod(a.astype(np.float32) if dt == dtypes.bfloat16 else a, b.astype(a.dtype)), dt)

@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_fmod_exact(dt):
  """Every pair of edges (every sign combination, zeros, subnormals, the largest value, infinities, NaN) and random pairs
  over the whole range: the bytes of numpy's fmod (any NaN for NaN), the sign of a zero result included."""
  e = mod_edges(dt)
  pairs = np.array(list(itertools.product(e, e))).T.astype(e.dtype)
  a, b = pairs
  if dt != dtypes.bfloat16:
    ra, rb = random_patterns(dt, 6000, seed=5), random_patterns(dt, 6000, seed=6)
    with np.errstate(all="ignore"): close = (ra.astype(np.float64) * np.random.default_rng(7).uniform(0.1, 10, 6000)).astype(NP[dt])   # small quotients
    a, b = np.concatenate([a, ra, ra]), np.concatenate([b, rb, close])
  got, want = run(Ops.MOD, dt, a, b), fmod_reference(a, b, dt)
  view = np.uint32 if dt == dtypes.bfloat16 else UINT[dt.itemsize]
  bad = ~((got.view(view) == want.view(view)) | (np.isnan(got) & np.isnan(want)))
  assert not bad.any(), f"fmod {dt}: {int(bad.sum())} differ, e.g. " + ", ".join(
    f"fmod({a[i]!r}, {b[i]!r}) = {got[i]!r}, expected {want[i]!r}" for i in np.flatnonzero(bad)[:4])

# ***** float64 EXP2 and LOG2 *****

@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2], ids=str)
def test_exp2_log2_float64_within_2_ulps(op):
  """Across the range (exp2: where the result is finite and normal, and past it; log2: every positive value, subnormals
  included): within the conformance bound (2 ulps, plus 2**-51 absolute for log2, whose result is tiny near 1), and the
  special values exactly."""
  rng = np.random.default_rng(11)
  x = rng.uniform(-1070, 1023, 20000) if op is Ops.EXP2 else np.abs(random_patterns(dtypes.float64, 20000, seed=12))
  x = x[np.isfinite(x) & (x != 0)]
  got = run(op, dtypes.float64, x)
  want = (np.exp2 if op is Ops.EXP2 else np.log2)(x.astype(LD))
  err = ulps(got, want, dtypes.float64, absolute=2.0 ** -51 if op is Ops.LOG2 else 0.0)
  i = int(np.argmax(err))
  assert err[i] <= 2 + LD_ULPS, f"{op} at {x[i]!r}: got {got[i]!r}, exact {float(want[i])!r}: {float(err[i]):.3g} ulps past the absolute part"
  specials = [np.inf, -np.inf, np.nan, 0.0, 2000.0, -2000.0, -1.0]
  with np.errstate(all="ignore"): expect = (np.exp2 if op is Ops.EXP2 else np.log2)(np.array(specials))
  got = run(op, dtypes.float64, specials)
  assert ((got == expect) | (np.isnan(got) & np.isnan(expect))).all(), (got, expect)
