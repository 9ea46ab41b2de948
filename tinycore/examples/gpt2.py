"""GPT-2 inference: Hugging Face weights or random ones, byte-level BPE, a KV cache written at a symbolic position, jitted
prefill and decode, sampling on the device, tensor parallel over devices. `python -m tinycore.examples.gpt2 --help`."""
from __future__ import annotations
import argparse, codecs, json, math, sys, time, unicodedata
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator
import numpy as np
from tinycore import Tensor, TinyJit, Variable, Device, dtypes
from tinycore.dtype import DType
from tinycore.uop import UOp
from tinycore.nn.serialization import safetensors_load_arrays

# ***** the model *****

@dataclass(frozen=True)
class GPT2Config:
  """The fields of Hugging Face's GPT2Config this model uses (its names); from_hf refuses the ones it does not implement."""
  vocab_size: int = 50257
  n_positions: int = 1024
  n_embd: int = 768
  n_layer: int = 12
  n_head: int = 12
  n_inner: int | None = None
  layer_norm_epsilon: float = 1e-5
  activation_function: str = "gelu_new"
  scale_attn_weights: bool = True
  scale_attn_by_inverse_layer_idx: bool = False
  tie_word_embeddings: bool = True

  def __post_init__(self):
    if self.n_embd % self.n_head: raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
    if self.activation_function not in ACTIVATIONS:
      raise ValueError(f"activation_function {self.activation_function!r} is not implemented; known: {sorted(ACTIVATIONS)}")

  @staticmethod
  def from_hf(cfg: dict) -> GPT2Config:
    """From a config.json as save_pretrained writes it."""
    if cfg.get("model_type", "gpt2") != "gpt2": raise ValueError(f"config.json describes a {cfg['model_type']!r} model, not gpt2")
    if cfg.get("add_cross_attention"): raise ValueError("config.json asks for cross-attention (an encoder-decoder GPT-2): not implemented")
    return GPT2Config(**{f.name: cfg[f.name] for f in fields(GPT2Config) if cfg.get(f.name) is not None})

ACTIVATIONS = {"gelu_new": lambda x: x.gelu(), "gelu_pytorch_tanh": lambda x: x.gelu(), "gelu": lambda x: x.gelu("none"),
               "relu": lambda x: x.relu()}

class Linear:
  """y = x @ weight.T + bias with weight [out, in] (PyTorch's nn.Linear; Hugging Face's Conv1D stores [in, out], transposed
  at load): each output is a dot product along a contiguous row, which streams the weights faster on CPUs (bench/llm.py)."""
  def __init__(self, n_in: int, n_out: int, dtype: DType, device: str):
    self.weight, self.bias = Tensor.empty(n_out, n_in, dtype=dtype, device=device), Tensor.empty(n_out, dtype=dtype, device=device)
  def __call__(self, x: Tensor) -> Tensor: return x @ self.weight.T + self.bias

class LayerNorm:
  """Normalised in float32 whatever the model's dtype (as PyTorch does for half), then scaled and shifted."""
  def __init__(self, n: int, eps: float, dtype: DType, device: str):
    self.weight, self.bias, self.eps = Tensor.empty(n, dtype=dtype, device=device), Tensor.empty(n, dtype=dtype, device=device), eps
  def __call__(self, x: Tensor) -> Tensor: return x.float().layernorm(eps=self.eps).cast(x.dtype) * self.weight + self.bias

class Attention:
  """Causal self-attention over the cache: the new tokens' keys and values are written into it at start_pos, and the
  queries attend to positions 0 .. start_pos + T. Query, key and value are separate projections (Hugging Face's c_attn
  split in three) so that tensor parallelism splits each by heads."""
  def __init__(self, cfg: GPT2Config, layer: int, max_context: int, dtype: DType, device: str):
    d = cfg.n_embd
    self.q_proj, self.k_proj, self.v_proj, self.c_proj = (Linear(d, d, dtype, device) for _ in range(4))
    self.n_head, self.head_dim = cfg.n_head, d // cfg.n_head
    self.scale = (1 / math.sqrt(self.head_dim) if cfg.scale_attn_weights else 1.0) / (layer + 1 if cfg.scale_attn_by_inverse_layer_idx else 1)
    # [heads, positions, head_dim]: a head's keys are contiguous along the positions attention reads
    self.cache_k, self.cache_v = (Tensor.zeros(self.n_head, max_context, self.head_dim, dtype=dtype, device=device).contiguous() for _ in range(2))

  def __call__(self, x: Tensor, start_pos: UOp | int, mask: Tensor | None) -> Tensor:
    n = x.shape[0]
    q, k, v = (p(x).reshape(n, self.n_head, self.head_dim).transpose(0, 1) for p in (self.q_proj, self.k_proj, self.v_proj))
    end, ctx = start_pos + n, self.cache_k.shape[1]
    # the new positions written in place, lazily: the step stays one schedule, and the reads below come after the write
    pos = Tensor.arange(ctx, dtype=dtypes.int32, device=self.cache_k.device)
    window = ((pos >= start_pos) & (pos < end)).reshape(1, ctx, 1)
    # new.contiguous(): the projection computed once, not again at every cache position by the kernel writing the cache
    for cache, new in ((self.cache_k, k), (self.cache_v, v)):   # (Tensor.pad takes no symbolic widths: the UOp's does)
      cache.assign(window.where(Tensor(new.contiguous().uop.pad(((0, 0), (start_pos, ctx - end), (0, 0)))), cache))
    # shrink, not slicing: start_pos + n may pass the cache for some pair of the Variables' values, never for one bound here
    keys, values = (c.shrink((None, (0, end), None)) for c in (self.cache_k, self.cache_v))
    scores = (q @ keys.transpose(1, 2)).float() * self.scale          # [heads, n, start_pos + n]
    if mask is not None: scores = mask.where(scores, -math.inf)
    out = scores.softmax(-1).cast(x.dtype) @ values                    # [heads, n, head_dim]
    return self.c_proj(out.transpose(0, 1).reshape(n, self.n_head * self.head_dim))

class MLP:
  def __init__(self, cfg: GPT2Config, dtype: DType, device: str):
    inner = cfg.n_inner or 4 * cfg.n_embd
    self.c_fc, self.c_proj = Linear(cfg.n_embd, inner, dtype, device), Linear(inner, cfg.n_embd, dtype, device)
    self.act = ACTIVATIONS[cfg.activation_function]
  def __call__(self, x: Tensor) -> Tensor: return self.c_proj(self.act(self.c_fc(x)))

class Block:
  def __init__(self, cfg: GPT2Config, layer: int, max_context: int, dtype: DType, device: str):
    self.ln_1, self.ln_2 = (LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon, dtype, device) for _ in range(2))
    self.attn, self.mlp = Attention(cfg, layer, max_context, dtype, device), MLP(cfg, dtype, device)
  def __call__(self, x: Tensor, start_pos: UOp | int, mask: Tensor | None) -> Tensor:
    x = x + self.attn(self.ln_1(x), start_pos, mask)
    return x + self.mlp(self.ln_2(x))

class GPT2:
  """GPT-2 for one sequence, with a KV cache of max_context positions. Parameters start empty: load_hf() or randomize()."""
  def __init__(self, cfg: GPT2Config = GPT2Config(), max_context: int | None = None, dtype: DType = dtypes.float32, device: str | None = None):
    self.cfg, self.dtype, self.device = cfg, dtype, Device.canonicalize(device)
    self.max_context = min(max_context or cfg.n_positions, cfg.n_positions)
    self.wte = Tensor.empty(cfg.vocab_size, cfg.n_embd, dtype=dtype, device=self.device)
    self.wpe = Tensor.empty(cfg.n_positions, cfg.n_embd, dtype=dtype, device=self.device)
    self.h = [Block(cfg, i, self.max_context, dtype, self.device) for i in range(cfg.n_layer)]
    self.ln_f = LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon, dtype, self.device)
    # [vocab, n_embd], as Hugging Face stores it
    self.lm_head = self.wte if cfg.tie_word_embeddings else Tensor.empty(cfg.vocab_size, cfg.n_embd, dtype=dtype, device=self.device)
    # the symbols one compiled prefill and decode serve every position, prompt length and token with
    self.start_pos = Variable("start_pos", 0, self.max_context - 1)
    self.n_tokens = Variable("n_tokens", 1, self.max_context)
    self.token = Variable("token", 0, cfg.vocab_size - 1)

  def parameters(self) -> dict[str, Tensor]:
    """The weights by Hugging Face's names (c_attn split in q_proj, k_proj and v_proj; Linear weights are [out, in])."""
    out = {"transformer.wte.weight": self.wte, "transformer.wpe.weight": self.wpe,
           "transformer.ln_f.weight": self.ln_f.weight, "transformer.ln_f.bias": self.ln_f.bias}
    if not self.cfg.tie_word_embeddings: out["lm_head.weight"] = self.lm_head
    for i, b in enumerate(self.h):
      for name, p in (("ln_1", b.ln_1), ("ln_2", b.ln_2), ("attn.q_proj", b.attn.q_proj), ("attn.k_proj", b.attn.k_proj),
                      ("attn.v_proj", b.attn.v_proj), ("attn.c_proj", b.attn.c_proj), ("mlp.c_fc", b.mlp.c_fc), ("mlp.c_proj", b.mlp.c_proj)):
        out[f"transformer.h.{i}.{name}.weight"], out[f"transformer.h.{i}.{name}.bias"] = p.weight, p.bias
    return out

  def load_hf(self, arrays: dict[str, np.ndarray]) -> GPT2:
    """Weights from a Hugging Face GPT-2 state dict as numpy arrays (GPT2LMHeadModel's names, or GPT2Model's without the
    "transformer." prefix; the attention's mask buffers and a tied lm_head are skipped), cast to the model's dtype. Conv1D
    weights ([in, out]) are transposed and c_attn is split in three."""
    arrays = {k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}": v for k, v in arrays.items()
              if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    if self.cfg.tie_word_embeddings: arrays.pop("lm_head.weight", None)
    for k in [k for k in arrays if k.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"))]:
      arrays[k] = arrays[k].T
    for k in [k for k in arrays if ".attn.c_attn." in k]:
      for name, part in zip(("q_proj", "k_proj", "v_proj"), np.split(arrays.pop(k), 3, axis=0)): arrays[k.replace("c_attn", name)] = part
    params = self.parameters()
    missing, unexpected = sorted(set(params) - set(arrays)), sorted(set(arrays) - set(params))
    bad = [f"{k}: {arrays[k].shape} where the config gives {params[k].shape}" for k in params if k in arrays and arrays[k].shape != params[k].shape]
    if missing or unexpected or bad:
      raise ValueError(f"these weights do not fit GPT-2 {self.cfg}: missing {missing}, unexpected {unexpected}, mismatched {bad}")
    for k, t in params.items(): t.replace(Tensor(np.ascontiguousarray(arrays[k]), device=t.device).cast(self.dtype))
    return self.realize()

  def randomize(self, seed: int = 0) -> GPT2:
    """Hugging Face's initialisation (normal(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer), layer norms one
    and zero), drawn on the device from the seed."""
    Tensor.manual_seed(seed)
    for k, t in self.parameters().items():
      if ".ln_" in k or "ln_f" in k: t.replace(Tensor.full(t.shape, 0.0 if k.endswith("bias") else 1.0, dtype=self.dtype, device=self.device))
      elif k.endswith("bias"): t.replace(Tensor.zeros(t.shape, dtype=self.dtype, device=self.device))
      else:
        std = 0.02 / (math.sqrt(2 * self.cfg.n_layer) if k.endswith("c_proj.weight") else 1)
        t.replace(Tensor.normal(*t.shape, std=std, device=self.device).cast(self.dtype))
    return self.realize()

  def realize(self) -> GPT2:
    Tensor.realize_all(*self.parameters().values(), *(c for b in self.h for c in (b.attn.cache_k, b.attn.cache_v)))
    return self

  def shard(self, devices: tuple[str, ...]) -> GPT2:
    """Tensor parallel over devices: each device holds its share of the heads (their projections and cache) and of the
    MLP's hidden units; the output projections' sums over those all-reduce. The rest is replicated."""
    if self.cfg.n_head % len(devices) or (self.cfg.n_inner or 4 * self.cfg.n_embd) % len(devices):
      raise ValueError(f"--shard {len(devices)}: the {self.cfg.n_head} heads and the MLP's hidden units must split evenly over the devices")
    split = {"q_proj.weight": 0, "k_proj.weight": 0, "v_proj.weight": 0, "q_proj.bias": 0, "k_proj.bias": 0, "v_proj.bias": 0,
             "attn.c_proj.weight": 1, "c_fc.weight": 0, "c_fc.bias": 0, "mlp.c_proj.weight": 1}
    for k, t in self.parameters().items():
      t.replace(t.shard(devices, next((a for suffix, a in split.items() if k.endswith(suffix)), None)))
    for b in self.h:
      for c in (b.attn.cache_k, b.attn.cache_v): c.replace(c.shard(devices, 0))
    self.device = devices
    return self.realize()

  def embed(self, tokens: Tensor | UOp) -> Tensor:
    """Token embeddings [n, n_embd]: one id as a bound Variable is its row of wte, read in place (what decode does);
    int ids [n] take a one-hot product, n x vocab x n_embd multiply-adds (Generator gathers a prompt row by row)."""
    if isinstance(tokens, UOp): return self.wte.shrink(((tokens, tokens + 1), None))
    return tokens.one_hot(self.cfg.vocab_size).cast(self.dtype) @ self.wte

  def forward(self, x: Tensor, start_pos: UOp | int, last_only: bool = False) -> Tensor:
    """Logits [n, vocab] of the n token embeddings x at positions start_pos.., their keys and values written into the
    cache. last_only: only the last token's logits (what sampling needs)."""
    n = x.shape[0]
    x = x + self.wpe.shrink(((start_pos, start_pos + n), None))
    # query i may attend to key j <= start_pos + i; one query (decode) attends to every cached key, so it needs no mask
    mask = None
    if not (isinstance(n, int) and n == 1):
      pos = Tensor.arange(self.max_context, dtype=dtypes.int32, device=self.device)
      mask = pos.shrink(((0, start_pos + n),)).reshape(1, 1, -1) <= pos.shrink(((start_pos, start_pos + n),)).reshape(1, -1, 1)
    for block in self.h: x = block(x, start_pos, mask)
    if last_only: x = x.shrink(((n - 1, n), None))
    return self.ln_f(x) @ self.lm_head.T

  def __call__(self, tokens: Tensor | UOp, start_pos: UOp | int, last_only: bool = False) -> Tensor:
    """Logits of tokens (int ids [n], or one id as a bound Variable) at positions start_pos.. (see forward)."""
    return self.forward(self.embed(tokens), start_pos, last_only)

  @staticmethod
  def from_pretrained(path: str | Path, dtype: DType = dtypes.float32, max_context: int | None = None, device: str | None = None) -> GPT2:
    """From a folder holding config.json and model.safetensors as Hugging Face's save_pretrained writes them."""
    path = Path(path)
    for f in ("config.json", "model.safetensors"):
      if not (path / f).is_file(): raise FileNotFoundError(f"{path / f} is missing: --weights needs a folder saved by save_pretrained")
    cfg = GPT2Config.from_hf(json.loads((path / "config.json").read_text()))
    return GPT2(cfg, max_context, dtype, device).load_hf(safetensors_load_arrays(path / "model.safetensors"))

# ***** sampling on the device *****

def order_keys(x: Tensor) -> Tensor:
  """float32 values as int32 keys in the same order: a float's bits, with the magnitude bits of negative ones flipped."""
  bits = x.bitcast(dtypes.int32)
  return (bits < 0).where(bits ^ 0x7FFFFFFF, bits)

def top_k_threshold(keys: Tensor, k: int) -> Tensor:
  """The k-th largest of each row of int32 keys [rows, n], as [rows, 1] (ties counted, as torch.topk's last value): found
  4 bits at a time from the top, 8 rounds each counting the keys at or above 15 candidates; exact, no sort."""
  lo = Tensor.full((keys.shape[0], 1), -2**31, dtype=dtypes.int32, device=keys.device)
  steps = Tensor.arange(1, 16, dtype=dtypes.int32, device=keys.device).reshape(1, 15, 1)
  for shift in range(28, -1, -4):
    # the answer is in [lo, lo + 16 << shift); lo + 15 << shift stays below that end, itself at most 2^31: no overflow
    counts = (keys.unsqueeze(1) >= lo.unsqueeze(1) + steps * (1 << shift)).sum(-1, dtype=dtypes.int32)   # [rows, 15]
    lo = lo + (counts >= k).sum(-1, keepdim=True, dtype=dtypes.int32) * (1 << shift)
  return lo

def sample(logits: Tensor, temperature: float, top_k: int) -> Tensor:
  """One token id per row of logits [rows, vocab] as int32 [rows]: the argmax when temperature is 0, else a draw from
  softmax(logits / temperature) over the top_k largest (0: all; ties with the k-th kept, as Hugging Face's top-k filter
  does), taken as the argmax of the logits plus Gumbel noise."""
  if temperature == 0: return logits.argmax(-1)
  x = logits.float() / temperature
  if top_k: x = ((keys := order_keys(x)) >= top_k_threshold(keys, top_k)).where(x, -math.inf)
  return (x - (-Tensor.rand(*x.shape, device=x.device).log()).log()).argmax(-1)

class Generator:
  """Generation with TinyJits: gather (one prompt token's embedding into a buffer of rows), prefill (those rows, any
  number at any position) and decode (one token). Each compiles on its first call and replays after, whatever the
  token, length and position: they are bound Variables."""
  def __init__(self, model: GPT2, temperature: float = 0.0, top_k: int = 0, seed: int = 0):
    if temperature < 0: raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if not 0 <= top_k <= model.cfg.vocab_size: raise ValueError(f"top_k must be in [0, {model.cfg.vocab_size}] (0: no top-k), got {top_k}")
    self.model, self.temperature, self.top_k, self.seed = model, temperature, top_k, seed
    # the prompt's embeddings, a row read each: a one-hot product over the vocabulary cost half of a 124M prefill on CPU
    self.rows = Tensor.zeros(model.max_context, model.cfg.n_embd, dtype=model.dtype, device=model.device).contiguous().realize()
    self.gather, self.prefill, self.decode = TinyJit(self._gather), TinyJit(self._prefill), TinyJit(self._decode)

  def _gather(self, token: UOp, i: UOp) -> Tensor:
    at = (Tensor.arange(self.rows.shape[0], dtype=dtypes.int32, device=self.rows.device) == i).reshape(-1, 1)
    return self.rows.assign(at.where(self.model.embed(token), self.rows)).realize()
  def _prefill(self, start_pos: UOp, n: UOp) -> Tensor:
    return sample(self.model.forward(self.rows.shrink(((0, n), None)), start_pos, last_only=True), self.temperature, self.top_k).contiguous()
  def _decode(self, token: UOp, start_pos: UOp) -> Tensor:
    return sample(self.model(token, start_pos), self.temperature, self.top_k).contiguous()

  def generate(self, prompt: list[int], max_new_tokens: int, start_pos: int = 0) -> Iterator[int]:
    """The ids following the prompt, one at a time; the prompt's keys and values go into the cache from start_pos."""
    m = self.model
    if not prompt: raise ValueError("the prompt is empty: give at least one token (--prompt TEXT or --tokens IDS)")
    if bad := [t for t in prompt if not 0 <= t < m.cfg.vocab_size]: raise ValueError(f"token ids {bad[:5]} are outside the vocabulary [0, {m.cfg.vocab_size})")
    if start_pos + len(prompt) + max_new_tokens - 1 > m.max_context:
      raise ValueError(f"{len(prompt)} prompt tokens at position {start_pos} and {max_new_tokens} new ones do not fit the context of "
                       f"{m.max_context} positions: ask for fewer tokens or a larger --context")
    Tensor.manual_seed(self.seed)
    for i, t in enumerate(prompt): self.gather(m.token.bind(t), m.start_pos.bind(i))
    tok = int(self.prefill(m.start_pos.bind(start_pos), m.n_tokens.bind(len(prompt))).item())
    pos = start_pos + len(prompt)
    for i in range(max_new_tokens):
      yield tok
      if i + 1 == max_new_tokens: break
      tok = int(self.decode(m.token.bind(tok), m.start_pos.bind(pos)).item())
      pos += 1

# ***** tokenizer *****

def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's printable stand-in for each byte: printable Latin-1 bytes are themselves, the rest take code points from 256 up."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  extra = iter(range(256, 512))
  return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}

def _kind(c: str) -> str:
  """The classes of GPT-2's split pattern: letter (\\p{L}), number (\\p{N}), space (\\s), other."""
  cat = unicodedata.category(c)
  if cat[0] == "L": return "L"
  if cat[0] == "N": return "N"
  return "S" if c.isspace() and c not in "\x1c\x1d\x1e\x1f" else "O"   # str.isspace also takes these separators; \\s does not

def pretokenize(text: str) -> list[str]:
  """GPT-2's split before BPE, the regex 's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
  written out as a scan (no third-party regex module): each piece the first alternative that matches at its start."""
  out, i, n = [], 0, len(text)
  while i < n:
    if text[i] == "'" and (c := next((c for c in ("s", "t", "re", "ve", "m", "ll", "d") if text.startswith(c, i + 1)), None)):
      j = i + 1 + len(c)
    elif (k := i + (text[i] == " ")) < n and (kind := _kind(text[k])) != "S":   # ' ?' then a run of one class
      j = k
      while j < n and _kind(text[j]) == kind: j += 1
    else:   # whitespace: the run, less its last character when that one starts the next piece
      j = i
      while j < n and _kind(text[j]) == "S": j += 1
      if j < n and j - i > 1: j -= 1
    out.append(text[i:j])
    i = j
  return out

class Tokenizer:
  """GPT-2's byte-level BPE from vocab.json and merges.txt; without them, raw bytes (id = byte value)."""
  def __init__(self, vocab: dict[str, int] | None = None, merges: list[tuple[str, str]] | None = None):
    self.vocab, self.ranks = vocab, {m: i for i, m in enumerate(merges or [])}
    self.ids_to_str = {i: s for s, i in vocab.items()} if vocab else None
    self.byte_char = _bytes_to_unicode()
    self.char_byte = {c: b for b, c in self.byte_char.items()}
    self.cache: dict[str, list[int]] = {}

  @staticmethod
  def from_dir(path: str | Path) -> Tokenizer:
    path = Path(path)
    vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
    lines = (path / "merges.txt").read_text(encoding="utf-8").splitlines()
    merges = [tuple(ln.split(" ")) for ln in lines if ln and not ln.startswith("#version")]
    if bad := [m for m in merges if len(m) != 2]: raise ValueError(f"{path / 'merges.txt'}: lines {bad[:3]} are not two symbols")
    return Tokenizer(vocab, merges)  # type: ignore[arg-type]

  def _bpe(self, piece: str) -> list[int]:
    """A piece's ids: its bytes as symbols, the pair of lowest merge rank merged until none is in merges.txt."""
    if (ids := self.cache.get(piece)) is not None: return ids
    syms = [self.byte_char[b] for b in piece.encode("utf-8")]
    while len(syms) > 1:
      best = min(range(len(syms) - 1), key=lambda i: self.ranks.get((syms[i], syms[i + 1]), math.inf))
      if (pair := (syms[best], syms[best + 1])) not in self.ranks: break
      merged, i = [], 0
      while i < len(syms):
        if i + 1 < len(syms) and (syms[i], syms[i + 1]) == pair: merged.append(syms[i] + syms[i + 1]); i += 2
        else: merged.append(syms[i]); i += 1
      syms = merged
    assert self.vocab is not None
    if missing := [s for s in syms if s not in self.vocab]: raise ValueError(f"vocab.json has no entry for the symbols {missing} of {piece!r}")
    self.cache[piece] = ids = [self.vocab[s] for s in syms]
    return ids

  def encode(self, text: str) -> list[int]:
    if self.vocab is None: return list(text.encode("utf-8"))
    return [i for piece in pretokenize(text) for i in self._bpe(piece)]

  def token_bytes(self, i: int) -> bytes:
    """The bytes a token stands for (without a vocabulary, an id past 255 shows as <id>)."""
    if self.ids_to_str is None: return bytes([i]) if i < 256 else f"<{i}>".encode()
    if (s := self.ids_to_str.get(i)) is None: raise ValueError(f"token id {i} is not in vocab.json")
    return bytes(self.char_byte[c] for c in s)

  def decode(self, ids: list[int]) -> str: return b"".join(map(self.token_bytes, ids)).decode("utf-8", errors="replace")

# ***** command line *****

def default_half(device: str) -> bool:
  """float16 where the backend has it, except on CPU-style targets (threads): x86 and ARM cores compute in float32 anyway."""
  ren = Device.renderer(device.split(":")[0])
  return dtypes.float16 in ren.supported_dtypes and ren.threads == 0

def build_model(args: argparse.Namespace, device: str) -> GPT2:
  """The model the command line asks for, on device, its cache sized for the prompt and the new tokens unless --context."""
  half = default_half(device) if args.half is None else args.half
  if half and dtypes.float16 not in Device.renderer(device.split(":")[0]).supported_dtypes: raise SystemExit(f"--half: {device} has no float16")
  dtype, context = dtypes.float16 if half else dtypes.float32, args.context or len(args.prompt_ids) + args.max_new_tokens
  if args.weights: return GPT2.from_pretrained(args.weights, dtype, context, device)
  cfg = GPT2Config(vocab_size=args.vocab, n_positions=max(1024, context), n_embd=args.width, n_layer=args.layers, n_head=args.heads)
  return GPT2(cfg, context, dtype, device).randomize(args.seed)

def main(argv: list[str] | None = None) -> list[int]:
  p = argparse.ArgumentParser(prog="python -m tinycore.examples.gpt2", description=__doc__.split("\n")[0])
  p.add_argument("--weights", help="a folder with config.json and model.safetensors (save_pretrained); default: random weights")
  p.add_argument("--tokenizer", help="a folder with vocab.json and merges.txt (default: --weights' folder if it has them, else raw bytes)")
  src = p.add_mutually_exclusive_group()
  src.add_argument("--prompt", default="Hello, I'm a language model,", help="text to continue")
  src.add_argument("--tokens", help="the prompt as token ids: 1,2,3")
  p.add_argument("--max-new-tokens", type=int, default=32)
  p.add_argument("--greedy", action="store_true", help="take the most likely token (the same as --temperature 0)")
  p.add_argument("--temperature", type=float, default=0.8)
  p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens only (0: all)")
  p.add_argument("--seed", type=int, default=0, help="seeds sampling (and random weights)")
  p.add_argument("--ids", action="store_true", help="print the generated ids as one comma-separated line last")
  p.add_argument("--half", action=argparse.BooleanOptionalAction, default=None, help="float16 weights and activations (default: on GPUs)")
  p.add_argument("--device", default=None, help="default: DEV or the default device")
  p.add_argument("--shard", type=int, default=1, help="tensor parallel over N instances of the device (DEV:0 .. DEV:N-1)")
  p.add_argument("--layers", type=int, default=12); p.add_argument("--heads", type=int, default=12)
  p.add_argument("--width", type=int, default=768); p.add_argument("--vocab", type=int, default=50257)
  p.add_argument("--context", type=int, default=None, help="KV cache positions (default: what the prompt and new tokens need)")
  args = p.parse_args(argv)
  if args.max_new_tokens < 1: p.error("--max-new-tokens must be at least 1")
  if args.shard < 1: p.error("--shard must be at least 1")
  tok_dir = args.tokenizer or (args.weights if args.weights and (Path(args.weights) / "vocab.json").is_file() else None)
  tokenizer = Tokenizer.from_dir(tok_dir) if tok_dir else Tokenizer()
  if args.tokens is not None:
    try: args.prompt_ids = [int(t) for t in args.tokens.split(",")]
    except ValueError: p.error(f"--tokens wants comma-separated integers, got {args.tokens!r}")
  else: args.prompt_ids = tokenizer.encode(args.prompt)
  device = Device.canonicalize(args.device)
  st = time.perf_counter()
  model = build_model(args, device)
  if args.shard > 1: model.shard(tuple(f"{device.split(':')[0]}:{i}" for i in range(args.shard)))
  print(f"model: {model.cfg.n_layer} layers, {model.cfg.n_head} heads, width {model.cfg.n_embd}, {model.dtype.name} on {model.device}, "
        f"loaded in {time.perf_counter() - st:.1f} s", file=sys.stderr)
  gen = Generator(model, 0.0 if args.greedy else args.temperature, args.top_k, args.seed)
  out, times = [], [time.perf_counter()]
  text = codecs.getincrementaldecoder("utf-8")(errors="replace")   # a character may span tokens: printed once whole
  sys.stdout.write(text.decode(b"".join(map(tokenizer.token_bytes, args.prompt_ids))))
  for t in gen.generate(args.prompt_ids, args.max_new_tokens):
    out.append(t)
    times.append(time.perf_counter())
    sys.stdout.write(text.decode(tokenizer.token_bytes(t))); sys.stdout.flush()
  print(text.decode(b"", final=True))
  # decode call 1 compiles and call 2 captures: the rate is the replays' (tokens 4 on)
  replay = f", then {(len(out) - 3) / (times[-1] - times[3]):.2f} tokens/s" if len(out) > 3 else ""
  print(f"first token {1e3 * (times[1] - times[0]):.0f} ms (compiling){replay}", file=sys.stderr)
  if args.ids: print(",".join(map(str, out)))
  return out

if __name__ == "__main__": main()
