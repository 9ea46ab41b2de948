"""Benchmark of deep lazy graphs: an unrolled recurrence of 1k, 10k and 100k ALU ops, realized at once. Prints the time to
build, schedule, compile and run it, per op, and numpy's eager time for the same chain. The scheduler cuts the chain into
kernels of at most KERNEL_DEPTH_MAX ops, so schedule+compile time per op should stay flat as the chain grows."""
from __future__ import annotations
import argparse, os, pathlib, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing the core
os.environ.setdefault("CACHELEVEL", "0")  # compile for real: binaries cached on disk by an earlier run would hide its cost
import numpy as np

def scales(n_ops: int) -> list[float]:
  """One multiplier per step, all different (every kernel of the cut chain is a new program, none shared), in [0.75, 1)
  so the chain stays finite however long."""
  return [0.75 + 0.25 * (i * 0.6180339887 % 1.0) for i in range(n_ops // 2)]

def run_tinycore(device: str, n_ops: int, x: np.ndarray) -> tuple[dict[str, float], int, np.ndarray]:
  from tinycore import Tensor
  from tinycore.schedule import create_schedule
  from tinycore.engine import get_program, get_runner, run_schedule
  y = Tensor(x, device=device).realize()
  t0 = time.perf_counter()
  for c in scales(n_ops): y = y * c + 0.5   # an explicit integrator, unrolled: 2 ALU ops per step
  t1 = time.perf_counter()
  items, becomes = create_schedule([y.uop])
  t2 = time.perf_counter()
  for si in items: get_program(si.bufs[0].device, si.ast)  # the shared codegen and the backend's renderer
  t3 = time.perf_counter()
  for si in items: get_runner(si.bufs[0].device, si.ast)   # the backend's assembler and loader
  t4 = time.perf_counter()
  run_schedule(items)
  out = Tensor(becomes[y.uop]).numpy()
  t5 = time.perf_counter()
  return {"build": t1 - t0, "schedule": t2 - t1, "codegen": t3 - t2, "assemble": t4 - t3, "run": t5 - t4}, len(items), out

def run_numpy(n_ops: int, x: np.ndarray) -> tuple[float, np.ndarray]:
  st = time.perf_counter()
  y = x
  for c in scales(n_ops): y = y * np.float32(c) + np.float32(0.5)
  return time.perf_counter() - st, y

def main():
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--device", default="CPU")
  ap.add_argument("--ops", type=int, nargs="+", default=[1_000, 10_000, 100_000], help="chain lengths, in ALU ops")
  ap.add_argument("--size", type=int, default=1024, help="elements in the tensor")
  args = ap.parse_args()
  from tinycore.schedule import KERNEL_DEPTH_MAX
  x = np.random.default_rng(0).random(args.size, dtype=np.float32)
  print(f"deep chain y = y * c_i + 0.5 on {args.device}, {args.size} elements; kernels cut every {KERNEL_DEPTH_MAX} ops")
  print(f"{'ops':>8} {'kernels':>7} {'build s':>8} {'sched s':>8} {'codegen s':>9} {'asm+load s':>10} {'run s':>7} | per op: {'build':>8} "
        f"{'sched':>8} {'compile':>8} {'run':>8} | {'numpy s':>8} {'max err':>8}")
  for n in args.ops:
    t, nk, out = run_tinycore(args.device, n, x)
    tn, ref = run_numpy(n, x)
    err = float(np.max(np.abs(out - ref) / np.maximum(np.abs(ref), 1)))
    us = lambda s: f"{s / n * 1e6:6.1f}us"
    print(f"{n:8d} {nk:7d} {t['build']:8.3f} {t['schedule']:8.3f} {t['codegen']:9.3f} {t['assemble']:10.3f} {t['run']:7.3f} | per op: "
          f"{us(t['build']):>8} {us(t['schedule']):>8} {us(t['codegen'] + t['assemble']):>8} {us(t['run']):>8} | {tn:8.3f} {err:8.1e}", flush=True)

if __name__ == "__main__": main()
