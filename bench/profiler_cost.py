"""The profiler's cost: a small cached op's dispatch and a small training step, each with PROFILE off and on (on, every
kernel is waited for and recorded), and with VIZ's rewrite capture on for a first compile."""
from __future__ import annotations
import argparse, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing the core
import numpy as np

def per_call_us(fn, reps: int, batches: int = 5) -> float:
  """The lowest of `batches` medians of `reps` calls (a batch disturbed by other processes shows a higher median)."""
  for _ in range(10): fn()
  out = []
  for _ in range(batches):
    ts = []
    for _ in range(reps):
      st = time.perf_counter(); fn(); ts.append(time.perf_counter() - st)
    out.append(statistics.median(ts))
  return min(out) * 1e6

def main():
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--reps", type=int, default=200)
  args = ap.parse_args()
  from tinycore import Tensor, profile, trace
  from tinycore.nn import Linear
  from tinycore.nn.optim import Adam
  s = Tensor(np.arange(16, dtype=np.float32)).realize()
  layers = [Linear(64, 64), Linear(64, 10)]
  opt = Adam([p for l in layers for p in (l.weight, l.bias)], lr=1e-3)
  x, y = Tensor(np.random.rand(32, 64).astype(np.float32)).realize(), Tensor(np.random.randint(0, 10, 32)).realize()
  def train_step():
    with Tensor.train():
      loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
      opt.zero_grad(); loss.backward(); opt.step()
      loss.realize()
  work = {"dispatch (s+1).realize()": (lambda: (s + 1).realize(), args.reps), "MLP training step (Adam)": (train_step, max(10, args.reps // 10))}
  print(f"{'':32s} {'off':>10s} {'PROFILE on':>12s} {'ratio':>7s}")
  for name, (fn, reps) in work.items():
    off = per_call_us(fn, reps)
    with profile() as p: on = per_call_us(fn, reps)
    print(f"{name:32s} {off:8.1f}us {on:10.1f}us {on / off:6.2f}x   ({len(p.events)} events recorded)")
  with trace.capturing() as cap:
    st = time.perf_counter()
    (Tensor(np.random.rand(7, 9).astype(np.float32)).exp().sum(1) * 3).realize()
    cap_ms = (time.perf_counter() - st) * 1e3
  st = time.perf_counter()
  (Tensor(np.random.rand(9, 7).astype(np.float32)).exp().sum(1) * 3).realize()
  plain_ms = (time.perf_counter() - st) * 1e3
  print(f"first compile of a new kernel: {plain_ms:.1f} ms, with VIZ's capture {cap_ms:.1f} ms "
        f"({sum(len(c['steps']) for g in cap.groups for c in g['rewrites'])} rewrite steps, {len(cap.nodes)} nodes recorded)")

if __name__ == "__main__": main()
