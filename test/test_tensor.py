"""The Tensor object: creation, random numbers (threefry), reading data back, properties, assign/realize semantics, errors."""
import math
import numpy as np
import pytest
from tinycore import Tensor, dtypes, Context, Device

# ***** creation *****

@pytest.mark.parametrize("data,dtype,shape", [
  ([1, 2, 3], dtypes.int32, (3,)), ([1.0, 2], dtypes.float32, (2,)), ([True, False], dtypes.bool, (2,)), ([True, 2], dtypes.int32, (2,)),
  ([[1, 2], [3, 4]], dtypes.int32, (2, 2)), ([], dtypes.float32, (0,)), ([[]], dtypes.float32, (1, 0)), (3, dtypes.int32, ()),
  (2.5, dtypes.float32, ()), (True, dtypes.bool, ()), ((1, 2.5), dtypes.float32, (2,)), (np.float32(1.5), dtypes.float32, ()),
], ids=str)
def test_dtype_and_shape_inference(data, dtype, shape):
  t = Tensor(data)
  assert t.dtype == dtype and t.shape == shape
  np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=np.asarray(t.numpy()).dtype))

@pytest.mark.parametrize("npdt", [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64])
def test_from_numpy_keeps_dtype_and_values(npdt):
  a = (np.arange(-3, 9).reshape(3, 4) % 5).astype(npdt)
  t = Tensor(a)
  assert t.numpy().dtype == np.dtype(npdt) and t.shape == (3, 4)
  np.testing.assert_array_equal(t.numpy(), a)
  np.testing.assert_array_equal(Tensor(a.T).numpy(), a.T)  # a non-contiguous array

def test_creation_with_an_explicit_dtype():
  assert Tensor([1.7, -1.7], dtype=dtypes.int32).numpy().tolist() == [1, -1]
  assert Tensor([300, -1], dtype=dtypes.uint8).numpy().tolist() == [44, 255]  # Python ints wrap into the dtype
  assert Tensor([1, 2], dtype="float16").dtype == dtypes.float16
  np.testing.assert_array_equal(Tensor([0.1, 1e-3], dtype=dtypes.bfloat16).numpy(), np.float32([0.10009765625, 0.00099945068359375]))
  assert Tensor(b"\x01\x02\xff").numpy().tolist() == [1, 2, 255] and Tensor(b"\x00\x00\x80\x3f", dtype=dtypes.float32).item() == 1.0
  assert Tensor(np.arange(3), dtype=dtypes.float32).dtype == dtypes.float32
  t = Tensor([1.0, 2.0])
  assert Tensor(t).uop is t.uop and Tensor(t, dtype=dtypes.int32).numpy().tolist() == [1, 2]

def test_creation_errors():
  with pytest.raises(TypeError, match="list of Tensors"): Tensor([Tensor(1.0)])
  with pytest.raises(TypeError, match="cannot make a Tensor"): Tensor({"a": 1})
  with pytest.raises(ValueError, match="ragged"): Tensor([[1, 2], [3]])
  with pytest.raises(ValueError): Tensor([[1.0, 2.0], [3.0]])
  with pytest.raises(TypeError, match="is not a dtype"): Tensor([1], dtype="float7")
  with pytest.raises(ValueError, match="negative"): Tensor.full((2, -1), 0)

def test_full_zeros_ones_empty():
  assert Tensor.zeros(2, 3).dtype == dtypes.float32 and Tensor.zeros(2, 3).numpy().tolist() == [[0.0] * 3] * 2
  assert Tensor.ones((2,), dtype=dtypes.int8).numpy().tolist() == [1, 1] and Tensor.ones(2, dtype=dtypes.int8).dtype == dtypes.int8
  assert Tensor.full((2, 2), 7).dtype == dtypes.int32 and Tensor.full((2,), 2.5).dtype == dtypes.float32 and Tensor.full(3, True).dtype == dtypes.bool
  assert Tensor.full((), 4.0).shape == () and Tensor.zeros(0, 4).numpy().shape == (0, 4)
  e = Tensor.empty(3, 2, dtype=dtypes.int16)
  assert e.shape == (3, 2) and e.dtype == dtypes.int16
  x = Tensor([[1, 2, 3]], dtype=dtypes.uint8)
  for t, v in ((x.zeros_like(), 0), (x.ones_like(), 1), (x.full_like(9), 9), (x.const_like(5), 5)):
    assert t.shape == (1, 3) and t.dtype == dtypes.uint8 and (t.numpy() == v).all()
  assert x.zeros_like(dtype=dtypes.float32).dtype == dtypes.float32 and x.empty_like().shape == (1, 3)

@pytest.mark.parametrize("args,kw", [((5,), {}), ((2, 9, 3), {}), ((0, 1, 0.3), {}), ((5, 1, -1), {}), ((10, 0, -3), {}), ((0,), {}), ((3, 3), {}),
                                     ((1, 2, 0.25), {}), ((4,), {"dtype": dtypes.float16}), ((-3, 3), {"dtype": dtypes.int8})], ids=str)
def test_arange_matches_numpy(args, kw):
  t = Tensor.arange(*args, **kw)
  ref = np.arange(*args)
  assert t.shape == ref.shape
  np.testing.assert_allclose(t.numpy().astype(np.float64), ref, rtol=1e-6, atol=1e-6)
  assert t.dtype == kw.get("dtype", dtypes.float32 if any(isinstance(a, float) for a in args) else dtypes.int32)

def test_linspace_eye_meshgrid():
  np.testing.assert_allclose(Tensor.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5), rtol=1e-6)
  np.testing.assert_allclose(Tensor.linspace(-2, 3, 7).numpy(), np.linspace(-2, 3, 7), rtol=1e-6)
  assert Tensor.linspace(2, 3, 1).numpy().tolist() == [2.0] and Tensor.linspace(2, 3, 0).shape == (0,)
  assert Tensor.linspace(0, 10, 3, dtype=dtypes.int32).numpy().tolist() == [0, 5, 10]
  np.testing.assert_array_equal(Tensor.eye(3, 4).numpy(), np.eye(3, 4)) and None
  assert Tensor.eye(2, dtype=dtypes.bool).dtype == dtypes.bool and Tensor.eye(3).numpy().trace() == 3
  a, b = Tensor([1, 2, 3]), Tensor([4, 5])
  for idx in ("ij", "xy"):
    for t, r in zip(a.meshgrid(b, indexing=idx), np.meshgrid([1, 2, 3], [4, 5], indexing=idx)): np.testing.assert_array_equal(t.numpy(), r)

def test_requires_grad_flags():
  t = Tensor([1.0], requires_grad=True)
  assert t.requires_grad is True and Tensor([1.0]).requires_grad is None
  assert Tensor.zeros(2, requires_grad=True).requires_grad and Tensor.rand(2, requires_grad=True).requires_grad
  assert Tensor([1.0]).requires_grad_() .requires_grad is True and t.detach().requires_grad is False

# ***** random numbers *****

def threefry2x32(c0, c1, k0, k1):
  """Threefry-2x32 with 20 rounds (Random123), restated here as the reference."""
  M = 0xFFFFFFFF
  ks, rot = [k0, k1, k0 ^ k1 ^ 0x1BD11BDA], [13, 15, 26, 6, 17, 29, 16, 24]
  x0, x1 = (c0 + ks[0]) & M, (c1 + ks[1]) & M
  for i in range(5):
    for r in rot[(i % 2) * 4:(i % 2) * 4 + 4]:
      x0 = (x0 + x1) & M
      x1 = (((x1 << r) | (x1 >> (32 - r))) & M) ^ x0
    x0, x1 = (x0 + ks[(i + 1) % 3]) & M, (x1 + ks[(i + 2) % 3] + i + 1) & M
  return x0, x1

def test_threefry_reference_matches_the_random123_known_answers():
  assert threefry2x32(0, 0, 0, 0) == (0x6B200159, 0x99BA4EFE)
  assert threefry2x32(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF) == (0x1CB996FC, 0xBB002BE7)
  assert threefry2x32(0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344) == (0xC4923A9C, 0x483DF7A0)

@pytest.mark.parametrize("seed", [0, 1234, 2 ** 40 + 7])
def test_random_bits_are_threefry_of_the_counter(seed):
  Tensor.manual_seed(seed)
  bits = Tensor._random_bits(6, None).numpy()
  assert bits.dtype == np.uint32
  assert bits.tolist() == [threefry2x32(i, 1, seed & 0xFFFFFFFF, seed >> 32)[0] for i in range(6)]  # the first call after a seed is call 1
  second = Tensor._random_bits(6, None).numpy()
  assert second.tolist() == [threefry2x32(i, 2, seed & 0xFFFFFFFF, seed >> 32)[0] for i in range(6)]
  Tensor.manual_seed(seed)
  np.testing.assert_array_equal(Tensor.rand(6).numpy(), (bits >> 8).astype(np.float32) * np.float32(2 ** -24))

def test_same_seed_same_numbers_different_seed_different_numbers():
  Tensor.manual_seed(42)
  a, b = Tensor.rand(64).numpy(), Tensor.randn(3, 5).numpy()
  Tensor.manual_seed(42)
  np.testing.assert_array_equal(Tensor.rand(64).numpy(), a)
  np.testing.assert_array_equal(Tensor.randn(3, 5).numpy(), b)
  assert not np.array_equal(Tensor.rand(64).numpy(), a)  # the next call draws new numbers
  Tensor.manual_seed(43)
  assert not np.array_equal(Tensor.rand(64).numpy(), a)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64])
def test_rand_is_in_the_half_open_unit_interval(dt):
  Tensor.manual_seed(0)
  r = Tensor.rand(2048, dtype=dt)
  assert r.dtype == dt and r.shape == (2048,)
  x = r.numpy().astype(np.float64)
  assert x.min() >= 0.0 and x.max() < 1.0 and abs(x.mean() - 0.5) < 0.03 and abs(x.var() - 1 / 12) < 0.01
  assert len(np.unique(x)) > {dtypes.bfloat16: 200, dtypes.float16: 1000}.get(dt, 1900)

def test_distribution_moments_and_ranges():
  Tensor.manual_seed(1)
  n = Tensor.randn(64, 64).numpy()
  assert n.dtype == np.float32 and abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05 and np.isfinite(n).all()
  m = Tensor.normal(4096, mean=3.0, std=0.5).numpy()
  assert abs(m.mean() - 3.0) < 0.05 and abs(m.std() - 0.5) < 0.05
  u = Tensor.uniform(4096, low=-2.0, high=5.0).numpy()
  assert u.min() >= -2.0 and u.max() < 5.0 and abs(u.mean() - 1.5) < 0.15
  i = Tensor.randint(4096, low=-3, high=4).numpy()
  assert i.dtype == np.int32 and set(np.unique(i).tolist()) == set(range(-3, 4))
  p = Tensor.randperm(50).numpy()
  assert sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
  k = Tensor.kaiming_uniform(64, 32).numpy()
  bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.01 ** 2)) / math.sqrt(32)
  assert k.shape == (64, 32) and np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
  g = Tensor.glorot_uniform(16, 48).numpy()
  assert np.abs(g).max() <= math.sqrt(6 / 64)
  assert Tensor.scaled_uniform(8, 8).numpy().max() <= 1 / 8 and Tensor.kaiming_normal(4, 9).shape == (4, 9)
  with pytest.raises(ValueError, match="high"): Tensor.randint(3, low=5, high=5)

def test_rand_like_multinomial_and_empty():
  x = Tensor.zeros(3, 4, dtype=dtypes.float16)
  assert x.rand_like().dtype == dtypes.float16 and x.randn_like().shape == (3, 4)
  assert Tensor.zeros(2, dtype=dtypes.int32).rand_like().dtype == dtypes.float32
  assert Tensor.rand(0, 3).shape == (0, 3) and Tensor.randn(0).numpy().shape == (0,)
  Tensor.manual_seed(3)
  s = Tensor([0.1, 0.0, 0.6, 0.3]).multinomial(4000, replacement=True).numpy()
  freq = np.bincount(s, minlength=4) / 4000
  assert freq[1] == 0 and np.abs(freq - [0.1, 0.0, 0.6, 0.3]).max() < 0.03
  assert Tensor([[1.0, 0.0], [0.0, 1.0]]).multinomial().numpy().tolist() == [[0], [1]]
  with pytest.raises(RuntimeError, match="without replacement"): Tensor([0.5, 0.5]).multinomial(3)

def test_train_modes():
  assert Tensor.training is False
  with Tensor.train():
    assert Tensor.training is True
    with Tensor.train(False): assert Tensor.training is False
    assert Tensor.training is True
  @Tensor.train()
  def step(): return Tensor.training
  assert step() is True and Tensor.training is False
  with Context(TRAINING=1): assert (Tensor.ones(64).dropout(0.5).numpy() == 0).any()

# ***** reading data back *****

def test_numpy_tolist_item_data():
  t = Tensor([[1.5, 2.0], [3.0, -4.25]])
  assert t.tolist() == [[1.5, 2.0], [3.0, -4.25]] and Tensor(7).tolist() == 7 and Tensor([True]).tolist() == [True]
  assert t[1, 1].item() == -4.25 and isinstance(Tensor(3).item(), int) and isinstance(Tensor(True).item(), bool)
  assert Tensor([[5]]).item() == 5
  mv = t.data()
  assert mv.format == "f" and mv.shape == (2, 2) and mv.tolist() == [[1.5, 2.0], [3.0, -4.25]]
  assert Tensor([1, 2], dtype=dtypes.int16).data().format == "h"
  np.testing.assert_array_equal(np.asarray(t), t.numpy())
  assert np.asarray(t, dtype=np.int32).dtype == np.int32
  b = Tensor([1.0, 2.5], dtype=dtypes.bfloat16)
  assert b.numpy().dtype == np.float32 and b.numpy().tolist() == [1.0, 2.5] and b.tolist() == [1.0, 2.5]
  assert t.T.numpy().tolist() == [[1.5, 3.0], [2.0, -4.25]] and t[:, ::-1].tolist() == [[2.0, 1.5], [-4.25, 3.0]]
  assert Tensor.zeros(0, 2).tolist() == [] and Tensor.zeros(2, 0, dtype=dtypes.int8).numpy().dtype == np.int8
  with pytest.raises(ValueError, match="one element"): t.item()

def test_properties():
  t = Tensor.zeros(2, 3, 4, dtype=dtypes.float16)
  assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel() == 24 and t.size() == (2, 3, 4) and t.size(-1) == 4
  assert t.element_size() == 2 and t.nbytes() == 48 and len(t) == 2 and t.is_floating_point() and not Tensor([1]).is_floating_point()
  assert t.T.shape == (3, 2, 4) and Tensor.zeros(3, 5).T.shape == (5, 3) and t.device == Device.DEFAULT
  assert "(2, 3, 4)" in repr(t) and "half" in repr(t)
  assert [x.shape for x in t] == [(3, 4), (3, 4)]
  with pytest.raises(TypeError, match="0-d"): len(Tensor(1.0))
  with pytest.raises(TypeError, match="ambiguous"): bool(Tensor([1.0]))
  with pytest.raises(TypeError, match="ambiguous"):
    if Tensor([1.0]) > 0: pass

# ***** realize, assign, clone *****

def test_assign_writes_the_buffer_and_keeps_the_tensor():
  w = Tensor.zeros(3).contiguous().realize()
  uop_buffer = w.uop
  w.assign(Tensor([1.0, 2.0, 3.0]))
  w.realize()
  assert w.numpy().tolist() == [1.0, 2.0, 3.0] and w.uop is uop_buffer  # same buffer, new contents
  w += 1
  w *= 2
  assert w.numpy().tolist() == [4.0, 6.0, 8.0]
  w.assign(5.0)
  assert w.numpy().tolist() == [5.0] * 3
  with pytest.raises(ValueError, match=r"shape \(2,\) does not match \(3,\)"): w.assign(Tensor([1.0, 2.0]))
  with pytest.raises(RuntimeError, match="dtype"): w.assign(Tensor([1, 2, 3]))

def test_assign_to_a_view_writes_through_to_the_tensor():
  x = Tensor.zeros(4).contiguous().realize()
  v = x[0:2]
  v.assign(Tensor.ones(2))
  assert x.numpy().tolist() == [1.0, 1.0, 0.0, 0.0] and v.numpy().tolist() == [1.0, 1.0]
  # other views of the buffer see it, and the view keeps reading the written buffer
  y = x.reshape(2, 2)
  x[2:4] += 5
  assert y.numpy().tolist() == [[1.0, 1.0], [5.0, 5.0]] and v.numpy().tolist() == [1.0, 1.0]

VIEWS = {  # name: (the view of a Tensor, the same view of a numpy array)
  "transpose_row": (lambda t: t.T[1], lambda a: a.T[1]),
  "flip_slice": (lambda t: t[::-1, 1:4], lambda a: a[::-1, 1:4]),
  "strided": (lambda t: t[1::2, ::3], lambda a: a[1::2, ::3]),
  "int_then_slice": (lambda t: t[2][1:5], lambda a: a[2][1:5]),
  "permute3d": (lambda t: t.reshape(2, 2, 6).permute(2, 0, 1)[1:3], lambda a: a.reshape(2, 2, 6).transpose(2, 0, 1)[1:3]),
  "reshape_slice": (lambda t: t.reshape(3, 8)[1:, 2:6], lambda a: a.reshape(3, 8)[1:, 2:6]),
}

@pytest.mark.parametrize("view", sorted(VIEWS))
def test_assign_through_movement_views_matches_numpy(view):
  tview, nview = VIEWS[view]
  a = np.arange(24, dtype=np.float32).reshape(4, 6)
  want = a.copy()
  target = nview(want)
  assert np.shares_memory(target, want)
  val = -np.arange(target.size, dtype=np.float32).reshape(target.shape) - 1
  target[...] = val
  x = Tensor(a)
  tview(x).assign(Tensor(val))
  np.testing.assert_array_equal(x.numpy(), want)

def test_assign_to_a_view_of_a_pending_assign_and_with_overlap():
  x = Tensor(np.arange(6, dtype=np.float32))
  x.assign(x * 10)  # pending: the view writes after it
  x[1:3].assign(Tensor([-1.0, -2.0]))
  assert x.numpy().tolist() == [0.0, -1.0, -2.0, 30.0, 40.0, 50.0]
  x[0:3].assign(x[3:6])  # reads the positions it does not write
  assert x.numpy().tolist() == [30.0, 40.0, 50.0, 30.0, 40.0, 50.0]
  p = Tensor.zeros(3).contiguous().realize()
  p.pad(((1, 1),)).assign(Tensor([7.0, 1.0, 2.0, 3.0, 7.0]))  # the padding is not storage: only the middle lands
  assert p.numpy().tolist() == [1.0, 2.0, 3.0]
  with pytest.raises(ValueError, match="repeats elements"): Tensor.zeros(1).contiguous().realize().expand(3).assign(Tensor([1.0, 2.0, 3.0]))

def test_inplace_operators_on_ints():
  x = Tensor([6, 7, 8]).contiguous()
  x //= 2
  x %= 3
  x <<= 1
  x |= 1
  x ^= 2
  x &= 7
  x >>= 1
  assert x.numpy().tolist() == [1, 1, 0]

def test_clone_detach_contiguous_realize():
  x = Tensor([1.0, 2.0]).contiguous().realize()
  c = x.clone()
  c += 10
  assert x.numpy().tolist() == [1.0, 2.0] and c.numpy().tolist() == [11.0, 12.0]
  a, b = Tensor([1.0]) + 1, Tensor([2.0]) * 3
  assert Tensor.realize(a, b) is a and a.uop.is_realized and b.uop.is_realized
  assert a.realize().numpy().tolist() == [2.0]  # realizing again is a no-op
  t = Tensor([3.0], requires_grad=True)
  d = t.detach() * t
  g, = d.sum().gradient(t)
  assert g.item() == 3.0  # the detached factor is a constant
  assert x.contiguous().numpy().tolist() == [1.0, 2.0] and x.T.contiguous().shape == (2,)

def test_shape_mismatch_errors_name_the_shapes():
  with pytest.raises(ValueError, match=r"cannot be broadcast"): Tensor.ones(2, 3) + Tensor.ones(4)
  with pytest.raises(ValueError, match=r"cannot reshape \(2, 3\)"): Tensor.ones(2, 3).reshape(4, 2)
  with pytest.raises(RuntimeError, match=r"reshape"): Tensor.ones(2, 3).reshape(-1, -1)
  with pytest.raises(ValueError, match=r"cannot broadcast \(2, 3\) to \(4, 3\)"): Tensor.ones(2, 3).expand(4, 3)
  with pytest.raises(RuntimeError, match=r"permut"): Tensor.ones(2, 3).permute(0, 0)
  with pytest.raises(ValueError, match=r"differ outside dimension 0"): Tensor.ones(2, 3).cat(Tensor.ones(2, 4))
  with pytest.raises(RuntimeError, match=r"matmul shape mismatch"): Tensor.ones(2, 3) @ Tensor.ones(2, 3)
  with pytest.raises(IndexError, match=r"axis 2 is out of range"): Tensor.ones(2, 3).sum(2)
  with pytest.raises(ValueError, match=r"gradient of a non-scalar"): Tensor.ones(2, requires_grad=True).gradient(Tensor.ones(2))
  with pytest.raises(TypeError, match=r"cannot combine a Tensor with str"): Tensor.ones(2) + "a"
  devs = [d for d in ("PYTHON", "CPU") if d != Device.DEFAULT]
  if devs and devs[0] in Device.specs:
    with pytest.raises(ValueError, match="different devices"): Tensor.ones(2) + Tensor.ones(2, device=devs[0])

def test_repeated_rand_calls_share_one_kernel():
  # the call index is read from a buffer, not baked in: a training loop with dropout compiles its kernels once
  from tinycore import engine
  Tensor.rand(33).numpy()
  before = engine.stats["loaded"]
  draws = [Tensor.rand(33).numpy() for _ in range(4)]
  assert engine.stats["loaded"] == before
  assert all(not np.array_equal(a, b) for a, b in zip(draws, draws[1:]))

def test_equal_graphs_in_separate_tensors_get_separate_buffers():
  # hash-consing merges Tensor.zeros(3) and Tensor.zeros(3) into one node; an assign to one must not reach the other
  # (BatchNorm's bias and running_mean are both zeros)
  a, b = Tensor.zeros(3) + 1, Tensor.zeros(3) + 1
  a.realize()
  a.assign(Tensor([5.0, 5, 5])).realize()
  assert a.tolist() == [5.0, 5, 5] and b.tolist() == [1.0, 1, 1]
  c, d = Tensor.zeros(3), Tensor.zeros(3)
  Tensor.realize_all(c, d)
  d.assign(Tensor([7.0, 7, 7])).realize()
  assert c.tolist() == [0.0, 0, 0] and d.tolist() == [7.0, 7, 7]
  e = Tensor.ones(2)
  Tensor.realize_all(e, e)  # one tensor twice is still one buffer
  assert e.tolist() == [1.0, 1.0]

def test_batchnorm_bias_and_running_mean_stay_apart():
  from tinycore.nn import BatchNorm2d
  from tinycore.nn.optim import SGD
  bn = BatchNorm2d(2)
  opt = SGD([bn.weight, bn.bias], lr=1.0)
  x = Tensor(np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2))
  with Tensor.train():
    opt.zero_grad()
    (bn(x) * Tensor([[[[1.0]], [[2.0]]]])).sum().backward()
    opt.step()
  # the running mean moved by momentum * batch mean; the bias by -lr * grad (grad of sum(out * k) w.r.t. bias is k * count)
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.numpy().mean(axis=(0, 2, 3)), rtol=1e-5)
  np.testing.assert_allclose(bn.bias.numpy(), [-8.0, -16.0], rtol=1e-5)

def test_pending_assigns_and_the_loss_run_with_the_next_assign():
  # a lazy graph reads buffers when it runs: pending effects run with the next assign, before it overwrites what they read
  t = Tensor.zeros(3).contiguous().realize()
  t.assign(Tensor.ones(3)); t.assign(t + 1)  # the same tensor assigned twice before a realize
  assert t.tolist() == [2.0, 2.0, 2.0]
  w = Tensor([1.0, 2.0], requires_grad=True).realize()
  stat = Tensor.zeros(2).contiguous().realize()
  loss = (w * w).sum()
  stat.assign(w * 10)  # like a running statistic: reads w before the update below
  loss.backward()
  w.assign(w - w.grad).realize()  # the "optimizer step"
  assert loss.item() == 5.0 and stat.tolist() == [10.0, 20.0] and w.tolist() == [-1.0, -2.0]

@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64", "int32"])
def test_2d_matmul_builds_the_nodes_of_the_general_path(dt):
  """Tensor.dot builds a 2-d float matmul directly (_matmul_2d); its graph is the general path's, node for node (the same
  objects, by hash-consing), for every size (sizes of 1 and ints take the general path) and half dtypes (their sums
  accumulate in float32); every shape and device it stores is what the graph properties compute; the numbers are
  numpy's."""
  from tinycore.uop import UOp
  dtype = getattr(dtypes, dt)
  for n, k, m in [(2, 3, 4), (5, 2, 2), (1, 3, 4), (3, 1, 4), (3, 4, 1), (7, 16, 9)]:
    a = Tensor(np.arange(n * k).reshape(n, k) % 5 - 2, dtype=dtype).contiguous()
    b = Tensor(np.arange(k * m).reshape(k, m) % 3 - 1, dtype=dtype).contiguous()
    fast = a @ b   # built first: its seeded shapes are the nodes' own (the general path would find them built)
    for u in fast.uop.toposort():
      for prop in (UOp.shape, UOp.device):
        if prop.name in u.__dict__: assert u.__dict__[prop.name] == prop.fn(u), (n, k, m, u.op, prop.name)
    assert fast.uop is a._dot(b).uop, (n, k, m)
    want = (np.arange(n * k).reshape(n, k) % 5 - 2).astype(np.float64) @ (np.arange(k * m).reshape(k, m) % 3 - 1)
    np.testing.assert_allclose(fast.numpy().astype(np.float64), want, err_msg=f"{n}x{k}x{m}")

@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64", "int32"])
def test_softmax_builds_the_nodes_of_the_general_path(dt):
  """Tensor.softmax builds a float softmax's nodes directly (_softmax_nodes): the general path's graph node for node, for
  every axis (negative too), shapes with dims of 1 (an axis of length 1, and ints, take the general path), half dtypes;
  the stored shapes and devices are what the properties compute; the numbers are numpy's."""
  from tinycore.uop import UOp
  dtype = getattr(dtypes, dt)
  for shape in [(5,), (3, 4), (1, 6), (4, 1), (2, 3, 4), (2, 1, 5)]:
    for axis in range(-len(shape), len(shape)):
      raw = (np.arange(np.prod(shape)).reshape(shape) % 7 - 3) / 2
      x = Tensor(raw, dtype=dtype).contiguous()
      fast = x.softmax(axis)
      for u in fast.uop.toposort():
        for prop in (UOp.shape, UOp.device):
          if prop.name in u.__dict__: assert u.__dict__[prop.name] == prop.fn(u), (shape, axis, u.op, prop.name)
      _, e, ss = x._softmax(axis)
      assert fast.uop is (e / ss).uop, (shape, axis)
      if dtypes.is_float(dtype):
        r = Tensor(raw, dtype=dtype).numpy().astype(np.float64)
        want = np.exp(r - r.max(axis, keepdims=True)) / np.exp(r - r.max(axis, keepdims=True)).sum(axis, keepdims=True)
        np.testing.assert_allclose(fast.numpy().astype(np.float64), want, rtol=2e-2 if dtype.itemsize == 2 else 1e-6, err_msg=f"{shape} {axis}")

@pytest.mark.parametrize("dt", ["float32", "float16", "int32", "uint8", "bool"])
def test_arithmetic_with_a_python_number_builds_the_nodes_of_the_general_path(dt):
  """x + 1, 2 * x, x - 0.5 ... put a number of x's kind into the node directly (_arith); the node is the one the general
  path (_broadcasted, then _bin) builds, reversed operands included; a number of another kind (a float with an int
  tensor, an int with a bool one) still promotes; the numbers are numpy's."""
  from tinycore.tensor import _bin
  from tinycore.uop import Ops
  dtype = getattr(dtypes, dt)
  x = Tensor(np.arange(6).reshape(2, 3) % 2, dtype=dtype).contiguous()
  for op, name in [(Ops.ADD, "add"), (Ops.SUB, "sub"), (Ops.MUL, "mul")]:
    for y in (1, 2.5, True):
      for reverse in (False, True):
        got = getattr(x, name)(y, reverse)
        a, b = x._broadcasted(y, reverse)
        want = _bin(op, a, b) if op is not Ops.SUB or a.dtype is not dtypes.bool else a ^ b
        assert got.uop is want.uop, (name, y, reverse)
  raw = np.arange(6).reshape(2, 3) % 2
  if dt == "float32": np.testing.assert_array_equal((1 - x * 2.5 + 1).numpy(), 1 - raw * 2.5 + 1)
  if dt == "int32":
    assert (x + 0.5).dtype == dtypes.default_float and (x * 3).dtype == dtypes.int32
    np.testing.assert_array_equal((3 - x).numpy(), 3 - raw)
  if dt == "bool": assert (x + 1).dtype == dtypes.default_int and (x - True).tolist() == [[True, False, True], [False, True, False]]

@pytest.mark.parametrize("how", ["realize", "realize_all"])
def test_realizing_one_tensor_repoints_what_realize_all_would(how):
  """Realizing one tensor (by realize or realize_all) takes a short path (no owner bookkeeping); what it re-points is the
  general path's: the asked tensor only where another tensor holds the same node (that one keeps its lazy graph), the
  tensor of an assign run on the way, and the values either way."""
  go = (lambda t: t.realize()) if how == "realize" else (lambda t: Tensor.realize_all(t))
  a, b = Tensor.zeros(3) + 1, Tensor.zeros(3) + 1
  assert a.uop is b.uop
  go(a)
  assert a.uop.is_realized and not b.uop.is_realized
  np.testing.assert_equal(a.numpy(), [1, 1, 1]); np.testing.assert_equal(b.numpy(), [1, 1, 1])
  w = Tensor.zeros(4).contiguous().realize()
  y = w.assign(Tensor.arange(4).float() * 2) + 1
  go(y)
  assert y.uop.is_realized and w.uop.is_realized
  np.testing.assert_equal(y.numpy(), [1, 3, 5, 7]); np.testing.assert_equal(w.numpy(), [0, 2, 4, 6])
