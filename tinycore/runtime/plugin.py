"""The plugin contract: the pluggy hook specification, and the description a backend returns from it."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable
import pluggy

PROJECT = "tinycore"
ENTRY_POINT_GROUP = "tinycore.backends"
# 2: the driver factory takes the instance index, the spec says how many instances exist (`instances`), and transfers
#    between instances of one backend go through the source's allocator (`Allocator._transfer`)
CONTRACT_VERSION = 2

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

def instance_name(name: str, index: int) -> str:
  """The device name of instance `index` of backend `name`: "NAME" for instance 0 ("NAME:0" means the same), else "NAME:i"."""
  return name if index == 0 else f"{name}:{index}"

def one_instance() -> int: return 1
def virtual_instances() -> None: return None   # `instances` for backends that offer as many instances as are asked for

@dataclass
class BackendSpec:
  """What a plugin's `tinycore_backends` hook returns, one per device it provides.

  The four role factories are called lazily: `renderer()` must work without the hardware and is shared by every
  instance; `driver(index)` opens instance `index` (its device name is `instance_name(name, index)`);
  `allocator(driver)` and `assembler(renderer)` get their partner role. `instances()` says how many instances this
  machine has (0 when the hardware is absent, None when any number can be opened, like the CPU's virtual instances);
  it must be cheap and must not open the device."""
  name: str                                   # the device name users pick with DEV=NAME, upper case
  contract_version: int                       # CONTRACT_VERSION the plugin was built for
  renderer: Callable[[], Any]
  assembler: Callable[[Any], Any]
  driver: Callable[[int], Any]
  allocator: Callable[[Any], Any]
  priority: int = 0                           # the default device is the highest priority backend that opens
  capabilities: dict[str, Any] = field(default_factory=dict)
  instances: Callable[[], int | None] = one_instance
  package: str = "?"                          # filled in by the registry from package metadata
  version: str = "?"
  module: str = "?"                           # the file of the module that registered it (filled in by the registry)

class BackendHooks:
  """Hook specifications: a plugin module implements these with `@hookimpl`."""
  @hookspec
  def tinycore_backends(self) -> list[BackendSpec]:  # type: ignore[empty-body]
    """Return the backends this plugin provides."""
