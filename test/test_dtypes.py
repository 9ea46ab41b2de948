"""Dtypes: promotion (tensor/tensor and tensor/Python scalar), casts with saturation and wraparound, bitcasts, NaN/inf/-0.0, half rounding."""
import math
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tinycore import Tensor, dtypes
from tinycore.dtype import least_upper_dtype, truncate

INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
ALL = [dtypes.bool] + INTS + FLOATS
NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16, dtypes.int32: np.int32,
      dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64, dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}
def bits_of(x, dt): return Tensor(x, dtype=dt).bitcast({2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dt.itemsize]).numpy()

# ***** promotion *****

PROMOTION = [  # the JAX/tinygrad lattice: ints meet floats at the float, signed meets unsigned one size up
  (dtypes.bool, dtypes.bool, dtypes.bool), (dtypes.bool, dtypes.int8, dtypes.int8), (dtypes.bool, dtypes.uint8, dtypes.uint8),
  (dtypes.int8, dtypes.uint8, dtypes.int16), (dtypes.int16, dtypes.uint16, dtypes.int32), (dtypes.int32, dtypes.uint32, dtypes.int64),
  (dtypes.uint8, dtypes.uint16, dtypes.uint16), (dtypes.int8, dtypes.int64, dtypes.int64), (dtypes.uint32, dtypes.uint64, dtypes.uint64),
  (dtypes.uint8, dtypes.int32, dtypes.int32), (dtypes.int32, dtypes.float16, dtypes.float16), (dtypes.int64, dtypes.bfloat16, dtypes.bfloat16),
  (dtypes.float16, dtypes.bfloat16, dtypes.float32), (dtypes.float16, dtypes.float32, dtypes.float32), (dtypes.float32, dtypes.float64, dtypes.float64),
  (dtypes.bool, dtypes.float32, dtypes.float32), (dtypes.uint8, dtypes.float16, dtypes.float16), (dtypes.bfloat16, dtypes.float64, dtypes.float64),
]

@pytest.mark.parametrize("a,b,out", PROMOTION, ids=lambda d: d.name)
def test_least_upper_dtype_table(a, b, out):
  assert least_upper_dtype(a, b) == out and least_upper_dtype(b, a) == out

@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL))
def test_least_upper_dtype_is_a_commutative_upper_bound(a, b):
  assert least_upper_dtype(a, a) == a
  assert least_upper_dtype(a, b) == least_upper_dtype(b, a)
  j = least_upper_dtype(a, b)
  assert least_upper_dtype(j, a) == j and least_upper_dtype(j, b) == j

@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL), st.sampled_from(ALL))
def test_least_upper_dtype_is_associative(a, b, c):
  assert least_upper_dtype(least_upper_dtype(a, b), c) == least_upper_dtype(a, least_upper_dtype(b, c)) == least_upper_dtype(a, b, c)

def test_least_upper_dtype_is_associative_with_64bit_ints():
  a, b, c = dtypes.int8, dtypes.uint64, dtypes.bfloat16
  assert least_upper_dtype(least_upper_dtype(a, b), c) == least_upper_dtype(a, least_upper_dtype(b, c))
  # every triple, not just a sample: the promotion order is a lattice
  assert all(least_upper_dtype(least_upper_dtype(x, y), z) == least_upper_dtype(x, least_upper_dtype(y, z)) for x in ALL for y in ALL for z in ALL)

@pytest.mark.parametrize("a,b,out", [(dtypes.int64, dtypes.uint64, dtypes.float32), (dtypes.int8, dtypes.uint64, dtypes.float32),
                                     (dtypes.uint64, dtypes.float16, dtypes.float32), (dtypes.uint64, dtypes.bfloat16, dtypes.float32),
                                     (dtypes.uint64, dtypes.float64, dtypes.float64), (dtypes.int64, dtypes.float16, dtypes.float16),
                                     (dtypes.uint64, dtypes.uint8, dtypes.uint64), (dtypes.uint64, dtypes.bool, dtypes.uint64)], ids=lambda d: d.name)
def test_64bit_int_promotion(a, b, out):
  # int64 v uint64 has no integer home: they meet at float32, the default float (as JAX does); uint64 goes there from the halves too
  assert least_upper_dtype(a, b) == out and least_upper_dtype(b, a) == out
  x, y = Tensor([1, 2], dtype=a) if a != dtypes.bool else Tensor([True, False]), Tensor([3, 4], dtype=b) if b != dtypes.bool else Tensor([True, True])
  assert (x + y).dtype == out

@pytest.mark.parametrize("a,b,out", [p for p in PROMOTION if p[0] != dtypes.bool or p[1] != dtypes.bool], ids=lambda d: d.name)
def test_tensor_ops_promote_and_compute_in_the_joined_dtype(a, b, out):
  x, y = Tensor([1, 2, 3], dtype=a) if a != dtypes.bool else Tensor([True, False, True]), Tensor([3, 0, 1], dtype=b) if b != dtypes.bool else Tensor([True, True, False])
  for r in (x + y, y * x, x.maximum(y), (x > y).where(x, y)): assert r.dtype == out
  assert (x < y).dtype == dtypes.bool and (x / y).dtype == (out if dtypes.is_float(out) else dtypes.float32)

def test_joined_dtype_holds_both_ranges():
  big_u, neg_i = Tensor([255, 200], dtype=dtypes.uint8), Tensor([-128, -1], dtype=dtypes.int8)
  assert (big_u + neg_i).dtype == dtypes.int16 and (big_u + neg_i).numpy().tolist() == [127, 199]
  u32, i32 = Tensor([4294967295], dtype=dtypes.uint32), Tensor([-1], dtype=dtypes.int32)
  assert (u32 + i32).dtype == dtypes.int64 and (u32 + i32).item() == 4294967294

SCALARS = [  # (tensor dtype, Python value, result dtype): a Python number never widens an int or float tensor of its own kind
  (dtypes.int8, 1, dtypes.int8), (dtypes.int8, 1.5, dtypes.float32), (dtypes.float16, 1.5, dtypes.float16), (dtypes.bfloat16, 2, dtypes.bfloat16),
  (dtypes.bool, 1, dtypes.int32), (dtypes.bool, 1.5, dtypes.float32), (dtypes.bool, True, dtypes.bool), (dtypes.uint8, True, dtypes.uint8),
  (dtypes.int32, np.float32(1.5), dtypes.float32), (dtypes.int64, np.int8(3), dtypes.int64), (dtypes.float64, 2, dtypes.float64), (dtypes.uint32, 7, dtypes.uint32),
]

@pytest.mark.parametrize("dt,v,out", SCALARS, ids=str)
def test_python_scalar_promotion(dt, v, out):
  x = Tensor([1, 0, 1], dtype=dt)
  for r in (x + v, v + x, x * v, v * x, x.maximum(v)): assert r.dtype == out, r
  np.testing.assert_allclose((x * v).numpy().astype(np.float64), np.array([1, 0, 1], np.float64) * float(v))

def test_true_division_and_scalars_outside_the_int_range():
  x = Tensor([-100, 3, 100], dtype=dtypes.int8)
  assert (x / 2).dtype == dtypes.float32 and (x / 2).numpy().tolist() == [-50.0, 1.5, 50.0]
  np.testing.assert_allclose((x / 300).numpy(), np.array([-100, 3, 100]) / 300, rtol=1e-6)  # 300 is not squeezed into int8 first
  np.testing.assert_allclose((600 / x).numpy(), 600 / np.array([-100, 3, 100]), rtol=1e-6)
  assert (x < 300).numpy().all() and (x > -300).numpy().all() and not (x == 300).numpy().any() and (x != 1000).numpy().all()
  assert not (Tensor([0, 5], dtype=dtypes.uint8) < -1).numpy().any() and (Tensor([0, 5], dtype=dtypes.uint8) >= -1).numpy().all()
  assert x.maximum(-1000).numpy().tolist() == [-100, 3, 100] and x.minimum(1000).numpy().tolist() == [-100, 3, 100]
  assert x.clip(-1000, 50).numpy().tolist() == [-100, 3, 50]
  assert (Tensor([100], dtype=dtypes.int8) + 100).numpy().tolist() == [-56]  # arithmetic stays in int8 and wraps

def test_int_pow_and_bool_pow():
  assert (Tensor([True, False]) ** 2).dtype == dtypes.int32 and (Tensor([True, False]) ** 2).numpy().tolist() == [1, 0]
  assert (Tensor([3, -3]) ** 19).numpy().tolist() == [3 ** 19, -3 ** 19]
  assert (Tensor([1, -1, 2, -1]) ** Tensor([-3, -3, -1, -2])).numpy().tolist() == [1, -1, 0, 1]  # 1/x^n truncated toward zero
  with pytest.raises(RuntimeError, match="negative power"): Tensor([1, -1, 2]) ** -1   # PyTorch's and tinygrad's refusal
  assert (Tensor([2, 3]) ** 0.5).dtype == dtypes.float32 and (2 ** Tensor([1, 3])).numpy().tolist() == [2, 8]

REDUCE_DTYPES = [("sum", dtypes.int8, dtypes.int32), ("sum", dtypes.uint8, dtypes.uint32), ("sum", dtypes.bool, dtypes.int32), ("sum", dtypes.int64, dtypes.int64),
                 ("sum", dtypes.float16, dtypes.float16), ("prod", dtypes.int16, dtypes.int32), ("mean", dtypes.int32, dtypes.float32),
                 ("mean", dtypes.bfloat16, dtypes.bfloat16), ("max", dtypes.uint16, dtypes.uint16), ("min", dtypes.int8, dtypes.int8),
                 ("argmax", dtypes.float64, dtypes.int32), ("cumsum", dtypes.int16, dtypes.int32), ("var", dtypes.int32, dtypes.float32)]

@pytest.mark.parametrize("op,dt,out", REDUCE_DTYPES, ids=str)
def test_reduction_result_dtypes(op, dt, out):
  x = Tensor([[1, 2], [3, 4]], dtype=dt) if dt != dtypes.bool else Tensor([[True, False], [True, True]])
  r = getattr(x, op)()
  assert r.dtype == out
  xs = x.numpy().astype(np.float64)
  ref = np.cumsum(xs, 0) if op == "cumsum" else np.var(xs, ddof=1) if op == "var" else getattr(np, op)(xs)
  np.testing.assert_allclose(r.numpy().astype(np.float64), ref, rtol=1e-2)
  assert Tensor([200, 100], dtype=dtypes.uint8).sum().item() == 300 and Tensor([100, 100], dtype=dtypes.int8).sum(dtype=dtypes.int8).item() == -56

# ***** casts *****

def saturate(x: np.ndarray, dt) -> np.ndarray:
  """The reference float->int conversion: truncate, clamp to the dtype's range, NaN -> 0."""
  info = np.iinfo(NP[dt])
  t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
  out = np.zeros(x.shape, NP[dt])
  inside = (t > float(info.min)) & (t < float(info.max))
  out[inside] = t[inside].astype(NP[dt])
  out[t >= float(info.max)] = info.max
  out[t <= float(info.min)] = info.min
  return out

SPECIAL = np.array([1e30, -1e30, np.nan, np.inf, -np.inf, 3.7, -3.7, 127.9, 128.5, -128.9, 255.5, 256.0, -0.5, 0.0, 65535.9, -32769.0, 4294967296.0, 3e9], np.float32)

@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_float_to_int_casts_saturate(dt):
  np.testing.assert_array_equal(Tensor(SPECIAL).cast(dt).numpy(), saturate(SPECIAL, dt))
  np.testing.assert_array_equal(Tensor(SPECIAL, dtype=dtypes.float64).cast(dt).numpy(), saturate(SPECIAL, dt))

@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-2.0 ** 40, 2.0 ** 40, width=32), min_size=1, max_size=8), st.sampled_from(INTS))
def test_random_float_to_int_casts_saturate(vals, dt):
  x = np.array(vals, np.float32)
  np.testing.assert_array_equal(Tensor(x).cast(dt).numpy(), saturate(x, dt))

@pytest.mark.parametrize("src", [dtypes.float16, dtypes.bfloat16])
def test_half_to_int_casts(src):
  x = Tensor([65504.0, -65504.0, 2.5, -2.5, 300.0, np.inf, np.nan], dtype=dtypes.float32).cast(src)
  assert x.cast(dtypes.int8).numpy().tolist() == [127, -128, 2, -2, 127, 127, 0]
  assert x.cast(dtypes.uint8).numpy().tolist() == [255, 0, 2, 0, 255, 255, 0]

@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(-2 ** 40, 2 ** 40), min_size=1, max_size=8), st.sampled_from(INTS[:6]))
def test_int_to_int_casts_wrap(vals, dt):
  x = np.array(vals, np.int64)
  np.testing.assert_array_equal(Tensor(x).cast(dt).numpy(), x.astype(NP[dt]))

def test_int_casts_and_int_to_float_rounding():
  assert Tensor([300, -1, 70000]).cast(dtypes.uint8).numpy().tolist() == [44, 255, 112]
  assert Tensor([70000, -70000]).cast(dtypes.int16).numpy().tolist() == [4464, -4464]
  assert Tensor([4294967295], dtype=dtypes.uint32).cast(dtypes.int32).item() == -1
  assert Tensor([2 ** 40 + 5], dtype=dtypes.int64).cast(dtypes.int32).item() == 5
  assert Tensor([2 ** 24 + 1, 2 ** 24 + 3]).cast(dtypes.float32).numpy().tolist() == [2.0 ** 24, 2.0 ** 24 + 4]  # ties to even
  assert Tensor([2 ** 63 - 1], dtype=dtypes.int64).cast(dtypes.float32).item() == 2.0 ** 63
  assert Tensor([-1], dtype=dtypes.int8).cast(dtypes.uint64).item() == 2 ** 64 - 1

def test_bool_casts():
  f = Tensor([0.0, -0.0, 0.5, np.nan, -np.inf])
  assert f.cast(dtypes.bool).numpy().tolist() == [False, False, True, True, True]
  assert Tensor([0, 3, -1]).bool().numpy().tolist() == [False, True, True]
  assert Tensor([True, False]).float().numpy().tolist() == [1.0, 0.0] and Tensor([True, False]).int().dtype == dtypes.int32

def test_float_narrowing_rounds_to_nearest_even():
  h = Tensor([2049.0, 2051.0, 65519.0, 65520.0, 1e-8, 3e-8, 6e-8, -1e6]).cast(dtypes.float16).numpy()
  assert h.dtype == np.float16
  np.testing.assert_array_equal(h.astype(np.float64), [2048.0, 2052.0, 65504.0, np.inf, 0.0, 2 ** -24, 2 ** -24, -np.inf])
  one = 2.0 ** -8
  b = Tensor([1 + one, 1 + 3 * one, 1 + one + 2 ** -20, 3.39e38, np.nan, -np.inf, 2.0 ** -130, 3.4e38]).cast(dtypes.bfloat16).numpy()
  np.testing.assert_array_equal(b[[0, 1, 2, 5, 7]], [1.0, 1 + 2 * 2 * one, 1 + 2 * one, -np.inf, np.inf])  # ties go to the even mantissa
  assert b[3] == np.float32(3.3895313892515355e38) and np.isnan(b[4]) and b[6] == np.float32(2.0 ** -130)
  assert Tensor([1e40], dtype=dtypes.float64).cast(dtypes.float32).item() == np.inf
  np.testing.assert_array_equal(Tensor([0.1], dtype=dtypes.float64).cast(dtypes.float32).numpy(), np.float32([0.1]))

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_narrowing_casts_and_constants_round_once(device):
  """A cast rounds the exact value once, from any source: never through float32 (float64 -> half, bfloat16) or float64
  (64-bit ints -> float32, bfloat16), in kernels, in constant folding (truncate) and in uploads."""
  x = 1 + 2 ** -8 + 2 ** -30   # past bfloat16's tie at 1 + 2**-8 by less than a float32 holds
  assert Tensor([x], dtype=dtypes.float64, device=device).cast(dtypes.bfloat16).item() == 1 + 2 ** -7 == truncate(dtypes.bfloat16, x)
  assert Tensor([x], dtype=dtypes.bfloat16, device=device).item() == 1 + 2 ** -7
  assert Tensor([1 + 2 ** -11 + 2 ** -40], dtype=dtypes.float64, device=device).cast(dtypes.float16).item() == 1 + 2 ** -10
  big = 2 ** 60 + 2 ** 36 + 1   # past float32's tie by less than a float64 holds
  assert Tensor([big], dtype=dtypes.int64, device=device).cast(dtypes.float32).item() == 2.0 ** 60 + 2 ** 37 == truncate(dtypes.float32, big)
  big = -(2 ** 62 + 2 ** 54 + 1)   # past bfloat16's tie by less than float64 or float32 holds
  assert Tensor([big], dtype=dtypes.int64, device=device).cast(dtypes.bfloat16).item() == -(2.0 ** 62 + 2 ** 55) == truncate(dtypes.bfloat16, big)
  assert Tensor([2 ** 30 + 2 ** 22 + 1], dtype=dtypes.int32, device=device).cast(dtypes.bfloat16).item() == 2.0 ** 30 + 2 ** 23
  bits = [0x7F81, 0xFFA0, 0x7FC1]   # bfloat16 NaNs (two signalling) keep their bits through a bitcast there and back
  assert Tensor(bits, dtype=dtypes.uint16, device=device).bitcast(dtypes.bfloat16).bitcast(dtypes.uint16).tolist() == bits

# ***** bitcasts *****

def test_bitcast_same_size():
  assert Tensor([1.0, -0.0]).bitcast(dtypes.int32).numpy().tolist() == [0x3F800000, -2 ** 31]
  assert np.isnan(Tensor([0x7FC00000], dtype=dtypes.uint32).bitcast(dtypes.float32).item())
  assert bits_of([1.0, -2.0], dtypes.float16).tolist() == [0x3C00, 0xC000]
  assert bits_of([1.0, 3.140625], dtypes.bfloat16).tolist() == [0x3F80, 0x4049]
  assert Tensor([0x4049], dtype=dtypes.uint16).bitcast(dtypes.bfloat16).item() == 3.140625
  assert Tensor([-1, -128], dtype=dtypes.int8).bitcast(dtypes.uint8).numpy().tolist() == [255, 128]
  assert Tensor([1.5], dtype=dtypes.float64).bitcast(dtypes.int64).item() == 0x3FF8000000000000
  t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).T  # a non-contiguous view
  np.testing.assert_array_equal(t.bitcast(dtypes.uint32).numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).T.view(np.uint32))

def test_bitcast_between_sizes_is_little_endian():
  assert Tensor([1.0]).bitcast(dtypes.uint8).numpy().tolist() == [0, 0, 128, 63]
  assert Tensor([0, 0, 128, 63, 0, 0, 0, 64], dtype=dtypes.uint8).bitcast(dtypes.float32).numpy().tolist() == [1.0, 2.0]
  x = np.array([[0x12345678, -2]], np.int32)
  np.testing.assert_array_equal(Tensor(x).bitcast(dtypes.int16).numpy(), x.view(np.int16))
  np.testing.assert_array_equal(Tensor(x.view(np.int16)).bitcast(dtypes.int32).numpy(), x)
  np.testing.assert_array_equal(Tensor(np.array([1.5, -3.25], np.float16)).bitcast(dtypes.uint8).numpy(), np.array([1.5, -3.25], np.float16).view(np.uint8))
  with pytest.raises(RuntimeError, match="divide"): Tensor([1, 2, 3], dtype=dtypes.uint8).bitcast(dtypes.float32)

# ***** integer arithmetic *****

def test_int_wraparound():
  assert (Tensor([127], dtype=dtypes.int8) + 1).item() == -128 and (Tensor([0], dtype=dtypes.uint8) - 1).item() == 255
  assert (Tensor([2 ** 31 - 1]) + 1).item() == -2 ** 31 and (Tensor([65536]) * 65536).item() == 0
  assert (Tensor([2 ** 63 - 1], dtype=dtypes.int64) + 1).item() == -2 ** 63
  assert (Tensor([4294967295], dtype=dtypes.uint32) * 2).item() == 4294967294
  assert (-Tensor([-128], dtype=dtypes.int8)).item() == -128 and Tensor([-128], dtype=dtypes.int8).abs().item() == -128
  assert (Tensor([200], dtype=dtypes.uint8) << 1).item() == 144 and (Tensor([-8], dtype=dtypes.int8) >> 1).item() == -4
  assert (Tensor([1, 2]) << Tensor([3, 4])).numpy().tolist() == [8, 32] and (1 << Tensor([2, 5])).numpy().tolist() == [4, 32]
  assert (~Tensor([0, -1])).numpy().tolist() == [-1, 0] and (~Tensor([0, 255], dtype=dtypes.uint8)).numpy().tolist() == [255, 0]
  assert (Tensor([6, 3]) & 5).numpy().tolist() == [4, 1] and (5 | Tensor([2])).item() == 7 and Tensor([6]).bitwise_xor(3).item() == 5

def test_int_division_and_remainder():
  a, b = Tensor([-7, 7, -7, 7, 6]), Tensor([2, 2, -2, -2, 3])
  assert (a // b).numpy().tolist() == [-4, 3, 3, -4, 2]  # floor, like Python
  assert (a % b).numpy().tolist() == [1, 1, -1, -1, 0]
  assert a.div(b, rounding_mode="trunc").numpy().tolist() == [-3, 3, 3, -3, 2] and a.idiv(b).numpy().tolist() == [-3, 3, 3, -3, 2]
  assert a.fmod(b).numpy().tolist() == [-1, 1, -1, 1, 0]
  assert (a / b).numpy().tolist() == [-3.5, 3.5, 3.5, -3.5, 2.0]
  assert (Tensor([-7.5, 7.5]) // 2).numpy().tolist() == [-4.0, 3.0] and (Tensor([-7.5, 7.5]) % -2).numpy().tolist() == [-1.5, -0.5]
  with pytest.raises(RuntimeError, match="rounding_mode"): a.div(b, rounding_mode="ceil")
  with pytest.raises(TypeError, match="bitwise"): Tensor([1.0]) & 1

# ***** NaN, inf and signed zero *****

def test_nan_propagation():
  x = Tensor([1.0, np.nan, -2.0])
  assert np.isnan(x.max().item()) and np.isnan(x.min().item()) and np.isnan(x.sum().item())
  assert np.isnan(x.maximum(0).numpy()[1]) and np.isnan(x.minimum(0).numpy()[1]) and np.isnan(x.clip(-1, 1).numpy()[1])
  assert np.isnan(x.relu().numpy()[1]) and np.isnan(x.sign().numpy()[1]) and np.isnan(x.abs().numpy()[1])
  assert x.isnan().numpy().tolist() == [False, True, False] and x.isfinite().numpy().tolist() == [True, False, True]
  for r in (x < 1, x <= 1, x > 1, x >= 1, x == x): assert r.numpy()[1] == False  # noqa: E712
  assert (x != x).numpy().tolist() == [False, True, False]
  assert x.argmax().item() == 1 and x.argmin().item() == 1

def test_infinities_and_signed_zero():
  z = Tensor([0.0])
  assert bits_of((-z).numpy(), dtypes.float32)[0] == 0x80000000 and (1 / -z).item() == -np.inf
  assert bits_of(Tensor([-0.0]).abs().numpy(), dtypes.float32)[0] == 0 and Tensor([-0.0]).sign().item() == 0
  assert Tensor([1.0, -1.0]).copysign(Tensor([-0.0, 0.0])).numpy().tolist() == [-1.0, 1.0]
  inf = Tensor([np.inf, -np.inf, 0.0])
  assert inf.isinf().numpy().tolist() == [True, True, False] and inf.isinf(detect_negative=False).numpy().tolist() == [True, False, False]
  assert inf.exp().numpy().tolist() == [np.inf, 0.0, 1.0] and np.isnan((inf * 0).numpy()[:2]).all()
  assert Tensor([0.0, -1.0]).log().numpy()[0] == -np.inf and np.isnan(Tensor([-1.0]).log().item()) and np.isnan(Tensor([-1.0]).sqrt().item())
  assert Tensor([-np.inf, 0.0]).softmax().numpy().tolist() == [0.0, 1.0] and Tensor([np.inf, 1.0]).logsumexp().item() == np.inf
  assert Tensor([-np.inf, -np.inf]).logsumexp().item() == -np.inf and Tensor([np.inf, -np.inf]).sigmoid().numpy().tolist() == [1.0, 0.0]
  assert Tensor([1e30, -1e30]).tanh().numpy().tolist() == [1.0, -1.0]
  np.testing.assert_array_equal(Tensor([np.inf, -np.inf]).atan().numpy(), np.float32([np.pi / 2, -np.pi / 2]))

def test_rounding_functions():
  x = Tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.2, 2.7])
  assert x.round().numpy().tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, -0.0, 3.0]  # half to even
  assert x.floor().numpy().tolist() == np.floor(x.numpy()).tolist() and x.ceil().numpy().tolist() == np.ceil(x.numpy()).tolist()
  assert x.trunc().numpy().tolist() == np.trunc(x.numpy()).tolist()
  assert Tensor([3, -3]).round().dtype == dtypes.int32 and Tensor([3, -3]).floor().numpy().tolist() == [3, -3]

# ***** half precision arithmetic *****

def round_bf16(x: np.ndarray) -> np.ndarray:
  """float32 -> nearest bfloat16 (ties to even), restated from the IEEE definition for the reference."""
  b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
  b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
  return b.astype(np.uint32).view(np.float32)

def test_half_ops_keep_their_dtype_and_compute_in_float32():
  h = Tensor([1.5, -2.25, 3.0], dtype=dtypes.float16)
  for r in (h ** 2.5, 2.5 ** h, h ** Tensor([2.0], dtype=dtypes.float16), h % 0.7, h // 0.7, 2 ** h): assert r.dtype == dtypes.float16, r
  x = np.array([300.0, 7.0, -5.5], np.float16)
  np.testing.assert_allclose((Tensor(x) % np.float16(0.3)).numpy().astype(np.float64), np.mod(x.astype(np.float32), np.float32(np.float16(0.3))), atol=1e-3)
  np.testing.assert_allclose((Tensor([1.5, 2.0], dtype=dtypes.bfloat16) ** 2.5).numpy(), np.float32([1.5 ** 2.5, 2 ** 2.5]), rtol=2 ** -8)
  assert (2 ** Tensor([True, False])).numpy().tolist() == [2, 1]

def test_float16_arithmetic_rounds_like_numpy():
  rng = np.random.default_rng(1)
  a, b = rng.uniform(-100, 100, 64).astype(np.float16), rng.uniform(0.5, 4, 64).astype(np.float16)
  ta, tb = Tensor(a), Tensor(b)
  np.testing.assert_array_equal((ta * tb).numpy(), a * b)
  np.testing.assert_array_equal((ta + tb).numpy(), a + b)
  np.testing.assert_allclose((ta / tb).numpy().astype(np.float64), (a / b).astype(np.float64), rtol=2 ** -10)
  assert (ta * tb).dtype == dtypes.float16 and (ta + 1.5).dtype == dtypes.float16
  assert (Tensor([60000.0], dtype=dtypes.float16) * 2).item() == np.inf

def test_bfloat16_arithmetic_rounds_every_result():
  rng = np.random.default_rng(2)
  a, b = round_bf16(rng.uniform(-10, 10, 32).astype(np.float32)), round_bf16(rng.uniform(-10, 10, 32).astype(np.float32))
  ta, tb = Tensor(a, dtype=dtypes.bfloat16), Tensor(b, dtype=dtypes.bfloat16)
  np.testing.assert_array_equal(ta.numpy(), a)
  np.testing.assert_array_equal((ta * tb).numpy(), round_bf16(a * b))
  np.testing.assert_array_equal((ta + tb).numpy(), round_bf16(a + b))
  assert ((ta * tb).numpy().view(np.uint32) & 0xFFFF == 0).all()  # every value is a bfloat16
  assert (ta.sum()).dtype == dtypes.bfloat16 and ta.sum().item() == round_bf16(np.array([a.astype(np.float64).sum()]))[0]

def test_dtype_min_and_max_are_the_range_tinygrad_names():
  assert (dtypes.int8.min, dtypes.int8.max, dtypes.uint16.max, dtypes.int.max, dtypes.uint64.max) == (-128, 127, 65535, 2**31 - 1, 2**64 - 1)
  assert (dtypes.float16.min, dtypes.float32.max, dtypes.bool.min, dtypes.bool.max) == (-math.inf, math.inf, False, True)
  assert dtypes.int32.min == dtypes.min(dtypes.int32)   # the older spelling too

@pytest.mark.parametrize("dt,ulp", [(dtypes.float16, 2 ** -10), (dtypes.bfloat16, 2 ** -7)], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_sums_of_half_products_take_each_product_exactly(device, dt, ulp):
  """A half matmul, convolution or gradient sums exact products in float32, as a tensor core does, on every device and on
  or off the tensor core: (1+ulp)^2 = 1 + 2ulp + ulp^2, whose ulp^2 a product rounded to 16 bits would lose."""
  if device == "CPU": pytest.importorskip("tinygrad_cpu")
  a = Tensor.full((4, 8), 1 + ulp, dtype=dt, device=device)
  want = 8 * (1 + 2 * ulp + ulp * ulp)   # exact in float32
  assert (a @ a.T).dtype == dt and (a.matmul(a.T, dtype=dtypes.float32).numpy() == np.float32(want)).all()
  w = Tensor.full((2, 2, 2, 2), 1 + ulp, dtype=dt, device=device)   # 8 taps: channels x 2 x 2
  assert (a.reshape(1, 2, 4, 4).conv2d(w, dtype=dtypes.float32).numpy() == np.float32(want)).all()

def test_dtype_hash_and_equality():
  """DTypes are interned: equal dtypes (a pickled or copied one too) are one object, so they hash alike, and dtypes differing
  in any field are unequal."""
  import pickle, copy, dataclasses
  from tinycore.dtype import DType, PtrDType
  f = dtypes.float32
  assert pickle.loads(pickle.dumps(f)) is f and copy.copy(f) is f and copy.deepcopy(f.ptr(8)) is f.ptr(8)
  assert DType(f.priority, f.itemsize, f.name, f.fmt) is f and DType(f.priority, f.itemsize, f.name, fmt=f.fmt) is f
  assert f.ptr(16) is f.ptr(16) and f.vec(4) is f.vec(4) and dataclasses.replace(f.ptr(16), size=32) is f.ptr(32)
  assert pickle.loads(pickle.dumps(f.ptr(16, "local"))) is f.ptr(16, "local")
  # PtrDType's fields start with DType's: the same leading values make a different dtype of each class
  assert PtrDType(f.priority, f.itemsize, f.name, f.fmt) is not f and PtrDType(f.priority, f.itemsize, f.name, f.fmt) != f
  assert pickle.loads(pickle.dumps(f)) == f and {f: 1}[pickle.loads(pickle.dumps(f))] == 1
  assert f.ptr(16) == f.ptr(16) and hash(f.ptr(16)) == hash(f.ptr(16)) and f.ptr(16) != f.ptr(16, "local")
  assert f.ptr(16) != f.ptr(32) and f != f.ptr(16) and f.vec(4) != f and f.vec(4) == f.vec(4) and f != dtypes.int32
  assert (f == "float") is False and f != None  # noqa: E711

@given(st.floats(allow_nan=True, allow_infinity=True, width=64))
def test_truncate_to_float32_and_float16_matches_numpy(x):
  """truncate's struct round trip rounds like numpy's conversion, overflow to inf included."""
  for dt, np_dt in ((dtypes.float32, np.float32), (dtypes.float16, np.float16)):
    with np.errstate(over="ignore"): want = np_dt(x)
    got = truncate(dt, x)
    assert (np.isnan(want) and math.isnan(got)) or (got == want and math.copysign(1, got) == math.copysign(1, want))
