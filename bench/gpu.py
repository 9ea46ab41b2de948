"""GPU benchmark. With an NVIDIA GPU (NV without NV_EMULATE, and PyTorch seeing CUDA) it times tinycore's NV backend side by
side with PyTorch on that GPU and prints the ratios, tinycore both called from Python each time and jitted (its kernels
replayed by TinyJit: the kernels' time without the host's per-call work). Without one it runs the same kinds of work on the PTX and RDNA3
emulators (NV_EMULATE=1, AMD_EMULATE=1) and prints what the kernels did: global and shared-memory bytes, barriers,
instructions, threads and blocks, counted by the emulators per launch. `python bench/gpu.py` picks the mode by itself.
`--mode sass` needs no GPU either: it assembles the GPU workloads' NV kernels at their GPU sizes with ptxas and prints
what the chip would run: registers, spills, and (with cuobjdump and nvdisasm: `pip install nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm`) the machine instructions of each kernel's innermost loop."""
from __future__ import annotations
import argparse, collections, os, pathlib, re, shutil, subprocess, sys, tempfile, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing the core
import numpy as np

def has_nvidia_gpu() -> bool:
  if os.environ.get("NV_EMULATE", "") not in ("", "0"): return False
  try: import torch
  except ImportError: return False
  return bool(torch.cuda.is_available())

# ***** counters on the emulators *****

COUNTERS = ("global_read", "global_written", "global_sectors", "shared_read", "shared_written", "shared_wavefronts", "shared_conflicts", "barriers", "instructions", "thread_instructions", "threads", "blocks")

def counted(device: str, fn) -> tuple[int, dict[str, int]]:
  """(kernels launched, summed counters) of the launches fn makes on device's emulator, `warp_chain`: the most
  instructions one warp (wave) of a launch ran on average, over the launches, and `chain_sum`: those averages added over
  the launches. A kernel of few blocks whose warps each run long is bound by that chain's latency, not by its bytes (a
  sum over 43264 terms per output on 16 blocks); a workload of many such kernels, run one after another, by their sum."""
  mod = __import__("tinygrad_nv.emulator" if device == "NV" else "tinygrad_amd.emulator", fromlist=["LAUNCHES"])
  mod.LAUNCHES.clear()
  fn()
  total = dict.fromkeys(COUNTERS, 0) | {"warp_chain": 0, "chain_sum": 0}
  for _, c in mod.LAUNCHES:
    for k in COUNTERS: total[k] += getattr(c, k)
    warps = c.blocks * -(-c.threads // max(c.blocks, 1) // 32) if c.blocks else 0
    total["warp_chain"] = max(total["warp_chain"], chain := c.instructions // max(warps, 1))
    total["chain_sum"] += chain
  return len(mod.LAUNCHES), total

def emulator_workloads(a):
  """name -> (make inputs (realized), run, the least global traffic the work needs in bytes, None where not worked out):
  sizes from the options."""
  from tinycore import Tensor
  n, b, c, hw, k, (sr, sc), (vr, vc), s = a.matmul, a.conv_batch, a.conv_channels, a.conv_size, a.conv_out, a.rows, a.vocab_rows, a.sum
  def conv_inputs(dev):
    return (Tensor.randn(b, c, hw, hw, device=dev).realize(), Tensor.randn(k, c, 3, 3, device=dev).realize())
  def conv_backward_inputs(dev): return (*conv_inputs(dev), Tensor.randn(b, k, hw, hw, device=dev).realize())
  def conv_backward(x, w, g):   # the gradient a training step brings from above (a sum's ones would be a constant)
    x, w = x.requires_grad_(), w.requires_grad_()
    return (x.conv2d(w, padding=1) * g).sum().gradient(x, w)
  def digits(d):   # the README's model and a batch on the device, after one step (the optimizer's state made)
    from tinycore import Device, dtypes
    from tinycore.nn import optim
    from tinycore.nn.state import get_parameters
    from tinycore.examples.train_digits import ConvNet
    default, Device.DEFAULT = Device.DEFAULT, d
    try:
      model = ConvNet()
      ins = (model, optim.Adam(get_parameters(model), lr=1e-3), Tensor.randn(a.digits_batch, 1, 28, 28).realize(),
             Tensor.randint(a.digits_batch, high=10).cast(dtypes.int32).realize())
      Tensor.realize_all(*digits_step(*ins))
    finally: Device.DEFAULT = default
    return ins
  def digits_step(model, opt, x, y):
    Tensor.training = True
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    return [loss, *opt.schedule_step()]
  return {
    f"matmul {n}x{n} fp32": (lambda d: (Tensor.randn(n, n, device=d).realize(), Tensor.randn(n, n, device=d).realize()),
                             lambda x, y: [x @ y], 3 * n * n * 4),
    **{f"matmul {n}x{n} {t} (tensor cores)": (lambda d, dt=dt: (Tensor.randn(n, n, device=d).cast(dt).realize(), Tensor.randn(n, n, device=d).cast(dt).realize()),
                                             lambda x, y: [x @ y], 3 * n * n * 2) for t, dt in (("fp16", "float16"), ("bf16", "bfloat16"))},
    f"conv {b}x{c}x{hw}x{hw} * {k}x{c}x3x3 forward": (conv_inputs, lambda x, w: [x.conv2d(w, padding=1)], (b * c + b * k) * hw * hw * 4 + k * c * 36),
    "conv backward (dx, dw)": (conv_backward_inputs, conv_backward, (2 * b * c + b * k) * hw * hw * 4 + 2 * k * c * 36),
    f"softmax {sr}x{sc}": (lambda d: (Tensor.randn(sr, sc, device=d).realize(),), lambda x: [x.softmax(-1)], 2 * sr * sc * 4),
    f"layernorm {sr}x{sc}": (lambda d: (Tensor.randn(sr, sc, device=d).realize(),), lambda x: [x.layernorm()], 2 * sr * sc * 4),
    f"softmax {vr}x{vc} (GPT-2's vocabulary)": (lambda d: (Tensor.randn(vr, vc, device=d).realize(),), lambda x: [x.softmax(-1)], 2 * vr * vc * 4),
    f"sum 2^{s.bit_length() - 1}": (lambda d: (Tensor.randn(s, device=d).realize(),), lambda x: [x.sum()], s * 4 + 4),
    f"a + b 2^{s.bit_length() - 1}": (lambda d: (Tensor.randn(s, device=d).realize(), Tensor.randn(s, device=d).realize()), lambda x, y: [x + y], 3 * s * 4),
    f"digits convnet training step (batch {a.digits_batch})": (digits, digits_step, None),
  }

def show_bytes(x: int) -> str:
  for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
    if x >= f: return f"{x / f:7.2f} {unit}"
  return f"{x:7d} B "

def sectors(c: dict[str, int]) -> str:
  """The bytes the memory system moved for the global accesses (32-byte sectors) over those the threads asked for: 1.0
  where every warp's accesses were coalesced, below where lanes read the same word ('-' where the emulator does not
  model sectors)."""
  return f"{c['global_sectors'] * 32 / max(c['global_read'] + c['global_written'], 1):.2f}" if c["global_sectors"] else "-"

def banks(c: dict[str, int]) -> str:
  """Shared-memory wavefronts and the conflicts among them ('-' where the emulator does not model its banks)."""
  if not c["shared_wavefronts"]: return "-" if c["shared_read"] + c["shared_written"] else "0"
  return f"{c['shared_wavefronts']} ({c['shared_conflicts']})"

def run_counters(a) -> None:
  os.environ.setdefault("NV_EMULATE", "1")
  os.environ.setdefault("AMD_EMULATE", "1")
  from tinycore import Tensor, Device
  print(f"emulated devices: {', '.join(a.devices)} (per workload: kernels launched and the sums of their counters; 'x least' is the "
        "global traffic, read and written, over the least the work needs: inputs read once and outputs written once; 'sectors' the bytes "
        "the memory system moved for it in 32-byte sectors over those asked for, 1.00 where the warps' accesses were coalesced, "
        "below where lanes shared words; 'warp chain' the most instructions one warp ran, in the workload's longest-running kernel; "
        "'chain sum' those of every kernel added, what kernels bound by their chains take one after another)")
  for dev in a.devices:
    Device[dev]
    print(f"\n== {dev} emulator ==")
    print(f"{'workload':42s} {'kernels':>7s} {'global read':>11s} {'written':>10s} {'x least':>8s} {'sectors':>7s} {'shared r/w':>21s} {'wavefronts (conflicts)':>22s} {'barriers':>9s} "
          f"{'instr (warp)':>12s} {'instr/thread':>12s} {'warp chain':>10s} {'chain sum':>9s} {'threads':>9s} {'thr/block':>9s} {'seconds':>7s}")
    for name, (make, run, least) in ((n, w) for n, w in emulator_workloads(a).items() if a.only in n):
      Tensor.manual_seed(0)
      ins = make(dev)
      st = time.perf_counter()
      nk, c = counted(dev, lambda: Tensor.realize_all(*run(*ins)))
      secs = time.perf_counter() - st
      ratio = f"{(c['global_read'] + c['global_written']) / least:7.1f}x" if least else f"{'-':>8s}"   # (a training step: no least)
      print(f"{name:42s} {nk:7d} {show_bytes(c['global_read']):>11s} {show_bytes(c['global_written']):>10s} {ratio} {sectors(c):>7s} "
            f"{show_bytes(c['shared_read']):>10s}/{show_bytes(c['shared_written']):>10s} {banks(c):>22s} {c['barriers']:9d} {c['instructions']:12d} "
            f"{c['thread_instructions'] / max(c['threads'], 1):12.1f} {c['warp_chain']:10d} {c['chain_sum']:9d} {c['threads']:9d} {c['threads'] / max(c['blocks'], 1):9.1f} {secs:7.1f}", flush=True)

# ***** side by side with PyTorch on an NVIDIA GPU *****

def machine() -> str:
  import torch
  drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip() \
        if any(os.access(os.path.join(p, "nvidia-smi"), os.X_OK) for p in os.environ.get("PATH", "").split(os.pathsep)) else "unknown"
  return f"{torch.cuda.get_device_name(0)}, driver {drv}, PyTorch {torch.__version__} (CUDA {torch.version.cuda})"

def best_time(fn, sync, reps: int, warmup: int = 2) -> float:
  for _ in range(warmup): fn(); sync()
  ts = []
  for _ in range(reps):
    st = time.perf_counter()
    fn(); sync()
    ts.append(time.perf_counter() - st)
  return min(ts)

def gpu_workloads(a):
  """name -> (unit, amount per run, make(framework) -> zero-argument function doing the work once): each framework is
  a dict of the few operations needed."""
  N = 1 << a.log_elements
  def matmul(n, dt):
    def make(fw):
      x, y = fw["randn"]((n, n), dt), fw["randn"]((n, n), dt)
      return fw["call"](lambda x, y: fw["run"](x @ y), x, y)
    return ("TFLOP/s", 2 * n ** 3 / 1e12, make)
  def conv(backward: bool, shape=None):
    b, c, hw, k = shape or a.gpu_conv
    def make(fw):
      x, w = fw["randn"]((b, c, hw, hw), "float32"), fw["randn"]((k, c, 3, 3), "float32")
      if not backward: return fw["call"](lambda x, w: fw["run"](fw["conv"](x, w)), x, w)
      g = fw["randn"]((b, k, hw, hw), "float32")   # the output's gradient, from the layers above
      return fw["call"](lambda x, w, g: fw["run"](*fw["conv_grads"](x, w, g)), x, w, g)
    return ("TFLOP/s", (3 if backward else 1) * 2 * b * k * c * 9 * hw * hw / 1e12, make)
  def elementwise(f, nbytes, shape=(N,)):
    def make(fw):
      xs = [fw["randn"](shape, "float32") for _ in range(2)]
      return fw["call"](lambda *xs: fw["run"](f(fw, *xs)), *xs)
    return ("GB/s", nbytes / 1e9, make)
  r, (big, small) = a.gpu_rows, a.gpu_matmul
  return {
    f"fp32 matmul {big}^2": matmul(big, "float32"), f"fp32 matmul {small}^2": matmul(small, "float32"),
    f"fp16 matmul {big}^2": matmul(big, "float16"), f"bf16 matmul {big}^2": matmul(big, "bfloat16"),
    f"exp(x*2+1).sum() 2^{a.log_elements}": elementwise(lambda fw, x, y: fw["exp"](x * 2 + 1).sum(), N * 4),
    f"softmax {r}x{r}": elementwise(lambda fw, x, y: fw["softmax"](x), 2 * r * r * 4, (r, r)),
    f"a + b 2^{a.log_elements}": elementwise(lambda fw, x, y: x + y, 3 * N * 4),
    f"layernorm {r}x{r}": elementwise(lambda fw, x, y: fw["layernorm"](x), 2 * r * r * 4, (r, r)),
    f"softmax {a.gpu_vocab_rows}x50257 (GPT-2's vocabulary)": elementwise(lambda fw, x, y: fw["softmax"](x), 2 * a.gpu_vocab_rows * 50257 * 4, (a.gpu_vocab_rows, 50257)),
    "conv forward " + "x".join(map(str, a.gpu_conv)): conv(False), "conv backward (dx, dw)": conv(True),
    f"digits convnet training step (batch {a.train_batch})": ("steps/s", 1.0, lambda fw: fw["train_step"](a.train_batch)),
    # a deep layer's small map (7x7: no output axis of 16 for the tile heuristic but the pixels merged); last, so a
    # proof whose time runs out first loses these rows, not the older ones
    "conv forward " + "x".join(map(str, a.gpu_deep_conv)): conv(False, a.gpu_deep_conv),
    "conv backward " + "x".join(map(str, a.gpu_deep_conv)): conv(True, a.gpu_deep_conv),
    # the same layer for one image (inference at batch 1): its 64x64 tiles alone would be 8 blocks, so its sum is cut
    # into partials first on a GPU (codegen/opt/gpu.py tile_parts)
    "conv forward " + "x".join(map(str, one := [1, *a.gpu_deep_conv[1:]])) + " (one image)": conv(False, one),
  }

def torch_fw(dev: str = "cuda"):
  import torch
  torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False   # fp32 is fp32 (PyTorch's default for matmul)
  def conv_grads(x, w, g):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    return torch.autograd.grad(torch.nn.functional.conv2d(x, w, padding=1), (x, w), grad_outputs=g)
  def train_step(batch):
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 13 * 13, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, 1, 28, 28, device=dev), torch.randint(0, 10, (batch,), device=dev)
    def step():
      opt.zero_grad()
      loss = torch.nn.functional.cross_entropy(model(x), y)
      loss.backward()
      opt.step()
    return step
  return {"name": "PyTorch", "randn": lambda shape, dt: torch.randn(*shape, device=dev).to(getattr(torch, dt)),
          "run": lambda *xs: xs, "call": lambda fn, *xs: (lambda: fn(*xs)), "sync": torch.cuda.synchronize if dev == "cuda" else (lambda: None), "exp": torch.exp, "softmax": lambda x: x.softmax(-1),
          "layernorm": lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]), "conv": lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
          "conv_grads": conv_grads, "train_step": train_step}

def tinycore_fw(jit: bool = False):
  """tinycore on NV; `jit`: each workload's call through TinyJit, replayed (one CUDA graph) after two calls, as a
  training loop runs: the kernels' time without building, scheduling and launching from Python each call."""
  from tinycore import Tensor, Device, dtypes
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters
  from tinycore.jit import TinyJit
  from tinycore.examples.train_digits import ConvNet
  Device.DEFAULT = "NV"
  def conv_grads(x, w, g):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    return (x.conv2d(w, padding=1) * g).sum().gradient(x, w)
  def train_step(batch):
    Tensor.training = True
    model = ConvNet()
    opt = optim.Adam(get_parameters(model), lr=1e-3)
    x, y = Tensor.randn(batch, 1, 28, 28).realize(), Tensor.randint(batch, high=10).cast(dtypes.int32).realize()
    @TinyJit
    def step(x, y):
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      return loss.realize()
    return lambda: step(x, y)
  def call(fn, *xs):
    if not jit: return lambda: fn(*xs)
    replay = TinyJit(fn)   # the kernels realize_all launched, launched again by each replay
    return lambda: replay(*xs)
  return {"name": "tinycore, jitted" if jit else "tinycore", "randn": lambda shape, dt: Tensor.randn(*shape).cast(getattr(dtypes, dt)).realize(),
          "run": lambda *xs: Tensor.realize_all(*xs), "call": call, "sync": Device["NV"].synchronize, "exp": Tensor.exp,
          "softmax": lambda x: x.softmax(-1), "layernorm": lambda x: x.layernorm(), "conv": lambda x, w: x.conv2d(w, padding=1),
          "conv_grads": conv_grads, "train_step": train_step}

def run_gpu(a) -> None:
  os.environ.pop("NV_EMULATE", None)
  print(f"machine: {machine()}")
  # tinycore as called from Python each time (building, scheduling and launching the work: what a script's one call
  # costs), and jitted (the captured kernels replayed: the kernels' own time, what a training loop's steps cost)
  fws = [tinycore_fw(), tinycore_fw(jit=True), torch_fw()]
  print(f"{'workload':46s} {'unit':>8s} {'tinycore':>10s} {'jitted':>10s} {'PyTorch':>10s} {'ratio':>7s} {'jitted':>7s}")
  for name, (unit, amount, make) in gpu_workloads(a).items():
    if a.only and a.only not in name: continue
    rates = []
    for fw in fws:
      try:
        fn = make(fw)
        rates.append(amount / best_time(fn, fw["sync"], a.reps))
      except Exception as e:   # a workload one framework cannot run is reported, not fatal
        print(f"  {fw['name']} failed on {name}: {type(e).__name__}: {str(e)[:200]}")
        rates.append(float("nan"))
    print(f"{name:46s} {unit:>8s} {rates[0]:10.3f} {rates[1]:10.3f} {rates[2]:10.3f} {rates[0] / rates[2]:6.3f}x {rates[1] / rates[2]:6.3f}x", flush=True)

# ***** the machine code ptxas makes, without a GPU *****

def find_cuobjdump() -> str | None:
  """CUOBJDUMP, else cuobjdump on PATH, else the one of NVIDIA's nvidia-cuda-cuobjdump wheel."""
  if (env := os.environ.get("CUOBJDUMP")) or (env := shutil.which("cuobjdump")): return env
  try: import nvidia   # type: ignore[import-not-found]
  except ImportError: return None
  return next((str(p) for root in nvidia.__path__ for p in pathlib.Path(root).glob("*/bin/cuobjdump")), None)

SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)([^;]*);")

def innermost_loop(sass: str) -> collections.Counter:
  """The opcodes of the longest loop holding no other loop (a backward branch's range), counted: what a thread runs
  most of the time in a kernel whose time is its loops."""
  ins = [(int(m.group(1), 16), m.group(2), t.group(1) if m.group(2) == "BRA" and (t := re.search(r"0x([0-9a-f]+)", m.group(3))) else None)
         for m in SASS_LINE.finditer(sass)]
  loops = [(int(t, 16), at) for at, op, t in ins if op == "BRA" and t is not None and int(t, 16) < at]
  inner = [(lo, hi) for lo, hi in loops if not any((a, b) != (lo, hi) and lo <= a and b <= hi for a, b in loops)]
  if not inner: return collections.Counter()
  lo, hi = max(inner, key=lambda r: r[1] - r[0])
  return collections.Counter(op for at, op, _ in ins if lo <= at <= hi)

def run_sass(a) -> None:
  os.environ.setdefault("NV_EMULATE", "1")   # NV opens without a GPU (nothing runs: the kernels are only assembled)
  from tinycore import Tensor, dtypes
  from tinycore.uop import Ops
  from tinycore.codegen import get_program
  from tinygrad_nv.renderer import PTXRenderer
  from tinygrad_nv.assembler import find_ptxas, run_ptxas
  if (ptxas := find_ptxas()) is None: sys.exit("sass mode needs ptxas: pip install -e backends/tinygrad-nv[ptxas], or NV_PTXAS=/path/to/ptxas")
  cuobjdump = find_cuobjdump()
  print(f"NV kernels at the GPU sizes for {a.arch}, assembled by {ptxas}" + (f", disassembled by {cuobjdump}" if cuobjdump else
        " (no cuobjdump: registers only; pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm for the loops)"))
  # cuobjdump runs nvdisasm, found on PATH: the wheels put both in one folder
  env = {**os.environ, "PATH": os.pathsep.join([str(pathlib.Path(cuobjdump).parent), os.environ.get("PATH", "")])} if cuobjdump else None
  # the workloads as tinycore builds them, on inputs never filled and outputs never run: their kernels, scheduled only
  lazy = {**tinycore_fw(), "randn": lambda shape, dt: Tensor.empty(*shape, dtype=getattr(dtypes, dt), device="NV"), "run": lambda *xs: xs,
          "call": lambda fn, *xs: (lambda: fn(*xs))}
  print(f"{'workload':36s} {'kernel':24s} {'registers':>9s} {'spilled':>7s}   innermost loop: instructions, the most frequent")
  for name, (unit, amount, make) in gpu_workloads(a).items():
    if (a.only and a.only not in name) or unit == "steps/s": continue   # (a training step realizes as it builds)
    outs = make(lazy)()
    for si in (si for si in outs[0].schedule(*outs[1:]) if si.ast.op is Ops.SINK):
      spec = get_program(si.ast, PTXRenderer(a.arch))
      cubin, log = run_ptxas(spec.src, a.arch, ptxas, "-v")
      regs = re.search(r"Used (\d+) registers", log)
      spill = sum(int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
      loop = ""
      if cuobjdump:
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
          f.write(cubin); f.flush()
          r = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, env=env)
          if r.returncode != 0: sys.exit(f"{cuobjdump} failed: {r.stderr.strip()}")
          ops = innermost_loop(r.stdout)
        loop = f"{sum(ops.values()):5d}: " + ", ".join(f"{op} {n}" for op, n in ops.most_common(6)) if ops else "none"
      print(f"{name[:36]:36s} {spec.name[:24]:24s} {regs.group(1) if regs else '?':>9s} {spill:7d}   {loop}", flush=True)

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--mode", choices=("auto", "gpu", "counters", "sass"), default="auto", help="auto: gpu when an NVIDIA GPU and PyTorch with CUDA are present")
  p.add_argument("--arch", default="sm_90", help="sass mode: the NVIDIA architecture ptxas assembles for")
  p.add_argument("--devices", nargs="+", default=["NV", "AMD"], help="counters mode: the emulated backends")
  p.add_argument("--matmul", type=int, default=512, help="counters mode: the square matmul's size")
  p.add_argument("--conv", dest="conv", type=int, nargs=4, default=[4, 16, 32, 32], metavar=("BATCH", "CIN", "SIZE", "COUT"))
  p.add_argument("--rows", type=int, nargs=2, default=[256, 1024], help="counters mode: softmax and layernorm shape")
  p.add_argument("--vocab-rows", type=int, nargs=2, default=[16, 50257], help="counters mode: the shape of a softmax over a vocabulary")
  p.add_argument("--sum", type=int, default=1 << 20, help="counters mode: elements summed")
  p.add_argument("--digits-batch", type=int, default=64, help="counters mode: the digits training step's batch")
  p.add_argument("--gpu-matmul", type=int, nargs=2, default=[4096, 2048], metavar=("BIG", "SMALL"), help="gpu mode: matmul sizes")
  p.add_argument("--log-elements", type=int, default=26, help="gpu mode: log2 of the elementwise and reduction sizes")
  p.add_argument("--gpu-rows", type=int, default=4096, help="gpu mode: softmax and layernorm are this square")
  p.add_argument("--gpu-vocab-rows", type=int, default=1024, help="gpu mode: rows of the softmax over GPT-2's vocabulary")
  p.add_argument("--gpu-conv", type=int, nargs=4, default=[32, 64, 56, 64], metavar=("BATCH", "CIN", "SIZE", "COUT"))
  p.add_argument("--gpu-deep-conv", type=int, nargs=4, default=[32, 512, 7, 512], metavar=("BATCH", "CIN", "SIZE", "COUT"),
                 help="gpu and sass modes: a convolution over a small map, as a deep layer's")
  p.add_argument("--train-batch", type=int, default=256)
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--only", default="", help="only workloads whose name contains this")
  a = p.parse_args()
  a.conv_batch, a.conv_channels, a.conv_size, a.conv_out = a.conv
  mode = a.mode if a.mode != "auto" else ("gpu" if has_nvidia_gpu() else "counters")
  {"gpu": run_gpu, "sass": run_sass, "counters": run_counters}[mode](a)

if __name__ == "__main__": main()
