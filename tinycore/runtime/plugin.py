"""The plugin contract: the pluggy hook specification, and the description a backend returns from it."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable
import pluggy

PROJECT = "tinycore"
ENTRY_POINT_GROUP = "tinycore.backends"
CONTRACT_VERSION = 1

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

@dataclass
class BackendSpec:
  """What a plugin's `tinycore_backends` hook returns, one per device it provides.

  The four role factories are called lazily: `renderer()` must work without the hardware;
  `driver()` opens the device; `allocator(driver)` and `assembler(renderer)` get their partner role."""
  name: str                                   # the device name users pick with DEV=NAME, upper case
  contract_version: int                       # CONTRACT_VERSION the plugin was built for
  renderer: Callable[[], Any]
  assembler: Callable[[Any], Any]
  driver: Callable[[], Any]
  allocator: Callable[[Any], Any]
  priority: int = 0                           # the default device is the highest priority backend that opens
  capabilities: dict[str, Any] = field(default_factory=dict)
  package: str = "?"                          # filled in by the registry from package metadata
  version: str = "?"

class BackendHooks:
  """Hook specifications: a plugin module implements these with `@hookimpl`."""
  @hookspec
  def tinycore_backends(self) -> list[BackendSpec]:  # type: ignore[empty-body]
    """Return the backends this plugin provides."""
