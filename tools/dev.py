"""One entry point for the README's two commands: `train` (set up, train the digits model) and `test` (set up, run every test)."""
from __future__ import annotations
import json, os, shutil, subprocess, sys, venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("TINYCORE_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")

# what each command installs into the virtual environment (editable, so the checkout is what runs)
PACKAGES = {
  "train": ["-e", f"{ROOT}[examples]", "-e", str(ROOT / "backends/tinygrad-cpu")],
  "test": ["-e", f"{ROOT}[test,examples]", "-e", str(ROOT / "backends/tinygrad-cpu"), "-e", str(ROOT / "conformance")],
}
OPTIONAL = {"test": [ROOT / "backends/tinygrad-webgpu"]}  # installed when present; its tests skip without an adapter (not in CI)

def c_compiler_missing() -> str | None:
  return None if any(shutil.which(n) for n in ("cc", "gcc", "clang")) else "none of cc, gcc, clang is installed"

# the WEBGPU runs CI must make: wgpu translates WGSL differently per API, so the same suite runs on lavapipe (Vulkan)
# and llvmpipe (OpenGL), and a kernel whose meaning differs between them fails CI
CI_WGPU_BACKENDS = ("Vulkan", "OpenGL")

def webgpu_runs() -> list[tuple[str, dict, str | None]]:
  """One run per wgpu backend that has an adapter here, picked with wgpu's WGPU_BACKEND_TYPE (CI: Vulkan and OpenGL)."""
  code = "import json, wgpu; print(json.dumps(sorted({a.info['backend_type'] for a in wgpu.gpu.enumerate_adapters_sync()})))"
  present = json.loads(subprocess.run([str(PY), "-c", code], check=True, capture_output=True, text=True).stdout)
  wanted = sorted(set(present) | (set(CI_WGPU_BACKENDS) if os.environ.get("CI") else set()))
  return [(f"WEBGPU on {b}", {"WGPU_BACKEND_TYPE": b}, None if b in present else f"wgpu has no {b} adapter on this machine")
          for b in wanted]

# the configurations the conformance suite runs a backend in: (what, extra environment, why it cannot run here or None);
# a backend not named here runs once, as installed
RUNS = {"CPU": lambda: [("CPU", {}, None), ("CPU with the C renderer", {"CPU_RENDERER": "C"}, c_compiler_missing())],
        "WEBGPU": webgpu_runs}

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

def cannot_run(what: str, why: str) -> None:
  """Outside CI a run this machine cannot make is skipped with the reason; CI installs what every run needs, so there it fails."""
  if os.environ.get("CI"): raise SystemExit(f"conformance: {what} cannot run: {why}; CI must run it")
  print(f"conformance: {what} skipped: {why}", flush=True)

def main(argv: list[str]) -> int:
  if not argv or argv[0] not in ("train", "test"):
    print("usage: python3 tools/dev.py train [train_digits args...] | test [pytest args...]")
    return 2
  kind, rest = argv[0], argv[1:]
  setup(kind)
  if kind == "train":
    run(PY, ROOT / "examples/train_digits.py", *rest, cwd=ROOT)
    return 0
  # the core and backend tests, then the conformance suite once per installed backend and configuration
  run(PY, "-m", "pytest", "-q", *rest, cwd=ROOT)
  for dev, opens, why in installed_backends():
    if not opens:
      cannot_run(dev, why)
      continue
    for what, env, missing in RUNS.get(dev, lambda: [(dev, {}, None)])():
      if missing:
        cannot_run(what, missing)
        continue
      print(f"conformance: {what}" + (f" ({' '.join(f'{k}={v}' for k, v in env.items())})" if env else ""), flush=True)
      run(PY, "-m", "tinycore_conformance.cli", dev, "--profile", "ci", cwd=ROOT, env={**os.environ, "DEV": dev, **env})
  return 0

if __name__ == "__main__":
  try: sys.exit(main(sys.argv[1:]))
  except subprocess.CalledProcessError as e: sys.exit(e.returncode or 1)
