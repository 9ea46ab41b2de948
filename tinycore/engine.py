"""Runs a schedule: compiles each kernel AST once (codegen, render, assemble with the disk cache, load) and launches it."""
from __future__ import annotations
import time
from collections import defaultdict
from tinycore.helpers import DEBUG, BEAM, colored
from tinycore.uop import UOp, Ops, sym_eval
from tinycore.renderer import ProgramSpec
from tinycore.runtime.device import Device, Buffer, GlobalCounters
from tinycore.runtime.diskcache import diskcached, cache_key
from tinycore.runtime.errors import CompileError
from tinycore.runtime.plugin import CONTRACT_VERSION
from tinycore.schedule import ScheduleItem

def assemble(device: str, src: str, name: str) -> bytes:
  """The backend's assembler output for `src`, through the disk cache (a corrupt entry is rebuilt)."""
  dev = Device[device]
  key = cache_key("binary", dev.spec.name, dev.spec.version, CONTRACT_VERSION, dev.assembler.target, src)
  try: return diskcached("binaries", key, lambda: dev.assembler.assemble(src))
  except CompileError: raise
  except Exception as e: raise CompileError(f"{device}: assembling kernel {name} failed: {type(e).__name__}: {e}") from e

class CompiledRunner:
  """A loaded kernel plus its launch description."""
  def __init__(self, device: str, spec: ProgramSpec):
    self.device, self.spec = device, spec
    self.binary = assemble(device, spec.src, spec.name)
    self.program = Device[device].driver.load(spec.name, self.binary, spec)
    # launch sizes and cost estimates without variables are computed once, not per launch
    self._dims = spec.launch_dims({}) if all(isinstance(g, int) for g in spec.global_size) else None
    self._var_names = tuple(v.arg[0] for v in spec.vars)
    self.cost = (spec.flops, spec.mem_bytes) if isinstance(spec.flops, int) and isinstance(spec.mem_bytes, int) else None
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
    gsize, lsize = self._dims if self._dims is not None else self.spec.launch_dims(var_vals)
    vals = tuple(var_vals[v] for v in self._var_names)
    return self.program(*[(b if b._buf is not None else b.ensure_allocated())._buf for b in bufs], global_size=gsize, local_size=lsize, vals=vals, wait=wait)

_runners: dict[tuple[str, UOp], CompiledRunner] = {}   # (device instance, kernel AST) -> loaded on that instance
_programs: dict[tuple[object, UOp], ProgramSpec] = {}   # (renderer, kernel AST) -> rendered once for every instance of a backend
_names: dict[str, dict[str, int]] = defaultdict(dict)  # backend -> kernel name -> how many different kernels carry it

def _unique_name(backend: str, name: str) -> str:
  """Kernels with equal shapes get equal names; a suffix tells them apart (drivers may key loaded code by name)."""
  n = _names[backend].get(name, 0)
  _names[backend][name] = n + 1
  return name if n == 0 else f"{name}n{n}"

def get_program(device: str, ast: UOp) -> ProgramSpec:
  """The kernel for `ast` on `device`'s backend: optimised and rendered once, then shared by every instance."""
  backend = Device.instance(device)[0]
  ren = Device.renderer(backend)
  if (spec := _programs.get((ren, ast))) is None:
    from tinycore.codegen import get_program as codegen_program, kernel_name
    name = _unique_name(backend, kernel_name(ast))
    if BEAM >= 1:
      from tinycore.search import beam_search_program
      spec = beam_search_program(ast, ren, device, int(BEAM), name=name)
    else: spec = codegen_program(ast, ren, name=name)
    if DEBUG >= 4: print(spec.src)
    _programs[(ren, ast)] = spec
  return spec

def get_runner(device: str, ast: UOp) -> CompiledRunner:
  key = (device, ast)
  if (r := _runners.get(key)) is None: r = _runners[key] = CompiledRunner(device, get_program(device, ast))
  return r

# set to a list by TinyJit (tinycore/jit.py) while it captures a function: every item run is appended, to be replayed
capturing: list[ScheduleItem] | None = None

def copy(dest: Buffer, src: Buffer) -> None:
  """Device to device: the backend's transfer when both are instances of a backend that has one, else through host
  memory (read in place where the source is host memory)."""
  sdev, ddev = Device[src.device], Device[dest.device]
  src.ensure_allocated(); dest.ensure_allocated()
  sa = sdev.allocator
  if sdev.spec is ddev.spec and sa.supports_transfer:
    sa._transfer(dest._buf, src._buf, src.nbytes, sdev, ddev)
    return
  sdev.synchronize()
  host = sa._as_buffer(src._buf)
  dest.copyin(host if host is not None else src.copyout(memoryview(bytearray(src.nbytes))))

def _size(x, var_vals: dict[str, int]) -> int: return x if isinstance(x, int) else sym_eval(x, var_vals)

def run_schedule(items: list[ScheduleItem], var_vals: dict[str, int] | None = None) -> None:
  for si in items:
    vv = {**var_vals, **si.var_vals} if var_vals else si.var_vals
    if capturing is not None: capturing.append(ScheduleItem(si.ast, list(si.bufs), dict(vv)))
    if si.ast.op is Ops.COPY:
      dest, src = si.bufs
      st = time.perf_counter()
      copy(dest, src)
      GlobalCounters.global_mem += src.nbytes
      if DEBUG >= 2: print(f"{colored('*** copy', 'yellow')} {src.nbytes:10d} bytes {src.device} -> {dest.device} {(time.perf_counter()-st)*1e6:9.1f} us")
      continue
    if si.bufs[0].size == 0: continue
    device = si.bufs[0].device
    runner = get_runner(device, si.ast)
    t = runner(si.bufs, vv, wait=DEBUG >= 2)
    flops, mem = runner.cost if runner.cost is not None else (_size(runner.spec.flops, vv), _size(runner.spec.mem_bytes, vv))
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += flops
    GlobalCounters.global_mem += mem
    if t is not None: GlobalCounters.time_sum_s += t
    if DEBUG >= 2:
      tm = f"{t*1e6:9.1f} us {flops/max(t or 0, 1e-9)*1e-9:8.2f} GFLOPS {mem/max(t or 0, 1e-9)*1e-9:8.2f} GB/s" if t is not None else ""
      print(f"{colored('*** '+device, 'green')} {GlobalCounters.kernel_count:5d} {runner.spec.name:30s} bufs {len(si.bufs):2d} {tm}"
            f"  total {GlobalCounters.time_sum_s*1e3:8.2f} ms")
