"""Kernel counts of whole training steps and blocks, scheduled on the NULL device (nothing runs): pinned so fusion never regresses."""
import pytest
from tinycore import Tensor, nn, Device
from tinycore.nn import optim
from tinycore.nn.state import get_parameters
from tinycore.runtime.device import GlobalCounters
from tinycore.uop import Ops
from tinycore.engine import run_schedule as run
import tinycore.tensor as tensor_module

@pytest.fixture(autouse=True)
def on_null(monkeypatch):
  monkeypatch.setattr(Device, "DEFAULT", "NULL")
  old, Tensor.training = Tensor.training, True   # a class property: set and restored by hand
  yield
  Tensor.training = old

def kernels(step) -> int:
  """Kernels launched by the second call (the first may realize parameters and optimizer state). Every kernel is checked
  on the way: its outputs are distinct buffers, and none of them is also bound as an input (an in-place assign reads
  through the output's own parameter)."""
  step()
  GlobalCounters.kernel_count = 0
  checked = []
  def run_checked(items, var_vals=None):
    for si in items:
      if si.ast.op is not Ops.SINK: continue
      outs, ins = [b.base for b in si.bufs[:len(si.ast.src)]], [b.base for b in si.bufs[len(si.ast.src):]]
      assert len(set(map(id, outs))) == len(outs), "two outputs of one kernel share a buffer"
      assert not set(map(id, outs)) & set(map(id, ins)), "a kernel binds a buffer it writes as an input too (an in-place read goes through the output)"
      checked.append(si)
    return run(items, var_vals)
  with pytest.MonkeyPatch.context() as m:
    m.setattr(tensor_module, "run_schedule", run_checked)
    step()
  assert len(checked) == GlobalCounters.kernel_count
  return GlobalCounters.kernel_count

def labels(n: int) -> Tensor: return Tensor.zeros(n).cast("int32").contiguous().realize()

# the counts measured when pinned; tinygrad 0.14 takes 33 (MLP + Adam), 5 (attention), 7 (matmul + layernorm + gelu)
# and 26 (CNN + SGD) for comparable steps. Kernels with several outputs took them from 27, 5, 12 and 29: layernorm's
# mean, variance and deviation in one kernel, a softmax's max and sum, a max pool and the tie count of its backward,
# the elementwise pieces of gelu's backward, and a parameter's gradient with its optimizer's updates (Adam's m, v and
# the parameter; SGD's parameter)
def test_mlp_adam_step():
  l1, l2 = nn.Linear(784, 128), nn.Linear(128, 10)
  opt = optim.Adam(get_parameters([l1, l2]), lr=1e-3)
  x, y = Tensor.empty(64, 784), labels(64)
  def step():
    opt.zero_grad()
    loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    loss.realize(*opt.schedule_step())
  assert kernels(step) <= 14

def test_attention_forward():
  q, k, v = Tensor.empty(4, 8, 64, 32), Tensor.empty(4, 8, 64, 32), Tensor.empty(4, 8, 64, 32)
  assert kernels(lambda: q.scaled_dot_product_attention(k, v).realize()) <= 4

def test_matmul_layernorm_gelu_forward_and_backward():
  w, x, ln = Tensor.empty(256, 256, requires_grad=True), Tensor.empty(64, 256, requires_grad=True), nn.LayerNorm(256)
  def step():
    w.grad = x.grad = None
    out = ln(x @ w).gelu()
    out.sum().backward()
    Tensor.realize(out, w.grad, x.grad)
  assert kernels(step) <= 7

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
  # 20 on a target with blocks (NULL's renderer is PYTHON's): c2's weight gradient, a tiled product whose 1152 outputs
  # make 3 blocks, sums its 3872 terms in 16 partials first (codegen/opt/gpu.py tile_parts); 19 on a CPU
  assert kernels(step) <= 20
