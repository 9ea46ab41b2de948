"""Runs a schedule: compiles each kernel AST once (codegen, render, assemble with the disk cache, load) and launches it."""
from __future__ import annotations
import time
from collections import defaultdict
from tinycore.helpers import DEBUG, BEAM, colored
from tinycore.uop import UOp, Ops, sym_eval
from tinycore.renderer import ProgramSpec
from tinycore.runtime.device import Device, Buffer, GlobalCounters
from tinycore.runtime.runner import CompiledRunner
from tinycore.codegen import get_program as codegen_program, kernel_name
from tinycore import search
from tinycore.schedule import ScheduleItem

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
    name = _unique_name(backend, kernel_name(ast))
    if BEAM >= 1: spec = search.beam_search_program(ast, ren, device, int(BEAM), name=name)
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
