"""tinycore.nn layers against float64 numpy references: forward values, and gradients against central differences."""
import itertools, math
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tinycore import Tensor, dtypes, nn

RNG = np.random.default_rng(0)

def randn(*shape) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)

def numeric_grads(ref, arrays: list[np.ndarray], G: np.ndarray, eps: float = 1e-6) -> list[np.ndarray]:
  """d sum(ref(*arrays) * G) / d arrays by central differences in float64."""
  arrays = [a.astype(np.float64) for a in arrays]
  out = []
  for a in arrays:
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
      old = a[i]
      a[i] = old + eps; hi = (ref(*arrays) * G).sum()
      a[i] = old - eps; lo = (ref(*arrays) * G).sum()
      a[i] = old
      g[i] = (hi - lo) / (2 * eps)
    out.append(g)
  return out

def check(fn, ref, arrays: list[np.ndarray], grad_of: list[int] | None = None, atol: float = 1e-4, grad_atol: float = 2e-3):
  """fn(*Tensors) against ref(*float64 arrays): the value, and the gradients of sum(out * G) w.r.t. arrays[grad_of]."""
  grad_of = list(range(len(arrays))) if grad_of is None else grad_of
  ts = [Tensor(a, requires_grad=i in grad_of) for i, a in enumerate(arrays)]
  out = fn(*ts)
  want = ref(*[a.astype(np.float64) for a in arrays])
  assert out.shape == want.shape
  G = RNG.standard_normal(want.shape)
  grads = (out * Tensor(G.astype(np.float32))).sum().gradient(*[ts[i] for i in grad_of])
  np.testing.assert_allclose(out.numpy(), want, atol=atol, rtol=1e-4)
  fixed = [a.astype(np.float64) for a in arrays]
  def ref_of(*moving):
    args = list(fixed)
    for i, m in zip(grad_of, moving): args[i] = m
    return ref(*args)
  for i, got, expect in zip(grad_of, grads, numeric_grads(ref_of, [arrays[i] for i in grad_of], G)):
    np.testing.assert_allclose(got.numpy(), expect, atol=grad_atol, rtol=2e-3, err_msg=f"gradient of argument {i}")

# ***** numpy references *****

def np_conv(x, w, b, stride, pads, dilation, groups):
  """N-d convolution, pads = [(before, after)] per spatial dim."""
  nd = w.ndim - 2
  stride, dilation = [stride] * nd if isinstance(stride, int) else stride, [dilation] * nd if isinstance(dilation, int) else dilation
  x = np.pad(x, [(0, 0), (0, 0)] + list(pads))
  K = w.shape[2:]
  O = [(x.shape[2 + i] - dilation[i] * (K[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
  cin, cout = w.shape[1], w.shape[0] // groups
  out = np.zeros((x.shape[0], w.shape[0], *O))
  for g in range(groups):
    for k in itertools.product(*[range(s) for s in K]):
      sl = tuple(slice(k[i] * dilation[i], k[i] * dilation[i] + stride[i] * (O[i] - 1) + 1, stride[i]) for i in range(nd))
      patch = x[(slice(None), slice(g * cin, (g + 1) * cin)) + sl]
      out[:, g * cout:(g + 1) * cout] += np.einsum("nc...,oc->no...", patch, w[(slice(g * cout, (g + 1) * cout), slice(None)) + k])
  return out if b is None else out + b.reshape(1, -1, *[1] * nd)

def np_conv_transpose2d(x, w, b, stride, padding, output_padding, dilation, groups):
  """The scatter definition: out[o, i*s + k*d - p] += x[c, i] * w[c, o, k]."""
  N, C, H, W = x.shape
  cin, cout = C // groups, w.shape[1]
  kh, kw = w.shape[2:]
  full = np.zeros((N, cout * groups, (H - 1) * stride + dilation * (kh - 1) + 1 + output_padding, (W - 1) * stride + dilation * (kw - 1) + 1 + output_padding))
  for g in range(groups):
    for ky, kx in itertools.product(range(kh), range(kw)):
      full[:, g * cout:(g + 1) * cout, ky * dilation:ky * dilation + stride * (H - 1) + 1:stride, kx * dilation:kx * dilation + stride * (W - 1) + 1:stride] += \
        np.einsum("nchw,co->nohw", x[:, g * cin:(g + 1) * cin], w[g * cin:(g + 1) * cin, :, ky, kx])
  out = full[:, :, padding:full.shape[2] - padding, padding:full.shape[3] - padding]
  return out if b is None else out + b.reshape(1, -1, 1, 1)

def np_norm(x, axes, eps):
  m = x.mean(axis=axes, keepdims=True)
  return (x - m) / np.sqrt(((x - m) ** 2).mean(axis=axes, keepdims=True) + eps)

def np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

# ***** layers *****

def layer_with(layer, **params):
  """The layer with its parameters replaced by fixed tensors (the check passes them in as arguments)."""
  def run(x, *ps):
    for name, p in zip(params, ps): setattr(layer, name, p)
    return layer(x)
  return run

def test_linear():
  x, w, b = randn(3, 5), randn(4, 5), randn(4)
  check(layer_with(nn.Linear(5, 4), weight=0, bias=0), lambda x, w, b: x @ w.T + b, [x, w, b])

def test_linear_no_bias_batched():
  lin = nn.Linear(5, 4, bias=False)
  assert lin.bias is None
  check(layer_with(lin, weight=0), lambda x, w: x @ w.T, [randn(2, 3, 5), randn(4, 5)])

CONV_CASES = [dict(), dict(stride=2), dict(padding=1), dict(padding=(1, 0)), dict(dilation=2, padding=2), dict(groups=2), dict(padding="same"),
              dict(stride=(1, 2), padding=(0, 1, 1, 0))]

@pytest.mark.parametrize("kw", CONV_CASES, ids=str)
def test_conv2d(kw):
  conv = nn.Conv2d(4, 6, 3, **kw)
  x, w, b = randn(2, 4, 6, 7), randn(6, 4 // kw.get("groups", 1), 3, 3), randn(6)
  pad = kw.get("padding", 0)
  if pad == "same": pads = [(1, 1), (1, 1)]
  elif isinstance(pad, int): pads = [(pad, pad)] * 2
  elif len(pad) == 2: pads = [(p, p) for p in pad]
  else: pads = [(pad[2], pad[3]), (pad[0], pad[1])]  # torch-style flat: last dim first
  ref = lambda x, w, b: np_conv(x, w, b, kw.get("stride", 1), pads, kw.get("dilation", 1), kw.get("groups", 1))
  check(layer_with(conv, weight=0, bias=0), ref, [x, w, b])

@settings(max_examples=6, deadline=None)
@given(k=st.integers(1, 3), stride=st.integers(1, 2), dilation=st.integers(1, 2), pad=st.integers(0, 2), groups=st.sampled_from([1, 3]),
       extra=st.integers(0, 3))
def test_conv1d_random_configs(k, stride, dilation, pad, groups, extra):
  length = dilation * (k - 1) + 1 + extra  # always at least one output position
  conv = nn.Conv1d(3, 6, k, stride=stride, padding=pad, dilation=dilation, groups=groups)
  assert conv.weight.shape == (6, 3 // groups, k)
  x, w, b = randn(2, 3, length), randn(6, 3 // groups, k), randn(6)
  check(layer_with(conv, weight=0, bias=0), lambda x, w, b: np_conv(x, w, b, stride, [(pad, pad)], dilation, groups), [x, w, b])

@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(stride=2, padding=1, output_padding=1), dict(dilation=2), dict(groups=2, stride=2)], ids=str)
def test_conv_transpose2d(kw):
  conv = nn.ConvTranspose2d(4, 6, 3, **kw)
  g = kw.get("groups", 1)
  assert conv.weight.shape == (4, 6 // g, 3, 3)
  x, w, b = randn(2, 4, 4, 3), randn(4, 6 // g, 3, 3), randn(6)
  ref = lambda x, w, b: np_conv_transpose2d(x, w, b, kw.get("stride", 1), kw.get("padding", 0), kw.get("output_padding", 0), kw.get("dilation", 1), g)
  check(layer_with(conv, weight=0, bias=0), ref, [x, w, b])

def test_conv_init_and_param_names_follow_tinygrad():
  conv, tconv, c1 = nn.Conv2d(4, 6, (3, 2)), nn.ConvTranspose1d(4, 6, 5), nn.Conv1d(4, 8, 3, groups=2, bias=False)
  assert (conv.weight.shape, conv.bias.shape, tconv.weight.shape, c1.weight.shape, c1.bias) == ((6, 4, 3, 2), (6,), (4, 6, 5), (8, 2, 3), None)
  bound = 1 / math.sqrt(4 * 3 * 2)
  w = conv.weight.numpy()
  assert np.abs(w).max() <= bound and np.abs(w).max() > bound / 2 and np.abs(conv.bias.numpy()).max() <= bound
  with pytest.raises(ValueError, match="divisible by groups"): nn.Conv2d(4, 6, 3, groups=4)
  with pytest.raises(ValueError, match="stride 1"): nn.Conv2d(4, 6, 3, stride=2, padding="same")

def test_batchnorm_training_updates_running_stats():
  bn = nn.BatchNorm2d(3, momentum=0.2)
  assert bn.running_mean.shape == bn.running_var.shape == (3,) and bn.running_mean.requires_grad is False
  x, w, b = randn(4, 3, 2, 5) * 2 + 1, randn(3), randn(3)
  ref = lambda x, w, b: np_norm(x, (0, 2, 3), 1e-5) * w.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
  Tensor.training = True
  try: check(layer_with(bn, weight=0, bias=0), ref, [x, w, b])
  finally: Tensor.training = False
  Tensor.realize_all(bn.running_mean, bn.running_var, bn.num_batches_tracked)
  n = x.size / 3
  # the check ran the layer once; the running statistics use the unbiased variance, like PyTorch
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.2 * x.mean(axis=(0, 2, 3)), atol=1e-5)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * x.var(axis=(0, 2, 3)) * n / (n - 1), atol=1e-5)
  assert bn.num_batches_tracked.item() == 1

def test_batchnorm_eval_uses_running_stats():
  bn = nn.BatchNorm(3)
  mean, var = randn(3), np.abs(randn(3)) + 0.5
  bn.running_mean, bn.running_var = Tensor(mean, requires_grad=False), Tensor(var, requires_grad=False)
  x, w, b = randn(2, 3, 4), randn(3), randn(3)
  ref = lambda x, w, b: (x - mean.reshape(1, 3, 1)) / np.sqrt(var.reshape(1, 3, 1) + 1e-5) * w.reshape(1, 3, 1) + b.reshape(1, 3, 1)
  check(layer_with(bn, weight=0, bias=0), ref, [x, w, b])
  np.testing.assert_array_equal(bn.running_mean.numpy(), mean)  # eval leaves the statistics alone

def test_batchnorm_without_affine_or_tracking():
  bn = nn.BatchNorm(2, affine=False, track_running_stats=False)
  assert bn.weight is None and bn.bias is None and not hasattr(bn, "running_mean")
  check(bn, lambda x: np_norm(x, (0, 2), 1e-5), [randn(5, 2, 3)])  # batch statistics even in eval

def test_layernorm():
  x, w, b = randn(2, 3, 4, 5), randn(4, 5), randn(4, 5)
  check(layer_with(nn.LayerNorm((4, 5)), weight=0, bias=0), lambda x, w, b: np_norm(x, (-2, -1), 1e-5) * w + b, [x, w, b])
  with pytest.raises(ValueError, match="do not match"): nn.LayerNorm(6)(Tensor(x))

def test_layernorm2d_normalises_channels():
  x, w, b = randn(2, 3, 4, 2), randn(3), randn(3)
  ref = lambda x, w, b: np_norm(x, (1,), 1e-5) * w.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
  check(layer_with(nn.LayerNorm2d(3), weight=0, bias=0), ref, [x, w, b])

def test_rmsnorm():
  x, w = randn(3, 6), randn(6)
  check(layer_with(nn.RMSNorm(6, eps=1e-5), weight=0), lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w, [x, w])

def test_groupnorm_and_instancenorm():
  x, w, b = randn(2, 6, 5), randn(6), randn(6)
  def ref_group(groups):
    return lambda x, w, b: np_norm(x.reshape(2, groups, -1), (-1,), 1e-5).reshape(x.shape) * w.reshape(1, 6, 1) + b.reshape(1, 6, 1)
  check(layer_with(nn.GroupNorm(3, 6), weight=0, bias=0), ref_group(3), [x, w, b])
  check(layer_with(nn.InstanceNorm(6), weight=0, bias=0), ref_group(6), [x, w, b])
  # tinygrad's GroupNorm splits a sample's 6*5 values into contiguous groups: 5 groups of 6 values cross channel
  # boundaries (as in tinygrad); 4 groups cannot split 30 values, an error when called
  with pytest.raises(ValueError, match="groups"): nn.GroupNorm(4, 6)(Tensor(x))
  check(layer_with(nn.GroupNorm(5, 6), weight=0, bias=0), ref_group(5), [x, w, b])

def test_embedding():
  emb = nn.Embedding(7, 3)
  assert emb.weight.shape == (7, 3) and np.abs(emb.weight.numpy()).max() <= math.sqrt(6 / 10)
  idx = np.array([[1, 6, 1], [0, 3, 3]], np.int32)
  def run(w):
    emb.weight = w
    return emb(Tensor(idx))
  check(run, lambda w: w[idx], [randn(7, 3)])  # repeated indices accumulate gradient
  with pytest.raises(TypeError, match="integers"): emb(Tensor([1.0]))
  big = nn.Embedding(300, 2)   # uint8 indices into more rows than uint8 holds: each index picks its own row only
  np.testing.assert_array_equal(big(Tensor([0, 255, 44], dtype=dtypes.uint8)).numpy(), big.weight.numpy()[[0, 255, 44]])

def test_dropout_only_in_training():
  x = Tensor(np.ones((50, 40), np.float32), requires_grad=True)
  np.testing.assert_array_equal(nn.Dropout(0.5)(x).numpy(), x.numpy())  # eval: the identity
  Tensor.training = True
  try:
    out = nn.Dropout(0.25)(x)
    grad, = out.sum().gradient(x)
    Tensor.realize_all(out, grad)
    o, g = out.numpy(), grad.numpy()
  finally: Tensor.training = False
  assert np.all((o == 0) | np.isclose(o, 1 / 0.75))
  assert 0.2 < (o == 0).mean() < 0.3
  np.testing.assert_allclose(g, o)  # d(x*mask/(1-p))/dx is mask/(1-p): the same pattern
  with pytest.raises(ValueError): nn.Dropout(1.5)

def test_causal_mask():
  np.testing.assert_array_equal(nn.causal_mask(3).numpy(), np.tril(np.ones((3, 3), bool)))
  np.testing.assert_array_equal(nn.causal_mask(2, 4).numpy(), [[1, 1, 1, 0], [1, 1, 1, 1]])  # the last 2 queries of 4
  assert nn.causal_mask(2).dtype == dtypes.bool
  with pytest.raises(ValueError): nn.causal_mask(4, 2)

@pytest.mark.parametrize("q_len,kv_len", [(4, 4), (2, 5)])
def test_attention_with_causal_mask(q_len, kv_len):
  mask = np.tril(np.ones((q_len, kv_len), bool), kv_len - q_len)
  def ref(q, k, v):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    return np_softmax(np.where(mask, s, -np.inf)) @ v
  fn = lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=nn.causal_mask(q_len, kv_len))
  check(fn, ref, [randn(2, q_len, 3), randn(2, kv_len, 3), randn(2, kv_len, 3)])

def test_layers_compose_and_expose_state():
  model = [nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Linear(4, 3), nn.LayerNorm(3)]
  names = sorted(nn.state.get_state_dict(model))
  assert names == ["0.bias", "0.weight", "1.bias", "1.num_batches_tracked", "1.running_mean", "1.running_var", "1.weight",
                   "2.bias", "2.weight", "3.bias", "3.weight"]
  x = Tensor(randn(2, 1, 4, 6))
  out = model[3](model[2](model[1](model[0](x)).relu()))
  assert out.shape == (2, 2, 2, 3) and np.isfinite(out.numpy()).all()
