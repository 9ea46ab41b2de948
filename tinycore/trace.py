"""The event recorder every layer reports to: the profiler's timeline (PROFILE) and the compiler's rewrite steps (VIZ); off, a check of None."""
from __future__ import annotations
import atexit, base64, contextlib, json, os, tempfile, time, weakref
from typing import Any, Callable, Iterator
from tinycore.helpers import getenv, PROFILE, VIZ

HOST = "HOST"   # the track group of the Python process's own work: its "realize" queue holds schedule and run spans

class Profile:
  """A timeline being recorded: Chrome trace events, one process per device instance and one thread per queue on it."""
  def __init__(self):
    self.t0 = time.perf_counter()
    self.events: list[dict] = []
    self.mem: dict[str, int] = {}   # device -> bytes its allocator has handed out, as last reported
    # the last launch that wrote a buffer (by its base Buffer): a launch reading it draws a flow arrow from there
    self.writer: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()
    self.flows = 0
  def us(self, t: float) -> float: return (t - self.t0) * 1e6
  def span(self, device: str, queue: str, name: str, st: float, en: float, **args) -> dict:
    ev = {"ph": "X", "pid": device, "tid": queue, "name": name, "ts": self.us(st), "dur": (en - st) * 1e6, "args": args}
    self.events.append(ev)
    return ev
  def launch(self, device: str, queue: str, name: str, st: float, device_s: float | None, reads, writes, **args) -> None:
    """A kernel or copy that started at host time `st`. Its length is the driver's own measure when it gives one
    (device_s, seconds), else the host's wait for it (the driver was asked to wait)."""
    en = time.perf_counter()
    ev = self.span(device, queue, name, st, st + device_s if device_s is not None else en, timer="device" if device_s is not None else "host", **args)
    for b in reads:
      if (src := self.writer.get(b.base)) is not None and src is not ev:
        self.flows += 1
        self.events.append({"ph": "s", "id": self.flows, "pid": src["pid"], "tid": src["tid"], "ts": src["ts"], "name": "dependency", "cat": "dependency"})
        self.events.append({"ph": "f", "bp": "e", "id": self.flows, "pid": device, "tid": queue, "ts": ev["ts"], "name": "dependency", "cat": "dependency"})
    for b in writes: self.writer[b.base] = ev
  def memory(self, device: str, live_bytes: int) -> None:
    """A buffer was allocated or freed: a point of the device's memory graph (a counter: it has no queue)."""
    self.mem[device] = live_bytes
    self.events.append({"ph": "C", "pid": device, "name": "memory", "ts": self.us(time.perf_counter()), "args": {"bytes": live_bytes}})
  def chrome_trace(self) -> dict:
    """Trace-event JSON as Perfetto and chrome://tracing read it: numeric pids/tids, named by metadata events."""
    pids: dict[str, int] = {HOST: 0}
    tids: dict[tuple[str, str], int] = {}
    out: list[dict] = []
    for ev in self.events:
      pid = pids.setdefault(ev["pid"], len(pids))
      out.append({**ev, "pid": pid, "tid": tids.setdefault((ev["pid"], ev["tid"]), len(tids) + 1)} if "tid" in ev else {**ev, "pid": pid})
    meta = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}} for name, pid in pids.items()]
    meta += [{"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}} for pid in pids.values()]
    meta += [{"ph": "M", "name": "thread_name", "pid": pids[dev], "tid": tid, "args": {"name": queue}} for (dev, queue), tid in tids.items()]
    meta += [{"ph": "M", "name": "thread_sort_index", "pid": pids[dev], "tid": tid, "args": {"sort_index": tid}} for (dev, queue), tid in tids.items()]
    return {"traceEvents": meta + out, "displayTimeUnit": "ns", "otherData": {"producer": "tinycore"}}
  def save(self, path: str) -> str:
    with open(path, "w") as f: json.dump(self.chrome_trace(), f)
    return path

class Capture:
  """The compiler's work as plain data: groups (a schedule, a kernel's codegen), each with its graph_rewrite calls and
  their steps. Nodes are stored by number with strings for their fields, never as the nodes themselves, so a capture
  keeps no node (and so no buffer) alive."""
  def __init__(self):
    self.ids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
    self.nodes: list[list] = []    # number -> [op, dtype, arg, [source numbers]]
    self.groups: list[dict] = []
    self.group: dict | None = None   # where rewrites are recorded now; rewrites outside any group are not recorded
  def node(self, root: Any) -> int:
    """The number of `root`, storing it and every source not stored yet (sources get smaller numbers)."""
    if (i := self.ids.get(root)) is not None: return i
    stack = [(root, False)]
    while stack:
      u, srcs_done = stack.pop()
      if u in self.ids: continue
      if not srcs_done:
        stack.append((u, True))
        stack.extend((s, False) for s in reversed(u.src) if s not in self.ids)
        continue
      self.ids[u] = len(self.nodes)
      arg = repr(u.arg)
      self.nodes.append([u.op.name, str(u.dtype), arg if len(arg) <= 120 else arg[:117] + "...", [self.ids[s] for s in u.src]])
    return self.ids[root]
  def rewrite_call(self, sink: Any, where: str) -> dict:
    """A graph_rewrite starting on `sink` inside the current group: its steps are appended to the returned record."""
    assert self.group is not None, "rewrites are recorded inside a group"
    call = {"where": where, "input": self.node(sink), "steps": [], "output": None}
    self.group["rewrites"].append(call)
    return call
  @contextlib.contextmanager
  def pass_step(self, name: str, sink: Any) -> Iterator[Callable[[Any], Any]]:
    """A named codegen pass as one rewrite call, recorded before the rewrites it runs inside (their count is its `inner`),
    with one step (the graph before and after) where it changed the graph; the block hands its result to the callable
    it is given."""
    assert self.group is not None, "passes are recorded inside a group"
    calls = self.group["rewrites"]
    call = self.rewrite_call(sink, f"pass {name}")
    first = len(calls)
    def done(out: Any) -> Any:
      if out is not sink: call["steps"].append({"rule": f"pass {name}", "pattern": "", "before": call["input"], "after": self.node(out)})
      call["output"], call["inner"] = self.node(out), len(calls) - first
      return out
    yield done
  def step(self, call: dict, rule: tuple[Any, Callable], before: Any, after: Any) -> None:
    pat, fn = rule
    code = getattr(fn, "__code__", None)
    loc = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code is not None else "?"
    call["steps"].append({"rule": f"{getattr(fn, '__qualname__', fn)} ({loc})", "pattern": repr(pat)[:400],
                          "before": self.node(before), "after": self.node(after)})
  def binary(self, backend: str, name: str, binary: bytes) -> None:
    """The assembler's output for a kernel, recorded by its codegen group as base64 (VIZ shows it as text, the
    backend's disassembly, or hex when it is asked for)."""
    group = next((g for g in reversed(self.groups) if g["kind"] == "kernel" and g["name"] == name and g.get("backend") == backend), None)
    if group is not None and "binary" not in group: group["binary"] = base64.b64encode(binary).decode()
  def to_json(self) -> dict: return {"nodes": self.nodes, "groups": self.groups}

# the recorders: None when off, which is all the hot paths check
profiling: Profile | None = None
capture: Capture | None = None

class _Span:
  """A profiled stretch of host work on a device's queue, and (given `group`: kind, name) a VIZ group collecting the
  rewrites inside it."""
  __slots__ = ("device", "queue", "name", "kind_name", "args", "st", "group", "outer")
  def __init__(self, device: str, queue: str, name: str, group: tuple[str, str] | None, args: dict):
    self.device, self.queue, self.name, self.kind_name, self.args = device, queue, name, group, args
  def __enter__(self) -> _Span:
    self.st, self.group = time.perf_counter(), None
    if capture is not None and self.kind_name is not None:
      kind, name = self.kind_name
      self.outer, self.group = capture.group, {"kind": kind, "name": name, "device": self.device, "rewrites": [], **self.args}
      capture.groups.append(self.group)
      capture.group = self.group
    return self
  def note(self, info: dict, graphs: dict[str, list] | None = None) -> None:
    """Details of the work done: numbers and short strings on the timeline, all of them on the VIZ group, which also
    gets `graphs` (name -> nodes) as node numbers."""
    self.args.update({k: v for k, v in info.items() if isinstance(v, int) or isinstance(v, str) and len(v) < 100})
    if self.group is not None and capture is not None:
      self.group.update(info)
      self.group.update({k: [capture.node(u) for u in us] for k, us in (graphs or {}).items()})
  def __exit__(self, *exc) -> None:
    if profiling is not None: profiling.span(self.device, self.queue, self.name, self.st, time.perf_counter(), **self.args)
    if self.group is not None and capture is not None: capture.group = self.outer

class _Off:
  def __enter__(self) -> _Off: return self
  def note(self, info: dict, graphs: dict[str, list] | None = None) -> None: pass
  def __exit__(self, *exc) -> None: pass
_OFF = _Off()

def span(device: str, queue: str, name: str, group: tuple[str, str] | None = None, **args) -> _Span | _Off:
  """`with span(...) as sp:` times the block on the timeline; with `group` (kind, name), VIZ shows the rewrites inside it
  as a group (see `note`). Nothing is made when both recorders are off."""
  return _OFF if profiling is None and capture is None else _Span(device, queue, name, group, args)

def traced(name: str, summary: Callable[[Any], tuple[dict, dict[str, list]]]) -> Callable:
  """Decorator: each call is a span on the host's realize track and a VIZ group of kind `name`; `summary(result)` gives
  its details and graphs."""
  def wrap(fn: Callable) -> Callable:
    def traced_fn(*args, **kwargs):
      if profiling is None and capture is None: return fn(*args, **kwargs)
      with span(HOST, "realize", name, group=(name, name)) as sp:
        ret = fn(*args, **kwargs)
        sp.note(*summary(ret))
      return ret
    traced_fn.__name__, traced_fn.__qualname__, traced_fn.__doc__, traced_fn.__wrapped__ = fn.__name__, fn.__qualname__, fn.__doc__, fn  # type: ignore[attr-defined]
    return traced_fn
  return wrap

@contextlib.contextmanager
def profile(path: str | os.PathLike | None = None) -> Iterator[Profile]:
  """`with tinycore.profile("trace.json"):` records every launch, copy, compile, schedule step and allocation inside the
  block and writes Chrome trace-event JSON (open it in ui.perfetto.dev or chrome://tracing). Kernels are waited for, one
  at a time, so each has its own time."""
  global profiling
  outer, profiling = profiling, Profile()
  prof = profiling
  try: yield prof
  finally:
    profiling = outer
    if path is not None: prof.save(os.fspath(path))

@contextlib.contextmanager
def capturing() -> Iterator[Capture]:
  """Record the compiler's rewrites inside the block (what VIZ=1 does for the whole run)."""
  global capture
  outer, capture = capture, Capture()
  cap = capture
  try: yield cap
  finally: capture = outer

def _save_at_exit(prof: Profile, path: str) -> None:
  print(f"PROFILE: wrote {prof.save(path)} (open it in https://ui.perfetto.dev or chrome://tracing)")

# PROFILE=1 records the whole run and writes the trace at exit; VIZ=1 records rewrites and the timeline (tinycore.viz
# serves them at exit)
if PROFILE or VIZ: profiling = Profile()
if PROFILE and profiling is not None:
  atexit.register(_save_at_exit, profiling, getenv("PROFILE_PATH", os.path.join(tempfile.gettempdir(), "tinycore_profile.json")))
if VIZ: capture = Capture()
