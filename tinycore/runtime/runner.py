"""A loaded kernel: the backend's assembler output for a ProgramSpec (through the disk cache), loaded by its driver, launched on buffers."""
from __future__ import annotations
from tinycore import trace
from tinycore.renderer import ProgramSpec
from tinycore.runtime.device import Device, Buffer
from tinycore.runtime.diskcache import diskcached, cache_key
from tinycore.runtime.errors import CompileError
from tinycore.runtime.plugin import CONTRACT_VERSION

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
    with trace.span(device, "compile", f"assemble {spec.name}"): self.binary = assemble(device, spec.src, spec.name)
    with trace.span(device, "compile", f"load {spec.name}"): self.program = Device[device].driver.load(spec.name, self.binary, spec)
    # launch sizes and cost estimates without variables are computed once, not per launch
    self._dims = spec.launch_dims({}) if all(isinstance(g, int) for g in spec.global_size) else None
    self._var_names = tuple(v.arg[0] for v in spec.vars)
    self.cost = (spec.flops, spec.mem_bytes) if isinstance(spec.flops, int) and isinstance(spec.mem_bytes, int) else None
    self._aligned = spec.aligned if spec.aligned > 1 else 0
  def launch(self, bufs: list[Buffer], var_vals: dict[str, int]) -> tuple:
    """What one launch gives the program: (program, the buffers' device handles, global_size, local_size, vals); a driver's
    optional `graph` takes lists of these."""
    gsize, lsize = self._dims if self._dims is not None else self.spec.launch_dims(var_vals)
    if a := self._aligned:
      for b in bufs:   # only a view can start off the alignment: the spec says which and why
        if b.offset % a: self.spec.check_aligned(bufs)
    vals = tuple([var_vals[v] for v in names]) if (names := self._var_names) else ()
    return self.program, [(b if b._buf is not None else b.ensure_allocated())._buf for b in bufs], gsize, lsize, vals
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
    program, handles, gsize, lsize, vals = self.launch(bufs, var_vals)
    return program(*handles, global_size=gsize, local_size=lsize, vals=vals, wait=wait)
