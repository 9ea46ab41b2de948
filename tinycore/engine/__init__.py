"""Runs a schedule: compiles each kernel AST once (codegen, render, assemble with the disk cache, load) and launches it."""
from __future__ import annotations
import time, weakref
from collections import OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor
from tinycore.helpers import DEBUG, BEAM, ContextVar, colored
from tinycore.uop import UOp, Ops, sym_eval, format_uops
from tinycore.dtype import acc_dtype
from tinycore.renderer import ProgramSpec
from tinycore.runtime.device import Device, Buffer, GlobalCounters
from tinycore.runtime.runner import CompiledRunner
from tinycore.codegen import get_program as codegen_program, kernel_name
from tinycore import search, trace
from tinycore.schedule import ScheduleItem
from tinycore.multi import MultiBuffer, DEVICE_NUM, device_groups, pick_strategy, allreduce_plan, allreduce_on_host, fold_ast, Plan

# compiled kernels are kept in two LRU caches of KERNEL_CACHE_SIZE entries each: a process whose shapes keep changing
# would otherwise keep every kernel AST (and its nodes) alive. An evicted kernel is simply made again on next use (a
# JIT capture or a schedule template holds the AST, never the runner): rendered anew under its old name, so the same
# source, and assembled from the disk cache.
KERNEL_CACHE_SIZE = ContextVar("KERNEL_CACHE_SIZE", 1000)
_runners: OrderedDict[tuple[str, UOp], CompiledRunner] = OrderedDict()   # (device instance, kernel AST) -> loaded on that instance
_programs: OrderedDict[tuple[object, UOp], ProgramSpec] = OrderedDict()  # (renderer, kernel AST) -> rendered once for every instance of a backend
_names: dict[str, dict[str, int]] = defaultdict(dict)  # backend -> kernel name -> how many different kernels carry it
# kernel AST -> renderer -> the name its program got: held weakly, so it costs nothing once the AST is gone
_kernel_names: weakref.WeakKeyDictionary[UOp, dict[object, str]] = weakref.WeakKeyDictionary()
stats = {"rendered": 0, "loaded": 0}   # programs rendered and runners loaded so far (a full cache no longer grows: count these)

def _keep(cache: OrderedDict, key, value):
  """value, stored as the most recently used entry of an LRU cache, the least recently used dropped past the bound."""
  cache[key] = value
  while len(cache) > KERNEL_CACHE_SIZE.value: cache.popitem(last=False)
  return value

def _unique_name(backend: str, ren, ast: UOp) -> str:
  """Kernels with equal shapes get equal names; a suffix tells them apart (drivers may key loaded code by name). A
  suffix is never handed out twice, and a program made again after eviction gets back the name it had."""
  if (name := (names := _kernel_names.setdefault(ast, {})).get(ren)) is None:
    n = _names[backend].get(base := kernel_name(ast), 0)
    _names[backend][base] = n + 1
    name = names[ren] = base if n == 0 else f"{base}n{n}"
  return name

def get_program(device: str, ast: UOp) -> ProgramSpec:
  """The kernel for `ast` on `device`'s backend: optimised and rendered once, then shared by every instance."""
  backend = Device.instance(device)[0]
  ren = Device.renderer(backend)
  if (spec := _programs.get(key := (ren, ast))) is not None:
    _programs.move_to_end(key)
    return spec
  name = _unique_name(backend, ren, ast)
  with trace.span(device, "compile", f"codegen {name}", group=("kernel", name), backend=backend) as sp:
    if BEAM >= 1: spec = search.beam_search_program(ast, ren, device, int(BEAM), name=name)
    else: spec = codegen_program(ast, ren, name=name)
    if trace.capture is not None: sp.note({"uops": format_uops(spec.uops), "src": spec.src}, {"ast": [ast]})
  if DEBUG >= 4: print(spec.src)
  stats["rendered"] += 1
  return _keep(_programs, key, spec)

def get_runner(device: str, ast: UOp) -> CompiledRunner:
  if (r := _runners.get(key := (device, ast))) is not None:
    _runners.move_to_end(key)
    return r
  with trace.span(device, "compile", "compile") as sp:
    r = _keep(_runners, key, CompiledRunner(device, get_program(device, ast)))
    sp.note({"kernel": r.spec.name})
  stats["loaded"] += 1
  if trace.capture is not None: trace.capture.binary(Device.instance(device)[0], r.spec.name, r.binary)
  return r

# set to a list by TinyJit (tinycore/jit.py) while it captures a function: every item run is appended, to be replayed
capturing: list[ScheduleItem] | None = None

def copy(dest: Buffer | MultiBuffer, src: Buffer | MultiBuffer) -> str:
  """Device to device: the backend's transfer when both are instances of a backend that has one, else through host
  memory (read in place where the source is host memory). Says which it was: "transfer" or "copy". A tuple of devices
  holds the whole tensor on each device here (replicated): to a tuple, every device gets a copy (shard by shard from a
  tuple of the same length); from a tuple to one device, the first shard is copied."""
  if isinstance(dest, MultiBuffer):
    hows = {copy(d, src.bufs[i] if isinstance(src, MultiBuffer) and len(src.bufs) == len(dest.bufs) else src) for i, d in enumerate(dest.bufs)}
    return "transfer" if hows == {"transfer"} else "copy"
  if isinstance(src, MultiBuffer): src = src.bufs[0]
  sdev, ddev = Device[src.device], Device[dest.device]
  src.ensure_allocated(); dest.ensure_allocated()
  sa = sdev.allocator
  if sdev.spec is ddev.spec and sa.supports_transfer:
    sa._transfer(dest._buf, src._buf, src.nbytes, sdev, ddev)
    return "transfer"
  sdev.synchronize()
  host = sa._as_buffer(src._buf)
  dest.copyin(host if host is not None else src.copyout(memoryview(bytearray(src.nbytes))))
  return "copy"

def allgather(dest: Buffer | MultiBuffer, src: MultiBuffer) -> None:
  """The shards one after another (concatenated along the first axis) into dest, or into each of its devices."""
  for d in (dest.bufs if isinstance(dest, MultiBuffer) else [dest]):
    if d.allocator.supports_offset:
      for i, s in enumerate(src.bufs): copy(d.view(s.size, s.dtype, i * s.nbytes), s)
    else: d.copyin(b"".join(s.as_bytes() for s in src.bufs))  # no views on this device: assembled in host memory

def _part(b: Buffer, lo: int, hi: int) -> Buffer: return b if (lo, hi) == (0, b.size) else b.view(hi - lo, b.dtype, lo * b.dtype.itemsize)

def _on(device: str, b: Buffer) -> Buffer:
  """b, or a copy of it on `device`."""
  if b.device == device: return b
  copy(out := Buffer(device, b.size, b.dtype), b)
  return out

def _runs_plan(srcs: list[Buffer], plan: Plan) -> bool:
  """Can these devices run the plan's hops as kernels: the dtypes, and views for a plan in chunks?"""
  need = {srcs[0].dtype, acc_dtype(srcs[0].dtype)}
  return all(need <= Device.renderer(b.device).supported_dtypes and (len(plan) == 1 or b.allocator.supports_offset) for b in srcs)

def allreduce_on_devices(dests: list[Buffer], srcs: list[Buffer], op: Ops, plan: Plan) -> None:
  """A plan run as kernels: each hop copies its inputs to the device that folds (the backend's transfer where it has
  one) and launches the fold there; the chunk's result is then copied to every device. Bit for bit the host's fold."""
  for lo, hi, hops in plan:
    partial = None
    for k, (d, shards) in enumerate(hops):
      device = srcs[d].device
      ins = ([] if partial is None else [_on(device, partial)]) + [_on(device, _part(srcs[i], lo, hi)) for i in shards]
      partial = Buffer(device, hi - lo, srcs[0].dtype if k == len(hops) - 1 else acc_dtype(srcs[0].dtype))
      get_runner(device, fold_ast([b.dtype for b in ins], partial.dtype, op, hi - lo))([partial, *ins], {})
    for b in dests: copy(_part(b, lo, hi), partial)

def allreduce(dest: MultiBuffer, src: MultiBuffer, op: Ops, strategy: str | None = None, groups: list[list[int]] | None = None) -> str:
  """dest's every shard = the reduction of src's shards (of its group's: `groups` partitions the devices, default one
  group of all), by a strategy of multi.py (the same bits whichever), as kernels on the devices where the backend can
  run them, else in host memory. Says which strategy and where: "ring on devices", "naive on host"."""
  for group in groups or [list(range(len(src.bufs)))]:
    dests, srcs = [dest.bufs[i] for i in group], [src.bufs[i] for i in group]
    how = strategy or pick_strategy(src.nbytes, len(srcs))
    plan = allreduce_plan(len(srcs), src.size, how)
    where = "devices" if _runs_plan(srcs, plan) else "host"
    (allreduce_on_devices if where == "devices" else allreduce_on_host)(dests, srcs, op, plan)
  return f"{how} on {where}"

def _size(x, var_vals: dict[str, int]) -> int: return x if isinstance(x, int) else sym_eval(x, var_vals)

_pool: ThreadPoolExecutor | None = None

def _name(device: str | tuple[str, ...]) -> str: return device if isinstance(device, str) else ",".join(device)

def _launch_all(device: tuple[str, ...], ast: UOp, bufs: list, vv: dict[str, int], wait: bool, prof=None) -> tuple[CompiledRunner, float | None]:
  """One kernel on every device of a tuple (its shard of each buffer, `_device_num` = its index), concurrently: devices run
  their shards side by side (CPU instances each on their share of the cores). The profiler gets one launch per device."""
  global _pool
  runners = [get_runner(d, ast) for d in device]
  def one(i: int):
    st = time.perf_counter()
    t = runners[i]([b.bufs[i] for b in bufs], {**vv, DEVICE_NUM: i}, wait=wait)
    if prof is not None:
      spec = runners[i].spec
      prof.launch(device[i], "kernels", spec.name, st, t, [bufs[j].bufs[i] for j in spec.ins], [bufs[j].bufs[i] for j in spec.outs])
    return t
  if len(set(device)) < 2: times = [one(i) for i in range(len(device))]
  else:
    if _pool is None: _pool = ThreadPoolExecutor(8, thread_name_prefix="tinycore-multi")
    times = list(_pool.map(one, range(len(device))))
  return runners[0], (max(times) if all(t is not None for t in times) else None)

_TRANSFER_OPS = (Ops.COPY, Ops.ALLREDUCE, Ops.ALLGATHER)

_SINK = Ops.SINK

def run_schedule(items: list[ScheduleItem], var_vals: dict[str, int] | None = None) -> None:
  if trace.profiling is None and DEBUG.value < 2 and capturing is None:
    # the common run (no profiler, no per-kernel printing, no JIT capture): a kernel on one device is launched with
    # nothing else looked at; a transfer or a sharded kernel goes through the general loop, one item at a time
    for si in items:
      if si.ast.op is _SINK and (device := (b0 := si.bufs[0]).device).__class__ is str:
        if b0.size == 0: continue
        runner = get_runner(device, si.ast)
        vv = {**var_vals, **si.var_vals} if var_vals else si.var_vals
        _count(runner, vv, runner(si.bufs, vv))
      else: _run_items([si], var_vals)
    return
  _run_items(items, var_vals)

def _count(runner: CompiledRunner, vv: dict[str, int], t: float | None) -> tuple[int, int]:
  """A launched kernel (that ran in t seconds, when timed) added to the GlobalCounters: (its FLOPs, its bytes)."""
  flops, mem = runner.cost if runner.cost is not None else (_size(runner.spec.flops, vv), _size(runner.spec.mem_bytes, vv))
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += flops
  GlobalCounters.global_mem += mem
  if t is not None: GlobalCounters.time_sum_s += t
  return flops, mem

def _run_items(items: list[ScheduleItem], var_vals: dict[str, int] | None) -> None:
  """Every item, with the profiler's records, DEBUG's printing and the JIT's capture where they are on."""
  if (prof := trace.profiling) is not None: run_st = time.perf_counter()
  debug = DEBUG.value   # read once: a ContextVar comparison is a Python call, and this loop runs for every kernel
  wait = debug >= 2 or prof is not None
  if debug >= 4:   # every kernel's source first (renderers need no device): it shows even where the device then fails to open
    for si in items:
      if si.ast.op is not Ops.SINK or si.bufs[0].size == 0: continue
      for d in (si.bufs[0].device,) if isinstance(si.bufs[0].device, str) else si.bufs[0].device: get_program(d, si.ast)
  for si in items:
    vv = {**var_vals, **si.var_vals} if var_vals else si.var_vals
    if capturing is not None: capturing.append(ScheduleItem(si.ast, list(si.bufs), dict(vv)))
    if si.ast.op in _TRANSFER_OPS:
      dest, src = si.bufs
      st = time.perf_counter()
      if si.ast.op is Ops.COPY: how = copy(dest, src)
      elif si.ast.op is Ops.ALLGATHER: how = "allgather"; allgather(dest, src)
      else:
        op, grid, dims = si.ast.arg
        how = "allreduce " + allreduce(dest, src, op, groups=device_groups(grid, dims))
      if prof is not None: prof.launch(_name(dest.device), "copies", f"{how} {_name(src.device)} -> {_name(dest.device)}", st, None, [src], [dest], bytes=src.nbytes)
      GlobalCounters.global_mem += src.nbytes
      if debug >= 2: print(f"{colored('*** '+how, 'yellow')} {src.nbytes:10d} bytes {_name(src.device)} -> {_name(dest.device)} {(time.perf_counter()-st)*1e6:9.1f} us")
      continue
    if (b0 := si.bufs[0]).size == 0: continue
    if (device := b0.device).__class__ is tuple: runner, t = _launch_all(device, si.ast, si.bufs, vv, wait, prof)
    else:
      runner = get_runner(device, si.ast)
      if prof is not None: st = time.perf_counter()
      t = runner(si.bufs, vv, wait=wait)
    flops, mem = _count(runner, vv, t)
    if prof is not None and not isinstance(device, tuple):
      prof.launch(device, "kernels", runner.spec.name, st, t, [si.bufs[i] for i in runner.spec.ins], [si.bufs[i] for i in runner.spec.outs], flops=flops, bytes=mem)
    if debug >= 2:
      tm = f"{t*1e6:9.1f} us {flops/max(t or 0, 1e-9)*1e-9:8.2f} GFLOPS {mem/max(t or 0, 1e-9)*1e-9:8.2f} GB/s" if t is not None else ""
      print(f"{colored('*** '+_name(device), 'green')} {GlobalCounters.kernel_count:5d} {runner.spec.name:30s} bufs {len(si.bufs):2d} {tm}"
            f"  total {GlobalCounters.time_sum_s*1e3:8.2f} ms")
  if prof is not None: prof.span(trace.HOST, "realize", "run", run_st, time.perf_counter(), items=len(items))
