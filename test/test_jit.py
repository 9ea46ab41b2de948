"""TinyJit: replays match eager runs without scheduling, in-place state flows through, and unreplayable calls are refused."""
import numpy as np
import pytest
import tinycore.tensor
from tinycore import Tensor, GlobalCounters, nn
from tinycore.jit import TinyJit, JitError
from tinycore.nn import optim

RNG = np.random.default_rng(2)
def arr(*shape, dtype=np.float32): return RNG.standard_normal(shape).astype(dtype)

def test_replay_matches_numpy_and_does_not_schedule(monkeypatch):
  w = Tensor(arr(3, 4))
  @TinyJit
  def f(x, y): return ((x @ w) * y).relu().sum(1)
  for i in range(5):
    if i == 2:  # from the third call on, only the captured kernels run
      monkeypatch.setattr(tinycore.tensor, "create_schedule", lambda outs: pytest.fail("a replay scheduled"))
      kernels = GlobalCounters.kernel_count
    x, y = arr(2, 3), arr(2, 4)
    np.testing.assert_allclose(f(Tensor(x), Tensor(y)).numpy(), np.maximum((x @ w.numpy()) * y, 0).sum(1), rtol=1e-5, atol=1e-6)
  assert GlobalCounters.kernel_count - kernels == 3 * len(f.captured) and len(f.captured) > 0

def test_in_place_updates_reach_the_replay():
  w = Tensor(np.ones(3, np.float32))
  f = TinyJit(lambda x: x * w)
  x = Tensor(np.arange(3, dtype=np.float32))
  for k in range(1, 5):
    w.assign(w * 2).realize()
    np.testing.assert_array_equal(f(x).numpy(), np.arange(3) * 2 ** k)

def test_returned_tensors_are_overwritten_by_the_next_replay():
  f = TinyJit(lambda x: x + 1)
  outs = [f(Tensor([float(i)])) for i in range(4)]
  assert outs[2] is outs[3] and outs[3].item() == 4.0

def train_mlp(use_jit: bool, steps: int = 4) -> list[np.ndarray]:
  Tensor.manual_seed(3)
  model = [nn.Linear(4, 8), nn.Linear(8, 3)]
  opt = optim.Adam(nn.state.get_parameters(model), lr=0.05)
  sched = optim.StepLR(opt, step_size=2, gamma=0.5)
  def step(x, y):
    opt.zero_grad()
    loss = model[1](model[0](x).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    return loss.realize(*opt.schedule_step())
  fn = TinyJit(step) if use_jit else step
  data = np.random.default_rng(4)
  losses = []
  for _ in range(steps):
    losses.append(fn(Tensor(data.standard_normal((6, 4)).astype(np.float32)), Tensor(data.integers(0, 3, 6).astype(np.int32))).item())
    sched.step()
  return [np.array(losses)] + [p.numpy() for p in opt.params]

def test_training_step_matches_eager():
  for got, want in zip(train_mlp(True), train_mlp(False)): np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

def test_decorating_a_method_and_kwargs():
  class Model:
    def __init__(self): self.scale = Tensor([3.0])
    @TinyJit
    def forward(self, x, *, bias): return x * self.scale + bias
  m = Model()
  for i in range(4): assert m.forward(Tensor([float(i)]), bias=Tensor([1.0])).item() == 3 * i + 1

def captured(fn, *args, **kwargs):
  jit = TinyJit(fn)
  for _ in range(2): jit(*args, **kwargs)
  return jit

@pytest.mark.parametrize("bad_args,message", [
  ((Tensor(arr(3, 2)), 2.0), r"argument 0 is Tensor\(3, 2\) dtypes.float on \w+, but it was captured as Tensor\(2, 2\)"),
  ((Tensor(arr(2, 2, dtype=np.int32)), 2.0), r"argument 0 is Tensor\(2, 2\) dtypes.int"),
  ((Tensor(arr(2, 2)), 3.0), r"argument 1 is float 3.0, but it was captured as float 2.0"),
  ((Tensor(arr(2, 2)),), "1 arguments but it was captured with 2")])
def test_refuses_calls_it_cannot_replay(bad_args, message):
  jit = captured(lambda x, s: x * s, Tensor(arr(2, 2)), 2.0)
  with pytest.raises(JitError, match=message): jit(*bad_args)
  np.testing.assert_allclose(jit(Tensor(np.ones((2, 2), np.float32)), 2.0).numpy(), 2)  # still usable with the right call

def test_refuses_a_change_in_buffer_sharing():
  a = Tensor(arr(2))
  jit = captured(lambda x, y: x + y * 2, a, a)
  with pytest.raises(JitError, match="shares a buffer"): jit(Tensor(arr(2)), Tensor(arr(2)))
  assert jit(a, a).numpy().tolist() == (a.numpy() * 3).tolist()

def test_refuses_keyword_changes_and_reset_recaptures():
  jit = captured(lambda x, **kw: x + sum(kw.values()), Tensor(arr(2)), b=Tensor(arr(2)))
  with pytest.raises(JitError, match="keyword arguments"): jit(Tensor(arr(2)), c=Tensor(arr(2)))
  jit.reset()
  for _ in range(3): out = jit(Tensor(np.ones(3, np.float32)), c=Tensor(np.ones(3, np.float32)))
  assert out.numpy().tolist() == [2, 2, 2]

def test_nested_capture_is_refused():
  inner = TinyJit(lambda x: x * 2)
  outer = TinyJit(lambda x: inner(x) + 1)
  outer(Tensor([1.0]))  # inner runs plainly
  with pytest.raises(JitError, match="inside another"): outer(Tensor([1.0]))  # inner would capture while outer captures

# ***** random numbers inside a jit *****

def test_rand_in_a_jit_is_fresh_each_replay_and_follows_the_seed():
  f = TinyJit(lambda: Tensor.rand(8))
  Tensor.manual_seed(11)
  jitted = [f().numpy().copy() for _ in range(6)]  # calls 1 and 2 run and capture; 3..6 replay
  Tensor.manual_seed(11)
  eager = [Tensor.rand(8).numpy() for _ in range(6)]
  assert len({v.tobytes() for v in jitted}) == 6  # every call new numbers, replays included
  for got, want in zip(jitted, eager): np.testing.assert_array_equal(got, want)
  # reseeding between replays restarts the sequence, and eager calls in between advance it for the jit too
  Tensor.manual_seed(11)
  np.testing.assert_array_equal(f().numpy(), eager[0])
  Tensor.rand(8)
  np.testing.assert_array_equal(f().numpy(), eager[2])

def test_dropout_and_several_rand_calls_in_a_jit_match_eager():
  x = Tensor(np.ones((4, 16), np.float32))
  def step(x):
    with Tensor.train(): return (x.dropout(0.5) + Tensor.randn(4, 16) * 0 + Tensor.rand(4, 1, contiguous=False) * Tensor.rand(1, 16)).realize()
  f = TinyJit(step)
  Tensor.manual_seed(2)
  jitted = [f(x).numpy().copy() for _ in range(5)]
  Tensor.manual_seed(2)
  eager = [step(x).numpy() for _ in range(5)]
  for got, want in zip(jitted, eager): np.testing.assert_array_equal(got, want)
  masks = {(j > 1.5).tobytes() for j in jitted}  # kept elements are 2 + [0, 1), dropped ones [0, 1)
  assert len(masks) == 5
