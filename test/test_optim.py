"""Optimizers' first steps against numpy implementations of their update rules; one schedule per step; LR schedules."""
import math
import numpy as np
import pytest
import tinycore.tensor
from tinycore import Tensor, nn, dtypes
from tinycore.nn import optim
from tinycore.uop import bf16_to_f32, f32_to_bf16

RNG = np.random.default_rng(1)
W0 = [RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal(5).astype(np.float32)]
C = [RNG.standard_normal(w.shape).astype(np.float32) for w in W0]
D = [RNG.uniform(0.5, 2, w.shape).astype(np.float32) for w in W0]

def loss_of(ws):
  """sum(C*w + D*w^2/2): gradient C + D*w, so every step sees a new gradient."""
  return sum(((w * Tensor(c)) + Tensor(d) * w * w * 0.5).sum() for w, c, d in zip(ws, C, D))

def np_sgd(lr, momentum=0.0, weight_decay=0.0, nesterov=False, classic=False):
  b = [np.zeros_like(w, np.float64) for w in W0]
  def update(i, w, g):
    g = g + weight_decay * w
    if momentum:
      if classic: g = g * lr
      b[i] = momentum * b[i] + g
      g = g + momentum * b[i] if nesterov else b[i]
    return w - (g if classic and momentum else lr * g)
  return update

def np_lamb(lr, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0, adam=False):
  m, v, t = [np.zeros_like(w, np.float64) for w in W0], [np.zeros_like(w, np.float64) for w in W0], [0]
  def update(i, w, g):
    if i == 0: t[0] += 1
    m[i] = b1 * m[i] + (1 - b1) * g
    v[i] = b2 * v[i] + (1 - b2) * g * g
    up = (m[i] / (1 - b1 ** t[0])) / (np.sqrt(v[i] / (1 - b2 ** t[0])) + eps) + weight_decay * w
    r = 1.0 if adam else (np.linalg.norm(w) / np.linalg.norm(up) if np.linalg.norm(w) > 0 and np.linalg.norm(up) > 0 else 1.0)
    return w - lr * r * up
  return update

# each case: the optimizer, and a factory of its numpy reference (whose state is fresh for every test)
CASES = {
  "sgd": (lambda p: optim.SGD(p, lr=0.1), lambda: np_sgd(0.1)),
  "sgd_wd": (lambda p: optim.SGD(p, lr=0.1, weight_decay=0.3), lambda: np_sgd(0.1, weight_decay=0.3)),
  "momentum": (lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda: np_sgd(0.1, 0.9)),
  "nesterov_wd": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, weight_decay=0.1, nesterov=True), lambda: np_sgd(0.05, 0.8, 0.1, True)),
  "classic": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, classic=True), lambda: np_sgd(0.05, 0.8, classic=True)),
  "adam": (lambda p: optim.Adam(p, lr=0.01), lambda: np_lamb(0.01, eps=1e-8, adam=True)),
  "adamw": (lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.2), lambda: np_lamb(0.01, eps=1e-8, weight_decay=0.2, adam=True)),
  "lamb": (lambda p: optim.LAMB(p, lr=0.02, weight_decay=0.1), lambda: np_lamb(0.02, weight_decay=0.1)),
}

@pytest.mark.parametrize("name", CASES)
def test_first_steps_match_numpy(name):
  make, np_update = CASES[name][0], CASES[name][1]()
  ws = [Tensor(w, requires_grad=True) for w in W0]
  opt = make(ws)
  ref = [w.astype(np.float64) for w in W0]
  for _ in range(3):
    opt.zero_grad()
    loss_of(ws).backward()
    opt.step()
    ref = [np_update(i, w, C[i] + D[i] * w) for i, w in enumerate(ref)]
    for got, want in zip(ws, ref): np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)

def rounded(x: np.ndarray, dtype) -> np.ndarray:
  return bf16_to_f32(f32_to_bf16(x)).astype(np.float64) if dtype == dtypes.bfloat16 else x.astype(np.float16).astype(np.float64)

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", CASES)
def test_half_parameters_step_their_float32_masters(name, dtype):
  """Half parameters: the optimizer updates a float32 master of each (weight decay and trust ratios read it too), and the
  parameter is the master rounded. numpy does the same with the same roundings: the parameter, and its gradient."""
  make, np_update = CASES[name][0], CASES[name][1]()
  ws = [Tensor(w, requires_grad=True).cast(dtype).realize() for w in W0]
  for w in ws: w.requires_grad = True
  opt = make(ws)
  assert [m.dtype for m in opt.masters] == [dtypes.float32] * 2 and [w.dtype for w in ws] == [dtype] * 2
  ref = [rounded(w, dtype) for w in W0]
  for _ in range(3):
    opt.zero_grad()
    loss_of(ws).backward()
    opt.step()
    ref = [np_update(i, w, rounded((C[i] + D[i] * rounded(w, dtype)).astype(np.float32), dtype)) for i, w in enumerate(ref)]
    for m, w, want in zip(opt.masters, ws, ref):
      np.testing.assert_allclose(m.numpy(), want, rtol=1e-4, atol=1e-5)
      np.testing.assert_array_equal(w.float().numpy(), rounded(m.numpy(), dtype))

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("make", [lambda p: optim.SGD(p, lr=1e-4), lambda p: optim.Adam(p, lr=1e-4)], ids=["sgd", "adam"])
def test_steps_below_a_half_weights_spacing_add_up(make, dtype):
  """30 steps of 1e-4 from 1.0: each is below half the spacing of 16-bit floats under 1 (2^-12 in float16, 2^-9 in
  bfloat16), so a parameter updated in its own dtype would never move; the float32 master reaches 0.997."""
  assert (Tensor([1.0], dtype=dtype) - 1e-4).cast(dtype).item() == 1.0   # what updating in the parameter's dtype does
  w = Tensor([1.0, -2.0], dtype=dtype, requires_grad=True)
  opt = make([w])
  for _ in range(30):
    opt.zero_grad()
    w.sum().backward()
    opt.step()
  np.testing.assert_allclose(opt.masters[0].numpy(), [0.997, -2.003], rtol=1e-5)
  np.testing.assert_array_equal(w.float().numpy(), rounded(np.array([0.997, -2.003], np.float32), dtype))

def test_a_step_is_one_schedule(monkeypatch):
  ws = [Tensor(w, requires_grad=True) for w in W0]
  opt = optim.Adam(ws)
  calls = []
  real = tinycore.tensor.create_schedule
  monkeypatch.setattr(tinycore.tensor, "create_schedule", lambda outs: calls.append(len(outs)) or real(outs))
  loss = loss_of(ws)
  loss.backward()
  opt.step()
  # gradients, the step counters, both moments and the parameters of both tensors, and the loss backward() was called
  # on (a pending effect: it runs before the parameters it reads are overwritten): all in one schedule
  assert calls == [2 + 2 + 2 + 2 + 2 + 1]  # one create_schedule call
  assert loss.uop.is_realized

@pytest.mark.parametrize("loss_first", [True, False])
def test_mlp_step_reads_old_weights(loss_first):
  """Each layer's gradient reads the other layer's weights: the step must not overwrite them before they are read."""
  x, w1, w2 = RNG.standard_normal((4, 5)), RNG.standard_normal((6, 5)), RNG.standard_normal((3, 6))
  l1, l2 = nn.Linear(5, 6, bias=False), nn.Linear(6, 3, bias=False)
  l1.weight, l2.weight = Tensor(w1.astype(np.float32)), Tensor(w2.astype(np.float32))
  opt = optim.SGD([l1.weight, l2.weight], lr=0.01)
  loss = l2(l1(Tensor(x.astype(np.float32))).relu()).square().sum()
  loss.backward()
  step = opt.schedule_step()
  Tensor.realize_all(loss, *step) if loss_first else Tensor.realize_all(*step[::-1], loss)
  h = x @ w1.T
  out = np.maximum(h, 0) @ w2.T
  g_out = 2 * out
  g2, g1 = g_out.T @ np.maximum(h, 0), ((g_out @ w2) * (h > 0)).T @ x
  assert loss.item() == pytest.approx((out ** 2).sum(), rel=1e-5)
  np.testing.assert_allclose(l1.weight.numpy(), w1 - 0.01 * g1, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(l2.weight.numpy(), w2 - 0.01 * g2, rtol=1e-5, atol=1e-5)

def test_equal_lazy_parameters_get_their_own_buffers():
  a, b = Tensor.ones(3), Tensor.ones(3)  # one hash-consed graph: realized together they would share a buffer
  Tensor.realize_all(a, b)
  opt = optim.SGD([a, b], lr=1.0)
  (a * Tensor([1.0, 2.0, 3.0]) + b * 10).sum().backward()
  opt.step()
  np.testing.assert_allclose(a.numpy(), [0, -1, -2])
  np.testing.assert_allclose(b.numpy(), [-9, -9, -9])

def test_batchnorm_running_stats_are_realized_by_the_step():
  bn = nn.BatchNorm(2)
  opt = optim.SGD(nn.state.get_parameters(bn), lr=0.1)
  assert len(opt.params) == 2 and len(opt.buffers) == 3  # running_mean, running_var, num_batches_tracked
  x = RNG.standard_normal((8, 2)).astype(np.float32)
  Tensor.training = True
  try:
    bn(Tensor(x)).sum().backward()
    opt.step()
  finally: Tensor.training = False
  assert all(t.uop.is_realized for t in opt.buffers)
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-5, atol=1e-6)

def test_optimizer_group_steps_together():
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
  group = optim.OptimizerGroup(optim.SGD([a], lr=0.1), optim.SGD([b], lr=1.0))
  assert group[1].params == [b]
  (a.sum() + (b * b).sum()).backward()
  group.step()
  np.testing.assert_allclose(a.numpy(), [0.9, 1.9])
  np.testing.assert_allclose(b.numpy(), [-3.0])
  group.zero_grad()
  assert a.grad is None and b.grad is None

def test_errors_are_clear():
  with pytest.raises(ValueError, match="requires grad"): optim.SGD([Tensor([1.0], requires_grad=False)])
  with pytest.raises(ValueError, match="nesterov"): optim.SGD([Tensor([1.0])], nesterov=True)
  a, unused = Tensor([1.0], requires_grad=True), Tensor([2.0, 3.0], requires_grad=True)
  opt = optim.Adam([a, unused])
  (a * 2).sum().backward()
  with pytest.raises(RuntimeError, match=r"#1 \(2,\) have no gradient"): opt.step()

def lrs(sched, n):
  out = [sched.optimizers[0].lr.item()]
  for _ in range(n):
    sched.step()
    out.append(sched.optimizers[0].lr.item())
  return out

def test_lr_schedules():
  p = [Tensor([1.0], requires_grad=True)]
  np.testing.assert_allclose(lrs(optim.StepLR(optim.SGD(p, lr=1.0), step_size=2, gamma=0.5), 5), [1, 1, 0.5, 0.5, 0.25, 0.25])
  np.testing.assert_allclose(lrs(optim.LinearWarmupLR(optim.SGD(p, lr=2.0), warmup_steps=4), 5), [0, 0.5, 1, 1.5, 2, 2])
  cos = lrs(optim.CosineAnnealingLR(optim.SGD(p, lr=1.0), T_max=6, eta_min=0.1, warmup_steps=2, start_factor=0.5), 7)
  want = [0.5, 0.75] + [0.1 + 0.9 * (1 + math.cos(math.pi * k / 4)) / 2 for k in range(5)] + [0.1]
  np.testing.assert_allclose(cos, want, rtol=1e-6)
  with pytest.raises(ValueError): optim.CosineAnnealingLR(optim.SGD(p), T_max=2, warmup_steps=2)

def test_schedule_changes_the_step():
  w = Tensor([0.0], requires_grad=True)
  opt = optim.SGD([w], lr=1.0)
  sched = optim.StepLR(opt, step_size=1, gamma=0.1)
  for _ in range(3):
    opt.zero_grad()
    (w * 1.0).sum().backward()
    opt.step()
    sched.step()
  np.testing.assert_allclose(w.numpy(), [-(1 + 0.1 + 0.01)], rtol=1e-6)

def test_tinygrads_device_and_fused_arguments_are_accepted():
  w = Tensor([1.0, 2.0], requires_grad=True)
  for opt in (optim.SGD([w], 0.1, 0.9, 0.0, False, False, "CPU", True), optim.Adam([w], device=w.device, fused=False),
              optim.LARS([w], 0.1, 0.9, 1e-4, 0, None, True), optim.Muon([w], fused=True), optim.LAMB([w], device=None)):
    assert opt.device == w.device
  with pytest.raises(ValueError, match="parameters' device"): optim.SGD([w], device="PYTHON")
  with pytest.raises(NotImplementedError, match="Muon"): optim.LARS([w], 0.1, 0.9, 0.0, 5, (3.4445, -4.775, 2.0315))
