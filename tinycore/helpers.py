"""Small shared utilities: environment flags, Context, math on shapes, timing, progress bars, downloads (tinygrad's helper names)."""
from __future__ import annotations
import time
START_TIME = time.perf_counter()
import collections, contextlib, cProfile, dataclasses, functools, gc, getpass, gzip, hashlib, itertools, math, operator, os, pathlib, pstats, re, shutil, \
  string, sys, tarfile, tempfile, urllib.request
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

T, U = TypeVar("T"), TypeVar("U")
OSX, WIN = sys.platform == "darwin", sys.platform == "win32"
BASEDIR = pathlib.Path(__file__).parent   # the package's directory

def getenv(key: str, default: Any = 0) -> Any:
  """Read an environment flag, converted to the type of `default`; set but empty (`NV_EMULATE= cmd`, the shell's way of
  clearing one) reads as unset."""
  if not (val := os.environ.get(key)): return default
  try: return type(default)(val)
  except ValueError: raise ValueError(f"environment variable {key}={val!r} cannot be read as {type(default).__name__}; set it like {key}={default!r}, or unset it") from None

class ContextVar:
  """A global setting read from the environment once, overridable with `Context`."""
  _registry: dict[str, ContextVar] = {}
  def __init__(self, key: str, default_value: Any):
    self.key, self.value = key, getenv(key, default_value)
    ContextVar._registry[key] = self
  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __ge__(self, x) -> bool: return self.value >= x
  def __gt__(self, x) -> bool: return self.value > x
  def __lt__(self, x) -> bool: return self.value < x
  def __le__(self, x) -> bool: return self.value <= x
  def __eq__(self, x) -> bool: return self.value == x
  def __hash__(self): return hash(self.key)
  def __repr__(self): return f"ContextVar({self.key}={self.value!r})"

class Context(contextlib.ContextDecorator):
  """`with Context(DEBUG=2): ...` temporarily overrides ContextVars."""
  def __init__(self, **kwargs: Any): self.kwargs = kwargs
  def __enter__(self):
    unknown = [k for k in self.kwargs if k not in ContextVar._registry]
    if unknown: raise KeyError(f"unknown Context variable(s) {unknown}; known: {sorted(ContextVar._registry)}")
    self.old = {k: ContextVar._registry[k].value for k in self.kwargs}
    for k, v in self.kwargs.items(): ContextVar._registry[k].value = v
  def __exit__(self, *exc):
    for k, v in self.old.items(): ContextVar._registry[k].value = v

@dataclasses.dataclass(frozen=True)
class Target:
  """What DEV names: `[interface+]DEVICE[:renderer[:arch]]` in tinygrad's form; a number after the device is tinycore's
  instance (DEV=CPU:1), part of the device. tinycore picks a backend's renderer with that backend's own setting."""
  device: str = ""
  renderer: str = ""
  arch: str = ""
  interface: str = ""
  @staticmethod
  def parse(s: str) -> Target:
    interface, _, s = s.rpartition("+")
    dev, *rest = s.split(":") if s else [""]
    if rest and rest[0].isdigit(): dev, rest = f"{dev}:{rest[0]}", rest[1:]
    if len(rest) > 2: raise ValueError(f"DEV={s!r}: expected DEVICE[:renderer[:arch]]")
    renderer, arch = (rest + ["", ""])[:2]
    return Target(dev.upper(), renderer.upper(), arch, interface)

class _DEV(ContextVar):
  """DEV, the default device (Device.DEFAULT reads it): `with Context(DEV="PYTHON"):`, or its fields (DEV.device, DEV.renderer)."""
  def __getattr__(self, k: str) -> Any: return getattr(Target.parse(str(self.value)), k)

DEV, DEBUG, BEAM, NOOPT = _DEV("DEV", ""), ContextVar("DEBUG", 0), ContextVar("BEAM", 0), ContextVar("NOOPT", 0)
CACHELEVEL = ContextVar("CACHELEVEL", 2)
# `with Context(TRAINING=1):` (tinygrad's spelling), Tensor.training or `with Tensor.train():` turn dropout on
TRAINING = ContextVar("TRAINING", 0)
# the dtype Python floats / ints become (dtypes.default_float and default_int read and write these); a name or a DType
DEFAULT_FLOAT, DEFAULT_INT = ContextVar("DEFAULT_FLOAT", "float32"), ContextVar("DEFAULT_INT", "int32")
JIT = ContextVar("JIT", 1)  # 0: TinyJit calls the function every time, capturing nothing
LRU = ContextVar("LRU", 1)  # 0: a freed buffer goes back to the device at once instead of into the allocator's cache
NO_COLOR = ContextVar("NO_COLOR", 0)  # 1: colored() leaves text plain
# read when tinycore is imported (tinycore/trace.py): PROFILE records the timeline, VIZ the rewrites too
VIZ = ContextVar("VIZ", 0)
PROFILE = ContextVar("PROFILE", 0)
# tinygrad's Context variables that tune its own compiler, scheduler and drivers. Accepted, so that programs setting them run,
# with no effect here: docs/tensor-api.md says what tinycore does instead of each
IMAGE, FLOAT16, OPENPILOT_HACKS, WINO = ContextVar("IMAGE", 0), ContextVar("FLOAT16", 0), ContextVar("OPENPILOT_HACKS", 0), ContextVar("WINO", 0)
JIT_BATCH_SIZE, CAPTURING, TRACEMETA = ContextVar("JIT_BATCH_SIZE", 32), ContextVar("CAPTURING", 1), ContextVar("TRACEMETA", 1)
USE_TC, TC_SELECT, TC_OPT = ContextVar("TC", 1), ContextVar("TC_SELECT", -1), ContextVar("TC_OPT", 0)
TRANSCENDENTAL, NOLOCALS, SPLIT_REDUCEOP = ContextVar("TRANSCENDENTAL", 1), ContextVar("NOLOCALS", 0), ContextVar("SPLIT_REDUCEOP", 1)
NO_MEMORY_PLANNER, RING, ALL2ALL, ALLREDUCE_CAST = ContextVar("NO_MEMORY_PLANNER", 0), ContextVar("RING", 1), ContextVar("ALL2ALL", 0), ContextVar("ALLREDUCE_CAST", 1)
IGNORE_BEAM_CACHE, VALIDATE_WITH_CPU, DISABLE_FAST_IDIV = ContextVar("IGNORE_BEAM_CACHE", 0), ContextVar("VALIDATE_WITH_CPU", 0), ContextVar("DISABLE_FAST_IDIV", 1)
FUSE_OPTIM, ALLOW_DEVICE_USAGE, MAX_BUFFER_SIZE = ContextVar("FUSE_OPTIM", 0), ContextVar("ALLOW_DEVICE_USAGE", 1), ContextVar("MAX_BUFFER_SIZE", 0)
MAX_KERNEL_BUFFERS, EMULATED_DTYPES = ContextVar("MAX_KERNEL_BUFFERS", 0), ContextVar("EMULATED_DTYPES", "")
CAPTURE_PROCESS_REPLAY, NULL_ALLOW_COPYOUT = ContextVar("CAPTURE_PROCESS_REPLAY", 0), ContextVar("NULL_ALLOW_COPYOUT", 0)
NUM_CPU_THREADS = ContextVar("NUM_CPU_THREADS", os.cpu_count() or 1)
PARALLEL, SPEC, CHECK_OOB, PCONTIG = ContextVar("PARALLEL", 0), ContextVar("SPEC", 1), ContextVar("CHECK_OOB", 0), ContextVar("PCONTIG", 0)
DEBUG_RANGEIFY, TUPLE_ORDER, CCACHE = ContextVar("DEBUG_RANGEIFY", 0), ContextVar("TUPLE_ORDER", 1), ContextVar("CCACHE", 1)
ALLOW_TF32, SCACHE, USE_ATOMICS, DISALLOW_BROADCAST = ContextVar("ALLOW_TF32", 0), ContextVar("SCACHE", 1), ContextVar("USE_ATOMICS", 0), ContextVar("DISALLOW_BROADCAST", 0)
REWRITE_STACK_LIMIT, TRACK_MATCH_STATS = ContextVar("REWRITE_STACK_LIMIT", 250000), ContextVar("TRACK_MATCH_STATS", 0)

class GlobalCounters:
  """Process-wide counters: kernels launched, FLOPs and bytes they were estimated to do, time, live and peak memory."""
  kernel_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  mem_used: int = 0   # bytes in allocated Buffers now
  mem_peak: int = 0   # the most mem_used has been since the last reset
  mem_used_per_device: collections.defaultdict[str, int] = collections.defaultdict(int)   # mem_used by device (not reset)
  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0, 0.0
    GlobalCounters.mem_peak = GlobalCounters.mem_used

def prod(x: Iterable[T], start: Any = 1) -> Any: return functools.reduce(operator.mul, x, start)
def all_int(t: Iterable[Any]) -> bool: return all(map(isinstance, t, itertools.repeat(int)))  # C-level: no generator frame per call
def argfix(*x):
  """Accept f(1,2,3) and f((1,2,3)) alike."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"bad arguments {x}: pass either one sequence or several ints")
    return tuple(x[0])
  return tuple(x)
def flatten(l: Iterable[Iterable[T]]) -> list[T]: return [x for xs in l for x in xs]
def dedup(x: Iterable[T]) -> list[T]: return list(dict.fromkeys(x))
def all_same(items: Sequence[Any]) -> bool: return all(x == items[0] for x in items)
def partition(itr: Iterable[T], fxn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  """(the items fxn holds for, the rest), each in order."""
  yes: list[T] = []
  no: list[T] = []
  for x in itr: (yes if fxn(x) else no).append(x)
  return yes, no
def unwrap(x: T | None) -> T:
  if x is None: raise ValueError("unwrap: the value is None")
  return x
def get_child(obj: Any, key: str) -> Any:
  """Follow a dotted path ("layers.0.weight"): numbers index, dict keys look up, other names are attributes."""
  for k in key.split("."): obj = obj[int(k)] if k.isdigit() else obj[k] if isinstance(obj, dict) else getattr(obj, k)
  return obj
def ceildiv(num, amt): return -(num // -amt)
def round_up(num: int, amt: int) -> int: return ceildiv(num, amt) * amt
def strides_for_shape(shape: Sequence[Any]) -> tuple[Any, ...]:
  strides, acc = [], 1
  for s in reversed(shape): strides.append(acc); acc = acc * s
  return tuple(reversed(strides))
def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
  return (x,)*cnt if isinstance(x, int) else tuple(x)
def colored(st: str, color: str | None, background: bool = False) -> str:
  """st in an ANSI color (upper case: the bright one); plain with NO_COLOR=1."""
  if color is None or NO_COLOR: return st
  code = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"].index(color.lower()) + 30 + 10 * background + 60 * color.isupper()
  return f"\033[{code}m{st}\033[0m"
def cache_dir() -> str:
  return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tinycore")

@contextlib.contextmanager
def timed(label: str, enabled: bool = True) -> Iterator[None]:
  st = time.perf_counter()
  yield
  if enabled: print(f"{label}: {(time.perf_counter()-st)*1e3:.2f} ms")

class Timing(contextlib.ContextDecorator):
  """`with Timing("step "):` prints the block's wall time in ms (plus on_exit(ns) if given)."""
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
  def __enter__(self): self.st = time.perf_counter_ns()
  def __exit__(self, *exc):
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))

class Profiling(contextlib.ContextDecorator):
  """`with Profiling():` runs the block under cProfile and prints the top `frac` of functions by `sort` (or dumps to fn)."""
  def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: str | None = None, ts: float = 1):
    self.enabled, self.sort, self.frac, self.fn, self.ts = enabled, sort, frac, fn, ts
  def __enter__(self):
    self.pr = cProfile.Profile()
    if self.enabled: self.pr.enable()
  def __exit__(self, *exc):
    if not self.enabled: return
    self.pr.disable()
    if self.fn: self.pr.dump_stats(self.fn)
    stats = pstats.Stats(self.pr).strip_dirs().sort_stats(self.sort)
    stats.print_stats(max(1, int(len(stats.stats) * self.frac)))  # type: ignore[attr-defined]

class tqdm(Generic[T]):
  """A progress bar on stderr: iterate through it (`for x in tqdm(xs)`) or call update(n); set_description names it."""
  def __init__(self, iterable: Iterable[T] | None = None, desc: str = "", disable: bool | None = False, unit: str = "it",
               unit_scale: bool = False, total: int | None = None, rate: int = 100):
    self.iterable, self.unit, self.unit_scale, self.rate = iterable, unit, unit_scale, rate
    self.disable = (not sys.stderr.isatty()) if disable is None else disable
    self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else 0)  # type: ignore[arg-type]
    self.n, self.st, self.last = 0, time.perf_counter(), 0.0
    self.set_description(desc)
  def set_description(self, desc: str) -> None: self.desc = f"{desc}: " if desc else ""
  def __iter__(self) -> Iterator[T]:
    if self.iterable is None: raise TypeError("tqdm: iterate over a tqdm made with an iterable, or call update(n)")
    for x in self.iterable:
      yield x
      self.update(1)
    self.close()
  def __enter__(self): return self
  def __exit__(self, *exc): self.close()
  def update(self, n: int = 1) -> None:
    self.n += n
    if not self.disable and (now := time.perf_counter()) - self.last >= 1 / self.rate: self.last = now; self._draw(False)
  def close(self) -> None:
    if not self.disable: self._draw(True)
  def _draw(self, end: bool) -> None:
    el = time.perf_counter() - self.st
    count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
    pct = f"{100 * self.n / self.total:3.0f}% " if self.total else ""
    print(f"\r{self.desc}{pct}{count} [{el:.1f}s, {self.n / el if el else 0:.2f}{self.unit}/s]", end="\n" if end else "", file=sys.stderr, flush=True)
  @classmethod
  def write(cls, s: str) -> None: print(f"\r\033[K{s}", file=sys.stderr, flush=True)
def trange(n: int, **kw) -> tqdm[int]: return tqdm(range(n), total=n, **kw)

def fetch(url: str, name: str | pathlib.Path | None = None, subdir: str | None = None, gunzip: bool = False,
          allow_caching: bool = not getenv("DISABLE_HTTP_CACHE"), headers: dict[str, str] | None = None, sha256: str | None = None,
          extract: bool = False, timeout: float = 30.0) -> pathlib.Path:
  """The local path of url's content: a local path as is, else a file in the download cache (cache_dir()/downloads),
  fetched once. `headers` go with the request (and into the cached name); with `sha256` a cached file of another digest
  is fetched again and a download of another digest raises RuntimeError; `extract` unpacks the tar archive into a
  directory beside it and returns that. Offline, a missing file raises OSError naming the url and the path to place it at."""
  if url.startswith(("/", ".")): return pathlib.Path(url)
  tag = "_" + hashlib.md5(repr(sorted(headers.items())).encode()).hexdigest() if headers else ""
  fp = pathlib.Path(name) if isinstance(name, pathlib.Path) or (name and "/" in name) else \
    pathlib.Path(cache_dir()) / "downloads" / (subdir or "") / ((name or hashlib.md5(url.encode()).hexdigest()) + tag + (".gunzip" if gunzip else ""))
  def digest(path: pathlib.Path) -> str: return hashlib.sha256(path.read_bytes()).hexdigest()
  if not (fp.is_file() and allow_caching and (sha256 is None or digest(fp) == sha256)):
    fp.parent.mkdir(parents=True, exist_ok=True)
    try:
      with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r, \
           tempfile.NamedTemporaryFile(dir=fp.parent, delete=False) as f:
        shutil.copyfileobj(gzip.GzipFile(fileobj=r) if gunzip else r, f)
    except OSError as e: raise OSError(f"fetch: cannot download {url} ({e}); put the file at {fp} to use it offline") from None
    if sha256 is not None and (got := digest(pathlib.Path(f.name))) != sha256:
      os.unlink(f.name)
      raise RuntimeError(f"fetch: {url} has sha256 {got}, expected {sha256}")
    os.replace(f.name, fp)
    shutil.rmtree(fp.parent / f"{fp.name}.extract", ignore_errors=True)   # a new file: its old extraction is stale
  if not extract: return fp
  if not (out := fp.parent / f"{fp.name}.extract").is_dir():
    tmp = tempfile.mkdtemp(dir=fp.parent)   # extracted aside, then renamed: a concurrent fetch never sees half of it
    with tarfile.open(fp) as tar: tar.extractall(tmp, filter="data")
    try: os.rename(tmp, out)
    except OSError: shutil.rmtree(tmp, ignore_errors=True)
  return out

def normalize_axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
  return axis + ndim if axis < 0 else axis

def is_pow2(x: int) -> bool: return x > 0 and (x & (x-1)) == 0

# ***** tinygrad's small helpers, for programs that import them *****
def argsort(x): return type(x)(sorted(range(len(x)), key=x.__getitem__))
def get_shape(x) -> tuple[int, ...]:
  """The shape of a nested list (() for a scalar or a string); a ragged list raises ValueError."""
  if isinstance(x, str) or not hasattr(x, "__len__") or getattr(x, "shape", None) == (): return ()
  subs = [get_shape(v) for v in x]
  if any(s != subs[0] for s in subs): raise ValueError(f"ragged nested list: rows of shapes {sorted(set(subs))}")
  return (len(subs),) + (subs[0] if subs else ())
def fully_flatten(l) -> list:
  if isinstance(l, str) or not (hasattr(l, "__len__") and hasattr(l, "__getitem__")): return [l]
  if getattr(l, "shape", None) == (): return [l[()]]
  return [v for sub in l for v in fully_flatten(sub)]
def to_tuple(x) -> tuple: return x if isinstance(x, tuple) else (x,)
def round_down(num: int, amt: int) -> int: return num // amt * amt
def next_power2(x: int) -> int: return 1 << max(x - 1, 0).bit_length()
def cdiv(x: int, y: int) -> int: return 0 if y == 0 else (abs(x) // abs(y)) * (-1 if (x < 0) != (y < 0) else 1)  # C's: toward zero, / 0 is 0
def cmod(x: int, y: int) -> int: return x - cdiv(x, y) * y
def floordiv(x: int, y: int) -> int: return 0 if y == 0 else x // y
def floormod(x: int, y: int) -> int: return x - floordiv(x, y) * y
def getbits(value: int, start: int, end: int) -> int: return (value >> start) & ((1 << (end - start + 1)) - 1)  # bits start..end inclusive
def polyN(x, p: Sequence[float]):
  """p[0] * x**(n-1) + ... + p[-1] by Horner's rule (x may be a Tensor)."""
  acc: Any = 0.0
  for c in p: acc = acc * x + c
  return acc
def merge_dicts(ds: Iterable[dict[T, U]]) -> dict[T, U]:
  out: dict[T, U] = {}
  for d in ds:
    for k, v in d.items():
      if k in out and out[k] != v: raise RuntimeError(f"merge_dicts: key {k!r} has the values {out[k]!r} and {v!r}")
      out[k] = v
  return out
def get_single_element(x: Sequence[T]) -> T:
  if len(x) != 1: raise ValueError(f"expected one element, got {len(x)}: {x!r}")
  return x[0]
def pluralize(st: str, cnt: int) -> str: return f"{cnt} {st}{'' if cnt == 1 else 's'}"
def time_to_str(t: float, w: int = 8) -> str: return f"{t:{w}.2f}s " if t > 10 else f"{t * 1e3:{w}.2f}ms" if t > 1e-2 else f"{t * 1e6:{w}.2f}us"
def size_to_str(s: int) -> str:
  for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
    if s >= size: return f"{s / size:.2f} {unit}"
  return f"{s} B"
def ansistrip(s: str) -> str: return re.sub(r"\x1b\[(K|.*?m)", "", s)
def ansilen(s: str) -> int: return len(ansistrip(s))
def ansipad(s: str, w: int) -> str: return s + " " * max(w - ansilen(s), 0)
def colorize_float(x: float) -> str: return colored(f"{x:7.2f}x", "green" if x < 0.75 else "red" if x > 1.15 else "yellow")
def to_function_name(s: str) -> str: return "".join(c if c in string.ascii_letters + string.digits + "_" else f"{ord(c):02X}" for c in ansistrip(s))
def temp(x: str, append_user: bool = False) -> str:
  """A path in the system's temporary directory (with `.user` appended when asked: one per user of a shared machine)."""
  return (pathlib.Path(tempfile.gettempdir()) / (f"{x}.{getpass.getuser()}" if append_user else x)).as_posix()
class disable_gc(contextlib.ContextDecorator):
  """The block runs with Python's garbage collector off (restored after, if it was on)."""
  def __enter__(self): self.was, _ = gc.isenabled(), gc.disable()
  def __exit__(self, *exc):
    if self.was: gc.enable()
def fmt_float(x: float) -> str: return repr(x) if math.isfinite(x) else str(x)
