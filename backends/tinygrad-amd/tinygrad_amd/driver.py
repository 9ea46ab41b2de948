"""AMD driver: loads HSA code objects and launches them, on the RDNA3 emulator (AMD_EMULATE=1) or on a GPU through KFD."""
from __future__ import annotations
import os, time
import numpy as np
from tinycore.runtime.device import Driver
from tinycore.runtime.errors import CompileError, DeviceError
from tinycore.runtime.plugin import instance_name
from tinygrad_amd.codeobject import parse, CodeObjectError
from tinygrad_amd.renderer import GROUP

def emulating() -> bool: return os.environ.get("AMD_EMULATE", "") not in ("", "0")

def launch_shape(global_size, local_size) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """(grid in work-items, workgroup size): without local sizes global_size counts work-items, in workgroups of GROUP;
  with them it counts workgroups."""
  g = tuple(global_size) + (1,) * (3 - len(global_size))
  if local_size is None: return g, (GROUP, 1, 1)
  l = tuple(local_size) + (1,) * (3 - len(local_size))
  return tuple(a * b for a, b in zip(g, l)), l

def kernargs(name: str, kernarg_size: int, addrs: list[int], vals) -> np.ndarray:
  """The kernarg segment: buffer addresses (8 bytes each), then the integer variables (4 bytes each)."""
  if 8 * len(addrs) + 4 * len(vals) != kernarg_size:
    raise DeviceError(f"AMD: kernel {name} takes {kernarg_size} bytes of arguments, got {len(addrs)} buffers and {len(vals)} variables")
  out = np.zeros(max(kernarg_size, 8), np.uint8)
  out[:8 * len(addrs)].view(np.uint64)[:] = addrs
  if vals: out[8 * len(addrs):8 * len(addrs) + 4 * len(vals)].view(np.int32)[:] = vals
  return out

class EmulatedProgram:
  """A kernel run by the RDNA3 emulator on host memory; `counters` holds what its last launch did (also logged in
  emulator.LAUNCHES)."""
  def __init__(self, driver: AMDDriver, name: str, binary: bytes):
    from tinygrad_amd.emulator import Program, EmulatorError, LaunchCounters
    self.name, self.counters = name, LaunchCounters()
    try: self.prog = Program(parse(binary))
    except (CodeObjectError, EmulatorError) as e: raise CompileError(f"AMD: cannot load kernel {name!r}: {e}") from e
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait: bool = False):
    from tinygrad_amd.emulator import launch, EmulatorError, LAUNCHES
    grid, group = launch_shape(global_size, local_size)
    args = kernargs(self.name, self.prog.loaded.kernarg_size, [b.addr for b in bufs], vals)
    st = time.perf_counter()
    try: self.counters = launch(self.prog, [b.mem for b in bufs], args, grid, group)
    except EmulatorError as e: raise DeviceError(f"AMD (emulator): kernel {self.name}: {e}") from e
    LAUNCHES.append((self.name, self.counters))
    return time.perf_counter() - st if wait else None

class AMDDriver(Driver):
  def __init__(self, index: int = 0):
    super().__init__(instance_name("AMD", index))
    self.emulated = emulating()
    if not self.emulated:
      from tinygrad_amd.kfd import KFDDevice
      self.kfd = KFDDevice(index)
  def load(self, name: str, binary: bytes, spec=None):
    if self.emulated: return EmulatedProgram(self, name, binary)
    return self.kfd.load(name, binary)
  def synchronize(self) -> None:
    if not self.emulated: self.kfd.synchronize()
