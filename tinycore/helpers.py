"""Small shared utilities: environment flags, Context, math on shapes, timing, progress bars, downloads (tinygrad's helper names)."""
from __future__ import annotations
import contextlib, cProfile, functools, gzip, hashlib, itertools, math, operator, os, pathlib, pstats, shutil, sys, tempfile, time, urllib.request
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")

def getenv(key: str, default: Any = 0) -> Any:
  """Read an environment flag, converted to the type of `default`."""
  val = os.environ.get(key)
  return default if val is None else type(default)(val)

class ContextVar:
  """A global setting read from the environment once, overridable with `Context`."""
  _registry: dict[str, ContextVar] = {}
  def __init__(self, key: str, default: Any):
    self.key, self.value = key, getenv(key, default)
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

DEBUG, BEAM, NOOPT = ContextVar("DEBUG", 0), ContextVar("BEAM", 0), ContextVar("NOOPT", 0)
CACHELEVEL = ContextVar("CACHELEVEL", 2)
# `with Context(TRAINING=1):` (tinygrad's spelling), Tensor.training or `with Tensor.train():` turn dropout on
TRAINING = ContextVar("TRAINING", 0)
# the dtype Python floats / ints become (dtypes.default_float and default_int read and write these); a name or a DType
DEFAULT_FLOAT, DEFAULT_INT = ContextVar("DEFAULT_FLOAT", "float32"), ContextVar("DEFAULT_INT", "int32")
JIT = ContextVar("JIT", 1)  # 0: TinyJit calls the function every time, capturing nothing
LRU = ContextVar("LRU", 1)  # 0: a freed buffer goes back to the device at once instead of into the allocator's cache

def prod(xs: Iterable[T], start: Any = 1) -> Any: return functools.reduce(operator.mul, xs, start)
def all_int(xs: Iterable[Any]) -> bool: return all(map(isinstance, xs, itertools.repeat(int)))  # C-level: no generator frame per call
def argfix(*x):
  """Accept f(1,2,3) and f((1,2,3)) alike."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"bad arguments {x}: pass either one sequence or several ints")
    return tuple(x[0])
  return tuple(x)
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))
def all_same(xs: Sequence[Any]) -> bool: return all(x == xs[0] for x in xs)
def partition(xs: Iterable[T], pred: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  """(the items pred holds for, the rest), each in order."""
  yes: list[T] = []
  no: list[T] = []
  for x in xs: (yes if pred(x) else no).append(x)
  return yes, no
def unwrap(x: T | None) -> T:
  if x is None: raise ValueError("unwrap: the value is None")
  return x
def get_child(obj: Any, key: str) -> Any:
  """Follow a dotted path ("layers.0.weight"): numbers index, dict keys look up, other names are attributes."""
  for k in key.split("."): obj = obj[int(k)] if k.isdigit() else obj[k] if isinstance(obj, dict) else getattr(obj, k)
  return obj
def ceildiv(a, b): return -(a // -b)
def round_up(a: int, b: int) -> int: return ceildiv(a, b) * b
def strides_for_shape(shape: Sequence[Any]) -> tuple[Any, ...]:
  strides, acc = [], 1
  for s in reversed(shape): strides.append(acc); acc = acc * s
  return tuple(reversed(strides))
def make_tuple(x: int | Sequence[int], n: int) -> tuple[int, ...]:
  return (x,)*n if isinstance(x, int) else tuple(x)
def colored(s: str, color: str | None) -> str:
  codes = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
  return s if color is None else f"\033[{codes[color]}m{s}\033[0m"
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
          allow_caching: bool = not getenv("DISABLE_HTTP_CACHE"), timeout: float = 30.0) -> pathlib.Path:
  """The local path of url's content: a local path as is, else a file in the download cache (cache_dir()/downloads),
  fetched once. Offline, a missing file raises OSError naming the url and the path to place it at."""
  if url.startswith(("/", ".")): return pathlib.Path(url)
  fp = pathlib.Path(name) if isinstance(name, pathlib.Path) or (name and "/" in name) else \
    pathlib.Path(cache_dir()) / "downloads" / (subdir or "") / ((name or hashlib.md5(url.encode()).hexdigest()) + (".gunzip" if gunzip else ""))
  if fp.is_file() and allow_caching: return fp
  fp.parent.mkdir(parents=True, exist_ok=True)
  try:
    with urllib.request.urlopen(url, timeout=timeout) as r, tempfile.NamedTemporaryFile(dir=fp.parent, delete=False) as f:
      shutil.copyfileobj(gzip.GzipFile(fileobj=r) if gunzip else r, f)
  except OSError as e: raise OSError(f"fetch: cannot download {url} ({e}); put the file at {fp} to use it offline") from None
  os.replace(f.name, fp)
  return fp

def normalize_axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
  return axis + ndim if axis < 0 else axis

def is_pow2(x: int) -> bool: return x > 0 and (x & (x-1)) == 0
def fmt_float(x: float) -> str: return repr(x) if math.isfinite(x) else str(x)
