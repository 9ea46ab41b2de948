"""Section multi: two instances of the backend: transfers between them and to and from CPU, all-reduce, a sharded matmul."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.runtime.device import Device
from tinycore.uop import Ops
from tinycore.engine import allreduce
from tinycore.multi import MultiBuffer, STRATEGIES
from tinycore_conformance.target import Target

pytestmark = pytest.mark.multi

@pytest.fixture
def pair(device, target: Target) -> tuple[str, str]:
  """Instances 0 and 1 of the backend; skipped where the machine has a single instance."""
  n = target.spec.instances()
  if n is not None and n < 2: pytest.skip(f"{target.name} declares {n} instance{'s' if n != 1 else ''} (BackendSpec.instances): multi needs 2")
  target.require_dtype(dtypes.float32)
  return (target.name, f"{target.name}:1")

def _data(*shape) -> np.ndarray: return np.random.default_rng(3).standard_normal(shape).astype(np.float32)

@pytest.mark.covers("transfer between instances")
def test_transfer_between_instances(pair):
  a = _data(257)
  t1 = Tensor(a, device=pair[0]).to(pair[1]).realize()
  assert t1.device == Device.canonicalize(pair[1])
  np.testing.assert_array_equal(t1.numpy(), a)
  np.testing.assert_array_equal((t1 * 2).to(pair[0]).numpy(), a * 2)

@pytest.mark.covers("transfer to and from CPU")
def test_transfer_to_and_from_cpu(pair):
  if "CPU" not in Device.specs: pytest.skip("the CPU backend is not installed")
  a = _data(3, 65)
  np.testing.assert_array_equal(Tensor(a, device="CPU").to(pair[1]).to("CPU").numpy(), a)
  np.testing.assert_array_equal((Tensor(a, device=pair[1]) + 1).to("CPU:1").numpy(), a + 1)

@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.covers("all-reduce")
def test_allreduce_on_the_backend(pair, strategy):
  """Every strategy gives the fixed-order sum bit for bit, (s0 + s1) on both instances, computed by kernels on the
  instances (in host memory only for a chunked strategy on a backend without buffer views)."""
  s = [_data(1001), _data(1001) * 3]
  src, dest = MultiBuffer(pair, 1001, dtypes.float32), MultiBuffer(pair, 1001, dtypes.float32)
  for b, x in zip(src.bufs, s): b.copyin(memoryview(x).cast("B"))
  where = "devices" if strategy == "naive" or Device[pair[0]].allocator.supports_offset else "host"
  assert allreduce(dest, src, Ops.ADD, strategy) == f"{strategy} on {where}"
  for b in dest.bufs: np.testing.assert_array_equal(b.numpy(), s[0] + s[1])

@pytest.mark.covers("sharded reduce")
def test_sharded_sum(pair):
  a = _data(8, 33)
  np.testing.assert_allclose(Tensor(a).shard(pair, 0).sum(0).numpy(), a.sum(0), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("axes", [(0, None), (1, 0), (None, 1)], ids=["rows", "K", "columns"])
@pytest.mark.covers("sharded matmul")
def test_sharded_matmul(pair, axes):
  a, w = _data(8, 16), _data(16, 6)
  got = Tensor(a).shard(pair, axes[0]) @ Tensor(w).shard(pair, axes[1])
  np.testing.assert_allclose(got.numpy(), a @ w, rtol=1e-4, atol=1e-4)
