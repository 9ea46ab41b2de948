"""The scheduler: kernel counts (fusion), boundaries, assign hazards, multiple outputs, copies, memory planning, random graphs."""
import random
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tinycore import Tensor, GlobalCounters, Device
from tinycore.uop import Ops
from tinycore import schedule_cache

rng = np.random.default_rng(0)
def rnd(*shape) -> Tensor: return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()
def kernels(*ts: Tensor) -> list: return [si for si in Tensor.schedule(*ts) if si.ast.op is Ops.SINK]
def has_reduce(si) -> bool: return any(u.op is Ops.REDUCE_AXIS for u in si.ast.toposort())

# ***** kernel counts *****

def test_sum_of_a_sum_is_one_kernel():
  a, b = rnd(4, 5), rnd(4, 5)
  assert len(kernels((a + b).sum())) == 1

def test_linear_relu_is_one_kernel():
  x, w, b = rnd(3, 8), rnd(8, 5), rnd(5)
  assert len(kernels((x @ w + b).relu())) == 1

def test_softmax_is_at_most_three_kernels():
  assert len(kernels(rnd(4, 6).softmax(-1))) <= 3

def test_conv2d_relu_is_one_kernel():
  x, w = rnd(1, 2, 6, 6), rnd(3, 2, 3, 3)
  assert len(kernels(x.conv2d(w).relu())) == 1
  assert len(kernels(x.conv2d(w, padding=1).relu())) == 1

def test_conv2d_relu_kernel_count_pinned_by_counter():
  x, w = rnd(1, 2, 5, 5), rnd(2, 2, 3, 3)
  GlobalCounters.reset()
  x.conv2d(w).relu().realize()
  assert GlobalCounters.kernel_count == 1

def test_long_elementwise_chain_fuses():
  a = rnd(3, 3)
  x = a
  for i in range(30): x = (x * 1.01 + i).relu() if i % 2 else x.exp2() * 0.5 - x
  assert len(kernels(x)) == 1

def test_pow_and_its_gradients_are_one_kernel():
  # pow's slopes hang on a CUSTOM_GRADIENT node the scheduler drops: value and both gradients still fuse into one kernel
  x, y = rnd(4, 5).requires_grad_(), rnd(4, 5).requires_grad_()
  for out, ins in ((x ** 2.5, (x,)), (x ** y, (x, y)), ((x.abs() + 1) ** -2, (x,))):
    assert len(kernels(out, *out.sum().gradient(*ins))) == 1
    assert not any(u.op is Ops.CUSTOM_GRADIENT for si in kernels(out) for u in si.ast.toposort())

def test_elementwise_fuses_into_reduce_and_epilogue():
  a, b = rnd(4, 8), rnd(4, 8)
  out = ((a * b).exp().sum(1) + 1).sqrt()
  ks = kernels(out)
  assert len(ks) == 1 and has_reduce(ks[0])
  np.testing.assert_allclose(out.numpy(), np.sqrt(np.exp(a.numpy() * b.numpy()).sum(1) + 1), rtol=1e-5)

def test_contiguous_is_a_boundary():
  a = rnd(4, 4)
  assert len(kernels((a + 1).contiguous() * 2)) == 2

def test_contiguous_of_data_in_order_is_free():
  a = rnd(4, 4)
  assert len(kernels(a.reshape(16).contiguous())) == 0
  assert len(kernels(a.T.contiguous())) == 1

def test_realized_tensor_is_a_boundary():
  a = rnd(4, 4)
  b = (a @ a).realize()
  ks = kernels(b + 1)
  assert len(ks) == 1 and not has_reduce(ks[0])

def test_reduce_used_by_two_outputs_is_computed_once():
  a, b = rnd(5, 6), rnd(5, 6)
  r = (a * b).sum(1)
  o1, o2 = r + 1, r.exp()
  ks = kernels(o1, o2)
  # one kernel with three outputs: the sum (stored: two outputs read it) and both results, computed from it in place
  assert len(ks) == 1 and len(ks[0].ast.src) == 3 and sum(u.op is Ops.REDUCE_AXIS for u in ks[0].ast.toposort()) == 1
  Tensor.realize_all(o1, o2)
  ref = (a.numpy() * b.numpy()).sum(1)
  np.testing.assert_allclose(o1.numpy(), ref + 1, rtol=1e-5)
  np.testing.assert_allclose(o2.numpy(), np.exp(ref), rtol=1e-5)

def test_reduce_behind_an_expand_is_not_recomputed_per_element():
  a = rnd(256, 256)
  out = a - a.max(1, keepdim=True)
  ks = kernels(out)
  assert len(ks) == 2   # recomputing each row's max per element would repeat 256x256x256 compares
  np.testing.assert_allclose(out.numpy(), a.numpy() - a.numpy().max(1, keepdims=True))

def test_small_reduce_behind_an_expand_is_recomputed_in_its_user():
  # the repeats (6 rows x 5 extra copies x 6 compares) cost less than a kernel of its own: one kernel
  a = rnd(6, 6)
  out = a - a.max(1, keepdim=True)
  assert len(kernels(out)) == 1
  np.testing.assert_equal(out.numpy(), a.numpy() - a.numpy().max(1, keepdims=True))

def test_constant_reductions_fold():
  # a count of ones is a constant (no kernel of its own); a float sum folds only where it is exact
  n = Tensor.ones(64, dtype="bool").sum()
  assert len(kernels(n)) == 1 and not has_reduce(kernels(n)[0]) and n.item() == 64
  s = Tensor.full((1000,), 0.1).sum()
  assert has_reduce(kernels(s)[0])
  big = Tensor.full((1 << 13, 1 << 12), 3.0).sum()
  assert has_reduce(kernels(big)[-1])   # 3 * 2^25 partial sums are no longer exact in float32

def test_padded_constant_reductions_count_the_padding():
  # a pad adds zeros: the ones padded by 64 columns still sum to 256 per row, and the max of padded -1s is 0
  np.testing.assert_equal(Tensor.ones(256, 256).pad(((0, 0), (0, 64))).sum(axis=1).numpy(), np.full(256, 256.0))
  np.testing.assert_equal(Tensor.full((4, 4), -1).pad(((0, 0), (1, 1))).max(axis=1).numpy(), np.zeros(4, np.int32))
  x = Tensor.ones(10, requires_grad=True)  # cumsum's gradient is a sum over a padded broadcast of ones
  np.testing.assert_equal(x.cumsum(0).sum().gradient(x)[0].numpy(), np.arange(10, 0, -1, dtype=np.float32))

def test_unrealized_constant_parameter_is_folded_into_its_users():
  w = Tensor.ones(8, requires_grad=True)   # a unique contiguous constant: a leaf of its own for autograd
  x = rnd(4, 8)
  out = x * w
  assert len(kernels(out)) == 1
  np.testing.assert_equal(out.numpy(), x.numpy())
  assert w.uop.op is Ops.CONTIGUOUS   # still its own leaf, not merged with another Tensor.ones(8)

def test_reduce_of_a_reduce_fuses_where_each_output_then_sums_few_terms():
  """A reduction nested in another with no expand between (a sum of a matmul's outputs) computes each of its values
  once there, so on the CPU it fuses while each output of the kernel then sums at most REDUCE_SPLIT terms: a 6x6
  matmul's sum is one kernel, a 64x64 one's (262144 products) two. A target with blocks (PYTHON) keeps them apart."""
  a, b = rnd(6, 6), rnd(64, 64)
  assert Device.DEFAULT == "CPU" and len(kernels((a @ a).sum())) == 1 and len(kernels((b @ b).sum())) == 2
  assert len(kernels((a.to("PYTHON") @ a.to("PYTHON")).sum())) == 2
  np.testing.assert_allclose((a @ a).sum().item(), (a.numpy() @ a.numpy()).sum(), rtol=1e-5)

def test_a_split_reduction_pads_its_uneven_partials_with_the_identity_not_zero():
  """Found by the conformance fuzzer: a reduction longer than REDUCE_SPLIT is cut into partials, and where the cut does
  not divide the axis it is padded with the reduction's identity. The identity was a constant padded with zeros, so the
  new elements were 0: a max of 32769 values of -2 was 0, and Tensor.ones(55, 769, 2, 1, dtype=int32).min() was -1.
  (Lengths no part count divides, primes, since the split takes one that divides where it can.)"""
  from tinycore.schedule import REDUCE_SPLIT
  for n in (32771, 84629):
    assert n > REDUCE_SPLIT and all(n % d for d in range(2, 300))
    assert Tensor(np.full(n, -2, np.int32)).max().item() == -2 and Tensor(np.full(n, -2.5, np.float32)).max().item() == -2.5
    assert Tensor(np.full(n, 5, np.uint8)).min().item() == 5 and Tensor.ones(n, dtype="int32").min().item() == 1
  assert Tensor.ones(55, 769, 2, 1, dtype="int32").min().item() == 1

def test_a_split_reductions_partials_are_a_kernel_of_their_own():
  """A batch norm's channel sums (128 images of 16 channels of 26x26: 86528 terms each) are cut into partials. Where the
  total is realized for its users (the mean, expanded back over the images) the partials were pulled into its kernel:
  one kernel of 16 outputs, each walking all 86528 terms (on a GPU, 16 blocks). Now the partials are a kernel of their
  own, on a CPU and on a target with blocks alike, as many as fill SPLIT_OUTPUTS while each sums SPLIT_LEAST terms or
  more; the answer is numpy's."""
  from tinycore.schedule import split_parts, SPLIT_OUTPUTS, SPLIT_LEAST
  def nested(si) -> bool:
    return any(u.op is Ops.REDUCE_AXIS and any(v.op is Ops.REDUCE_AXIS for v in u.src[0].toposort()) for u in si.ast.toposort())
  n, least = 128 * 26 * 26, split_parts(128 * 26 * 26, 16)
  assert least == min(-(-SPLIT_OUTPUTS // 16), n // SPLIT_LEAST) == 21, least
  for dev in ("CPU", "PYTHON"):
    x = Tensor.empty(128, 16, 26, 26, device=dev)
    items = [si for si in (x - x.mean((0, 2, 3), keepdim=True)).schedule() if si.ast.op is Ops.SINK]
    # (32 partials a channel: the least count, 21, up to twice as many that divides an axis, the images' outermost)
    assert not any(nested(si) for si in items) and [si.bufs[0].size for si in items] == [16 * 32, 16, x.numel()], \
      (dev, [(si.bufs[0].size, nested(si)) for si in items])
  xn = np.random.default_rng(5).standard_normal((128, 16, 26, 26)).astype(np.float32)
  np.testing.assert_allclose((Tensor(xn) - Tensor(xn).mean((0, 2, 3), keepdim=True)).numpy(), xn - xn.mean((0, 2, 3), keepdims=True), atol=1e-5)

def test_equal_kernels_share_one_ast():
  a, b = rnd(3, 3), rnd(3, 3)
  (ka,), (kb,) = kernels(a * 2 + 1), kernels(b * 2 + 1)
  assert ka.ast is kb.ast and ka.bufs[1] is not kb.bufs[1]

def test_multiple_outputs_realized_together():
  a = rnd(3, 4)
  outs = [a + 1, (a * 2).sum(0), a.max(1), a.T.contiguous()]
  Tensor.realize_all(*outs)
  an = a.numpy()
  for got, want in zip(outs, [an + 1, (an * 2).sum(0), an.max(1), an.T]): np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
  assert all(o.uop.is_realized for o in outs)

# ***** kernels with several outputs *****

def stores(si) -> int: return len(si.ast.src)
def reads_in_place(si) -> bool:
  """An output's parameter is also read (an assign's old value): the kernel updates that buffer in place."""
  return any(s.op is Ops.DEFINE_GLOBAL and s.arg < stores(si) and not (u.op is Ops.STORE and i == 0)
             for u in si.ast.toposort() for i, s in enumerate(u.src))

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_mean_variance_and_deviation_are_one_kernel(device):
  # the mean is read in place by the variance's sum (broadcast along the summed axis only): one kernel, two loops
  x = Tensor(rng.standard_normal((6, 40)).astype(np.float32), device=device).realize()
  m = x.mean(1, keepdim=True)
  v = (x - m).square().mean(1, keepdim=True)
  rstd = (v + 1e-5).rsqrt()
  ks = kernels(m, v, rstd)
  assert len(ks) == 1 and stores(ks[0]) == 3
  Tensor.realize_all(m, v, rstd)
  xn = x.numpy().astype(np.float64)
  np.testing.assert_allclose(m.numpy()[:, 0], xn.mean(1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(v.numpy()[:, 0], xn.var(1), rtol=1e-5)
  np.testing.assert_allclose(rstd.numpy()[:, 0], 1 / np.sqrt(xn.var(1) + 1e-5), rtol=1e-5)

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_softmax_max_and_sum_share_a_kernel(device):
  """Rows too long to recompute the max per element: on a CPU the row max and the row sum of exp are one kernel (two
  stores), the division another; a GPU-style target keeps each row in one block, so the row's max and sum are computed
  in the kernel that writes it (codegen/opt/gpu.py row_split): one kernel, one store."""
  x = Tensor(rng.standard_normal((4, 1024)).astype(np.float32) * 4, device=device).realize()
  out = x.softmax(1)
  ks = kernels(out)
  assert [stores(k) for k in ks] == ([1] if device == "PYTHON" else [2, 1])
  e = np.exp(x.numpy() - x.numpy().max(1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)

def test_a_rows_reductions_fuse_into_the_kernel_writing_the_row():
  """On a target that keeps a row in one block (PYTHON: 256 threads, 4 elements a step, up to 4 steps: rows of up to
  4096 floats), reductions of a row broadcast back along it are computed in the kernel writing the row: softmax,
  log_softmax and layernorm are one kernel each. Not fused, with numpy's results all the same: a row too long for a block
  (8192), reductions along another axis than the last (softmax over axis 0), a row kernel's value reduced again (its
  max would be recomputed in every trip of the outer sum's loop), and a reduction of rows of 500 broadcast along rows
  of 1000 (not the kernel's row: each thread would compute it alone)."""
  from tinycore.codegen.opt.gpu import row_split
  ren = Device.renderer("PYTHON")
  assert row_split(ren, Tensor.empty(1).dtype, 4096) == (4, 256, 4) and row_split(ren, Tensor.empty(1).dtype, 8192) is None
  x = rng.standard_normal((6, 1000)).astype(np.float32) * 3
  long = rng.standard_normal((2, 8192)).astype(np.float32)
  X, L = Tensor(x, device="PYTHON").realize(), Tensor(long, device="PYTHON").realize()
  def softmax(v, axis=-1):
    e = np.exp(v - v.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)
  mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
  half = X[:, :500]
  cases = [(X.softmax(-1), softmax(x), 1), (X.log_softmax(-1), np.log(softmax(x)), 1), (X.layernorm(), (x - mean) / np.sqrt(var + 1e-5), 1),
           (L.softmax(-1), softmax(long), 2), (X.softmax(0), softmax(x, 0), 2), (X.softmax(-1).sum(0), softmax(x).sum(0), 2),
           (half.max(-1, keepdim=True).expand(6, 1000) + X, x[:, :500].max(-1, keepdims=True) + x, 2)]
  for t, want, n in cases:
    assert len(kernels(t)) == n, (want.shape, n, [si.ast for si in kernels(t)])
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)

ROW_OPS = {"softmax": (lambda t: t.softmax(-1), lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
           "log_softmax": (lambda t: t.log_softmax(-1), lambda x: (x - x.max(-1, keepdims=True)) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))),
           "layernorm": (lambda t: t.layernorm(), lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
           "centred": (lambda t: t - t.mean(-1, keepdim=True), lambda x: x - x.mean(-1, keepdims=True))}

# the gradient of sum(op(x) * w) over a row, in closed form (softmax's and layernorm's sums are constants: no gradient
# when w is one; the centred row's is w minus its mean; log_softmax's, with w one, is 1 - n * softmax)
ROW_GRADS = {"softmax": lambda x, w: np.zeros_like(x), "layernorm": lambda x, w: np.zeros_like(x),
             "log_softmax": lambda x, w: 1 - x.shape[-1] * ROW_OPS["softmax"][1](x), "centred": lambda x, w: w - w.mean(-1, keepdims=True)}

@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.sampled_from([1, 2, 3, 12, 16, 20, 48, 250, 1000, 1024, 3072, 4096, 4100, 8192]), st.sampled_from(sorted(ROW_OPS)),
       st.booleans(), st.integers(0, 2**31))
def test_row_kernels_give_numpys_results(batch, rows, n, op, backward, seed):
  """Any row length (short ones left to the cost rule, ones a block holds fused, longer ones not, lengths no power of
  two divides), rows in one or two leading axes, forward and backward through the row's reductions: numpy's values
  and the closed-form gradients. A row a PYTHON block holds is one kernel forward."""
  from tinycore.codegen.opt.gpu import row_split
  r = np.random.default_rng(seed)
  x = (r.standard_normal((batch, rows, n)) * 3).astype(np.float32)
  w = r.standard_normal(x.shape).astype(np.float32) if op == "centred" else np.ones_like(x)
  f, want = ROW_OPS[op]
  t = Tensor(x, device="PYTHON", requires_grad=backward)
  out = f(t)
  if not backward and row_split(Device.renderer("PYTHON"), t.dtype, n) is not None: assert len(kernels(out)) == 1, (op, n)
  np.testing.assert_allclose(out.numpy(), want(x.astype(np.float64)), rtol=1e-4, atol=1e-4)
  if backward:
    (g,) = (out * Tensor(w, device="PYTHON")).sum().gradient(t)
    np.testing.assert_allclose(g.numpy(), ROW_GRADS[op](x.astype(np.float64), w), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_siblings_reading_one_input_are_one_kernel(device):
  a, b = (Tensor(rng.standard_normal((7, 9)).astype(np.float32), device=device).realize() for _ in range(2))
  outs = [(a * b).exp(), a - b, (a + 1).cast("int32")]   # three outputs of one size, three dtypes of results
  ks = kernels(*outs)
  assert len(ks) == 1 and stores(ks[0]) == 3 and len({id(x) for x in ks[0].bufs[:3]}) == 3
  Tensor.realize_all(*outs)
  an, bn = a.numpy(), b.numpy()
  for got, want in zip(outs, [np.exp(an * bn), an - bn, (an + 1).astype(np.int32)]): np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_a_value_read_at_other_elements_is_not_an_output_of_its_reader(device):
  # r flipped: each element of the result reads r at another row, which the same kernel would be writing
  a = Tensor(rng.standard_normal((6, 5)).astype(np.float32), device=device).realize()
  r = a.sum(1)
  out = r.flip(0) * r
  ks = kernels(r, out)
  assert len(ks) == 2 and [stores(k) for k in ks] == [1, 1]
  Tensor.realize_all(r, out)
  rn = a.numpy().sum(1)
  np.testing.assert_allclose(out.numpy(), rn[::-1] * rn, rtol=1e-5)

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_assigns_of_one_size_share_a_kernel(device):
  # Adam's shape: m and v updated in place, the parameter from their new values; each reads only its own old value.
  # Three rounds of one structure: the third replays the schedule cache's template of the kernel with three outputs
  r = np.random.default_rng(5)
  hits = schedule_cache.stats["hits"]
  for _ in range(3):
    pn, mn, vn, gn = (r.standard_normal(12).astype(np.float32) for _ in range(4))
    vn = np.abs(vn)
    p, m, v = (Tensor(a, device=device).contiguous().realize() for a in (pn, mn, vn))
    g = Tensor(gn, device=device).realize()
    m.assign(m * 0.9 + g * 0.1)
    v.assign(v * 0.99 + g * g * 0.01)
    p.assign(p - 0.1 * m / (v.sqrt() + 1e-8))
    ks = kernels(p)
    assert len(ks) == 1 and stores(ks[0]) == 3 and reads_in_place(ks[0]) and len(ks[0].bufs) == 4   # p, m, v bound once each, and g
    p.realize()
    mw, vw = mn * 0.9 + gn * 0.1, vn * 0.99 + gn * gn * 0.01
    np.testing.assert_allclose(m.numpy(), mw, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), vw, rtol=1e-6)
    np.testing.assert_allclose(p.numpy(), pn - 0.1 * mw / (np.sqrt(vw) + 1e-8), rtol=1e-5)
  assert schedule_cache.stats["hits"] > hits

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_a_value_reading_an_assigned_buffer_elsewhere_runs_before_the_assign(device):
  # g reads p at other elements (a gradient reading its parameter through a broadcast): it is not computed in the kernel
  # writing p, which would have overwritten some of them
  pn, xn = np.array([0.5, -1.0, 2.0, 0.25], np.float32), np.arange(12, dtype=np.float32).reshape(3, 4) / 7
  p, x = Tensor(pn, device=device).contiguous().realize(), Tensor(xn, device=device).realize()
  g = (x * p.flip(0)).sum(0) + (x * p.sum()).sum(0)
  p.assign(p - 0.5 * g)
  ks = kernels(g, p)
  (writes_p,) = [si for si in ks if reads_in_place(si)]   # the kernel reading and writing p's memory: p's update alone
  assert stores(writes_p) == 1 and len(ks) >= 2
  Tensor.realize_all(g, p)
  gw = (xn * pn[::-1]).sum(0) + (xn * pn.sum()).sum(0)
  np.testing.assert_allclose(g.numpy(), gw, rtol=1e-5)
  np.testing.assert_allclose(p.numpy(), pn - 0.5 * gw, rtol=1e-5)

def test_outputs_of_one_kernel_keep_their_own_buffers():
  # the planner recycles every output of a kernel with several, each only once its last reader has run
  a = rnd(16, 16)
  h = a
  for _ in range(4):
    m = h.max(1, keepdim=True)
    h = (h - m).exp() / (h - m).exp().sum(1, keepdim=True) + m   # a kernel with several outputs per round
  items = kernels(h)
  assert any(stores(si) > 1 for si in items)
  for si in items:
    outs = si.bufs[:stores(si)]
    assert len({id(b) for b in outs}) == len(outs) and not {id(b) for b in outs} & {id(b) for b in si.bufs[stores(si):]}
  ref = a.numpy()
  for _ in range(4):
    mn = ref.max(1, keepdims=True)
    e = np.exp(ref - mn)
    ref = e / e.sum(1, keepdims=True) + mn
  np.testing.assert_allclose(h.numpy(), ref, rtol=1e-5)

# ***** assign *****

def test_assign_of_a_flip_of_itself():
  x = Tensor(np.arange(8, dtype=np.float32)).realize()
  x.assign(x.flip(0)).realize()
  np.testing.assert_equal(x.numpy(), np.arange(8)[::-1])

def test_assign_of_a_transpose_of_itself():
  n = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(n).realize()
  x.assign(x.T + 1).realize()
  np.testing.assert_equal(x.numpy(), n.T + 1)

def test_in_place_elementwise_assign_needs_no_temporary():
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  x.assign(x * 2 + 1)
  assert len(kernels(x)) == 1
  x.realize()
  np.testing.assert_equal(x.numpy(), np.arange(6) * 2 + 1)

def test_swap_by_assign():
  # each assign reads the buffer the other overwrites: the values go through temporaries
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
  a_old, b_old = a * 1, b * 1
  a.assign(b_old)
  b.assign(a_old)
  assert len(kernels(a, b)) == 4
  Tensor.realize_all(a, b)
  np.testing.assert_equal(a.numpy(), [3.0, 4.0])
  np.testing.assert_equal(b.numpy(), [1.0, 2.0])

def test_reading_before_and_after_an_assign_in_one_kernel_is_a_clear_error():
  x = Tensor([1.0, 2.0]).realize()
  old = x * 1
  x.assign(x * 2)
  with pytest.raises(RuntimeError, match="both before and after an assign"): (old + x).realize()
  Tensor.realize_all(old)   # realized apart, both values are available
  np.testing.assert_equal((old + x).numpy(), [3.0, 6.0])

@pytest.mark.parametrize("assign_first", [True, False])
def test_reads_of_the_old_value_run_before_the_assign(assign_first):
  x = Tensor([1.0, 2.0, 3.0]).realize()
  y, s = x + 10, x.sum()
  x.assign(x * 0)
  Tensor.realize_all(*((x, y, s) if assign_first else (y, s, x)))
  np.testing.assert_equal(x.numpy(), [0, 0, 0])
  np.testing.assert_equal(y.numpy(), [11, 12, 13])
  assert s.item() == 6

def test_an_assign_runs_once_even_when_another_graph_holds_it():
  x = Tensor([1.0, 2.0]).realize()
  x.assign(x + 1)
  later = x * 10          # holds the ASSIGN node
  x.realize()
  np.testing.assert_equal(later.numpy(), [20.0, 30.0])
  np.testing.assert_equal(x.numpy(), [2.0, 3.0])

def test_repeating_the_same_assign_applies_it_each_time():
  x = Tensor([0.0]).realize()
  held = []
  for _ in range(3):
    x.assign(x + 1)
    held.append(x.uop)   # keep the node alive: an equal node built next time must still run
    x.realize()
  assert x.item() == 3.0

def test_two_contiguous_copies_are_two_buffers():
  a, b = Tensor.zeros(3).contiguous(), Tensor.zeros(3).contiguous()
  Tensor.realize_all(a, b)
  a.assign(a + 1).realize()
  np.testing.assert_equal(b.numpy(), [0, 0, 0])

def test_assign_then_read_through_the_assigned_tensor():
  m = Tensor([1.0, 1.0]).realize()
  w = Tensor([5.0, 5.0]).realize()
  m.assign(m * 3)
  w.assign(w - m)      # reads the new m
  Tensor.realize_all(w, m)
  np.testing.assert_equal(m.numpy(), [3.0, 3.0])
  np.testing.assert_equal(w.numpy(), [2.0, 2.0])

# ***** copies between devices *****

def test_copy_between_two_python_devices():
  a = Tensor([1.0, 2.0, 3.0], device="PYTHON")
  b = (a * 2).to("PYTHON:1")
  items = Tensor.schedule(b + 1)
  assert [si.ast.op for si in items] == [Ops.SINK, Ops.COPY, Ops.SINK]
  c = b + 1
  assert c.device == "PYTHON:1"
  np.testing.assert_equal(c.numpy(), [3.0, 5.0, 7.0])
  np.testing.assert_equal((c.to("PYTHON") + a).numpy(), [4.0, 7.0, 10.0])

def test_copy_of_a_realized_buffer_needs_no_kernel():
  a = Tensor([1.0, 2.0], device="PYTHON").realize()
  assert [si.ast.op for si in Tensor.schedule(a.to("PYTHON:1"))] == [Ops.COPY]

# ***** memory planning *****

def test_intermediate_buffers_are_reused():
  x, w = rnd(8, 8), rnd(8, 8)
  h = x
  for _ in range(6): h = (h @ w).relu()   # each layer a kernel with an 8x8 output only the next layer reads
  items = kernels(h)
  inter = {id(si.bufs[0]) for si in items[:-1]}
  assert len(items) == 6 and len(inter) == 2   # two buffers take turns
  ref = x.numpy()
  for _ in range(6): ref = np.maximum(ref @ w.numpy(), 0)
  np.testing.assert_allclose(h.numpy(), ref, rtol=1e-4)

def test_peak_memory_is_tracked():
  GlobalCounters.reset()
  before = GlobalCounters.mem_used
  t = Tensor.ones(1000).contiguous().realize()
  assert GlobalCounters.mem_peak >= before + 4000 and GlobalCounters.mem_used >= before + 4000
  del t

def test_mlp_training_step_memory_is_bounded():
  r = np.random.default_rng(1)
  x, y = Tensor(r.standard_normal((16, 32), dtype=np.float32)), Tensor(r.standard_normal((16, 4), dtype=np.float32))
  w1 = Tensor(r.standard_normal((32, 64), dtype=np.float32) * 0.1, requires_grad=True)
  w2 = Tensor(r.standard_normal((64, 4), dtype=np.float32) * 0.1, requires_grad=True)
  def step():
    w1.grad = w2.grad = None
    loss = ((x @ w1).relu() @ w2 - y).square().mean()
    loss.backward()
    for p in (w1, w2): p.assign(p.detach() - p.grad * 0.05)
    return loss
  peaks, losses = [], []
  for _ in range(3):
    loss = step()
    unplanned = sum(b.nbytes for si in Tensor.schedule(loss, w1, w2) for b in si.bufs[:len(si.ast.src)])
    GlobalCounters.reset()
    base = GlobalCounters.mem_used
    Tensor.realize_all(loss, w1, w2)
    peaks.append(GlobalCounters.mem_peak - base)
    losses.append(loss.item())
  assert losses[2] < losses[0]
  assert peaks[1] == peaks[2]                 # steady state: nothing grows step to step
  assert 0 < peaks[2] < unplanned             # reuse: less than one buffer per kernel output

# ***** random graphs against numpy *****

def _apply(op: str, k: int, t: Tensor, n: np.ndarray, leaves: list):
  if n.ndim == 0: t, n = t.reshape(1), n.reshape(1)   # every op below has an axis to work on
  nd, sh = n.ndim, n.shape
  if op == "neg": return -t, -n
  if op == "relu": return t.relu(), np.maximum(n, 0)
  if op == "exp": return (t * 0.1).exp(), np.exp(n * np.float32(0.1))
  if op == "add_leaf":
    lt, ln = leaves[k % len(leaves)]
    return (t + lt, n + ln) if ln.shape == sh else (t + 1.5, n + np.float32(1.5))
  if op == "mul_flipped": return t * t.flip(tuple(range(nd))), n * np.flip(n)
  if op == "sum": return t.sum(k % nd, keepdim=bool(k & 1)), n.sum(k % nd, keepdims=bool(k & 1))
  if op == "max": return t.max(k % nd, keepdim=True), n.max(k % nd, keepdims=True)
  if op == "permute":
    p = list(range(nd)); random.Random(k).shuffle(p)
    return t.permute(p), n.transpose(p)
  if op == "flip": return t.flip(k % nd), np.flip(n, k % nd)
  if op == "pad":
    pw = [(0, 0)] * nd
    pw[k % nd] = (k % 2, (k // 2) % 3)
    return t.pad(tuple(x for p in reversed(pw) for x in p)), np.pad(n, pw)
  if op == "shrink":
    a = k % nd
    if sh[a] < 2: return t, n
    return t.shrink(tuple((1, s) if i == a else None for i, s in enumerate(sh))), n[tuple(slice(1, None) if i == a else slice(None) for i in range(nd))]
  if op == "flatten": return t.reshape(n.size, 1), n.reshape(n.size, 1)
  if op == "expand": return (t.unsqueeze(0).expand(2, *sh), np.broadcast_to(n[None], (2,) + sh)) if n.size <= 64 else (t, n)
  if op == "contiguous": return t.contiguous(), n
  if op == "realize": return t.realize(), n
  if op == "assign_flip":
    b = t.clone().realize()
    return b.assign(b.flip(0) * 2), np.flip(n, 0) * 2
  if op == "assign_sub_max":
    b = t.clone().realize()
    return b.assign(b - b.max(k % nd, keepdim=True)), n - n.max(k % nd, keepdims=True)
  raise AssertionError(op)

OPS = ["neg", "relu", "exp", "add_leaf", "mul_flipped", "sum", "max", "permute", "flip", "pad", "shrink", "flatten", "expand",
       "contiguous", "realize", "assign_flip", "assign_sub_max"]

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 99)), min_size=1, max_size=12),
       st.integers(0, 2**31 - 1), st.lists(st.integers(0, 99), min_size=3, max_size=3))
def test_random_graphs_match_numpy(shape, program, seed, picks):
  """Random chains of elementwise, movement, reduce, boundary and assign ops on PYTHON; a few of the intermediate
  tensors and the result are realized together and compared with numpy."""
  n = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  t = Tensor(n, device="PYTHON")
  leaves = [(t, n)]
  for op, k in program:
    t, n = _apply(op, k, t, n, leaves)
    leaves.append((t, n))
  chosen = [leaves[p % len(leaves)] for p in picks] + [(t, n)]
  Tensor.realize_all(*[c[0] for c in chosen])
  for ct, cn in chosen: np.testing.assert_allclose(ct.numpy(), cn, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("limit", [3, 4, 8])
def test_kernels_respect_the_renderers_buffer_limit(monkeypatch, limit):
  # a device that binds few buffers per kernel (WebGPU: 8 storage buffers) gets its wide kernels split, same results
  monkeypatch.setattr(Device.renderer("PYTHON"), "max_buffers", limit)
  xs = [Tensor(np.full((3, 4), i + 1, np.float32), device="PYTHON").realize() for i in range(11)]
  w = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4), device="PYTHON").realize()
  out = (sum(x * (i + 1) for i, x in enumerate(xs)).relu() @ w + xs[0]).sum(1)
  items = out.schedule()
  assert items and all(len(si.bufs) <= limit for si in items), [len(si.bufs) for si in items]
  want = (sum(np.full((3, 4), i + 1, np.float32) * (i + 1) for i in range(11)) @ np.arange(16, dtype=np.float32).reshape(4, 4) + 1).sum(1)
  np.testing.assert_allclose(out.numpy(), want)

@pytest.mark.parametrize("limit", [0, 1000])
def test_kernels_respect_the_renderers_loop_pass_limit(monkeypatch, limit):
  # a device that ends a thread's loops after so many passes in all (Mesa's software GPUs: 65535) gets the reductions of
  # a kernel computed apart where together they could pass it: a sum plus a max, layernorm's mean and variance
  monkeypatch.setattr(Device.renderer("PYTHON"), "loop_pass_max", limit)
  n = 600 + limit // 1000   # another graph per limit: the schedule cache never replays the other's schedule
  x = np.random.default_rng(limit).standard_normal((2, n)).astype(np.float32)
  a, b = Tensor(x[0], device="PYTHON").realize(), Tensor(x[1], device="PYTHON").realize()
  most = lambda items: max(sum(u.op is Ops.REDUCE_AXIS for u in si.ast.toposort()) for si in items)
  both, ln = a.sum() + b.max(), Tensor(x, device="PYTHON").layernorm()
  assert most(both.schedule()) == (1 if limit else 2) and most(ln.schedule()) == (1 if limit else 2)
  np.testing.assert_allclose(both.numpy(), x[0].sum() + x[1].max(), rtol=1e-5)
  np.testing.assert_allclose(ln.numpy(), (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5), atol=1e-5)

def shares_memory(a, b) -> bool: return a.base is b.base and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_no_kernel_binds_memory_it_writes_twice(device, monkeypatch):
  """What docs/writing-a-backend.md promises renderers (restrict/noalias pointers are safe): no output parameter of a kernel
  shares memory with another parameter. In-place assigns read their target's old value through the output's own
  parameter: Adam's three updates in one kernel, a value reading a reduction of its own buffer, a slice, a flip, an SGD step."""
  import tinycore.tensor as tensor_module
  from tinycore.nn import optim
  run, in_place = tensor_module.run_schedule, []
  def checked(items, var_vals=None):
    for si in items:
      if si.ast.op is not Ops.SINK: continue
      for i, out in enumerate(si.bufs[:stores(si)]):
        assert not any(shares_memory(out, b) for j, b in enumerate(si.bufs) if j != i), f"output {i} shares memory with another parameter: {si.bufs}"
      in_place.append(reads_in_place(si))
    return run(items, var_vals)
  monkeypatch.setattr(tensor_module, "run_schedule", checked)
  x = Tensor(np.arange(8, dtype=np.float32), device=device).contiguous().realize()
  x.assign(x * 2 + 1).realize()
  x.assign(x - x.sum() / 8).realize()
  x[2:5] = x[2:5] * 3
  x.assign(x.flip(0)).realize()
  p, m, v = (Tensor(np.full(6, k, np.float32), device=device).contiguous().realize() for k in (1.0, 0.5, 0.25))
  g = Tensor(np.arange(6, dtype=np.float32), device=device).realize()
  m.assign(m * 0.9 + g * 0.1)
  v.assign(v * 0.99 + g * g * 0.01)
  p.assign(p - 0.1 * m / (v.sqrt() + 1e-8)).realize()
  w, old = Tensor(np.full((3, 2), 0.5, np.float32), device=device, requires_grad=True), Tensor.training
  opt = optim.SGD([w], lr=0.1, momentum=0.9)
  try:
    Tensor.training = True
    for _ in range(2):
      opt.zero_grad()
      (Tensor(np.ones((4, 3), np.float32), device=device) @ w).relu().sum().backward()
      opt.step()
  finally: Tensor.training = old
  assert any(in_place) and not all(in_place), in_place   # some kernels did update a buffer in place

def test_assign_of_a_value_reading_a_reduction_of_its_own_buffer():
  # LAMB's trust ratio: the norm of w fuses per copy behind an expand; inside the kernel writing w it would read
  # elements already written (the last two came out wrong), so it must run first, in a kernel of its own
  ref = np.array([0.3, -1.2, 0.5, 2.0, -0.7], np.float32)
  rr = np.array([1.0, 0.5, -0.25, 0.125, 2.0], np.float32)
  w, r = Tensor(ref).contiguous().realize(), Tensor(rr).contiguous().realize()
  wn = w.square().sum().sqrt()
  w.assign(w - 0.1 * (wn > 0).where(wn / r.square().sum().sqrt(), 1.0) * r).realize()
  np.testing.assert_allclose(w.numpy(), ref - 0.1 * np.sqrt((ref ** 2).sum()) / np.sqrt((rr ** 2).sum()) * rr, rtol=1e-6)

@st.composite
def conv_cases(draw):
  """(batch, channels in, out, kernel, stride, dilation, padding, size): every size at least the dilated kernel's span
  past its padding, so the output has a pixel."""
  k, s, d, p = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(0, 2))
  return (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 5)), k, s, d, p, max(1, (k - 1) * d + 1 - 2 * p) + draw(st.integers(0, 6)))

@settings(max_examples=25, deadline=None)
@given(conv_cases(), st.integers(0, 2**31 - 1))
def test_a_convs_input_gradient_is_one_kernel_on_the_cpu(case, seed):
  """The input gradient of a conv sums its windows of products (each a sum over the output channels) back into pixels:
  a reduction nested in another, each of its values used once. On the CPU it is one kernel (the windows, k*k times the
  input's size, are never written) and equals numpy's scatter of the products."""
  b, c, o, k, s, d, p, n = case
  rng = np.random.default_rng(seed)
  xs, ws = rng.standard_normal((b, c, n, n)).astype(np.float32), rng.standard_normal((o, c, k, k)).astype(np.float32)
  x = Tensor(xs, device="CPU").requires_grad_()
  out = x.conv2d(Tensor(ws, device="CPU"), stride=s, dilation=d, padding=p)
  gs = rng.standard_normal(out.shape).astype(np.float32)
  (dx,) = (out * Tensor(gs, device="CPU")).sum().gradient(x)
  assert len(kernels(dx)) == 1
  want = np.zeros((b, c, n + 2 * p, n + 2 * p), np.float64)
  for i in range(k):
    for j in range(k):
      want[:, :, i * d:i * d + s * out.shape[2]:s, j * d:j * d + s * out.shape[3]:s] += np.einsum("bohw,oc->bchw", gs, ws[:, :, i, j])
  np.testing.assert_allclose(dx.numpy(), want[:, :, p:p + n, p:p + n], rtol=1e-4, atol=1e-4)

_NEST_OPS = {"sum": (lambda t, a: t.sum(a), lambda x, a: x.sum(a)), "max": (lambda t, a: t.max(a), lambda x, a: x.max(a)),
             "min": (lambda t, a: t.min(a), lambda x, a: x.min(a))}

@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=3, max_size=3), st.permutations(range(3)), st.sampled_from(list(_NEST_OPS)),
       st.sampled_from(list(_NEST_OPS)), st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_reductions_nested_in_one_cpu_kernel_match_numpy(shape, perm, inner, outer, pairs, third, seed):
  """Found by the ONNX Unique test once nested reductions fused on the CPU: a sum over i of any over j of all over d
  (three loops of 4) summed only the terms where i == j, as the vectors of j's loop were given to i's too (cpu.py's
  twins are sums side by side, never one inside another). Reductions nested two or three deep, over a permuted input
  (index math with // and %), axes of equal lengths or not, an outer one reading the inner's values through a mask of
  aranges (j < i) or another tensor of its shape: one CPU kernel, numpy's values."""
  rng = np.random.default_rng(seed)
  data = rng.integers(-3, 4, [shape[i] for i in np.argsort(perm)]).astype(np.float32)
  x, X = data.transpose(perm), Tensor(data, device="CPU").permute(*perm)
  a, b, c = shape
  if pairs:   # the inner reduction reads two views of the input: rows i and j of a (a, a, c) comparison, as Unique does
    x, X = (x[:, None, 0, :] == x[None, :, 0, :]).astype(np.float32), (X[:, 0, :].reshape(a, 1, c) == X[:, 0, :].reshape(1, a, c)).float()
    b = a
  t_in, n_in = _NEST_OPS[inner]
  t_out, n_out = _NEST_OPS[outer]
  low = np.arange(b)[None, :] < np.arange(a)[:, None] + 1
  mid = n_in(x, 2) * np.where(low, 2, -1)
  got = t_out(t_in(X, 2) * (Tensor.arange(b, device="CPU").reshape(1, b) < Tensor.arange(a, device="CPU").reshape(a, 1) + 1).where(2, -1), 1)
  want = n_out(mid, 1)
  if third: got, want = got.sum(), want.sum()
  assert len(kernels(got)) == 1
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
