"""tinygrad-remote: a device on another machine (any backend behind `python -m tinygrad_remote serve`), registered through the tinycore.backends entry point."""
from __future__ import annotations
import os
from collections.abc import Mapping
from tinycore.runtime.plugin import BackendSpec, hookimpl

def _renderer():
  from tinygrad_remote.renderer import remote_renderer
  return remote_renderer()
def _assembler(renderer):
  from tinygrad_remote.assembler import RemoteAssembler
  return RemoteAssembler(renderer)
def _driver(index: int):
  from tinygrad_remote.driver import RemoteDriver
  return RemoteDriver(index)
def _allocator(driver):
  from tinygrad_remote.allocator import RemoteAllocator
  return RemoteAllocator(driver)
def _instances() -> int | None:
  return None if os.environ.get("REMOTE_URL") else 0   # the server's count is checked when an instance opens

class ServerCapabilities(Mapping):
  """The served backend's capabilities, asked of the server on first use (empty while no server is reachable)."""
  def _caps(self) -> dict:
    try:
      from tinygrad_remote.connection import connection
      return connection().info()["capabilities"]
    except Exception: return {}
  def __getitem__(self, key): return self._caps()[key]
  def __iter__(self): return iter(self._caps())
  def __len__(self): return len(self._caps())

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [BackendSpec("REMOTE", (2, 0), _renderer, _assembler, _driver, _allocator, priority=-50, instances=_instances,
                      capabilities=ServerCapabilities())]
