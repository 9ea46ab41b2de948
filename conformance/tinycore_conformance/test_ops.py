"""Section ops: every Tensor op, forward and backward, against numpy over the declared dtypes and awkward shapes."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore_conformance import oracle as O
from tinycore_conformance.checks import check_forward, check_backward
from tinycore_conformance.optable import OPS, BIG_CASES, cases_of
from tinycore_conformance.target import Target, target_for, dtype_name

pytestmark = pytest.mark.ops

def primary_dtype(op, t: Target):
  """The dtype an op's shape cases run in: the backend's main float, else int, else unsigned, else bool."""
  for kind, dt in (("f", t.default_float), ("i", t.default_int), ("u", t.primary(dtypes.uint32, dtypes.uint8, dtypes.uint16, dtypes.uint64)),
                   ("b", t.primary(dtypes.bool))):
    if kind in op.kinds and dt is not None: return dt
  return None

def params_for(name: str, t: Target) -> list:
  if name == "test_forward": return [(op, cases_of(op)[0], dt) for op in OPS for dt in t.dtypes if op.accepts(dt)]
  if name == "test_backward": return [(op, cases_of(op)[0], dt) for op in OPS if op.grad for dt in t.floats if op.accepts(dt)]
  if name == "test_forward_shapes": return [(op, c, primary_dtype(op, t)) for op in OPS if primary_dtype(op, t) for c in cases_of(op)[1:]]
  if name == "test_backward_shapes":  # views and broadcasting: where gradients are reshaped, reduced and re-indexed
    return [(op, c, t.default_float) for op in OPS if op.grad and t.default_float for c in cases_of(op)[1:]
            if not c.name.startswith("empty") and c.name not in ("scalar", "rank4") + op.grad_skip]
  if name == "test_big": return [(op, BIG_CASES[op.family], primary_dtype(op, t)) for op in OPS if op.big and primary_dtype(op, t)]
  raise KeyError(name)

@pytest.fixture
def inputs_declared(target, op, dtype) -> None:
  """Ops with inputs of a fixed dtype (int32 class labels, bool conditions) need that dtype declared too."""
  if op.input_dtypes is not None: target.require_dtype(*op.input_dtypes(dtype))

def pytest_generate_tests(metafunc) -> None:
  if "op" not in metafunc.fixturenames: return
  params = params_for(metafunc.function.__name__, target_for(metafunc.config))
  ids = [f"{op.name}-{case.name}-{dtype_name(dt)}" for op, case, dt in params]
  metafunc.parametrize(("op", "case", "dtype"), params, ids=ids)

def test_forward(device, target, inputs_declared, op, case, dtype):
  """Each op in each declared dtype it accepts, on a small odd shape."""
  check_forward(op, case, dtype, target.cap("inf_nan"))

def test_forward_shapes(device, target, inputs_declared, op, case, dtype):
  """Scalars, size-0 dims, broadcasting, Python scalar operands, non-contiguous and expanded inputs."""
  check_forward(op, case, dtype, target.cap("inf_nan"))

def test_backward(device, target, inputs_declared, op, case, dtype):
  """Gradients of (op(x) * w).sum() against central differences of the numpy reference, in every declared float dtype."""
  check_backward(op, case, dtype)

def test_backward_shapes(device, target, inputs_declared, op, case, dtype):
  check_backward(op, case, dtype)

def test_big(device, target, inputs_declared, op, case, dtype):
  """Past 2**16 elements: launch sizes beyond 16-bit grid limits must still cover every element."""
  check_forward(op, case, dtype, target.cap("inf_nan"))

@pytest.mark.covers("random bits")
def test_random_bits_match_threefry(device, target: Target):
  """Tensor.rand's generator (threefry2x32-20, all uint32 adds, rotates and xors) gives the documented words bit for bit,
  and rand() built on it stays in [0, 1) and repeats under the same seed."""
  target.require_dtype(dtypes.uint32, dtypes.float32)
  from tinycore.tensor import Tensor
  Tensor.manual_seed(20240917)
  got = Tensor._random_bits(70001, None).numpy()   # past 2**16 words: the counter must not wrap or truncate
  want = O.threefry_random_bits(70001, 20240917, 1)
  bad = np.flatnonzero(got != want)
  assert bad.size == 0, f"{bad.size} of {want.size} random words differ, first at {bad[0] if bad.size else -1}: got {got[bad[:1]]}, expected {want[bad[:1]]}"
  Tensor.manual_seed(7)
  a = Tensor.rand(4000).numpy()
  Tensor.manual_seed(7)
  b = Tensor.rand(4000).numpy()
  assert a.tobytes() == b.tobytes(), "Tensor.rand with the same seed gave different numbers"
  assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.03, f"rand: min {a.min()}, max {a.max()}, mean {a.mean()}"
