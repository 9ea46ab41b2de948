"""Sharded tensors on CPU:0..3 and PYTHON: every op compared with the same program on one device."""
import functools, os
import numpy as np
import pytest
from tinycore import Tensor, nn, dtypes, TinyJit
from tinycore.nn import optim
from tinycore.nn.state import get_parameters
from tinycore.uop import Ops
from tinycore.engine import allreduce
from tinycore.multi import multi_pm, MultiBuffer, STRATEGIES, pick_strategy, device_groups, allreduce_plan, allreduce_on_host
from tinycore.uop import f32_to_bf16
from tinycore.runtime.device import Device
from tinycore.schedule import buffers

D2, D4 = ("CPU:0", "CPU:1"), ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
PY2 = ("PYTHON:0", "PYTHON:1")
rng = np.random.default_rng(0)

def canon(devices): return tuple(Device.canonicalize(d) for d in devices)

def data(*shape): return rng.standard_normal(shape).astype(np.float32)

def check(fn, *arrays, devices=D4, axes=(0,), atol=1e-5, dev1="CPU"):
  """fn on tensors sharded over `devices` (one axis per array, None: replicated; a grid: a tuple per array) == fn on one device."""
  want = fn(*[Tensor(a, device=dev1) for a in arrays]).numpy()
  got = fn(*[Tensor(a, device=dev1).shard(devices, ax) for a, ax in zip(arrays, axes)])
  assert got.device == canon(devices if isinstance(devices[0], str) else sum(devices, ())) or not isinstance(got.device, tuple)
  np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=1e-5)

def test_shard_roundtrip_and_device_tuple():
  a = data(8, 6)
  for ax in (None, 0, 1):
    t = Tensor(a).shard(D4 if ax != 1 else D2, ax)
    assert isinstance(t.device, tuple) and t.shape == (8, 6)
    np.testing.assert_equal(t.numpy(), a)
  r = Tensor(a).to(D2)
  assert r.device == canon(D2)
  np.testing.assert_equal(r.numpy(), a)
  t = Tensor(a)
  t.shard_(D4, 0)
  assert t.device == canon(D4)

def test_uneven_split_raises():
  with pytest.raises(ValueError, match="does not split evenly"): Tensor(data(6, 3)).shard(D4, 0)

def test_mixing_devices_raises():
  with pytest.raises(ValueError, match="different devices"): Tensor(data(4)).shard(D2, 0) + Tensor(data(4))

@pytest.mark.parametrize("ax", [None, 0, 1])
def test_elementwise(ax):
  check(lambda x, y: (x * y + 1).relu().exp() - y.sqrt().abs(), data(8, 4), data(8, 4), axes=(ax, ax))
  check(lambda x, y: x * y, data(8, 4), data(8, 4), axes=(ax, None))     # sharded with replicated
  check(lambda x, y: x + y, data(8, 4), data(8, 4), axes=(0, 1))         # two shard axes: resharded
  check(lambda x: x.cast(dtypes.float16).cast(dtypes.float32) * 2 + Tensor.ones(8, 4, device=x.device), data(8, 4), axes=(ax,))

@pytest.mark.parametrize("ax", [None, 0, 1])
def test_movement(ax):
  a = data(8, 4)
  check(lambda x: x.T, a, axes=(ax,))
  check(lambda x: x.reshape(2, 4, 4), a, axes=(ax,))
  check(lambda x: x.reshape(32), a, axes=(ax,))
  check(lambda x: x.flip(0), a, axes=(ax,))
  check(lambda x: x.flip(1), a, axes=(ax,))
  check(lambda x: x[1:7, 1:3], a, axes=(ax,))
  check(lambda x: x.pad(((1, 1), (2, 0))), a, axes=(ax,))
  check(lambda x: x.reshape(8, 1, 4).expand(8, 3, 4), a, axes=(ax,))
  check(lambda x: x.permute(1, 0).contiguous().reshape(4, 2, 4), a, axes=(ax,))

@pytest.mark.parametrize("ax", [None, 0, 1, 2])
def test_reduce(ax):
  a = data(4, 8, 4)
  for axis in (None, 0, 1, 2, (0, 2)):
    check(lambda x: x.sum(axis), a, axes=(ax,))
    check(lambda x: x.max(axis), a, axes=(ax,))
  check(lambda x: x.mean(1).softmax(-1), a, axes=(ax,))
  check(lambda x: x.argmax(1), a, axes=(ax,))
  check(lambda x: x.cumsum(1), a, axes=(ax,))

@pytest.mark.parametrize("ax", [None, 0, 1])
@pytest.mark.parametrize("bx", [None, 0, 1])
def test_matmul_every_shard_axis(ax, bx):
  check(lambda x, w: x @ w, data(8, 12), data(12, 4), axes=(ax, bx))

def test_matmul_rows_by_columns_and_batched_rows_by_k():
  """x sharded by rows times w sharded by columns (w is gathered: on a line of devices the result has one shard axis;
  see the grid tests for blocks), and a batched x by rows times w sharded along K (x's K is sliced per device, the
  products are all-reduced)."""
  a, w = data(8, 12), data(12, 4)
  np.testing.assert_allclose((Tensor(a).shard(D4, 0) @ Tensor(w).shard(D4, 1)).numpy(), a @ w, atol=1e-5)
  x2 = Tensor(a.reshape(2, 4, 12)).shard(D2, 0)
  np.testing.assert_allclose((x2.reshape(8, 12) @ Tensor(w).shard(D2, 0)).numpy(), a @ w, atol=1e-5)

GRID = (("CPU:0", "CPU:1"), ("CPU:2", "CPU:3"))   # 2x2: device (i, j) is CPU:(2i+j)
GRID_AXES = [(0, 1), (1, 0), (0, None), (None, 1), (None, 0), (1, None), (None, None)]

@pytest.mark.parametrize("ax", GRID_AXES)
def test_grid_shard_roundtrip(ax):
  a = data(8, 12)
  t = Tensor(a).shard(GRID, ax)
  assert t.device == canon(D4) and t.shape == (8, 12)
  if ax != (None, None): assert t.uop.src[0].shape == tuple(s // 2 ** ax.count(i) for i, s in enumerate(a.shape))
  np.testing.assert_equal(t.numpy(), a)
  u = Tensor(a)
  u.shard_(GRID, ax)
  np.testing.assert_equal((u + 0).numpy(), a)

def test_grid_shard_blocks_and_errors():
  """Device (i, j) of the grid holds block (i, j)."""
  a = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
  t = Tensor(a).shard(GRID, (0, 1)).contiguous().realize()
  for i, b in enumerate(buffers[t.uop.src[0].base].bufs):
    np.testing.assert_equal(b.numpy().reshape(4, 6), a[(i // 2) * 4:(i // 2) * 4 + 4, (i % 2) * 6:(i % 2) * 6 + 6])
  with pytest.raises(ValueError, match="one axis .* per grid dimension"): Tensor(a).shard(GRID, 0)
  with pytest.raises(ValueError, match="two grid dimensions"): Tensor(a).shard(GRID, (1, 1))
  with pytest.raises(ValueError, match="does not split evenly"): Tensor(data(6, 3)).shard(GRID, (0, 1))
  with pytest.raises(ValueError, match="rows of equal shape"): Tensor(a).shard((("CPU:0", "CPU:1"), ("CPU:2",)), (0, 1))

@pytest.mark.parametrize("ax", GRID_AXES)
@pytest.mark.parametrize("bx", GRID_AXES)
def test_grid_matmul_every_layout(ax, bx):
  check(lambda x, w: x @ w, data(8, 12), data(12, 4), devices=GRID, axes=(ax, bx), atol=2e-5)

def test_grid_matmul_blocks_need_no_transfer():
  """x split by rows along the grid's first dimension times w split by columns along its second: each device computes
  its block of the product from its own data, nothing is gathered or all-reduced; K split along the second dimension
  all-reduces among the two devices of each grid row only."""
  a, w = data(8, 12), data(12, 4)
  out = Tensor(a).shard(GRID, (0, None)) @ Tensor(w).shard(GRID, (None, 1))
  from tinycore.rewrite import graph_rewrite
  assert graph_rewrite(out.uop.sink(), multi_pm).src[0].arg == ((0, 2), (1, 2))   # blocks (rows, columns)
  assert [si.ast.op for si in out.schedule()] == [Ops.COPY, Ops.COPY, Ops.SINK]
  np.testing.assert_allclose(out.numpy(), a @ w, atol=1e-5)
  out = Tensor(a).shard(GRID, (0, 1)) @ Tensor(w).shard(GRID, (None, 0))
  reduces = [si.ast.arg for si in out.schedule() if si.ast.op is Ops.ALLREDUCE]
  assert reduces == [(Ops.ADD, (2, 2), (1,))] and device_groups((2, 2), (1,)) == [[0, 1], [2, 3]]
  np.testing.assert_allclose(out.numpy(), a @ w, atol=1e-5)

@pytest.mark.parametrize("ax", [(0, 1), (None, 1), (1, 0)])
def test_grid_ops(ax):
  a = data(4, 8, 6)
  check(lambda x: (x * 2 + 1).relu().sum((0, 2)), a, devices=GRID, axes=(ax,))
  check(lambda x: x.max(1).softmax(-1), a, devices=GRID, axes=(ax,))
  check(lambda x: x.permute(2, 0, 1).reshape(6, 32) + 1, a, devices=GRID, axes=(ax,))
  check(lambda x: x.reshape(4, 4, 2, 6)[:, 1:3].flip(3), a, devices=GRID, axes=(ax,))
  check(lambda x, y: x * y, a, a, devices=GRID, axes=(ax, (1, 2)))
  check(lambda x: x.to("CPU:1") * 3, a, devices=GRID, axes=(ax,))
  with pytest.raises(ValueError, match="grid of 2x2 devices"): Tensor(a).shard(GRID, ax).to(D2).realize()

def test_conv_and_batchnorm():
  x, w = data(4, 3, 8, 8), data(8, 3, 3, 3)
  check(lambda x, w: x.conv2d(w, padding=1).relu(), x, w, axes=(0, None))
  check(lambda x, w: x.conv2d(w, padding=1), x, w, axes=(None, 0))
  def run(devices):
    Tensor.manual_seed(0)
    b = nn.BatchNorm2d(3)
    t = Tensor(x)
    if devices:
      for p in get_parameters(b): p.shard_(devices)
      t = t.shard(devices, 0)
    with Tensor.train(): out = b(t).numpy()
    return out, b.running_mean.numpy(), b.running_var.numpy()
  for want, got in zip(run(None), run(D4)): np.testing.assert_allclose(got, want, atol=1e-5)

def test_unsynced_batchnorm_uses_each_devices_statistics():
  """UnsyncedBatchNorm over D4 with the batch sharded == the same layer on one device (statistics per quarter batch),
  its running statistics are each slice's own, and its forward pass all-reduces nothing."""
  x = data(8, 3, 4, 4) + np.arange(8, dtype=np.float32).reshape(8, 1, 1, 1)   # slices with different means
  def run(devices):
    bn = nn.UnsyncedBatchNorm(3, num_devices=4)
    t = Tensor(x)
    if devices:
      bn.weight.shard_(devices); bn.bias.shard_(devices)
      bn.running_mean.shard_(devices, 0); bn.running_var.shard_(devices, 0)
      t = t.shard(devices, 0)
    with Tensor.train():
      out = bn(t)
      items = out.schedule()
    return out.numpy(), bn.running_mean.numpy(), bn.running_var.numpy(), items
  want, got = run(None), run(D4)
  for w, g in zip(want[:3], got[:3]): np.testing.assert_allclose(g, w, atol=1e-5)
  xs = x.reshape(4, 2, 3, 4, 4)
  np.testing.assert_allclose(got[1], 0.1 * xs.mean((1, 3, 4)), atol=1e-5)
  np.testing.assert_allclose(got[2], 0.9 + 0.1 * xs.var((1, 3, 4), ddof=1), atol=1e-4)
  np.testing.assert_allclose(got[0].reshape(4, 2, 3, 16).mean((1, 3)), 0, atol=1e-5)   # each slice normalised on its own
  assert not any(si.ast.op is Ops.ALLREDUCE for si in got[3])
  with pytest.raises(ValueError, match="multiple of 4"): nn.UnsyncedBatchNorm(3, num_devices=4)(Tensor(data(6, 3, 2, 2)))

@pytest.mark.parametrize("ax", [None, 0, 1])
def test_gradient_through_lazy_shard(ax):
  """shard() and to() of a tensor that requires grad pass the gradient back to it (and to the sharded tensor itself)."""
  a, w = data(8, 4), data(4, 4)
  def grads(devices):
    x, wt = Tensor(a, requires_grad=True), Tensor(w, requires_grad=True)
    xs, ws = (x.shard(devices, ax), wt.to(devices)) if devices else (x, wt)
    ((xs @ ws).tanh() * xs).sum().backward()
    assert x.grad.device == "CPU" and wt.grad.device == "CPU"
    return x.grad.numpy(), wt.grad.numpy(), xs.grad.numpy()
  for g, want in zip(grads(D4), grads(None)): np.testing.assert_allclose(g, want, atol=1e-5)

def test_gather_embedding_and_setitem():
  table, idx = data(10, 6), np.array([[1, 3, 9, 0], [2, 2, 5, 7]], np.int32)
  check(lambda w, i: w[i], table, idx, axes=(None, 0), devices=D2)
  check(lambda w, i: w[i], table, idx, axes=(1, None), devices=D2)
  a = data(8, 4)
  t1, t2 = Tensor(a).realize(), Tensor(a).shard(D4, 0).realize()
  for t in (t1, t2):
    t[2:6, 1] = 7.0
    t.assign(t * 2)
  np.testing.assert_equal(t2.numpy(), t1.numpy())
  emb = nn.Embedding(10, 6)
  want = emb(Tensor(idx)).numpy()
  emb.weight.shard_(D2, 1)
  np.testing.assert_allclose(emb(Tensor(idx).to(D2)).numpy(), want, atol=1e-6)

def test_rand_and_dropout_match_one_device():
  Tensor.manual_seed(5)
  want = Tensor.rand(8, 4).numpy()
  Tensor.manual_seed(5)
  got = Tensor.rand(8, 4, device=D4)
  assert got.device == canon(D4)
  np.testing.assert_equal(got.numpy(), want)
  a = data(8, 4)
  with Tensor.train():
    Tensor.manual_seed(3); d1 = Tensor(a).dropout(0.5).numpy()
    Tensor.manual_seed(3); d4 = Tensor(a).shard(D4, 0).dropout(0.5).numpy()
  np.testing.assert_equal(d4, d1)

def test_rand_in_tinyjit_draws_afresh_on_every_replay():
  # the jit rewrites the rand call's counter before a replay: on a tuple of devices too (it used to rewrite a copy of it,
  # so every replay drew the captured numbers again)
  draws = {}
  for devices in (None, D2):
    Tensor.manual_seed(1)
    f = TinyJit(lambda: (Tensor.rand(4, device=devices) * 1).contiguous())
    draws[devices] = [f().numpy() for _ in range(4)]
  assert len({d.tobytes() for d in draws[D2]}) == 4
  np.testing.assert_equal(draws[D2], draws[None])

def test_symbolic_shapes_on_shards():
  # a shard whose shape holds a Variable (a KV cache's valid part): reductions, reshapes, gathers and an in-place write
  from tinycore import Variable
  n, w, q = Variable("n", 1, 5), data(2, 5, 4), data(2, 1, 4)
  for val in (2, 5):
    check(lambda c, q: (q @ c.shrink((None, (0, n.bind(val)), None)).transpose(1, 2)).softmax(-1) @ c.shrink((None, (0, n.bind(val)), None)),
          w, q, devices=D2, axes=(0, 0))
    check(lambda c: c.shrink((None, (0, n.bind(val)), None)).sum(2), w, devices=D2)   # the reshape after the sum keeps the split
    check(lambda c: c.shrink((None, (0, n.bind(val)), None)) * 2, w, devices=D2)      # read back: gathered at the bound size
  for devices in (None, D2):
    c = Tensor(w) if devices is None else Tensor(w).shard(devices, 0)
    c = c.contiguous().realize()
    c.shrink((None, (n.bind(1), n.bind(1) + 2), None)).assign(Tensor(q.repeat(2, 1)).shard_like(c))   # through the view, in place
    want = w.copy(); want[:, 1:3] = q
    np.testing.assert_allclose(c.numpy(), want)

# on a grid: data parallel along its first dimension, tensor parallel along its second (l1's outputs and l2's inputs split)
GRID_PARAMS = [(None, 0), (None, 0), (None, 1), (None, None)]   # l1.weight, l1.bias, l2.weight, l2.bias

def _shard_model(params, x, y, devices):
  on_grid = not isinstance(devices[0], str)
  for p, ax in zip(params, GRID_PARAMS if on_grid else [None] * len(params)): p.shard_(devices, ax)
  return x.shard(devices, (0, None) if on_grid else 0), y.shard(devices, (0, None) if on_grid else 0)

def _train(devices, opt_cls, steps=3, jit=False):
  Tensor.manual_seed(0)
  r = np.random.default_rng(1)
  X, Y = r.standard_normal((8, 5)).astype(np.float32), r.integers(0, 3, 8)
  l1, l2 = nn.Linear(5, 8), nn.Linear(8, 3)
  params = get_parameters([l1, l2])
  x, y = Tensor(X), Tensor(Y)
  if devices: x, y = _shard_model(params, x, y, devices)
  opt = opt_cls(params, lr=0.05)
  def step(x, y):
    opt.zero_grad()
    loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    opt.step()
    return loss
  if jit: step = TinyJit(step)
  with Tensor.train():
    losses = [step(x, y).item() for _ in range(steps)]
  return [p.numpy() for p in params], losses

@pytest.mark.parametrize("opt_cls", [optim.SGD, optim.Adam])
def test_training_step_matches_one_device(opt_cls):
  want, wl = _train(None, opt_cls)
  for devices in (D2, D4, GRID):
    got, gl = _train(devices, opt_cls)
    np.testing.assert_allclose(gl, wl, rtol=1e-5)
    for g, w in zip(got, want): np.testing.assert_allclose(g, w, atol=1e-5)

def test_sharded_step_replays_from_the_schedule_cache():
  """An un-jitted sharded training step (copies, all-reduces) is scheduled once per graph shape, then replayed from the
  schedule cache with its own buffers: the same parameters as without the cache."""
  from tinycore import schedule_cache
  want, wl = _train(D4, optim.Adam, steps=5)
  before = dict(schedule_cache.stats)
  got, gl = _train(D4, optim.Adam, steps=5)
  assert schedule_cache.stats["hits"] - before["hits"] >= 6 and schedule_cache.stats["uncacheable"] == before["uncacheable"]
  np.testing.assert_equal(gl, wl)
  for g, w in zip(got, want): np.testing.assert_equal(g, w)
  old, schedule_cache.SCHEDULE_CACHE_SIZE = schedule_cache.SCHEDULE_CACHE_SIZE, 0
  try: uncached, ul = _train(D4, optim.Adam, steps=5)
  finally: schedule_cache.SCHEDULE_CACHE_SIZE = old
  np.testing.assert_equal(ul, wl)
  for g, w in zip(uncached, want): np.testing.assert_equal(g, w)

def test_tinyjit_replay_sharded():
  want, wl = _train(None, optim.SGD, steps=4)
  got, gl = _train(D2, optim.SGD, steps=4, jit=True)
  np.testing.assert_allclose(gl, wl, rtol=1e-5)
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, atol=1e-5)

def test_backward_through_sharded_weights():
  a, w = data(8, 6), data(6, 4)
  def grads(devices):
    x, wt = Tensor(a), Tensor(w, requires_grad=True)
    if devices: x, wt = x.shard(devices, 0), wt.shard_(devices, 1)
    ((x @ wt).tanh() * 3).sum().backward()
    return wt.grad.numpy()
  np.testing.assert_allclose(grads(D4), grads(None), atol=1e-5)

def test_half_precision_allreduce_in_float32():
  a = (rng.standard_normal((4, 2048)) * 100).astype(np.float16)
  got = Tensor(a).shard(D4, 0).sum(0).numpy()
  want = a.astype(np.float32).sum(0).astype(np.float16)
  np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3)

@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("devices", [D4, ("PYTHON:0", "PYTHON:1", "PYTHON:2")], ids=["CPU", "PYTHON"])
def test_allreduce_strategies_bit_identical(strategy, devices):
  """Every strategy folds each chunk in the same fixed order, as kernels on the devices: the same bits as the host's
  numpy fold, for every dtype and op (half and bfloat16 accumulated in float32, NaN propagated by max)."""
  n = len(devices)
  for dt, npdt in ((dtypes.float32, np.float32), (dtypes.float16, np.float16), (dtypes.bfloat16, np.float32), (dtypes.int32, np.int32)):
    shards = [(rng.standard_normal(1001) * 1000).astype(npdt) for _ in range(n)]
    shards[1][5] = np.nan if dtypes.is_float(dt) else shards[1][5]
    src = MultiBuffer(devices, 1001, dt)
    for b, x in zip(src.bufs, shards): b.copyin(memoryview(f32_to_bf16(x) if dt == dtypes.bfloat16 else x).cast("B"))
    for op in (Ops.ADD, Ops.MAX):
      dest, host = MultiBuffer(devices, 1001, dt), MultiBuffer(devices, 1001, dt)
      assert allreduce(dest, src, op, strategy) == f"{strategy} on devices"
      allreduce_on_host(host.bufs, src.bufs, op, allreduce_plan(n, 1001, strategy))
      want = host.bufs[0].as_bytes()
      assert all(b.as_bytes() == want for b in dest.bufs + host.bufs)
      if dt in (dtypes.float32, dtypes.int32) and op is Ops.ADD:
        np.testing.assert_array_equal(host.bufs[0].numpy(), functools.reduce(np.add, shards))
      if dt == dtypes.float16 and op is Ops.ADD:
        np.testing.assert_array_equal(host.bufs[0].numpy(), functools.reduce(np.add, [x.astype(np.float32) for x in shards]).astype(np.float16))

@pytest.mark.parametrize("m", [5, 47, 1001])
def test_allreduce_chunks_start_where_wide_kernels_may_read(m):
  """Chunks start at multiples of 16 elements (16 bytes in every dtype), as kernels with wide accesses need
  (codegen/widen.py): 47 elements cut evenly over 3 devices put a 16-element chunk at element 15, whose vector fold
  PYTHON refused. The chunks still cover the buffer once, in order, none empty, and both chunked strategies on 3
  PYTHON devices give numpy's sum."""
  devices = ("PYTHON:0", "PYTHON:1", "PYTHON:2")
  shards = [np.arange(m, dtype=np.float32) * (i + 1) for i in range(3)]
  for strategy in ("ring", "all2all"):
    plan = allreduce_plan(3, m, strategy)
    assert plan[0][0] == 0 and plan[-1][1] == m and all(a[1] == b[0] for a, b in zip(plan, plan[1:])), plan
    assert all(lo % 16 == 0 and lo < hi for lo, hi, _ in plan), plan
    src, dest = MultiBuffer(devices, m, dtypes.float32), MultiBuffer(devices, m, dtypes.float32)
    for b, x in zip(src.bufs, shards): b.copyin(memoryview(x).cast("B"))
    assert allreduce(dest, src, Ops.ADD, strategy) == f"{strategy} on devices"
    for b in dest.bufs: np.testing.assert_array_equal(b.numpy(), shards[0] * 6)

def test_allreduce_env_var_forces_strategy(monkeypatch):
  monkeypatch.setenv("ALLREDUCE", "ring")
  assert pick_strategy(16, 2) == "ring"
  monkeypatch.setenv("ALLREDUCE", "bogus")
  with pytest.raises(ValueError, match="naive, ring, all2all"): pick_strategy(16, 2)
  monkeypatch.delenv("ALLREDUCE")
  assert pick_strategy(16, 8) == "naive" and pick_strategy(1 << 23, 8) == "ring" and pick_strategy(1 << 20, 8) == "all2all"

def test_python_device_instances():
  check(lambda x, w: (x @ w).sum(1), data(4, 6), data(6, 3), devices=PY2, axes=(0, None), dev1="PYTHON")
  check(lambda x: x.sum(0), data(4, 6), devices=PY2, axes=(0,), dev1="PYTHON")

def test_one_kernel_compiled_for_all_devices():
  """A sharded op's scheduled graph is per-shard work: one SINK item whose AST is rendered once for every device."""
  t = Tensor(data(8, 4)).shard(D4, 0)
  items = (t * 2 + 1).schedule()
  kernels = [si for si in items if si.ast.op is Ops.SINK]
  assert len(kernels) == 1 and isinstance(kernels[0].bufs[0], MultiBuffer)

def _step_graph_size(devices) -> int:
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
  params = get_parameters([l1, l2])
  x, y = _shard_model(params, Tensor(data(16, 16)), Tensor(rng.integers(0, 4, 16)), devices)
  opt = optim.Adam(params, lr=0.01)
  opt.zero_grad()
  l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
  outs = opt.schedule_step()
  sink = outs[0].uop.sink(*[t.uop for t in outs[1:]])
  return len(sink.toposort()), len(__import__("tinycore").rewrite.graph_rewrite(sink, multi_pm).toposort())

def test_graph_does_not_grow_with_devices():
  eight = tuple(f"CPU:{i}" for i in range(8))
  two = _step_graph_size(D2)
  assert two == _step_graph_size(eight)   # the tensor-level graph, and the per-shard graph the scheduler makes of it
  assert _step_graph_size(GRID) == _step_graph_size((eight[:4], eight[4:]))   # a 2x2 and a 2x4 grid
