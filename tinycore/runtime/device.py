"""Runtime: the Allocator and Driver bases, Buffer, and the Device registry that finds backends through entry points."""
from __future__ import annotations
import functools, importlib.metadata, os, warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any
import pluggy
from tinycore.dtype import DType, to_np_dtype
from tinycore.helpers import getenv
from tinycore.runtime.errors import PluginError, DeviceError
from tinycore.runtime.plugin import BackendSpec, BackendHooks, PROJECT, ENTRY_POINT_GROUP, CONTRACT_VERSION

# ***** allocator *****

class Allocator:
  """Backend memory. Subclasses implement the underscored methods; the public ones add bookkeeping."""
  supports_offset: bool = False      # `_offset` makes views into a buffer without copying
  supports_transfer: bool = False    # `_transfer` copies device to device without the host
  def __init__(self, device: str): self.device, self.live = device, 0
  def alloc(self, size: int, options: Any = None) -> Any:
    if size < 0: raise ValueError(f"cannot allocate {size} bytes")
    try: buf = self._alloc(max(size, 1), options)
    except MemoryError: raise
    except Exception as e: raise DeviceError(f"{self.device}: allocating {size} bytes failed: {e}") from e
    self.live += 1
    return buf
  def free(self, buf: Any, size: int, options: Any = None) -> None:
    self.live -= 1
    self._free(buf, max(size, 1), options)
  def _alloc(self, size: int, options: Any) -> Any: raise NotImplementedError
  def _free(self, buf: Any, size: int, options: Any) -> None: pass
  def _copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError
  def _copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError
  def _offset(self, buf: Any, size: int, offset: int) -> Any: raise NotImplementedError
  def _transfer(self, dest: Any, src: Any, size: int, src_dev: Any, dest_dev: Any) -> None: raise NotImplementedError
  def _as_buffer(self, buf: Any) -> memoryview | None: return None  # zero-copy host view, where memory is host memory

class LRUAllocator(Allocator):
  """Keeps freed buffers by (size, options) and hands them out again before asking the backend."""
  def __init__(self, device: str):
    super().__init__(device)
    self.cache: dict[tuple[int, Any], list[Any]] = defaultdict(list)
  def alloc(self, size: int, options: Any = None) -> Any:
    if (c := self.cache.get((max(size, 1), options))):
      self.live += 1
      return c.pop()
    try: return super().alloc(size, options)
    except (MemoryError, DeviceError):
      self.free_cache()
      return super().alloc(size, options)
  def free(self, buf: Any, size: int, options: Any = None) -> None:
    if getenv("LRU", 1) and (options is None or not getattr(options, "nolru", False)):
      self.live -= 1
      self.cache[(max(size, 1), options)].append(buf)
    else: super().free(buf, size, options)
  def free_cache(self) -> None:
    for (sz, opt), bufs in self.cache.items():
      for b in bufs: self._free(b, sz, opt)
    self.cache.clear()

# ***** buffer *****

class Buffer:
  """Memory on a device: allocated lazily, optionally a view at a byte offset into a base buffer."""
  def __init__(self, device: str, size: int, dtype: DType, options: Any = None, base: Buffer | None = None, offset: int = 0):
    if size < 0: raise ValueError(f"buffer size must be >= 0, got {size}")
    self.device, self.size, self.dtype, self.options, self.offset = device, size, dtype, options, offset
    self._base, self._buf = base, None
    if base is not None:
      if base._base is not None: raise ValueError("a view must be made of a base buffer")
      if offset + size * dtype.itemsize > base.nbytes: raise ValueError(f"view [{offset}, +{size*dtype.itemsize}) is outside the base buffer of {base.nbytes} bytes")
  @property
  def base(self) -> Buffer: return self if self._base is None else self._base
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def is_allocated(self) -> bool: return self._buf is not None
  @property
  def allocator(self) -> Allocator: return Device[self.device].allocator
  def ensure_allocated(self) -> Buffer:
    if self._buf is None:
      if self._base is not None:
        self._base.ensure_allocated()
        alloc = self.allocator
        self._buf = alloc._offset(self._base._buf, self.nbytes, self.offset) if alloc.supports_offset else None
        if self._buf is None: raise DeviceError(f"{self.device} does not support buffer views at offsets")
      else:
        self._buf = self.allocator.alloc(self.nbytes, self.options)
        GlobalCounters.mem_used += self.nbytes
        GlobalCounters.mem_peak = max(GlobalCounters.mem_peak, GlobalCounters.mem_used)
    return self
  allocate = ensure_allocated
  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    return Buffer(self.device, size, dtype, self.options, self.base, self.offset + offset)
  def __del__(self):
    if getattr(self, "_buf", None) is None or self._base is not None: return
    try:
      self.allocator.free(self._buf, self.nbytes, self.options)
      GlobalCounters.mem_used -= self.nbytes
    except Exception: pass  # interpreter shutdown: the device may already be gone
  def copyin(self, mv: memoryview | bytes) -> Buffer:
    mv = memoryview(mv).cast("B")
    if mv.nbytes != self.nbytes: raise ValueError(f"copyin of {mv.nbytes} bytes into a buffer of {self.nbytes} bytes")
    self.ensure_allocated()
    if self.nbytes: self.allocator._copyin(self._buf, mv)
    return self
  def copyout(self, mv: memoryview) -> memoryview:
    mv = memoryview(mv).cast("B")
    if mv.nbytes != self.nbytes: raise ValueError(f"copyout of a {self.nbytes}-byte buffer into {mv.nbytes} bytes")
    self.ensure_allocated()
    Device[self.device].synchronize()
    if self.nbytes: self.allocator._copyout(mv, self._buf)
    return mv
  def as_bytes(self) -> bytes:
    out = bytearray(self.nbytes)
    self.copyout(memoryview(out))
    return bytes(out)
  def numpy(self):
    import numpy as np
    return np.frombuffer(self.as_bytes(), dtype=to_np_dtype(self.dtype)).copy()
  def __repr__(self): return f"<Buffer {self.device} {self.size} {self.dtype}{' view@'+str(self.offset) if self._base else ''}>"

class GlobalCounters:
  """Process-wide counters: kernels launched, FLOPs and bytes they were estimated to do, time, live and peak memory."""
  kernel_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  mem_used: int = 0   # bytes in allocated Buffers now
  mem_peak: int = 0   # the most mem_used has been since the last reset
  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0, 0.0
    GlobalCounters.mem_peak = GlobalCounters.mem_used

# ***** driver *****

class Driver:
  """Opens a device and loads binaries into programs. `load` returns a callable:
  program(*bufs, global_size, local_size, vals, wait) -> seconds if wait else None."""
  def __init__(self, device: str): self.device = device
  def load(self, name: str, binary: bytes, spec: Any) -> Any: raise NotImplementedError
  def synchronize(self) -> None: pass

class Assembler:
  """Turns rendered source into bytes. Identity where the driver consumes source text."""
  target: str = ""   # part of the disk-cache key: the ISA/CPU the bytes are for
  def __init__(self, renderer: Any = None): self.renderer = renderer
  def assemble(self, src: str) -> bytes: return src.encode()

# ***** the device registry *****

@dataclass
class Compiled:
  """One opened backend: its four roles."""
  spec: BackendSpec
  renderer: Any
  assembler: Assembler
  driver: Driver
  allocator: Allocator
  def synchronize(self) -> None: self.driver.synchronize()

class _DeviceRegistry:
  """`Device[name]` opens a backend lazily; `Device.DEFAULT` is the selected default. Backends are found
  through the `tinycore.backends` entry-point group with pluggy; a failing plugin is reported, not fatal."""
  def __init__(self):
    self._specs: dict[str, BackendSpec] | None = None
    self._opened: dict[str, Compiled] = {}
    self._renderers: dict[str, Any] = {}
    self.errors: dict[str, str] = {}    # plugin or device name -> why it is unavailable
    self.refused: dict[str, BackendSpec] = {}       # devices offered for another contract version
    self.broken: dict[str, tuple[str, str]] = {}    # plugins that failed to load -> (package, version)
    self._default: str | None = None
  def _plugin_manager(self) -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(BackendHooks)
    from tinycore.runtime import builtin
    pm.register(builtin, name="tinycore.builtin")
    for ep in _entry_points():
      try:
        mod = ep.load()
        pm.register(mod, name=f"{ep.name}")
        self._packages[id(mod)] = _dist_info(ep)
      except Exception as e:
        self.errors[ep.name], self.broken[ep.name] = f"plugin {ep.name!r} ({ep.value}) failed to import: {type(e).__name__}: {e}", _dist_info(ep)
        warnings.warn(self.errors[ep.name], RuntimeWarning, stacklevel=3)
    return pm
  @property
  def specs(self) -> dict[str, BackendSpec]:
    if self._specs is None:
      self._packages: dict[int, tuple[str, str]] = {}
      pm, specs = self._plugin_manager(), {}
      for impl in pm.hook.tinycore_backends.get_hookimpls():
        pkg, ver = self._packages.get(id(impl.plugin), ("tinycore", _version("tinycore")))
        try: got = impl.function()
        except Exception as e:
          self.errors[impl.plugin_name] = f"plugin {impl.plugin_name!r} raised in tinycore_backends: {type(e).__name__}: {e}"
          self.broken[impl.plugin_name] = (pkg, ver)
          warnings.warn(self.errors[impl.plugin_name], RuntimeWarning, stacklevel=3)
          continue
        for spec in got or []:
          spec.package, spec.version = pkg, ver
          if spec.contract_version != CONTRACT_VERSION:
            self.errors[spec.name] = (f"plugin {pkg} provides {spec.name} for contract version {spec.contract_version}, "
                                      f"but this tinycore speaks version {CONTRACT_VERSION}; upgrade the plugin or tinycore")
            self.refused[spec.name] = spec
            warnings.warn(self.errors[spec.name], RuntimeWarning, stacklevel=3)
            continue
          specs[spec.name.upper()] = spec
      self._specs = specs
    return self._specs
  def canonicalize(self, device: str | None) -> str:
    if device is None: return self.DEFAULT
    d = device.split(":")[0].upper()
    return d + (":" + device.split(":", 1)[1] if ":" in device else "")
  def __getitem__(self, device: str) -> Compiled:
    name = self.canonicalize(device).split(":")[0]
    if name in self._opened: return self._opened[name]
    if name not in self.specs:
      why = self.errors.get(name)
      raise PluginError(why or f"no backend named {name!r}; installed: {sorted(self.specs)}. Install a plugin (e.g. pip install tinygrad-cpu) or pick one with DEV=")
    spec = self.specs[name]
    try:
      renderer = self.renderer(name)
      driver = spec.driver()
      dev = Compiled(spec, renderer, spec.assembler(renderer), driver, spec.allocator(driver))
    except Exception as e:
      self.errors[name] = f"backend {name} (package {spec.package}) failed to open: {type(e).__name__}: {e}"
      raise PluginError(self.errors[name]) from e
    self._opened[name] = dev
    return dev
  def renderer(self, device: str) -> Any:
    """The renderer alone: works without opening the device."""
    name = self.canonicalize(device).split(":")[0]
    if name not in self._renderers:
      if name not in self.specs: raise PluginError(self.errors.get(name) or f"no backend named {name!r}; installed: {sorted(self.specs)}")
      self._renderers[name] = self.specs[name].renderer()
    return self._renderers[name]
  def opens(self, name: str) -> tuple[bool, str]:
    try: self[name]; return True, ""
    except Exception as e: return False, str(e)
  def listing(self) -> list[dict[str, Any]]:
    """Every backend a plugin offered, usable or not: what `python -m tinycore devices` shows."""
    rows = []
    for name, spec in sorted(self.specs.items()):
      ok, err = self.opens(name)
      rows.append(dict(name=name, package=spec.package, version=spec.version, contract=spec.contract_version, opens=ok, error=err))
    for name, spec in sorted(self.refused.items()):
      rows.append(dict(name=name, package=spec.package, version=spec.version, contract=spec.contract_version, opens=False, error=self.errors[name]))
    for name, (pkg, ver) in sorted(self.broken.items()):
      rows.append(dict(name=name, package=pkg, version=ver, contract=None, opens=False, error=self.errors[name]))
    return rows
  @property
  def DEFAULT(self) -> str:
    if self._default is None:
      if (env := os.environ.get("DEV")): self._default = self.canonicalize(env)
      else:
        for spec in sorted(self.specs.values(), key=lambda s: -s.priority):
          if self.opens(spec.name)[0]: self._default = spec.name; break
        else: raise PluginError(f"no backend opens on this machine: {self.errors}")
    return self._default
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: self._default = self.canonicalize(name)
  def __iter__(self): return iter(self.specs)

def _entry_points() -> list[importlib.metadata.EntryPoint]:
  return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
def _dist_info(ep) -> tuple[str, str]:
  dist = getattr(ep, "dist", None)
  return (dist.metadata["Name"], dist.version) if dist is not None else (ep.value.split(".")[0], "?")
@functools.cache
def _version(pkg: str) -> str:
  try: return importlib.metadata.version(pkg)
  except importlib.metadata.PackageNotFoundError: return "dev"

Device = _DeviceRegistry()
