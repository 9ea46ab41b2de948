"""One entry point for the README's two commands: `train` (set up, train the digits model) and `test` (set up, run every test)."""
from __future__ import annotations
import os, shutil, subprocess, sys, venv
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
OPTIONAL = {"test": [ROOT / "backends/tinygrad-webgpu", ROOT / "backends/tinygrad-qcom"]}  # installed when present; their tests skip without a Vulkan adapter / an OpenCL runtime

# extra configurations of a backend the conformance suite also runs: (name, extra environment, what it needs on PATH)
VARIANTS = {"CPU": [("CPU with the C renderer", {"CPU_RENDERER": "C"}, ("cc", "gcc", "clang"))],
            "QCOM": [("QCOM with images", {"QCOM_IMAGE": "1"}, ("clinfo",))]}
# every conformance run of a backend: (extra environment, what it needs on PATH); clinfo stands for an OpenCL runtime (pocl in CI)
BACKEND_RUN = {"QCOM": ({"QCOM_OPENCL": "1"}, ("clinfo",))}

def run(*cmd, **kw) -> None:
  print("+", " ".join(str(c) for c in cmd), flush=True)
  subprocess.run([str(c) for c in cmd], check=True, **kw)

def setup(kind: str) -> None:
  if not PY.exists(): venv.EnvBuilder(with_pip=True).create(VENV)
  run(PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PACKAGES[kind],
      *[x for p in OPTIONAL.get(kind, []) if p.exists() for x in ("-e", str(p))],
      *os.environ.get("TINYCORE_EXTRA_PIP", "").split())  # e.g. "torch==2.13.0": the tests that cross-check with it run

def installed_backends() -> list[str]:
  out = subprocess.run([str(PY), "-c", "from tinycore import Device; print(' '.join(n for n in Device if n != 'NULL'))"],
                       check=True, capture_output=True, text=True).stdout.split()
  return out

def main(argv: list[str]) -> int:
  if not argv or argv[0] not in ("train", "test"):
    print("usage: python3 tools/dev.py train [train_digits args...] | test [pytest args...]")
    return 2
  kind, rest = argv[0], argv[1:]
  setup(kind)
  if kind == "train":
    run(PY, ROOT / "examples/train_digits.py", *rest, cwd=ROOT)
    return 0
  # the core and backend tests, then the conformance suite once per installed backend
  run(PY, "-m", "pytest", "-q", *rest, cwd=ROOT)
  def installed(what: str, needs: tuple[str, ...]) -> bool:
    if not needs or any(shutil.which(n) for n in needs): return True
    if os.environ.get("CI"): raise SystemExit(f"conformance: {what} needs one of {needs} on PATH, and CI must run it")
    print(f"conformance: {what} skipped: none of {needs} is installed")
    return False
  for dev in installed_backends():
    env, needs = BACKEND_RUN.get(dev, ({}, ()))
    if not installed(dev, needs): continue
    base = {**os.environ, "DEV": dev, **env}
    run(PY, "-m", "tinycore_conformance.cli", dev, "--profile", "ci", cwd=ROOT, env=base)
    for what, env, needs in VARIANTS.get(dev, []):
      if not installed(what, needs): continue
      print(f"conformance: {what} ({' '.join(f'{k}={v}' for k, v in env.items())})", flush=True)
      run(PY, "-m", "tinycore_conformance.cli", dev, "--profile", "ci", cwd=ROOT, env={**base, **env})
  return 0

if __name__ == "__main__":
  try: sys.exit(main(sys.argv[1:]))
  except subprocess.CalledProcessError as e: sys.exit(e.returncode or 1)
