"""Runtime: the Allocator and Driver bases, Buffer, and the Device registry that finds backends through entry points."""
from __future__ import annotations
import importlib.metadata, warnings
from collections import OrderedDict
from dataclasses import dataclass, fields
from typing import Any
import pluggy
from tinycore.dtype import DType, DTypeSet, to_np_dtype
from tinycore.helpers import LRU, DEV, GlobalCounters
from tinycore import trace
from tinycore.runtime.errors import PluginError, DeviceError, ContractDeprecationWarning
from tinycore.runtime.plugin import BackendSpec, BackendHooks, PROJECT, ENTRY_POINT_GROUP, instance_name, check_contract, unread_attribute_notes, version_str

# ***** allocator *****

class Allocator:
  """Backend memory. Subclasses implement the underscored methods; the public ones add bookkeeping."""
  supports_offset: bool = False      # `_offset` makes views into a buffer without copying
  supports_transfer: bool = False    # `_transfer` copies between two instances of this backend without the host
  def __init__(self, device: str): self.device, self.live, self.live_bytes = device, 0, 0   # buffers (and bytes) handed out
  def alloc(self, size: int, options: Any = None) -> Any:
    if size < 0: raise ValueError(f"cannot allocate {size} bytes")
    try: buf = self._alloc(max(size, 1), options)
    except MemoryError: raise
    except Exception as e: raise DeviceError(f"{self.device}: allocating {size} bytes failed: {e}") from e
    self.live, self.live_bytes = self.live + 1, self.live_bytes + size
    return buf
  def free(self, buf: Any, size: int, options: Any = None) -> None:
    self.live, self.live_bytes = self.live - 1, self.live_bytes - size
    self._free(buf, max(size, 1), options)
  def _alloc(self, size: int, options: Any) -> Any: raise NotImplementedError
  def _free(self, buf: Any, size: int, options: Any) -> None: pass
  def _copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError
  def _copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError
  def _offset(self, buf: Any, size: int, offset: int) -> Any: raise NotImplementedError
  def _transfer(self, dest: Any, src: Any, size: int, src_dev: Any, dest_dev: Any) -> None:
    """Copy `size` bytes from `src` (on `src_dev`) to `dest` (on `dest_dev`): called on the source's allocator when both are
    instances of this backend (src_dev/dest_dev are their opened devices, with drivers and allocators)."""
    raise NotImplementedError
  def _as_buffer(self, buf: Any) -> memoryview | None: return None  # zero-copy host view, where memory is host memory

class LRUAllocator(Allocator):
  """Keeps freed buffers by (size, options) and hands them out again before asking the backend. It keeps at most as
  many bytes as were ever live at once (peak_bytes): a loop over the same shapes finds everything it frees again, and a
  process whose shapes keep changing does not keep a buffer of every size it ever freed (the least recently freed sizes
  go back to the backend first)."""
  def __init__(self, device: str):
    super().__init__(device)
    self.cache: OrderedDict[tuple[int, Any], list[Any]] = OrderedDict()
    self.cached_bytes = self.peak_bytes = 0
  def alloc(self, size: int, options: Any = None) -> Any:
    if (c := self.cache.get(key := (size or 1, options))):   # (size or 1: max(size, 1) for a size >= 0, without a call)
      self.live, self.live_bytes, self.cached_bytes = self.live + 1, self.live_bytes + size, self.cached_bytes - key[0]
      buf = c.pop()
      if not c: del self.cache[key]
    else:
      try: buf = super().alloc(size, options)
      except (MemoryError, DeviceError):
        self.free_cache()
        buf = super().alloc(size, options)
    if self.live_bytes > self.peak_bytes: self.peak_bytes = self.live_bytes
    return buf
  def free(self, buf: Any, size: int, options: Any = None) -> None:
    if LRU.value and (options is None or not getattr(options, "nolru", False)):
      self.live, self.live_bytes = self.live - 1, self.live_bytes - size
      if (c := self.cache.get(key := (size or 1, options))) is None: c = self.cache[key] = []
      else: self.cache.move_to_end(key)
      c.append(buf)
      self.cached_bytes += key[0]
      while self.cached_bytes > self.peak_bytes:
        (sz, opt), old = next(iter(self.cache.items()))
        self._free(old.pop(0), sz, opt)
        self.cached_bytes -= sz
        if not old: del self.cache[(sz, opt)]
    else: super().free(buf, size, options)
  def free_cache(self) -> None:
    for (sz, opt), bufs in self.cache.items():
      for b in bufs: self._free(b, sz, opt)
    self.cache.clear()
    self.cached_bytes = 0

# ***** buffer *****

class Buffer:
  """Memory on a device: allocated lazily, optionally a view at a byte offset into a base buffer."""
  def __init__(self, device: str, size: int, dtype: DType, options: Any = None, base: Buffer | None = None, offset: int = 0):
    if size < 0: raise ValueError(f"buffer size must be >= 0, got {size}")
    self.device, self.size, self.dtype, self.options, self.offset = device, size, dtype, options, offset
    self._base, self._buf = base, None
    self.initial: bytes | None = None   # contents waiting on the host for the first allocation (see tensor.py's _np_to_buffer_uop)
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
        # the allocator is kept: the memory goes back to the one it came from, without a registry lookup per free
        self._allocator = alloc = Device[self.device].allocator   # (self.allocator and self.nbytes, without their calls)
        self._buf = alloc.alloc(nbytes := self.size * self.dtype.itemsize, self.options)
        if (used := GlobalCounters.mem_used + nbytes) > GlobalCounters.mem_peak: GlobalCounters.mem_peak = used
        GlobalCounters.mem_used = used
        GlobalCounters.mem_used_per_device[self.device] += nbytes
        if trace.profiling is not None: trace.profiling.memory(self.device, alloc.live_bytes)
        if self.initial is not None:
          data, self.initial = self.initial, None
          alloc._copyin(self._buf, memoryview(data))
    return self
  allocate = ensure_allocated
  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    return Buffer(self.device, size, dtype, self.options, self.base, self.offset + offset)
  def __del__(self):
    if getattr(self, "_buf", None) is None or self._base is not None: return
    try:
      (alloc := self._allocator).free(self._buf, nbytes := self.size * self.dtype.itemsize, self.options)
      GlobalCounters.mem_used -= nbytes
      GlobalCounters.mem_used_per_device[self.device] -= nbytes
      if trace.profiling is not None: trace.profiling.memory(self.device, alloc.live_bytes)
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

# ***** driver *****

@dataclass
class LaunchCounters:
  """What one launch did, as an emulating driver counts it (the NV and AMD emulators; bench/gpu.py reads them). Bytes
  count what the threads asked for (per active thread, its access size), not cache lines; instructions one per warp or
  wave that issues one (a thread of it active), thread_instructions one per active thread; barriers each block passing
  one once; threads and blocks those of the grid. shared_wavefronts: the passes the shared-memory banks took to serve
  the warps' accesses (an emulator that models its banks; 0 where it does not), shared_conflicts those of them beyond
  the least the accesses' widths need (bank conflicts). global_sectors: the 32-byte pieces of global memory the warps'
  accesses touched, each warp instruction's distinct ones (an emulator that models it; 0 where it does not): times 32,
  what the memory system moved for global_read + global_written: equal to them where every warp's accesses cover
  whole sectors, 8x for 4-byte accesses each in a sector of its own, less where lanes read the same word."""
  global_read: int = 0
  global_written: int = 0
  global_sectors: int = 0
  shared_read: int = 0
  shared_written: int = 0
  shared_wavefronts: int = 0
  shared_conflicts: int = 0
  barriers: int = 0
  instructions: int = 0
  thread_instructions: int = 0
  threads: int = 0
  blocks: int = 0
  def __iadd__(self, o: LaunchCounters) -> LaunchCounters:
    for f in fields(self): setattr(self, f.name, getattr(self, f.name) + getattr(o, f.name))
    return self

class Driver:
  """Opens a device and loads binaries into programs. `load` returns a callable:
  program(*bufs, global_size, local_size, vals, wait) -> seconds if wait else None.
  `description` names the hardware it opened (`tinycore devices` shows it), e.g. an adapter and the API behind it.
  Optional: `graph(launches) -> replay`, launches of its programs as one submission (TinyJit uses it; see
  docs/writing-a-backend.md, section 5)."""
  description = ""
  def __init__(self, device: str): self.device = device
  def load(self, name: str, binary: bytes, spec: Any) -> Any: raise NotImplementedError
  def synchronize(self) -> None: pass

class Assembler:
  """Turns rendered source into bytes. Identity where the driver consumes source text."""
  target: str = ""   # part of the disk-cache key: the ISA/CPU the bytes are for
  def __init__(self, renderer: Any = None): self.renderer = renderer
  def assemble(self, src: str) -> bytes: return src.encode()
  def disassemble(self, binary: bytes) -> str | None:
    """The bytes `assemble` made as readable machine code (VIZ shows it); None where there is no disassembler."""
    return None

# ***** the device registry *****

@dataclass
class Compiled:
  """One opened device instance: its four roles (the renderer is shared by every instance of its backend)."""
  name: str
  spec: BackendSpec
  renderer: Any
  assembler: Assembler
  driver: Driver
  allocator: Allocator
  def synchronize(self) -> None: self.driver.synchronize()

def _check_hook_result(got: Any) -> list[BackendSpec]:
  """What a `tinycore_backends` hook returned, if it is a list of well-formed BackendSpecs; else a TypeError saying what is wrong."""
  if not isinstance(got, (list, tuple)):
    raise TypeError(f"tinycore_backends must return a list of BackendSpec, got {type(got).__name__}" +
                    (" (wrap the one spec in a list: return [BackendSpec(...)])" if isinstance(got, BackendSpec) else ""))
  for spec in got:
    if not isinstance(spec, BackendSpec): raise TypeError(f"tinycore_backends returned a {type(spec).__name__} in its list, not a BackendSpec")
    if not isinstance(spec.name, str) or not spec.name or ":" in spec.name or spec.name != spec.name.strip():
      raise TypeError(f"BackendSpec.name must be a non-empty device name without ':' (instances are NAME:i), got {spec.name!r}")
    for role in ("renderer", "assembler", "driver", "allocator", "instances"):
      if not callable(getattr(spec, role)): raise TypeError(f"BackendSpec {spec.name}: {role} must be a factory (callable), got {type(getattr(spec, role)).__name__}")
  return list(got)

class _DeviceRegistry:
  """`Device[name]` opens a device instance lazily ("NAME" is instance 0, "NAME:i" instance i); `Device.DEFAULT` is the
  selected default. Backends are found through the `tinycore.backends` entry-point group with pluggy; a plugin that
  fails in any way (import, no hook, a bad return value, a duplicate name, a contract version outside the supported
  range) is reported as a warning and a row of `python -m tinycore devices`, and every other device keeps working. One
  written for an older contract is adapted (plugin.check_contract), with a ContractDeprecationWarning saying what to change."""
  def __init__(self):
    self._specs: dict[str, BackendSpec] | None = None
    self._opened: dict[str, Compiled] = {}     # by canonical device name
    self._renderers: dict[str, Any] = {}       # by backend name
    self._canonical: dict[str, str] = {}
    self.errors: dict[str, str] = {}    # plugin or device name -> why it is unavailable
    self.refused: dict[str, BackendSpec] = {}       # devices offered for a contract version outside the range, or a name already taken
    self.broken: dict[str, tuple[str, str]] = {}    # plugins that failed to load or to describe themselves -> (package, version)
    self._default: str | None = None
  def _report(self, key: str, why: str) -> None:
    self.errors[key] = why
    warnings.warn(why, RuntimeWarning, stacklevel=4)
  def _plugins(self) -> list[tuple[Any, str, tuple[str, str]]]:
    """(module, plugin name, (package, version)) for every entry point that imports: tinycore's own (the built-in devices)
    first, so a plugin cannot take their names, then the others by name."""
    out = []
    for ep in sorted(_entry_points(), key=lambda e: (_dist_info(e)[0] != "tinycore", e.name, e.value)):
      try: out.append((ep.load(), ep.name, _dist_info(ep)))
      except Exception as e:
        self.broken[ep.name] = _dist_info(ep)
        self._report(ep.name, f"plugin {ep.name!r} ({ep.value}) failed to import: {type(e).__name__}: {e}")
    return out
  @property
  def specs(self) -> dict[str, BackendSpec]:
    if self._specs is None:
      specs: dict[str, BackendSpec] = {}
      pm = pluggy.PluginManager(PROJECT)
      pm.add_hookspecs(BackendHooks)
      for mod, pname, (pkg, ver) in self._plugins():
        try:
          pm.register(mod, name=pname)
          impl = next((i for i in pm.hook.tinycore_backends.get_hookimpls() if i.plugin is mod), None)
          if impl is None:
            raise TypeError(f"module {getattr(mod, '__name__', mod)} has no @hookimpl function named tinycore_backends "
                            f"(is the hook name misspelled, or the decorator missing?)")
          got = _check_hook_result(impl.function())
        except Exception as e:
          self.broken[pname] = (pkg, ver)
          self._report(pname, f"plugin {pname!r} (package {pkg}) does not provide a backend: {type(e).__name__}: {e}")
          continue
        for spec in got:
          spec.package, spec.version, spec.module = pkg, ver, getattr(mod, "__file__", None) or "?"
          spec, name = check_contract(spec), spec.name.upper()
          if spec.contract_status == "refused":
            self.refused[name] = spec
            self._report(name, spec.contract_note)
          elif name in specs:
            first = specs[name]
            self.refused[f"{name}[{pkg}]"] = spec
            self._report(f"{name}[{pkg}]", f"device {name} is provided twice: by {first.package} ({first.module}) and by {pkg} "
                                            f"({spec.module}); {first.package}'s is used. Uninstall one of them")
          else:
            specs[name] = spec
            if spec.contract_note: warnings.warn(spec.contract_note, ContractDeprecationWarning, stacklevel=3)
      self._specs = specs
    return self._specs
  def canonicalize(self, device: str | None) -> str:
    """"cpu" -> "CPU", "cpu:0" -> "CPU", "cpu:2" -> "CPU:2"; None -> the default device."""
    if device is None: return self.DEFAULT
    if (c := self._canonical.get(device)) is not None: return c
    name, sep, idx = device.partition(":")
    name = name.upper()
    if sep:
      if not idx.isdigit(): raise ValueError(f"device {device!r}: the instance after ':' must be a number, like {name}:1")
      name = instance_name(name, int(idx))
    self._canonical[device] = name
    return name
  def instance(self, device: str | None) -> tuple[str, int]:
    """(backend name, instance index) of a device name."""
    name, _, idx = self.canonicalize(device).partition(":")
    return name, int(idx) if idx else 0
  def _spec(self, name: str) -> BackendSpec:
    if name not in self.specs:
      raise PluginError(self.errors.get(name) or f"no backend named {name!r}; installed: {sorted(self.specs)}. "
                        "Install a plugin (e.g. pip install tinygrad-cpu) or pick one with DEV=")
    return self.specs[name]
  def __getitem__(self, device: str | None) -> Compiled:
    if (dev := self._opened.get(device)) is not None: return dev   # a canonical name opened before (every Buffer's, every launch)
    dname = self.canonicalize(device)
    if (dev := self._opened.get(dname)) is not None: return dev
    name, index = self.instance(dname)
    spec = self._spec(name)
    try:
      if index > 0 and (n := spec.instances()) is not None and index >= n:
        raise PluginError(f"{dname} does not exist: this machine has {n} instance{'s' if n != 1 else ''} of {name}" +
                          (f" ({name}, {name}:1 ... {name}:{n-1})" if n > 1 else ""))
      renderer = self.renderer(name)
      driver = spec.driver(index)
      dev = Compiled(dname, spec, renderer, spec.assembler(renderer), driver, spec.allocator(driver))
    except PluginError: raise
    except Exception as e:
      self.errors[dname] = f"backend {dname} (package {spec.package}) failed to open: {type(e).__name__}: {e}"
      raise PluginError(self.errors[dname]) from e
    self._opened[dname] = dev
    return dev
  def renderer(self, device: str) -> Any:
    """The renderer alone, shared by every instance of the backend: works without opening the device."""
    name = self.instance(device)[0]
    if name not in self._renderers:
      spec = self._spec(name)
      r = self._renderers[name] = spec.renderer()
      r.supported_dtypes = DTypeSet(r.supported_dtypes)   # tinygrad's programs call it: renderer.supported_dtypes()
      for note in unread_attribute_notes(spec, r): warnings.warn(note, ContractDeprecationWarning, stacklevel=3)
    return self._renderers[name]
  def opens(self, name: str) -> tuple[bool, str]:
    try: self[name]; return True, ""
    except Exception as e: return False, str(e)
  def description(self, name: str) -> str:
    """What an opened device runs on (its driver's description); "" for one that is not open."""
    dev = self._opened.get(self.canonicalize(name))
    return getattr(dev.driver, "description", "") if dev is not None else ""
  def instances(self, name: str) -> int | None:
    """How many instances of a backend this machine has (None: as many as asked for)."""
    return self._spec(self.instance(name)[0]).instances()
  def listing(self) -> list[dict[str, Any]]:
    """Every backend a plugin offered, usable or not: what `python -m tinycore devices` shows."""
    rows = []
    def row(name, spec, ok, err, instances=None):
      rows.append(dict(name=name, package=spec.package, version=spec.version, module=spec.module, contract=version_str(spec.contract_run_as or spec.contract_version),
                       contract_status=spec.contract_status, contract_note=spec.contract_note, instances=instances, opens=ok,
                       runs_on=self.description(name) if ok else "", error=err))
    for name, spec in sorted(self.specs.items()):
      ok, err = self.opens(name)
      try: n = spec.instances()
      except Exception as e: n, err = 0, err or f"instances() raised {type(e).__name__}: {e}"
      row(name, spec, ok, err, "any" if n is None else n)
    for name, spec in sorted(self.refused.items()): row(name, spec, False, self.errors[name])
    for name, (pkg, ver) in sorted(self.broken.items()):
      rows.append(dict(name=name, package=pkg, version=ver, module="?", contract=None, contract_status=None, contract_note="",
                       instances=None, opens=False, runs_on="", error=self.errors[name]))
    return rows
  @property
  def DEFAULT(self) -> str:
    """The device DEV names (the environment's, `with Context(DEV=...)`, or one assigned here), else the first that opens."""
    if DEV.device: return self.canonicalize(DEV.device)
    if self._default is None:
      for spec in sorted(self.specs.values(), key=lambda s: -s.priority):
        if self.opens(spec.name)[0]: self._default = spec.name; break
      else: raise PluginError(f"no backend opens on this machine: {self.errors}")
    return self._default
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: DEV.value = self.canonicalize(name)
  def __iter__(self): return iter(self.specs)

def _entry_points() -> list[importlib.metadata.EntryPoint]:
  return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
def _dist_info(ep) -> tuple[str, str]:
  dist = getattr(ep, "dist", None)
  return (dist.metadata["Name"], dist.version) if dist is not None else (ep.value.split(".")[0], "?")

Device = _DeviceRegistry()

def canonicalize_device(device: str | tuple | list | None) -> str | tuple[str, ...]:
  """A device name as Device knows it (None: the default), or a tuple of them for a sharded tensor."""
  if not isinstance(device, (tuple, list)): return Device.canonicalize(device)
  if len(device) == 0: raise ValueError("a tuple of devices needs at least one device")
  out = tuple(Device.canonicalize(d) for d in device)
  if len(set(out)) != len(out): raise ValueError(f"devices {out} repeat one: each shard needs a device of its own")
  return out
