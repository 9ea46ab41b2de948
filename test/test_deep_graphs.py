"""Deep lazy graphs: chains of 10,000 ops realize (no RecursionError) and match numpy; every walk over the UOp graph is
iterative; the scheduler cuts long chains into kernels of bounded depth."""
import sys
import numpy as np
import pytest
from tinycore import Tensor, TinyJit
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops, GroupOp, Variable
from tinycore.rewrite import graph_rewrite, graph_substitute
from tinycore.uop import symbolic_rules
from tinycore.gradient import compute_gradient
from tinycore.schedule import KERNEL_DEPTH_MAX, SHARED_DEPTH_MAX
from tinycore.schedule_cache import _walk

RNG = np.random.default_rng(27)
# steps of a chain of a few ops each, per device: PYTHON interprets every kernel in numpy, so it gets smaller chains
SIZES = {"CPU": 2_500, "PYTHON": 1_000}
DEVICES = list(SIZES)
DEEP = 10_000  # far past the recursion limit, for walks that build no kernel

def test_recursion_limit_is_not_raised():
  limit = sys.getrecursionlimit()
  y = Tensor(np.ones(2, np.float32))
  for _ in range(DEEP // 2): y = y + 1.0
  assert y.numpy().tolist() == [1.0 + DEEP // 2] * 2
  assert sys.getrecursionlimit() == limit and DEEP >= 10 * limit

def _kernel_depth(ast: UOp) -> int:
  """The longest chain of ALU ops and reductions in a kernel AST."""
  depth: dict[UOp, int] = {}
  for u in ast.toposort(): depth[u] = max([depth[s] for s in u.src], default=0) + (u.op in GroupOp.Elementwise or u.op is Ops.REDUCE_AXIS)
  return depth[ast]

# ***** the two snippets, at 10,000 iterations *****

@pytest.mark.parametrize("device", DEVICES)
def test_unrolled_integrator(device):
  x = RNG.random(4, dtype=np.float32)
  y, ref = Tensor(x, device=device), x
  for _ in range(10_000):
    y = y * 1.0001 + 0.5
    ref = ref * np.float32(1.0001) + np.float32(0.5)
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6)

@pytest.mark.parametrize("device", DEVICES)
def test_loss_accumulation(device):
  n = SIZES[device] // 2 * (1 + (device == "CPU"))  # 4 ops a batch: a square, the mean's sum and scale, an add
  batches = RNG.random((n, 4), dtype=np.float32)
  total, ref = Tensor.zeros(4, device=device), np.zeros(4, np.float32)
  for b in batches:
    total = total + Tensor(b, device=device).square().mean()
    ref = ref + np.square(b).mean(dtype=np.float32)
  np.testing.assert_allclose(total.numpy(), ref, rtol=1e-5)

@pytest.mark.parametrize("device", DEVICES)
def test_chain_reading_two_new_buffers_a_step(device):
  """A kernel of the cut chain reads ~2 * KERNEL_DEPTH_MAX buffers: more than a CPU kernel call can pass (ctypes: 1024)."""
  n = 600 if device == "CPU" else 200
  a, b = RNG.random((n, 4), dtype=np.float32), RNG.random((n, 4), dtype=np.float32)
  total = Tensor.zeros(4, device=device)
  for x, y in zip(a, b): total = total + Tensor(x, device=device) * Tensor(y, device=device)
  ref = np.zeros(4, np.float32)
  for x, y in zip(a, b): ref = ref + x * y
  np.testing.assert_allclose(total.numpy(), ref, rtol=1e-5)

# ***** other deep patterns: reductions, gradients, TinyJit *****

@pytest.mark.parametrize("device", DEVICES)
def test_reductions_in_a_loop(device):
  """Each step reduces the previous step's value and uses it elementwise: the value is read by two kernels."""
  steps = SIZES[device] // 3  # 4 ops a step: the mean's sum and scale, a product, a difference
  a = RNG.random((4, 8), dtype=np.float32)
  t, ref = Tensor(a, device=device), a
  for _ in range(steps):
    t = t - t.mean(axis=1, keepdim=True) * 0.5
    ref = ref - ref.mean(axis=1, keepdims=True, dtype=np.float32) * np.float32(0.5)
  np.testing.assert_allclose(t.numpy(), ref, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("device", DEVICES)
def test_reductions_fused_into_a_chain(device):
  steps = SIZES[device] // 2
  x, w = RNG.random((3, 5), dtype=np.float32), RNG.random((3, 5), dtype=np.float32)
  xt, wt = Tensor(x, device=device), Tensor(w, device=device)
  acc, ref = Tensor.zeros(5, device=device), np.zeros(5, np.float32)
  for i in range(steps):
    c = 1.0 + (i % 5) / 10
    acc = acc * 0.5 + (xt * c - wt).max(axis=0)
    ref = ref * np.float32(0.5) + (x * np.float32(c) - w).max(axis=0)
  np.testing.assert_allclose(acc.numpy(), ref, rtol=1e-5)

@pytest.mark.parametrize("device", DEVICES)
def test_long_gradient_chain(device):
  """backward() through a chain whose derivative needs every forward value: y <- y + 0.01 sin(y)."""
  steps = SIZES[device] // 4  # 3 ops a step forward and 5 backward
  x0 = RNG.random(4, dtype=np.float32)
  x = Tensor(x0, device=device, requires_grad=True)
  y = x
  for _ in range(steps): y = y + y.sin() * 0.01
  y.sum().backward()
  ys = [x0.astype(np.float64)]
  for _ in range(steps): ys.append(ys[-1] + np.sin(ys[-1]) * 0.01)
  g = np.ones(4)
  for v in reversed(ys[:-1]): g = g * (1 + 0.01 * np.cos(v))
  np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-4)
  np.testing.assert_allclose(y.numpy(), ys[-1], rtol=1e-4)

@pytest.mark.parametrize("device", DEVICES)
def test_deep_tinyjit_capture(device):
  steps = SIZES[device]
  @TinyJit
  def f(x: Tensor) -> Tensor:
    for _ in range(steps): x = x * 0.999 + 0.25
    return x.realize()
  for _ in range(3):  # run, capture, replay
    x = RNG.random(4, dtype=np.float32)
    ref = x
    for _ in range(steps): ref = ref * np.float32(0.999) + np.float32(0.25)
    np.testing.assert_allclose(f(Tensor(x, device=device)).numpy(), ref, rtol=1e-5)
  assert f.cnt == 3 and len(f.captured) >= 2 * steps // KERNEL_DEPTH_MAX

# ***** the scheduler's cut *****

def test_long_chain_is_cut_into_kernels_of_bounded_depth():
  y = Tensor(RNG.random(4, dtype=np.float32)).realize()
  for _ in range(2_600): y = y * 1.0001 + 0.5   # 5,200 ops
  items = y.schedule()
  depths = [_kernel_depth(si.ast) for si in items]
  assert len(items) == 6 and max(depths) <= KERNEL_DEPTH_MAX, depths

def test_value_read_by_many_kernels_is_computed_once_past_shared_depth():
  t = Tensor(RNG.random((4, 8), dtype=np.float32)).realize()
  for _ in range(200): t = t - t.mean(axis=1, keepdim=True) * 0.5
  items = t.schedule()
  assert max(_kernel_depth(si.ast) for si in items) <= SHARED_DEPTH_MAX + 2  # + the mean's reduction and scale
  assert len(items) < 200 + 200 // 4  # one kernel per mean, and a cut only every few steps

def test_short_chain_stays_one_kernel():
  y = Tensor(RNG.random(4, dtype=np.float32)).realize()
  for _ in range(KERNEL_DEPTH_MAX // 2 - 1): y = y * 1.0001 + 0.5
  assert len(y.schedule()) == 1

# ***** walks over the UOp graph, without building kernels *****

def _index_chain(n: int) -> UOp:
  x = Variable("x", 0, 10)
  for i in range(n): x = x + (i % 3 + 1)
  return x
_CHAIN_SUM = sum(i % 3 + 1 for i in range(DEEP))

def test_bounds_and_simplify_of_a_deep_expression():
  e = _index_chain(DEEP)
  assert e.vmin_vmax == (_CHAIN_SUM, 10 + _CHAIN_SUM)
  s = graph_rewrite(e, symbolic_rules)
  assert s.op is Ops.ADD and s.src[1].arg == _CHAIN_SUM and s.src[0].op is Ops.DEFINE_VAR

def test_render_and_substitute_of_a_deep_expression():
  e = _index_chain(DEEP)
  assert e.render().count("+") == DEEP
  x = next(u for u in e.toposort() if u.op is Ops.DEFINE_VAR)
  assert graph_substitute(e, {x: UOp.const(dtypes.index, 1)}).simplify().arg == 1 + _CHAIN_SUM

def test_tensor_level_walks_of_a_deep_graph():
  """shape and device are filled in bottom-up; gradient and the schedule cache's key walk the whole graph."""
  x = Tensor(np.ones(3, np.float32)).realize()
  u = x.uop
  for _ in range(DEEP // 2): u = UOp(Ops.ADD, u.dtype, (UOp(Ops.MUL, u.dtype, (u, u)), u))  # built bare: no shape computed yet
  assert u.shape == (3,) and u.device == x.device
  grads = compute_gradient(u, u.const_like(1.0), {x.uop})
  assert grads[x.uop].shape == (3,)
  key, nodes, *_ = _walk([u])
  assert len(nodes) == DEEP + 1 and nodes[-1] is u  # the BUFFER, then two nodes a step
