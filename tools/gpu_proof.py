"""`python3 tools/dev.py gpu`: the NV backend proven on an NVIDIA GPU in one command, offline, in under 6 minutes. Installs
the checkout into a venv without downloading anything, then runs each step with its own time limit, recording every
result and never stopping at a failure; writes one report (markdown + JSON) into $OUT, else a folder it prints. Without a
GPU it runs what needs none and says what is missing. `python tools/gpu_proof.py probe NAME` are the GPU-side probes."""
from __future__ import annotations
import json, os, re, shutil, signal, subprocess, sys, time, venv
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("TINYCORE_GPU_VENV", ROOT / ".venv-gpu"))
PACKAGES = [ROOT, ROOT / "backends/tinygrad-nv", ROOT / "conformance"]   # the core, the NV backend, the conformance suite
CUDA_PTXAS = Path("/usr/local/cuda/bin/ptxas")
DEADLINE_S = float(os.environ.get("TINYCORE_GPU_PROOF_SECONDS", 330))   # the whole proof, install included: under 6 minutes

@dataclass
class Step:
  """One command of the proof: its time limit `cap`, the time kept for it when earlier steps run long (`floor`), whether
  it needs the GPU, and `missing`: why it cannot run here (None: it can)."""
  name: str
  cmd: list
  cap: float
  floor: float = 10
  gpu: bool = True
  background: bool = False      # runs beside the others (CPU only: the NV package tests on the emulator)
  missing: str | None = None

@dataclass
class Result:
  name: str
  status: str                   # passed, failed, timeout, skipped
  seconds: float = 0.0
  why: str = ""
  figures: dict = field(default_factory=dict)
  tail: str = ""
  log: str = ""

# ***** installing without the network *****

def sh(cmd: list, timeout: float, **kw) -> subprocess.CompletedProcess:
  return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)

def venv_python() -> Path: return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

def install(timeout: float) -> tuple[str, str]:
  """(the python to run with, how it was installed). A venv that sees the system's packages (numpy, pytest, torch...),
  the three packages installed editable into it by pip with no index and no build isolation; where pip cannot, the
  same done by hand: a .pth naming the source folders and each package's metadata with its entry points."""
  if (given := os.environ.get("TINYCORE_GPU_PYTHON")): return given, f"TINYCORE_GPU_PYTHON={given} (nothing installed)"
  st = time.perf_counter()
  if not venv_python().exists(): venv.EnvBuilder(system_site_packages=True, with_pip=False).create(VENV)
  py = str(venv_python())
  if sys.prefix != sys.base_prefix:   # run from a venv (numpy, torch... there): a venv made from it sees only its base's packages
    site = sh([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 30).stdout.strip()
    (Path(site) / "tinycore-gpu-proof-parent.pth").write_text("".join(f"{p}\n" for p in __import__("site").getsitepackages()))
  cmd = [py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "--disable-pip-version-check",
         *[x for p in PACKAGES for x in ("-e", p)]]
  r = sh(cmd, max(timeout - (time.perf_counter() - st), 5))
  if r.returncode == 0: return py, f"pip install --no-deps --no-build-isolation --no-index -e (core, tinygrad-nv, conformance) into {VENV}"
  write_metadata(py)
  said = (r.stderr + r.stdout).splitlines()
  why = next((ln.strip() for ln in said if "error" in ln.lower()), said[-1].strip() if said else f"exit status {r.returncode}")
  return py, f"pip could not ({why}); installed by hand instead: a .pth and the packages' metadata in {VENV}"

def write_metadata(py: str) -> None:
  """What an editable install leaves, written directly: the source folders on the path and each package's dist-info
  (name, version, entry points), which is how tinycore finds its backends."""
  import tomllib
  site = sh([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 30).stdout.strip()
  (Path(site) / "tinycore-gpu-proof.pth").write_text("".join(f"{p}\n" for p in PACKAGES))
  for p in PACKAGES:
    proj = tomllib.loads((p / "pyproject.toml").read_text())["project"]
    info = Path(site) / f"{proj['name'].replace('-', '_')}-{proj['version']}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {proj['name']}\nVersion: {proj['version']}\n")
    groups = {**proj.get("entry-points", {}), **({"console_scripts": proj["scripts"]} if "scripts" in proj else {})}
    (info / "entry_points.txt").write_text("".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items()))

# ***** running the steps *****

def run(step: Step, py: str, env: dict, timeout: float, logs: Path) -> Result:
  """One step in its own process group (a timeout ends its children too), output to logs/<name>.log; its figures are the
  JSON of lines starting with RESULT."""
  log = logs / (re.sub(r"\W+", "-", step.name).strip("-") + ".log")
  st = time.perf_counter()
  with open(log, "w") as out:
    out.write("+ " + " ".join(str(c) for c in step.cmd) + "\n"); out.flush()
    proc = subprocess.Popen([str(c) for c in step.cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    status = finish(proc, timeout)
  return result(step, status, time.perf_counter() - st, log)

def finish(proc: subprocess.Popen, timeout: float) -> str:
  try: rc = proc.wait(timeout=max(timeout, 1))
  except subprocess.TimeoutExpired:
    try: os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError: pass
    proc.wait()
    return "timeout"
  return "passed" if rc == 0 else "failed"

def result(step: Step, status: str, seconds: float, log: Path) -> Result:
  text = log.read_text(errors="replace")
  figures = {}
  for ln in text.splitlines():
    if ln.startswith("RESULT "):
      try: figures.update(json.loads(ln[7:]))
      except json.JSONDecodeError: pass
  if (m := re.search(r"^total\s+(\d+)\s+(\d+)\s+(\d+)", text, re.M)): figures.update(passed=int(m[1]), failed=int(m[2]), skipped=int(m[3]))
  elif (m := re.search(r"=+ (.*(?:passed|failed|error).*) in [\d.]+s", text)):
    figures.update({k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", m[1])})
  elif (verbose := re.findall(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR)", text, re.M)):   # cut short: what pytest -vv got to
    figures.update({f"{k.lower()} so far": sum(1 for _, v in verbose if v == k) for k in ("PASSED", "FAILED", "SKIPPED", "ERROR")})
  if (failed := [t for t, v in re.findall(r"^(\S+::\S+) (FAILED|ERROR)", text, re.M)]): figures["failed tests"] = failed[:60]
  if (m := re.search(r"test accuracy ([\d.]+)% on (\w+) after ([\d.]+) s of training \((\d+) images/s\)", text)):
    figures.update(accuracy_percent=float(m[1]), dataset=m[2], train_seconds=float(m[3]), images_per_s=int(m[4]))
  why = "" if status == "passed" else f"exceeded its {seconds:.0f} s limit" if status == "timeout" else "exit status not 0"
  return Result(step.name, status, seconds, why, figures, "\n".join(text.splitlines()[-40:]), str(log))

def run_steps(steps: list[Step], py: str, env: dict, logs: Path, deadline: float) -> list[Result]:
  """Every step, none stopping the others: a step that cannot run here is skipped with the reason; each gets at most its
  cap and never the time kept (floors) for the steps after it; background steps run beside the rest until the deadline."""
  results: dict[str, Result] = {}
  behind = []
  for s in steps:
    if s.missing: results[s.name] = Result(s.name, "skipped", why=s.missing)
    elif s.background:
      log = logs / (re.sub(r"\W+", "-", s.name).strip("-") + ".log")
      out = open(log, "w")
      out.write("+ " + " ".join(str(c) for c in s.cmd) + "\n"); out.flush()
      behind.append((s, subprocess.Popen([str(c) for c in s.cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True),
                     time.perf_counter(), log, out))
  fore = [s for s in steps if not s.missing and not s.background]
  for i, s in enumerate(fore):
    left = deadline - time.perf_counter() - sum(t.floor for t in fore[i + 1:])
    if left < 1: results[s.name] = Result(s.name, "skipped", why="no time left in the proof's budget"); continue
    print(f"gpu proof: {s.name} (at most {min(s.cap, left):.0f} s)", flush=True)
    results[s.name] = run(s, py, env, min(s.cap, left), logs)
    print(f"gpu proof: {s.name}: {results[s.name].status} in {results[s.name].seconds:.1f} s", flush=True)
  for s, proc, st, log, out in behind:
    status = finish(proc, min(s.cap - (time.perf_counter() - st), deadline - time.perf_counter()))
    out.close()
    results[s.name] = result(s, status, time.perf_counter() - st, log)
  return [results[s.name] for s in steps]

# ***** the steps *****

def probe(py: str, name: str, env: dict, timeout: float = 60) -> dict:
  """A probe's RESULT figures, or {"error": why}."""
  try: r = sh([py, __file__, "probe", name], timeout, env=env, cwd=ROOT)
  except subprocess.TimeoutExpired: return {"error": f"the {name} probe took longer than {timeout:.0f} s"}
  for ln in r.stdout.splitlines()[::-1]:
    if ln.startswith("RESULT "): return json.loads(ln[7:])
  return {"error": (r.stderr or r.stdout).strip()[-2000:] or f"the {name} probe printed nothing (exit {r.returncode})"}

def steps(py: str, out: Path, gpu_missing: str | None, env: dict) -> list[Step]:
  bench = ROOT / "bench" / "gpu.py"
  has_sklearn = sh([py, "-c", "import sklearn"], 60).returncode == 0
  return [replace(s, missing=s.missing or (f"needs an NVIDIA GPU: {gpu_missing}" if s.gpu and gpu_missing else None)) for s in [
    Step("tinycore devices", [py, "-m", "tinycore", "devices"], cap=30, floor=5, gpu=False),
    Step("NV package tests (emulator, ptxas)", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "backends/tinygrad-nv/tests"],
         cap=240, gpu=False, background=True),
    Step("cast edge table on the GPU vs the emulator", [py, __file__, "probe", "edges", out], cap=60, floor=15),
    Step("launch cost", [py, __file__, "probe", "launch"], cap=90, floor=25),
    Step("conformance on the GPU (--profile ci)", [py, "-m", "tinycore_conformance.cli", "NV", "--profile", "ci", "--json",
                                                  out / "conformance.json", "--", "-vv"], cap=300, floor=60),
    Step("digits training on NV", [py, "examples/train_digits.py", "--dataset", "sklearn", "--no-progress", "--out", out / "train_digits"],
         cap=90, floor=30, missing=None if has_sklearn else "scikit-learn is not installed (its bundled digits are the offline dataset)"),
    # (120 s: its last rows, a deep layer's conv forward and backward, came after the eighth session's run; the proof's
    # deadline still bounds it, and every row before them prints as it is measured)
    Step("bench/gpu.py", [py, bench], cap=120, floor=30, missing=None if bench.exists() else "bench/gpu.py is not in this checkout"),
    Step("matmul kernels with register caps", [py, __file__, "probe", "occupancy"], cap=60, floor=20),
    Step("memory-bound kernels one by one", [py, __file__, "probe", "kernels"], cap=60, floor=20),
  ]]

def commit() -> str:
  """The checkout's commit, and whether its tracked files differ from it: a copy of a working tree can carry an older
  .git than its files (the GPU machines get one), and the report must not name that commit as what ran."""
  try:
    head = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], 10).stdout.strip() or "?"
    changed = sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], 30).stdout.strip()
    return head + (" (tracked files changed since: not that commit's code)" if changed else "")
  except (OSError, subprocess.TimeoutExpired): return "?"

def report(out: Path, info: dict, results: list[Result]) -> None:
  (out / "gpu-proof.json").write_text(json.dumps({**info, "steps": [r.__dict__ for r in results]}, indent=1, default=str))
  lines = ["# tinycore NV proof on an NVIDIA GPU", ""] + [f"- {k}: {v}" for k, v in info.items()] + ["",
           "| step | status | seconds | figures |", "|---|---|---|---|"]
  lines += [f"| {r.name} | {r.status}{(': ' + r.why) if r.why else ''} | {r.seconds:.1f} | "
            f"{', '.join(f'{k} {v}' for k, v in r.figures.items() if not isinstance(v, (list, dict)))} |" for r in results]
  for r in results:
    lines += ["", f"## {r.name}: {r.status}", ""]
    if r.why: lines.append(f"{r.why}\n")
    if r.figures: lines += ["```json", json.dumps(r.figures, indent=1), "```"]
    if r.tail: lines += ["", f"last lines of {r.log}:", "```", r.tail, "```"]
  (out / "gpu-proof.md").write_text("\n".join(lines) + "\n")

def main(argv: list[str]) -> int:
  start = time.perf_counter()
  deadline = start + DEADLINE_S
  out = Path(os.environ.get("OUT") or ROOT / "out" / time.strftime("gpu-proof-%Y%m%d-%H%M%S"))
  logs = out / "logs"
  logs.mkdir(parents=True, exist_ok=True)
  only = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--steps=")), None)
  print(f"gpu proof: report into {out}", flush=True)
  try: py, how = install(90)
  except Exception as e:
    report(out, {"install": f"failed: {type(e).__name__}: {e}"}, [])
    print(f"gpu proof: installing failed: {e}", flush=True)
    return 1
  env = {k: v for k, v in os.environ.items() if k not in ("NV_EMULATE", "DEV", "OUT")} | {"DEV": "NV", "PYTHONUNBUFFERED": "1"}
  gpu = probe(py, "gpu", env)
  if gpu.get("ptxas") is None and CUDA_PTXAS.exists(): env["NV_PTXAS"] = str(CUDA_PTXAS)   # no wheel, not on PATH: the toolkit's
  missing = gpu.get("error") if not gpu.get("gpus") else None
  info = {"installed": how, "python": py, "gpu": missing and f"none: {missing}" or gpu.get("name"), "driver": gpu.get("driver"),
          "ptxas": env.get("NV_PTXAS") or gpu.get("ptxas"), "commit": commit()}
  todo = [s for s in steps(py, out, missing, env) if only is None or any(o.lower() in s.name.lower() for o in only)]
  results = run_steps(todo, py, env, logs, deadline)
  report(out, info, results)
  print(f"\ngpu proof in {time.perf_counter() - start:.0f} s: " + "; ".join(f"{r.name}: {r.status}" for r in results), flush=True)
  if missing: print(f"gpu proof: NO NVIDIA GPU here ({missing}); the steps that need one were skipped", flush=True)
  print(f"gpu proof: report {out / 'gpu-proof.md'} and {out / 'gpu-proof.json'}", flush=True)
  return 1 if any(r.status in ("failed", "timeout") for r in results) else 2 if missing else 0

# ***** probes: run by the proof inside the installed python *****

def best_us(fn, sync, n: int = 500, batches: int = 5) -> float:
  """Microseconds per call of fn: the best of `batches` batches of n calls, each ended by sync."""
  for _ in range(50): fn()
  sync()
  best = float("inf")
  for _ in range(batches):
    st = time.perf_counter()
    for _ in range(n): fn()
    sync()
    best = min(best, (time.perf_counter() - st) / n)
  return best * 1e6

def python_reference() -> int:
  """A fixed pure-Python loop (bench/nv_launch.py times the same): how fast this machine's Python is, to compare host
  figures between machines."""
  x = 0
  for i in range(1000): x += i * i
  return x

def probe_gpu() -> dict:
  import ctypes
  from tinygrad_nv.assembler import find_ptxas
  from tinygrad_nv.driver import libcuda, gpu_count
  from tinycore.runtime.errors import DeviceError
  info = {"ptxas": find_ptxas()}
  try: lib = libcuda()
  except DeviceError as e: return {**info, "error": str(e)}
  if (n := gpu_count()) == 0: return {**info, "error": "libcuda.so.1 loads but sees no GPU"}
  name, version = ctypes.create_string_buffer(256), ctypes.c_int()
  lib.cuDeviceGetName(name, 256, 0)
  lib.cuDriverGetVersion(ctypes.byref(version))
  smi = shutil.which("nvidia-smi") and sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 20).stdout.strip()
  return {**info, "gpus": n, "name": name.value.decode(), "driver": f"{smi or '?'} (CUDA {version.value // 1000}.{version.value % 1000 // 10})"}

def probe_edges(out: str) -> dict:
  """The cvt.rzi edge table on the GPU (written next to the report, the format of tests/data/h100_cvt_rzi.json), where the
  emulator and the stored H100 table differ from it; and the .approx.f32 instructions over a sweep: the GPU's errors and
  the emulator's (the GPU's results kept in approx_f32.npz, a table the emulator can later follow)."""
  import numpy as np
  from tinygrad_nv import edges
  gpu, emu = edges.on_device("NV"), edges.on_emulator()
  with open(ROOT / "backends/tinygrad-nv/tests/data/h100_cvt_rzi.json") as f: h100 = json.load(f)
  gpu["what"] += time.strftime(", %Y-%m-%d")
  path = Path(out) / (re.sub(r"\W+", "_", probe_gpu().get("name", "gpu")).strip("_").lower() + "_cvt_rzi.json")
  path.write_text(json.dumps(gpu, indent=1) + "\n")
  x, approx, saved = edges.approx_inputs(), {}, {}
  for op in edges.APPROX:
    saved[op] = on_gpu = edges.approx_run(op, x, "NV")
    approx[op] = {"gpu": edges.approx_errors(op, x, on_gpu), "emulator": edges.approx_errors(op, x, edges.approx_run(op, x))}
  np.savez_compressed(Path(out) / "approx_f32.npz", x=x, **saved)
  return {"table": str(path), "emulator_differs": edges.differences(emu, gpu), "stored_h100_differs": edges.differences(h100, gpu),
          "approx": approx}

def probe_launch() -> dict:
  """Cached `(s + 1).realize()` on 16 floats (and PyTorch's `t + 1` on the same GPU), and the digits training step jitted:
  its kernels, time per step, the driver calls each replay makes (counted by wrapping libcuda's functions), and each
  kernel's own time (kernel_times)."""
  import numpy as np
  from tinycore import Tensor, Device
  from tinycore.jit import TinyJit
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters
  from tinycore.examples.train_digits import ConvNet
  from tinycore.engine import _runners
  from tinycore.schedule import buffers
  from tinycore.tensor import _storage
  dev = Device["NV"]
  s = Tensor(np.arange(16, dtype=np.float32), device="NV").realize()
  figures = {"s_plus_1_us": round(best_us(lambda: (s + 1).realize(), dev.synchronize), 1)}
  # where that time goes, beside bench/nv_launch.py's figures for the machine it runs on: this machine's Python speed (the
  # same loop), the kernel launched directly (the driver's share), and the functions that take the most of it
  figures["python_reference_us"] = round(best_us(python_reference, lambda: None, 100), 1)
  runner, bufs = next(reversed(_runners.values())), [buffers[_storage(t.uop)] for t in (Tensor.empty(16, device="NV").realize(), s)]
  figures["launched_directly_us"] = round(best_us(lambda: runner(bufs, {}), dev.synchronize), 1)
  # and cuLaunchKernel alone, called through ctypes with the arguments that launch built: the driver's share of the above
  runner(bufs, {})
  (call, _, _), = runner.program.calls
  launch_kernel = dev.driver.lib.cuLaunchKernel
  figures["cuLaunchKernel_us"] = round(best_us(lambda: launch_kernel(*call), dev.synchronize), 1)
  import cProfile, pstats, io
  prof = cProfile.Profile()
  def calls():
    for _ in range(2000): (s + 1).realize()   # each result dropped at once, as in the timed loop (its buffer reused)
  prof.runcall(calls)
  text = io.StringIO()
  pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
  figures["s_plus_1_profile"] = [ln.strip() for ln in text.getvalue().splitlines() if re.match(r"\s*\d", ln)][:12]
  try:
    import torch
    if torch.cuda.is_available():
      t = torch.arange(16, dtype=torch.float32, device="cuda")
      figures["torch_t_plus_1_us"] = round(best_us(lambda: t + 1, torch.cuda.synchronize), 1)
  except ImportError: pass
  Device.DEFAULT, Tensor.training = "NV", True
  Tensor.manual_seed(0)
  model = ConvNet()
  opt = optim.Adam(get_parameters(model), lr=1e-3)
  def step(x, y):
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y, reduction="sum").div(64)
    loss.backward()
    return loss.realize(*opt.schedule_step())
  jstep = TinyJit(step)
  rng = np.random.default_rng(0)
  batch = lambda: (Tensor(rng.random((64, 1, 28, 28), dtype=np.float32), device="NV"), Tensor(rng.integers(0, 10, 64, dtype=np.int32), device="NV"))
  for _ in range(3): jstep(*batch()).item()
  lib, counts = dev.driver.lib, {}
  for name in ("cuLaunchKernel", "cuGraphLaunch", "cuGraphExecKernelNodeSetParams_v2", "cuMemcpyHtoDAsync_v2", "cuStreamSynchronize"):
    def counted(*a, f=getattr(lib, name), name=name):
      counts[name] = counts.get(name, 0) + 1
      return f(*a)
    setattr(lib, name, counted)
  n, st = 20, time.perf_counter()
  for _ in range(n): jstep(*batch()).item()
  figures.update(jit_step_kernels=len(jstep.captured), jit_step_ms=round((time.perf_counter() - st) / n * 1e3, 3),
                 jit_step_calls={k: v / n for k, v in counts.items()})
  figures["jit_step_is_one_graph"] = counts.get("cuGraphLaunch", 0) == n and counts.get("cuLaunchKernel", 0) == 0
  figures["jit_step_kernel_us"] = kernel_times(lambda: jstep(*batch()).item())
  return figures

def kernel_times(fn) -> dict:
  """The kernels fn launches, each timed by the driver (the profiler makes the JIT replay them one by one, waiting on
  each): their sum and the ten longest in microseconds, by name (the names bench/gpu.py's emulator counters use too)."""
  from tinycore import trace
  with trace.profile() as prof: fn()
  times = [(e["name"], e["dur"]) for e in prof.events if e.get("ph") == "X" and e.get("tid") == "kernels" and e["args"].get("timer") == "device"]
  return {"kernels": len(times), "sum_us": round(sum(t for _, t in times), 1),
          "longest": [[name, round(t, 1)] for name, t in sorted(times, key=lambda nt: -nt[1])[:10]]}

def probe_occupancy(size: str = "4096") -> dict:
  """The 4096² matmul kernels (fp16 and bf16 on tensor cores, and fp32) timed as rendered and with a register cap, a PTX
  performance directive (`.maxnreg`; ptxas spills what does not fit) that lets more blocks share an SM: registers and
  occupancy trade only on the silicon, so this is how the renderer's choice is made. Per variant: the registers the
  loaded kernel uses (cuFuncGetAttribute) and the best of 10 timed launches."""
  import ctypes, dataclasses
  from tinycore import Tensor, dtypes
  from tinycore.uop import Ops
  from tinycore.engine import get_program
  from tinycore.runtime.runner import CompiledRunner
  n, figures = int(size), {}
  for dt in ("float16", "bfloat16", "float32"):
    x, y = (Tensor.randn(n, n, device="NV").cast(getattr(dtypes, dt)).realize() for _ in range(2))
    si = next(si for si in (x @ y).schedule() if si.ast.op is Ops.SINK)
    spec = get_program("NV", si.ast)
    for cap in (None, 168, 128):
      src, found = (spec.src, 1) if cap is None else re.subn(r"\)\n((?:\.\w+[^\n]*\n)*)\{", lambda m: f")\n{m[1]}.maxnreg {cap}\n{{", spec.src, count=1)
      if not found: raise RuntimeError(f"no kernel body start in {spec.name}'s PTX to put .maxnreg before")
      runner = CompiledRunner("NV", dataclasses.replace(spec, src=src))
      regs = ctypes.c_int()
      runner.program.driver.lib.cuFuncGetAttribute(ctypes.byref(regs), 4, runner.program.func)   # CU_FUNC_ATTRIBUTE_NUM_REGS
      secs = min(runner(si.bufs, {}, wait=True) for _ in range(12))
      figures[f"{dt} {'as rendered' if cap is None else f'maxnreg {cap}'}"] = {"registers": regs.value, "tflops": round(2 * n ** 3 / secs / 1e12, 1)}
  return figures

def probe_kernels(size: str = "4096") -> dict:
  """Each kernel of bench/gpu.py's memory-bound work (softmax, layernorm, a reduction, an add) timed alone: its launch
  sizes, microseconds (best of 10 launches) and the bytes the codegen's estimate says it moves per second, so a
  workload's time is split by kernel."""
  from tinycore import Tensor
  from tinycore.uop import Ops
  from tinycore.engine import get_runner
  n = int(size)
  x = Tensor.randn(n, n, device="NV").realize()
  v, w = (Tensor.randn(n * n * 4, device="NV").realize() for _ in range(2))
  work = {f"softmax {n}x{n}": lambda: [x.softmax(-1)], f"layernorm {n}x{n}": lambda: [x.layernorm()],
          f"exp(x*2+1).sum() over {n * n * 4}": lambda: [(v * 2 + 1).exp().sum()], f"a + b over {n * n * 4}": lambda: [v + w]}
  figures = {}
  for name, build in work.items():
    outs = build()
    items = [si for si in outs[0].schedule(*outs[1:]) if si.ast.op is Ops.SINK]
    runners = [get_runner("NV", si.ast) for si in items]
    for r, si in zip(runners, items): r(si.bufs, si.var_vals, wait=True)   # in order once: each later kernel's inputs hold values
    figures[name] = []
    for r, si in zip(runners, items):
      secs = min(r(si.bufs, si.var_vals, wait=True) for _ in range(10))
      figures[name].append({"kernel": r.spec.name, "global": list(r.spec.global_size), "local": list(r.spec.local_size or ()),
                            "us": round(secs * 1e6, 1), "estimated_gb_per_s": round(r.spec.mem_bytes / secs / 1e9, 1)})
  return figures

PROBES = {"gpu": probe_gpu, "edges": probe_edges, "launch": probe_launch, "occupancy": probe_occupancy, "kernels": probe_kernels}

if __name__ == "__main__":
  if len(sys.argv) >= 3 and sys.argv[1] == "probe":
    got = PROBES[sys.argv[2]](*sys.argv[3:])
    print("RESULT " + json.dumps(got), flush=True)
    sys.exit(1 if got.get("error") or got.get("emulator_differs") or got.get("jit_step_is_one_graph") is False else 0)
  sys.exit(main(sys.argv[1:]))
