"""Section reduce_scale: sums and means of 2^27 elements (constants, fused expressions, realized data) stay accurate."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore_conformance.target import Target

pytestmark = pytest.mark.reduce_scale

# A float sum of n terms may be off by at most REDUCE_RTOL times the sum of the terms' magnitudes. tinycore's codegen
# sums in a tree of short loops (docs/architecture.md, "Accuracy of reductions"): its error stays near 1e-6 of that
# magnitude at any n. One float32 accumulator per kernel is 5x over this bound after 2^15 terms of 0.1 (2.6e-4), and
# stops growing at 2^24 times its term (2^27 ones sum to 2^24 or, with a few accumulators, 2^26).
REDUCE_RTOL = 5e-5
N_DATA_MAX = 1 << 24   # elements of the realized random data (64 MB of float32 on the device)

def check_sum(got: float, terms: np.ndarray | None, exact: float, magnitude: float, what: str) -> None:
  err = abs(float(got) - exact)
  assert err <= REDUCE_RTOL * magnitude, (f"{what}: got {float(got)!r}, expected {exact!r} (error {err:.3g}, "
                                          f"{err / magnitude:.2g} of the terms' magnitude; tolerance {REDUCE_RTOL:g})")

@pytest.fixture
def N(device, target: Target) -> int:
  """Elements of the long sums: 2^27 (past 2^24 and 2^26, where naive accumulators stop), unless the backend declares
  capabilities["reduce_scale_elements"] (an interpreter runs fewer)."""
  return int(target.cap("reduce_scale_elements"))

@pytest.fixture
def float32(device, target: Target) -> None: target.require_dtype(dtypes.float32)

@pytest.mark.covers("reduce-scale ones")
def test_ones_sum_and_mean_exactly(float32, N):
  """Sums of ones are integers: every partial sum is exact, so the result must be too."""
  assert Tensor.ones(N).sum().item() == N, f"Tensor.ones({N}).sum() = {Tensor.ones(N).sum().item()!r}"
  assert Tensor.ones(N).mean().item() == 1.0, f"Tensor.ones({N}).mean() = {Tensor.ones(N).mean().item()!r}"
  assert Tensor.ones(N >> 13, 1 << 13).sum().item() == N, "a 2-D sum of ones over both axes is not exact"
  assert Tensor.full((N,), 0.5).sum().item() == N / 2, "a sum of 0.5s is not exact"

@pytest.mark.covers("reduce-scale constant")
def test_constant_sum(float32, N):
  """0.1 is not a float32: every addition rounds, and a long chain of them drifts."""
  term = float(np.float32(0.1))
  for n in (1 << 16, N):
    check_sum(Tensor.full((n,), 0.1).sum().item(), None, term * n, term * n, f"Tensor.full(({n},), 0.1).sum()")
    check_sum(Tensor.full((n,), 0.1).mean().item(), None, term, term, f"Tensor.full(({n},), 0.1).mean()")

@pytest.mark.covers("reduce-scale fused")
def test_fused_expression_sums(float32, N):
  """Terms computed in the reducing kernel itself: an arange, and an elementwise chain over it."""
  exact = N * (N - 1) / 2  # float32(i) for i >= 2^24 rounds half to even: the roundings cancel over the range
  check_sum(Tensor.arange(N).float().sum().item(), None, exact, exact, f"Tensor.arange({N}).float().sum()")
  r = np.arange(1000)
  terms = r.astype(np.float32) * np.float32(0.001) + np.float32(0.25)   # each residue r comes N // 1000 (+1) times
  want = float((terms.astype(np.float64) * (N // 1000 + (r < N % 1000))).sum())
  got = ((Tensor.arange(N) % 1000).float() * 0.001 + 0.25).sum().item()
  check_sum(got, None, want, want, f"((arange({N}) % 1000) * 0.001 + 0.25).sum()")

@pytest.mark.covers("reduce-scale data")
def test_realized_data_sum_and_mean(float32, N):
  """Random data from the host against numpy in float64."""
  N_DATA = min(N, N_DATA_MAX)
  x = np.random.default_rng(24).random(N_DATA, dtype=np.float32)
  t = Tensor(x).realize()
  want, mag = float(x.astype(np.float64).sum()), float(np.abs(x.astype(np.float64)).sum())
  check_sum(t.sum().item(), x, want, mag, f"sum of {N_DATA} uniform [0, 1) floats")
  check_sum(t.mean().item(), x, want / N_DATA, mag / N_DATA, f"mean of {N_DATA} uniform [0, 1) floats")
  check_sum((t * 2 - 1).sum().item(), x, float((x.astype(np.float64) * 2 - 1).sum()), float(np.abs(x.astype(np.float64) * 2 - 1).sum()),
            f"sum of {N_DATA} uniform [-1, 1) floats (fused)")

@pytest.mark.covers("reduce-scale int64")
def test_int64_sums_past_int32(device, target: Target, N):
  """Integer sums are exact in int64, far past 2^31."""
  target.require_dtype(dtypes.int64)
  assert Tensor.full((N,), 40, dtype=dtypes.int64).sum().item() == 40 * N
  assert Tensor.arange(N, dtype=dtypes.int64).sum().item() == N * (N - 1) // 2

@pytest.mark.covers("reduce-scale half")
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_half_sums_accumulate_in_float32(device, target: Target, dtype):
  """4096 ones in half: a half accumulator stops at 2048 (bfloat16 at 256); a float32 one reaches 4096."""
  target.require_dtype(dtype)
  got = Tensor.ones(4096, dtype=dtype).sum().item()
  assert got == 4096, f"Tensor.ones(4096, dtype={dtype.name}).sum() = {got!r}: half sums must accumulate in float32"
