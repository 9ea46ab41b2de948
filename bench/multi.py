"""Data parallelism on CPU instances: a training step's speed-up on 1, 2 and 4 instances (TinyJit, and un-jitted with
and without the schedule cache), and all-reduce GB/s per strategy."""
from __future__ import annotations
import argparse, pathlib, statistics, sys, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from tinycore import Tensor, TinyJit, dtypes, nn
from tinycore.nn import optim
from tinycore.nn.state import get_parameters
from tinycore.uop import Ops
from tinycore.engine import allreduce
from tinycore.multi import MultiBuffer, STRATEGIES, allreduce_plan, allreduce_on_host
from tinycore import schedule_cache

def best_of(fn, reps: int) -> float:
  fn()  # warm: compile, capture
  times = []
  for _ in range(reps):
    st = time.perf_counter(); fn(); times.append(time.perf_counter() - st)
  return statistics.median(times)

def step_time(n: int, batch: int, width: int, reps: int, jit: bool = True) -> float:
  """Seconds per Adam step of an MLP (TinyJit-replayed, or scheduled each call), the batch sharded over CPU:0..n-1
  (n=1: one device)."""
  devices = tuple(f"CPU:{i}" for i in range(n))
  Tensor.manual_seed(0)
  layers = [nn.Linear(784, width), nn.Linear(width, width), nn.Linear(width, 10)]
  params = get_parameters(layers)
  if n > 1:
    for p in params: p.shard_(devices)
  opt = optim.Adam(params, lr=1e-3)
  r = np.random.default_rng(0)
  x, y = Tensor(r.standard_normal((batch, 784)).astype(np.float32)), Tensor(r.integers(0, 10, batch))
  if n > 1: x, y = x.shard(devices, 0), y.shard(devices, 0)
  def step(x, y):
    opt.zero_grad()
    loss = layers[2](layers[1](layers[0](x).relu()).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    return loss.realize(*opt.schedule_step())
  if jit: step = TinyJit(step)
  with Tensor.train():
    step(x, y)
    return best_of(lambda: step(x, y).item(), reps)

def allreduce_gbps(n: int, nbytes: int, strategy: str, reps: int, on_host: bool = False) -> float:
  """Bytes of one shard reduced per second (the algorithm bandwidth: what each device contributes), as kernels on the
  devices (what runs) or, for comparison, the same plan in host memory (the fallback)."""
  size = nbytes // 4
  src, dest = MultiBuffer(tuple(f"CPU:{i}" for i in range(n)), size, dtypes.float32), MultiBuffer(tuple(f"CPU:{i}" for i in range(n)), size, dtypes.float32)
  for b in src.bufs: b.copyin(memoryview(np.random.default_rng(1).standard_normal(size).astype(np.float32)).cast("B"))
  plan = allreduce_plan(n, size, strategy)
  run = (lambda: allreduce_on_host(dest.bufs, src.bufs, Ops.ADD, plan)) if on_host else (lambda: allreduce(dest, src, Ops.ADD, strategy))
  return nbytes / best_of(run, reps) / 1e9

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--batch", type=int, default=512)
  p.add_argument("--width", type=int, default=512)
  p.add_argument("--reps", type=int, default=5)
  a = p.parse_args()
  base = step_time(1, a.batch, a.width, a.reps)
  print(f"training step (MLP 784-{a.width}-{a.width}-10, batch {a.batch}, Adam, TinyJit)")
  for n in (1, 2, 4):
    t = base if n == 1 else step_time(n, a.batch, a.width, a.reps)
    print(f"  {n} CPU instance{'s' if n > 1 else ' '}: {t*1e3:8.2f} ms/step   speed-up {base / t:5.2f}x")
  print("un-jitted step (scheduled every call): schedule cache on vs off")
  for n in (1, 2, 4):
    cached = step_time(n, a.batch, a.width, a.reps, jit=False)
    size, schedule_cache.SCHEDULE_CACHE_SIZE = schedule_cache.SCHEDULE_CACHE_SIZE, 0
    try: uncached = step_time(n, a.batch, a.width, a.reps, jit=False)
    finally: schedule_cache.SCHEDULE_CACHE_SIZE = size
    print(f"  {n} CPU instance{'s' if n > 1 else ' '}: cached {cached*1e3:8.2f} ms/step   uncached {uncached*1e3:8.2f} ms/step   {uncached / cached:5.2f}x")
  print("all-reduce (float32, algorithm bandwidth: one shard's bytes per second): device kernels / host fallback")
  for n in (2, 4):
    for nbytes in (1 << 16, 1 << 20, 1 << 24):
      row = "  ".join(f"{s} {allreduce_gbps(n, nbytes, s, a.reps):6.2f} / {allreduce_gbps(n, nbytes, s, a.reps, True):6.2f} GB/s" for s in STRATEGIES)
      print(f"  {n} devices, {nbytes >> 10:6d} KiB: {row}")

if __name__ == "__main__": main()
