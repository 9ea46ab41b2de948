"""Programs written the way tinygrad's users write them, importing only tinygrad's module paths, run on tinycore through a
name shim: small models on synthetic data, each trained a few steps and checked for a falling loss (or exact results)."""
import contextlib, importlib, math, sys
import numpy as np
import pytest

# the shim: while these imports run, `tinygrad...` names tinycore's modules (the real tinygrad, if installed, is put back)
SHIM = {f"tinygrad{s}": f"tinycore{s}" for s in ("", ".tensor", ".dtype", ".helpers", ".device", ".function", ".engine", ".engine.jit",
                                                  ".nn", ".nn.optim", ".nn.state", ".nn.datasets")}

@contextlib.contextmanager
def tinygrad_is_tinycore():
  saved = {k: sys.modules.get(k) for k in SHIM}
  sys.modules.update({k: importlib.import_module(v) for k, v in SHIM.items()})
  try: yield
  finally:
    for k, v in saved.items():
      if v is None: sys.modules.pop(k, None)
      else: sys.modules[k] = v

with tinygrad_is_tinycore():
  from tinygrad import Tensor, TinyJit, Variable, Context, Device, GlobalCounters, dtypes, nn  # noqa: F401
  from tinygrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_save, safe_load
  from tinygrad.nn.optim import Adam, AdamW, SGD, Muon
  from tinygrad.helpers import trange, Timing, getenv
  from tinygrad.engine.jit import TinyJit as EngineJit

def synthetic_classes(n: int, shape: tuple, classes: int, seed: int = 0) -> tuple[Tensor, Tensor]:
  """Inputs and labels a model can learn: the label is the argmax of a fixed random projection of the input."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, *shape)).astype(np.float32)
  y = (x.reshape(n, -1) @ rng.standard_normal((int(np.prod(shape)), classes))).argmax(1).astype(np.int32)
  return Tensor(x), Tensor(y)

def falls(losses: list[float], by: float = 0.8) -> bool:
  """The last losses average below `by` times the first ones."""
  k = max(1, len(losses) // 4)
  return float(np.mean(losses[-k:])) < by * float(np.mean(losses[:k]))

# ***** 1. beautiful_mnist: a convnet, a jitted train step, Tensor.train, sampling a batch with Tensor.randint *****

class MnistNet:
  def __init__(self):
    self.layers = [nn.Conv2d(1, 8, 3), Tensor.relu, nn.Conv2d(8, 8, 3), Tensor.relu, nn.BatchNorm(8), Tensor.max_pool2d,
                   lambda x: x.flatten(1), nn.Linear(8 * 4 * 4, 10)]
  def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)

def test_mnist_convnet_with_tinyjit():
  Tensor.manual_seed(0)
  X_train, Y_train = synthetic_classes(256, (1, 12, 12), 10)
  model = MnistNet()
  opt = Adam(get_parameters(model), lr=3e-3)
  @TinyJit
  @Tensor.train()
  def train_step() -> Tensor:
    opt.zero_grad()
    samples = Tensor.randint(32, high=X_train.shape[0])
    loss = model(X_train[samples]).sparse_categorical_crossentropy(Y_train[samples]).backward()
    opt.step()
    return loss
  losses = [train_step().item() for _ in trange(30, disable=True)]
  assert falls(losses), losses
  acc = (model(X_train).argmax(axis=1) == Y_train).mean().item()
  assert acc > 0.2

# ***** 2. a CIFAR ResNet step: BatchNorm under Context(TRAINING=1), SGD with momentum, nesterov and weight decay *****

class BasicBlock:
  def __init__(self, c: int):
    self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
    self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
  def __call__(self, x: Tensor) -> Tensor:
    out = self.bn1(self.conv1(x)).relu()
    return (self.bn2(self.conv2(out)) + x).relu()

class TinyResNet:
  def __init__(self, classes: int = 4):
    self.stem, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
    self.blocks = [BasicBlock(8), BasicBlock(8)]
    self.fc = nn.Linear(8, classes)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn(self.stem(x)).relu().avg_pool2d(2)
    for b in self.blocks: x = b(x)
    return self.fc(x.mean((2, 3)))

def test_cifar_resnet_under_context_training():
  Tensor.manual_seed(1)
  X, Y = synthetic_classes(64, (3, 8, 8), 4, seed=1)
  model = TinyResNet()
  opt = SGD(get_parameters(model), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
  losses = []
  with Context(TRAINING=1):
    for i in range(20):
      idx = slice((i * 16) % 64, (i * 16) % 64 + 16)
      opt.zero_grad()
      loss = model(X[idx]).cross_entropy(Y[idx])
      loss.backward()
      opt.step()
      losses.append(loss.item())
  assert falls(losses), losses
  assert np.abs(model.bn.running_mean.numpy()).sum() > 0 and model.bn.num_batches_tracked.item() == 20
  before = model(X[:4]).numpy()
  np.testing.assert_allclose(model(X[:4]).numpy(), before)  # out of training: running statistics, deterministic

# ***** 3. the porting example: a transformer block using einsum, scaled_dot_product_attention, gather and pad *****

class Block:
  def __init__(self, dim: int, heads: int, causal: bool = True):
    self.heads, self.causal = heads, causal
    self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.ff1, self.ff2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
  def attention(self, x: Tensor, use_einsum: bool) -> Tensor:
    b, t, d = x.shape
    q, k, v = [y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=2)]
    if use_einsum:
      att = Tensor.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d // self.heads)
      if self.causal: att = att + Tensor.full((t, t), -math.inf).triu(1)
      out = Tensor.einsum("bhqk,bhkd->bhqd", att.softmax(-1), v)
    else: out = q.scaled_dot_product_attention(k, v, is_causal=self.causal)
    return self.out(out.transpose(1, 2).reshape(b, t, d))
  def __call__(self, x: Tensor, use_einsum: bool = False) -> Tensor:
    x = x + self.attention(self.ln1(x), use_einsum)
    return x + self.ff2(self.ff1(self.ln2(x)).gelu())

class TinyGPT:
  def __init__(self, vocab: int = 8, dim: int = 16, ctx: int = 8):
    self.tok, self.pos = nn.Embedding(vocab, dim), Tensor.scaled_uniform(ctx, dim, requires_grad=True)
    self.block, self.head = Block(dim, 2), nn.Linear(dim, vocab)
  def __call__(self, idx: Tensor, use_einsum: bool = False) -> Tensor:
    x = self.tok(idx) + self.pos[:idx.shape[1]]
    return self.head(self.block(x, use_einsum))

def copy_task(n: int, t: int, vocab: int, seed: int) -> tuple[Tensor, Tensor]:
  """Sequences whose target is the previous token: learnable by attending one step back."""
  x = np.random.default_rng(seed).integers(1, vocab, (n, t)).astype(np.int32)
  return Tensor(x), Tensor(np.pad(x[:, :-1], ((0, 0), (1, 0))))

def test_transformer_block_porting_example():
  Tensor.manual_seed(2)
  model = TinyGPT()
  X, Y = copy_task(16, 8, 8, seed=2)
  np.testing.assert_allclose(model(X, use_einsum=True).numpy(), model(X).numpy(), rtol=1e-4, atol=1e-5)
  # gather picks each target's logit; pad shifts the sequence right by one step
  logits = model(X)
  picked = logits.log_softmax(-1).gather(-1, Y.unsqueeze(-1)).squeeze(-1)
  np.testing.assert_allclose(-picked.mean().item(), logits.sparse_categorical_crossentropy(Y).item(), rtol=1e-5)
  np.testing.assert_equal(X.pad(((0, 0), (1, 0)))[:, :-1].numpy(), Y.numpy())
  opt = AdamW(get_parameters(model), lr=1e-2, weight_decay=0.01)
  losses = []
  with Tensor.train():
    for _ in range(25):
      opt.zero_grad()
      loss = -model(X).log_softmax(-1).gather(-1, Y.unsqueeze(-1)).mean()
      loss.backward()
      opt.step()
      losses.append(loss.item())
  assert falls(losses, 0.7), losses

def test_transformer_block_matches_torch():
  torch = pytest.importorskip("torch")
  Tensor.manual_seed(3)
  blk = Block(16, 2)
  x = np.random.default_rng(3).standard_normal((2, 5, 16)).astype(np.float32)
  t = {k: torch.tensor(v.numpy(), requires_grad=True) for k, v in get_state_dict(blk).items()}
  def lin(name, y): return y @ t[f"{name}.weight"].T + t[f"{name}.bias"]
  def ln(name, y): return torch.nn.functional.layer_norm(y, (16,), t[f"{name}.weight"], t[f"{name}.bias"])
  xt = torch.tensor(x)
  q, k, v = [y.reshape(2, 5, 2, 8).transpose(1, 2) for y in lin("qkv", ln("ln1", xt)).chunk(3, dim=2)]
  a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 5, 16)
  h = xt + lin("out", a)
  ref = h + lin("ff2", torch.nn.functional.gelu(lin("ff1", ln("ln2", h)), approximate="tanh"))
  out = blk(Tensor(x))
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
  ref.square().sum().backward()
  out.square().sum().backward()
  for name, p in get_state_dict(blk).items(): np.testing.assert_allclose(p.grad.numpy(), t[name].grad.numpy(), rtol=1e-3, atol=1e-4)

# ***** 4. a LLaMA-style model: RMSNorm, rotary embeddings, a KV cache sliced with a bound Variable, TinyJit decoding *****

def precompute_freqs(dim: int, end: int, theta: float = 10000.0) -> Tensor:
  freqs = 1.0 / (theta ** (Tensor.arange(0, dim, 2)[:dim // 2] / dim))
  f = Tensor.arange(end).unsqueeze(1) * freqs.unsqueeze(0)
  return Tensor.stack(f.cos(), f.sin(), dim=-1)  # (end, dim/2, 2)

def apply_rotary(x: Tensor, freqs: Tensor) -> Tensor:
  a, b = x.reshape(*x.shape[:-1], -1, 2).chunk(2, dim=-1)
  c, s = freqs[..., 0:1].reshape(1, freqs.shape[0], 1, -1, 1), freqs[..., 1:2].reshape(1, freqs.shape[0], 1, -1, 1)
  return (a * c - b * s).cat(a * s + b * c, dim=-1).flatten(-2)

class LlamaAttention:
  def __init__(self, dim: int, heads: int, max_context: int):
    self.heads, self.head_dim, self.max_context = heads, dim // heads, max_context
    self.wq, self.wk, self.wv, self.wo = [nn.Linear(dim, dim, bias=False) for _ in range(4)]
    self.cache_kv: Tensor | None = None
  def __call__(self, x: Tensor, start_pos, freqs: Tensor, mask: Tensor | None) -> Tensor:
    bsz, seqlen, _ = x.shape
    q, k, v = [w(x).reshape(bsz, seqlen, self.heads, self.head_dim) for w in (self.wq, self.wk, self.wv)]
    q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
    if self.cache_kv is None: self.cache_kv = Tensor.zeros(2, bsz, self.max_context, self.heads, self.head_dim).contiguous().realize()
    self.cache_kv[:, :, start_pos:start_pos + seqlen].assign(Tensor.stack(k, v)).realize()
    keys, values = self.cache_kv[0, :, 0:start_pos + seqlen], self.cache_kv[1, :, 0:start_pos + seqlen]
    out = q.transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask)
    return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, -1))

class Llama:
  def __init__(self, vocab: int = 16, dim: int = 16, heads: int = 2, max_context: int = 12):
    self.tok, self.norm, self.out = nn.Embedding(vocab, dim), nn.RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
    self.attn, self.attn_norm = LlamaAttention(dim, heads, max_context), nn.RMSNorm(dim)
    self.w1, self.w2, self.w3 = nn.Linear(dim, 32, bias=False), nn.Linear(32, dim, bias=False), nn.Linear(dim, 32, bias=False)
    self.freqs = precompute_freqs(dim // heads, max_context).realize()
    self.forward_jit = TinyJit(self.forward)
  def forward(self, tokens: Tensor, start_pos) -> Tensor:
    seqlen = tokens.shape[1]
    mask = Tensor.full((1, 1, seqlen, seqlen), -math.inf).triu(1) if seqlen > 1 else None
    h = self.tok(tokens)
    h = h + self.attn(self.attn_norm(h), start_pos, self.freqs[start_pos:start_pos + seqlen], mask)
    x = self.norm(h)
    h = h + self.w2(self.w1(x).silu() * self.w3(x))
    return self.out(self.norm(h)).realize()

def test_llama_kv_cache_decoding_with_tinyjit():
  Tensor.manual_seed(4)
  model = Llama()
  toks = Tensor(np.random.default_rng(4).integers(0, 16, (1, 10)).astype(np.int32))
  full = model.forward(toks, 0).numpy()  # the whole prompt at once (writes every cache position)
  start_pos = Variable("start_pos", 0, 11)
  for pos in range(10):
    logits = model.forward_jit(toks[:, pos:pos + 1], start_pos.bind(pos))
    np.testing.assert_allclose(logits.numpy()[0, 0], full[0, pos], rtol=1e-4, atol=1e-5)
  assert model.forward_jit.cnt == 10  # calls 3..10 replayed the kernels captured from call 2

# ***** 5. a UNet: skip connections, GroupNorm, ConvTranspose2d, denoising loss *****

class UNet:
  def __init__(self):
    self.d1, self.n1 = nn.Conv2d(1, 8, 3, padding=1), nn.GroupNorm(2, 8)
    self.d2, self.n2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16)
    self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
    self.o1, self.o2 = nn.Conv2d(16, 8, 3, padding=1), nn.Conv2d(8, 1, 1)
  def __call__(self, x: Tensor) -> Tensor:
    a = self.n1(self.d1(x)).silu()
    b = self.n2(self.d2(a)).silu()
    return self.o2(self.o1(self.up(b).cat(a, dim=1)).silu())

def test_unet_denoising():
  Tensor.manual_seed(5)
  rng = np.random.default_rng(5)
  clean = np.sin(np.linspace(0, 6, 64)).reshape(1, 1, 8, 8).repeat(8, 0).astype(np.float32) * rng.random((8, 1, 1, 1), dtype=np.float32)
  noisy = clean + 0.3 * rng.standard_normal(clean.shape).astype(np.float32)
  model = UNet()
  opt = Adam(get_parameters(model), lr=1e-2)
  losses = []
  for _ in range(25):
    opt.zero_grad()
    loss = (model(Tensor(noisy)) - Tensor(clean)).square().mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
  assert falls(losses, 0.5), losses

def test_unet_gradient_kernels_stay_small():
  """A U-Net's gradient sums over a pad's taps with a long body (swish's backward): written out trip by trip over three
  8-trip loops it was 512 copies of the body, 23k operations and 970 KB of LLVM IR taking 24 s to compile. A sum's
  written-out taps are bounded (codegen/opt/cpu.py TAP_OPS); every kernel of the step stays a few thousand operations."""
  from tinycore import Device
  from tinycore.codegen import get_program
  Tensor.manual_seed(5)
  x = Tensor(np.random.default_rng(5).random((8, 1, 8, 8), dtype=np.float32))
  model = UNet()
  params = get_parameters(model)
  loss = (model(x) - x).square().mean()
  items = [si for si in Tensor.schedule(*loss.gradient(*params)) if si.ast.op.name == "SINK"]
  ren = Device.renderer("CPU")
  sizes = {get_program(si.ast, ren).name: len(get_program(si.ast, ren).uops) for si in items}
  assert max(sizes.values()) < 4000, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]

# ***** 6. EfficientNet-style: depthwise convolution, swish, squeeze-and-excitation, dropout in training *****

class MBConv:
  def __init__(self, c: int):
    self.expand, self.bn0 = nn.Conv2d(c, 2 * c, 1, bias=False), nn.BatchNorm2d(2 * c)
    self.dw, self.bn1 = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c, bias=False), nn.BatchNorm2d(2 * c)
    self.se_reduce, self.se_expand = nn.Conv2d(2 * c, 4, 1), nn.Conv2d(4, 2 * c, 1)
    self.project, self.bn2 = nn.Conv2d(2 * c, c, 1, bias=False), nn.BatchNorm2d(c)
  def __call__(self, x: Tensor) -> Tensor:
    h = self.bn1(self.dw(self.bn0(self.expand(x)).swish())).swish()
    se = self.se_expand(self.se_reduce(h.mean((2, 3), keepdim=True)).swish()).sigmoid()
    return x + self.bn2(self.project(h * se)).dropout(0.1)

def test_efficientnet_style_training():
  Tensor.manual_seed(6)
  X, Y = synthetic_classes(32, (4, 6, 6), 3, seed=6)
  stem, block, head = nn.Conv2d(4, 8, 3, padding=1), MBConv(8), nn.Linear(8, 3)
  params = get_parameters([stem, block, head])
  opt = Adam(params, lr=5e-3)
  losses = []
  with Tensor.train():
    for _ in range(20):
      opt.zero_grad()
      loss = head(block(stem(X).swish()).mean((2, 3))).cross_entropy(Y)
      loss.backward()
      opt.step()
      losses.append(loss.item())
  assert falls(losses), losses

# ***** 7. ViT-style: patches by a strided convolution, a class token, multi-head attention *****

class ViT:
  def __init__(self, dim: int = 16, patch: int = 4, classes: int = 3):
    self.embed = nn.Conv2d(3, dim, patch, stride=patch)
    self.cls, self.pos = Tensor.zeros(1, 1, dim, requires_grad=True), Tensor.scaled_uniform(1, 5, dim, requires_grad=True)
    self.block, self.norm, self.head = Block(dim, 4, causal=False), nn.LayerNorm(dim), nn.Linear(dim, classes)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.embed(x).flatten(2).transpose(1, 2)  # (b, patches, dim)
    x = self.cls.expand(x.shape[0], -1, -1).cat(x, dim=1) + self.pos
    return self.head(self.norm(self.block(x)[:, 0]))

def test_vit_style_training():
  Tensor.manual_seed(7)
  X, Y = synthetic_classes(24, (3, 8, 8), 3, seed=7)
  model = ViT()
  opt = AdamW(get_parameters(model), lr=1e-2)
  losses = []
  for _ in range(20):
    opt.zero_grad()
    loss = model(X).cross_entropy(Y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    losses.append(loss.item())
  assert falls(losses), losses

# ***** 8. ConvNeXt-style: a 7x7 depthwise convolution, channels-last LayerNorm, layer scale *****

class ConvNeXtBlock:
  def __init__(self, dim: int):
    self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
    self.norm = nn.LayerNorm(dim, eps=1e-6)
    self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
    self.gamma = Tensor.full((dim,), 0.1, requires_grad=True)
  def __call__(self, x: Tensor) -> Tensor:
    h = self.dwconv(x).permute(0, 2, 3, 1)
    h = self.gamma * self.pw2(self.pw1(self.norm(h)).gelu())
    return x + h.permute(0, 3, 1, 2)

def test_convnext_style_training():
  Tensor.manual_seed(8)
  X, Y = synthetic_classes(24, (3, 8, 8), 3, seed=8)
  stem, block, norm, head = nn.Conv2d(3, 8, 2, stride=2), ConvNeXtBlock(8), nn.LayerNorm(8), nn.Linear(8, 3)
  opt = AdamW(get_parameters([stem, block, norm, head]), lr=5e-3)
  losses = []
  for _ in range(20):
    opt.zero_grad()
    loss = head(norm(block(stem(X)).mean((2, 3)))).cross_entropy(Y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
  assert falls(losses), losses

# ***** 9. an LSTM language model *****

def test_lstm_language_model():
  Tensor.manual_seed(9)
  X, Y = copy_task(16, 4, 6, seed=9)
  emb, cell, head = nn.Embedding(6, 12), nn.LSTMCell(12, 16), nn.Linear(16, 6)
  opt = Adam(get_parameters([emb, cell, head]), lr=2e-2)
  losses = []
  for _ in range(20):
    opt.zero_grad()
    hc, outs = None, []
    for t in range(X.shape[1]):
      hc = cell(emb(X[:, t]), hc)
      outs.append(head(hc[0]))
    loss = Tensor.stack(*outs, dim=1).sparse_categorical_crossentropy(Y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
  assert falls(losses, 0.7), losses

# ***** 10. checkpoints: safe_save, safe_load, load_state_dict *****

def test_checkpoint_round_trip(tmp_path):
  Tensor.manual_seed(10)
  model, other = TinyResNet(), TinyResNet()
  sd = get_state_dict(model)
  assert "blocks.0.bn1.running_mean" in sd and "fc.weight" in sd
  safe_save(sd, str(tmp_path / "model.safetensors"))
  load_state_dict(other, safe_load(str(tmp_path / "model.safetensors")))
  x = Tensor.randn(2, 3, 8, 8)
  np.testing.assert_allclose(other(x).numpy(), model(x).numpy(), rtol=1e-6)

# ***** 11. regression trained with Muon, with trange and Timing as training scripts use them *****

def test_mlp_regression_with_muon(capsys):
  Tensor.manual_seed(11)
  rng = np.random.default_rng(11)
  x = rng.uniform(-2, 2, (64, 1)).astype(np.float32)
  X, Y = Tensor(x), Tensor(np.sin(x))
  l1, l2 = nn.Linear(1, 32), nn.Linear(32, 1)
  opt = Muon(get_parameters([l1, l2]), lr=0.02, weight_decay=0.0)
  losses = []
  for i in (t := trange(30, disable=True)):
    with Timing("step ", enabled=i == 0):
      opt.zero_grad()
      loss = (l2(l1(X).tanh()) - Y).square().mean()
      loss.backward()
      opt.step()
    losses.append(loss.item())
    t.set_description(f"loss {losses[-1]:.3f}")
  assert falls(losses, 0.5), losses
  assert "step " in capsys.readouterr().out

# ***** 12. the quick start in tinygrad's README: gradients of a small expression *****

def test_readme_quickstart_gradients():
  x = Tensor.eye(3, requires_grad=True)
  y = Tensor([[2.0, 0, -2.0]], requires_grad=True)
  z = y.matmul(x).sum()
  z.backward()
  np.testing.assert_allclose(x.grad.numpy(), [[2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [-2.0, -2.0, -2.0]])
  np.testing.assert_allclose(y.grad.numpy(), [[1.0, 1.0, 1.0]])
  assert EngineJit is TinyJit and getenv("TINYCORE_SURELY_UNSET_FLAG", 7) == 7
