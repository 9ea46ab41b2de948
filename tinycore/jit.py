"""TinyJit: capture the kernels a function launches on its second call and replay them with new input buffers after (runs of
kernels on a device whose driver builds graphs as one graph each)."""
from __future__ import annotations
import functools
import numpy as np
from typing import Any, Callable, Generic, TypeVar
from tinycore import engine, trace
from tinycore.helpers import DEBUG, JIT
from tinycore.uop import UOp, Ops
from tinycore.schedule import ScheduleItem, buffers
from tinycore.tensor import Tensor, _plain, _storage
from tinycore.runtime.device import Buffer, Device, GlobalCounters

ReturnType = TypeVar("ReturnType")

class JitError(RuntimeError):
  """A call TinyJit cannot replay (the captured kernels were built for other shapes, dtypes or arguments)."""

def _unbind(x: Any) -> Any:
  """A shape dim or argument with its bound Variables replaced by the Variables: what a replay must match."""
  return x.unbind_all()[0] if isinstance(x, UOp) else x

def _describe(key: tuple) -> str:
  kind, *rest = key
  if kind == "tensor": return f"Tensor{tuple(rest[0])} {rest[1]} on {rest[2]}"
  if kind == "var": return f"Variable {rest[0].arg[0]}"
  return f"{rest[0].__name__} {rest[1]!r}"

class TinyJit(Generic[ReturnType]):
  """Decorate a function of Tensors: call 1 runs it normally (compiling its kernels), call 2 runs it while recording every
  kernel launched, later calls replay those kernels with the new arguments' buffers, without tracing or scheduling.

  The function must be the same computation each call: Tensor arguments of the same shapes, dtypes and devices (bound
  Variables may change value), the same other arguments; a different call raises JitError. Tensors it closes over (model
  weights) are used through their buffers, so in-place updates (assign, optimizer steps) are seen; rebinding them is not.
  It returns the tensors of the captured call, overwritten by each replay; Python values it computes are not recomputed.
  Random numbers (Tensor.rand and everything built on it, dropout included) are drawn afresh by each replay: the same
  numbers, in the same order, as the calls would draw without the jit, following Tensor.manual_seed."""
  def __init__(self, fxn: Callable[..., ReturnType]):
    self.fxn = fxn
    functools.update_wrapper(self, fxn)
    self.reset()

  def reset(self) -> None:
    """Forget the capture: the next call runs normally again, the one after captures."""
    self.cnt = 0
    self.captured: list[tuple[ScheduleItem, list[tuple[int, int]]]] = []
    self.signature: tuple | None = None
    self.ret: Any = None
    self.rng_slots: list[tuple[Buffer, int]] = []  # each captured rand call's slot and its call index minus the counter before the call
    self.rng_calls = 0                             # how many rand calls one call of the function makes
    self.segments: list[_Segment] | None = None    # the captured items cut into graph runs and the rest, on the first replay

  def __get__(self, obj, objtype=None):  # decorating a method: bind self like a function would
    return self if obj is None else functools.partial(self.__call__, obj)

  def _inputs(self, args: tuple, kwargs: dict) -> tuple[list[Tensor], dict[str, int], tuple]:
    """The Tensor arguments (realized into buffers of their own), bound Variable values, and the call's signature."""
    flat = list(args) + [kwargs[k] for k in sorted(kwargs)]
    tensors = [a for a in flat if isinstance(a, Tensor)]
    Tensor.realize_all(*tensors)
    for t in tensors:
      if not _plain(t.uop): t.uop = t.contiguous().realize().uop
    var_vals: dict[str, int] = {}
    for x in [x for a in flat for x in ([a] if isinstance(a, UOp) else a.shape if isinstance(a, Tensor) else []) if isinstance(x, UOp)]:
      for name, val in x.unbind_all()[1].items():
        if var_vals.setdefault(name, val) != val: raise JitError(f"{self.__name__}: Variable {name} is bound to two values in one call")
    bufs = [buffers[_storage(t.uop)].base for t in tensors]
    sig, i = [], 0
    for a in flat:
      if isinstance(a, Tensor):
        # which earlier argument shares this one's buffer: a kernel captured reading one buffer twice cannot read two
        alias = next(j for j, b in enumerate(bufs) if b is bufs[i])
        sig.append(("tensor", tuple(_unbind(s) for s in a.shape), a.dtype, a.device, alias))
        i += 1
      elif isinstance(a, UOp) and a.op is Ops.BIND: sig.append(("var", a.src[0]))
      else: sig.append(("value", type(a), a if _is_plain_value(a) else id(a)))
    return tensors, var_vals, (tuple(sorted(kwargs)), tuple(sig))

  def _check(self, signature: tuple) -> None:
    if signature == self.signature: return
    (kw_old, old), (kw_new, new) = self.signature, signature
    if kw_old != kw_new: diff = f"keyword arguments {list(kw_new)} but it was captured with {list(kw_old)}"
    elif len(old) != len(new): diff = f"{len(new)} arguments but it was captured with {len(old)}"
    else:
      i = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
      if old[i][0] == new[i][0] == "tensor" and old[i][:4] == new[i][:4]:
        diff = f"argument {i} shares a buffer with argument {new[i][4]} in this call but not in the captured one (or the reverse)"
      else: diff = f"argument {i} is {_describe(new[i])}, but it was captured as {_describe(old[i])}"
    raise JitError(f"TinyJit({self.__name__}) cannot replay this call: {diff}. Its kernels were captured for the old arguments; "
                   "call it with the same shapes, dtypes and non-Tensor arguments (vary sizes with bound Variables), "
                   "or use a separate TinyJit per shape (or .reset() it)")

  def __call__(self, *args, **kwargs) -> ReturnType:
    if not JIT: return self.fxn(*args, **kwargs)  # Context(JIT=0): no capture, every call runs the function
    tensors, var_vals, signature = self._inputs(args, kwargs)
    if self.cnt == 0:  # a plain run: compiles every kernel, so the capture below records launches only
      prev_slots, Tensor._rng_slots = Tensor._rng_slots, []  # rand reads its call index from a buffer, as in the capture
      try:
        ret = self.fxn(*args, **kwargs)
        Tensor.realize_all(*_tensors_in(ret))
      finally: Tensor._rng_slots = prev_slots
    elif self.cnt == 1:
      if engine.capturing is not None: raise JitError(f"TinyJit({self.__name__}) is capturing inside another TinyJit's capture")
      where = {id(buffers[_storage(t.uop)].base): i for i, t in reversed(list(enumerate(tensors)))}  # buffer -> first argument holding it
      engine.capturing = recorded = []
      prev_slots, Tensor._rng_slots = Tensor._rng_slots, []
      rng_start = Tensor._rng_counter
      try:
        ret = self.fxn(*args, **kwargs)
        Tensor.realize_all(*_tensors_in(ret))
        self.rng_slots = [(slot._buffer(), call - rng_start) for slot, call in Tensor._rng_slots]
        self.rng_calls = Tensor._rng_counter - rng_start
      finally: engine.capturing, Tensor._rng_slots = None, prev_slots
      self.captured = [(si, [(p, where[id(b.base)]) for p, b in enumerate(si.bufs) if id(b.base) in where]) for si in recorded]
      if any(b._base is not None for si, swaps in self.captured for p, _ in swaps for b in [si.bufs[p]]):
        self.captured = []
        raise JitError(f"TinyJit({self.__name__}): a kernel reads an argument through a buffer view; pass contiguous tensors")
      self.signature, self.ret = signature, ret
    else:
      self._check(signature)
      new_bufs: list[Buffer] = [buffers[_storage(t.uop)].base for t in tensors]
      items = []
      for si, swaps in self.captured:
        if not swaps and not var_vals: items.append(si); continue   # reads no argument, no variable: run as captured
        bufs = list(si.bufs)
        for p, i in swaps: bufs[p] = new_bufs[i]
        items.append(ScheduleItem(si.ast, bufs, {**si.var_vals, **{k: v for k, v in var_vals.items() if k in si.var_vals}}))
      # the rand calls of this call: the call indices (and the seed) they would have without the jit
      for buf, off in self.rng_slots: buf.copyin(np.array(Tensor._rng_words(Tensor._rng_counter + off), np.uint32).data)
      Tensor._rng_counter += self.rng_calls
      self._replay(items)
      ret = self.ret
      if var_vals:  # a returned shape that holds a bound Variable takes this call's value
        for t in _tensors_in(ret): t.uop = _rebind(t.uop, var_vals)
    self.cnt += 1
    return ret

  def _replay(self, items: list[ScheduleItem]) -> None:
    """Runs of kernels on a device whose driver offers graphs (Driver.graph, optional) go as one graph each; the rest, and
    everything while kernels are timed (DEBUG>=2, PROFILE) or captured by an outer TinyJit, run as scheduled."""
    if DEBUG.value >= 2 or trace.profiling is not None or engine.capturing is not None: return engine.run_schedule(items)
    if self.segments is None: self.segments = _segments(items)
    for seg in self.segments:
      if seg.runners is None: engine.run_schedule(items[seg.lo:seg.hi]); continue
      launches = [r.launch(si.bufs, si.var_vals) for r, si in zip(seg.runners, items[seg.lo:seg.hi])]
      if seg.graph is None: seg.graph = Device[seg.device].driver.graph(launches)
      seg.graph(launches)
      for r, si in zip(seg.runners, items[seg.lo:seg.hi]):
        flops, mem = r.cost if r.cost is not None else (engine._size(r.spec.flops, si.var_vals), engine._size(r.spec.mem_bytes, si.var_vals))
        GlobalCounters.global_ops += flops
        GlobalCounters.global_mem += mem
      GlobalCounters.kernel_count += len(seg.runners)

class _Segment:
  """Captured items lo..hi: a graph run (its device, the kernels' runners, the driver's graph once built) or, with
  runners None, items replayed as scheduled."""
  def __init__(self, device: str | None, lo: int, hi: int, items: list[ScheduleItem]):
    self.device, self.lo, self.hi, self.graph = device, lo, hi, None
    self.runners = [engine.get_runner(device, si.ast) for si in items[lo:hi]] if device is not None else None

def _graph_device(si: ScheduleItem) -> str | None:
  """The device a captured item can be part of a graph on: a kernel writing a non-empty buffer on one device whose driver
  has the optional `graph`."""
  dev = si.bufs[0].device
  if si.ast.op is not Ops.SINK or not isinstance(dev, str) or si.bufs[0].size == 0: return None
  return dev if callable(getattr(Device[dev].driver, "graph", None)) else None

def _segments(items: list[ScheduleItem]) -> list[_Segment]:
  """items cut into runs of two or more kernels on one graph device, and the rest."""
  runs: list[list] = []
  for i, si in enumerate(items):
    dev = _graph_device(si)
    if runs and runs[-1][0] == dev: runs[-1][2] = i + 1
    else: runs.append([dev, i, i + 1])
  return [_Segment(dev if hi - lo >= 2 else None, lo, hi, items) for dev, lo, hi in runs]

def _rebind(root: UOp, var_vals: dict[str, int]) -> UOp:
  """root with every BIND of a Variable in var_vals bound to its value there, in sources and in (movement) args alike.
  Sources and the UOps in args are rebuilt first, from an explicit stack: a returned graph may be any depth."""
  memo: dict[UOp, UOp] = {}
  def new_arg(a: Any) -> Any: return tuple(new_arg(y) for y in a) if isinstance(a, tuple) else memo[a] if isinstance(a, UOp) else a
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    x, ready = stack.pop()
    if x in memo: continue
    if not ready:
      stack.append((x, True))
      stack.extend((y, False) for y in (*x.src, *_uops_in(x.arg)) if y not in memo)
      continue
    if x.op is Ops.BIND and x.src[0].arg[0] in var_vals: memo[x] = x.replace(src=(x.src[0], x.src[1].replace(arg=var_vals[x.src[0].arg[0]])))
    else:
      src, arg = tuple(memo[y] for y in x.src), new_arg(x.arg)
      same = all(a is b for a, b in zip(src, x.src)) and (arg is x.arg or arg == x.arg and not isinstance(arg, (tuple, UOp)))
      memo[x] = x if same else x.replace(src=src, arg=arg)
  return memo[root]

def _uops_in(a: Any) -> list[UOp]:
  """The UOps in a (nested tuple) arg: a movement op's symbolic sizes."""
  return [a] if isinstance(a, UOp) else [u for y in a for u in _uops_in(y)] if isinstance(a, tuple) else []

def _is_plain_value(a: Any) -> bool:
  """Compared by value between calls (anything else by identity: the same object must be passed)."""
  return isinstance(a, (int, float, str, bool, type(None))) or isinstance(a, tuple) and all(_is_plain_value(x) for x in a)

def _tensors_in(x: Any) -> list[Tensor]:
  if isinstance(x, Tensor): return [x]
  if isinstance(x, (list, tuple)): return [t for v in x for t in _tensors_in(v)]
  if isinstance(x, dict): return [t for v in x.values() for t in _tensors_in(v)]
  return []
