"""Training-step time of the digits convnet and a small transformer: tinycore eager and TinyJit, next to PyTorch and tinygrad."""
from __future__ import annotations
import argparse, pathlib, statistics, sys, time
from typing import Callable
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing

# ***** the models, written once for tinycore and tinygrad (the same API) *****

def convnet(Tensor, nn, width: int = 16, convs: int = 1):
  """convs=1: the examples/train_digits.py network, conv-bn-relu-pool and a linear layer: [B,1,28,28] -> [B,10].
  convs=2: a second conv-bn-relu-pool block (2*width channels), whose input gradient is a kernel worth watching."""
  layers = [nn.Conv2d(1, width, 3), nn.BatchNorm(width), Tensor.relu, Tensor.max_pool2d]
  if convs == 2: layers += [nn.Conv2d(width, 2 * width, 3), nn.BatchNorm(2 * width), Tensor.relu, Tensor.max_pool2d]
  layers += [lambda x: x.flatten(1), nn.Linear(width * 13 * 13 if convs == 1 else 2 * width * 5 * 5, 10)]
  return layers, lambda x: x.sequential(layers)

def mlp(Tensor, nn):
  """Two linear layers with a relu between: [B,784] -> [B,10] (the fusion tests' MLP)."""
  layers = [nn.Linear(784, 128), Tensor.relu, nn.Linear(128, 10)]
  return layers, lambda x: x.sequential(layers)

def transformer(Tensor, nn, vocab: int, dim: int, heads: int, n_layers: int, seq: int):
  """A pre-norm causal decoder: token + position embeddings, attention and MLP blocks, a vocabulary head."""
  class Block:
    def __init__(self):
      self.ln1, self.qkv, self.proj = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
      self.ln2, self.up, self.down = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
    def __call__(self, x):
      B, T, _ = x.shape
      q, k, v = [t.reshape(B, T, heads, dim // heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, dim=-1)]
      x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(B, T, dim))
      return x + self.down(self.up(self.ln2(x)).gelu())
  model = {"tok": nn.Embedding(vocab, dim), "pos": nn.Embedding(seq, dim), "blocks": [Block() for _ in range(n_layers)],
           "ln": nn.LayerNorm(dim), "head": nn.Linear(dim, vocab)}
  def forward(idx):
    x = model["tok"](idx) + model["pos"](Tensor.arange(idx.shape[1], dtype=idx.dtype).reshape(1, -1))
    for b in model["blocks"]: x = b(x)
    return model["head"](model["ln"](x)).reshape(-1, vocab)
  return model, forward

def torch_models(torch, width: int, vocab: int, dim: int, heads: int, n_layers: int, seq: int):
  tnn, F = torch.nn, torch.nn.functional
  conv1 = tnn.Sequential(tnn.Conv2d(1, width, 3), tnn.BatchNorm2d(width), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(width * 169, 10))
  conv2 = tnn.Sequential(tnn.Conv2d(1, width, 3), tnn.BatchNorm2d(width), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Conv2d(width, 2 * width, 3),
                         tnn.BatchNorm2d(2 * width), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(2 * width * 25, 10))
  class Block(tnn.Module):
    def __init__(self):
      super().__init__()
      self.ln1, self.qkv, self.proj = tnn.LayerNorm(dim), tnn.Linear(dim, 3 * dim), tnn.Linear(dim, dim)
      self.ln2, self.up, self.down = tnn.LayerNorm(dim), tnn.Linear(dim, 4 * dim), tnn.Linear(4 * dim, dim)
    def forward(self, x):
      B, T, _ = x.shape
      q, k, v = [t.reshape(B, T, heads, dim // heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, dim=-1)]
      x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, dim))
      return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))
  class GPT(tnn.Module):
    def __init__(self):
      super().__init__()
      self.tok, self.pos, self.blocks = tnn.Embedding(vocab, dim), tnn.Embedding(seq, dim), tnn.ModuleList([Block() for _ in range(n_layers)])
      self.ln, self.head = tnn.LayerNorm(dim), tnn.Linear(dim, vocab)
    def forward(self, idx):
      x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))[None]
      for b in self.blocks: x = b(x)
      return self.head(self.ln(x)).reshape(-1, vocab)
  mlp = tnn.Sequential(tnn.Linear(784, 128), tnn.ReLU(), tnn.Linear(128, 10))
  return {"convnet": conv1, "convnet2": conv2, "mlp": mlp, "transformer": GPT()}

# ***** one training step per framework: returns a function of numpy (x, y) that runs a step and returns the loss *****

def tiny_step(lib: str, which: str, use_jit: bool, cfg) -> Callable:
  if lib == "tinycore":
    from tinycore import Tensor, nn
    from tinycore.nn import optim
    from tinycore.nn.state import get_parameters
    from tinycore.jit import TinyJit
    def training(): return _SetTraining(Tensor)
  else:
    from tinygrad import Tensor, nn, TinyJit, Context
    from tinygrad.nn import optim
    from tinygrad.nn.state import get_parameters
    def training(): return Context(TRAINING=1)
  Tensor.manual_seed(0)
  if which == "transformer": model, forward = transformer(Tensor, nn, cfg.vocab, cfg.dim, cfg.heads, cfg.layers, cfg.seq)
  elif which == "mlp": model, forward = mlp(Tensor, nn)
  else: model, forward = convnet(Tensor, nn, cfg.width, 2 if which == "convnet2" else 1)
  opt = optim.Adam(get_parameters(model), lr=1e-3)
  def step(x, y):
    opt.zero_grad()
    loss = forward(x).sparse_categorical_crossentropy(y)
    loss.backward()
    return loss.realize(*opt.schedule_step())
  fn = TinyJit(step) if use_jit else step
  def run(x, y):
    with training(): return fn(Tensor(x), Tensor(y)).item()
  return run

class _SetTraining:
  def __init__(self, Tensor): self.Tensor = Tensor
  def __enter__(self): self.old, self.Tensor.training = self.Tensor.training, True
  def __exit__(self, *exc): self.Tensor.training = self.old

def torch_step(which: str, cfg) -> Callable:
  import torch
  torch.manual_seed(0)
  model = torch_models(torch, cfg.width, cfg.vocab, cfg.dim, cfg.heads, cfg.layers, cfg.seq)[which]
  model.train()
  opt = torch.optim.Adam(model.parameters(), lr=1e-3)
  def run(x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long().reshape(-1))
    loss.backward()
    opt.step()
    return loss.item()
  return run

def batches(which: str, cfg, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
  rng = np.random.default_rng(0)
  if which.startswith("convnet"):
    return [(rng.random((cfg.batch, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, cfg.batch).astype(np.int32)) for _ in range(n)]
  if which == "mlp": return [(rng.random((cfg.batch, 784), dtype=np.float32), rng.integers(0, 10, cfg.batch).astype(np.int32)) for _ in range(n)]
  out = []
  for _ in range(n):
    tokens = rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq + 1)).astype(np.int32)
    out.append((tokens[:, :-1].copy(), tokens[:, 1:].reshape(-1).copy()))
  return out

def time_steps(run: Callable, data, warmup: int) -> tuple[float, float]:
  """Median seconds per step after `warmup` steps (compilation, and the TinyJit capture), and the first step's time."""
  times = []
  for x, y in data:
    st = time.perf_counter()
    loss = run(x, y)
    times.append(time.perf_counter() - st)
    if not np.isfinite(loss): raise RuntimeError(f"non-finite loss {loss}")
  return statistics.median(times[warmup:]), times[0]

def main():
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--models", default="convnet,convnet2,mlp,transformer")
  p.add_argument("--steps", type=int, default=10, help="timed steps (after the warmup)")
  p.add_argument("--warmup", type=int, default=3, help="untimed steps: compile, then the TinyJit capture on step 2")
  p.add_argument("--batch", type=int, default=64)
  p.add_argument("--width", type=int, default=16)
  p.add_argument("--vocab", type=int, default=64)
  p.add_argument("--dim", type=int, default=64)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--layers", type=int, default=2)
  p.add_argument("--seq", type=int, default=32)
  p.add_argument("--skip", default="", help="comma list of runs to leave out: tinycore,tinycore+jit,torch,tinygrad,tinygrad+jit")
  cfg = p.parse_args()
  from tinycore import Device
  print(f"tinycore device {Device.DEFAULT}; batch {cfg.batch}; median of {cfg.steps} steps after {cfg.warmup} warmup steps")
  skip = set(filter(None, cfg.skip.split(",")))
  for which in cfg.models.split(","):
    data = batches(which, cfg, cfg.warmup + cfg.steps)
    runs = {"tinycore": lambda: tiny_step("tinycore", which, False, cfg), "tinycore+jit": lambda: tiny_step("tinycore", which, True, cfg),
            "torch": lambda: torch_step(which, cfg), "tinygrad": lambda: tiny_step("tinygrad", which, False, cfg),
            "tinygrad+jit": lambda: tiny_step("tinygrad", which, True, cfg)}
    results: dict[str, float] = {}
    print(f"\n{which}:")
    for name, make in runs.items():
      if name in skip: continue
      try: med, first = time_steps(make(), data, cfg.warmup)
      except ImportError as e: print(f"  {name:14s} not installed ({e.name})"); continue
      except Exception as e: print(f"  {name:14s} failed: {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"); continue
      results[name] = med
      print(f"  {name:14s} {med * 1e3:10.2f} ms/step   ({cfg.batch / med:8.0f} samples/s; first step {first:.2f} s)")
    base = results.get("torch")
    for name, t in results.items():
      if name != "torch" and base: print(f"  {name:14s} {t / base:8.2f}x torch's step time")
    for ours, theirs in (("tinycore", "tinygrad"), ("tinycore+jit", "tinygrad+jit")):
      if ours in results and theirs in results: print(f"  {ours:14s} {results[theirs] / results[ours]:8.2f}x faster than {theirs}")
    if "tinycore" in results and "tinycore+jit" in results: print(f"  TinyJit speedup: {results['tinycore'] / results['tinycore+jit']:.2f}x")

if __name__ == "__main__": main()
