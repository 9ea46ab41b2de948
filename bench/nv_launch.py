"""The Python work of NV launches, measured without a GPU: the NV driver runs against a stand-in for libcuda that counts
the driver API calls (backends/tinygrad-nv/tests/fake_libcuda.py, compiled with the C compiler). Prints the calls and
microseconds per cached `(s + 1).realize()`, per call of bench/gpu.py's memory-bound work (softmax, a reduction, an
add) and how much of it comes before the call's first launch, per direct program launch, and per replay of a jitted
step, with the driver's CUDA graph and without it."""
from __future__ import annotations
import argparse, importlib.util, os, pathlib, sys, time
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # run from a checkout without installing the core
import numpy as np

def load_fake():
  spec = importlib.util.spec_from_file_location("fake_libcuda", ROOT / "backends/tinygrad-nv/tests/fake_libcuda.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

def per_call(lib, fn, n: int, batches: int = 5) -> tuple[float, float, dict[str, float]]:
  """(driver API calls per call of fn, microseconds per call, calls per call by name) over n calls after a warm-up; the
  time is the best of `batches` batches (the machine's other load only ever adds time)."""
  for _ in range(max(n // 10, 5)): fn()
  lib.fake_reset(0)
  best = float("inf")
  for _ in range(batches):
    st = time.perf_counter()
    for _ in range(n // batches): fn()
    best = min(best, (time.perf_counter() - st) / (n // batches))
  names = ("cuLaunchKernel", "cuGraphLaunch", "cuGraphExecKernelNodeSetParams_v2", "cuCtxSetCurrent", "cuEventRecord",
           "cuMemcpyHtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync_v2", "cuCtxSynchronize", "cuStreamSynchronize")
  calls = batches * (n // batches)
  return lib.fake_total() / calls, best * 1e6, {k: c / calls for k in names if (c := lib.fake_count(k.encode()))}

def before_launch(drv, fn, n: int) -> float:
  """Microseconds from a call's start to its first cuLaunchKernel, the best of n calls: the host time a GPU waits through
  before the call's first kernel can start (what a call's work after that launch costs runs beside the kernels)."""
  real, stamps = drv.lib, []
  class Stamped:   # the driver's library with cuLaunchKernel's entry time noted
    def __getattr__(self, name): return getattr(real, name)
    def cuLaunchKernel(self, *args):
      stamps.append(time.perf_counter())
      return real.cuLaunchKernel(*args)
  for _ in range(max(n // 10, 5)): fn()
  drv.lib, best = Stamped(), float("inf")
  try:
    for _ in range(n):
      stamps.clear()
      st = time.perf_counter()
      fn()
      best = min(best, stamps[0] - st)
  finally: drv.lib = real
  return best * 1e6

def show(what: str, calls: float, us: float, by: dict[str, float]) -> None:
  print(f"{what:48s} {calls:6.1f} calls {us:8.1f} us   " + ", ".join(f"{k} {v:g}" for k, v in by.items()))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("-n", type=int, default=2000, help="calls measured per figure")
  args = ap.parse_args()
  os.environ.pop("NV_EMULATE", None)
  fake = load_fake()
  lib = fake.load()
  fake.install(lib)
  from tinycore import Tensor, TinyJit, Device
  from tinycore.engine import _runners
  from tinycore.schedule import buffers
  from tinycore.tensor import _storage
  s = Tensor(np.arange(16, dtype=np.float32), device="NV").realize()
  from tools.gpu_proof import python_reference   # the loop the GPU proof times too: the machines' Python speeds side by side
  st = time.perf_counter()
  for _ in range(200): python_reference()
  print(f"NV against the libcuda stand-in ({Device['NV'].driver.__class__.__module__}); {args.n} calls per figure; "
        f"this machine's Python: {(time.perf_counter() - st) / 200 * 1e6:.1f} us for the proof's reference loop")
  show("cached (s + 1).realize()", *per_call(lib, lambda: (s + 1).realize(), args.n))
  runner = next(reversed(_runners.values()))   # the kernel of s + 1
  # bench/gpu.py's memory-bound work, called from Python each time. bench/gpu.py waits for the GPU after each call, so
  # the host time before a call's first launch adds to its kernels' time in the per-call ratio to PyTorch (the jitted
  # column has none), while what comes after that launch runs beside the kernels: both are printed
  m = Tensor(np.ones((1024, 1024), np.float32), device="NV").realize()
  v = Tensor(np.ones(1 << 20, np.float32), device="NV").realize()
  drv = Device["NV"].driver
  for what, fn in [("softmax 1024x1024", lambda: m.softmax(-1).realize()), ("exp(x*2+1).sum() over 2^20", lambda: (v * 2 + 1).exp().sum().realize()),
                   ("a + b over 2^20", lambda: (v + v).realize())]:
    show(f"{what}, built and realized", *per_call(lib, fn, args.n // 4))
    print(f"{'  of which before its first launch':48s} {before_launch(drv, fn, args.n // 4):17.1f} us")
  bufs = [buffers[_storage(t.uop)] for t in (Tensor.empty(16, device="NV").realize(), s)]
  show("its kernel launched directly (CompiledRunner)", *per_call(lib, lambda: runner(bufs, {}), args.n))
  x = Tensor(np.ones((64, 64), np.float32), device="NV").realize()
  w = Tensor(np.ones((64, 64), np.float32), device="NV").realize()
  @TinyJit
  def step(x): return ((x @ w).relu().contiguous() * 2 + x).sum(axis=1).contiguous().exp()
  for _ in range(3): step(x)
  nk = len(step.captured)
  drv = Device["NV"].driver
  show(f"jitted step ({nk} kernels), replayed", *per_call(lib, lambda: step(x), args.n // 4))
  if callable(getattr(drv, "graph", None)):
    step.reset()
    drv.graph = None   # the replay without the driver's graph: kernel by kernel, as a backend without graphs does
    for _ in range(3): step(x)
    show(f"jitted step ({nk} kernels), replayed without graphs", *per_call(lib, lambda: step(x), args.n // 4))

if __name__ == "__main__": main()
