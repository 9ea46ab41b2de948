"""The conformance package's own tests (conformance/tests/) run with the core's: the suite must catch broken backends."""
import importlib.util, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent

@pytest.mark.skipif(importlib.util.find_spec("tinycore_conformance") is None, reason="tinycore-conformance is not installed (pip install -e conformance)")
def test_conformance_suite_catches_broken_backends_and_passes_the_example():
  proc = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "conformance" / "tests"), "-q", "-p", "no:cacheprovider"],
                        capture_output=True, text=True, timeout=900, cwd=ROOT)
  assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
