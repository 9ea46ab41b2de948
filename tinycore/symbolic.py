"""Symbolic integer simplification as rewrite rules: folding, combining terms, div/mod folding from bounds."""
from __future__ import annotations
import math, weakref
import numpy as np
from tinycore.dtype import dtypes, to_np_dtype, INTS
from tinycore.uop import UOp, Ops, GroupOp, exec_alu, exec_cast, _cdiv, _cmod
from tinycore.rewrite import UPat, PatternMatcher, graph_rewrite

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
  out = exec_alu(x.op, x.dtype, vals)
  return UOp.const(x.dtype, out.item() if hasattr(out, "item") else out)

def fold_cast(c: UOp, x: UOp) -> UOp:
  if dtypes.index in (x.dtype, c.dtype): return UOp.const(x.dtype, int(c.arg))
  val = np.asarray(c.arg, np.float32 if c.dtype == dtypes.bfloat16 else to_np_dtype(c.dtype))
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
