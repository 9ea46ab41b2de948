"""Benchmark of scheduling and codegen: a transformer block and a small ResNet, side by side with tinygrad when installed."""
from __future__ import annotations
import argparse, gc, math, pathlib, statistics, sys, time
from typing import Any, Callable
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing

# ***** the models, written once against the tinygrad Tensor API that both frameworks speak *****

def conv2d(x, w, padding: int = 0):
  if hasattr(x, "conv2d"): return x.conv2d(w, padding=padding)
  # tinycore before conv2d landed: the same graph from sliding windows, a product and a sum
  n, cin, _, _ = x.shape
  cout, _, kh, kw = w.shape
  if padding: x = x.pad((padding, padding, padding, padding))
  p = x._pool((kh, kw))
  oh, ow = p.shape[2], p.shape[3]
  return (p.reshape(n, 1, cin, oh, ow, kh, kw) * w.reshape(1, cout, cin, 1, 1, kh, kw)).sum((2, 5, 6))

def layernorm(x, g, b, eps=1e-5):
  m = x.mean(-1, keepdim=True)
  xc = x - m
  return xc * (xc.square().mean(-1, keepdim=True) + eps).rsqrt() * g + b

def transformer_block(T, dev: str, B: int = 1, S: int = 32, D: int = 256, H: int = 4, backward: bool = False):
  """Pre-norm attention + MLP block; returns the tensors to realize."""
  def param(*shape):
    t = T.empty(*shape, device=dev)
    t.requires_grad = backward
    return t
  x = param(B, S, D)
  wq, wk, wv, wo = param(D, D), param(D, D), param(D, D), param(D, D)
  w1, w2 = param(D, 4 * D), param(4 * D, D)
  g1, b1, g2, b2 = param(D), param(D), param(D), param(D)
  h = layernorm(x, g1, b1)
  def heads(t): return t.reshape(B, S, H, D // H).transpose(1, 2)
  q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
  att = (q @ k.transpose(-2, -1) * (1 / math.sqrt(D // H))).softmax(-1)
  o = (att @ v).transpose(1, 2).reshape(B, S, D)
  x = x + o @ wo
  x = x + (layernorm(x, g2, b2) @ w1).gelu() @ w2
  if not backward: return [x]
  loss = x.square().mean()
  return [loss] + loss.gradient(wq, wk, wv, wo, w1, w2)

def resnet(T, dev: str, B: int = 2, C: int = 16, HW: int = 16, blocks: int = 3, backward: bool = False):
  """A stem conv, `blocks` residual blocks of two 3x3 convs with affine norm, global pool and a linear head."""
  def param(*shape):
    t = T.empty(*shape, device=dev)
    t.requires_grad = backward
    return t
  x = T.empty(B, 3, HW, HW, device=dev)
  ws = [param(C, 3, 3, 3)] + [param(C, C, 3, 3) for _ in range(2 * blocks)]
  scales, shifts = [param(1, C, 1, 1) for _ in ws], [param(1, C, 1, 1) for _ in ws]
  head = param(C, 10)
  def cbn(h, i): return conv2d(h, ws[i], padding=1) * scales[i] + shifts[i]
  h = cbn(x, 0).relu()
  for blk in range(blocks):
    r = cbn(cbn(h, 1 + 2 * blk).relu(), 2 + 2 * blk)
    h = (h + r).relu()
  out = h.mean((2, 3)) @ head
  if not backward: return [out]
  loss = out.square().mean()
  return [loss] + loss.gradient(*ws)

WORKLOADS: dict[str, Callable] = {
  "transformer fwd": lambda T, dev: transformer_block(T, dev),
  "transformer fwd+bwd": lambda T, dev: transformer_block(T, dev, backward=True),
  "resnet fwd": lambda T, dev: resnet(T, dev),
  "resnet fwd+bwd": lambda T, dev: resnet(T, dev, backward=True),
}

# ***** each framework: build the graph, schedule it, run codegen on every kernel (no compile, no launch) *****

class Framework:
  name: str
  T: Any
  dev: str   # the device graphs are built for: its renderer is the codegen target
  def schedule(self, outs: list) -> list: raise NotImplementedError
  def codegen(self, kernels: list) -> None: raise NotImplementedError

class Tinycore(Framework):
  name = "tinycore"
  def __init__(self):
    from tinycore import Tensor, Device
    from tinycore.codegen import get_program
    self.T, self.get_program, self.dev = Tensor, get_program, Device.DEFAULT
    self.ren = Device.renderer(self.dev)
  def schedule(self, outs): return [si.ast for si in self.T.schedule(*outs) if si.ast.op.name == "SINK"]
  def codegen(self, kernels):
    for ast in kernels: self.get_program(ast, self.ren)

class Tinygrad(Framework):
  name = "tinygrad"
  def __init__(self):
    from tinygrad import Tensor, Device
    from tinygrad.helpers import DEV
    from tinygrad.codegen import full_rewrite_to_sink
    from tinygrad.codegen.late.linearizer import linearize
    # NULL: tinygrad's C-style renderer without a compiler or hardware, so only codegen is timed
    DEV.value = "NULL"  # tinygrad's own DEV setting (read here, not from the environment tinycore also reads)
    self.T, self.full_rewrite_to_sink, self.linearize, self.dev = Tensor, full_rewrite_to_sink, linearize, "NULL"
    self.ren = Device[self.dev].renderer
  def schedule(self, outs):
    linear, _ = self.T.linear_with_vars(*outs)
    return [c.src[0] for c in linear.src if c.op.name == "CALL" and c.src[0].op.name == "SINK"]
  def codegen(self, kernels):
    # what tinygrad does per kernel before the compiler: optimise, lower, linearize, render
    for ast in kernels: self.ren.render(self.linearize(self.full_rewrite_to_sink(ast, self.ren)))

def frameworks() -> list[Framework]:
  out: list[Framework] = [Tinycore()]
  try: out.append(Tinygrad())
  except ImportError: pass
  return out

def measure(fw: Framework, build: Callable, reps: int) -> tuple[float, float, int]:
  """Median CPU seconds of this process to schedule and to codegen, each rep on a freshly built graph (nothing cached
  by structure). CPU time, not wall time: both are single-threaded Python, and other load on the machine drops out."""
  sched, cg, n = [], [], 0
  for _ in range(reps):
    outs = build(fw.T, fw.dev)
    gc.collect()
    st = time.process_time()
    kernels = fw.schedule(outs)
    sched.append(time.process_time() - st)
    st = time.process_time()
    fw.codegen(kernels)
    cg.append(time.process_time() - st)
    n = len(kernels)
  return statistics.median(sched), statistics.median(cg), n

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--only", choices=sorted(WORKLOADS), action="append", help="run only these workloads")
  args = ap.parse_args()
  fws = frameworks()
  print(f"{'workload':22s} {'framework':9s} {'kernels':>7s} {'schedule ms':>12s} {'codegen ms':>11s} {'ms/kernel':>10s}")
  for wname, build in WORKLOADS.items():
    if args.only and wname not in args.only: continue
    res = {fw.name: measure(fw, build, args.reps) for fw in fws}
    for name, (s, c, n) in res.items(): print(f"{wname:22s} {name:9s} {n:7d} {s*1e3:12.1f} {c*1e3:11.1f} {c*1e3/max(n,1):10.2f}")
    if "tinygrad" in res:
      (s0, c0, _), (s1, c1, _) = res["tinycore"], res["tinygrad"]
      print(f"{'':22s} {'ratio':9s} {'':7s} {s0/s1:11.2f}x {c0/c1:10.2f}x   (tinycore / tinygrad, lower is better)")

if __name__ == "__main__": main()
