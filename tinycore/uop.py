"""UOp: the one immutable, hash-consed graph node, from Tensor down to the rendered kernel; its bounds, semantics and symbolic simplification."""
from __future__ import annotations
import functools, math, weakref
from typing import Any, Callable, Sequence
import numpy as np
from tinycore.dtype import DType, PtrDType, dtypes, truncate, to_np_dtype, to_np_value_dtype, dtype_min, dtype_max, round_to_odd_f32, fma, fma_odd, INTS
from tinycore.helpers import prod, all_int
from tinycore.ops import Ops, GroupOp, AxisType
from tinycore.rewrite import UPat, PatternMatcher, graph_rewrite, graph_substitute

_MOVEMENT = frozenset(GroupOp.Movement)
_BUFFER_OP, _MULTI_OP = Ops.BUFFER, Ops.MULTI   # read per realize: an enum member through its class is a metaclass lookup

REDUCE_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: None}  # None: the dtype's minimum

def identity_element(op: Ops, dt: DType):
  return dtype_min(dt) if REDUCE_IDENTITY[op] is None else truncate(dt, REDUCE_IDENTITY[op])

# ***** the node *****

class _NodeCache:
  """(op, dtype, src, arg) -> the live node, by weak reference (WeakValueDictionary's behaviour, without its per-call
  Python overhead: hash-consing runs for every node built)."""
  __slots__ = ("refs",)
  def __init__(self): self.refs: dict[tuple, weakref.ref] = {}
  def get(self, key, default=None):
    wr = self.refs.get(key)
    return default if wr is None or (v := wr()) is None else v
  def __contains__(self, key) -> bool: return self.get(key) is not None
  def __len__(self) -> int: return sum(1 for wr in list(self.refs.values()) if wr() is not None)
  def values(self) -> list: return [v for wr in list(self.refs.values()) if (v := wr()) is not None]

class graph_property:
  """A cached property computed from the same property of the sources (shape, device, bounds). Where a source lacks it,
  it is filled in bottom-up over the uncached part of the graph (sources before users): up to 8 levels directly, deeper
  by a toposort, so a graph of any depth is handled without hitting the recursion limit."""
  def __init__(self, fn: Callable[[UOp], Any]): self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__
  def __get__(self, u: UOp | None, owner=None):
    # called only while u lacks the value: a non-data descriptor, so a value stored in u.__dict__ is found before it
    if u is None: return self
    name = self.name
    for s in u.src:
      if name not in s.__dict__:
        if not self._fill(u, 8):  # a few levels missing (a new node over fresh BUFFER/UNIQUE nodes): filled directly
          fn = self.fn
          for x in u.toposort(gate=lambda x: name not in x.__dict__):
            if name not in (xd := x.__dict__): xd[name] = fn(x)
        return u.__dict__[name]
    u.__dict__[name] = v = self.fn(u)   # every source has it: the common case, a node built on computed ones
    return v
  def _fill(self, u: UOp, depth: int) -> bool:
    """Store the value on u and on the sources that lack it, recursing at most `depth` levels (False: deeper than that)."""
    name = self.name
    for s in u.src:
      if name not in s.__dict__ and (depth == 0 or not self._fill(s, depth - 1)): return False
    u.__dict__[name] = self.fn(u)
    return True

class _NodeRef(weakref.ref):
  """The node cache's weak reference to a node, holding the node's key: one callback function for every node (a closure
  per node would be two more objects for the cyclic garbage collector to track and scan, per node built)."""
  __slots__ = ("key",)

_node_refs: dict[tuple, _NodeRef] = {}
_device_consts: dict[tuple, UOp] = {}   # UOp.const's tensor-level CONST nodes by (dtype, value's class, value, device, -0.0)
_const_broadcasts: dict[tuple, UOp] = {}   # their broadcasts by (that key, shape), the latest CONST_BROADCASTS_KEPT: a loop's
CONST_BROADCASTS_KEPT = 64                 # `x + 1` builds no node again, and a program of ever new shapes keeps few
CONST_LEAF = "const_leaf"   # set in the __dict__ of the nodes those keep: the schedule cache keys each by the node itself
                            # (no buffer under it, and hash-consing makes equal ones one node), not by its subgraph

def _node_gone(w: _NodeRef, refs: dict = _node_refs) -> None:
  """A node was freed: drop its cache entry (unless a new node of the key took it already). The cache is bound here, not
  read as a global: the nodes kept by _device_consts are freed at interpreter exit, after the module's globals are gone."""
  if refs.get(key := w.key) is w: del refs[key]

def seed(u: UOp, shape: tuple, device: str | tuple[str, ...]) -> UOp:
  """u with its shape and device stored where its builder knows them (the values the graph properties would compute from
  u's sources): the next op reads them at once, without first filling them in over sources that were never asked."""
  d = u.__dict__
  if "shape" not in d: d["shape"], d["device"] = shape, device   # (both equal what the properties compute, tested)
  return u

_new_object = object.__new__

class UOpMeta(type):
  """Hash-consing: building a UOp with the same (op, dtype, src, arg) returns the live one."""
  cache = _NodeCache()
  cache.refs = _node_refs
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
    key = (op, dtype, src, arg)
    # -0.0 == 0.0 in Python, but they are different constants (x * -0.0, 1 / -0.0): keep them apart
    if arg.__class__ is float and arg == 0.0 and math.copysign(1.0, arg) < 0: key = (op, dtype, src, arg, "-0.0")
    if (wr := _node_refs.get(key)) is not None and (ret := wr()) is not None: return ret
    ret = _new_object(cls)  # the fields set here, not in an __init__: one Python frame less per node built
    ret.op, ret.dtype, ret.src, ret.arg = op, dtype, src, arg
    (wr := _NodeRef(ret, _node_gone)).key = key
    _node_refs[key] = wr
    return ret

class UOp(metaclass=UOpMeta):
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")
  # built by UOpMeta.__call__(op, dtype=dtypes.void, src=(), arg=None), which sets the fields (no __init__)
  def __reduce__(self): return UOp, (self.op, self.dtype, self.src, self.arg)
  def replace(self, **kw) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg))
  @property
  def children(self) -> list[UOp]:
    """The live nodes that use self, each once. Derived from the node cache when asked (a scan of every live node: for
    tests and debugging; no pass of the core needs it, so building a node keeps no index of its users)."""
    return users_of([self])[self]

  # ***** graph walking *****
  def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
    """Every node reachable from self, sources before users, as the keys of a dict (ordered, and O(1) `in`), like tinygrad.
    Iterative: deep graphs do not hit the recursion limit. `gate(u)` False keeps u but not what is under it."""
    out: dict[UOp, None] = {}  # finished nodes, in order
    stack: list[tuple[UOp, bool]] = [(self, False)]
    pop, push = stack.pop, stack.append
    while stack:
      u, sources_done = pop()
      if u in out: continue
      if sources_done: out[u] = None
      else:
        push((u, True))
        if gate is None or gate(u):
          for s in reversed(u.src): push((s, False))
    return out

  # ***** printing *****
  def __repr__(self) -> str: return pretty(self)
  def key_str(self) -> str: return f"{self.op.name}:{self.dtype}:{self.arg}"

  # ***** constructors *****
  @staticmethod
  def const(dtype: DType, b: Any, device: str | None = None, shape: tuple = ()) -> UOp:
    """A constant; with a shape (tensor level: a device too), the scalar reshaped to ones and expanded to it."""
    if isinstance(b, UOp):  # a symbolic value: checked like any reshape
      c = b if b.dtype == dtype else b.cast(dtype)
      return c.reshape((1,) * len(shape)).expand(shape) if shape else c
    if device is None: return UOp(Ops.CONST, dtype, (), truncate(dtype, b))  # positional: no kwargs dict
    # a tensor-level constant's node is kept by its value, and its broadcasts to the latest shapes asked (a model uses a
    # few: `x + 1` in a loop builds no node again); NaN is not kept (never equal to itself) and -0.0 is apart from 0.0
    cls = b.__class__
    key = (dtype, cls, b, device, cls is float and b == 0.0 and math.copysign(1.0, b) < 0) if cls is not float or b == b else None
    if key is not None and shape and (c := _const_broadcasts.get((key, shape))) is not None: return c
    if (c := _device_consts.get(key)) is None:
      c = seed(UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, dtypes.void, (), device),), truncate(dtype, b)), (), device)
      if key is None: return c.broadcast_unchecked((1,) * len(shape), shape) if shape else c
      if len(_device_consts) >= 1024: _device_consts.clear()   # bounded: a program of ever new constants keeps none
      _device_consts[key] = c
      c.__dict__[CONST_LEAF] = True
    if not shape: return c
    out = c.broadcast_unchecked((1,) * len(shape), shape)
    if len(_const_broadcasts) >= CONST_BROADCASTS_KEPT: del _const_broadcasts[next(iter(_const_broadcasts))]   # the oldest
    _const_broadcasts[(key, shape)] = out
    out.__dict__[CONST_LEAF] = True
    return out
  def broadcast_unchecked(self, padded: tuple, shape: tuple) -> UOp:
    """self reshaped to `padded` (its shape with ones prepended) and expanded to `shape`, built directly, each node with its
    shape and device stored: for callers that hold by construction what reshape()/expand() would check."""
    u = self if padded == self.shape else seed(UOp(Ops.RESHAPE, self.dtype, (self,), padded), padded, self.device)
    return u if padded == shape else seed(UOp(Ops.EXPAND, self.dtype, (u,), shape), shape, self.device)
  def const_like(self, b: Any) -> UOp:
    """A constant of self's dtype; for tensor-level nodes also of its device and shape."""
    if (device := self.device) is None: return UOp.const(self.dtype, b)
    return UOp.const(self.dtype, b, device, self.shape)
  @staticmethod
  def variable(name: str, vmin: int, vmax: int, dtype: DType = dtypes.index) -> UOp:
    if not (isinstance(vmin, int) and isinstance(vmax, int) and vmin <= vmax):
      raise ValueError(f"Variable {name!r} needs integer bounds with min <= max, got [{vmin}, {vmax}]")
    return UOp(Ops.DEFINE_VAR, dtype, arg=(name, vmin, vmax))
  def bind(self, val: int) -> UOp:
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"only a Variable can be bound, not {self.op}")
    if not self.arg[1] <= val <= self.arg[2]: raise ValueError(f"value {val} is outside {self.arg[0]}'s bounds [{self.arg[1]}, {self.arg[2]}]")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, val)))
  def unbind(self) -> tuple[UOp, int]:
    if self.op is not Ops.BIND: raise TypeError(f"{self.op} is not a bound variable")
    return self.src[0], self.src[1].arg
  def unbind_all(self) -> tuple[UOp, dict[str, int]]:
    """self with every bound Variable replaced by the Variable, and the bound values by name (one value per name)."""
    binds = [b for b in self.toposort() if b.op is Ops.BIND]
    vals: dict[str, int] = {}
    for b in binds:
      var, val = b.unbind()
      if vals.setdefault(var.arg[0], val) != val: raise ValueError(f"Variable {var.arg[0]} is bound to both {vals[var.arg[0]]} and {val}")
    return (self.substitute({b: b.src[0] for b in binds}) if binds else self), vals
  @property
  def expr(self) -> str: return self.arg[0]
  def alu(self, op: Ops, *src: UOp | Any) -> UOp:
    srcs = (self,) + tuple(s if isinstance(s, UOp) else self.const_like(s) for s in src)
    out_dtype = dtypes.bool.vec(self.dtype.count) if op in GroupOp.Comparison else (srcs[-1].dtype if op is Ops.WHERE else self.dtype)
    return UOp(op, out_dtype, srcs)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))
  def where(self, a: UOp | Any, b: UOp | Any) -> UOp:
    a_, b_ = (x if isinstance(x, UOp) else (b if isinstance(b, UOp) else a).const_like(x) for x in (a, b))
    return UOp(Ops.WHERE, a_.dtype, (self, a_, b_))
  def sink(self, *srcs: UOp) -> UOp: return UOp(Ops.SINK, dtypes.void, (self,) + srcs)
  def index(self, idx: UOp, valid: UOp | None = None) -> UOp: return UOp(Ops.INDEX, self.dtype, (self, idx) if valid is None else (self, idx, valid))
  def load(self, *src: UOp, dtype: DType | None = None) -> UOp:
    return UOp(Ops.LOAD, dtype or (self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype), (self,) + src)
  def store(self, val: UOp, *src: UOp) -> UOp: return UOp(Ops.STORE, dtypes.void, (self, val) + src)

  # tensor-level builders: shapes are checked here, once, for Tensor and autograd alike
  def reshape(self, shape: tuple) -> UOp:
    shape = tuple(shape)
    if self.shape == shape: return self
    if (prod(self.shape) != prod(shape) or min(shape, default=0) < 0) if all_int(self.shape + shape) else \
       resolve(sint_to_uop(prod(self.shape)).ne(prod(shape)), False) or any(resolve(s < 0, False) for s in shape):
      raise ValueError(f"cannot reshape {self.shape} (size {prod(self.shape)}) to {shape} (size {prod(shape)})")
    return seed(UOp(Ops.RESHAPE, self.dtype, (self,), shape), shape, self.device)
  def expand(self, shape: tuple) -> UOp:
    shape = tuple(shape)
    if self.shape == shape: return self
    if len(shape) != len(self.shape) or any(s != n and s != 1 for s, n in zip(self.shape, shape)):
      raise ValueError(f"cannot expand {self.shape} to {shape}: only size-1 dimensions can grow")
    return seed(UOp(Ops.EXPAND, self.dtype, (self,), shape), shape, self.device)
  def permute(self, order: tuple[int, ...]) -> UOp:
    order = tuple(order)
    if sorted(order) != list(range(len(self.shape))): raise ValueError(f"permute order {order} is not a permutation of {len(self.shape)} axes")
    return self if order == tuple(range(len(order))) else UOp(Ops.PERMUTE, self.dtype, (self,), order)
  def pad(self, arg: tuple[tuple[Any, Any], ...]) -> UOp:
    arg = tuple((b, a) for b, a in arg)
    if len(arg) != len(self.shape) or any(resolve(b < 0, False) or resolve(a < 0, False) for b, a in arg): raise ValueError(f"bad padding {arg} for shape {self.shape}")
    return self if all(b == 0 and a == 0 for b, a in arg) else UOp(Ops.PAD, self.dtype, (self,), arg)
  def shrink(self, arg: tuple[tuple[Any, Any], ...]) -> UOp:
    arg = tuple((b, e) for b, e in arg)
    if len(arg) != len(self.shape) or any(resolve(b < 0, False) or resolve(e > s, False) or resolve(b > e, False) for (b, e), s in zip(arg, self.shape)):
      raise ValueError(f"bad shrink {arg} for shape {self.shape}")
    return self if all(b == 0 and e == s for (b, e), s in zip(arg, self.shape)) else UOp(Ops.SHRINK, self.dtype, (self,), arg)
  def flip(self, axes: tuple[bool, ...]) -> UOp:
    return self if not any(axes) else UOp(Ops.FLIP, self.dtype, (self,), tuple(axes))
  def r(self, op: Ops, axes: tuple[int, ...]) -> UOp:
    sh = self.shape   # (a symbolic dim is never 1: UOp compares by identity)
    axes = (tuple(axes) if sh[axes[0]] != 1 else ()) if len(axes) == 1 else tuple(sorted(a for a in axes if sh[a] != 1))
    return self if not axes else UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axes))

  # python operators build ALU nodes: used by index math in codegen and by symbolic
  def _b(self, x) -> UOp: return x if isinstance(x, UOp) else self.const_like(x)
  def __add__(self, x): return self.alu(Ops.ADD, self._b(x))
  def __radd__(self, x): return self._b(x).alu(Ops.ADD, self)
  def __sub__(self, x): return self.alu(Ops.ADD, self._b(x).alu(Ops.MUL, self.const_like(-1))) if dtypes.is_int(self.dtype) else self.alu(Ops.SUB, self._b(x))
  def __rsub__(self, x): return self._b(x) - self
  def __mul__(self, x): return self.alu(Ops.MUL, self._b(x))
  def __rmul__(self, x): return self._b(x).alu(Ops.MUL, self)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, self._b(x))
  def __mod__(self, x): return self.alu(Ops.MOD, self._b(x))
  def __truediv__(self, x): return self.alu(Ops.FDIV, self._b(x))
  def __neg__(self): return self * -1 if dtypes.is_int(self.dtype) else self.alu(Ops.NEG)
  def __lt__(self, x): return self.alu(Ops.CMPLT, self._b(x))
  def __gt__(self, x): return self._b(x).alu(Ops.CMPLT, self)
  def __ge__(self, x): return (self < x).logical_not()
  def __le__(self, x): return (self > x).logical_not()
  def __and__(self, x): return self.alu(Ops.AND, self._b(x))
  def __or__(self, x): return self.alu(Ops.OR, self._b(x))
  def __xor__(self, x): return self.alu(Ops.XOR, self._b(x))
  def ne(self, x): return self.alu(Ops.CMPNE, self._b(x))
  def eq(self, x): return self.alu(Ops.CMPEQ, self._b(x))
  def maximum(self, x): return self.alu(Ops.MAX, self._b(x))
  def minimum(self, x): return -((-self).maximum(-self._b(x)))
  def logical_not(self): return self.alu(Ops.CMPNE, self.const_like(True))
  __hash__ = object.__hash__  # identity: hash-consing makes equal UOps the same object
  def __eq__(self, x): return self is x
  def __bool__(self): raise TypeError(f"the truth value of a UOp is not defined (got {self.op}); use .eq()/.ne() to build a comparison")

  # ***** properties *****
  @graph_property
  def device(self) -> str | None:
    """The device of a tensor-level node; None for kernel-level nodes."""
    if self.op is Ops.DEVICE or self.op is Ops.COPY or self.op is Ops.ALLGATHER: return self.arg
    for s in self.src:
      if (d := s.device) is not None: return d
    return None
  @graph_property
  def shape(self) -> tuple[Any, ...] | None:
    if (rule := _SHAPE_RULES.get(self.op)) is not None: return rule(self)
    for s in self.src:  # an op without a rule has the shape of its first shaped source
      if s.op is not Ops.DEVICE and (sh := s.shape) is not None: return sh
    return None
  @property
  def size(self) -> Any: return prod(self.shape) if self.shape is not None else None
  @property
  def ndim(self) -> int: return len(self.shape)
  @property
  def base(self) -> UOp:
    """Through movement ops to the node that owns storage. (Not cached: a node caching itself would be a reference cycle,
    and a BUFFER node, with its memory, would wait for the cyclic garbage collector instead of being freed at once.)"""
    u = self
    while u.op in _MOVEMENT: u = u.src[0]
    return u
  @property
  def is_realized(self) -> bool:
    b = self
    while (op := b.op) in _MOVEMENT: b = b.src[0]   # (self.base without a second property call: every realize asks this)
    return op is _BUFFER_OP or op is _MULTI_OP and b.src[0].base.op is _BUFFER_OP  # a sharded tensor: a buffer per device
  @graph_property
  def vmin_vmax(self) -> tuple[Any, Any]: return _min_max(self)
  @property
  def vmin(self): return self.vmin_vmax[0]
  @property
  def vmax(self): return self.vmin_vmax[1]
  def simplify(self) -> UOp:
    return simplify(self)
  def variables(self) -> list[UOp]:
    return sorted({u if u.op is Ops.DEFINE_VAR else u.src[0] for u in self.toposort() if u.op in (Ops.DEFINE_VAR, Ops.BIND)}, key=lambda v: v.arg)
  def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
    return graph_substitute(self, mapping)
  def render(self) -> str:
    """An index expression as readable infix text (for errors and debugging)."""
    return render_expr(self)

def users_of(nodes: list[UOp]) -> dict[UOp, list[UOp]]:
  """Each node's live users, each once, in one scan of the node cache (a node's key holds its sources)."""
  out: dict[UOp, list[UOp]] = {n: [] for n in nodes}
  wanted = out.keys()
  for key in list(_node_refs):   # the keys alone: a copy of the items would allocate a tuple per live node
    if wanted.isdisjoint(key[2]) or (ref := _node_refs.get(key)) is None or (u := ref()) is None: continue
    for s in dict.fromkeys(key[2]):
      if s in out: out[s].append(u)
  return out

def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
  """A symbolic integer with bounds, usable in shapes and index math: `Variable("n", 1, 64).bind(8)`."""
  return UOp.variable(name, min_val, max_val, dtype)

def sint_to_uop(x: Any) -> UOp: return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)
def resolve(x: Any, default: bool = True) -> bool:
  """A Python bool for a possibly symbolic comparison; `default` when it cannot be decided."""
  if not isinstance(x, UOp): return bool(x)
  lo, hi = x.simplify().vmin_vmax
  return bool(lo) if lo == hi else default
def smax(*xs): return max(xs) if all_int(xs) else functools.reduce(lambda a, b: sint_to_uop(a).maximum(b), xs)
def smin(*xs): return min(xs) if all_int(xs) else functools.reduce(lambda a, b: sint_to_uop(a).minimum(b), xs)
def ssimplify(x: Any) -> Any:
  if not isinstance(x, UOp): return x
  x = x.simplify()
  return x.arg if x.op is Ops.CONST else x

# ***** shapes of tensor-level nodes *****

def _multi_shape(u: UOp) -> tuple:
  grid = u.arg if isinstance(u.arg, tuple) else ((u.arg, len(u.device)),)  # arg: the axis split over every device, or
  return tuple(s * prod(n for a, n in grid if a == i) for i, s in enumerate(u.src[0].shape))  # ((axis or None, devices along it), ...)

# the shape of a node by its op (a dict lookup per node built); UOp.shape gives an op not here its first shaped source's
_SHAPE_RULES: dict[Ops, Callable[[UOp], Any]] = {
  **{op: (lambda u: None) for op in Ops if op.name.startswith(("DEFINE", "END"))},   # DEFINE_VAR, DEFINE_GLOBAL: set below
  **{op: (lambda u: None) for op in (Ops.SINK, Ops.DEVICE, Ops.UNIQUE, Ops.RANGE, Ops.SPECIAL, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.REDUCE)},
  Ops.BUFFER: lambda u: (u.arg,), Ops.IOTA: lambda u: (u.arg,),
  Ops.CONST: lambda u: (), Ops.DEFINE_VAR: lambda u: (), Ops.BIND: lambda u: (),
  Ops.DEFINE_GLOBAL: lambda u: (u.dtype.size,),
  Ops.RESHAPE: lambda u: u.arg, Ops.EXPAND: lambda u: u.arg,
  Ops.PERMUTE: lambda u: tuple(u.src[0].shape[i] for i in u.arg),
  Ops.PAD: lambda u: tuple(ssimplify(s + b + a) for s, (b, a) in zip(u.src[0].shape, u.arg)),
  Ops.SHRINK: lambda u: tuple(ssimplify(e - b) for b, e in u.arg),
  Ops.REDUCE_AXIS: lambda u: tuple(1 if i in u.arg[1] else s for i, s in enumerate(u.src[0].shape)),
  Ops.COPY: lambda u: u.src[0].shape, Ops.ASSIGN: lambda u: u.src[0].shape,
  Ops.MULTI: _multi_shape,
  Ops.ALLGATHER: lambda u: (u.src[0].shape[0] * len(u.src[0].device),) + u.src[0].shape[1:],
}

# ***** bounds for symbolic math *****

def _min_max(u: UOp) -> tuple[Any, Any]:
  dt = u.dtype
  if u.op is Ops.CONST: return u.arg, u.arg
  if u.op is Ops.DEFINE_VAR: return u.arg[1], u.arg[2]
  lo, hi = _min_max_unclamped(u)
  # fixed-width ints wrap: a bound outside the dtype means the value can be anything
  if dt != dtypes.index and (dtypes.is_int(dt)) and not (dtype_min(dt) <= lo <= hi <= dtype_max(dt)): return dtype_min(dt), dtype_max(dt)
  return lo, hi

def _min_max_unclamped(u: UOp) -> tuple[Any, Any]:
  dt = u.dtype
  if u.op is Ops.BIND: return u.src[0].vmin_vmax
  if u.op is Ops.RANGE: return 0, (u.src[0].vmax - 1)
  if u.op is Ops.SPECIAL: return 0, (u.src[0].vmax - 1 if u.src else u.arg[1] - 1)
  if dtypes.is_int(dt) or dt == dtypes.bool:
    if u.op in GroupOp.ALU and u.op not in (Ops.SHL, Ops.SHR, Ops.XOR, Ops.OR, Ops.AND) or u.op in (Ops.AND, Ops.OR) and dt == dtypes.bool:
      s = [x.vmin_vmax for x in u.src]
      if u.op is Ops.ADD: return s[0][0] + s[1][0], s[0][1] + s[1][1]
      if u.op is Ops.SUB: return s[0][0] - s[1][1], s[0][1] - s[1][0]
      if u.op is Ops.MUL:
        c = [0 if a == 0 or b == 0 else a*b for a in s[0] for b in s[1]]  # 0 * inf is 0 for bounds
        return min(c), max(c)
      if u.op is Ops.NEG: return (not s[0][1], not s[0][0]) if dt == dtypes.bool else (-s[0][1], -s[0][0])
      if u.op is Ops.MAX: return max(s[0][0], s[1][0]), max(s[0][1], s[1][1])
      if u.op is Ops.IDIV and s[1][0] == s[1][1] and s[1][0] != 0:
        d = s[1][0]
        c = [_cdiv(s[0][0], d), _cdiv(s[0][1], d)]
        return min(c), max(c)
      if u.op is Ops.MOD and s[1][0] == s[1][1] and s[1][0] > 0:
        # x % d is x - d*trunc(x/d): where trunc(x/d) is the same for the whole range of x, the remainder moves with x
        d, (lo, hi) = s[1][0], s[0]
        if lo >= 0: return (lo, hi) if hi < d else (0, d-1)
        if hi <= 0: return (lo, hi) if lo > -d else (-(d-1), 0)
        return max(lo, -(d-1)), min(hi, d-1)
      # a divisor of varying value (a Variable) that keeps one sign: truncating division is monotone in each operand
      if u.op is Ops.IDIV and (s[1][0] > 0 or s[1][1] < 0) and all(isinstance(v, int) for v in s[0] + s[1]):
        c = [_cdiv(a, b) for a in s[0] for b in s[1]]
        return min(c), max(c)
      if u.op is Ops.MOD and (s[1][0] > 0 or s[1][1] < 0) and all(isinstance(v, int) for v in s[1]):
        m = max(abs(s[1][0]), abs(s[1][1])) - 1  # |x % d| < |d|, with the sign of x
        return (0, min(s[0][1], m)) if s[0][0] >= 0 else (max(s[0][0], -m), 0) if s[0][1] <= 0 else (max(s[0][0], -m), min(s[0][1], m))
      if u.op is Ops.WHERE: return min(s[1][0], s[2][0]), max(s[1][1], s[2][1])
      if u.op is Ops.CMPLT: return (s[0][1] < s[1][0], s[0][0] < s[1][1])
      if u.op is Ops.CMPNE:
        if s[0][1] < s[1][0] or s[1][1] < s[0][0]: return True, True
        if s[0][0] == s[0][1] == s[1][0] == s[1][1]: return False, False
        return False, True
      if u.op is Ops.CMPEQ:
        if s[0][1] < s[1][0] or s[1][1] < s[0][0]: return False, False
        if s[0][0] == s[0][1] == s[1][0] == s[1][1]: return True, True
        return False, True
      if u.op is Ops.AND: return s[0][0] and s[1][0], s[0][1] and s[1][1]
      if u.op is Ops.OR: return s[0][0] or s[1][0], s[0][1] or s[1][1]
    if u.op is Ops.CAST and (dtypes.is_int(u.src[0].dtype) or u.src[0].dtype == dtypes.bool):
      lo, hi = u.src[0].vmin_vmax
      if dt == dtypes.index or dtype_min(dt) <= lo and hi <= dtype_max(dt): return (bool(lo), bool(hi)) if dt == dtypes.bool else (int(lo), int(hi))
    if dt == dtypes.index: return -math.inf, math.inf
    return dtype_min(dt), dtype_max(dt)
  return -math.inf, math.inf

def _cdiv(a, b):
  """C-style (truncating) division of Python ints, what IDIV means in every kernel."""
  if math.isinf(a): return a if b > 0 else -a
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b > 0) else -q
def _cmod(a, b): return a - b * _cdiv(a, b)

# ***** UOp semantics on numpy arrays: the definition the PYTHON device runs and constant folding uses *****

def _as(dt: DType, x): return np.asarray(x, dtype=to_np_dtype(dt))

def _int_div(a, b, mod: bool):
  """Truncating division/remainder. A zero divisor gives 0 instead of trapping (x86 faults); MIN // -1 wraps."""
  bz = b == 0
  bs = np.where(bz, 1, b).astype(a.dtype)
  with np.errstate(all="ignore"):
    q = np.floor_divide(a, bs)
    fix = (a - q*bs != 0) & ((a < 0) != (bs < 0))  # numpy floors; step toward zero where signs differ
    q = np.where(fix, q + 1, q).astype(a.dtype)
    out = (a - q*bs).astype(a.dtype) if mod else q
  return np.where(bz, np.zeros_like(a), out)

def _float_to_int(x, dt: DType):
  """Saturating float->int conversion (NaN -> 0): defined behaviour on every backend."""
  npdt = to_np_dtype(dt)
  lo, hi = np.array(dtype_min(dt), npdt), np.array(dtype_max(dt), npdt)
  with np.errstate(invalid="ignore"):
    xt = np.trunc(np.nan_to_num(np.asarray(x, np.float64), nan=0.0))
    over, under = xt >= float(dtype_max(dt)), xt <= float(dtype_min(dt))
    safe = np.where(over | under, 0, xt).astype(npdt)
  return np.where(over, hi, np.where(under, lo, safe)).astype(npdt)

def bf16_to_f32(bits): return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)
def f32_to_bf16(x):
  b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
  nan = (b & 0x7fffffff) > 0x7f800000
  rounded = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
  # a NaN keeps its bits where they fit (a bfloat16 NaN's own: loads, stores and bitcasts keep them), else becomes quiet
  return np.where(nan, ((b >> 16) | np.where(b & 0xffff, np.uint64(0x40), np.uint64(0))) & 0xffff, rounded).astype(np.uint16)

def exec_cast(x, src: DType, dst: DType, bitcast: bool = False):
  """CAST/BITCAST on numpy values. bfloat16 values travel as float32 numbers, stored as uint16 bits."""
  if bitcast:
    raw = f32_to_bf16(x) if src == dtypes.bfloat16 else _as(src, x)
    out = raw.view(to_np_dtype(dst))
    return bf16_to_f32(out) if dst == dtypes.bfloat16 else out
  x = np.asarray(x)
  if dst == dtypes.bool: return x != 0
  if src == dtypes.bool: x = x.astype(np.uint8)
  if dst == dtypes.bfloat16: return bf16_to_f32(f32_to_bf16(round_to_odd_f32(x)))   # rounded once, from any source
  if dtypes.is_int(dst) and dtypes.is_float(src): return _float_to_int(x, dst)
  with np.errstate(all="ignore"):
    if dtypes.is_int(dst): return x.astype(object).astype(np.int64).astype(to_np_dtype(dst)) if x.dtype == object else x.astype(to_np_dtype(dst))
    return x.astype(to_np_dtype(dst))

def exec_alu(op: Ops, dt: DType, srcs: Sequence[Any]):
  """Evaluate one ALU op on numpy arrays (or scalars) with the exact semantics kernels have."""
  if op is Ops.MULACC and dtypes.is_float(dt):   # fused: a * b + c rounded once (IEEE fusedMultiplyAdd)
    if dt.scalar == dtypes.bfloat16: return exec_cast(fma_odd(*srcs), dtypes.float64, dtypes.bfloat16)
    return fma(*(np.asarray(s, to_np_dtype(dt.scalar)) for s in srcs))
  if op is Ops.MULACC: return exec_alu(Ops.ADD, dt, [exec_alu(Ops.MUL, dt, srcs[:2]), srcs[2]])  # integers wrap: no rounding to fuse
  cdt = dtypes.float32 if dt.scalar == dtypes.bfloat16 else dt.scalar  # bfloat16 math runs in float32, rounded after
  a = [np.asarray(s) for s in srcs]
  with np.errstate(all="ignore"):
    if op is Ops.WHERE: out = np.where(a[0], a[1], a[2])
    elif op in GroupOp.Comparison:
      out = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}[op](a[0], a[1])
      return out
    elif op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(dt):
      return _int_div(_as(cdt, a[0]), _as(cdt, a[1]), op is Ops.MOD)
    elif op is Ops.MOD: out = np.fmod(a[0], a[1])
    elif op is Ops.MAX: out = np.maximum(a[0], a[1]) if dt != dtypes.bool else a[0] | a[1]
    elif op in (Ops.SHL, Ops.SHR):
      x, n = _as(cdt, a[0]), _as(cdt, a[1]).astype(np.uint64) & (8*cdt.itemsize - 1)
      out = np.left_shift(x, n.astype(x.dtype)) if op is Ops.SHL else np.right_shift(x, n.astype(x.dtype))
    elif op is Ops.RECIP: out = np.reciprocal(_as(cdt, a[0]).astype(to_np_dtype(cdt)) if dtypes.is_float(cdt) else a[0])
    else:
      fn = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.NEG: np.negative, Ops.TRUNC: np.trunc,
            Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.true_divide, Ops.IDIV: np.floor_divide,
            Ops.XOR: np.bitwise_xor, Ops.OR: np.bitwise_or, Ops.AND: np.bitwise_and}[op]
      if dt == dtypes.bool and op is Ops.ADD: fn = np.logical_or
      if dt == dtypes.bool and op is Ops.MUL: fn = np.logical_and
      if dt == dtypes.bool and op is Ops.NEG: fn = np.logical_not
      out = fn(*[_as(cdt, x) for x in a])
  out = _as(cdt, out) if op is not Ops.WHERE else np.asarray(out)
  return bf16_to_f32(f32_to_bf16(out)) if dt.scalar == dtypes.bfloat16 else out

# ***** printing *****

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
          Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.FDIV: "/", Ops.SHL: "<<", Ops.SHR: ">>"}

def render_expr(u: UOp) -> str:
  """Infix text of an expression, each node rendered once, sources first (no recursion: expressions may be deep)."""
  txt: dict[UOp, str] = {}
  for x in u.toposort():
    s = [txt[y] for y in x.src]
    if x.op is Ops.CONST: txt[x] = str(x.arg)
    elif x.op is Ops.DEFINE_VAR: txt[x] = x.arg[0]
    elif x.op is Ops.BIND: txt[x] = s[0]
    elif x.op is Ops.RANGE: txt[x] = f"r{x.arg[0] if isinstance(x.arg, tuple) else x.arg}"
    elif x.op is Ops.SPECIAL: txt[x] = str(x.arg[0])
    elif x.op in _INFIX: txt[x] = f"({s[0]}{_INFIX[x.op]}{s[1]})"
    elif x.op is Ops.MAX: txt[x] = f"max({s[0]}, {s[1]})"
    elif x.op is Ops.WHERE: txt[x] = f"({s[1]} if {s[0]} else {s[2]})"
    elif x.op is Ops.NEG: txt[x] = f"(-{s[0]})"
    elif x.op is Ops.CAST: txt[x] = f"{x.dtype.name}({s[0]})"
    else: txt[x] = f"{x.op.name}({', '.join(s)})"
  return txt[u]

def pretty(u: UOp, limit: int = 200) -> str:
  """A numbered listing of the graph under u, shared nodes printed once."""
  order = u.toposort()
  if len(order) > limit: return f"<UOp {u.op.name} {u.dtype} arg={u.arg!r} ({len(order)} nodes)>"
  ids = {x: i for i, x in enumerate(order)}
  lines = [f"%{ids[x]:<3} {x.op.name:<14} {str(x.dtype):<22} {[ids[s] for s in x.src]!s:<16} {x.arg!r}" for x in order]
  return "\n".join(lines)

def format_uops(uops: Sequence[UOp]) -> str:
  ids = {x: i for i, x in enumerate(uops)}
  return "\n".join(f"{i:4d} {x.op.name:<14} {str(x.dtype):<26} {[ids.get(s, '--') for s in x.src]!s:<22} {x.arg!r}" for i, x in enumerate(uops))
def print_uops(uops: Sequence[UOp]) -> None: print(format_uops(uops))


def sym_eval(x: Any, var_vals: dict[str, int]) -> int:
  """The integer value of a possibly symbolic size, given values for its variables."""
  if not isinstance(x, UOp): return x
  sub = {v: UOp.const(v.dtype, var_vals[v.arg[0]]) for v in x.toposort() if v.op is Ops.DEFINE_VAR}
  out = simplify(x.substitute(sub))
  if out.op is not Ops.CONST: raise ValueError(f"cannot evaluate {x.render()} with {var_vals}")
  return out.arg

# ***** symbolic: integer simplification as rewrite rules (folding, combining terms, div/mod folding from bounds) *****

# Every rule here is exact for dtypes.index (unbounded integers, C division: truncation toward zero, divisor 0 gives 0).
# Rules that read bounds trust vmin/vmax, so they are only as sound as _min_max.

# ***** constant folding *****

_PY_INDEX_ALU = {Ops.ADD: lambda a, b: a+b, Ops.SUB: lambda a, b: a-b, Ops.MUL: lambda a, b: a*b, Ops.IDIV: lambda a, b: _cdiv(a, b) if b else 0,
                 Ops.MOD: lambda a, b: _cmod(a, b) if b else 0, Ops.MAX: max, Ops.NEG: lambda a: -a, Ops.CMPLT: lambda a, b: a < b,
                 Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b, Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b,
                 Ops.XOR: lambda a, b: a ^ b, Ops.WHERE: lambda c, a, b: a if c else b}

def fold_const(x: UOp) -> UOp | None:
  vals = [s.arg for s in x.src]
  if x.dtype == dtypes.index or (x.op in GroupOp.Comparison and x.src[0].dtype == dtypes.index) or \
     (x.op is Ops.WHERE and x.dtype == dtypes.index):
    if x.op in _PY_INDEX_ALU: return UOp.const(x.dtype, _PY_INDEX_ALU[x.op](*vals))
    return None
  # each constant as its own dtype: numpy reads a bare 2**64-1 as uint64 and 9 as int64, and their max or a choice
  # between them as float64 (2**64-1 became 1.8e19, then 0 as a uint64)
  vals = [np.asarray(v, to_np_value_dtype(s.dtype)) for s, v in zip(x.src, vals)]
  out = exec_alu(x.op, x.dtype, vals)
  return UOp.const(x.dtype, out.item() if hasattr(out, "item") else out)

def fold_cast(c: UOp, x: UOp) -> UOp:
  if dtypes.index in (x.dtype, c.dtype): return UOp.const(x.dtype, int(c.arg))
  val = np.asarray(c.arg, to_np_value_dtype(c.dtype))
  return UOp.const(x.dtype, exec_cast(val, c.dtype, x.dtype).item())

# ***** sums: the canonical form of linear index math *****
# A canonical sum is a left-leaning chain of ADDs over distinct terms in _order_key order, each term t or t*k
# (k a constant other than 0 and 1), with the constant, if not 0, last.

def _iconst(dt, v: int) -> UOp: return UOp(Ops.CONST, dt, (), v)  # what UOp.const gives for index math, without its conversions

def split_terms(u: UOp) -> tuple[dict[UOp, int], int]:
  """u as {term: coefficient} plus a constant, looking through ADD and MUL-by-const. Terms keep their left-to-right
  order, so splitting a canonical sum and sorting it again (a stable sort) gives back the same sum."""
  terms: dict[UOp, int] = {}
  const = 0
  stack = [(u, 1)]
  while stack:
    x, k = stack.pop()
    if x.op is Ops.ADD: stack.extend(((x.src[1], k), (x.src[0], k)))
    elif x.op is Ops.CONST: const += k * x.arg
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST: stack.append((x.src[0], k * x.src[1].arg))
    else: terms[x] = terms.get(x, 0) + k
  return {t: c for t, c in terms.items() if c != 0}, const

_order_keys: weakref.WeakKeyDictionary[UOp, tuple] = weakref.WeakKeyDictionary()
def _order_key(u: UOp) -> tuple:
  """Sort key of a term: variables and ranges by name, then by structure. It looks 3 levels deep, so its cost is
  bounded on deep graphs; terms it cannot tell apart keep the order they came in."""
  if (k := _order_keys.get(u)) is None: k = _order_keys[u] = _shallow_key(u, 3)
  return k
def _shallow_key(u: UOp, depth: int) -> tuple:
  return (u.op.value, _arg_key(u.arg), len(u.src)) + (tuple(_shallow_key(s, depth - 1) for s in u.src) if depth and u.src else ())
def _arg_key(a) -> tuple:
  """Args of any types made comparable, numbers as numbers: r2 sorts before r10."""
  if a is None: return (0,)
  if isinstance(a, (int, float)): return (1, a)
  if isinstance(a, str): return (2, a)
  if isinstance(a, tuple): return (3, tuple(_arg_key(x) for x in a))
  return (4, repr(a))

def _term(t: UOp, k: int, dtype) -> UOp: return t if k == 1 else UOp(Ops.MUL, dtype, (t, _iconst(dtype, k)))
# sums simplify_sum built, with all their prefixes: known fixed points, so the rewrite of a new sum's chain is linear
_canonical_sums: weakref.WeakSet[UOp] = weakref.WeakSet()
def build_sum(terms: dict[UOp, int], const: int, dtype, canonical: bool = False) -> UOp:
  parts = [_term(t, k, dtype) for t, k in sorted(terms.items(), key=lambda tk: _order_key(tk[0])) if k != 0]
  if const != 0 or not parts: parts.append(_iconst(dtype, const))
  out = parts[0]
  for p in parts[1:]:
    out = UOp(Ops.ADD, dtype, (out, p))
    if canonical: _canonical_sums.add(out)
  return out

def _sum_bounds(terms: dict[UOp, int], const: int) -> tuple:
  """Bounds of sum(k*t) + const: what build_sum(...).vmin_vmax would give, without building it."""
  lo = hi = const
  for t, k in terms.items():
    lo, hi = lo + min(k * t.vmin, k * t.vmax), hi + max(k * t.vmin, k * t.vmax)
  return lo, hi

def _congruent(x: UOp, y: UOp, c: int) -> bool:
  """x%c == y%c for sure: the same node, or both >= 0 with a difference that is a multiple of c."""
  if x is y: return True
  if x.vmin < 0 or y.vmin < 0: return False
  (tx, cx), (ty, cy) = split_terms(x), split_terms(y)
  return (cx - cy) % c == 0 and all((tx.get(t, 0) - ty.get(t, 0)) % c == 0 for t in tx.keys() | ty.keys())

def _fold_divmod_pairs(terms: dict[UOp, int], const: int) -> tuple[dict[UOp, int], int] | None:
  """The pairs reshape round trips leave behind: k*(x%c) plus one of these times k*c, with x%c == y%c:
     y//c -> y,   (y%n)//c -> y%n (c | n),   (y//c)%m -> y%(c*m),   and for x = w//a:  w//(a*c) -> x.
  Exact for C division (c nonzero); rule_mod may have changed x%c to an equal y%c, so x and y can differ."""
  mods = [t for t in terms if t.op is Ops.MOD and t.src[1].op is Ops.CONST and t.src[1].arg > 0]
  if not mods: return None
  halves: dict[int, list[tuple[UOp, UOp, UOp, int]]] = {}  # c -> (the other half, y, what the pair sums to: z%n, or z when n is 0)
  idivs: dict[tuple, UOp] = {}
  for t in terms:
    if t.op is Ops.IDIV and t.src[1].op is Ops.CONST:
      y, c = t.src[0], t.src[1].arg
      idivs[(y, c)] = t
      halves.setdefault(c, []).append((t, y, y, 0))
      if y.op is Ops.MOD and y.src[1].op is Ops.CONST and c != 0 and y.src[1].arg % c == 0: halves[c].append((t, y.src[0], y, 0))
  for m in mods:
    if (q := m.src[0]).op is Ops.IDIV and q.src[1].op is Ops.CONST: halves.setdefault(q.src[1].arg, []).append((m, q.src[0], q.src[0], q.src[1].arg * m.src[1].arg))
  for t in mods:
    x, c, k = t.src[0], t.src[1].arg, terms[t]
    found = [(o, z, n) for o, y, z, n in halves.get(c, ()) if o is not t and terms[o] == k * c and _congruent(y, x, c)]
    if not found and x.op is Ops.IDIV and x.src[1].op is Ops.CONST and (o := idivs.get((x.src[0], x.src[1].arg * c))) is not None and terms[o] == k * c:
      found = [(o, x, 0)]
    if not found: continue
    other, z, n = found[0]
    new = {tt: kk for tt, kk in terms.items() if tt is not t and tt is not other}
    rt, rc = split_terms(UOp(Ops.MOD, z.dtype, (z, _iconst(z.dtype, n))) if n else z)
    for tt, kk in rt.items(): new[tt] = new.get(tt, 0) + k * kk
    return {tt: kk for tt, kk in new.items() if kk != 0}, const + k * rc
  return None

def _base(t: UOp) -> UOp: return t.src[0] if t.op is Ops.MUL and t.src[1].op is Ops.CONST else t
def _is_plain_term(t: UOp) -> bool:
  """A canonical term t or t*k whose t can neither merge with a different-looking term nor be half of a div/mod pair."""
  return _base(t).op not in (Ops.ADD, Ops.CONST, Ops.MUL, Ops.MOD, Ops.IDIV) and not (t.op is Ops.MUL and t.src[1].arg in (0, 1))

def simplify_sum(x: UOp) -> UOp | None:
  if x in _canonical_sums: return None
  a, t = x.src
  # fast path for a sum built one term at a time: a is canonical (sources reach their fixed point before their user;
  # where they have not, a changes and x is rebuilt), and t sorts strictly after a's last term, so it is a new term
  if a.op is Ops.ADD and a.src[1].op is not Ops.CONST and _is_plain_term(t) and _order_key(_base(t)) > _order_key(_base(a.src[1])): return None
  terms, const = split_terms(x)
  while (r := _fold_divmod_pairs(terms, const)) is not None: terms, const = r
  new = build_sum(terms, const, x.dtype, canonical=True)
  return new if new is not x else None

# ***** division and remainder by a constant *****

def _by_size(terms: dict[UOp, int], const: int) -> tuple[list[tuple[UOp, int]], list[tuple]]:
  """Terms by decreasing |coefficient|, and for every i the bounds of const plus the terms after the first i."""
  order = sorted(terms.items(), key=lambda tk: (-abs(tk[1]), _order_key(tk[0])))
  rest = [(const, const)] * (len(order) + 1)
  for i in range(len(order) - 1, -1, -1):
    t, k = order[i]
    rest[i] = (rest[i+1][0] + min(k * t.vmin, k * t.vmax), rest[i+1][1] + max(k * t.vmin, k * t.vmax))
  return order, rest

def _divide(x: UOp, c: int) -> tuple[UOp | None, UOp | None]:
  """(x//c, x%c) in simpler terms for c > 1, None where there is none. IDIV and MOD both read their half from here,
  so they split x the same way and _fold_divmod_pairs still finds (x//c)*c + x%c after both were simplified."""
  dt = x.dtype
  def idiv(a: UOp, m: int) -> UOp: return a if m == 1 else UOp(Ops.IDIV, dt, (a, _iconst(dt, m)))
  def mod(a: UOp, m: int) -> UOp: return _iconst(dt, 0) if m == 1 else UOp(Ops.MOD, dt, (a, _iconst(dt, m)))
  terms, const = split_terms(x)
  if (g := math.gcd(c, const, *terms.values())) > 1:  # x = g*y, c = g*m: x//c = y//m and x%c = g*(y%m), for any sign
    y = build_sum({t: k // g for t, k in terms.items()}, const // g, dt)
    return idiv(y, c // g), UOp(Ops.MUL, dt, (mod(y, c // g), _iconst(dt, g)))
  if x.vmin < 0: return None, None  # below, x//c is floor(x/c): only for x >= 0
  # every coefficient reduced mod c: x = c*q + r; with 0 <= r < c, x//c = q and x%c = r
  rem = {t: k % c for t, k in terms.items() if k % c != 0}
  rlo, rhi = _sum_bounds(rem, const % c)
  if 0 <= rlo and rhi < c: return build_sum({t: k // c for t, k in terms.items() if k // c != 0}, const // c, dt), build_sum(rem, const % c, dt)
  # x = g*s + r, with g | c the gcd of the largest coefficients and 0 <= r < g: x//c = s//(c/g), x%c = (s%(c/g))*g + r
  order, rest = _by_size(terms, 0)
  gp = 0
  for i, (t, k) in enumerate(order):
    if (g := math.gcd(gp := math.gcd(gp, k), c)) == 1: break
    lo, hi = rest[i+1][0] + const % g, rest[i+1][1] + const % g
    if 0 <= lo and hi < g:
      s = build_sum({tt: kk // g for tt, kk in order[:i+1]}, const // g, dt)
      r = build_sum(dict(order[i+1:]), const % g, dt)
      return idiv(s, c // g), UOp(Ops.ADD, dt, (UOp(Ops.MUL, dt, (mod(s, c // g), _iconst(dt, g))), r))
  # only for x%c: the terms that are multiples of c leave, x = c*q + r with r >= 0 (coefficients untouched), x%c = r%c.
  # x//c = q + r//c too, but that form would hide x//c from _fold_divmod_pairs: x//c stays as it is.
  keep = {t: k for t, k in terms.items() if k % c != 0}
  if (len(keep) == len(terms) and 0 <= const < c) or _sum_bounds(keep, const % c)[0] < 0: return None, None
  return None, mod(build_sum(keep, const % c, dt), c)

def rule_idiv(x: UOp, d: UOp) -> UOp | None:
  c, dt = d.arg, x.dtype
  if c == 0: return _iconst(dt, 0)
  if c < 0: return UOp(Ops.MUL, dt, (UOp(Ops.IDIV, dt, (x, _iconst(dt, -c))), _iconst(dt, -1)))  # x // -c == -(x // c)
  if -c < x.vmin and x.vmax < c: return _iconst(dt, 0)
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:  # truncation composes: (y//a)//b == y//(a*b)
    return UOp(Ops.IDIV, dt, (x.src[0], _iconst(dt, x.src[1].arg * c)))
  return None if c == 1 else _divide(x, c)[0]

def rule_mod(x: UOp, d: UOp) -> UOp | None:
  c, dt = d.arg, x.dtype
  if c == 0 or c == 1 or c == -1: return _iconst(dt, 0)
  if c < 0: return UOp(Ops.MOD, dt, (x, _iconst(dt, -c)))  # the remainder takes the dividend's sign: x % -c == x % c
  if -c < x.vmin and x.vmax < c: return x
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg != 0 and x.src[1].arg % c == 0:  # (y % (m*c)) % c == y % c
    return UOp(Ops.MOD, dt, (x.src[0], d))
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0 and x.src[0].vmin >= 0:
    # (y//a)%c with y = a*c*q + r, r >= 0: y//a = c*q + r//a, so the terms of y that are multiples of a*c leave
    terms, const = split_terms(x.src[0])
    n = x.src[1].arg * c
    keep = {t: k for t, k in terms.items() if k % n != 0}
    if (len(keep) < len(terms) or not 0 <= const < n) and _sum_bounds(keep, const % n)[0] >= 0:
      return UOp(Ops.MOD, dt, (UOp(Ops.IDIV, dt, (build_sum(keep, const % n, dt), x.src[1])), d))
  return _divide(x, c)[1]

# ***** comparisons *****

def rule_lt(x: UOp, c: UOp) -> UOp | None:
  """sum < c. Split the sum into g*s + r, the terms with the largest coefficients (gcd g) and a rest r with
  0 <= r < g. Writing c - const = g*q + m (0 <= m < g): g*s + r < g*q + m is s < q, or s < q+1 when r < m always."""
  terms, const = split_terms(x)
  if not terms: return None
  order, rest = _by_size(terms, 0)
  g = 0
  for i, (t, k) in enumerate(order):
    g = math.gcd(g, k)
    (rlo, rhi) = rest[i+1]
    if (g == 1 and i + 1 < len(order)) or rlo < 0 or rhi >= g: continue
    q, m = divmod(c.arg - const, g)
    if m != 0 and rlo < m:
      if rhi >= m: continue
      q += 1
    return UOp(Ops.CMPLT, dtypes.bool, (build_sum({tt: kk // g for tt, kk in order[:i+1]}, 0, x.dtype), _iconst(x.dtype, q)))
  return None

def rule_mul(x: UOp) -> UOp | None:
  """Index products by a constant: the constant goes right, constants multiply, and a sum is distributed."""
  a, c = x.src
  if a.op is Ops.CONST: return None if c.op is Ops.CONST else UOp(Ops.MUL, x.dtype, (c, a))
  if c.op is not Ops.CONST: return None
  if c.arg in (0, 1): return a if c.arg else c
  if a.op is Ops.MUL and a.src[1].op is Ops.CONST: return UOp(Ops.MUL, x.dtype, (a.src[0], _iconst(x.dtype, a.src[1].arg * c.arg)))
  if a.op is Ops.ADD: return UOp(Ops.ADD, x.dtype, (UOp(Ops.MUL, x.dtype, (a.src[0], c)), UOp(Ops.MUL, x.dtype, (a.src[1], c))))
  return None

def _diff_bounds(x: UOp, y: UOp) -> tuple:
  """Bounds of y - x, with like terms cancelled first: max(a, a+1) and a < a+1 are decided by it."""
  tx, cx = split_terms(x)
  ty, cy = split_terms(y)
  for t, k in tx.items(): ty[t] = ty.get(t, 0) - k
  return _sum_bounds(ty, cy - cx)

def rule_max(x: UOp, y: UOp) -> UOp | None:
  lo, hi = _diff_bounds(x, y)
  return y if lo >= 0 else x if hi <= 0 else None

def rule_lt_vars(x: UOp, y: UOp) -> UOp | None:
  lo, hi = _diff_bounds(x, y)
  return UOp.const(dtypes.bool, True) if lo > 0 else UOp.const(dtypes.bool, False) if hi <= 0 else None

def _is_int(u: UOp) -> bool: return dtypes.is_int(u.dtype)
def _not(x: UOp) -> UOp: return UOp(Ops.CMPNE, dtypes.bool, (x, UOp.const(dtypes.bool, True)))

symbolic_rules = PatternMatcher([
  # constant folding
  (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="x"), fold_const),
  (UPat(Ops.CAST, src=(UPat(Ops.CONST, name="c"),), name="x"), fold_cast),
  # bounds decide it
  (UPat(GroupOp.ALU, name="x"), lambda x: UOp.const(x.dtype, x.vmin) if x.vmin == x.vmax and (_is_int(x) or x.dtype == dtypes.bool) else None),
  # index math: canonical sums, div/mod folding, comparisons
  (UPat(Ops.ADD, dtype=dtypes.index, name="x"), simplify_sum),
  (UPat(Ops.MUL, dtype=dtypes.index, name="x"), rule_mul),
  (UPat(Ops.IDIV, dtype=dtypes.index, src=(UPat.var("x"), UPat.cvar("d"))), rule_idiv),
  (UPat(Ops.MOD, dtype=dtypes.index, src=(UPat.var("x"), UPat.cvar("d"))), rule_mod),
  (UPat(Ops.CMPLT, src=(UPat.var("x", dtype=dtypes.index), UPat.cvar("c"))), rule_lt),
  (UPat(Ops.CMPLT, src=(UPat.var("x", dtype=dtypes.index), UPat.var("y"))), rule_lt_vars),
  (UPat(Ops.MAX, dtype=dtypes.index, src=(UPat.var("x"), UPat.var("y"))), rule_max),
  # identities
  # x + 0.0 is not x for floats: -0.0 + 0.0 is +0.0 (x + -0.0 is x)
  (UPat.var("x") + UPat.const(None, 0).named("z"), lambda x, z: x if not dtypes.is_float(x.dtype) or math.copysign(1.0, z.arg) < 0 else None),
  (UPat.var("x") * 1, lambda x: x),
  (UPat.var("x", dtype=INTS + (dtypes.index, dtypes.bool)) * UPat.const(None, 0).named("z"), lambda x, z: z),  # z: the right dtype and device
  (UPat.var("x") // 1, lambda x: x),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.var("x"))), lambda x: UOp.const(x.dtype, 1) if x.vmin > 0 or x.vmax < 0 else None),
  (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
  (UPat(Ops.WHERE, src=(UPat(Ops.CONST, name="c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
  (UPat(Ops.WHERE, dtype=dtypes.bool, src=(UPat.var("c"), UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False))), lambda c: c),
  (UPat(Ops.WHERE, dtype=dtypes.bool, src=(UPat.var("c"), UPat.const(dtypes.bool, False), UPat.const(dtypes.bool, True))), lambda c: _not(c)),
  (UPat(Ops.WHERE, src=(UPat(Ops.CMPNE, src=(UPat.var("c", dtypes.bool), UPat.const(dtypes.bool, True))), UPat.var("a"), UPat.var("b"))),
   lambda c, a, b: UOp(Ops.WHERE, a.dtype, (c, b, a))),
  (UPat(Ops.CMPNE, src=(UPat(Ops.CMPNE, src=(UPat.var("x", dtypes.bool), UPat.const(dtypes.bool, True))), UPat.const(dtypes.bool, True))), lambda x: x),
  (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat(Ops.CONST, name="c")]), lambda x, c: x if c.arg else c),
  (UPat(Ops.OR, dtype=dtypes.bool, src=[UPat.var("x"), UPat(Ops.CONST, name="c")]), lambda x, c: c if c.arg else x),
  (UPat((Ops.AND, Ops.OR), src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.MAX, src=[UPat.var("x"), UPat.var("y")], name="m"), lambda m, x, y: x if _is_int(m) and x.vmin >= y.vmax else None),
  (UPat((Ops.CMPLT, Ops.CMPNE), src=(UPat.var("x"), UPat.var("x"))), lambda x: UOp.const(dtypes.bool, False) if _is_int(x) else None),
  (UPat(Ops.CMPEQ, src=(UPat.var("x"), UPat.var("x"))), lambda x: UOp.const(dtypes.bool, True) if _is_int(x) else None),
  (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
])

def simplify(u: UOp) -> UOp: return graph_rewrite(u, symbolic_rules)
