"""One entry point for the README's commands: `train` (set up, train the digits model), `test` (set up, run every test) and
`gpu` (prove the NV backend on an NVIDIA GPU, offline: tools/gpu_proof.py)."""
from __future__ import annotations
import json, os, shutil, subprocess, sys, tempfile, time, venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("TINYCORE_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")

# what each command installs into the virtual environment (editable, so the checkout is what runs)
PACKAGES = {
  "train": ["-e", f"{ROOT}[examples]", "-e", str(ROOT / "backends/tinygrad-cpu")],
  "test": ["-e", f"{ROOT}[test,examples]", "-e", str(ROOT / "backends/tinygrad-cpu"), "-e", str(ROOT / "conformance")],
}
# installed when present; tests that need a runtime these lack skip outside CI
OPTIONAL = {"test": [ROOT / "backends" / b for b in ("tinygrad-webgpu", "tinygrad-nv", "tinygrad-amd", "tinygrad-qcom", "tinygrad-remote")]}

class Run(NamedTuple):
  """One conformance run of a backend."""
  what: str
  env: dict = {}
  missing: str | None = None       # why this machine cannot make the run (None: it can)
  hardware: bool = False           # needs hardware CI machines never have: skipped with the reason even in CI
  prefix: tuple = ()               # a command the run is wrapped in (REMOTE: a local server around it)
  after: tuple = ()                # a command run after it, in the same environment (AMD: llvm-objdump its code objects;
                                   # NV: ptxas assembles its kernels for every arch CI checks)

def c_compiler_missing() -> str | None:
  return None if any(shutil.which(n) for n in ("cc", "gcc", "clang")) else "none of cc, gcc, clang is installed"

# the WEBGPU runs CI must make: wgpu translates WGSL differently per API, so the same suite runs on lavapipe (Vulkan)
# and llvmpipe (OpenGL), and a kernel whose meaning differs between them fails CI
CI_WGPU_BACKENDS = ("Vulkan", "OpenGL")

def webgpu_runs(opens: bool, why: str) -> list[Run]:
  """One run per wgpu backend that has an adapter here, picked with wgpu's WGPU_BACKEND_TYPE (CI: Vulkan and OpenGL)."""
  if not opens: return [Run("WEBGPU", missing=why)]
  code = "import json, wgpu; print(json.dumps(sorted({a.info['backend_type'] for a in wgpu.gpu.enumerate_adapters_sync()})))"
  present = json.loads(subprocess.run([str(PY), "-c", code], check=True, capture_output=True, text=True).stdout)
  wanted = sorted(set(present) | (set(CI_WGPU_BACKENDS) if os.environ.get("CI") else set()))
  return [Run(f"WEBGPU on {b}", {"WGPU_BACKEND_TYPE": b}, None if b in present else f"wgpu has no {b} adapter on this machine")
          for b in wanted]

AMD_CACHE = VENV / "cache-amd"   # the AMD emulator run's code objects (a fresh cache), which llvm-objdump then disassembles
NV_CACHE = VENV / "cache-nv"     # the NV emulator run's kernels (a fresh cache), which ptxas then assembles for sm_80 too

# the configurations the conformance suite runs a backend in, given whether it opens here as installed and why not;
# a backend not named here runs once, as installed
RUNS: dict[str, Callable[[bool, str], list[Run]]] = {
  "CPU": lambda opens, why: [Run("CPU", missing=None if opens else why), Run("CPU with the C renderer", {"CPU_RENDERER": "C"}, c_compiler_missing())],
  "WEBGPU": webgpu_runs,
  "NV": lambda opens, why: [Run("NV on the GPU", missing=None if opens else why, hardware=True),
                            Run("NV on the PTX emulator", {"NV_EMULATE": "1", "TINYCORE_CACHE": str(NV_CACHE)},
                                after=(PY, "-m", "tinygrad_nv.ptxas_check", NV_CACHE, "sm_90", "sm_80"))],
  "AMD": lambda opens, why: [Run("AMD on the GPU", missing=None if opens else why, hardware=True),
                             Run("AMD on the RDNA3 emulator", {"AMD_EMULATE": "1", "TINYCORE_CACHE": str(AMD_CACHE)},
                                 after=(PY, "-m", "tinygrad_amd.llvm_check", AMD_CACHE))],
  "QCOM": lambda opens, why: [Run("QCOM on OpenCL", {"QCOM_OPENCL": "1"}, None if opens else why),
                              Run("QCOM on OpenCL with images", {"QCOM_OPENCL": "1", "QCOM_IMAGE": "1"}, None if opens else why)],
  "REMOTE": lambda opens, why: [Run("REMOTE to a local server backed by CPU",
                                    prefix=(PY, "-m", "tinygrad_remote", "with-server", "--device", "CPU", "--"))],
}

def run(*cmd, **kw) -> None:
  print("+", " ".join(str(c) for c in cmd), flush=True)
  subprocess.run([str(c) for c in cmd], check=True, **kw)

def setup(kind: str) -> None:
  if not PY.exists(): venv.EnvBuilder(with_pip=True).create(VENV)
  run(PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PACKAGES[kind],
      *[x for p in OPTIONAL.get(kind, []) if p.exists() for x in ("-e", str(p))],
      *os.environ.get("TINYCORE_EXTRA_PIP", "").split())  # e.g. "torch==2.13.0": the tests that cross-check with it run

def installed_backends() -> list[tuple[str, bool, str]]:
  """(name, whether it opens here, why not) for every backend the environment has, NULL left out (it runs nothing)."""
  code = "import json; from tinycore import Device; print(json.dumps([(n, *Device.opens(n)) for n in Device if n != 'NULL']))"
  out = subprocess.run([str(PY), "-c", code], check=True, capture_output=True, text=True).stdout
  return [tuple(r) for r in json.loads(out.strip().splitlines()[-1])]

def cannot_run(r: Run) -> None:
  """Outside CI a run this machine cannot make is skipped with the reason; CI installs what every run needs, so there it
  fails, except for runs on hardware no CI machine has."""
  if os.environ.get("CI") and not r.hardware: raise SystemExit(f"conformance: {r.what} cannot run: {r.missing}; CI must run it")
  print(f"conformance: {r.what} skipped: {r.missing}", flush=True)

def conformance(dev: str, r: Run) -> tuple[bool, str, float]:
  """One conformance run (and its check after), its output kept to be printed whole: (passed, output, seconds)."""
  st = time.perf_counter()
  if "TINYCORE_CACHE" in r.env: shutil.rmtree(r.env["TINYCORE_CACHE"], ignore_errors=True)
  env = {**os.environ, "DEV": dev, **r.env}
  with tempfile.TemporaryFile("w+") as out:
    ok = True
    for cmd in [(*r.prefix, PY, "-m", "tinycore_conformance.cli", dev, "--profile", "ci"), *([r.after] if r.after else [])]:
      out.write("+ " + " ".join(str(c) for c in cmd) + "\n"); out.flush()
      ok = ok and subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT).returncode == 0
    out.seek(0)
    return ok, out.read(), time.perf_counter() - st

def main(argv: list[str]) -> int:
  if not argv or argv[0] not in ("train", "test", "gpu"):
    print("usage: python3 tools/dev.py train [train_digits args...] | test [pytest args...] | gpu [--steps=NAME,...]")
    return 2
  kind, rest = argv[0], argv[1:]
  if kind == "gpu":   # its own install (offline, into .venv-gpu) and steps
    sys.path.insert(0, str(ROOT / "tools"))
    from gpu_proof import main as gpu_proof
    return gpu_proof(rest)
  setup(kind)
  if kind == "train":
    run(PY, ROOT / "examples/train_digits.py", *rest, cwd=ROOT)
    return 0
  # tests and conformance runs spread over the cores (pytest-xdist's workers; TINYCORE_TEST_JOBS to choose), each test
  # independent of the others; worksteal: an idle worker takes queued tests from a busy one, so a slow file ends no run alone
  jobs = max(1, int(os.environ.get("TINYCORE_TEST_JOBS", os.cpu_count() or 1)))
  par = ("-n", str(jobs), "--dist", "worksteal") if jobs > 1 else ()
  # the core and backend tests, then the conformance suite once per installed backend and configuration
  # --capture=sys: what C code writes to the process's stderr reaches the log. A test worker that aborts (a Python fatal
  # error, glibc's or LLVM's message before abort()) says why there; under pytest's default fd capture the message dies
  # with the worker, and the run shows only "killed by SIGABRT" (conftest.py)
  run(PY, "-m", "pytest", "-q", "--capture=sys", *par, *rest, cwd=ROOT)
  # ONNX's whole node-test suite (the default pytest run takes one test per op): a few minutes, so a step of its own
  run(PY, "-m", "pytest", "-q", "--capture=sys", *par, "test/test_onnx_node.py", cwd=ROOT, env={**os.environ, "ONNX_NODE_TESTS": "all"})
  todo: list[tuple[str, Run]] = []
  later: list[tuple[str, Run]] = []   # a backend's further runs go last: by then its first run has warmed shared caches
  for dev, opens, why in installed_backends():
    for i, r in enumerate(RUNS.get(dev, lambda opens, why: [Run(dev, missing=None if opens else why)])(opens, why)):
      if r.missing: cannot_run(r)
      else: (later if i and any(d == dev for d, _ in todo) else todo).append((dev, r))
  todo += later
  # the runs are independent single-threaded processes: as many at once as there are cores
  print(f"conformance: {len(todo)} runs, {jobs} at a time: " + ", ".join(r.what for _, r in todo), flush=True)
  failed = []
  with ThreadPoolExecutor(jobs) as pool:
    for (dev, r), (ok, out, secs) in zip(todo, pool.map(lambda t: conformance(*t), todo)):
      env = f" ({' '.join(f'{k}={v}' for k, v in r.env.items())})" if r.env else ""
      print(f"\n===== conformance: {r.what}{env}: {'passed' if ok else 'FAILED'} in {secs:.0f} s =====\n{out}", flush=True)
      if not ok: failed.append(r.what)
  if failed: raise SystemExit(f"conformance failed: {', '.join(failed)}")
  return 0

if __name__ == "__main__":
  try: sys.exit(main(sys.argv[1:]))
  except subprocess.CalledProcessError as e: sys.exit(e.returncode or 1)
