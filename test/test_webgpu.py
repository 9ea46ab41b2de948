"""Tests of the WEBGPU backend: WGSL rendering without a device, and kernels on a WebGPU adapter checked against numpy."""
import json, math, os, re, subprocess, sys, threading
from pathlib import Path
import numpy as np
import pytest

wgpu = pytest.importorskip("wgpu", reason="the WEBGPU backend needs the wgpu package (pip install -e backends/tinygrad-webgpu)")
from tinycore import Tensor, dtypes, Context
from tinycore.dtype import to_np_dtype
from tinycore.codegen import get_program
from tinycore.uop import UOp, Ops
from tinycore.runtime.device import Device, Buffer
from tinycore.runtime.errors import CompileError, DeviceError, UnsupportedError
from tinygrad_webgpu.renderer import WGSLRenderer
from tinygrad_webgpu import driver as webgpu_driver

ROOT = Path(__file__).resolve().parents[1]

def require_adapter() -> None:
  """Skip without an adapter, except in CI (CI=true), where a missing adapter is a failure: CI installs lavapipe."""
  if webgpu_driver.request_adapter() is not None: return
  why = "no WebGPU adapter found (install mesa-vulkan-drivers: see .ci/install-webgpu.sh)"
  if os.environ.get("CI"): pytest.fail(f"CI is set but {why}")
  pytest.skip(why)

@pytest.fixture(scope="module")
def gpu():
  require_adapter()
  return Device["WEBGPU"]

def T(x, dtype=None) -> Tensor: return Tensor(np.asarray(x, dtype), device="WEBGPU")
def ast_of(t: Tensor):
  """The AST of the last kernel that realizes t (scheduled on PYTHON: rendering needs no WebGPU device)."""
  return t.schedule()[-1].ast
def P(x, dtype=np.float32) -> Tensor: return Tensor(np.asarray(x, dtype), device="PYTHON")
def nan_equal(a, b, **kw): np.testing.assert_allclose(a, b, equal_nan=True, **kw)

F = np.array([-3.5, -1.0, -0.0, 0.0, 0.25, 1.0, 2.5, 7.0, 100.0], np.float32)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, 1e-30], np.float32)

# ***** the renderer alone *****

def test_without_a_device_the_ci_rule_holds(monkeypatch):
  monkeypatch.setattr(webgpu_driver, "request_adapter", lambda: None)
  monkeypatch.setenv("CI", "true")
  with pytest.raises(pytest.fail.Exception, match="CI is set"): require_adapter()
  monkeypatch.delenv("CI")
  with pytest.raises(pytest.skip.Exception, match="no WebGPU adapter"): require_adapter()

def test_render_needs_no_device():
  src = get_program(ast_of(P([1.0, 2.0]) * 3 + P([4.0, 5.0])), WGSLRenderer()).src
  assert "@compute @workgroup_size(" in src and "var<storage, read_write> data0: array<f32>" in src
  assert "data2" in src and "data3" not in src

def test_renderer_describes_target():
  d = WGSLRenderer().describe()
  assert d["device"] == "WEBGPU" and d["global_dims"] == 3 and d["max_buffers"] == 8
  assert d["supported_dtypes"] == ["bfloat16", "bool", "char", "float", "half", "int", "long", "short", "uchar", "uint", "ulong", "ushort"]
  assert WGSLRenderer.index_bits == 32 and WGSLRenderer.alu_dtypes == {dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32}
  assert d["has_local"] and d["local_max"] == (256, 256, 64)

def test_unsupported_dtypes_raise():
  with pytest.raises(UnsupportedError, match="WEBGPU.*double"): get_program(ast_of(P([1.0, 2.0]).cast(dtypes.float64)), WGSLRenderer())

def test_int64_is_two_u32_words():
  """64-bit integers are emulated by the core from 32-bit halves: the shader has no 64-bit type and binds u32 arrays."""
  src = get_program(ast_of(P([1, 2], np.int64) * 3 + (P([5, 6], np.int64) << 40)), WGSLRenderer()).src
  assert "array<u32>" in src and "i64" not in src and "u64" not in src

def test_too_many_buffers_for_webgpu_raises():
  xs = [P([float(i)]) for i in range(9)]
  with pytest.raises(UnsupportedError, match="WEBGPU.*10 storage buffers.*limit is 8"): get_program(ast_of(sum(xs[1:], xs[0])), WGSLRenderer())

def test_only_needed_helpers_are_emitted():
  plain = get_program(ast_of(P([1.0]) + 1), WGSLRenderer()).src
  assert "fn is_nan" not in plain and "fn ieee_" not in plain
  maxed = get_program(ast_of(P([1.0]).maximum(P([2.0]))), WGSLRenderer()).src
  assert "fn ieee_max" in maxed and "fn is_nan" in maxed and "fn ieee_exp2" not in maxed

def test_constants_are_exact():
  src = get_program(ast_of(P([1.0]) * 0.1 + P([1.0]) * float("inf") - 2**31), WGSLRenderer()).src
  assert "0x1.99999a0000000p-4f" in src and "f32_bits(0x7f800000u)" in src

def test_non_finite_constants_are_not_const_expressions():
  """Tint (Chromium) refuses a const-expression that is inf or NaN: they come from a function call, helpers included."""
  x = P([1.0, 0.0, -1.0])
  h, bf = x.cast(dtypes.float16), x.cast(dtypes.bfloat16)
  for t in (x * float("inf") - float("nan"), x.log2(), x.sin(), x.sqrt(), x.exp2(), x / x, x.maximum(x.flip(0)),
            h / h.flip(0) + h.sqrt() * float("inf"), h.reciprocal().cast(dtypes.bfloat16), bf / bf.flip(0) - float("inf")):
    src = get_program(ast_of(t), WGSLRenderer()).src
    for m in re.finditer(r"bitcast<f32>\((0x[0-9a-f]+)u\)", src):
      assert (int(m.group(1), 16) & 0x7f800000) != 0x7f800000, f"non-finite const-expression {m.group(0)} in\n{src}"
  assert "f32_bits(0x7f800000u)" in get_program(ast_of(x * float("inf")), WGSLRenderer()).src

def test_float_division_never_renders_a_bare_division_by_a_special_constant():
  src = get_program(ast_of(P([1.0, 0.0]) / 0.0), WGSLRenderer()).src
  assert "ieee_div(" in src and "/ 0.0f" not in src
  assert "mul_zero(" in get_program(ast_of(P([1.0, 0.0]) * 0.0), WGSLRenderer()).src

# ***** on the device: ops against numpy *****

UNARY = [("neg", lambda t: -t, np.negative), ("exp", Tensor.exp, np.exp), ("log", Tensor.log, np.log), ("sqrt", Tensor.sqrt, np.sqrt),
         ("sin", Tensor.sin, np.sin), ("cos", Tensor.cos, np.cos), ("relu", Tensor.relu, lambda x: np.maximum(x, 0)),
         ("sigmoid", Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x))), ("tanh", Tensor.tanh, np.tanh), ("abs", Tensor.abs, np.abs),
         ("reciprocal", Tensor.reciprocal, np.reciprocal), ("trunc", Tensor.trunc, np.trunc)]

@pytest.mark.parametrize("name,op,ref", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float(gpu, name, op, ref):
  x = F[F > 0] if name in ("log", "sqrt") else F
  with np.errstate(all="ignore"): nan_equal(op(T(x)).numpy(), ref(x), rtol=2e-5, atol=1e-6)

def test_sin_of_large_arguments(gpu):
  x = np.array([10.0, -100.0, 1000.5, 12345.0, 3.14159265, -1e4], np.float32)
  np.testing.assert_allclose(T(x).sin().numpy(), np.sin(x.astype(np.float64)), atol=2e-5)

def test_sin_of_huge_arguments(gpu):
  """SIN reduces every finite argument exactly (the shared decomposition): WGSL's sin() and the old Cody-Waite helper gave
  -1 for 1e30 and 3.4e38, and NaN inside tan on OpenGL."""
  x = np.array([16777216.0, -16777215.0, 1.8693298e15, 8.511803e17, 1e30, -1e30, 4.670642e31, 3.4028235e38], np.float32)
  want = np.sin(x.astype(np.float64))
  got = T(x).sin().numpy()
  assert np.all(np.abs(got - want) <= 4 * np.spacing(np.abs(want).astype(np.float32)) + 2.0**-22), (got, want)
  assert re.search(r"\bsin\(", get_program(ast_of(P([1.0]).sin()), WGSLRenderer()).src) is None   # no WGSL sin()

BINARY = [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide), ("maximum", np.maximum),
          ("minimum", np.minimum), ("lt", np.less), ("gt", np.greater), ("eq", np.equal), ("ne", np.not_equal), ("le", np.less_equal)]
OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
       "maximum": Tensor.maximum, "minimum": Tensor.minimum, "lt": lambda a, b: a < b, "gt": lambda a, b: a > b,
       "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "le": lambda a, b: a <= b}

# `le` is left out: the core builds a <= b as not(a > b), which is True for NaN on every device (PYTHON included)
@pytest.mark.parametrize("name,ref", [b for b in BINARY if b[0] != "le"], ids=[b[0] for b in BINARY if b[0] != "le"])
def test_binary_float_with_nan_and_inf(gpu, name, ref):
  a, b = np.meshgrid(SPECIAL, SPECIAL)
  with np.errstate(all="ignore"): want = ref(a, b)
  got = OPS[name](T(a), T(b)).numpy()
  assert got.dtype == want.dtype
  nan_equal(got, want, rtol=1e-6)

@pytest.mark.parametrize("name,ref", [b for b in BINARY if b[0] != "div"], ids=[b[0] for b in BINARY if b[0] != "div"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
def test_binary_int(gpu, name, ref, dtype):
  rng = np.random.default_rng(1)
  info = np.iinfo(dtype)
  a = np.concatenate([rng.integers(info.min, info.max, 40, dtype=dtype, endpoint=True), np.array([info.min, info.max, 0, 1], dtype)])
  b = np.concatenate([rng.integers(info.min, info.max, 40, dtype=dtype, endpoint=True), np.array([info.max, 1, info.max, info.min], dtype)])
  with np.errstate(all="ignore"): np.testing.assert_array_equal(OPS[name](T(a), T(b)).numpy(), ref(a, b))

def test_int_division_truncates_and_zero_divisor_gives_zero(gpu):
  a = np.array([7, -7, 7, -7, 5, -2**31, -2**31, 9], np.int32)
  b = np.array([2, 2, -2, -2, 0, -1, 1, 0], np.int32)
  q, r = (T(a) // T(b)).numpy(), (T(a) % T(b)).numpy()
  # the same answers as the PYTHON device, the reference semantics (including x // 0 == 0 and INT_MIN // -1 wrapping)
  np.testing.assert_array_equal(q, (P(a, np.int32) // P(b, np.int32)).numpy())
  np.testing.assert_array_equal(r, (P(a, np.int32) % P(b, np.int32)).numpy())
  assert q[4] == 0 and q[7] == 0 and q[5] == -2**31

INT_DTYPES = sorted((d for d in WGSLRenderer.supported_dtypes if dtypes.is_int(d)), key=lambda d: d.name)

def division_operands(dt) -> tuple[np.ndarray, np.ndarray]:
  """Every dividend against every divisor: each sign combination, exact and inexact quotients, x / 0, MIN / -1, MIN % -1."""
  npdt = np.dtype(to_np_dtype(dt))
  info = np.iinfo(npdt)
  vals = sorted({0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1, -1, -2, -3, -7, info.min // 2, -(info.max // 3)}
                if info.min else {0, 1, 2, 3, 7, info.max, info.max - 1, info.max // 2, info.max // 3})
  a, b = np.meshgrid(np.array(vals, npdt), np.array(vals, npdt))
  return a.ravel(), b.ravel()

@pytest.mark.parametrize("dt", INT_DTYPES, ids=[d.name for d in INT_DTYPES])
def test_integer_division_matches_python(gpu, dt):
  """Signed / and % mean the same on every adapter: truncating, x / 0 and x % 0 are 0, MIN / -1 wraps to MIN (GLSL,
  behind wgpu's OpenGL backend, leaves / and % of negative operands undefined: llvmpipe gave 5 for 7 % -2)."""
  a, b = division_operands(dt)
  for f in (Tensor.idiv, lambda x, y: x // y, lambda x, y: x % y):   # truncating IDIV, and floor // and % built on IDIV and MOD
    got, want = f(T(a), T(b)).numpy(), f(Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")).numpy()
    bad = got != want
    assert not bad.any(), f"{dt.name}: {a[bad][:8]} by {b[bad][:8]} gave {got[bad][:8]}, expected {want[bad][:8]}"
  if dtypes.is_unsigned(dt): return
  info = np.iinfo(to_np_dtype(dt))
  mn = np.array([info.min, -7, 7, -7, 7], to_np_dtype(dt))
  d = np.array([-1, 2, -2, -2, 2], to_np_dtype(dt))
  assert T(mn).idiv(T(d)).tolist() == [info.min, -3, -3, 3, 3]
  assert (T(mn) // T(d)).tolist() == [info.min, -4, -4, 3, 3] and (T(mn) % T(d)).tolist() == [0, 1, -1, -1, 1]

def adapter_backends() -> list[str]:
  """The wgpu backends (Vulkan, OpenGL, Metal, D3D12, ...) this machine has an adapter for."""
  return sorted({a.info["backend_type"] for a in wgpu.gpu.enumerate_adapters_sync()})

def test_integer_division_on_every_adapter(gpu):
  """The division test once per adapter wgpu offers here (wgpu picks one per process: WGPU_BACKEND_TYPE selects it),
  the adapters' processes side by side."""
  backends = adapter_backends()
  assert backends, "an adapter opened, but wgpu enumerates none"
  runs = {backend: subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::test_integer_division_matches_python",
                                     f"{__file__}::test_the_adapter_is_the_one_asked_for"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env={**os.environ, "WGPU_BACKEND_TYPE": backend, "CI": "true"})   # CI: the child fails rather than skips without it
          for backend in backends}
  for backend, proc in runs.items():
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and f"{len(INT_DTYPES) + 1} passed" in out, f"on the {backend} adapter:\n{out[-3000:]}{err[-2000:]}"

def test_the_adapter_is_the_one_asked_for(gpu):
  info = gpu.driver.adapter_info
  assert gpu.driver.description.startswith(f"{info['device']} via {info['backend_type']}")
  if (forced := os.environ.get("WGPU_BACKEND_TYPE")): assert info["backend_type"] == forced
  row = next(r for r in Device.listing() if r["name"] == "WEBGPU")   # what `python -m tinycore devices` shows
  assert row["opens"] and row["runs_on"] == gpu.driver.description

def test_the_subnormal_capability_is_what_the_device_does(gpu):
  from tinygrad_webgpu.driver import flushes_subnormals
  half_of_smallest_normal = (T(np.array([2.0**-126], np.float32)) * 0.5).numpy()[0]
  flushes = flushes_subnormals(gpu.driver.gpu)
  assert half_of_smallest_normal == (0.0 if flushes else np.float32(2.0**-127))
  assert gpu.spec.capabilities["denormals"] is (not flushes) and ("f32 subnormals flush to zero" in gpu.driver.description) is flushes

def test_an_unknown_backend_type_is_refused(gpu):
  r = subprocess.run([sys.executable, "-c", "from tinygrad_webgpu.driver import WebGPUDriver; WebGPUDriver(0)"],
                     env={**os.environ, "WGPU_BACKEND_TYPE": "Vulkann"}, capture_output=True, text=True, timeout=120)
  assert r.returncode != 0 and "WGPU_BACKEND_TYPE=Vulkann asked for that wgpu backend" in r.stderr

@pytest.mark.parametrize("dt", INT_DTYPES, ids=[d.name for d in INT_DTYPES])
def test_shift_amounts_past_the_width_wrap(gpu, dt):
  """A runtime shift by >= the width is taken mod the width (GLSL and SPIR-V leave it undefined); negative values shift left as bits."""
  npdt = np.dtype(to_np_dtype(dt))
  bits = 8 * npdt.itemsize
  x = np.array([1, 5, -1 if npdt.kind == "i" else 255, np.iinfo(npdt).min or 128, 3, 7, 9], npdt)
  n = np.array([bits, bits + 1, bits - 1, 2 * bits + 3, 0, 1, 4 * bits - 1], npdt)
  for f in (lambda a, m: a << m, lambda a, m: a >> m):
    np.testing.assert_array_equal(f(T(x), T(n)).numpy(), f(Tensor(x, device="PYTHON"), Tensor(n, device="PYTHON")).numpy())

def test_uint_division_by_zero(gpu):
  a, b = np.array([7, 0xffffffff, 5], np.uint32), np.array([2, 0, 0], np.uint32)
  assert (T(a) // T(b)).numpy().tolist() == [3, 0, 0]

@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
def test_bitwise_and_shifts(gpu, dtype):
  a, b = np.array([0b1100, 0x7fffffff, 5, 1], dtype), np.array([0b1010, 0x0f0f0f0f, 0, 3], dtype)
  for f, g in [(lambda x, y: x & y, np.bitwise_and), (lambda x, y: x | y, np.bitwise_or), (lambda x, y: x ^ y, np.bitwise_xor)]:
    np.testing.assert_array_equal(f(T(a), T(b)).numpy(), g(a, b))
  np.testing.assert_array_equal((T(a) << 3).numpy(), a << 3)
  np.testing.assert_array_equal((T(a) >> 2).numpy(), a >> 2)

def test_int_wraps(gpu):
  a = np.array([2**31 - 1, -2**31], np.int32)
  with np.errstate(all="ignore"): np.testing.assert_array_equal((T(a) + 1).numpy(), a + np.int32(1))
  np.testing.assert_array_equal((T(np.array([0, 3], np.uint32)) - 5).numpy(), np.array([0, 3], np.uint32) - np.uint32(5))

def test_float_to_int_casts_saturate(gpu):
  x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.9, -2.9, 2147483520.0, -0.5], np.float32)
  assert T(x).cast(dtypes.int32).numpy().tolist() == [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 2, -2, 2147483520, 0]
  assert T(x).cast(dtypes.uint32).numpy().tolist() == [0, 2**32 - 1, 0, 3000000000, 0, 2, 0, 2147483520, 0]

def test_other_casts(gpu):
  i = np.array([-1, 0, 5, 2**31 - 1], np.int32)
  np.testing.assert_array_equal(T(i).cast(dtypes.uint32).numpy(), i.astype(np.uint32))
  np.testing.assert_array_equal(T(i).cast(dtypes.float32).numpy(), i.astype(np.float32))
  np.testing.assert_array_equal(T(SPECIAL).cast(dtypes.bool).numpy(), SPECIAL.astype(bool))
  np.testing.assert_array_equal(T([True, False, True]).cast(dtypes.float32).numpy(), [1.0, 0.0, 1.0])
  np.testing.assert_array_equal(T(SPECIAL).bitcast(dtypes.uint32).numpy(), SPECIAL.view(np.uint32))

def test_nan_semantics_of_math(gpu):
  x = np.array([-1.0, 0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
  with np.errstate(all="ignore"):
    nan_equal(T(x).log2().numpy(), np.log2(x))
    nan_equal(T(x).sqrt().numpy(), np.sqrt(x))
    nan_equal(T(x).exp2().numpy(), np.exp2(x))
    nan_equal(T(x).sin().numpy(), np.sin(x))
    nan_equal(T(x).reciprocal().numpy(), np.reciprocal(x))
  assert np.signbit(T(x).reciprocal().numpy()[2]), "1/-0 must be -inf"

def test_var_and_std_of_one_element_are_nan(gpu):
  """0/0 from the Bessel correction (n - 1 == 0): lavapipe turned `x / 0.0f` into garbage (9.6e-21, -8.65)."""
  for shape in ((), (1,), (3, 1)):
    x = np.full(shape, 3.0, np.float32)
    assert np.isnan(T(x).var(axis=None if shape == () else -1).numpy()).all()
    assert np.isnan(T(x).std(axis=None if shape == () else -1).numpy()).all()

SPECIAL_CONSTS = [0.0, float("inf"), float("-inf"), float("nan"), 2.0, 3e38]
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "rsub", "rdiv", "rmul", "mod"])
def test_arithmetic_with_special_constants_matches_python(gpu, name):
  """Compilers fold x * 0 -> 0, x + 0 -> x, 0 - x -> -x, 0 / x -> 0 and x / 0 -> anything; the answers must be IEEE's,
  bit for bit the PYTHON device's (the reference semantics), signs of zeros included."""
  f = {"add": lambda x, c: x + c, "sub": lambda x, c: x - c, "mul": lambda x, c: x * c, "div": lambda x, c: x / c,
       "rsub": lambda x, c: c - x, "rdiv": lambda x, c: c / x, "rmul": lambda x, c: c * x, "mod": lambda x, c: x % c}[name]
  for c in SPECIAL_CONSTS:
    got, want = f(T(SPECIAL), c).numpy(), f(P(SPECIAL), c).numpy()
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{name} {c}: inputs {SPECIAL[~same]} got {got[~same]} expected {want[~same]}"

def test_reciprocal_and_division_of_runtime_values(gpu):
  a, b = np.meshgrid(SPECIAL, SPECIAL)
  got, want = (T(a) / T(b)).numpy(), (P(a) / P(b)).numpy()
  assert ((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))).all()
  r = T(SPECIAL).reciprocal().numpy()
  with np.errstate(all="ignore"): want = np.reciprocal(SPECIAL)
  nan_equal(r, want)
  assert (np.signbit(r) == np.signbit(want))[~np.isnan(want)].all()

def test_max_reduction_propagates_nan(gpu):
  x = np.array([[1.0, np.nan, 3.0], [-np.inf, -5.0, -np.inf], [np.nan, np.nan, 0.0]], np.float32)
  nan_equal(T(x).max(axis=1).numpy(), np.max(x, axis=1))
  nan_equal(T(x).max(axis=0).numpy(), np.max(x, axis=0))

# ***** bool storage (packed 4 to a word) *****

def test_bool_buffers_round_trip_and_compute(gpu):
  rng = np.random.default_rng(0)
  for n in (1, 3, 7, 8, 131):
    a, b = rng.random(n) < 0.5, rng.random(n) < 0.5
    np.testing.assert_array_equal(T(a).numpy(), a)
    np.testing.assert_array_equal((T(a) & T(b)).numpy(), a & b)
    np.testing.assert_array_equal((T(a) | T(b)).numpy(), a | b)
    np.testing.assert_array_equal((T(a) != T(b)).numpy(), a != b)
    np.testing.assert_array_equal(T(a).where(T(np.arange(n, dtype=np.float32)), -1.0).numpy(), np.where(a, np.arange(n), -1.0))

def test_float32_ops_round_one_by_one_in_a_kernel(gpu):
  """Shader compilers reassociate and contract float math they can see through; every float32 result is pinned, so each
  op rounds as the definition says: (2^24 + 1) - 2^24 is 0, (2^24 + 1) - 1 is 2^24 - 1, a * b + c is not an fma."""
  a, b = np.float32(2.0**24), np.float32(1.0)
  assert ((T([a]) + T([b])) - T([a])).numpy().tolist() == [0.0]
  assert ((T([a]) + 1.0) - 1.0).numpy().tolist() == [2.0**24 - 1]
  m = np.float32(1 + 2.0**-23)
  assert (T([m]) * T([m]) + T([-(1 + 2.0**-22)], np.float32)).numpy().tolist() == [0.0]   # fused: 2^-46
  assert ((T([a]) + T([-0.25], np.float32)) < T([a])).numpy().tolist() == [False]   # not folded to -0.25 < 0
  assert "pin((" in get_program(ast_of(P([1.0]) + P([2.0]) - P([1.0])), WGSLRenderer()).src

def test_log2_and_exp2_of_subnormals(gpu):
  """Mesa's log2 read a subnormal's exponent field alone (-127 for all of them) and its exp2 flushed subnormal results."""
  if not gpu.spec.capabilities["denormals"]: pytest.skip(f"{gpu.driver.description}: no f32 subnormals")
  sub = np.array([2.0**-149, 2.0**-140, 3 * 2.0**-135, 2.0**-127], np.float32)
  np.testing.assert_allclose(T(sub).log2().numpy(), np.log2(sub.astype(np.float64)), rtol=4 * 2.0**-23)
  x = np.array([-126.5, -130.25, -140.0, -149.0, -126.0], np.float32)
  np.testing.assert_allclose(T(x).exp2().numpy(), np.exp2(x.astype(np.float64)), rtol=2.0**-20, atol=2.0**-149)

def test_float_remainder_is_exact(gpu):
  """MOD on floats is C's fmod, exact: WGSL's % gave 0 for 1 % 0.1 and -inf for 1 % 2^-149 on Mesa."""
  from tinycore.uop import Ops
  from tinycore.dtype import truncate
  from tinycore_conformance.uops import run_op, definition
  vals = [1.0, -1.0, 0.1, 3.0, -7.5, 1e4, 2.0**24 + 2, 3.4e38, -1e30, 2.0**-126, 0.0, -0.0, float("inf")]
  if gpu.spec.capabilities["denormals"]: vals += [2.0**-149, -3 * 2.0**-140]
  for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16):
    held = sorted({truncate(dt, v) for v in vals})   # the values as dt holds them
    rows = [(x, y) for x in held for y in held if abs(x) != float("inf") and y != 0]   # no NaN results: their bits may differ
    cols = [list(c) for c in zip(*rows)]
    assert run_op("WEBGPU", Ops.MOD, dt, *cols) == definition(Ops.MOD, dt, *cols), dt

def test_no_fused_multiply_add():
  """MULACC is rounded once ((1 + 2^-7)^2 - (1 + 2^-6) is 2^-14 in bfloat16, 0 as a product and a sum), and WGSL's fma()
  need not be: WEBGPU declares no mulacc_dtypes, so a matmul's products join their sums as a multiply and an add, and a
  MULACC given to the renderer is refused."""
  from tinycore_conformance.uops import definition, one_op_kernel, from_bytes
  cols = [[1 + 2.0**-7], [1 + 2.0**-7], [-(1 + 2.0**-6)]]
  assert from_bytes(definition(Ops.MULACC, dtypes.bfloat16, *cols), dtypes.bfloat16).tolist() == [2.0**-14]
  assert not WGSLRenderer.mulacc_dtypes
  src = get_program(ast_of(P(np.ones((8, 8))) @ P(np.ones((8, 8)))), WGSLRenderer()).src
  assert "fma(" not in src and "pin((" in src
  for dt in (dtypes.float32, dtypes.bfloat16):
    with pytest.raises(UnsupportedError, match="WEBGPU.*MULACC"): get_program(one_op_kernel(Ops.MULACC, dt, 4), WGSLRenderer())

def test_sin_keeps_the_sign_of_zero(gpu):
  for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16):
    got = T([-0.0, 0.0], np.float32).cast(dt).sin().cast(dtypes.float32).numpy()
    assert got.tolist() == [0.0, 0.0] and np.signbit(got).tolist() == [True, False], dt

def test_views_inside_a_binding_word_are_refused(gpu):
  """A binding starts at a multiple of min-storage-buffer-offset-alignment and kernels index from its start: a uint8 or
  half view a byte or two into a word read and wrote the wrong elements; it is refused, offsets at the alignment run."""
  si = (T(np.ones(4, np.uint8)) + T(np.ones(4, np.uint8))).schedule()[-1]
  from tinycore.engine import get_runner
  runner = get_runner("WEBGPU", si.ast)
  ins = [b.ensure_allocated()._buf for b in si.bufs[1:]]
  align = gpu.driver.limits["min-storage-buffer-offset-alignment"]
  base = Buffer("WEBGPU", align + 8, dtypes.uint8).ensure_allocated()
  base.copyin(bytes(align + 8))
  dims = dict(global_size=runner.spec.global_size, local_size=runner.spec.local_size)
  for off in (1, 2, 3, align - 1):
    with pytest.raises(UnsupportedError, match=f"WEBGPU: kernel .* binds a view at byte offset {off}, not a multiple of"):
      runner.program(base.view(4, dtypes.uint8, off).ensure_allocated()._buf, *ins, **dims)
  runner.program(base.view(4, dtypes.uint8, align).ensure_allocated()._buf, *ins, **dims, wait=True)
  assert bytes(base.as_bytes()) == bytes(align) + bytes([2, 2, 2, 2]) + bytes(4)

def test_loop_passes_are_counted_per_kernel():
  """Each entry into a loop costs its trips plus the pass that exits, nested loops once per trip of the loops around them."""
  from tinygrad_webgpu.renderer import loop_passes
  def counted(src: str) -> int:   # from the text's own nesting: each loop's trips + 1, times the trips of those around it
    total, around = 0, []   # (trips, brace depth) of the loops open here
    for ln in src.splitlines():
      while around and ln.strip().startswith("}") and around[-1][1] == ln.index("}"): around.pop()
      if (m := re.search(r"for \(var ridx\d+: i32 = 0; ridx\d+ < (\d+)i", ln)):
        total += (int(m[1]) + 1) * math.prod(t for t, _ in around)
        around.append((int(m[1]), ln.index("for")))
    return total
  sequential = get_program(ast_of(P(np.ones((16, 8), np.float32)).sum()), WGSLRenderer()).src   # a thread's sum, then the group's
  with Context(NOOPT=1): nested = get_program(ast_of(P(np.ones((4, 6, 8), np.float32)).sum(axis=(1, 2))), WGSLRenderer()).src
  for src in (sequential, nested):
    assert len(re.findall(r"for \(var ridx", src)) >= 2 and loop_passes(src) == counted(src) > 0, src
  assert counted(nested) > sum(int(t) + 1 for t in re.findall(r"ridx\d+ < (\d+)i", nested)), "the second kernel's loops are nested"
  assert loop_passes(get_program(ast_of(P([1.0]) + 1), WGSLRenderer()).src) == 0

def test_kernels_past_the_adapters_loop_limit_are_split_or_refused(gpu, monkeypatch):
  """Mesa's software drivers end a shader's loops after 65535 passes in all: two sums of 32768 in one kernel gave 97282
  for 98304. The driver probes the limit at open and its renderer declares it, so the scheduler computes reductions apart
  where together they could pass it (two sums, a sum and a max, layernorm's mean and variance of 32768-wide rows); a
  kernel that still could (the scheduler not told) is refused at load."""
  from tinygrad_webgpu.driver import loop_pass_limit
  limit = loop_pass_limit(gpu.driver.gpu)
  assert limit == gpu.driver.loop_pass_limit
  if limit is None: pytest.skip(f"{gpu.driver.description} runs long loops to their end")
  assert Device.renderer("WEBGPU").loop_pass_max == limit
  x = np.random.default_rng(0).standard_normal((2, 32768)).astype(np.float32)
  assert (T(np.ones(32768, np.float32)).sum() + (T(np.ones(32768, np.float32)) * 2).sum()).numpy() == 98304
  np.testing.assert_allclose((T(x[0]).sum() + T(x[0]).max()).numpy(), x[0].sum() + x[0].max(), rtol=1e-4)
  ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(T(x).layernorm().numpy(), ref, atol=1e-4)
  monkeypatch.setattr(Device.renderer("WEBGPU"), "loop_pass_max", 0)
  # without thread blocks (NOOPT): one thread runs both sums whole (grouped over a block's threads, each makes 2 x 128)
  with pytest.raises(UnsupportedError, match=f"WEBGPU: kernel .* makes up to \\d+ loop passes per thread, .* after {limit} passes"), Context(NOOPT=1):
    (T(x[1]).sum() + (T(x[1]) * 3).sum()).numpy()
  assert (T(np.ones(32768, np.float32)).sum() + (T(np.ones(16000, np.float32)) * 2).sum()).numpy() == 32768 + 32000

def test_bool_from_comparison_neighbours_do_not_clobber(gpu):
  x = np.arange(1001, dtype=np.float32)
  np.testing.assert_array_equal((T(x) % 3 == 0).numpy(), x % 3 == 0)

def test_unaligned_views(gpu):
  base = Buffer("WEBGPU", 10, dtypes.bool).copyin(bytes([1, 0, 1, 1, 0, 0, 1, 0, 1, 1]))
  v = base.view(3, dtypes.bool, 3)
  v.copyin(bytes([0, 1, 1]))
  assert bytes(v.as_bytes()) == bytes([0, 1, 1])
  assert bytes(base.as_bytes()) == bytes([1, 0, 1, 0, 1, 1, 1, 0, 1, 1])

def test_buffer_freed_in_a_reference_cycle_stays_usable(gpu):
  """A Buffer dying in a reference cycle (as in an exception's traceback) must not hand a released GPUBuffer to the LRU
  cache: wgpu-native aborted the whole process when the next kernel bound it."""
  import gc
  n = 1237   # a size no other test uses, so the next allocation of it takes the buffer from the cache
  class Cycle: pass
  c = Cycle()
  c.me, c.buf = c, Buffer("WEBGPU", n, dtypes.float32).ensure_allocated()
  del c
  gc.collect()
  cached = gpu.allocator.cache[(n * 4, None)]
  assert cached and all(v.buf._internal is not None for v in cached), "the cached GPUBuffer was released"
  x = np.arange(n, dtype=np.float32)
  np.testing.assert_array_equal((T(x) + 1).numpy(), x + 1)

def test_released_buffer_raises_instead_of_aborting(gpu):
  from tinygrad_webgpu.allocator import GPUView
  si = (T(np.ones(8, np.float32)) + 1).schedule()[-1]
  from tinycore.engine import get_runner
  runner = get_runner("WEBGPU", si.ast)
  dead = GPUView(gpu.driver.gpu.create_buffer(size=32, usage=wgpu.BufferUsage.STORAGE), 0, 32)
  dead.buf._release()
  bufs = [b.ensure_allocated()._buf for b in si.bufs]
  with pytest.raises(DeviceError, match="WEBGPU.*released"):
    runner.program(dead, *bufs[1:], global_size=runner.spec.global_size, local_size=runner.spec.local_size)

def test_empty_view_binds(gpu):
  """A parameter that is an empty view still binds (a binding of size 0 is invalid WebGPU)."""
  src = ("@group(0) @binding(0) var<storage, read_write> data0: array<f32>;\n"
         "@group(0) @binding(1) var<storage, read_write> data1: array<f32>;\n"
         "@compute @workgroup_size(64)\nfn fill(@builtin(global_invocation_id) g: vec3<u32>) {\n"
         "  if (g.x < arrayLength(&data0)) { data0[g.x] = 7.0f + f32(arrayLength(&data1) * 0u); }\n}\n")
  prg = gpu.driver.load("fill", src.encode())
  base, out = Buffer("WEBGPU", 8, dtypes.float32).ensure_allocated(), Buffer("WEBGPU", 4, dtypes.float32).ensure_allocated()
  prg(out._buf, base.view(0, dtypes.float32, 32).ensure_allocated()._buf, global_size=(4, 1, 1), wait=True)
  assert out.numpy().tolist() == [7.0] * 4

# ***** 8- and 16-bit integers (packed into u32 words, computed in 32 bits, wrapped after every op) *****

SMALL = [(np.int8, dtypes.int8), (np.uint8, dtypes.uint8), (np.int16, dtypes.int16), (np.uint16, dtypes.uint16)]
SMALL_OPS = [("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y), ("idiv", lambda x, y: x // y),
             ("mod", lambda x, y: x % y), ("max", lambda x, y: x.maximum(y)), ("lt", lambda x, y: x < y), ("eq", lambda x, y: x == y),
             ("neg", lambda x, y: -x), ("xor", lambda x, y: x ^ y), ("and", lambda x, y: x & y), ("shl", lambda x, y: x << 3),
             ("shr", lambda x, y: x >> 2), ("sum", lambda x, y: x.sum(axis=0)), ("where", lambda x, y: (x < y).where(x, y)),
             ("to_float", lambda x, y: x.cast(dtypes.float32)), ("to_int", lambda x, y: x.cast(dtypes.int32)),
             ("to_uint", lambda x, y: x.cast(dtypes.uint32)), ("to_bool", lambda x, y: x.cast(dtypes.bool))]

@pytest.mark.parametrize("npdt,dt", SMALL, ids=[d.name for _, d in SMALL])
@pytest.mark.parametrize("name,f", SMALL_OPS, ids=[o[0] for o in SMALL_OPS])
def test_small_ints_match_python(gpu, npdt, dt, name, f):
  """Bit for bit the PYTHON device's answers (the reference semantics: wrapping arithmetic at the dtype's width)."""
  rng = np.random.default_rng(7)
  info = np.iinfo(npdt)
  a = np.concatenate([rng.integers(info.min, info.max, (37, 3), endpoint=True), [[info.min, info.max, 0], [-1 if info.min else 1, 1, info.max]]]).astype(npdt)
  b = np.concatenate([rng.integers(info.min, info.max, (37, 3), endpoint=True), [[-1 if info.min else 3, info.max, 0], [info.min, 0, 1]]]).astype(npdt)
  got, want = f(T(a), T(b)), f(Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON"))
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(got.numpy(), want.numpy())

@pytest.mark.parametrize("npdt,dt", SMALL, ids=[d.name for _, d in SMALL])
def test_small_ints_from_other_dtypes(gpu, npdt, dt):
  f = np.array([np.nan, np.inf, -np.inf, 1e9, -1e9, 3.7, -3.7, 127.5, 200.0, -129.0, 65535.9, 40000.0], np.float32)
  i = np.array([2**31 - 1, -2**31, 255, 256, -1, 65535, 65536, 128, -129, 12345, 0, 7], np.int32)
  for x in (f, i, i.view(np.uint32)):
    np.testing.assert_array_equal(T(x).cast(dt).numpy(), Tensor(x, device="PYTHON").cast(dt).numpy())
  # neighbours in one u32 word: every thread stores one element, none may clobber another's
  n = 1003
  np.testing.assert_array_equal((T(np.arange(n, dtype=np.int32)) * 7).cast(dt).numpy(), (np.arange(n) * 7).astype(npdt))
  other = {np.int8: np.uint8, np.uint8: np.int8, np.int16: np.uint16, np.uint16: np.int16}[npdt]
  x = np.arange(-300, 300, 7).astype(npdt)
  np.testing.assert_array_equal(T(x).bitcast({np.uint8: dtypes.uint8, np.int8: dtypes.int8, np.uint16: dtypes.uint16, np.int16: dtypes.int16}[other]).numpy(),
                                x.view(other))

def test_small_int_constants_and_wrapping_render():
  src = get_program(ast_of(P([1, 2], np.int8) * 100 + 100), WGSLRenderer()).src
  assert "array<atomic<u32>>" in src and "atomicOr(" in src and "& 0xffi" in src   # stored into words, wrapped to 8 bits
  assert "<< 24" not in src

# ***** half and bfloat16 (16-bit words, held in f32 registers, rounded in integer code after every op) *****

def bits_equal(got, want) -> bool:
  """Bit for bit, except that any NaN matches any NaN."""
  g, w = np.asarray(got), np.asarray(want)
  u = {2: np.uint16, 4: np.uint32}[g.dtype.itemsize]
  return bool(((g.view(u) == w.view(u)) | (np.isnan(g) & np.isnan(w))).all())

HALF_EDGES = np.array([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 2049.0, 2051.0, 65504.0, 65519.996, 65520.0, -65520.0, 1e6,
                       2**-24, 2**-25, 2**-25 * 1.0001, 3 * 2**-25, 5 * 2**-25, 2**-14 - 2**-25, 2**-14 - 2**-26, 2**-26, 1e-30,
                       np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, -2**-26, 0.1, 1 / 3], np.float32)

def test_half_rounding_of_edge_values(gpu):
  """float32 -> float16 is round to nearest even: ties (1 + 2^-11 -> 1, 2049 -> 2048), overflow (65520 -> inf, 65519.996
  -> 65504), subnormal ties (2^-25 -> 0, 3 * 2^-25 -> 2^-23), a zero's sign (-2^-26 -> -0.0), NaN stays NaN."""
  got = T(HALF_EDGES).cast(dtypes.float16).numpy()
  with np.errstate(all="ignore"): want = HALF_EDGES.astype(np.float16)
  assert got.dtype == np.float16 and bits_equal(got, want), f"got {got.tolist()}, want {want.tolist()}"
  assert got[[0, 3, 7, 11, 12, 13]].tolist() == [1.0, 2048.0, np.inf, 0.0, 2**-24, 2**-23] and np.signbit(got[[24, 25]]).all()
  np.testing.assert_array_equal(T(HALF_EDGES).cast(dtypes.float16).bitcast(dtypes.uint16).numpy()[[19, 20]] & 0x7e00, [0x7e00, 0x7e00])

def test_every_half_bit_pattern_round_trips(gpu):
  """All 65536 halves widen exactly to float32 (subnormals, infinities, NaN payloads, -0.0) and narrow back to the same bits."""
  allbits = np.arange(2**16, dtype=np.uint16)
  h = T(allbits).bitcast(dtypes.float16)
  wide = h.cast(dtypes.float32).numpy()
  assert np.array_equal(wide.view(np.uint32), allbits.view(np.float16).astype(np.float32).view(np.uint32))
  assert np.array_equal(h.cast(dtypes.float32).cast(dtypes.float16).bitcast(dtypes.uint16).numpy(), allbits)
  assert np.array_equal(h.bitcast(dtypes.int16).numpy(), allbits.view(np.int16))
  b = T(allbits).bitcast(dtypes.bfloat16).cast(dtypes.float32).numpy()
  assert np.array_equal(b.view(np.uint32), allbits.astype(np.uint32) << 16)

def test_float32_to_half_matches_numpy_on_ties_and_random_bits(gpu):
  halves = np.arange(2**16, dtype=np.uint16).view(np.float16)
  halves = halves[np.isfinite(halves)]
  with np.errstate(all="ignore"):
    lo, hi = halves[:-1].astype(np.float64), np.nextafter(halves[:-1], np.float16(np.inf)).astype(np.float64)
    mids = ((lo + hi) / 2).astype(np.float32)   # every midpoint is exact in float32: the ties, and their neighbours
    x = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                        np.random.default_rng(5).integers(0, 2**32, 300000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    want = x.astype(np.float16)
    assert bits_equal(T(x).cast(dtypes.float16).numpy(), want)
    assert bits_equal(T(x).cast(dtypes.bfloat16).numpy(), P(x).cast(dtypes.bfloat16).numpy())

HALF_OPS = [("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y), ("div", lambda x, y: x / y),
            ("recip", lambda x, y: x.reciprocal()), ("sqrt", lambda x, y: x.abs().sqrt()), ("max", lambda x, y: x.maximum(y)),
            ("neg", lambda x, y: -x), ("mod", lambda x, y: x % y), ("trunc", lambda x, y: x.trunc()), ("mulacc", lambda x, y: x * y + x),
            ("chain", lambda x, y: (x + y) * y - x / y), ("lt", lambda x, y: x < y), ("ne", lambda x, y: x != y),
            ("where", lambda x, y: (x < y).where(x, y * 3)), ("sum", lambda x, y: (x * y).sum(axis=1)), ("exp2", lambda x, y: x.exp2()),
            ("log2", lambda x, y: x.log2()), ("sin", lambda x, y: x.sin()), ("to_float", lambda x, y: x.cast(dtypes.float32) * y.cast(dtypes.float32)),
            ("to_int", lambda x, y: x.cast(dtypes.int32)), ("to_int8", lambda x, y: x.cast(dtypes.int8)), ("to_uint16", lambda x, y: x.cast(dtypes.uint16)),
            ("to_bool", lambda x, y: x.cast(dtypes.bool)), ("from_int", lambda x, y: (x * 1000).cast(dtypes.int32).cast(x.dtype)),
            ("from_bool", lambda x, y: (x < y).cast(x.dtype)), ("other_float", lambda x, y: x.cast(dtypes.bfloat16 if x.dtype == dtypes.float16 else dtypes.float16)),
            ("bitcast", lambda x, y: x.bitcast(dtypes.int16)), ("bitcast_back", lambda x, y: (x.bitcast(dtypes.uint16) ^ 1).bitcast(x.dtype))]

def half_operands(dt, moderate=False):
  """Random values over the type's range (half subnormals and overflow included) plus NaN, infinities and signed zeros.
  moderate: within half's range for both types (float32's log2 and sin are not exact for bfloat16's subnormals and 1e30)."""
  rng = np.random.default_rng(11)
  scale = rng.choice([2**-20, 2**-10, 1.0, 300.0, 3e4], (64, 8)) if dt == dtypes.float16 or moderate else rng.choice([1e-38, 1e-3, 1.0, 1e30], (64, 8))
  a, b = rng.standard_normal((64, 8)) * scale, rng.standard_normal((64, 8)) * scale[::-1]
  special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2048.0, 65504.0 if dt == dtypes.float16 or moderate else 3e38]
  a[:8, 0], b[:8, 0], a[8:16, 0], b[8:16, 0] = special, special[::-1], special, special
  return a.astype(np.float32), b.astype(np.float32)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("name,f", HALF_OPS, ids=[o[0] for o in HALF_OPS])
def test_half_and_bfloat16_match_python(gpu, monkeypatch, dt, name, f):
  """Bit for bit the PYTHON device (the reference semantics): every op result is rounded to the type, never kept in float32
  across ops, so e.g. half (2048 + 1) - 2048 is 0. The transcendentals are float32 ones: within one ulp of the type.
  WEBGPU fuses no multiply-add (WGSL's fma may round twice), so the reference runs PYTHON's kernels unfused too: a sum of
  bfloat16 products (exact in float32) differs fused only where a product overflows float32 (inf + -inf is NaN unfused)."""
  monkeypatch.setattr(type(Device.renderer("PYTHON")), "mulacc_dtypes", frozenset())
  a, b = half_operands(dt, moderate=name in ("exp2", "log2", "sin"))
  with np.errstate(all="ignore"):
    got, want = f(T(a).cast(dt), T(b).cast(dt)), f(P(a).cast(dt), P(b).cast(dt))
    assert got.dtype == want.dtype
    g, w = got.numpy(), want.numpy()
  if name in ("exp2", "log2", "sin"): nan_equal(g, w, rtol=2**-10 if dt == dtypes.float16 else 2**-7, atol=2**-24)
  elif name == "max": nan_equal(g, w, rtol=0, atol=0)   # max(0, -0): numpy's own answer differs between float16 and float32
  elif g.dtype.kind == "f": assert bits_equal(g, w), f"{name} {dt.name}: {[(x, y, gg, ww) for x, y, gg, ww in zip(a.ravel(), b.ravel(), g.ravel(), w.ravel()) if not bits_equal(gg, ww)][:5]}"
  else: np.testing.assert_array_equal(g, w)

def test_half_rounds_after_every_op(gpu):
  x = np.array([1.0, 2**-11, 0.1, 64000.0], np.float32)
  got = ((T(x).cast(dtypes.float16) + 2048) - 2048).numpy()   # kept in float32 between the ops, 1.0 would survive
  with np.errstate(over="ignore"): want = (x.astype(np.float16) + np.float16(2048)) - np.float16(2048)
  assert bits_equal(got, want) and got.tolist() == [0.0, 0.0, 0.0, np.inf]
  assert ((T(x).cast(dtypes.bfloat16) + 256) - 256).numpy().tolist() == [0.0, 0.0, 0.0, 64000.0]

def test_half_matmul_matches_numpy(gpu):
  rng = np.random.default_rng(6)
  a, b = rng.standard_normal((37, 29)).astype(np.float16), rng.standard_normal((29, 11)).astype(np.float16)
  got = (T(a) @ T(b)).numpy()
  assert got.dtype == np.float16
  assert bits_equal(got, (P(a, np.float16) @ P(b, np.float16)).numpy())
  # half products summed in float32: each product is off by up to half an ulp of half
  np.testing.assert_allclose(got.astype(np.float32), (a @ b).astype(np.float32), rtol=1e-2, atol=1e-2)
  np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)

def test_half_division_and_sqrt_round_correctly_from_an_inexact_float32(gpu):
  """WGSL lets f32 division and sqrt be 2.5 ulp off (real GPUs are): the half result is still the correctly rounded one.
  The core's rules (WGSLRenderer.exact_division is False) are handed the f32 result nudged by up to 3 ulp, around quotients and roots made to lie next to a midpoint."""
  from tinycore.codegen.emulate import f16_quotient, f16_root
  rng = np.random.default_rng(9)
  def h(x): return np.asarray(x, np.float64).astype(np.float16)
  b = h(rng.standard_normal(6000) * rng.choice([2**-20, 2**-8, 1.0, 100.0], 6000))
  b = b[(b != 0) & np.isfinite(b)]
  halves = np.arange(2**16, dtype=np.uint16).view(np.float16)
  halves = halves[np.isfinite(halves) & (halves > 0)]
  m = rng.choice(halves[:-1], len(b)).astype(np.float64)
  mid = (m + np.nextafter(m.astype(np.float16), np.float16(np.inf)).astype(np.float64)) / 2   # a midpoint between two halves
  with np.errstate(all="ignore"):
    a = h(mid * b.astype(np.float64))   # a / b lands next to the midpoint
    ok = np.isfinite(a) & (a != 0)
    a, b = a[ok], b[ok]
    a = np.concatenate([a, h([2**-24, 2**-24, 3 * 2**-24, 65504.0, 1.0])])   # exact subnormal ties, overflow to inf
    b = np.concatenate([b, h([2.0, -2.0, 2.0, 0.5, 3.0])])
    r = rng.choice(halves[(halves > 2**-12) & (halves < 255)], len(a))
    roots = h(((r.astype(np.float64) + np.nextafter(r, np.float16(np.inf)).astype(np.float64)) / 2) ** 2)   # sqrt next to a midpoint
    want = np.stack([np.broadcast_to(a / b, (7, len(a))), np.broadcast_to(np.sqrt(roots), (7, len(a)))], 1).reshape(14, -1).T
  n, f32, u32 = len(a), dtypes.float32, dtypes.uint32
  bufs = [UOp(Ops.DEFINE_GLOBAL, dtypes.float16.ptr(14 * n), (), 0)] + [UOp(Ops.DEFINE_GLOBAL, f32.ptr(n), (), i) for i in (1, 2, 3)]
  i = UOp(Ops.SPECIAL, dtypes.index, (UOp.const(dtypes.index, n),), "gidx0")
  x, y, c = (buf.index(i).load() for buf in bufs[1:])
  def nudged(v, d): return (v.bitcast(u32).alu(Ops.ADD, UOp.const(u32, d & 0xffffffff))).bitcast(f32)
  outs = [bufs[0].index(i * 14 + d * 2 + k).store(v) for d in range(7) for k, v in
          ((0, f16_quotient(x, y, nudged(x / y, d - 3))), (1, f16_root(c, nudged(c.alu(Ops.SQRT), d - 3))))]
  from tinycore.codegen import lower_index_dtype, linearize, emulate
  src = gpu.renderer.render("nudged", emulate(linearize(lower_index_dtype(UOp(Ops.SINK, dtypes.void, tuple(outs)), gpu.renderer)), gpu.renderer))
  prg = gpu.driver.load("nudged", src.encode())
  out = Buffer("WEBGPU", 14 * n, dtypes.float16).ensure_allocated()
  ins = [Buffer("WEBGPU", n, f32).copyin(memoryview(v.astype(np.float32).tobytes())) for v in (a, b, roots)]
  prg(out._buf, *(v._buf for v in ins), global_size=(n, 1, 1), wait=True)
  got = np.frombuffer(out.as_bytes(), np.float16).reshape(-1, 14)
  bad = ~((got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))).all(axis=1)
  assert not bad.any(), f"(a, b, root input, got, want): {list(zip(a[bad], b[bad], roots[bad], got[bad].tolist(), want[bad].tolist()))[:3]}"
  assert want[-5:, 0].tolist() == [0.0, -0.0, 2**-23, np.inf, h(1 / 3)]   # ties to even among the subnormals

def test_half_kernels_use_words_and_no_f16(gpu):
  src = get_program(ast_of(P([1.0, 2.0]).cast(dtypes.float16) * 3), WGSLRenderer()).src
  # stored into u32 words, rounded to half in integer code (31744u = 0x7c00: half's infinity, where overflow goes)
  assert "array<atomic<u32>>" in src and "31744u" in src and "enable f16" not in src and "<f16>" not in src

# ***** movement, reductions, matmul *****

def test_reductions_and_movement(gpu):
  rng = np.random.default_rng(2)
  a = rng.standard_normal((5, 7, 3)).astype(np.float32)
  t = T(a)
  np.testing.assert_allclose(t.sum().numpy(), a.sum(), rtol=1e-5)
  np.testing.assert_allclose(t.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(t.mean(axis=(0, 2)).numpy(), a.mean(axis=(0, 2)), rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(t.max(axis=2).numpy(), a.max(axis=2))
  np.testing.assert_array_equal(t.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
  np.testing.assert_array_equal(t.pad(((1, 0), (0, 2), (0, 0))).numpy(), np.pad(a, ((1, 0), (0, 2), (0, 0))))
  np.testing.assert_array_equal(t.shrink(((1, 4), (0, 7), (2, 3))).flip(1).numpy(), a[1:4, ::-1, 2:3])
  np.testing.assert_array_equal(Tensor.arange(10, device="WEBGPU").numpy(), np.arange(10))
  np.testing.assert_array_equal(T(np.arange(24, dtype=np.int32).reshape(2, 3, 4)).sum(axis=2).numpy(), np.arange(24).reshape(2, 3, 4).sum(axis=2))

def test_matmul_whose_axes_fit_one_block(gpu):
  """16 rows: the block's threads take the whole axis, and the tiling went on to look the gone axis up (OptError)."""
  a, b = np.random.default_rng(3).standard_normal((2, 16, 64)).astype(np.float32)
  np.testing.assert_allclose((T(a) @ T(b.T)).numpy(), a @ b.T, rtol=1e-4, atol=1e-5)

def test_matmul_and_softmax(gpu):
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((33, 17)).astype(np.float32), rng.standard_normal((17, 9)).astype(np.float32)
  np.testing.assert_allclose((T(a) @ T(b)).numpy(), a @ b, rtol=1e-4, atol=1e-5)
  e = np.exp(a - a.max(axis=1, keepdims=True))
  np.testing.assert_allclose(T(a).softmax(axis=1).numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)

def test_gradient_on_device(gpu):
  x = Tensor(np.array([1.0, -2.0, 3.0], np.float32), device="WEBGPU", requires_grad=True)
  (x * x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 6.0])

def test_launch_larger_than_one_dispatch_dimension(gpu):
  n = 65535 * 64 + 1000   # more workgroups than one dimension allows: the flat id spreads over y
  got = (Tensor.arange(n, device="WEBGPU") * 2).numpy()
  assert got.shape == (n,) and got[-1] == 2 * (n - 1) and np.array_equal(got[::9973], np.arange(0, n, 9973) * 2)

def test_integer_variables_reach_the_kernel(gpu):
  from tinycore.uop import UOp, Ops
  from tinycore.rewrite import graph_substitute
  from tinycore.engine import CompiledRunner
  si = ((((T(np.arange(6, dtype=np.int32)) + 11) * 13) - 17 + 19) * 23).schedule()[-1]
  names = {11: "a", 13: "b", 17: "c", 19: "d", 23: "e"}   # five: more than one vec4 of the uniform buffer
  consts = {u: UOp(Ops.DEFINE_VAR, dtypes.int32, arg=(names[u.arg], 0, 100)) for u in si.ast.toposort() if u.op is Ops.CONST and u.arg in names}
  assert len(consts) == 5
  spec = get_program(graph_substitute(si.ast, consts), WGSLRenderer())
  vals = {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
  CompiledRunner("WEBGPU", spec)(si.bufs, vals)
  x = np.arange(6)
  np.testing.assert_array_equal(si.bufs[0].numpy(), (((x + 1) * 2) - 3 + 4) * 5)

# ***** driver: compile errors, limits, timing *****

def test_compile_error_names_the_line(gpu):
  src = "@compute @workgroup_size(1)\nfn broken() {\n  let x: f32 = 1.0;\n  let y = x + true;\n}\n"
  with pytest.raises(CompileError, match=r"(?s)WEBGPU: kernel broken failed to compile at line 4: let y = x \+ true;"):
    gpu.driver.load("broken", src.encode())

def test_buffer_over_the_adapter_limit_raises(gpu):
  most = gpu.driver.limits["max-storage-buffer-binding-size"]
  with pytest.raises(DeviceError, match="max-storage-buffer-binding-size"): gpu.allocator.alloc(most + 4)

def test_kernel_with_more_buffers_than_the_adapter_allows(gpu):
  ren = WGSLRenderer()
  ren.max_buffers = 1000
  n = gpu.driver.limits["max-storage-buffers-per-shader-stage"] + 1
  xs = [P([float(i)]) for i in range(n)]
  spec = get_program(ast_of(sum(xs[1:], xs[0])), ren)
  with pytest.raises(UnsupportedError, match=f"binds {n + 1} storage buffers.*max-storage-buffers-per-shader-stage"):
    gpu.driver.load(spec.name, spec.src.encode())

def test_opened_device_describes_its_buffer_limit_to_the_renderer(gpu):
  """WebGPU guarantees 8 storage buffers per stage; an opened device tells the registry's renderer what it granted."""
  limit = gpu.driver.limits["max-storage-buffers-per-shader-stage"]
  assert limit <= gpu.driver.adapter_limits["max-storage-buffers-per-shader-stage"]
  assert gpu.renderer is Device.renderer("WEBGPU") and gpu.renderer.max_buffers == limit
  assert WGSLRenderer().max_buffers == 8, "a renderer without a device keeps WebGPU's guaranteed minimum"
  n = min(limit - 1, 11)   # n inputs + the output: more than 8 where the adapter allows it (lavapipe: 32)
  xs = [np.full(3, i, np.float32) for i in range(n)]
  assert np.array_equal(sum((T(x) for x in xs[1:]), T(xs[0])).numpy(), sum(xs[1:], xs[0]))
  xs = [P([float(i)]) for i in range(limit)]   # one past the limit still raises
  with pytest.raises(UnsupportedError, match=f"WEBGPU.*{limit + 1} storage buffers.*limit is {limit}"):
    get_program(ast_of(sum(xs[1:], xs[0])), gpu.renderer)

def local_ids_kernel(groups, local):
  """out[flat id] = flat id, flat id = (gidx * local + lidx) along each dim, dim 0 fastest (as the conformance suite builds it)."""
  from tinycore.uop import UOp, Ops
  from tinycore.codegen.linearize import linearize
  i32, total = dtypes.int32, int(np.prod(groups) * np.prod(local))
  out = UOp(Ops.DEFINE_GLOBAL, i32.ptr(total), (), 0)
  idx, stride = UOp.const(i32, 0), 1
  for d in range(3):
    if groups[d] * local[d] == 1: continue
    g, l = (UOp(Ops.SPECIAL, i32, (UOp.const(i32, n),), f"{k}{d}") for k, n in (("gidx", groups[d]), ("lidx", local[d])))
    idx = idx + (g * local[d] + l) * stride
    stride *= groups[d] * local[d]
  return WGSLRenderer().render("local_ids", linearize(UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, i32.ptr(total), (out, idx)), idx)),)))), total

@pytest.mark.parametrize("groups,local", [((5, 1, 1), (8, 1, 1)), ((3, 2, 2), (4, 2, 2)), ((70001, 1, 1), (2, 1, 1))])
def test_local_ids_set_the_workgroup_size(gpu, groups, local):
  assert WGSLRenderer.has_local
  src, total = local_ids_kernel(groups, local)
  assert f"@workgroup_size({', '.join(map(str, local))})" in src
  prg = gpu.driver.load("local_ids", src.encode())
  buf = Buffer("WEBGPU", total, dtypes.int32).ensure_allocated()
  prg(buf._buf, global_size=groups, local_size=local, wait=True)   # 70001 groups: more than one dispatch dimension holds
  np.testing.assert_array_equal(buf.numpy(), np.arange(total))

def test_local_size_mismatch_and_limits_raise(gpu):
  src, total = local_ids_kernel((2, 1, 1), (8, 1, 1))
  prg = gpu.driver.load("local_ids", src.encode())
  buf = Buffer("WEBGPU", total, dtypes.int32).ensure_allocated()
  with pytest.raises(UnsupportedError, match=r"WEBGPU.*local_size \(4, 1, 1\).*workgroups of \(8, 1, 1\)"):
    prg(buf._buf, global_size=(4, 1, 1), local_size=(4, 1, 1))
  with Context(NOOPT=1): plain = get_program(ast_of(P([1.0, 2.0]) + 1), WGSLRenderer())   # no thread blocks chosen
  with pytest.raises(UnsupportedError, match="WEBGPU.*without local ids"):
    gpu.driver.load(plain.name, plain.src.encode())(buf._buf, buf._buf, global_size=(2, 1, 1), local_size=(2, 1, 1))
  most = gpu.driver.limits["max-compute-invocations-per-workgroup"]
  big, _ = local_ids_kernel((1, 1, 1), (most * 2, 1, 1))
  with pytest.raises(UnsupportedError, match="WEBGPU.*workgroup size.*max-compute-invocations-per-workgroup"):
    gpu.driver.load("local_ids", big.encode())

def test_opened_device_describes_its_workgroup_limits(gpu):
  lim = gpu.driver.limits
  assert gpu.renderer.local_max == tuple(lim[f"max-compute-workgroup-size-{d}"] for d in "xyz")
  assert gpu.renderer.max_threads_per_group == lim["max-compute-invocations-per-workgroup"]

def test_timed_launch_and_backend_listing(gpu):
  from tinycore.engine import get_runner
  a = T(np.ones(1000, np.float32))
  si = (a + 1).schedule()[-1]
  t = get_runner("WEBGPU", si.ast)(si.bufs, {}, wait=True)
  assert isinstance(t, float) and t > 0
  assert gpu.spec.package == "tinygrad-webgpu"

# ***** export to the browser *****

from tinycore import Variable   # noqa: E402
import tinygrad_webgpu   # noqa: E402
from tinygrad_webgpu import ExportError   # noqa: E402

def exported_model(tmp_path):
  from tinycore.nn.serialization import safetensors_load_arrays
  rng = np.random.default_rng(4)
  w = Tensor(rng.standard_normal((4, 3)).astype(np.float32), device="WEBGPU")
  x = Tensor(rng.standard_normal((5, 4)).astype(np.float32), device="WEBGPU")
  path = tinygrad_webgpu.export(lambda x: ((x @ w).relu().sum(axis=1), x > 0), x, path=tmp_path / "model")
  assert sorted(os.listdir(path)) == ["example.json", "index.html", "model.js", "weights.safetensors"]
  weights = safetensors_load_arrays(path / "weights.safetensors")
  assert any(np.array_equal(a, w.numpy().ravel()) for a in weights.values()), "the weight must be saved"
  example = json.loads((path / "example.json").read_text())
  np.testing.assert_allclose(example["outputs"][0], np.maximum(x.numpy() @ w.numpy(), 0).sum(axis=1), rtol=1e-5, atol=1e-6)
  assert example["outputs"][1] == (x.numpy() > 0).ravel().tolist()
  return path, example

def model_js_constant(path, name: str):
  return json.loads(re.search(rf"^const {name} = (.*);$", (path / "model.js").read_text(), re.M).group(1))

def test_export_writes_kernels_weights_and_a_page(gpu, tmp_path):
  path, _ = exported_model(tmp_path)
  js = (path / "model.js").read_text()
  assert "export async function load" in js and "@compute @workgroup_size(" in js and "navigator.gpu" in js
  assert model_js_constant(path, "INPUTS") == [{"name": "x", "dtype": "float32", "shape": [5, 4], "buffer": 0}]
  assert [(o["name"], o["dtype"], o["shape"]) for o in model_js_constant(path, "OUTPUTS")] == [("output0", "float32", [5]), ("output1", "bool", [5, 4])]
  assert '<script type="module">' in (path / "index.html").read_text()

# a function that needs the value of something computed from its input while it is traced: the page would answer every
# input with the example's result. Each body's line is the one the error must name.
def realizes(x, w): return (x @ w).relu().realize().sum(axis=1)
def reads_to_numpy(x, w): return Tensor(np.maximum(x.numpy(), 0), device="WEBGPU") @ w
def decides_in_python(x, w): return x @ w if x.sum().item() > 0 else x @ -w

@pytest.mark.parametrize("fn", [realizes, reads_to_numpy, decides_in_python], ids=lambda f: f.__name__)
def test_export_refuses_a_function_that_reads_an_input_while_traced(gpu, tmp_path, fn):
  import inspect
  w = T(np.ones((4, 3), np.float32))
  line, code = inspect.getsourcelines(fn)[1], inspect.getsource(fn).strip()
  with pytest.raises(ExportError) as e: tinygrad_webgpu.export(lambda x: fn(x, w), T(np.ones((5, 4), np.float32)), path=tmp_path / "model")
  assert str(e.value).startswith(f"export: input 'x' is read while the function is traced, at {__file__}:{line}: {code}. "), str(e.value)
  assert "the page would answer every input with this example's result" in str(e.value)
  assert not (tmp_path / "model").exists(), "nothing is written for a refused function"

def test_the_realize_inside_message_is_pinned(gpu, tmp_path):
  w = T(np.ones((4, 3), np.float32))
  def fn(x):
    h = (x @ w).relu().realize()
    return h.sum(axis=1)
  import inspect
  line = inspect.getsourcelines(fn)[1] + 1
  with pytest.raises(ExportError) as e: tinygrad_webgpu.export(fn, T(np.ones((5, 4), np.float32)), path=tmp_path / "model")
  assert str(e.value) == (
    f"export: input 'x' is read while the function is traced, at {__file__}:{line}: h = (x @ w).relu().realize(). Something computed "
    "from it is realized inside the function (realize(), numpy(), item(), tolist(), or Python deciding on its value), so the page would "
    "answer every input with this example's result. Keep the function lazy from its inputs to the tensors it returns; only weights "
    "(tensors not computed from an input) may be realized in it")

def test_export_refuses_an_input_no_output_depends_on(gpu, tmp_path):
  x = T(np.ones((5, 4), np.float32))
  def fn(x, y): return x * 2
  with pytest.raises(ExportError, match=f"no output of the function defined at {re.escape(__file__)}:\\d+ depends on input 'y': the page would ignore it"):
    tinygrad_webgpu.export(fn, x, x, path=tmp_path / "model")

def test_export_refuses_a_function_that_writes_a_tensor_in_place(gpu, tmp_path):
  total = T(np.zeros(4, np.float32))
  def fn(x):
    total.assign(total + x)
    return total * 2
  with pytest.raises(ExportError, match="writes a tensor in place"): tinygrad_webgpu.export(fn, T(np.ones(4, np.float32)), path=tmp_path / "model")

def test_export_refuses_a_variable_that_is_no_input_dimension(gpu, tmp_path):
  n = Variable("n", 1, 8).bind(3)
  with pytest.raises(ExportError, match="the kernels use the Variable 'n', which is no dimension of an input: the page could not know its value"):
    tinygrad_webgpu.export(lambda x: x[:n] * 2, T(np.arange(8, dtype=np.float32)), path=tmp_path / "model")

def test_export_refuses_weights_on_another_device(gpu, tmp_path):
  w = Tensor(np.ones((4, 3), np.float32), device="CPU")
  with pytest.raises(UnsupportedError, match=r"needs a COPY between devices \(CPU to WEBGPU\); the page has WEBGPU only: move the weights there first"):
    tinygrad_webgpu.export(lambda x: x @ w.to("WEBGPU"), T(np.ones((2, 4), np.float32)), path=tmp_path / "model")

def test_export_refuses_an_input_dimension_that_is_an_expression(gpu, tmp_path):
  n = Variable("n", 1, 8)
  x = T(np.ones((16, 3), np.float32)).shrink(((0, n.bind(2) * 2), None))
  with pytest.raises(ExportError, match="input 'x' has the shape .*must be a bound Variable itself"):
    tinygrad_webgpu.export(lambda x: x + 1, x, path=tmp_path / "model")

# ***** in headless Chromium: one browser for every test of this file, on a folder served on 127.0.0.1 *****

# Chromium's own WebGPU on SwiftShader, its software Vulkan: no GPU needed (Linux needs --enable-unsafe-webgpu)
WEBGPU_FLAGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-vulkan=swiftshader", "--use-webgpu-adapter=swiftshader",
                "--disable-gpu-sandbox", "--disable-quic", "--window-size=1000,1000"]
# outputs as JSON: typed arrays as lists (non-finite floats as the strings String() writes), with their type and shape
PLAIN = ("const plain = (outs) => outs.map((o) => ({type: o.constructor.name, shape: o.shape, dtype: o.dtype, "
         "values: Array.from(o, (v) => (Number.isFinite(v) ? v : String(v)))}));")

class Site:
  """The shared browser, on the page at the root of a folder `serve` serves; each test exports into a folder of its own."""
  def __init__(self, browser, root, url):
    self.browser, self.root, self.url = browser, root, url
  def home(self) -> None:
    self.browser.send("Page.navigate", session=True, url=self.url)
    self.browser.wait_for("document.readyState === 'complete' && location.href === " + json.dumps(self.url))
  def run(self, folder, body: str, timeout: float = 60):
    """The async JS `body`, run with `mod` (the folder's model.js) and `base` (the folder's URL) in scope: {"value": what it
    returns} or {"error": "TypeError: ..."} for what it throws."""
    base = f"/{folder.relative_to(self.root).as_posix()}/"
    return self.browser.js(f"(async () => {{ const base = {json.dumps(base)}; try {{ const mod = await import(base + 'model.js'); {PLAIN} "
                           f"return {{value: await (async () => {{ {body} }})()}}; }} catch (e) {{ return {{error: `${{e.name}}: ${{e.message}}`}}; }} }})()",
                           timeout=timeout)
  def outputs(self, folder) -> list[dict]:
    """The folder's model run on its example's inputs, each as the typed array its dtype takes."""
    got = self.run(folder, "const ex = await (await fetch(base + 'example.json')).json(); const model = await mod.load(); "
                           "return plain(await model.run(...ex.inputs.map((x, i) => globalThis[model.inputs[i].arrayType].from(x, Number))));")
    assert "error" not in got, got["error"]
    return got["value"]

@pytest.fixture(scope="module")
def site(gpu, tmp_path_factory):
  from headless_chromium import Chromium
  from tinygrad_webgpu.__main__ import server
  root = tmp_path_factory.mktemp("site")
  srv = server(root, 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  browser = Chromium(tmp_path_factory.mktemp("chromium-profile"), WEBGPU_FLAGS)
  try:
    s = Site(browser, root, f"http://127.0.0.1:{srv.server_address[1]}/")
    s.home()
    if not browser.js("(async () => Boolean(navigator.gpu && await navigator.gpu.requestAdapter()))()"):
      why = f"headless chromium gives no WebGPU adapter with {' '.join(WEBGPU_FLAGS)}"
      if os.environ.get("CI"): pytest.fail(f"CI is set but {why}")
      pytest.skip(why)
    yield s
  finally:
    browser.close()
    srv.shutdown(); srv.server_close()

def test_exported_model_runs_in_headless_chromium(site):
  path, example = exported_model(site.root)
  got = site.run(path, f"{PLAIN} const model = await mod.load(); const ex = await (await fetch(base + 'example.json')).json(); "
                       "return {inputs: model.inputs, outputs: model.outputs, vars: model.vars, "
                       "outs: plain(await model.run(Float32Array.from(ex.inputs[0])))};")
  assert "error" not in got, got["error"]
  got = got["value"]
  assert got["inputs"] == [{"name": "x", "dtype": "float32", "shape": [5, 4], "arrayType": "Float32Array"}]
  assert got["outputs"] == [{"name": "output0", "dtype": "float32", "shape": [5], "arrayType": "Float32Array"},
                            {"name": "output1", "dtype": "bool", "shape": [5, 4], "arrayType": "Uint8Array"}] and got["vars"] == {}
  out, mask = got["outs"]
  assert (out["type"], out["shape"], out["dtype"], mask["type"], mask["shape"]) == ("Float32Array", [5], "float32", "Uint8Array", [5, 4])
  np.testing.assert_allclose(out["values"], example["outputs"][0], rtol=1e-5, atol=1e-6)
  assert mask["values"] == [int(b) for b in example["outputs"][1]]

def test_exported_kernels_with_non_finite_constants_compile_in_chromium(site):
  """Tint refused `bitcast<f32>(0x7fc00000u)` (a NaN const-expression) that every kernel with log2, sin or inf used."""
  x = Tensor(np.array([1.0, 0.5, 0.0, 4.0], np.float32), device="WEBGPU")
  fn = lambda x: ((x.log2().maximum(-5.0) + x.sin()) * 2 + ((x + 1) * float("inf")).minimum(7.0) + ((x + 1) / 0.0).minimum(3.0) + (x + 1) * 0.0,)
  path = tinygrad_webgpu.export(fn, x, path=site.root / "nonfinite_constants")
  example = json.loads((path / "example.json").read_text())
  np.testing.assert_allclose(site.outputs(path)[0]["values"], example["outputs"][0], rtol=1e-5, atol=1e-6)

def test_exported_half_and_bfloat16_kernels_run_in_chromium(site):
  """The half and bfloat16 helpers compile with Tint and give the same bits in the browser (float32 in and out)."""
  x = Tensor(np.array([1.0, 2**-11, 0.1, 3.0, 600.0, 2**-24, -2.0, 7.0], np.float32), device="WEBGPU")
  def fn(x):
    h, bf = x.cast(dtypes.float16), x.cast(dtypes.bfloat16)
    return (((h + 2048) - 2048) / (h.abs() + 1).sqrt() * h).cast(dtypes.float32) + h.reciprocal().cast(dtypes.float32).minimum(5.0), \
           ((bf * 1.5 + 256) / 3).cast(dtypes.float32), h.bitcast(dtypes.int16).cast(dtypes.int32)
  path = tinygrad_webgpu.export(fn, x, path=site.root / "half_kernels")
  example = json.loads((path / "example.json").read_text())
  for g, w in zip(site.outputs(path), example["outputs"]): np.testing.assert_array_equal(g["values"], w)

def strict_json(text: str):
  """json.loads that refuses the NaN/Infinity literals Python writes and browsers cannot parse."""
  def refuse(c): raise ValueError(f"{c} is not JSON")
  return json.loads(text, parse_constant=refuse)

def test_exported_non_finite_values_round_trip(site):
  """Inputs and outputs carrying NaN and infinities: example.json stays JSON (JSON.parse reads it), the values come back
  bit for bit in Python and in the browser, a half output decoded to float32."""
  x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, 3e38, -1.0], np.float32)
  fn = lambda x: (x * 2, (x + 1).log2(), x.cast(dtypes.float16), x.isnan())
  path = tinygrad_webgpu.export(fn, T(x), path=site.root / "nonfinite_values")
  example = strict_json((path / "example.json").read_text())
  assert example["inputs"][0][:3] == ["NaN", "Infinity", "-Infinity"]
  def floats(v): return np.array([float(e) for e in v], np.float32)
  np.testing.assert_array_equal(floats(example["inputs"][0]), x)
  with np.errstate(all="ignore"): want = [x * 2, np.log2(x + 1)]
  for got, w in zip(example["outputs"], want): np.testing.assert_array_equal(floats(got), w)
  with np.errstate(over="ignore"): half = x.astype(np.float16).astype(np.float32)   # 3e38 is inf as a half
  np.testing.assert_array_equal(floats(example["outputs"][2]), half)
  got = site.outputs(path)
  for g, w in zip(got[:3], example["outputs"][:3]): np.testing.assert_array_equal(floats(g["values"]), floats(w))
  assert got[2]["type"] == "Float32Array" and got[3]["values"] == [int(b) for b in example["outputs"][3]]

# ***** the digits convnet and an MLP, in the browser against the CPU device *****

@pytest.fixture(scope="module")
def digits(site):
  """docs/browser-export.md's export, run as written in the served folder on a checkpoint of the digits convnet (random
  weights, BatchNorm statistics made up), and the CPU device's outputs on its first 16 images."""
  from tinycore.examples.train_digits import ConvNet
  from tinycore.nn.state import get_state_dict, load_state_dict, safetensors_load, safetensors_save
  Tensor.manual_seed(0)
  model, rng = ConvNet(), np.random.default_rng(5)
  for name, p in get_state_dict(model).items():   # the running statistics are what eval mode uses: make them matter
    if "running_" in name: p.assign(Tensor(rng.uniform(0.5, 1.5, p.shape).astype(np.float32), device=p.device)).realize()
  (site.root / "out" / "train_digits").mkdir(parents=True)
  safetensors_save(get_state_dict(model), site.root / "out" / "train_digits" / "digits_convnet.safetensors")
  code = re.search(r"## 2\. Export it\s+```python\n(.*?)```", (ROOT / "docs" / "browser-export.md").read_text(), re.S).group(1)
  cwd, ns = os.getcwd(), {}
  os.chdir(site.root)
  # in training mode on purpose: export traces with Tensor.training off (BatchNorm on its running statistics)
  try:
    with Tensor.train(): exec(compile(code, "docs/browser-export.md", "exec"), ns)
  finally: os.chdir(cwd)
  load_state_dict(model, safetensors_load(site.root / "out" / "train_digits" / "digits_convnet.safetensors"))
  with Tensor.train(False): want = model(Tensor(ns["images"][:16], device="CPU")).numpy()
  return site.root / "out" / "digits_web", ns["images"], want, ns["model"]

def test_digits_convnet_matches_cpu_in_chromium(site, digits):
  path, images, want, _ = digits
  example = json.loads((path / "example.json").read_text())
  np.testing.assert_allclose(np.array(example["outputs"][0]).reshape(16, 10), want, atol=1e-5, rtol=0)
  got = site.run(path, f"""const model = await mod.load();
    const images = Float32Array.from({json.dumps(images[:16].ravel().tolist())});
    // two runs at once, of two batch sizes: each queues its own inputs and sizes before its kernels
    const [sixteen, three] = await Promise.all([model.run(images), model.run({{x: images.subarray(5 * 784, 8 * 784)}})]);
    return {{inputs: model.inputs, vars: model.vars, sixteen: plain(sixteen)[0], three: plain(three)[0]}};""")
  assert "error" not in got, got["error"]
  got = got["value"]
  assert got["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 1, 28, 28], "arrayType": "Float32Array"}] and got["vars"] == {"batch": [1, 32]}
  assert got["sixteen"]["shape"] == [16, 10] and got["three"]["shape"] == [3, 10]
  assert np.abs(np.array(got["sixteen"]["values"]).reshape(16, 10) - want).max() <= 1e-5
  assert np.abs(np.array(got["three"]["values"]).reshape(3, 10) - want[5:8]).max() <= 1e-5

W_MLP = [np.random.default_rng(6).standard_normal(s).astype(np.float32) * 0.3 for s in ((64, 32), (32,), (32, 10), (10,))]

def mlp(w1, b1, w2, b2):
  def fn(x, scale):
    span = (w2.abs().max() + 1).realize()   # realized from weights only: a constant, which the export allows
    logits = ((x @ w1 + b1).relu() @ w2 + b2) / span
    return {"logits": logits, "probs": logits.softmax(-1).cast(dtypes.float16) * scale.minimum(8), "label": logits.argmax(-1).cast(dtypes.int32),
            "positive": x > 0, "coarse": logits.cast(dtypes.bfloat16), "scale": scale.cast(dtypes.float32)}
  return fn

# float16 inputs arrive as float32 and are rounded in JS: halfway cases, subnormals, overflow
SCALES = np.array([1.0, 0.1, 1 / 3, 65519.0, 65520.0, 2**-24 * 1.5, 2**-25, 1 + 2**-11, 1 + 3 * 2**-11, -2.5, 6e-5, 1e-9, -0.0, 2048.5, 7.0, 1e4],
                  np.float32).reshape(16, 1)

@pytest.fixture(scope="module")
def mlp_export(site):
  rng = np.random.default_rng(7)
  x = rng.standard_normal((16, 64)).astype(np.float32)
  path = tinygrad_webgpu.export(mlp(*(T(w) for w in W_MLP)), T(x), T(np.ones((16, 1)), np.float16), path=site.root / "mlp")
  return path

def test_mlp_with_half_bfloat16_and_integer_outputs_matches_cpu_in_chromium(site, mlp_export):
  x = np.random.default_rng(8).standard_normal((16, 64)).astype(np.float32)   # not the example's inputs
  with np.errstate(over="ignore"): scale = SCALES.astype(np.float16)
  want = mlp(*(Tensor(w, device="CPU") for w in W_MLP))(Tensor(x, device="CPU"), Tensor(scale, device="CPU"))
  got = site.run(mlp_export, f"""const model = await mod.load(), bits = await mod.load({{halfBits: true}});
    const x = Float32Array.from({json.dumps(x.ravel().tolist())}), scale = Float32Array.from({json.dumps(SCALES.ravel().tolist())});
    return {{outputs: model.outputs, decoded: plain(await model.run({{scale, x}})), bits: plain(await bits.run(x, scale))}};""")
  assert "error" not in got, got["error"]
  outputs, decoded, bits = got["value"]["outputs"], got["value"]["decoded"], got["value"]["bits"]
  assert [(o["name"], o["dtype"], o["shape"], o["arrayType"]) for o in outputs] == [
    ("logits", "float32", [16, 10], "Float32Array"), ("probs", "float16", [16, 10], "Float32Array"), ("label", "int32", [16], "Int32Array"),
    ("positive", "bool", [16, 64], "Uint8Array"), ("coarse", "bfloat16", [16, 10], "Float32Array"), ("scale", "float32", [16, 1], "Float32Array")]
  assert [d["type"] for d in decoded] == ["Float32Array", "Float32Array", "Int32Array", "Uint8Array", "Float32Array", "Float32Array"]
  assert [b["type"] for b in bits] == ["Float32Array", "Uint16Array", "Int32Array", "Uint8Array", "Uint16Array", "Float32Array"]
  vals = {o["name"]: np.array([float(v) for v in d["values"]]).reshape(d["shape"]) for o, d in zip(outputs, decoded)}
  np.testing.assert_array_equal(vals["scale"], scale.astype(np.float32))   # rounded in JS exactly as numpy rounds to half
  assert np.abs(vals["logits"] - want["logits"].numpy()).max() <= 1e-5
  np.testing.assert_array_equal(vals["label"], want["label"].numpy())
  np.testing.assert_array_equal(vals["positive"], want["positive"].numpy())
  for name, ulp in (("probs", 2.0**-10), ("coarse", 2.0**-7)):   # 16-bit floats, decoded: within one unit in the last place of CPU's
    cpu = want[name].numpy().astype(np.float32)
    assert np.all(np.abs(vals[name] - cpu) <= ulp * np.maximum(np.abs(cpu), 2.0**-14) + 1e-5), name
  # halfBits: the same values as their bits
  np.testing.assert_array_equal(np.array(bits[1]["values"], np.uint16).view(np.float16).astype(np.float32), vals["probs"].ravel())
  np.testing.assert_array_equal((np.array(bits[4]["values"], np.uint32) << 16).view(np.float32), vals["coarse"].ravel())

def js_errors(site, folder, setup: str, calls: list[str]) -> list[str | None]:
  """What each JS statement in `calls` throws ("TypeError: ..."), run one by one after `setup` (None: it threw nothing)."""
  got = site.run(folder, f"{setup}; const errors = []; for (const call of [{', '.join(f'async () => {{ {c} }}' for c in calls)}]) "
                         "{ try { await call(); errors.push(null); } catch (e) { errors.push(`${e.name}: ${e.message}`); } } return errors;")
  assert "error" not in got, got["error"]
  return got["value"]

def test_wrong_arrays_and_weights_fail_in_js_terms(site, mlp_export):
  other, _ = exported_model(site.root / "other")
  missing, wrong = site.url + "mlp/missing.safetensors", site.url + f"{other.relative_to(site.root).as_posix()}/weights.safetensors"
  errors = js_errors(site, mlp_export, "const model = await mod.load(), x = new Float32Array(1024), scale = new Float32Array(16)", [
    "await model.run(Array.from(x), scale)", "await model.run(x, new Float64Array(16))", "await model.run(x.subarray(0, 10), scale)",
    "await model.run(x)", "await model.run({x, scales: scale})", "await model.run({x, scale})", "await model.run(x, new Uint16Array(16))",
    f"await mod.load({{weightsUrl: {json.dumps(missing)}}})", f"await mod.load({{weightsUrl: {json.dumps(wrong)}}})",
    # a GPUDevice of the user's that allows too little, and a browser without WebGPU
    "await mod.load({device: {limits: {maxStorageBuffersPerShaderStage: 2, maxStorageBufferBindingSize: 1 << 20, maxBufferSize: 1 << 20}}})",
    "const gpu = Object.getOwnPropertyDescriptor(Navigator.prototype, 'gpu'); "
    "Object.defineProperty(Navigator.prototype, 'gpu', {get: () => undefined, configurable: true}); "
    "try { await mod.load(); } finally { Object.defineProperty(Navigator.prototype, 'gpu', gpu); }"])
  assert errors[:7] == [
    "TypeError: run(): input 'x' (float32, shape [16, 64]) must be a Float32Array, got an Array of 1024: convert it with Float32Array.from(array)",
    "TypeError: run(): input 'scale' (float16, shape [16, 1]) must be a Float32Array (or a Uint16Array of its bits), got a Float64Array of 16",
    "RangeError: run(): input 'x' has shape [16, 64]: it takes 1024 elements, got a Float32Array of 10",
    "TypeError: run(): the model takes 2 input(s) (x, scale), got 1",
    "TypeError: run(): no input is named 'scales'; the inputs are x, scale", None, None]
  assert errors[7] == f"Error: load(): fetching {missing} failed: HTTP 404 File not found"
  assert errors[8].startswith(f"Error: load(): {wrong} is not the weights file of this model.js (tensor w"), errors[8]
  assert re.fullmatch(r"Error: load\(\): the GPUDevice passed allows maxStorageBuffersPerShaderStage 2, this model needs \d+: request them "
                      r"with adapter.requestDevice\(\{requiredLimits: \{.*\}\}\)", errors[9]), errors[9]
  assert errors[10].startswith("Error: load(): WebGPU is not available here (navigator.gpu is undefined): it needs a secure context"), errors[10]

def test_symbolic_batch_out_of_range_is_a_range_error(site, digits):
  sizes = (33 * 784, 784 + 1, 0)
  errors = js_errors(site, digits[0], "const model = await mod.load()", [f"await model.run(new Float32Array({n}))" for n in sizes])
  assert errors == [("RangeError: run(): input 'x' has shape [batch, 1, 28, 28] with batch from 1 to 32: it takes 784 elements per batch, "
                     f"784 to 25088 in all, got a Float32Array of {n}") for n in sizes]

# ***** the page: served by `python -m tinygrad_webgpu serve`, run from its JSON and from a drawing *****

def test_serve_refuses_a_folder_without_a_model(tmp_path, capsys):
  from tinygrad_webgpu.__main__ import main
  with pytest.raises(SystemExit) as e: main(["serve", str(tmp_path)])
  assert e.value.code == 2 and f"{tmp_path} has no model.js: write one with tinygrad_webgpu.export(" in capsys.readouterr().err

def settled(browser, states: tuple[str, ...]) -> str:
  """The page's state (body's data-state) once it is one of `states`."""
  return browser.wait_for(f"document.body && {json.dumps(states)}.includes(document.body.dataset.state) && document.body.dataset.state", timeout=60)

def test_page_runs_the_digits_model_from_json_and_a_drawing(site, digits, tmp_path):
  import urllib.request
  path, _, _, model = digits
  proc = subprocess.Popen([sys.executable, "-m", "tinygrad_webgpu", "serve", str(path), "--port", "0"], stdout=subprocess.PIPE, text=True)
  try:
    b = site.browser
    b.send("Page.navigate", session=True, url=(path / "index.html").as_uri())   # opened as a file, the page cannot load its module
    assert settled(b, ("ready", "error")) == "error"
    assert "Serve this folder instead: python -m tinygrad_webgpu serve DIR" in b.js("document.getElementById('status').textContent")
    line = proc.stdout.readline()
    url = re.search(r"at (http://127\.0\.0\.1:\d+/) ", line).group(1)
    with urllib.request.urlopen(url + "model.js", timeout=10) as r: assert r.headers["Content-Type"] == "text/javascript"
    b.send("Page.navigate", session=True, url=url)
    assert settled(b, ("ready", "error")) == "ready", b.js("document.getElementById('status').textContent")
    b.click("#run")
    assert settled(b, ("done", "error")) == "done", b.js("document.getElementById('status').textContent")
    example = json.loads((path / "example.json").read_text())
    shown = json.loads(b.js("document.getElementById('output-output').textContent"))
    assert np.abs(np.array(shown) - np.array(example["outputs"][0]).reshape(16, 10)).max() <= 1e-5
    assert b.js("document.getElementById('argmax-output').textContent") == \
      "largest per row (argmax): " + ", ".join(map(str, np.array(shown).argmax(1)))
    # draw a stroke on the canvas: it becomes the first image of the input, and the page runs again
    b.js("document.body.dataset.state = 'drawing'")
    box = b.js("(() => { const r = document.getElementById('canvas-x').getBoundingClientRect(); return [r.x, r.y, r.width]; })()")
    assert box[2] == 280
    points = [(box[0] + 90 + 10 * i, box[1] + 60 + 18 * i) for i in range(10)]
    b.send("Input.dispatchMouseEvent", session=True, type="mousePressed", x=points[0][0], y=points[0][1], button="left", clickCount=1)
    for px, py in points[1:]: b.send("Input.dispatchMouseEvent", session=True, type="mouseMoved", x=px, y=py, button="left", buttons=1)
    b.send("Input.dispatchMouseEvent", session=True, type="mouseReleased", x=points[-1][0], y=points[-1][1], button="left", clickCount=1)
    assert settled(b, ("done", "error")) == "done", b.js("document.getElementById('status').textContent")
    drawn = np.array(json.loads(b.js("document.getElementById('input-x').value")), np.float32).reshape(16, 1, 28, 28)
    first = drawn[0, 0]
    assert first[:4].max() == 0 and first[:, :6].max() == 0 and first[6:23, 9:19].max() > 0.9, "the stroke runs from (9, 6) to (18, 22) in 28x28 pixels"
    np.testing.assert_array_equal(drawn[1:], np.array(example["inputs"][0], np.float32).reshape(16, 1, 28, 28)[1:])
    with Tensor.train(False): want = model(Tensor(drawn, device="WEBGPU")).numpy()
    shown = np.array(json.loads(b.js("document.getElementById('output-output').textContent")))
    assert np.abs(shown - want).max() <= 1e-5
    b.js("document.getElementById('canvas-x').scrollIntoView()")
    b.screenshot((ROOT / "docs" / "images" if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path) / "export-page.png")
  finally:
    proc.kill(); proc.wait()
    site.home()
