"""GPT-2 decoding side by side in one run: tinycore (tinycore.examples.gpt2: jitted prefill and decode), PyTorch eager
(the same model in plain torch ops with a preallocated KV cache, the same thread count) and transformers'
GPT2LMHeadModel.generate, on the same random weights (written once in Hugging Face's format, read by all three).
Each framework runs in a process of its own, so its peak resident memory is its own; greedy decoding, so all three
must produce the same tokens. Prints the machine, first-token latency, decode tokens/s and the ratios."""
from __future__ import annotations
import argparse, json, os, platform, resource, subprocess, sys, tempfile, time
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing the core

def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f: return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown CPU")
  except OSError: return platform.processor() or platform.machine()

def write_weights(path: Path, layers: int, heads: int, width: int, vocab: int, positions: int, seed: int) -> None:
  """Random GPT-2 weights with Hugging Face's initialisation, as save_pretrained writes them (config.json, model.safetensors)."""
  from tinycore.nn.serialization import safetensors_save_arrays
  rng = np.random.default_rng(seed)
  def normal(*shape, std=0.02): return (rng.standard_normal(shape, np.float32) * std).astype(np.float32)
  w = {"transformer.wte.weight": normal(vocab, width), "transformer.wpe.weight": normal(positions, width, std=0.01),
       "transformer.ln_f.weight": np.ones(width, np.float32), "transformer.ln_f.bias": np.zeros(width, np.float32)}
  for i in range(layers):
    p = f"transformer.h.{i}."
    for ln in ("ln_1", "ln_2"): w[p + ln + ".weight"], w[p + ln + ".bias"] = np.ones(width, np.float32), np.zeros(width, np.float32)
    for name, n_in, n_out, std in (("attn.c_attn", width, 3 * width, 0.02), ("attn.c_proj", width, width, 0.02 / (2 * layers) ** 0.5),
                                   ("mlp.c_fc", width, 4 * width, 0.02), ("mlp.c_proj", 4 * width, width, 0.02 / (2 * layers) ** 0.5)):
      w[p + name + ".weight"], w[p + name + ".bias"] = normal(n_in, n_out, std=std), normal(n_out, std=0.01)
  safetensors_save_arrays(path / "model.safetensors", w)
  (path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": vocab,
    "n_positions": positions, "n_embd": width, "n_layer": layers, "n_head": heads, "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": None}))

# ***** the frameworks, each in its own process: run(args) -> (token times, tokens) *****

def now() -> tuple[float, float]:
  """(wall clock, this process's CPU time): on a machine shared with other work, the CPU time is what the run itself cost."""
  return time.perf_counter(), time.process_time()

def run_tinycore(args) -> tuple[list[tuple[float, float]], list[int]]:
  from tinycore import dtypes
  from tinycore.examples.gpt2 import GPT2, Generator
  model = GPT2.from_pretrained(args.dir, dtypes.float16 if args.half else dtypes.float32, args.prompt_len + args.new_tokens, args.device)
  gen = Generator(model)
  for _ in range(2): list(gen.generate(args.prompt, args.new_tokens))   # compile, then capture: the timed run replays
  times, out = [now()], []
  for t in gen.generate(args.prompt, args.new_tokens): out.append(t); times.append(now())
  return times, out

class TorchGPT2:
  """GPT-2 in plain PyTorch ops, eager: a preallocated KV cache written in place, greedy decoding."""
  def __init__(self, path: Path, context: int, device: str, dtype):
    import torch
    from safetensors.torch import load_file
    self.torch, self.cfg = torch, json.loads((path / "config.json").read_text())
    self.w = {k: v.to(device, dtype) for k, v in load_file(str(path / "model.safetensors")).items()}
    L, H, D = self.cfg["n_layer"], self.cfg["n_head"], self.cfg["n_embd"]
    self.cache = [(torch.zeros(H, context, D // H, device=device, dtype=dtype), torch.zeros(H, context, D // H, device=device, dtype=dtype)) for _ in range(L)]
  def __call__(self, ids, start: int):
    torch, F, w, (H, D) = self.torch, self.torch.nn.functional, self.w, (self.cfg["n_head"], self.cfg["n_embd"])
    n = ids.shape[0]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][start:start + n]
    for i, (ck, cv) in enumerate(self.cache):
      p = f"transformer.h.{i}."
      h = F.layer_norm(x, (D,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.cfg["layer_norm_epsilon"])
      q, k, v = (t.view(n, H, D // H).transpose(0, 1) for t in torch.addmm(w[p + "attn.c_attn.bias"], h, w[p + "attn.c_attn.weight"]).split(D, -1))
      ck[:, start:start + n], cv[:, start:start + n] = k, v
      att = (q @ ck[:, :start + n].transpose(1, 2)) * (D // H) ** -0.5
      if n > 1: att = att.masked_fill(torch.ones(n, start + n, dtype=torch.bool, device=att.device).tril(start).logical_not(), float("-inf"))
      out = (att.float().softmax(-1).to(att.dtype) @ cv[:, :start + n]).transpose(0, 1).reshape(n, D)
      x = x + torch.addmm(w[p + "attn.c_proj.bias"], out, w[p + "attn.c_proj.weight"])
      h = F.layer_norm(x, (D,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.cfg["layer_norm_epsilon"])
      h = F.gelu(torch.addmm(w[p + "mlp.c_fc.bias"], h, w[p + "mlp.c_fc.weight"]), approximate="tanh")
      x = x + torch.addmm(w[p + "mlp.c_proj.bias"], h, w[p + "mlp.c_proj.weight"])
    x = F.layer_norm(x[-1:], (D,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], self.cfg["layer_norm_epsilon"])
    return x @ w["transformer.wte.weight"].T

def run_torch(args) -> tuple[list[tuple[float, float]], list[int]]:
  import torch
  dev = "cuda" if args.device.startswith("NV") else "cpu"
  model = TorchGPT2(Path(args.dir), args.prompt_len + args.new_tokens, dev, torch.float16 if args.half else torch.float32)
  def generate():
    times, out = [now()], []
    with torch.inference_mode():
      tok = int(model(torch.tensor(args.prompt, device=dev), 0).argmax(-1))
      for i in range(args.new_tokens):
        out.append(tok); times.append(now())
        if i + 1 < args.new_tokens: tok = int(model(torch.tensor([tok], device=dev), args.prompt_len + i).argmax(-1))
    return times, out
  generate()   # warm up: allocator, kernels
  return generate()

def run_transformers(args) -> tuple[list[tuple[float, float]], list[int]]:
  import torch, transformers
  from transformers.generation.streamers import BaseStreamer
  dev = "cuda" if args.device.startswith("NV") else "cpu"
  model = transformers.GPT2LMHeadModel.from_pretrained(args.dir, dtype=torch.float16 if args.half else torch.float32).to(dev).eval()
  class Clock(BaseStreamer):   # put() gets the prompt first, then each new token as it is chosen
    def __init__(self): self.times = []
    def put(self, value): self.times.append(now())
    def end(self): pass
  ids = torch.tensor([args.prompt], device=dev)
  def generate():
    clock = Clock()
    start = now()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                         do_sample=False, pad_token_id=0, streamer=clock)
    return [start] + clock.times[1:], out[0, args.prompt_len:].tolist()
  with torch.inference_mode():
    generate()
    return generate()

FRAMEWORKS = {"tinycore": run_tinycore, "torch": run_torch, "transformers": run_transformers}

def child(args) -> None:
  if args.child != "tinycore":
    import torch
    torch.set_num_threads(args.threads)
  times, tokens = FRAMEWORKS[args.child](args)
  (w0, c0), (w1, c1), (w2, c2) = times[0], times[1], times[-1]
  print(json.dumps({"first_token_ms": 1e3 * (w1 - w0), "decode_tok_s": (len(times) - 2) / (w2 - w1), "first_token_cpu_ms": 1e3 * (c1 - c0),
                    "decode_tok_cpu_s": (len(times) - 2) / (c2 - c1), "tokens": tokens,
                    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--layers", type=int, default=12); p.add_argument("--heads", type=int, default=12)
  p.add_argument("--width", type=int, default=768); p.add_argument("--vocab", type=int, default=50257)
  p.add_argument("--prompt-len", type=int, default=8); p.add_argument("--new-tokens", type=int, default=32)
  p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads of every framework (CPU_THREADS, torch.set_num_threads)")
  p.add_argument("--device", default="CPU", help="tinycore's device (NV: PyTorch and transformers on CUDA, float16)")
  p.add_argument("--half", action=argparse.BooleanOptionalAction, default=None, help="float16 (default: on NV)")
  p.add_argument("--rounds", type=int, default=1, help="run every framework this many times, in turn; report each one's best")
  p.add_argument("--only", default="tinycore,torch,transformers", help="comma-separated frameworks to run")
  p.add_argument("--child", choices=list(FRAMEWORKS), help=argparse.SUPPRESS)
  p.add_argument("--dir", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.half is None: args.half = args.device.startswith("NV")
  args.prompt = [(17 * i + 5) % args.vocab for i in range(args.prompt_len)]
  if args.child: return child(args)
  import torch
  versions = f"torch {torch.__version__}"
  try:
    import transformers
    versions += f", transformers {transformers.__version__}"
  except ImportError: args.only = args.only.replace("transformers", "")
  print(f"machine: {cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {args.threads} threads each; {versions}")
  print(f"GPT-2 {args.layers} layers, {args.heads} heads, width {args.width}, vocab {args.vocab}; prompt {args.prompt_len} tokens, "
        f"{args.new_tokens} new (greedy); {'float16' if args.half else 'float32'}; tinycore on {args.device}")
  names = [n for n in args.only.split(",") if n]
  best: dict[str, dict] = {}
  with tempfile.TemporaryDirectory() as d:
    write_weights(Path(d), args.layers, args.heads, args.width, args.vocab, max(1024, args.prompt_len + args.new_tokens), 0)
    env = {**os.environ, "CPU_THREADS": str(args.threads)}
    cmd = [sys.executable, __file__, *sys.argv[1:], "--dir", d]
    for _ in range(args.rounds):
      for name in names:
        r = subprocess.run(cmd + ["--child", name], env=env, capture_output=True, text=True)
        if r.returncode: raise SystemExit(f"{name} failed:\n{r.stderr[-3000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        if name not in best or res["decode_tok_s"] > best[name]["decode_tok_s"]: best[name] = res
  base = best.get("torch")
  # wall clock is what a user sees; per CPU second is what the run cost, robust when other processes share the cores
  print(f"{'':14s}{'first token':>14s}{'decode':>14s}{'vs torch':>10s}{'first token':>14s}{'decode per':>18s}{'vs torch':>10s}{'peak RSS':>11s}")
  print(f"{'':14s}{'(wall)':>14s}{'(wall)':>14s}{'':>10s}{'(CPU time)':>14s}{'CPU second':>18s}{'':>10s}")
  for name, r in best.items():
    ratio, cratio = (f"{r[k] / base[k]:.2f}x" if base else "-" for k in ("decode_tok_s", "decode_tok_cpu_s"))
    print(f"{name:14s}{r['first_token_ms']:11.1f} ms{r['decode_tok_s']:8.2f} tok/s{ratio:>10s}"
          f"{r['first_token_cpu_ms']:11.1f} ms{r['decode_tok_cpu_s']:12.2f} tok/s{cratio:>10s}{r['peak_rss_mb']:8.0f} MB")
  same = len({tuple(r["tokens"]) for r in best.values()}) == 1
  print(f"greedy tokens {'identical' if same else 'DIFFER'} across {', '.join(best)}" + ("" if same else f": {[r['tokens'][:8] for r in best.values()]}"))

if __name__ == "__main__": main()
