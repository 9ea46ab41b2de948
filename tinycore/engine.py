"""Runs a schedule: compiles each kernel AST once (codegen, render, assemble with the disk cache, load) and launches it."""
from __future__ import annotations
import time
from typing import Any
from tinycore.helpers import DEBUG, BEAM, colored
from tinycore.uop import UOp, Ops
from tinycore.renderer import ProgramSpec
from tinycore.runtime.device import Device, Buffer, GlobalCounters
from tinycore.runtime.diskcache import diskcached, cache_key
from tinycore.runtime.errors import CompileError
from tinycore.runtime.plugin import CONTRACT_VERSION
from tinycore.schedule import ScheduleItem

class CompiledRunner:
  """A loaded kernel plus its launch description."""
  def __init__(self, device: str, spec: ProgramSpec):
    self.device, self.spec = device, spec
    dev = Device[device]
    key = cache_key("binary", dev.spec.name, CONTRACT_VERSION, dev.assembler.target, spec.src)
    try: self.binary = diskcached("binaries", key, lambda: dev.assembler.assemble(spec.src))
    except CompileError: raise
    except Exception as e: raise CompileError(f"{device}: assembling kernel {spec.name} failed: {type(e).__name__}: {e}") from e
    self.program = dev.driver.load(spec.name, self.binary, spec)
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
    gsize, lsize = self.spec.launch_dims(var_vals)
    vals = tuple(var_vals[v.arg[0]] for v in self.spec.vars)
    return self.program(*[b.ensure_allocated()._buf for b in bufs], global_size=gsize, local_size=lsize, vals=vals, wait=wait)

_runners: dict[tuple[str, UOp], CompiledRunner] = {}

def get_runner(device: str, ast: UOp) -> CompiledRunner:
  key = (device, ast)
  if (r := _runners.get(key)) is None:
    from tinycore.codegen import get_program
    ren = Device.renderer(device)
    if BEAM >= 1 and hasattr(Device[device].driver, "load"):
      from tinycore.search import beam_search_program
      spec = beam_search_program(ast, ren, device, int(BEAM))
    else: spec = get_program(ast, ren)
    if DEBUG >= 4: print(spec.src)
    r = _runners[key] = CompiledRunner(device, spec)
  return r

def run_schedule(items: list[ScheduleItem], var_vals: dict[str, int] | None = None) -> None:
  for si in items:
    vv = {**(var_vals or {}), **si.var_vals}
    if si.ast.op is Ops.COPY:
      dest, src = si.bufs
      st = time.perf_counter()
      dest.copyin(src.copyout(memoryview(bytearray(src.nbytes))))
      if DEBUG >= 2: print(f"{colored('copy', 'yellow')} {src.nbytes:10d} bytes {src.device} -> {dest.device} {(time.perf_counter()-st)*1e3:8.3f} ms")
      GlobalCounters.global_mem += src.nbytes
      continue
    if si.bufs[0].size == 0: continue
    device = si.bufs[0].device
    runner = get_runner(device, si.ast)
    t = runner(si.bufs, vv, wait=DEBUG >= 2)
    GlobalCounters.kernel_count += 1
    from tinycore.uop import sym_eval
    GlobalCounters.global_ops += sym_eval(runner.spec.flops, vv) if not isinstance(runner.spec.flops, int) else runner.spec.flops
    GlobalCounters.global_mem += runner.spec.mem_bytes if isinstance(runner.spec.mem_bytes, int) else 0
    if DEBUG >= 2 and t is not None:
      GlobalCounters.time_sum_s += t
      print(f"{colored('*** '+device, 'green')} {GlobalCounters.kernel_count:4d} {runner.spec.name:30s} {t*1e6:9.1f} us  "
            f"{runner.spec.flops/max(t,1e-9)*1e-9:8.2f} GFLOPS  tm {GlobalCounters.time_sum_s*1e3:8.2f} ms")
