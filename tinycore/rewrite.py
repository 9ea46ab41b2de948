"""The rewrite engine: UPat patterns, a PatternMatcher that dispatches on the op, and graph_rewrite."""
from __future__ import annotations
import inspect, itertools, sys
from typing import TYPE_CHECKING, Any, Callable, Iterable
from tinycore.dtype import DType
from tinycore.ops import Ops, GroupOp
from tinycore import trace
if TYPE_CHECKING: from tinycore.uop import UOp

class UPat:
  """A pattern over UOps. `src` as a tuple matches in order, as a list in any order (commutative),
  as a single UPat matches every source. `name` binds the matched UOp for the callback."""
  __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "custom_early_reject")
  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False):
    self.op = None if op is None else (frozenset({op}) if isinstance(op, Ops) else frozenset(op))
    self.dtype = None if dtype is None else (frozenset({dtype}) if isinstance(dtype, DType) else frozenset(dtype))
    self.src, self.arg, self.name, self.allow_any_len = src, arg, name, allow_any_len

  @staticmethod
  def var(name: str | None = None, dtype=None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype=None) -> UPat: return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(dtype, b) -> UPat: return UPat(Ops.CONST, dtype, arg=b)
  def named(self, name: str) -> UPat:
    p = UPat(); p.op, p.dtype, p.src, p.arg, p.name, p.allow_any_len = self.op, self.dtype, self.src, self.arg, name, self.allow_any_len
    return p

  # operators for writing rules that read like the math they match
  def _alu(self, op: Ops, *x: UPat | Any) -> UPat:
    srcs = (self,) + tuple(s if isinstance(s, UPat) else UPat.const(None, s) for s in x)
    return UPat(op, src=list(srcs) if op in GroupOp.Commutative else srcs)
  def __add__(self, x): return self._alu(Ops.ADD, x)
  def __radd__(self, x): return self._alu(Ops.ADD, x)
  def __mul__(self, x): return self._alu(Ops.MUL, x)
  def __rmul__(self, x): return self._alu(Ops.MUL, x)
  def __floordiv__(self, x): return self._alu(Ops.IDIV, x)
  def __mod__(self, x): return self._alu(Ops.MOD, x)
  def __lt__(self, x): return self._alu(Ops.CMPLT, x)
  def __and__(self, x): return self._alu(Ops.AND, x)
  def __or__(self, x): return self._alu(Ops.OR, x)
  def ne(self, x): return self._alu(Ops.CMPNE, x)
  def maximum(self, x): return self._alu(Ops.MAX, x)
  def where(self, a, b): return self._alu(Ops.WHERE, a, b)
  def cast(self, dtype=None): return UPat(Ops.CAST, dtype, (self,))

  def __repr__(self):
    return f"UPat({sorted(o.name for o in self.op) if self.op else None}, name={self.name!r}, src={self.src!r}, arg={self.arg!r})"

  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """All ways u matches, each a dict of named bindings extending `store`."""
    if (self.op is not None and u.op not in self.op) or (self.dtype is not None and u.dtype not in self.dtype and u.dtype.scalar not in self.dtype) \
       or (self.arg is not None and self.arg != u.arg): return []
    if self.name is not None:
      if (prev := store.get(self.name)) is not None:
        if prev is not u: return []
      else: store = {**store, self.name: u}
    if self.src is None: return [store]
    if isinstance(self.src, UPat): return _match_seq([self.src]*len(u.src), u.src, [store])
    if len(self.src) != len(u.src) and not (self.allow_any_len and len(u.src) >= len(self.src)): return []
    if isinstance(self.src, list):
      out: list[dict[str, UOp]] = []
      for perm in itertools.permutations(self.src) if len(self.src) <= 3 else [self.src]:
        out.extend(_match_seq(perm, u.src[:len(perm)], [store]))
      return out
    return _match_seq(self.src, u.src[:len(self.src)], [store])

def _match_seq(pats, srcs, stores: list[dict[str, UOp]]) -> list[dict[str, UOp]]:
  for p, s in zip(pats, srcs):
    stores = [m for st in stores for m in p.match(s, st)]
    if not stores: return []
  return stores

class PatternMatcher:
  """Rules as data: (UPat, callback) pairs. Matching looks up the candidate rules by the node's op."""
  def __init__(self, patterns: list[tuple[UPat, Callable]]):
    self.patterns = patterns
    self.pdict: dict[Ops, list[tuple[UPat, Callable, bool]]] = {}
    wildcard: list[tuple[UPat, Callable, bool]] = []
    for pat, fn in patterns:
      entry = (pat, fn, "ctx" in inspect.signature(fn).parameters)
      for op in (pat.op if pat.op is not None else [None]):
        if op is None: wildcard.append(entry)
        else: self.pdict.setdefault(op, []).append(entry)
    # wildcard rules are appended to every op's list so rule order is kept per op
    for op in Ops: self.pdict[op] = self.pdict.get(op, []) + wildcard
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.patterns + other.patterns)
  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    for pat, fn, wants_ctx in self.pdict[u.op]:
      for m in pat.match(u, {}):
        if (ret := (fn(ctx=ctx, **m) if wants_ctx else fn(**m))) is not None and ret is not u: return ret
    return None

def graph_rewrite_map(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, done: dict[UOp, UOp] | None = None) -> dict[UOp, UOp]:
  """Rewrite the graph under `sink` to a fixed point; returns old node -> new node for every node visited.
  Top-down (default): sources are rewritten before their user. bottom_up=True tries the user first. `done`: nodes
  already rewritten (and their results), never visited again; it is filled in and returned (a pass over many sinks)."""
  if trace.capture is not None and trace.capture.group is not None: return _recorded_rewrite_map(sink, pm, ctx, bottom_up, done)
  replace: dict[UOp, UOp] = {} if done is None else done
  stack: list[tuple[UOp, int, UOp]] = [(sink, 0, sink)]
  while stack:
    n, stage, new_n = stack.pop()
    if n in replace: continue
    if stage == 0:
      if bottom_up and (r := pm.rewrite(n, ctx)) is not None:
        stack += [(n, 2, r), (r, 0, r)]
        continue
      stack.append((n, 1, n))
      stack.extend((s, 0, s) for s in reversed(n.src) if s not in replace)
    elif stage == 1:
      new_src = tuple(replace[s] for s in n.src)
      if all(a is b for a, b in zip(new_src, n.src)):
        if bottom_up or (r := pm.rewrite(n, ctx)) is None: replace[n] = n
        else: stack += [(n, 2, r), (r, 0, r)]
      else:
        x = n.replace(src=new_src)
        stack += [(n, 2, x), (x, 0, x)]
    else:
      if new_n in replace: replace[n] = replace[new_n]
      else: stack += [(n, 2, new_n), (new_n, 0, new_n)]
  return replace

class _ReportingMatcher:
  """A PatternMatcher's rules that tell a VIZ capture which rule fired on which node (PatternMatcher.rewrite's loop,
  which stays free of this bookkeeping)."""
  def __init__(self, pm: PatternMatcher, capture: trace.Capture, call: dict): self.pm, self.capture, self.call = pm, capture, call
  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    for pat, fn, wants_ctx in self.pm.pdict[u.op]:
      for m in pat.match(u, {}):
        if (ret := (fn(ctx=ctx, **m) if wants_ctx else fn(**m))) is not None and ret is not u:
          self.capture.step(self.call, (pat, fn), u, ret)
          return ret
    return None

def _recorded_rewrite_map(sink: UOp, pm: PatternMatcher, ctx: Any, bottom_up: bool, done: dict[UOp, UOp] | None) -> dict[UOp, UOp]:
  """graph_rewrite_map while VIZ records: one call with its steps in the current group. Rewrites the rules run inside
  it (a rule simplifying with graph_rewrite) are part of their step, not calls of their own."""
  cap = trace.capture
  assert cap is not None and cap.group is not None
  frame = sys._getframe(1)
  while frame.f_back is not None and frame.f_code.co_filename == __file__: frame = frame.f_back
  where = f"{frame.f_code.co_name} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"
  # nodes `done` already maps are taken as rewritten before the call starts: its input shows them so, and its steps replay
  start = graph_substitute(sink, done) if done else sink
  call, group = cap.rewrite_call(start, where), cap.group
  cap.group = None
  try: replace = graph_rewrite_map(sink, _ReportingMatcher(pm, cap, call), ctx, bottom_up, done)  # type: ignore[arg-type]
  finally: cap.group = group
  call["output"] = cap.node(replace[sink])
  return replace

def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False) -> UOp:
  return graph_rewrite_map(sink, pm, ctx, bottom_up)[sink]

def graph_substitute(sink: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """Replace nodes by the mapping (no rules involved): rebuilds the users of every replaced node."""
  if not mapping: return sink
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort(gate=lambda x: x not in mapping):
    if u in mapping: memo[u] = mapping[u]
    else:
      ns = tuple(memo[s] for s in u.src)
      memo[u] = u if all(a is b for a, b in zip(ns, u.src)) else u.replace(src=ns)
  return memo[sink]
