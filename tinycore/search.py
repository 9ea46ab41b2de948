"""BEAM search: try kernel optimisations (codegen/opt/) on the device, keep the fastest, remember the choice on disk per (device, kernel)."""
from __future__ import annotations
import hashlib, math
import numpy as np
from tinycore.dtype import to_np_dtype
from tinycore.helpers import DEBUG, getenv
from tinycore.uop import UOp, Ops
from tinycore.renderer import Renderer, ProgramSpec
from tinycore.runtime.device import Device, Buffer
from tinycore.runtime.diskcache import cache_key, diskcache_get_obj, diskcache_put_obj
from tinycore.runtime.errors import TinycoreError
from tinycore.runtime.runner import CompiledRunner
from tinycore.codegen import get_program, lower_to_sink
from tinycore.codegen.opt import Opt, OptError, candidate_opts

BEAM_VERSION = 4   # part of the disk cache key: a new set of options (or of heuristics under them) searches again

# ***** timing on the device *****

def ast_key(ast: UOp) -> str:
  """A digest of the kernel's structure, equal across processes for equal kernels."""
  order = ast.toposort()
  ids = {u: i for i, u in enumerate(order)}
  h = hashlib.sha256()
  for u in order: h.update(repr((u.op.name, str(u.dtype), tuple(ids[s] for s in u.src), u.arg)).encode())
  return h.hexdigest()

def _test_buffers(ast: UOp, device: str) -> list[Buffer]:
  """Buffers shaped like the kernel's parameters, filled with small values (NaN-free, so timing is typical)."""
  params = sorted({u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}.items())
  rng = np.random.default_rng(0)
  bufs = []
  for _, p in params:
    b = Buffer(device, p.dtype.size, p.dtype.base)
    npdt = to_np_dtype(b.dtype)
    b.copyin(memoryview(np.ascontiguousarray(rng.integers(0, 3, b.size).astype(npdt))).cast("B"))
    bufs.append(b)
  return bufs

def measure(ast: UOp, ren: Renderer, device: str, opts: tuple[Opt, ...], bufs: list[Buffer], var_vals: dict[str, int], runs: int = 3) -> float:
  """Seconds the kernel takes with `opts` (best of `runs`); inf when the optimisation does not compile."""
  try: runner = CompiledRunner(device, get_program(ast, ren, opts=opts))
  except (TinycoreError, OptError) as e:
    if DEBUG >= 3: print(f"BEAM: {opts} failed: {e}")
    return math.inf
  return min(runner(bufs, var_vals, wait=True) or math.inf for _ in range(runs))

def beam_search_program(ast: UOp, ren: Renderer, device: str, width: int, name: str | None = None) -> ProgramSpec:
  """The kernel compiled with the fastest set of optimisations a beam of `width` finds (cached on disk)."""
  dev = Device[device]
  key = cache_key("beam", BEAM_VERSION, dev.spec.name, dev.spec.version, dev.assembler.target, ast_key(ast), width)
  if (cached := diskcache_get_obj("beam", key)) is not None and isinstance(cached, tuple):
    try: return get_program(ast, ren, name, opts=cached)
    except (TinycoreError, ValueError): pass  # a choice made by another version of an optimisation: search again
  base = lower_to_sink(ast, ren)
  bufs = _test_buffers(ast, device)
  var_vals = {v.arg[0]: v.arg[2] for v in base.toposort() if v.op is Ops.DEFINE_VAR}
  def timed(opts: tuple[Opt, ...]) -> float: return measure(ast, ren, device, opts, bufs, var_vals)
  best_opts, best_t = (), timed(())
  beam = [((), best_t)]
  for _ in range(getenv("BEAM_ROUNDS", 3)):
    tried: dict[tuple[Opt, ...], float] = {}
    for opts, _ in beam:   # each entry grows by one action that applies after its own (they name the ranges it made)
      for o in candidate_opts(base, ren, opts):
        if (cand := opts + (o,)) not in tried: tried[cand] = timed(cand)
    if not tried: break
    beam = sorted(tried.items(), key=lambda kv: kv[1])[:width]
    if beam[0][1] >= best_t: break
    best_opts, best_t = beam[0]
  if DEBUG >= 2: print(f"BEAM {name or ''}: {best_opts} {best_t*1e6:.1f} us")
  diskcache_put_obj("beam", key, best_opts)
  return get_program(ast, ren, name, opts=best_opts)
