"""Autograd on the lazy graph: gradients against float64 finite differences and closed forms, higher-order gradients, errors."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tinycore import Tensor, dtypes

def numeric_grad(f_np, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
  """Central differences of sum(f(x)) in float64."""
  x = x.astype(np.float64)
  g = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    xp, xm = x.copy(), x.copy()
    xp[i] += h; xm[i] -= h
    g[i] = (f_np(xp).sum() - f_np(xm).sum()) / (2 * h)
  return g

def grad_of(f, *xs: np.ndarray) -> list[np.ndarray]:
  ts = [Tensor(x.astype(np.float32), requires_grad=True) for x in xs]
  return [g.numpy() for g in f(*ts).sum().gradient(*ts)]

rng = np.random.default_rng(0)
def rand(*shape, lo=-2.0, hi=2.0): return rng.uniform(lo, hi, shape)

UNARY = {
  "exp": (lambda t: t.exp(), np.exp, (-2, 2)),
  "log": (lambda t: t.log(), np.log, (0.5, 3)),
  "sqrt": (lambda t: t.sqrt(), np.sqrt, (0.5, 3)),
  "sin": (lambda t: t.sin(), np.sin, (-3, 3)),
  "cos": (lambda t: t.cos(), np.cos, (-3, 3)),
  "tanh": (lambda t: t.tanh(), np.tanh, (-2, 2)),
  "sigmoid": (lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), (-3, 3)),
  "reciprocal": (lambda t: t.reciprocal(), lambda x: 1 / x, (0.5, 3)),
  "square": (lambda t: t.square(), np.square, (-2, 2)),
  "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0), (0.1, 2)),  # away from the kink
  "abs": (lambda t: t.abs(), np.abs, (0.1, 2)),
  "pow3": (lambda t: t ** 3, lambda x: x ** 3, (-2, 2)),
  "softplus": (lambda t: t.softplus(), lambda x: np.log1p(np.exp(x)), (-2, 2)),
  "gelu": (lambda t: t.gelu(), lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), (-2, 2)),
}

@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_finite_differences(name):
  f, f_np, (lo, hi) = UNARY[name]
  x = rand(2, 3, lo=lo, hi=hi)
  np.testing.assert_allclose(grad_of(f, x)[0], numeric_grad(f_np, x), rtol=2e-3, atol=2e-4)

BINARY = {
  "add": (lambda a, b: a + b, lambda a, b: a + b),
  "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "div": (lambda a, b: a / (b * b + 1), lambda a, b: a / (b * b + 1)),
  "maximum": (lambda a, b: a.maximum(b), np.maximum),
  "matmul": (lambda a, b: a @ b.T, lambda a, b: a @ b.T),
  "broadcast": (lambda a, b: a * b[:1], lambda a, b: a * b[:1]),
}

@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_finite_differences(name):
  f, f_np = BINARY[name]
  a, b = rand(2, 3), rand(2, 3)
  ga, gb = grad_of(f, a, b)
  np.testing.assert_allclose(ga, numeric_grad(lambda x: f_np(x, b), a), rtol=2e-3, atol=2e-4)
  np.testing.assert_allclose(gb, numeric_grad(lambda x: f_np(a, x), b), rtol=2e-3, atol=2e-4)

MOVEMENT_AND_REDUCE = {
  "reshape_permute": (lambda t: t.reshape(3, 2).permute(1, 0) * Tensor([[1., 2, 3], [4, 5, 6]]), lambda x: x.reshape(3, 2).T * np.array([[1., 2, 3], [4, 5, 6]])),
  "pad_shrink": (lambda t: t.pad((1, 2, 0, 1)).square()[1:, 1:3], lambda x: (np.pad(x, ((0, 1), (1, 2))) ** 2)[1:, 1:3]),
  "flip": (lambda t: t.flip(1) * Tensor([[1., 2, 3]]), lambda x: np.flip(x, 1) * np.array([[1., 2, 3]])),
  "expand": (lambda t: t.reshape(2, 1, 3).expand(2, 4, 3).square(), lambda x: np.broadcast_to(x.reshape(2, 1, 3), (2, 4, 3)) ** 2),
  "sum_axis": (lambda t: t.sum(1).square(), lambda x: x.sum(1) ** 2),
  "max_axis": (lambda t: t.max(0) * 3, lambda x: x.max(0) * 3),
  "mean": (lambda t: t.mean(1, keepdim=True) * t, lambda x: x.mean(1, keepdims=True) * x),
  "softmax": (lambda t: t.softmax(-1) * Tensor([[1., 2, 3]]), lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True) * np.array([[1., 2, 3]])),
  "log_softmax": (lambda t: t.log_softmax(-1) * Tensor([[1., 2, 3]]), lambda x: (x - np.log(np.exp(x).sum(-1, keepdims=True))) * np.array([[1., 2, 3]])),
  "where": (lambda t: (t > 0).where(t * 2, t * t), lambda x: np.where(x > 0, x * 2, x * x)),
}

@pytest.mark.parametrize("name", sorted(MOVEMENT_AND_REDUCE))
def test_movement_and_reduce_match_finite_differences(name):
  f, f_np = MOVEMENT_AND_REDUCE[name]
  x = rand(2, 3)
  if name == "where": x = np.where(np.abs(x) < 0.1, 0.5, x)  # away from the switch
  np.testing.assert_allclose(grad_of(f, x)[0], numeric_grad(f_np, x), rtol=2e-3, atol=2e-4)

def test_closed_forms():
  x = rand(5)
  np.testing.assert_allclose(grad_of(lambda t: t.tanh(), x)[0], 1 - np.tanh(x) ** 2, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(grad_of(lambda t: t.sigmoid(), x)[0], (s := 1 / (1 + np.exp(-x))) * (1 - s), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(grad_of(lambda t: t.sin(), x)[0], np.cos(x), rtol=1e-4, atol=1e-6)

SECOND = {
  "tanh": (lambda t: t.tanh(), lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
  "sin": (lambda t: t.sin(), lambda x: -np.sin(x)),
  "exp": (lambda t: t.exp(), np.exp),
  "cube": (lambda t: t * t * t, lambda x: 6 * x),
  "sigmoid": (lambda t: t.sigmoid(), lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s) * (1 - 2 * s)),
}

@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_derivative(name):
  f, f2 = SECOND[name]
  x = rand(6, lo=-1.5, hi=1.5)
  t = Tensor(x.astype(np.float32), requires_grad=True)
  (g,) = f(t).sum().gradient(t)
  (g2,) = g.sum().gradient(t)
  np.testing.assert_allclose(g2.numpy(), f2(x), rtol=2e-3, atol=2e-4)

def test_third_derivative_of_a_polynomial():
  t = Tensor([0.5, -1.0, 2.0], requires_grad=True)
  y = (t ** 4).sum()
  for _ in range(3): (y,) = y.gradient(t); y = y.sum() if y.shape else y
  # d3/dx3 x^4 = 24x, summed
  assert abs(y.item() - 24 * (0.5 - 1.0 + 2.0)) < 1e-3

def test_mixed_second_derivative():
  a, b = Tensor([1.5], requires_grad=True), Tensor([-0.5], requires_grad=True)
  (ga,) = (a * a * b).sum().gradient(a)   # 2ab
  (gab,) = ga.sum().gradient(b)           # 2a
  assert abs(gab.item() - 3.0) < 1e-5

def test_backward_accumulates_into_grad():
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (w * w).sum().backward()
  (w * 3).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), [5.0, 7.0, 9.0])

def test_detach_stops_the_gradient():
  w = Tensor([2.0], requires_grad=True)
  (g,) = (w * w.detach()).sum().gradient(w)
  assert g.item() == 2.0

def test_backward_on_a_realized_loss_is_a_clear_error():
  w = Tensor([1.0, 2.0], requires_grad=True)
  loss = (w * w).sum()
  loss.realize()
  with pytest.raises(RuntimeError, match="already realized"): loss.backward()

def test_backward_fills_what_requires_grad_or_every_float_tensor_where_nothing_does():
  x, w = Tensor([1.0]), Tensor([3.0], requires_grad=True)
  (x * 2).sum().backward()  # nothing sets requires_grad (tinygrad master has no such flag): every float tensor gets one
  assert x.grad.item() == 2.0
  h = x * w
  (h * 2).sum().backward()  # w requires grad: only it and what is computed from it, as in tinygrad 0.14 and PyTorch
  assert x.grad.item() == 2.0 and w.grad.item() == 2.0 and h.grad.item() == 2.0
  frozen = Tensor([4.0], requires_grad=False)
  (frozen * Tensor([5.0])).sum().backward()
  assert frozen.grad is None

def test_gradient_of_an_unused_target_is_zeros_unless_asked_to_raise():
  x, y = Tensor([1.0, 2.0]), Tensor([3.0])
  gx, gy = (x * 2).sum().gradient(x, y)   # tinygrad's: y does not change the value, its gradient is 0
  np.testing.assert_array_equal(gx.numpy(), [2.0, 2.0])
  np.testing.assert_array_equal(gy.numpy(), [0.0])
  (gc,) = (x > 1).where(x, 0).sum().gradient(x)   # through the comparison nothing flows, through the where it does
  np.testing.assert_array_equal(gc.numpy(), [0.0, 1.0])
  with pytest.raises(RuntimeError, match="not part of the graph"): (x * 2).sum().gradient(y, materialize_grads=False)

def test_gradient_of_a_non_scalar_needs_an_explicit_seed():
  w = Tensor([1.0, 2.0], requires_grad=True)
  with pytest.raises(ValueError, match="non-scalar"): (w * 2).gradient(w)
  (g,) = (w * 2).gradient(w, gradient=Tensor([1.0, 10.0]))
  np.testing.assert_allclose(g.numpy(), [2.0, 20.0])

@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(["sin", "cos", "square", "tanh", "sigmoid"]), min_size=1, max_size=4), st.booleans(),
       st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=3))
def test_random_chain_rule(bounded, then_exp, xs):
  """A random composition of smooth functions: its gradient is the product of the parts' derivatives. Each of them maps
  [-1, 1] into [-1, 1], so an exp at the end stays finite."""
  chain = bounded + ["exp"] * then_exp
  x = np.array(xs)
  def f(t):
    for name in chain: t = UNARY[name][0](t)
    return t
  def f_np(a):
    for name in chain: a = UNARY[name][1](a)
    return a
  np.testing.assert_allclose(grad_of(f, x)[0], numeric_grad(f_np, x), rtol=5e-3, atol=5e-4)

# ***** numerical stability at large |x| (float16 first: exp of 12 already overflows it) *****

def _sigmoid64(x): return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))
_GELU_C = np.sqrt(2 / np.pi)
STABLE = {  # name: (forward, float64 reference, its derivative)
  "sigmoid": (lambda t: t.sigmoid(), _sigmoid64, lambda x: _sigmoid64(x) * (1 - _sigmoid64(x))),
  "tanh": (lambda t: t.tanh(), np.tanh, lambda x: 1 - np.tanh(x) ** 2),
  "gelu": (lambda t: t.gelu(), lambda x: x * _sigmoid64(2 * _GELU_C * (x + 0.044715 * x ** 3)),
           lambda x: (s := _sigmoid64(2 * _GELU_C * (x + 0.044715 * x ** 3))) + x * s * (1 - s) * 2 * _GELU_C * (1 + 3 * 0.044715 * x ** 2)),
  "silu": (lambda t: t.silu(), lambda x: x * _sigmoid64(x), lambda x: _sigmoid64(x) * (1 + x * (1 - _sigmoid64(x)))),
}
EXTREMES = [-1e4, -300.0, -100.0, -30.0, -12.0, -5.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 5.0, 12.0, 30.0, 100.0, 300.0, 1e4]

@pytest.mark.parametrize("dtype,atol,rtol", [("float16", 2e-3, 1e-2), ("bfloat16", 2e-2, 2e-2), ("float32", 1e-6, 1e-4)], ids=lambda v: str(v))
@pytest.mark.parametrize("name", sorted(STABLE))
def test_saturating_activations_are_finite_and_accurate_at_extremes(name, dtype, atol, rtol):
  f, ref, dref = STABLE[name]
  x64 = np.array(EXTREMES)
  t = Tensor(x64.tolist(), dtype=dtype, requires_grad=True)
  y = f(t)
  (g,) = y.sum().gradient(t)
  xq = t.numpy().astype(np.float64)  # the inputs as the dtype holds them (1e4 in bfloat16 is 9984)
  out, grad = y.numpy().astype(np.float64), g.numpy().astype(np.float64)
  assert np.isfinite(out).all() and np.isfinite(grad).all(), (out, grad)
  np.testing.assert_allclose(out, ref(xq), atol=atol, rtol=rtol)
  np.testing.assert_allclose(grad, dref(xq), atol=atol, rtol=rtol)

def test_sigmoid_and_tanh_keep_their_symmetry_and_tiny_tails():
  x = Tensor([-80.0, -20.0, 20.0, 80.0], requires_grad=True)
  s, th = x.sigmoid(), x.tanh()
  # float32 holds sigmoid(-80) = 1.8e-35 and its gradient: no underflow to 0 from 1/(1+inf), no NaN from inf*0
  np.testing.assert_allclose(s.numpy()[:2], _sigmoid64(np.array([-80.0, -20.0])), rtol=1e-5)
  np.testing.assert_allclose(x.sigmoid().sum().gradient(x)[0].numpy(), _sigmoid64(np.array([-80.0, -20, 20, 80])) * _sigmoid64(np.array([80.0, 20, -20, -80])), rtol=1e-5)
  np.testing.assert_array_equal(th.numpy(), -th.numpy()[::-1])
  (g,) = x.tanh().sum().gradient(x)
  assert np.isfinite(g.numpy()).all() and g.numpy()[1] == g.numpy()[2]

@pytest.mark.parametrize("make", ["numpy", "const", "realized"])
def test_gradient_of_a_size_zero_input_is_zeros_of_its_shape(make):
  x = {"numpy": lambda: Tensor(np.zeros((0, 3), np.float32), requires_grad=True), "const": lambda: Tensor.zeros(0, 3, requires_grad=True),
       "realized": lambda: Tensor.zeros(0, 3).contiguous().realize().requires_grad_()}[make]()
  y = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  # logsumexp over an empty dim is a constant -inf: no path reaches x, yet d/dx is defined (there is nothing to differentiate)
  gx, gy = (x.logsumexp(0).maximum(0) * y + y).sum().gradient(x, y)
  assert gx.shape == (0, 3) and gx.dtype == x.dtype and gx.numpy().shape == (0, 3)
  np.testing.assert_array_equal(gy.numpy(), [1.0, 1.0, 1.0])
  (gx,) = (x.sum(0) * y).sum().gradient(x)  # reached through the graph: the same answer
  assert gx.shape == (0, 3)
  # a non-empty tensor off the graph is still an error
  with pytest.raises(RuntimeError, match="not part of the graph"):
    (x.logsumexp(0).maximum(0) * y).sum().gradient(Tensor([1.0], requires_grad=True), materialize_grads=False)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_half_matmul_gradients_accumulate_in_float32(dt):
  # a broadcast's gradient is a sum (a matmul's operand gradients): in float32, it is the half rounding of the exact sum
  rng = np.random.default_rng(0)
  x, y = rng.uniform(-2, 2, (64, 64)).astype(np.float32), rng.uniform(-2, 2, (64, 64)).astype(np.float32)
  tx, ty = Tensor(x), Tensor(y)
  gx, gy = tx.cast(dt).matmul(ty.cast(dt)).sum().gradient(tx, ty)
  exact = Tensor(x).cast(dt).float().numpy().astype(np.float64).sum(0)   # d/dy[k, j] of the sum = sum_i x[i, k]
  ulp = 2.0 ** -10 if dt == dtypes.float16 else 2.0 ** -7
  assert np.abs(gy.numpy()[:, 0] - exact).max() <= ulp * np.abs(exact).max()   # one rounding; summed in half it was 10x that
