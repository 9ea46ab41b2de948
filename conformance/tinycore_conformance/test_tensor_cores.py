"""Section tensor_cores: matmul-shaped work on each tensor core a backend declares (renderer.tensor_cores), against numpy.

Every case must run on the tensor core (its kernel holds a WMMA) and match numpy's float64 result from the same inputs
within a bound derived from the tensor core's types: the accumulator's rounding over K terms, then the result's own."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.uop import Ops
from tinycore.tensor import Tensor
from tinycore.codegen import get_program
from tinycore_conformance import oracle as O
from tinycore_conformance.target import Target, target_for

pytestmark = pytest.mark.tensor_cores

def tensor_cores(t: Target) -> list:
  return [tc for tc in t.renderer.tensor_cores if tc.dtype_in in t.dtypes and tc.dtype_out in t.dtypes]

def pytest_generate_tests(metafunc) -> None:
  if "tc" in metafunc.fixturenames:
    tcs = tensor_cores(target_for(metafunc.config))
    metafunc.parametrize("tc", tcs or [None], ids=[f"{tc.name}" for tc in tcs] or ["none"])

@pytest.fixture
def tcore(device, target: Target, tc):
  if tc is None: pytest.skip(f"{target.name} declares no tensor cores (renderer.tensor_cores)")
  return tc

EPS = {dtypes.float16: 2.0 ** -11, dtypes.bfloat16: 2.0 ** -8, dtypes.float32: 2.0 ** -24, dtypes.float64: 2.0 ** -53}

def check(device, out: Tensor, want: np.ndarray, tc, k: int, magnitude: np.ndarray, what: str) -> None:
  """`out` ran on the tensor core and is within the accumulator's error over k terms (relative to the terms'
  magnitudes) plus one rounding to its own dtype."""
  specs = [get_program(si.ast, device.renderer) for si in out.schedule() if si.ast.op is Ops.SINK]
  assert any(any(u.op is Ops.WMMA for u in s.uops) for s in specs), f"{what}: no kernel runs on the tensor core {tc.name}"
  got = out.float().numpy().astype(np.float64)
  bound = (k + 2) * EPS[tc.dtype_out] * magnitude + 2 * EPS[out.dtype] * np.abs(want) + 1e-30
  with np.errstate(invalid="ignore"):
    bad = ~((np.abs(got - want) <= bound) | (np.isnan(got) & np.isnan(want)) | (got == want))
  if bad.any():
    i = np.unravel_index(int(np.argmax(bad)), bad.shape)
    raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ; first at {tuple(int(x) for x in i)}: got {got[i]!r}, "
                         f"expected {want[i]!r} (bound {bound[i]:.3g})")

def operands(tc, *shapes, seed: str):
  rng = O.rng_for("tensor_cores", tc.name, seed)
  return [O.representable(rng.uniform(-2, 2, s), tc.dtype_in) for s in shapes]

SHAPES = {"tile multiples": lambda M, N, K: (2 * M, 4 * K, 2 * N), "odd sizes (padded)": lambda M, N, K: (M + 5, K + 3, N + 1),
          "one tile": lambda M, N, K: (M, K, N), "long sum": lambda M, N, K: (M, 32 * K, N),
          "a block's tiles (through shared memory)": lambda M, N, K: (4 * M, 4 * K, 8 * N)}

@pytest.mark.covers("tensor-core matmul")
@pytest.mark.parametrize("shape", list(SHAPES))
def test_matmul(device, tcore, shape: str):
  m, k, n = SHAPES[shape](*tcore.dims)
  a, b = operands(tcore, (m, k), (k, n), seed=shape)
  out = Tensor(a, dtype=tcore.dtype_in) @ Tensor(b, dtype=tcore.dtype_in)
  check(device, out, a.astype(np.float64) @ b.astype(np.float64), tcore, k, np.abs(a).astype(np.float64) @ np.abs(b), f"{tcore.name} matmul {m}x{k}x{n}")

@pytest.mark.covers("tensor-core batched and transposed")
@pytest.mark.parametrize("layout", ["batched", "A transposed", "B transposed", "A transposed, a block's tiles", "B transposed, a block's tiles"])
def test_batched_and_transposed(device, tcore, layout: str):
  """Each operand stored either way round; with a block's tiles of them in shared memory too (read there as stored)."""
  M, N, K = tcore.dims
  if "tiles" in layout: M, N, K = 4 * M, 8 * N, 2 * K
  if layout == "batched":
    a, b = operands(tcore, (3, M, 2 * K), (3, 2 * K, N), seed=layout)
    ta, tb, wa, wb = Tensor(a, dtype=tcore.dtype_in), Tensor(b, dtype=tcore.dtype_in), a, b
  elif layout.startswith("A transposed"):
    a, b = operands(tcore, (2 * K, M), (2 * K, N), seed=layout)
    ta, tb, wa, wb = Tensor(a, dtype=tcore.dtype_in).T, Tensor(b, dtype=tcore.dtype_in), a.T, b
  else:
    a, b = operands(tcore, (M, 2 * K), (N, 2 * K), seed=layout)
    ta, tb, wa, wb = Tensor(a, dtype=tcore.dtype_in), Tensor(b, dtype=tcore.dtype_in).T, a, b.T
  wa, wb = wa.astype(np.float64), wb.astype(np.float64)
  check(device, ta @ tb, wa @ wb, tcore, 2 * K, np.abs(wa) @ np.abs(wb), f"{tcore.name} {layout}")

@pytest.mark.covers("tensor-core float32 accumulation")
def test_accumulates_in_the_wider_type(device, tcore):
  """A sum a narrow type could not hold exactly at each step (many small terms after a large one) stays accurate."""
  M, N, K = tcore.dims
  a = np.full((M, 64 * K), 1.0)
  a[:, 0] = 256.0
  b = O.representable(np.full((64 * K, N), 1.0 / 64), tcore.dtype_in)
  out = Tensor(O.representable(a, tcore.dtype_in), dtype=tcore.dtype_in).matmul(Tensor(b, dtype=tcore.dtype_in), dtype=tcore.dtype_out)
  want = O.representable(a, tcore.dtype_in).astype(np.float64) @ b.astype(np.float64)
  check(device, out, want, tcore, 64 * K, np.abs(a) @ np.abs(b), f"{tcore.name} accumulation")

@pytest.mark.covers("tensor-core inf and nan")
def test_inf_and_nan_propagate(device, tcore):
  M, N, K = tcore.dims
  a, b = operands(tcore, (M, K), (K, N), seed="specials")
  a[0, 0], a[1, 1], b[2, 3] = np.inf, np.nan, -np.inf
  with np.errstate(invalid="ignore"):
    want = a.astype(np.float64) @ b.astype(np.float64)
  out = Tensor(a, dtype=tcore.dtype_in) @ Tensor(b, dtype=tcore.dtype_in)
  check(device, out, want, tcore, K, np.nan_to_num(np.abs(a).astype(np.float64) @ np.abs(b), posinf=0.0), f"{tcore.name} with inf and nan")

@pytest.mark.covers("tensor-core convolution")
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_convolution(device, tcore, direction: str):
  x, w = operands(tcore, (2, 16, 6, 6), (16, 16, 3, 3), seed=direction)
  tx = Tensor(x, dtype=tcore.dtype_in, requires_grad=True)
  tw = Tensor(w, dtype=tcore.dtype_in, requires_grad=True)
  out = tx.conv2d(tw)
  want = O.conv2d(x.astype(np.float64), w.astype(np.float64))
  if direction == "forward":
    check(device, out, want, tcore, 16 * 9, O.conv2d(np.abs(x).astype(np.float64), np.abs(w).astype(np.float64)), f"{tcore.name} conv2d forward")
    return
  g = operands(tcore, want.shape, seed="grad")[0]
  (dw,) = (out * Tensor(g, dtype=tcore.dtype_in)).sum().gradient(tw)
  # dL/dw[o, c, i, j] = sum over batch and positions of g[b, o, y, x] * x[b, c, y + i, x + j]
  want_dw = np.einsum("boyx,bcyxij->ocij", g.astype(np.float64), np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3)))
  mag = np.einsum("boyx,bcyxij->ocij", np.abs(g).astype(np.float64), np.lib.stride_tricks.sliding_window_view(np.abs(x).astype(np.float64), (3, 3), axis=(2, 3)))
  check(device, dw, want_dw, tcore, 2 * 16, mag, f"{tcore.name} conv2d weight gradient")
