"""Tensors whose shapes hold bound Variables: they realize, read back at the bound size, and share one kernel per Variable."""
import numpy as np
import pytest
from tinycore import Tensor, Variable, TinyJit
from tinycore import engine

N = Variable("n", 1, 10)
X = np.arange(30, dtype=np.float32).reshape(10, 3)

@pytest.mark.parametrize("val", [1, 4, 10])
def test_shrink_elementwise_and_reduce(val):
  a = Tensor(X).shrink(((0, N.bind(val)), (0, 3)))
  np.testing.assert_allclose((a * 2 + 1).numpy(), X[:val] * 2 + 1)
  np.testing.assert_allclose(a.sum(0).numpy(), X[:val].sum(0))
  np.testing.assert_allclose(a.sum(1).numpy(), X[:val].sum(1))
  np.testing.assert_allclose(a.mean().item(), X[:val].mean(), rtol=1e-6)

@pytest.mark.parametrize("val", [2, 7])
def test_symbolic_inner_dimension(val):
  # the variable is the last axis: the buffer layout must follow the bound size, not the maximum
  y = np.arange(30, dtype=np.float32).reshape(3, 10)
  b = Tensor(y).shrink(((0, 3), (0, N.bind(val))))
  r = (b + 1).contiguous()
  np.testing.assert_allclose(r.numpy(), y[:, :val] + 1)
  np.testing.assert_allclose(r.exp().sum(1).numpy(), np.exp(y[:, :val] + 1).sum(1), rtol=1e-5)

def test_pad_then_shrink_gives_back_the_same_symbolic_dimension():
  # movement shapes are simplified with the symbolic rules (not bounds alone): n+1+2-1-2 is the node n itself
  a = Tensor(X).shrink(((0, N.bind(6)), (0, 3)))
  b = a.pad(((1, 2), None))
  c = b.shrink(((1, b.shape[0] - 2), None))
  assert c.shape[0] is a.shape[0]
  np.testing.assert_allclose((a + c).numpy(), X[:6] * 2)

def test_matmul_over_a_symbolic_dimension():
  a = Tensor(X).shrink(((0, N.bind(6)), (0, 3)))
  np.testing.assert_allclose((a.T @ a).numpy(), X[:6].T @ X[:6])

def test_reshape_with_symbolic_size():
  v = N.bind(4)
  c = Tensor.arange(30).reshape(10, 3).shrink(((0, v), None)).reshape(v * 3)
  np.testing.assert_equal(c.numpy(), np.arange(12))

def test_one_kernel_for_every_bound_value():
  def f(val): return (Tensor(X).shrink(((0, N.bind(val)), (0, 3))) * 3).sum(1).numpy()
  f(2)
  before = engine.stats["loaded"]
  for val in (3, 5, 9): np.testing.assert_allclose(f(val), (X[:val] * 3).sum(1))
  assert engine.stats["loaded"] == before, "a new bound value compiled a new kernel"

def test_jit_replays_with_new_sizes():
  src = Tensor(X).realize()
  @TinyJit
  def f(v): return (src.shrink(((0, v), (0, 3))) + 1).sum(1).contiguous()
  for val in (3, 5, 2, 8, 1):
    out = f(N.bind(val))
    np.testing.assert_allclose(out.numpy()[:val], X[:val].sum(1) + 3)

def test_unbound_variable_has_no_data():
  a = Tensor(X).shrink(((0, N), (0, 3)))
  with pytest.raises(ValueError, match="unbound"): a.numpy()

def test_symbolic_int_as_a_scalar():
  v = N.bind(5)
  np.testing.assert_equal((Tensor([1, 2]) + v * 2).numpy(), [11, 12])
