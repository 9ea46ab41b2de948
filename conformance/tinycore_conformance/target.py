"""The backend under test: its registry entry, declared dtypes and capabilities, and the skips they imply."""
from __future__ import annotations
import functools, os, sys
from dataclasses import dataclass
from typing import Any
import pytest
from tinycore.dtype import DType, dtypes, ALL_DTYPES, FLOATS, INTS

# readable names for reports and test ids (tinycore's own names are C-style: "half", "uchar", ...)
DTYPE_NAMES: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int16: "int16", dtypes.uint16: "uint16",
  dtypes.int32: "int32", dtypes.uint32: "uint32", dtypes.int64: "int64", dtypes.uint64: "uint64",
  dtypes.float16: "float16", dtypes.bfloat16: "bfloat16", dtypes.float32: "float32", dtypes.float64: "float64"}

# the capability keys the suite reads from BackendSpec.capabilities, their defaults, and what they gate
CAPABILITIES: dict[str, tuple[Any, str]] = {
  "runs": (True, "False: the device executes nothing (like NULL); only the renderer and assembler are checked"),
  "inf_nan": (True, "False: the target does not keep IEEE infinities and NaN; those checks are skipped"),
  "denormals": (True, "False: the target flushes subnormal floats to zero; subnormal checks are skipped"),
  "reduce_scale_elements": (1 << 27, "elements of the reduce_scale section's long sums; an interpreter may declare fewer (at least 2^17)"),
  "max_alloc_bytes": (None, "the largest single allocation the device supports; the large-buffer check stays below it"),
  "fuzz_elements": (100_000, "elements of the fuzz section's largest programs; an interpreter or emulator may declare fewer (at least 2^10)"),
}

def dtype_name(dt: DType) -> str: return DTYPE_NAMES[dt.scalar]

@dataclass
class Target:
  """What the suite knows about the backend before opening it: everything here works without the hardware."""
  name: str
  spec: Any                 # tinycore.runtime.plugin.BackendSpec
  renderer: Any

  @functools.cached_property
  def dtypes(self) -> tuple[DType, ...]:
    """Declared dtypes, in tinycore's order (bool, ints, floats)."""
    return tuple(d for d in ALL_DTYPES if d in self.renderer.supported_dtypes)
  @property
  def undeclared(self) -> tuple[DType, ...]: return tuple(d for d in ALL_DTYPES if d not in self.dtypes)
  @property
  def floats(self) -> tuple[DType, ...]: return tuple(d for d in self.dtypes if d in FLOATS)
  @property
  def ints(self) -> tuple[DType, ...]: return tuple(d for d in self.dtypes if d in INTS)
  def cap(self, key: str) -> Any: return self.spec.capabilities.get(key, CAPABILITIES[key][0])
  def require(self, key: str) -> None:
    """Skip the calling test unless the backend declares capability `key` (booleans that default to True)."""
    if not self.cap(key): pytest.skip(f"{self.name} declares capabilities[{key!r}] = {self.cap(key)!r}")
  def require_dtype(self, *dts: DType) -> None:
    for dt in dts:
      if dt not in self.dtypes: pytest.skip(f"{self.name} does not declare {dtype_name(dt)} in renderer.supported_dtypes")
  def primary(self, *choices: DType) -> DType | None:
    """The first of `choices` the backend declares: the dtype shape-coverage tests run in."""
    return next((d for d in choices if d in self.dtypes), None)
  @property
  def default_float(self) -> DType | None: return self.primary(dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64)
  @property
  def default_int(self) -> DType | None: return self.primary(dtypes.int32, dtypes.int64, dtypes.int16, dtypes.int8)
  def open(self):
    """The opened device (all four roles); raises the registry's error when it does not open."""
    from tinycore.runtime.device import Device
    return Device[self.name]

PIN_ENV = "TINYCORE_CONFORMANCE_PLUGIN"   # "NAME=module file": the plugin the CLI resolved, which its pytest child must test
_pinned_path: list[str] = []              # sys.path when the backend under test was resolved (before pytest prepends anything)

@functools.cache
def resolve_target(name: str) -> Target:
  from tinycore.runtime.device import Device
  key = Device.canonicalize(name).split(":")[0]
  if key not in Device.specs:
    raise pytest.UsageError(f"tinycore-conformance: no backend named {key!r}; installed: {sorted(Device.specs)}"
                            + (f"; errors: {Device.errors}" if Device.errors else ""))
  check_pinned(key)
  _pinned_path[:] = [p for p in sys.path if p]
  # a fresh renderer, never Device.renderer(): the suite must not share state with what it tests
  return Target(key, Device.specs[key], Device.specs[key].renderer())

def check_pinned(name: str) -> None:
  """Refuse to test another copy of the plugin than the one the caller resolved (a copy earlier on PYTHONPATH, or a
  site-packages directory pytest put first while collecting): the module file must be the same."""
  from tinycore.runtime.device import Device
  want, _, file = os.environ.get(PIN_ENV, "").partition("=")
  if want == name and Device.specs[name].module != file:
    raise pytest.UsageError(f"tinycore-conformance: {name} was resolved to {file}, but this process loaded it from "
                            f"{Device.specs[name].module}: two copies of the plugin are on the path (check PYTHONPATH)")

def contract_lines(spec: Any) -> list[str]:
  """The contract version a plugin runs as and its status, then the registry's warning (what to change) where it has one."""
  from tinycore.runtime.plugin import version_str
  status = {"adapted": "adapted (deprecated)"}.get(spec.contract_status, spec.contract_status)
  return [f"plugin contract: {version_str(spec.contract_run_as or spec.contract_version)} {status}",
          *([f"  ContractDeprecationWarning: {spec.contract_note}"] if spec.contract_note else [])]

def child_env(target: Target) -> dict:
  """The environment for a fresh interpreter that loads the very plugin module under test (checked with check_pinned)."""
  return {**os.environ, "PYTHONPATH": os.pathsep.join(_pinned_path), PIN_ENV: f"{target.name}={target.spec.module}"}

def device_option(config) -> str:
  """--device, else $DEV, else the registry's default device."""
  name = config.getoption("device", None) or os.environ.get("DEV")
  if name: return name
  from tinycore.runtime.device import Device
  return Device.DEFAULT

def target_for(config) -> Target: return resolve_target(device_option(config))
