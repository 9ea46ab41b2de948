"""Small shared utilities: environment flags, Context, math on shapes, timing."""
from __future__ import annotations
import contextlib, functools, math, operator, os, time
from typing import Any, Iterable, Iterator, Sequence, TypeVar

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

def prod(xs: Iterable[T], start: Any = 1) -> Any: return functools.reduce(operator.mul, xs, start)
def all_int(xs: Iterable[Any]) -> bool: return all(isinstance(x, int) for x in xs)
def argfix(*x):
  """Accept f(1,2,3) and f((1,2,3)) alike."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"bad arguments {x}: pass either one sequence or several ints")
    return tuple(x[0])
  return tuple(x)
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))
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

def normalize_axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
  return axis + ndim if axis < 0 else axis

def is_pow2(x: int) -> bool: return x > 0 and (x & (x-1)) == 0
def fmt_float(x: float) -> str: return repr(x) if math.isfinite(x) else str(x)
