"""The plugin contract: the pluggy hook specification, the description a backend returns from it, and its versions."""
from __future__ import annotations
import inspect
from dataclasses import dataclass, field, replace
from typing import Any, Callable
import pluggy

PROJECT = "tinycore"
ENTRY_POINT_GROUP = "tinycore.backends"
# the contract this core speaks, (major, minor); docs/writing-a-backend.md keeps the policy and the changelog. A plugin
# states the version it was written for as a literal: importing this constant would claim whichever version runs it
CONTRACT_VERSION = (2, 6)

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
  contract_version: Any                       # the contract it was written for, a literal (major, minor) like (2, 0)
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
  contract_status: str = "?"                  # "current", "adapted" (deprecated) or "refused": filled in by the registry
  contract_run_as: tuple[int, int] | None = None   # the version the core runs it as (None when refused)
  contract_note: str = ""                     # why it is refused, or what its package should change (the registry's warning)

class BackendHooks:
  """Hook specifications: a plugin module implements these with `@hookimpl`."""
  @hookspec
  def tinycore_backends(self) -> list[BackendSpec]:  # type: ignore[empty-body]
    """Return the backends this plugin provides."""

# ***** versions: what a plugin states, and how a plugin written for an older major is run *****

def parse_version(v: Any) -> tuple[int, int] | None:
  """(major, minor) from what a plugin stated: two non-negative ints, or one int n (contracts 1 and 2 were stated as
  plain ints) meaning (n, 0); None when it is not a version."""
  if type(v) is int: v = (v, 0)
  return v if isinstance(v, tuple) and len(v) == 2 and all(type(x) is int and x >= 0 for x in v) else None

def version_str(v: Any) -> str:
  return f"{p[0]}.{p[1]}" if (p := parse_version(v)) is not None else repr(v)

def binds(factory: Callable, *args: Any) -> bool:
  """Whether `factory` can be called with `args` (True when its signature cannot be read, as for some builtins)."""
  try: inspect.signature(factory).bind(*args)
  except TypeError: return False
  except ValueError: pass
  return True

def _one_instance(spec: BackendSpec) -> BackendSpec:
  """1.0 -> 2.0: the driver factory takes no instance index, so the backend has one instance (NAME:1 is refused before it)."""
  open_driver = spec.driver
  return replace(spec, driver=lambda index: open_driver(), instances=one_instance)

# each older major this core still runs: major -> (its last minor, the adapter to the next major, what its plugins change to port)
ADAPTED: dict[int, tuple[int, Callable[[BackendSpec], BackendSpec], str]] = {
  1: (0, _one_instance, "accept the instance index in the driver factory, driver(index), and state contract_version=(2, 0)"),
}
SUPPORTED = ((min(ADAPTED, default=CONTRACT_VERSION[0]), 0), CONTRACT_VERSION)   # the oldest and the newest version a plugin may state
PORTING = "docs/writing-a-backend.md, 'Contract versions', says how to port"

# renderer attributes a contract stopped reading: name -> (the version that stopped, what to declare instead). A plugin that
# sets one runs (the core never read it for correctness). Written for an older version, it runs with no warning (the
# policy: an older minor runs unchanged); stating the version that stopped reading it, it is told what it meant to declare
UNREAD_RENDERER_ATTRIBUTES: dict[str, tuple[tuple[int, int], str]] = {
  "fma": ((2, 3), "list the float dtypes whose fused multiply-add (rounded once) it renders in `mulacc_dtypes`, and render "
                  "MULACC for them; the core hands it MULACC only for those"),
}

def unread_attribute_notes(spec: BackendSpec, renderer: Any) -> list[str]:
  """What a plugin stating a contract that no longer reads them sets on its renderer, each with what to declare instead."""
  stated = parse_version(spec.contract_version) or (0, 0)
  return [f"plugin {spec.package} {spec.version} states contract {version_str(stated)}, and {spec.name}'s renderer sets `{attr}`, "
          f"which tinycore no longer reads since contract {version_str(since)}: {instead} ({PORTING})"
          for attr, (since, instead) in UNREAD_RENDERER_ATTRIBUTES.items() if stated >= since and getattr(renderer, attr, None) is not None]

def check_contract(spec: BackendSpec) -> BackendSpec:
  """The spec as this core runs it, with `contract_status`, `contract_run_as` and `contract_note` set: refused (outside
  SUPPORTED, or not a version), adapted to the current major where it was written for an older one, else as it is."""
  who = f"plugin {spec.package} {spec.version} provides {spec.name}"
  span = f"this tinycore supports contracts {version_str(SUPPORTED[0])} to {version_str(SUPPORTED[1])}"
  def refuse(why: str) -> BackendSpec: return replace(spec, contract_status="refused", contract_note=f"{who} {why}")
  if (stated := parse_version(spec.contract_version)) is None:
    return refuse(f"with contract_version={spec.contract_version!r}, which is not a version: state the contract it was written "
                  f"for as a literal (major, minor) of ints, like contract_version={CONTRACT_VERSION!r}; {span}")
  if stated > CONTRACT_VERSION:
    return refuse(f"for contract {version_str(stated)}, newer than this tinycore's: {span}. Upgrade tinycore, or install a "
                  f"release of {spec.package} written for contract {version_str(CONTRACT_VERSION)} or older")
  imported = spec.contract_version is CONTRACT_VERSION
  how = " by importing CONTRACT_VERSION, which is whichever version runs it" if imported else ""
  # contract 1's driver factory under a later version's number: a plugin from the docs of contract 1 imported the constant
  run_as = (1, 0) if stated[0] >= 2 and not binds(spec.driver, 0) else stated
  said = "" if run_as == stated else f" (it states {version_str(stated)}{how}, but its driver factory takes no instance index)"
  if run_as[0] < CONTRACT_VERSION[0] and run_as[1] > ADAPTED.get(run_as[0], (-1,))[0]:
    return refuse(f"for contract {version_str(run_as)}{said}, which " + (f"does not exist: {span}" if run_as[0] in ADAPTED else
                  f"is older than this tinycore supports: {span}. Upgrade {spec.package} ({PORTING})"))
  if run_as[0] == 1 and not binds(spec.driver):   # neither form calls it: say what the contract it states passes
    return refuse(f"for contract {version_str(stated)}, but its driver factory needs an argument, which contract 1 never passed: "
                  f"if it takes the instance index, state contract_version=(2, 0)" if stated[0] == 1 else
                  f"for contract {version_str(stated)}, but its driver factory cannot be called as driver(index) (contract 2 passes "
                  f"the instance index as its one positional argument): make every other parameter optional")
  ports = []
  for major in range(run_as[0], CONTRACT_VERSION[0]): spec, ports = ADAPTED[major][1](spec), ports + [ADAPTED[major][2]]
  if ports:
    return replace(spec, contract_status="adapted", contract_run_as=run_as, contract_note=(
      f"{who} for contract {version_str(run_as)}{said}, which this tinycore adapts, deprecated ({span}; contract {run_as[0]} "
      f"support ends in a later major). To port it: {'; then '.join(ports)} ({PORTING})"))
  return replace(spec, contract_status="current", contract_run_as=run_as, contract_note=(
    f"{who} stating its contract{how}, so no tinycore can tell which contract it was written for: state the version it was "
    f"written for literally, like contract_version={CONTRACT_VERSION!r}") if imported else "")
