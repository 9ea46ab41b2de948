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
OPTIONAL = {"test": [ROOT / "backends/tinygrad-webgpu",   # installed when present; its tests skip without a Vulkan adapter
                     ROOT / "backends/tinygrad-amd"]}

# extra configurations of a backend the conformance suite also runs: (name, extra environment, what it needs on PATH
# (any one of them; nothing: always runs), a check run after it with the same environment or None)
AMD_CACHE = VENV / "cache-amd"   # the AMD emulator run's code objects, which llvm-objdump then disassembles
VARIANTS = {"CPU": [("CPU with the C renderer", {"CPU_RENDERER": "C"}, ("cc", "gcc", "clang"), None)],
            "AMD": [("AMD on the RDNA3 emulator", {"AMD_EMULATE": "1", "TINYCORE_CACHE": str(AMD_CACHE)}, (),
                     [PY, "-m", "tinygrad_amd.llvm_check", AMD_CACHE])]}
# backends whose plain run needs hardware (a path that exists only with it); without it only their variants run
HARDWARE = {"AMD": "/dev/kfd"}

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
  for dev in installed_backends():
    if dev in HARDWARE and not os.path.exists(HARDWARE[dev]): print(f"conformance: {dev} on hardware skipped: no {HARDWARE[dev]}")
    else: run(PY, "-m", "tinycore_conformance.cli", dev, "--profile", "ci", cwd=ROOT, env={**os.environ, "DEV": dev})
    for what, env, needs, check in VARIANTS.get(dev, []):
      if needs and not any(shutil.which(n) for n in needs):
        if os.environ.get("CI"): raise SystemExit(f"conformance: {what} needs one of {needs} on PATH, and CI must run it")
        print(f"conformance: {what} skipped: none of {needs} is installed"); continue
      print(f"conformance: {what} ({' '.join(f'{k}={v}' for k, v in env.items())})", flush=True)
      if "TINYCORE_CACHE" in env: shutil.rmtree(env["TINYCORE_CACHE"], ignore_errors=True)
      run(PY, "-m", "tinycore_conformance.cli", dev, "--profile", "ci", cwd=ROOT, env={**os.environ, "DEV": dev, **env})
      if check is not None: run(*check, cwd=ROOT, env={**os.environ, **env})
  return 0

if __name__ == "__main__":
  try: sys.exit(main(sys.argv[1:]))
  except subprocess.CalledProcessError as e: sys.exit(e.returncode or 1)
