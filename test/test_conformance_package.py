"""The conformance package's own tests (conformance/tests/) run with the core's: the suite must catch broken backends."""
import importlib.util, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
# the package's tests in two halves, side by side: the suite runs one test at a time, so a second core is free here.
# A -k expression and its negation select every test between them; this one splits the time about evenly.
HALF = "example or plugin_copy or trap or refusing"

@pytest.mark.skipif(importlib.util.find_spec("tinycore_conformance") is None, reason="tinycore-conformance is not installed (pip install -e conformance)")
def test_conformance_suite_catches_broken_backends_and_passes_the_example(tmp_path):
  # the tests start some 70 interpreters (each CLI run: itself and its child pytest), each importing tinycore, numpy,
  # pytest and hypothesis: they share one bytecode cache, so only the first compiles (and pytest rewrites the asserts
  # of) those modules. Under PYTHONDONTWRITEBYTECODE every one of them did, about half of each run's start-up
  env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}
  env.pop("PYTHONDONTWRITEBYTECODE", None)
  runs = []
  for i, k in enumerate((HALF, f"not ({HALF})")):
    out = open(tmp_path / f"half{i}.txt", "w+")
    runs.append((subprocess.Popen([sys.executable, "-m", "pytest", str(ROOT / "conformance" / "tests"), "-q", "-p", "no:cacheprovider",
                                   "-k", k, "--basetemp", str(tmp_path / f"half{i}")], stdout=out, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env), out))
  for proc, out in runs:
    proc.wait(timeout=900)
    out.seek(0)
    text = out.read()
    out.close()
    assert proc.returncode == 0, text[-8000:]
    assert " passed" in text and " deselected" in text, text[-2000:]
