"""Kernel counts of whole training steps and blocks, scheduled on the NULL device (nothing runs): pinned so fusion never regresses."""
import pytest
from tinycore import Tensor, nn, Device
from tinycore.nn import optim
from tinycore.nn.state import get_parameters
from tinycore.runtime.device import GlobalCounters

@pytest.fixture(autouse=True)
def on_null(monkeypatch):
  monkeypatch.setattr(Device, "DEFAULT", "NULL")
  old, Tensor.training = Tensor.training, True   # a class property: set and restored by hand
  yield
  Tensor.training = old

def kernels(step) -> int:
  """Kernels launched by the second call (the first may realize parameters and optimizer state)."""
  step()
  GlobalCounters.kernel_count = 0
  step()
  return GlobalCounters.kernel_count

def labels(n: int) -> Tensor: return Tensor.zeros(n).cast("int32").contiguous().realize()

# the counts measured when pinned; tinygrad 0.14 takes 33 (MLP + Adam), 5 (attention), 7 (matmul + layernorm + gelu)
# and 26 (CNN + SGD) for comparable steps
def test_mlp_adam_step():
  l1, l2 = nn.Linear(784, 128), nn.Linear(128, 10)
  opt = optim.Adam(get_parameters([l1, l2]), lr=1e-3)
  x, y = Tensor.empty(64, 784), labels(64)
  def step():
    opt.zero_grad()
    loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    loss.realize(*opt.schedule_step())
  assert kernels(step) <= 27

def test_attention_forward():
  q, k, v = Tensor.empty(4, 8, 64, 32), Tensor.empty(4, 8, 64, 32), Tensor.empty(4, 8, 64, 32)
  assert kernels(lambda: q.scaled_dot_product_attention(k, v).realize()) <= 5

def test_matmul_layernorm_gelu_forward_and_backward():
  w, x, ln = Tensor.empty(256, 256, requires_grad=True), Tensor.empty(64, 256, requires_grad=True), nn.LayerNorm(256)
  def step():
    w.grad = x.grad = None
    out = ln(x @ w).gelu()
    out.sum().backward()
    Tensor.realize(out, w.grad, x.grad)
  assert kernels(step) <= 12

def test_two_conv_cnn_sgd_step():
  c1, c2, lin = nn.Conv2d(1, 8, 3), nn.Conv2d(8, 16, 3), nn.Linear(16 * 5 * 5, 10)
  opt = optim.SGD(get_parameters([c1, c2, lin]), lr=0.01)
  x, y = Tensor.empty(32, 1, 28, 28), labels(32)
  def step():
    opt.zero_grad()
    h = c2(c1(x).relu().max_pool2d()).relu().max_pool2d()
    loss = lin(h.flatten(1)).sparse_categorical_crossentropy(y)
    loss.backward()
    loss.realize(*opt.schedule_step())
  assert kernels(step) <= 29
