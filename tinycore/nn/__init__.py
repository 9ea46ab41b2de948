"""Neural-network layers with tinygrad's constructors, parameter names (`weight`, `bias`) and initialisation."""
from __future__ import annotations
import math
from tinycore.dtype import dtypes
from tinycore.helpers import prod, make_tuple, flatten
from tinycore.tensor import Tensor
from tinycore.nn import optim, state, datasets  # noqa: F401  (tinygrad layout: nn.optim, nn.state, nn.datasets)

# Layer weights are created with requires_grad=True (like PyTorch's nn.Parameter): loss.backward() fills their .grad
# whether or not an optimizer was built for them.

class Linear:
  """y = x @ weight.T + bias; weight [out, in] and bias uniform in +-1/sqrt(in_features), as in PyTorch."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound, requires_grad=True)
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound, requires_grad=True) if bias else None
  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)

class Conv2d:
  """A convolution over the trailing len(kernel_size) dims of NC... input; padding is an int, per-dim ints, flat pairs or 'same'."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride=1, padding: int | tuple[int, ...] | str = 0,
               dilation=1, groups=1, bias=True):
    self.kernel_size = make_tuple(kernel_size, 2)
    if isinstance(padding, str):
      if padding.lower() != "same": raise ValueError(f"padding {padding!r} is not supported: pass an int, a tuple or 'same'")
      if stride != 1: raise ValueError("padding='same' needs stride 1")
      # torch-style flat pairs, last dim first; an odd total puts the extra pixel after
      padding = tuple(flatten((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                              for d, k in zip(make_tuple(dilation, len(self.kernel_size))[::-1], self.kernel_size[::-1])))
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) must both be divisible by groups ({groups})")
    self.stride, self.dilation, self.groups, self.padding = stride, dilation, groups, padding
    bound = 1 / math.sqrt(in_channels * prod(self.kernel_size))
    self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-bound, high=bound, requires_grad=True)
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound, requires_grad=True) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding)

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride=1, padding: int | str = 0, dilation=1, groups=1, bias=True) -> Conv2d:
  """A 1-d convolution: Conv2d with a one-element kernel shape, weight [out, in/groups, k]."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)

class ConvTranspose2d(Conv2d):
  """The gradient of a convolution as a layer (upsampling); weight [in, out/groups, *kernel_size]."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride=1, padding=0, output_padding=0,
               dilation=1, groups=1, bias=True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    bound = 1 / math.sqrt(in_channels * prod(self.kernel_size))
    self.weight = Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-bound, high=bound, requires_grad=True)
    self.output_padding = output_padding
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                              padding=self.padding, output_padding=self.output_padding)

def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride=1, padding=0, output_padding=0, dilation=1,
                    groups=1, bias=True) -> ConvTranspose2d:
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias)

class BatchNorm:
  """Normalises over every axis but the channel axis 1. In training (Tensor.training) it uses the batch's statistics and
  updates running_mean/running_var (unbiased variance, like PyTorch); in eval it uses the running statistics."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = Tensor.ones(sz, requires_grad=True) if affine else None
    self.bias: Tensor | None = Tensor.zeros(sz, requires_grad=True) if affine else None
    # requires_grad=False: the optimizers realize these with each step instead of updating them
    self.num_batches_tracked = Tensor.zeros((), dtype=dtypes.int32, requires_grad=False)  # int64 in PyTorch; not every backend has it
    if track_running_stats: self.running_mean, self.running_var = Tensor.zeros(sz, requires_grad=False), Tensor.ones(sz, requires_grad=False)

  def calc_stats(self, x: Tensor, keep: tuple[int, ...] = (1,)) -> tuple[Tensor, Tensor]:
    """(mean, biased variance) over every axis but `keep`: the batch's in training, the running ones in eval."""
    if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var
    axes = tuple(a for a in range(x.ndim) if a not in keep)
    mean = x.mean(axis=axes)
    y = x - mean.detach().reshape(tuple(s if a in keep else 1 for a, s in enumerate(x.shape)))  # d(var)/d(mean) is zero: exact
    return mean, (y * y).mean(axis=axes)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm needs input of shape (N, C, ...), got {x.shape}")
    return self._normalize(x, (1,))

  def _normalize(self, x: Tensor, keep: tuple[int, ...]) -> Tensor:
    """x normalised with statistics over every axis but `keep` (the channel axis, and the device axis of UnsyncedBatchNorm)."""
    mean, var = self.calc_stats(x, keep)
    if self.track_running_stats and Tensor.training:
      n = x.numel() / prod(x.shape[a] for a in keep)
      if n <= 1: raise ValueError(f"BatchNorm in training needs more than one value per channel, got input {x.shape}")
      self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
      self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * n / (n - 1) * var.detach())
      self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    weight, bias = (None if p is None else p.expand(mean.shape) for p in (self.weight, self.bias))
    return x.batchnorm(weight, bias, mean, (var + self.eps).rsqrt(), axis=keep)
BatchNorm2d = BatchNorm3d = BatchNorm

class UnsyncedBatchNorm(BatchNorm):
  """BatchNorm with statistics per device (tinygrad's UnsyncedBatchNorm): the batch is num_devices equal slices, each
  normalised with its own statistics, and running_mean/running_var are [num_devices, sz], row i the slice i's. With the
  batch sharded over num_devices devices (and the running statistics sharded along axis 0) each device uses only its
  own data: no all-reduce in the forward pass. On one device it computes the same thing."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1,
               num_devices: int = 1):
    super().__init__(sz, eps, affine, track_running_stats, momentum)
    self.num_devices = num_devices
    if track_running_stats:
      self.running_mean, self.running_var = Tensor.zeros(num_devices, sz, requires_grad=False), Tensor.ones(num_devices, sz, requires_grad=False)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[0] % self.num_devices:
      raise ValueError(f"UnsyncedBatchNorm over {self.num_devices} devices needs input (N, C, ...) with N a multiple of {self.num_devices}, got {x.shape}")
    return self._normalize(x.reshape(self.num_devices, -1, *x.shape[1:]), (0, 2)).reshape(x.shape)

class LayerNorm:
  """Normalises over the trailing dims `normalized_shape`, then scales by weight and shifts by bias."""
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape: tuple[int, ...] = make_tuple(normalized_shape, 1)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight: Tensor | None = Tensor.ones(*self.normalized_shape, requires_grad=True) if elementwise_affine else None
    self.bias: Tensor | None = Tensor.zeros(*self.normalized_shape, requires_grad=True) if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if tuple(x.shape[-len(self.normalized_shape):]) != self.normalized_shape:
      raise ValueError(f"LayerNorm{self.normalized_shape}: the last dims of input {x.shape} do not match")
    x = x.layernorm(axis=self.axis, eps=self.eps)
    return x if self.weight is None else x * self.weight + self.bias

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of NCHW input."""
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm:
  """x / sqrt(mean(x^2) + eps) over the last dim (computed in float32), times weight."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight: Tensor | None = Tensor.ones(dim, requires_grad=True) if elementwise_affine else None
  def _norm(self, x: Tensor) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()
  def __call__(self, x: Tensor) -> Tensor:
    x = self._norm(x.float()).cast(x.dtype)
    return x if self.weight is None else x * self.weight

class GroupNorm:
  """Normalises each of num_groups groups per sample, then a per-channel affine. A group is a contiguous 1/num_groups of
  the sample's channels-by-positions values: whole channels when num_groups divides num_channels (PyTorch's GroupNorm),
  else, as in tinygrad, groups that split a channel's positions."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = Tensor.ones(num_channels, requires_grad=True) if affine else None
    self.bias: Tensor | None = Tensor.zeros(num_channels, requires_grad=True) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.numel() // x.shape[0] % self.num_groups:
      raise ValueError(f"GroupNorm: the {x.numel() // x.shape[0]} values per sample of input {x.shape} do not split into {self.num_groups} groups")
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None: return x
    shape = (1, -1, *[1] * (x.ndim - 2))
    return x * self.weight.reshape(shape) + self.bias.reshape(shape)

class InstanceNorm:
  """GroupNorm with one group per channel."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight: Tensor | None = Tensor.ones(num_features, requires_grad=True) if affine else None
    self.bias: Tensor | None = Tensor.zeros(num_features, requires_grad=True) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None: return x
    shape = (1, -1, *[1] * (x.ndim - 2))
    return x * self.weight.reshape(shape) + self.bias.reshape(shape)

class Embedding:
  """A lookup table: integer indices of any shape -> rows of weight [vocab_size, embed_size] (glorot-uniform init)."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size, requires_grad=True)
  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding indices must be integers, got {idx.dtype}")
    # a one-hot match against arange, summed: the gradient scatters into weight's rows with no scatter op
    # (in idx's dtype where every row number fits it: no promotion to a wider int)
    hit = Tensor.arange(self.vocab_sz, device=self.weight.device, dtype=idx.dtype if self.vocab_sz - 1 <= idx.dtype.max else dtypes.default_int) == idx.unsqueeze(-1)
    return hit.unsqueeze(-1).where(self.weight, 0).sum(-2)

class LSTMCell:
  """One LSTM step: gates = x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh, split into input, forget, cell and
  output gates (PyTorch's order and uniform(+-1/sqrt(hidden)) init); returns (h', c'). hc=None starts from zeros."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    bound = 1 / math.sqrt(hidden_size)
    self.weight_ih = Tensor.uniform(4 * hidden_size, input_size, low=-bound, high=bound, requires_grad=True)
    self.weight_hh = Tensor.uniform(4 * hidden_size, hidden_size, low=-bound, high=bound, requires_grad=True)
    self.bias_ih = Tensor.uniform(4 * hidden_size, low=-bound, high=bound, requires_grad=True) if bias else None
    self.bias_hh = Tensor.uniform(4 * hidden_size, low=-bound, high=bound, requires_grad=True) if bias else None
  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    if hc is None: hc = (Tensor.zeros(x.shape[0], self.weight_hh.shape[1], dtype=x.dtype, device=x.device),) * 2
    h, c = hc
    i, f, g, o = (x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)).chunk(4, dim=1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c

class Dropout:
  """Zeroes each element with probability p and scales the rest by 1/(1-p), only while Tensor.training is set."""
  def __init__(self, p: float = 0.5):
    if not 0 <= p <= 1: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    self.p = p
  def __call__(self, x: Tensor) -> Tensor: return x.dropout(self.p)

def causal_mask(q_len: int, kv_len: int | None = None, device: str | None = None) -> Tensor:
  """Boolean [q_len, kv_len] attention mask for Tensor.scaled_dot_product_attention(attn_mask=...): True where query i may
  attend key j, i.e. j <= i + (kv_len - q_len). With a cache of earlier keys (kv_len > q_len) the queries are the last ones."""
  kv_len = q_len if kv_len is None else kv_len
  if kv_len < q_len: raise ValueError(f"causal_mask: {kv_len} keys cannot cover {q_len} queries")
  return Tensor.ones(q_len, kv_len, dtype=dtypes.bool, device=device).tril(kv_len - q_len)
