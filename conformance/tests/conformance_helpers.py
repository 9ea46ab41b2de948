"""Helpers for the suite's own tests: register test backends through a real entry point and run the CLI on them."""
from __future__ import annotations
import json, os, subprocess, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

def write_dist(root: Path, project: str, entry_points: dict[str, str]) -> None:
  """A minimal installed distribution (dist-info) whose entry points importlib.metadata finds on sys.path."""
  info = root / f"{project.replace('-', '_')}-0.0.0.dist-info"
  info.mkdir(parents=True, exist_ok=True)
  (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project}\nVersion: 0.0.0\n")
  (info / "entry_points.txt").write_text("[tinycore.backends]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))

def run_cli(device: str, *args: str, path: list[str], tmp: Path, timeout: int = 600) -> tuple[subprocess.CompletedProcess, dict]:
  """`python -m tinycore_conformance.cli DEVICE --json ... ARGS` in a fresh interpreter; returns the process and the JSON report."""
  out = tmp / f"{device}.json"
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(path + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
  env.pop("DEV", None)
  proc = subprocess.run([sys.executable, "-m", "tinycore_conformance.cli", device, "--json", str(out), "-q", *args],
                        capture_output=True, text=True, env=env, timeout=timeout)
  report = json.loads(out.read_text()) if out.exists() else {}
  return proc, report
