"""Symbolic integer simplification as rewrite rules: folding, combining terms, div/mod folding from bounds."""
from __future__ import annotations
import math
import numpy as np
from tinycore.dtype import dtypes, to_np_dtype, INTS
from tinycore.uop import UOp, Ops, GroupOp, exec_alu, exec_cast, _cdiv, _cmod
from tinycore.rewrite import UPat, PatternMatcher, graph_rewrite

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

def split_terms(u: UOp) -> tuple[dict[UOp, int], int]:
  """u as {term: coefficient} plus a constant, looking through ADD and MUL-by-const."""
  terms: dict[UOp, int] = {}
  const = 0
  stack = [(u, 1)]
  while stack:
    x, k = stack.pop()
    if x.op is Ops.ADD: stack.extend((s, k) for s in x.src)
    elif x.op is Ops.CONST: const += k * x.arg
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST: stack.append((x.src[0], k * x.src[1].arg))
    else: terms[x] = terms.get(x, 0) + k
  return {t: c for t, c in terms.items() if c != 0}, const

def build_sum(terms: dict[UOp, int], const: int, dtype) -> UOp:
  parts = [t if c == 1 else t * UOp.const(dtype, c) for t, c in sorted(terms.items(), key=lambda tc: _order_key(tc[0]))]
  if const != 0 or not parts: parts.append(UOp.const(dtype, const))
  out = parts[0]
  for p in parts[1:]: out = UOp(Ops.ADD, dtype, (out, p))
  return out

def _order_key(u: UOp) -> tuple:
  # a stable order independent of construction order: ranges/variables by their arg, then by structure
  return (u.op.value, str(u.arg), len(u.src), tuple(_order_key(s) for s in u.src[:2]) if u.src else ())

def canonical_sum(x: UOp) -> UOp | None:
  terms, const = split_terms(x)
  new = build_sum(terms, const, x.dtype)
  return new if new is not x else None

def _fold_divmod_pair(terms: dict[UOp, int], const: int) -> tuple[dict[UOp, int], int] | None:
  """(x//c)*c + x%c -> x: the pair a reshape round trip leaves behind."""
  for t, k in terms.items():
    if t.op is Ops.MOD and t.src[1].op is Ops.CONST:
      x, c = t.src[0], t.src[1].arg
      d = UOp(Ops.IDIV, t.dtype, t.src)
      if terms.get(d) == k * c and x.vmin >= 0:
        new = dict(terms); del new[t]; del new[d]
        xt, xc = split_terms(x)
        for tt, kk in xt.items(): new[tt] = new.get(tt, 0) + k * kk
        return {a: b for a, b in new.items() if b != 0}, const + k * xc
  return None

def simplify_sum(x: UOp) -> UOp | None:
  terms, const = split_terms(x)
  while (r := _fold_divmod_pair(terms, const)) is not None: terms, const = r
  new = build_sum(terms, const, x.dtype)
  return new if new is not x else None

def fold_divmod(x: UOp, d: UOp) -> UOp | None:
  """x//c and x%c for x >= 0, c > 0: split x into c*quotient + remainder when the remainder's bounds allow."""
  c = d.arg
  if c <= 0 or x.vmin < 0: return None
  is_mod = None
  terms, const = split_terms(x)
  g = math.gcd(c, const, *terms.values())
  if g > 1:  # (g*y + g*k) // (g*m) == (y + k) // m ; (...) % (g*m) == g*((y+k) % m)
    inner = build_sum({t: k // g for t, k in terms.items()}, const // g, x.dtype)
    return (inner, c // g, g)  # type: ignore[return-value]
  quot_terms = {t: k // c for t, k in terms.items() if k // c != 0}
  rem_terms = {t: k % c for t, k in terms.items() if k % c != 0}
  if any(t.vmin < 0 for t in rem_terms): return None
  rem = build_sum(rem_terms, const % c, x.dtype)
  if rem.vmin < 0 or rem.vmax >= c: return None
  return (build_sum(quot_terms, const // c, x.dtype), rem)  # type: ignore[return-value]

def rule_idiv(x: UOp, d: UOp) -> UOp | None:
  if x.vmin >= 0 and x.vmax < d.arg and d.arg > 0: return UOp.const(x.dtype, 0)
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0 and d.arg > 0 and x.src[0].vmin >= 0:
    return x.src[0] // (x.src[1].arg * d.arg)
  r = fold_divmod(x, d)
  if r is None: return None
  if len(r) == 3: return r[0] // r[1]  # type: ignore[misc]
  quot, rem = r
  return quot if rem.vmax < d.arg else None

def rule_mod(x: UOp, d: UOp) -> UOp | None:
  if d.arg == 1: return UOp.const(x.dtype, 0)
  if x.vmin >= 0 and x.vmax < d.arg and d.arg > 0: return x
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and d.arg > 0 and x.src[1].arg % d.arg == 0 and x.vmin >= 0: return x.src[0] % d
  r = fold_divmod(x, d)
  if r is None: return None
  if len(r) == 3: return (r[0] % r[1]) * r[2]  # type: ignore[misc]
  return r[1]

def rule_lt(x: UOp, c: UOp) -> UOp | None:
  """g*y < c  ->  y < ceil(c/g) for linear sums with a common factor."""
  terms, const = split_terms(x)
  if not terms: return None
  g = math.gcd(*terms.values())
  if g <= 1 or any(k < 0 for k in terms.values()): return None
  return UOp(Ops.CMPLT, dtypes.bool, (build_sum({t: k // g for t, k in terms.items()}, 0, x.dtype), UOp.const(x.dtype, -((const - c.arg) // g))))

def _is_int(u: UOp) -> bool: return dtypes.is_int(u.dtype)

symbolic_rules = PatternMatcher([
  # constant folding
  (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="x"), fold_const),
  (UPat(Ops.CAST, src=(UPat(Ops.CONST, name="c"),), name="x"), fold_cast),
  # bounds decide it
  (UPat(GroupOp.ALU, name="x"), lambda x: UOp.const(x.dtype, x.vmin) if (_is_int(x) or x.dtype == dtypes.bool) and x.vmin == x.vmax else None),
  # identities
  (UPat.var("x") + 0, lambda x: x),
  (UPat.var("x") * 1, lambda x: x),
  (UPat.var("x", dtype=INTS + (dtypes.index, dtypes.bool)) * 0, lambda x: x.const_like(0)),
  (UPat.var("x") // 1, lambda x: x),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.var("x"))), lambda x: x.const_like(1) if x.vmin > 0 else None),
  (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
  (UPat(Ops.WHERE, src=(UPat(Ops.CONST, name="c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
  (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat(Ops.CONST, name="c")]), lambda x, c: x if c.arg else c),
  (UPat(Ops.OR, dtype=dtypes.bool, src=[UPat.var("x"), UPat(Ops.CONST, name="c")]), lambda x, c: c if c.arg else x),
  (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.MAX, src=[UPat.var("x"), UPat.var("y")], name="m"), lambda m, x, y: x if _is_int(m) and x.vmin >= y.vmax else None),
  (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
  # index math: canonical sums, div/mod folding, comparisons
  (UPat(Ops.ADD, dtype=dtypes.index, name="x"), simplify_sum),
  (UPat(Ops.MUL, dtype=dtypes.index, src=(UPat(Ops.ADD, name="a"), UPat.cvar("c"))), lambda a, c: a.src[0]*c + a.src[1]*c),
  (UPat(Ops.MUL, dtype=dtypes.index, src=(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2"))), lambda x, c1, c2: x * (c1.arg*c2.arg)),
  (UPat(Ops.MUL, dtype=dtypes.index, src=(UPat.cvar("c"), UPat.var("x"))), lambda c, x: x * c if x.op is not Ops.CONST else None),
  (UPat(Ops.IDIV, dtype=dtypes.index, src=(UPat.var("x"), UPat.cvar("d"))), rule_idiv),
  (UPat(Ops.MOD, dtype=dtypes.index, src=(UPat.var("x"), UPat.cvar("d"))), rule_mod),
  (UPat(Ops.CMPLT, src=(UPat.var("x", dtype=dtypes.index), UPat.cvar("c"))), rule_lt),
])

def simplify(u: UOp) -> UOp: return graph_rewrite(u, symbolic_rules)
