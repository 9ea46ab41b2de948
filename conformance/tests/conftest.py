"""Fixtures for the suite's own tests: the broken backends of broken_backends.py, installed through a real entry point."""
from __future__ import annotations
import pytest
from conformance_helpers import HERE, write_dist

@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory) -> list[str]:
  """sys.path entries that register the broken backends (tests/broken_backends.py) as the package tinycore-broken."""
  root = tmp_path_factory.mktemp("broken_dist")
  write_dist(root, "tinycore-broken", {"broken": "broken_backends"})
  return [str(root), str(HERE)]
