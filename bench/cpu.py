"""Benchmark of the CPU backend side by side with numpy (and PyTorch, tinygrad when installed): matmul, a fused
elementwise+reduce chain, small-op dispatch, first-call compile time, the matmul speedup from threads, the matmul with
BEAM search, and the training steps of a convnet and an MLP."""
from __future__ import annotations
import argparse, os, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing the core
import numpy as np

def timeit(fn, reps: int, warmup: int = 1) -> list[float]:
  for _ in range(warmup): fn()
  out = []
  for _ in range(reps):
    st = time.perf_counter()
    fn()
    out.append(time.perf_counter() - st)
  return out

def measure(fn, reps: int) -> list[float]:
  """One framework at a time, after a pause: BLAS and OpenMP pools spin for a while after a call and would steal the
  cores from the next framework if runs were interleaved."""
  time.sleep(0.3)
  return timeit(fn, reps, warmup=2)

def best(ts: list[float]) -> float: return min(ts)
def med(ts: list[float]) -> float: return statistics.median(ts)

def cpu_model() -> str:
  """The CPU's model name (figures from different CPUs are never comparable)."""
  try:
    with open("/proc/cpuinfo") as f: return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown CPU")
  except OSError:
    import platform
    return platform.processor() or platform.machine()

def simd_features() -> list[str]:
  """The host's SIMD features as LLVM reads them (what the CPU backend's renderer is described by)."""
  import llvmlite.binding as llvm
  feats = llvm.get_host_cpu_features()
  return sorted(k for k, v in feats.items() if v and (k.startswith(("sse", "avx", "fma", "neon", "sve"))))

# ***** the frameworks, each a dict of the few operations the workloads need *****

def tinycore_fw():
  from tinycore import Tensor, Device
  assert Device.DEFAULT == "CPU", f"the default device is {Device.DEFAULT}, not CPU: is tinygrad-cpu installed (pip install -e backends/tinygrad-cpu)?"
  return {"name": "tinycore", "tensor": lambda a: Tensor(a).realize(), "matmul": lambda a, b: (a @ b).realize(),
          "chain": lambda x: ((x * 2 + 1).exp()).sum().realize(), "add1": lambda s: (s + 1).realize()}

def numpy_fw():
  return {"name": "numpy", "tensor": lambda a: a, "matmul": lambda a, b: a @ b, "chain": lambda x: np.exp(x * 2 + 1).sum(), "add1": lambda s: s + 1}

def torch_fw():
  try: import torch
  except ImportError: return None
  return {"name": "torch", "tensor": torch.from_numpy, "matmul": lambda a, b: a @ b, "chain": lambda x: ((x * 2 + 1).exp()).sum(), "add1": lambda s: s + 1}

def tinygrad_fw():
  try:
    from tinygrad import Tensor as TGTensor, Device as TGDevice
    TGTensor([1.0]).realize()
  except ImportError: return None
  except Exception as e:  # installed, but no device of it runs here (its CPU device needs clang or libLLVM)
    print(f"tinygrad is installed but cannot run here: {type(e).__name__}: {e}")
    return None
  def sync(t):
    t.realize()
    TGDevice[t.device].synchronize()
    return t
  return {"name": "tinygrad", "tensor": lambda a: TGTensor(a).realize(), "matmul": lambda a, b: sync(a @ b),
          "chain": lambda x: sync(((x * 2 + 1).exp()).sum()), "add1": lambda s: sync(s + 1)}

# ***** workloads *****

def bench_matmul(fws, n: int, reps: int) -> dict[str, float]:
  a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
  return {fw["name"]: 2 * n**3 / best(measure(lambda fw=fw, x=fw["tensor"](a), y=fw["tensor"](b): fw["matmul"](x, y), reps)) / 1e9 for fw in fws}

def bench_chain(fws, n: int, reps: int) -> dict[str, float]:
  x = np.random.rand(n).astype(np.float32)
  return {fw["name"]: med(measure(lambda fw=fw, t=fw["tensor"](x): fw["chain"](t), reps)) * 1e3 for fw in fws}

def bench_dispatch(fws, reps: int, batches: int = 5) -> dict[str, float]:
  """Median time of one call, per batch of `reps` calls; the lowest of `batches` batch medians (on a shared machine a
  batch that other processes disturbed shows as a higher median; the same rule for every framework)."""
  out = {}
  for fw in fws:
    s = fw["tensor"](np.arange(16, dtype=np.float32))
    time.sleep(0.3)  # let thread pools of the previous workload stop spinning
    out[fw["name"]] = min(med(timeit(lambda: fw["add1"](s), reps, warmup=10)) for _ in range(batches)) * 1e6
  return out

def bench_launch(reps: int) -> float:
  """The backend's share of a dispatch: one cached kernel launched through its runner (no scheduling)."""
  from tinycore import Tensor
  from tinycore.engine import get_runner
  from tinycore.schedule import create_schedule
  s = Tensor(np.arange(16, dtype=np.float32)).realize()
  items, _ = create_schedule([(s + 1).uop])
  si = items[-1]
  runner = get_runner(si.bufs[0].device, si.ast)
  return med(timeit(lambda: runner(si.bufs, {}), reps, warmup=10)) * 1e6

def dispatch_calls(n: int = 100) -> float:
  """Python function calls per cached dispatch, counted by cProfile: a figure that load on a shared machine cannot move."""
  import cProfile, pstats
  from tinycore import Tensor
  s = Tensor(np.arange(16, dtype=np.float32)).realize()
  for _ in range(10): (s + 1).realize()
  prof = cProfile.Profile()
  prof.enable()
  for _ in range(n): (s + 1).realize()
  prof.disable()
  return pstats.Stats(prof).total_calls / n

def bench_jit_dispatch(reps: int) -> float | None:
  try: from tinycore.jit import TinyJit
  except ImportError: return None
  from tinycore import Tensor
  step = TinyJit(lambda s: (s + 1).realize())
  s = Tensor(np.arange(16, dtype=np.float32)).realize()
  return med(timeit(lambda: step(s), reps, warmup=5)) * 1e6

def bench_compile(n: int) -> float:
  """First call of a new elementwise kernel (codegen + LLVM + load) minus its second call, disk cache off."""
  from tinycore import Tensor, Context
  x = Tensor(np.random.rand(4096).astype(np.float32)).realize()
  ts = []
  with Context(CACHELEVEL=0):
    (x * 0.5 + 1).realize()  # the first LLVM use initialises the target
    for i in range(n):
      c = 1.25 + i  # a new constant: a new kernel
      first = timeit(lambda: (x * c + 1).realize(), 1, 0)[0]
      again = timeit(lambda: (x * c + 1).realize(), 1, 0)[0]
      ts.append(first - again)
  return med(ts) * 1e3

def bench_threads(n: int, reps: int) -> tuple[float, float]:
  """The same matmul kernel run on 1 OS thread and on all of them: GFLOPS for each."""
  from tinycore import Tensor, Device
  drv = Device["CPU"].driver
  a, b = Tensor(np.random.rand(n, n).astype(np.float32)).realize(), Tensor(np.random.rand(n, n).astype(np.float32)).realize()
  (a @ b).realize()
  threads, out = drv.threads, []
  try:
    for t in (1, threads):
      drv.threads = t
      out.append(2 * n**3 / best(timeit(lambda: (a @ b).realize(), reps)) / 1e9)
  finally: drv.threads = threads
  return out[0], out[1]

def bench_beam(n: int, reps: int, beam: int) -> tuple[float, float] | None:
  """The matmul with BEAM=`beam` in a fresh process with an empty disk cache (the search runs, as on a first use; later
  uses read its choice from the cache): (GFLOPS of the searched kernel, seconds of the first call, search included)."""
  import json, subprocess, tempfile
  code = (f"import sys, json; sys.path.append({str(pathlib.Path(__file__).resolve().parent)!r}); import cpu; "
          f"print('BEAMRESULT', json.dumps(cpu._beam_child({n}, {reps})))")
  with tempfile.TemporaryDirectory() as cache:
    env = {**os.environ, "BEAM": str(beam), "TINYCORE_CACHE": cache}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
  line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BEAMRESULT")), None)
  if line is None:
    print(f"  BEAM={beam} run failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    return None
  return tuple(json.loads(line.split(" ", 1)[1]))

def _beam_child(n: int, reps: int) -> tuple[float, float]:
  from tinycore import Tensor
  a, b = Tensor(np.random.rand(n, n).astype(np.float32)).realize(), Tensor(np.random.rand(n, n).astype(np.float32)).realize()
  first = timeit(lambda: (a @ b).realize(), 1, 0)[0]
  return 2 * n**3 / best(measure(lambda: (a @ b).realize(), reps)) / 1e9, first

def bench_train(which: str, steps: int, warmup: int) -> dict[str, float]:
  """A training step (forward, backward, Adam) of bench/train.py's `which` network, batch 64: median ms per step for
  tinycore (eager) and, when installed, PyTorch and tinygrad."""
  import train
  cfg = argparse.Namespace(width=16, batch=64, vocab=64, dim=64, heads=4, layers=2, seq=32)
  data = train.batches(which, cfg, warmup + steps)
  makers = {"tinycore": lambda: train.tiny_step("tinycore", which, False, cfg), "torch": lambda: train.torch_step(which, cfg),
            "tinygrad": lambda: train.tiny_step("tinygrad", which, False, cfg)}
  out = {}
  for name, make in makers.items():
    try: out[name] = train.time_steps(make(), data, warmup)[0] * 1e3
    except ImportError: pass
    except Exception as e: print(f"  {name}: failed: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
  return out

def table(title: str, res: dict[str, float], unit: str, higher_better: bool) -> None:
  ref = res["numpy"]
  print(f"\n{title}")
  for k, v in res.items():
    ratio = v / ref if higher_better else ref / v
    print(f"  {k:10s} {v:10.2f} {unit:8s} {ratio:6.2f}x numpy")

def main():
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--n", type=int, default=1024, help="matmul size")
  ap.add_argument("--chain", type=int, default=16 * 1024 * 1024, help="elements in the fused chain")
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--beam", type=int, default=2, help="BEAM width for the searched matmul figure (0: skip it)")
  ap.add_argument("--train-steps", type=int, default=5, help="timed training steps of the convnet and the MLP (0: skip both)")
  ap.add_argument("--train-warmup", type=int, default=2)
  ap.add_argument("--quick", action="store_true", help="small sizes, few repetitions (a smoke run)")
  ap.add_argument("--describe", metavar="WIDTH,REGISTERS", help="describe another CPU to the codegen: float32 vector lanes and "
                  "vector registers (8,16: an AVX2 machine's kernels on this one; OPENBLAS_CORETYPE=Haswell gives numpy's AVX2 kernels)")
  args = ap.parse_args()
  if args.quick: args.n, args.chain, args.reps, args.train_steps = 256, 1 << 20, 3, 0
  fws = [f for f in (tinycore_fw(), numpy_fw(), torch_fw(), tinygrad_fw()) if f is not None]
  from tinycore import Device
  drv, ren = Device["CPU"].driver, Device["CPU"].renderer
  if args.describe: ren.vector_width, ren.vector_registers = map(int, args.describe.split(","))
  print(f"machine: {cpu_model()}, {os.cpu_count()} cores; SIMD features {' '.join(simd_features()) or 'none'}")
  print(f"CPU backend: renderer {type(ren).__name__}, {drv.threads} threads, vector width {ren.vector_width}, "
        f"{getattr(ren, 'vector_registers', '?')} vector registers, fused multiply-add {sorted(d.name for d in getattr(ren, 'mulacc_dtypes', ()))}, "
        f"target {Device['CPU'].assembler.target.split(':')[0:3]}; comparing with {[f['name'] for f in fws[1:]]}")
  mm = bench_matmul(fws, args.n, args.reps)
  table(f"float32 matmul {args.n}x{args.n} (best of {args.reps})", mm, "GFLOPS", True)
  ch = bench_chain(fws, args.chain, args.reps)
  table(f"((x*2+1).exp()).sum() over {args.chain} floats (median of {args.reps})", ch, "ms", False)
  dp = bench_dispatch(fws, 20 * args.reps)
  table(f"dispatch of a small cached op, (s+1).realize() on 16 floats (median of {20 * args.reps} calls, lowest of 5 batches)", dp, "us", False)
  print(f"  tinycore kernel launch alone (runner call, no scheduling): {bench_launch(20 * args.reps):.2f} us; "
        f"{dispatch_calls():.0f} Python function calls per dispatch")
  if (jit := bench_jit_dispatch(20 * args.reps)) is not None: print(f"  tinycore through TinyJit replay: {jit:.2f} us")
  print(f"\nfirst-call compile of an elementwise kernel (median of {max(5, args.reps)}): {bench_compile(max(5, args.reps)):.1f} ms")
  one, many = bench_threads(args.n, args.reps)
  print(f"\nmatmul {args.n}x{args.n} threads: 1 thread {one:.1f} GFLOPS, {drv.threads} threads {many:.1f} GFLOPS, speedup {many / one:.2f}x")
  if args.beam and (bm := bench_beam(args.n, args.reps, args.beam)) is not None:
    print(f"\nmatmul {args.n}x{args.n} with BEAM={args.beam}: {bm[0]:.1f} GFLOPS ({bm[0] / mm['numpy']:.2f}x numpy, "
          f"{bm[0] / mm['tinycore']:.2f}x the default heuristics); first call {bm[1]:.1f} s (the search, from an empty cache)")
  if args.train_steps > 0:
    for which, what in (("convnet2", "convnet training step (2 conv layers with batch-norm, batch 64, 28x28)"),
                        ("mlp", "2-layer MLP training step (784-128-10, batch 64)")):
      res = bench_train(which, args.train_steps, args.train_warmup)
      print(f"\n{what}; Adam; median of {args.train_steps} after {args.train_warmup} warmup")
      for k, v in res.items():
        r = v / res["tinycore"] if k != "tinycore" and "tinycore" in res else None
        print(f"  {k:10s} {v:10.2f} ms/step" + ("" if r is None else f"   tinycore is {r:.2f}x faster" if r >= 1 else f"   tinycore is {1 / r:.2f}x slower"))

if __name__ == "__main__": main()
