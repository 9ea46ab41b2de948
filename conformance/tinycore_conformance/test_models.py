"""Section models: a small MLP and convnet train a few SGD steps like their numpy twins, and train identically twice."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore_conformance import oracle as O
from tinycore_conformance.target import Target
from tinycore_conformance.tolerances import assert_close

pytestmark = pytest.mark.models

STEPS, LR = 4, 0.5

@pytest.fixture
def f32(device, target: Target) -> None:
  """The models train in float32 with int32 labels."""
  target.require_dtype(dtypes.float32, dtypes.int32)

# ***** MLP: x -> relu(x W1 + b1) W2 + b2 -> softmax cross-entropy, trained with Tensor.gradient and plain updates *****

def mlp_data():
  rng = O.rng_for("mlp")
  x = rng.standard_normal((16, 4)).astype(np.float32)
  y = rng.integers(0, 3, 16)
  params = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((4, 8), (8,), (8, 3), (3,))]
  return x, y, params

def mlp_numpy(x, y, params):
  """The same model and SGD in float64 numpy, backpropagated by hand. Returns the losses and the final weights."""
  w1, b1, w2, b2 = [p.astype(np.float64) for p in params]
  x, hot, losses = x.astype(np.float64), np.eye(3)[y], []
  for _ in range(STEPS):
    pre = x @ w1 + b1
    h = np.maximum(pre, 0)
    logits = h @ w2 + b2
    losses.append(-np.mean(np.sum(O.log_softmax(logits, -1) * hot, -1)))
    d_logits = (O.softmax(logits, -1) - hot) / len(x)
    d_h = (d_logits @ w2.T) * (pre > 0)
    grads = [x.T @ d_h, d_h.sum(0), h.T @ d_logits, d_logits.sum(0)]
    w1, b1, w2, b2 = [p - LR * g for p, g in zip((w1, b1, w2, b2), grads)]
  return losses, [w1, b1, w2, b2]

def mlp_tinycore(x, hot, params: list[Tensor]):
  losses = []
  for _ in range(STEPS):
    w1, b1, w2, b2 = params
    logits = (x @ w1 + b1).relu() @ w2 + b2
    loss = -(logits.log_softmax(-1) * hot).sum(-1).mean()
    grads = loss.gradient(*params)
    new = [(p - LR * g) for p, g in zip(params, grads)]
    Tensor.realize_all(loss, *new)
    losses.append(loss.item())
    params = new
    for p in params: p.requires_grad = True
  return losses, [p.numpy() for p in params]

@pytest.mark.covers("mlp training")
def test_mlp_trains_like_numpy(f32):
  x, y, params = mlp_data()
  want_losses, want_params = mlp_numpy(x, y, params)
  losses, got = mlp_tinycore(Tensor(x), Tensor(np.eye(3, dtype=np.float32)[y]), [Tensor(p, requires_grad=True) for p in params])
  assert_close(np.array(losses), np.array(want_losses), "float32", "MLP loss per step", kind="grad")
  assert losses[-1] < losses[0], f"the loss did not go down: {losses}"
  for name, g, w in zip(("W1", "b1", "W2", "b2"), got, want_params): assert_close(g, w, "float32", f"MLP {name} after {STEPS} steps", kind="grad")

@pytest.mark.covers("deterministic training")
def test_same_seed_same_training(f32):
  """Weights drawn from Tensor.manual_seed, trained twice: bit-identical losses and weights."""
  x, y, _ = mlp_data()
  def run():
    Tensor.manual_seed(1234)
    params = [Tensor.kaiming_uniform(4, 8), Tensor.zeros(8).contiguous(), Tensor.kaiming_uniform(8, 3), Tensor.zeros(3).contiguous()]
    for p in params: p.requires_grad = True
    return mlp_tinycore(Tensor(x), Tensor(np.eye(3, dtype=np.float32)[y]), params)
  (l1, p1), (l2, p2) = run(), run()
  assert l1 == l2, f"two runs with the same seed gave different losses: {l1} vs {l2}"
  for a, b in zip(p1, p2): assert a.tobytes() == b.tobytes(), "two runs with the same seed gave different weights"
  assert not np.array_equal(p1[0], np.zeros_like(p1[0])), "kaiming_uniform produced zeros"

# ***** convnet: conv 3x3 -> relu -> linear -> cross-entropy, trained with backward() and nn.optim.SGD *****

def convnet_data():
  rng = O.rng_for("convnet")
  x = rng.standard_normal((4, 1, 6, 6)).astype(np.float32)
  y = rng.integers(0, 2, 4)
  params = [(rng.standard_normal((3, 1, 3, 3)) * 0.5).astype(np.float32), (rng.standard_normal(3) * 0.1).astype(np.float32),
            (rng.standard_normal((48, 2)) * 0.2).astype(np.float32), np.zeros(2, np.float32)]
  return x, y, params

def convnet_numpy(x, y, params):
  w, b, w3, b3 = [p.astype(np.float64) for p in params]
  x, hot, losses = x.astype(np.float64), np.eye(2)[y], []
  patches = np.stack([x[:, 0, i:i + 4, j:j + 4] for i in range(3) for j in range(3)], -1)  # (n, 4, 4, 9)
  for _ in range(STEPS):
    conv = O.conv2d(x, w, b)
    act = np.maximum(conv, 0)
    flat = act.reshape(len(x), -1)
    logits = flat @ w3 + b3
    losses.append(-np.mean(np.sum(O.log_softmax(logits, -1) * hot, -1)))
    d_logits = (O.softmax(logits, -1) - hot) / len(x)
    d_conv = (d_logits @ w3.T).reshape(conv.shape) * (conv > 0)
    d_w = np.einsum("nohw,nhwk->ok", d_conv, patches).reshape(w.shape)
    grads = [d_w, d_conv.sum((0, 2, 3)), flat.T @ d_logits, d_logits.sum(0)]
    w, b, w3, b3 = [p - LR * g for p, g in zip((w, b, w3, b3), grads)]
  return losses, [w, b, w3, b3]

@pytest.mark.covers("convnet training")
def test_convnet_trains_like_numpy(f32):
  from tinycore.nn.optim import SGD
  x, y, params = convnet_data()
  want_losses, want_params = convnet_numpy(x, y, params)
  ps = [Tensor(p, requires_grad=True) for p in params]
  opt = SGD(ps, lr=LR)
  xt, yt, losses = Tensor(x), Tensor(y.astype(np.int32)), []
  for _ in range(STEPS):
    opt.zero_grad()
    w, b, w3, b3 = ps
    logits = xt.conv2d(w, b).relu().reshape(4, -1) @ w3 + b3
    loss = logits.sparse_categorical_crossentropy(yt)
    loss.backward()
    Tensor.realize_all(loss, *opt.schedule_step())
    losses.append(loss.item())
  assert_close(np.array(losses), np.array(want_losses), "float32", "convnet loss per step", kind="grad")
  for name, p, w in zip(("conv W", "conv b", "linear W", "linear b"), ps, want_params):
    assert_close(p.numpy(), w, "float32", f"convnet {name} after {STEPS} SGD steps", kind="grad")
