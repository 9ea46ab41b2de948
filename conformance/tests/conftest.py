"""Fixtures for the suite's own tests: the broken backends of broken_backends.py, installed through a real entry point."""
from __future__ import annotations
import shutil, subprocess, sys
import pytest
from conformance_helpers import HERE, write_dist

@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory) -> list[str]:
  """sys.path entries that register the broken backends (tests/broken_backends.py) as the package tinycore-broken, and
  the contract 1.0 backend (tests/contract1_backend.py) as tinygrad-contract1."""
  root = tmp_path_factory.mktemp("broken_dist")
  write_dist(root, "tinycore-broken", {"broken": "broken_backends"})
  write_dist(root, "tinygrad-contract1", {"contract1": "contract1_backend"})
  return [str(root), str(HERE)]

@pytest.fixture(scope="session")
def example_site(tmp_path_factory) -> str:
  """A private target directory the example plugin (docs/writing-a-backend.md) is pip-installed into, once per session:
  the tests that use it read it, or copy it before adding to it."""
  root = tmp_path_factory.mktemp("example")
  site, src = root / "site", root / "example_plugin"
  shutil.copytree(HERE / "example_plugin", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))  # builds stay out of the checkout
  pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), str(src)],
                       capture_output=True, text=True, timeout=300)
  assert pip.returncode == 0, pip.stderr[-3000:]
  return str(site)

@pytest.fixture(scope="session")
def example_copy(example_site, tmp_path_factory):
  """make(defect) -> the PYTHONPATH entries of a copy of the installed example plugin whose renderer.py ends by planting
  one defect of example_defects.py (None: no defect, only every dtype declared: the copies' baseline)."""
  def make(defect: str | None) -> list[str]:
    site = tmp_path_factory.mktemp("example_copy") / "site"
    shutil.copytree(example_site, site)
    with open(site / "tinygrad_example" / "renderer.py", "a") as f:
      f.write(f"\nfrom example_defects import planted\nExampleRenderer = planted(ExampleRenderer, {defect!r})\n")
    return [str(site), str(HERE)]
  return make
