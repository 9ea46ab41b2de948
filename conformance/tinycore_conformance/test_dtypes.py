"""Section dtypes: casts, bitcasts, integer wraparound, NaN/inf/-0.0, half and bfloat16 rounding, undeclared dtypes."""
from __future__ import annotations
import math
import numpy as np
import pytest
from tinycore.dtype import DType, dtypes, ALL_DTYPES
from tinycore.tensor import Tensor
from tinycore.runtime.errors import UnsupportedError
from tinycore_conformance import oracle as O
from tinycore_conformance.target import Target, target_for, dtype_name
from tinycore_conformance.tolerances import assert_close

pytestmark = pytest.mark.dtypes

# ***** the values each dtype is checked with *****

def cast_values(src: DType, dst: DType) -> np.ndarray:
  """Values of `src` whose conversion to `dst` is defined without saturation (saturation is checked on its own)."""
  if src == dtypes.bool: return np.array([False, True, True, False])
  if O.is_int(src):
    lo, hi = O.int_range(src)
    vals = [0, 1, 2, 7, 100, 127, 128, 255, 256, 1000, 32767, 65535, 70000, 2**31 - 1, 2**31, 2**32 - 1, 2**53 + 1, 2**62, 2**63 - 1, 2**64 - 1]
    vals += [-v for v in vals]
    if dst == dtypes.bfloat16 or (O.is_float(dst) and dst.itemsize < src.itemsize and dst != dtypes.float64):
      vals = [v for v in vals if abs(v) <= 65504]  # f64->f32->bf16 double rounding is not exercised here
    return np.array([v for v in vals if lo <= v <= hi], dtype=O.np_type(src))
  vals = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, -1.5, 2.5, -2.5, 0.1, 3.7, -3.7, 100.25, -100.75, 1e-3, 1.0 / 3, 126.99, 255.5, 65504.0, 1e6 + 0.5, 3.0e38]
  vals = O.representable(np.array(vals + [-v for v in vals[10:]], np.float64), src)
  wide = vals.astype(np.float64)
  keep = np.isfinite(wide)
  if O.is_int(dst):  # in range after truncation toward zero
    lo, hi = O.int_range(dst)
    keep &= (np.trunc(wide) >= lo) & (np.trunc(wide) <= hi)
  if O.is_float(dst) and dst.itemsize < src.itemsize or dst == dtypes.bfloat16: keep &= np.abs(wide) <= 65504  # overflow: checked on its own
  return vals[keep]

def expected_cast(vals: np.ndarray, src: DType, dst: DType) -> np.ndarray:
  if dst == dtypes.bool: return vals.astype(np.float64) != 0 if O.is_float(src) else vals != 0
  if src == dtypes.bool: return vals.astype(O.np_type(dst))
  if dst == dtypes.bfloat16: return O.bf16_round(vals.astype(np.float64))
  if O.is_int(dst) and O.is_float(src): return np.trunc(vals.astype(np.float64)).astype(O.np_type(dst))
  with np.errstate(all="ignore"): return vals.astype(O.np_type(dst))

SAME_SIZE = [(a, b) for a in ALL_DTYPES for b in ALL_DTYPES if a != b and a.itemsize == b.itemsize and dtypes.bool not in (a, b)]

def pytest_generate_tests(metafunc) -> None:
  t = target_for(metafunc.config)
  name = metafunc.function.__name__
  if name == "test_cast":
    pairs = [(a, b) for a in t.dtypes for b in t.dtypes if a != b]
    metafunc.parametrize(("src", "dtype"), pairs, ids=[f"{dtype_name(a)}->{dtype_name(b)}" for a, b in pairs])
  elif name == "test_bitcast":
    pairs = [(a, b) for a, b in SAME_SIZE if a in t.dtypes and b in t.dtypes]
    metafunc.parametrize(("src", "dtype"), pairs, ids=[f"{dtype_name(a)}->{dtype_name(b)}" for a, b in pairs])
  elif name in ("test_int_wraparound", "test_int_division_by_zero_is_defined"):
    metafunc.parametrize("dtype", t.ints, ids=[dtype_name(d) for d in t.ints])
  elif name in ("test_float_to_int_saturates",):
    pairs = [(f, i) for f in t.floats for i in t.ints]
    metafunc.parametrize(("src", "dtype"), pairs, ids=[f"{dtype_name(a)}->{dtype_name(b)}" for a, b in pairs])
  elif name in ("test_nan_inf", "test_subnormals"):
    cases = [(c, d) for c in (IEEE_CASES if name == "test_nan_inf" else ["subnormal"]) for d in t.floats]
    metafunc.parametrize(("case", "dtype"), cases, ids=[f"{c}-{dtype_name(d)}" for c, d in cases])
  elif name == "test_undeclared_dtype_fails_cleanly":  # None: everything is declared, which the report should still say
    metafunc.parametrize("dtype", t.undeclared or [None], ids=[dtype_name(d) for d in t.undeclared] or ["none"])

def test_cast(device, src, dtype):
  """src -> dst conversions: ints wrap, floats round to nearest even, float->int truncates, anything->bool is != 0."""
  vals = cast_values(src, dtype)
  got = Tensor(vals, dtype=src).cast(dtype).numpy()
  want = expected_cast(vals, src, dtype)
  bad = ~((got == want) | (np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))) if O.is_float(dtype) else got == want)
  if O.is_float(dtype): bad |= np.signbit(got.astype(np.float64)) != np.signbit(want.astype(np.float64))
  assert not bad.any(), f"cast {dtype_name(src)} -> {dtype_name(dtype)}: {[(v, g, w) for v, g, w in zip(vals[bad].tolist(), got[bad].tolist(), want[bad].tolist())][:6]} (value, got, expected)"

def test_bitcast(device, src, dtype):
  """Bit patterns survive a same-size bitcast exactly (NaN patterns: the specials section checks those)."""
  n = 64
  raw = O.rng_for("bitcast", dtype_name(src)).integers(0, 256, n * src.itemsize, dtype=np.uint8)
  if O.is_float(src) or O.is_float(dtype):  # keep the words finite in every float view: clear the top exponent bit
    words = raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[src.itemsize]).copy()
    words &= ~np.array(1 << (8 * src.itemsize - 2), words.dtype)
    raw = words.view(np.uint8)
  vals = bits_to_values(raw, src)
  got = Tensor(vals, dtype=src).bitcast(dtype).numpy()
  got_bits = values_to_bits(got, dtype)
  assert got_bits == raw.tobytes(), f"bitcast {dtype_name(src)} -> {dtype_name(dtype)} changed bits: first difference at byte {first_diff(got_bits, raw.tobytes())}"

def bits_to_values(raw: np.ndarray, dt: DType) -> np.ndarray:
  if dt == dtypes.bfloat16: return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
  return raw.view(O.np_type(dt))
def values_to_bits(vals: np.ndarray, dt: DType) -> bytes:
  if dt == dtypes.bfloat16: return (np.asarray(vals, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
  return np.ascontiguousarray(vals, O.np_type(dt)).tobytes()
def first_diff(a: bytes, b: bytes) -> int: return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

@pytest.mark.covers("bitcast resize")
def test_bitcast_between_sizes(device, target: Target):
  """float32 -> uint8 -> float32 through Tensor.bitcast's shifts: four little-endian bytes per word and back."""
  target.require_dtype(dtypes.float32, dtypes.uint8)
  vals = np.array([[1.0, -2.5, 3.0e-5], [65504.0, -0.0, 7.25]], np.float32)
  as_bytes = Tensor(vals).bitcast(dtypes.uint8)
  assert as_bytes.shape == (2, 12)
  assert as_bytes.numpy().tobytes() == vals.tobytes(), "float32 -> uint8 bitcast bytes differ from the little-endian layout"
  back = Tensor(vals.view(np.uint8)).bitcast(dtypes.float32).numpy()
  assert back.tobytes() == vals.tobytes(), "uint8 -> float32 bitcast did not rebuild the words"

def test_int_wraparound(device, dtype):
  """Fixed-width integers wrap: max+1, min-1, products and shifts past the top bit, negation of the minimum."""
  lo, hi = O.int_range(dtype)
  npt = O.np_type(dtype)
  x = np.array([hi, lo, hi - 1, lo + 1, 0, 1, hi // 2 + 1], npt)
  t = Tensor(x, dtype=dtype)
  with np.errstate(all="ignore"):
    checks = {"x + 1": (t + 1, x + npt(1)), "x - 1": (t - 1, x - npt(1)), "x * 3": (t * 3, x * npt(3)), "x + x": (t + t, x + x),
              "-x": (-t, -x), "x << 1": (t << 1, np.left_shift(x, npt(1))), "x * x": (t * t, x * x)}
  for what, (got, want) in checks.items():
    assert_close(got.numpy(), want, dtype_name(dtype), f"{what} for {dtype_name(dtype)} {x.tolist()}")

def test_int_division_by_zero_is_defined(device, dtype):
  """Integer division and remainder by zero give 0: numpy's answer and tinycore's UOp semantics (x86 would trap)."""
  x = np.array([7, 0, 1, 100], O.np_type(dtype))
  t, z = Tensor(x, dtype=dtype), Tensor(np.zeros(4, O.np_type(dtype)), dtype=dtype)
  zeros = np.zeros(4, O.np_type(dtype))
  assert_close(t.div(z, rounding_mode="trunc").numpy(), zeros, dtype_name(dtype), "x // 0 (trunc)")
  assert_close((t // z).numpy(), zeros, dtype_name(dtype), "x // 0 (floor)")
  assert_close((t % z).numpy(), zeros, dtype_name(dtype), "x % 0")

def test_float_to_int_saturates(device, target: Target, src, dtype):
  """float -> int is defined past the integer's range: it saturates, and NaN gives 0 (tinycore's UOp semantics)."""
  lo, hi = O.int_range(dtype)
  vals = [1e30, -1e30] + ([math.inf, -math.inf, math.nan] if target.cap("inf_nan") else [])
  x = O.representable(np.array(vals), src)
  got = Tensor(x, dtype=src).cast(dtype).numpy()
  want = np.array([hi, lo] + ([hi, lo, 0] if target.cap("inf_nan") else []), dtype=O.np_type(dtype))
  assert_close(got, want, dtype_name(dtype), f"cast {dtype_name(src)} -> {dtype_name(dtype)} of {x.tolist()}")

# ***** IEEE special values *****

def _f(vals, dt): return Tensor(O.representable(np.array(vals, np.float64), dt), dtype=dt)
IEEE_CASES = {  # name: (tinycore on a dtype, numpy expectation in float64)
  "nan_propagates": (lambda dt: (_f([math.nan, 1.0], dt) + 1) * 2, np.array([math.nan, 4.0])),
  "inf_arithmetic": (lambda dt: _f([math.inf, -math.inf, math.inf], dt) + _f([1.0, -5.0, -math.inf], dt), np.array([math.inf, -math.inf, math.nan])),
  "maximum_propagates_nan": (lambda dt: _f([math.nan, 1.0, -math.inf], dt).maximum(_f([1.0, math.nan, 2.0], dt)), np.array([math.nan, math.nan, 2.0])),
  "compare_nan": (lambda dt: Tensor.stack(_f([math.nan], dt) < 1, _f([math.nan], dt) == _f([math.nan], dt), _f([math.nan], dt) != _f([math.nan], dt)),
                  np.array([[False], [False], [True]])),
  "negative_zero": (lambda dt: -_f([0.0, -0.0], dt), np.array([-0.0, 0.0])),
  "reciprocal_of_zeros": (lambda dt: _f([0.0, -0.0], dt).reciprocal(), np.array([math.inf, -math.inf])),
  "sqrt_of_negative": (lambda dt: _f([-1.0, -0.0, math.inf], dt).sqrt(), np.array([math.nan, -0.0, math.inf])),
  "log_of_zero": (lambda dt: _f([0.0, -1.0, math.inf], dt).log2(), np.array([-math.inf, math.nan, math.inf])),
  "exp_overflow": (lambda dt: _f([1e5, -1e5], dt).exp2(), np.array([math.inf, 0.0])),
  "isnan_isinf": (lambda dt: Tensor.stack(_f([math.nan, math.inf, 1.0], dt).isnan(), _f([math.nan, -math.inf, 1.0], dt).isinf()),
                  np.array([[True, False, False], [False, True, False]])),
  "sum_with_inf": (lambda dt: _f([1.0, math.inf, 2.0], dt).sum(), np.array(math.inf)),
  "max_reduce_nan": (lambda dt: _f([1.0, math.nan, 2.0], dt).max(), np.array(math.nan)),
}

def test_nan_inf(device, target: Target, case, dtype):
  """NaN, infinities and signed zeros behave as IEEE 754 says, in every declared float dtype."""
  target.require("inf_nan")
  fn, want = IEEE_CASES[case]
  got = fn(dtype).numpy()
  if want.dtype == np.bool_:
    assert np.array_equal(got, want), f"{case} in {dtype_name(dtype)}: got {got.tolist()}, expected {want.tolist()}"
    return
  g = got.astype(np.float64)
  same = (g == want) | (np.isnan(g) & np.isnan(want))
  same &= np.isnan(want) | (np.signbit(g) == np.signbit(want))
  assert same.all(), f"{case} in {dtype_name(dtype)}: got {g.tolist()}, expected {want.tolist()} (signs of zeros count)"

def test_subnormals(device, target: Target, case, dtype):
  """The smallest subnormal of each float survives a load, an add of zero and a store."""
  target.require("denormals")
  tiny = {dtypes.float16: 2.0 ** -24, dtypes.bfloat16: 2.0 ** -133, dtypes.float32: 2.0 ** -149, dtypes.float64: 5e-324}[dtype]
  got = (_f([tiny, -tiny, 3 * tiny], dtype) + 0.0).numpy().astype(np.float64)
  assert np.array_equal(got, np.array([tiny, -tiny, 3 * tiny])), f"{dtype_name(dtype)} subnormals came back as {got.tolist()}"

# ***** half and bfloat16 rounding *****

@pytest.mark.covers("float16 rounding")
def test_float16_rounding(device, target: Target):
  """float32 -> float16 rounds to nearest even, overflows to inf; float16 arithmetic rounds every result."""
  target.require_dtype(dtypes.float16, dtypes.float32)
  e = 2.0 ** -11
  x = np.array([1 + e, 1 + 3 * e, -(1 + e), 2049.0, 2051.0, 65519.0, 65520.0, 1e-8, 0.1], np.float32)
  want = O.representable(x, dtypes.float16)
  if not target.cap("inf_nan"): want, x = want[:6], x[:6]
  got = Tensor(x).cast(dtypes.float16).numpy()
  assert np.array_equal(got, want), f"float32 -> float16 of {x.tolist()}: got {got.tolist()}, expected {want.tolist()}"
  a, b = np.array([2048, 0.1, 1], np.float16), np.array([1, 0.2, e], np.float16)
  got = (Tensor(a) + Tensor(b)).numpy()
  assert np.array_equal(got, a + b), f"float16 {a.tolist()} + {b.tolist()}: got {got.tolist()}, expected {(a + b).tolist()}"

@pytest.mark.covers("bfloat16 rounding")
def test_bfloat16_rounding(device, target: Target):
  """float32 -> bfloat16 rounds to nearest even; bfloat16 math runs in float32 and rounds each result."""
  target.require_dtype(dtypes.bfloat16, dtypes.float32)
  e = 2.0 ** -8
  x = np.array([1 + e, 1 + 3 * e, -(1 + e), 257.0, 259.0, 3.0e38, 1e-30, 0.1], np.float32)
  got = Tensor(x).cast(dtypes.bfloat16).numpy()
  assert np.array_equal(got, O.bf16_round(x)), f"float32 -> bfloat16 of {x.tolist()}: got {got.tolist()}, expected {O.bf16_round(x).tolist()}"
  a, b = O.bf16_round(np.array([256.0, 0.1, 1.0], np.float32)), O.bf16_round(np.array([1.0, 0.2, 3 * e], np.float32))
  got = (Tensor(a, dtype=dtypes.bfloat16) + Tensor(b, dtype=dtypes.bfloat16)).numpy()
  assert np.array_equal(got, O.bf16_round(a + b)), f"bfloat16 {a.tolist()} + {b.tolist()}: got {got.tolist()}, expected {O.bf16_round(a + b).tolist()}"

# ***** undeclared dtypes *****

def test_undeclared_dtype_fails_cleanly(device, target: Target, dtype):
  """A dtype the renderer does not declare raises UnsupportedError naming the backend and the dtype, never a result."""
  if dtype is None: pytest.skip(f"{target.name} declares every dtype: there is no undeclared one to refuse")
  src = target.default_float or target.default_int or target.dtypes[0]
  attempts = {"cast into it": lambda: Tensor.ones(4, dtype=src).cast(dtype).numpy(),
              "arithmetic on uploaded data": lambda: (Tensor(np.zeros(4, O.np_type(dtype)), dtype=dtype) + 1).numpy()}
  for what, attempt in attempts.items():
    with pytest.raises(UnsupportedError) as info:
      attempt()
    msg = str(info.value).lower()
    assert target.name.lower() in msg, f"{what}: the error does not name the backend: {info.value}"
    assert dtype_name(dtype) in msg or dtype.name in msg, f"{what}: the error does not name the dtype {dtype_name(dtype)}: {info.value}"
