"""Symbolic simplification: the rules codegen relies on, and a fuzz of random index math proved equal by z3."""
import math, random
import numpy as np
import pytest
import z3
from hypothesis import example, given, settings, strategies as st
from tinycore.dtype import dtypes
from tinycore.helpers import strides_for_shape
from tinycore.uop import UOp, Ops, AxisType, Variable, _min_max, _cdiv, _cmod, exec_alu, simplify

def c(v: int) -> UOp: return UOp.const(dtypes.index, v)
def rng(i: int, n: int) -> UOp: return UOp(Ops.RANGE, dtypes.index, (c(n),), (i, AxisType.GLOBAL))
def same(got: UOp, want: UOp): assert got is want, f"got {got.render()}, want {want.render()}"

a, b, n = Variable("a", 0, 7), Variable("b", 0, 3), Variable("n", 1, 64)
s = Variable("s", -5, 5)  # a signed one: rules must keep C's truncating division right for negatives

# ***** z3: the exact meaning of index math, C truncation included *****

def z3_expr(u: UOp, leaves: dict, defs: list) -> dict:
  """z3 terms for every node under u (Int for index math, Bool for bool). Leaves become z3 variables with their bounds.
  All of it stays linear, which z3 decides fast: x//d and x%d become fresh q, r with the definition x == d*q + r,
  r of x's sign and |r| < |d| appended to defs; products of two unknowns become a case split."""
  z: dict[UOp, z3.ExprRef] = {}
  for x in u.toposort():
    o, v = x.op, [z[y] for y in x.src]
    if o is Ops.CONST: z[x] = z3.BoolVal(x.arg) if x.dtype == dtypes.bool else z3.IntVal(x.arg)
    elif o in (Ops.DEFINE_VAR, Ops.RANGE):
      name = x.arg[0] if o is Ops.DEFINE_VAR else f"r{x.arg[0]}"
      z[x] = leaves.setdefault(name, (z3.Int(name), x.vmin, x.vmax))[0]
    elif o is Ops.ADD: z[x] = v[0] + v[1]
    elif o is Ops.SUB: z[x] = v[0] - v[1]
    elif o is Ops.MUL:
      if Ops.CONST in (x.src[0].op, x.src[1].op): z[x] = v[0] * v[1]
      else:  # keep it linear: a product of unknowns as a case split over the values of the narrower one
        (p, zp), (_, zq) = sorted(zip(x.src, v), key=lambda sv: sv[0].vmax - sv[0].vmin)
        assert p.vmax - p.vmin <= 64, "the fuzzer multiplies narrow unknowns only"
        z[x] = z3.Sum([z3.If(zp == i, i * zq, 0) for i in range(p.vmin, p.vmax + 1)])
    elif o is Ops.NEG: z[x] = -v[0]
    elif o in (Ops.IDIV, Ops.MOD):
      assert x.src[1].op is Ops.CONST, "the fuzzer divides by constants only"
      d = x.src[1].arg
      if d == 0: z[x] = z3.IntVal(0); continue
      q, r = z3.FreshInt("q"), z3.FreshInt("r")
      defs += [v[0] == d * q + r, z3.If(v[0] >= 0, z3.And(r >= 0, r < abs(d)), z3.And(r <= 0, r > -abs(d)))]
      z[x] = q if o is Ops.IDIV else r
    elif o is Ops.MAX: z[x] = z3.If(v[0] >= v[1], v[0], v[1])
    elif o is Ops.CMPLT: z[x] = v[0] < v[1]
    elif o is Ops.CMPNE: z[x] = v[0] != v[1]
    elif o is Ops.CMPEQ: z[x] = v[0] == v[1]
    elif o is Ops.AND: z[x] = z3.And(v[0], v[1])
    elif o is Ops.OR: z[x] = z3.Or(v[0], v[1])
    elif o is Ops.WHERE: z[x] = z3.If(v[0], v[1], v[2])
    else: raise NotImplementedError(o)
  return z

def _bound_claims(nodes, zs) -> list:
  """(z3 claim, description) that some node leaves its vmin/vmax."""
  out = []
  for x in nodes:
    lo, hi = x.vmin_vmax
    if x.dtype == dtypes.bool:
      if lo: out.append((z3.Not(zs[x]), f"vmin=True of {x.render()}"))
      if not hi: out.append((zs[x], f"vmax=False of {x.render()}"))
    else:
      if lo != float("-inf"): out.append((zs[x] < lo, f"vmin={lo} of {x.render()}"))
      if hi != float("inf"): out.append((zs[x] > hi, f"vmax={hi} of {x.render()}"))
  return out

def prove_simplify(u: UOp) -> UOp:
  """Simplify u and prove with z3, for every value the leaves can take, that the result equals u and that the
  vmin/vmax of every node of both graphs are true bounds. Returns the simplified UOp."""
  out = simplify(u)
  leaves: dict = {}
  defs: list = []
  zu, zo = z3_expr(u, leaves, defs), z3_expr(out, leaves, defs)
  # two queries: the bounds are quick to prove, and alongside them the equality can get much slower
  for claims in (_bound_claims(u.toposort(), zu) + _bound_claims(out.toposort(), zo), [(zu[u] != zo[out], "simplified != original")]):
    solver = z3.Solver()
    solver.set("timeout", 500)
    for zv, lo, hi in leaves.values(): solver.add(zv >= lo, zv <= hi)
    solver.add(*defs, z3.Or([cl for cl, _ in claims]))
    if (res := solver.check()) == z3.sat:
      m = solver.model()
      broken = [why for cl, why in claims if z3.is_true(m.eval(cl, model_completion=True))]
      raise AssertionError(f"{u.render()}  ->  {out.render()}\n  counterexample {m}: {broken}")
    if res != z3.unsat: check_every_value(u, out)  # z3 gave up: the leaves are bounded, so try every value instead
  return out

def _np_eval(u: UOp, grid: dict) -> dict:
  """Every node under u evaluated on a grid of leaf values (numpy broadcasting), with C division written out."""
  v: dict[UOp, np.ndarray] = {}
  for x in u.toposort():
    o, s = x.op, [v[y] for y in x.src]
    if o is Ops.CONST: v[x] = np.array(x.arg, dtype=bool if x.dtype == dtypes.bool else np.int64)
    elif o in (Ops.DEFINE_VAR, Ops.RANGE): v[x] = grid[x]
    elif o in (Ops.IDIV, Ops.MOD):
      q = np.where(s[1] == 0, 0, np.sign(s[0]) * np.sign(s[1]) * (np.abs(s[0]) // np.where(s[1] == 0, 1, np.abs(s[1]))))
      v[x] = q if o is Ops.IDIV else np.where(s[1] == 0, 0, s[0] - s[1] * q)
    else:
      fn = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
            Ops.CMPEQ: np.equal, Ops.AND: np.logical_and, Ops.OR: np.logical_or, Ops.WHERE: np.where}[o]
      v[x] = fn(*s)
  return v

def check_every_value(u: UOp, out: UOp):
  """The exhaustive version of prove_simplify's claims, for when z3 times out."""
  leaves = sorted({x for x in [*u.toposort(), *out.toposort()] if x.op in (Ops.DEFINE_VAR, Ops.RANGE)}, key=lambda x: x.render())
  assert np.prod([x.vmax - x.vmin + 1 for x in leaves]) <= 5e6, f"too many values to try for {u.render()}"
  axes = np.ix_(*[np.arange(x.vmin, x.vmax + 1) for x in leaves])
  grid = dict(zip(leaves, axes))
  vu, vo = _np_eval(u, grid), _np_eval(out, grid)
  assert np.array_equal(*np.broadcast_arrays(vu[u], vo[out])), f"{u.render()}  ->  {out.render()}: differ"
  for vals in (vu, vo):
    for x, a in vals.items():
      assert x.vmin <= a.min() and a.max() <= x.vmax, f"{x.render()} has values in [{a.min()}, {a.max()}], outside [{x.vmin}, {x.vmax}]"

# ***** constant folding and like terms *****

def test_constant_folding():
  same(simplify(c(3) + c(4) * c(2)), c(11))
  same(simplify(c(-7) // c(2)), c(-3))  # C truncates toward zero
  same(simplify(c(-7) % c(2)), c(-1))
  same(simplify(c(7) // c(0)), c(0))    # a zero divisor gives 0
  same(simplify(c(3) < c(4)), UOp.const(dtypes.bool, True))
  same(simplify(c(3).maximum(c(9))), c(9))

def test_combine_like_terms():
  same(simplify(a + 3 + a * 2 - a), a * 2 + 3)
  same(simplify(a - a), c(0))
  same(simplify((a + b) * 3 - b * 3), a * 3)
  same(simplify(a * 2 * 3), a * 6)
  same(simplify(a + 1 + 2), a + 3)

def test_sum_order_is_canonical():
  same(simplify(a + b + n), simplify(n + b + a))
  same(simplify((a + 1) * 4 + b), simplify(b + 4 + a * 4))

# ***** div and mod *****

@pytest.mark.parametrize("x", [a, a * 3 + b, rng(0, 100), n])
@pytest.mark.parametrize("k", [2, 4, 7])
def test_reshape_round_trip(x, k):
  same(simplify((x // k) * k + x % k), simplify(x))

def test_reshape_round_trip_signed():  # (x//k)*k + x%k == x holds for C division of negatives too
  same(simplify((s // 3) * 3 + s % 3), s)

def _flat(idx, shape) -> UOp: return sum((i * st for i, st in zip(idx, strides_for_shape(shape))), c(0))
def _unflat(flat, shape): return tuple(c(0) if m == 1 else (flat // st) % m for m, st in zip(shape, strides_for_shape(shape)))

@pytest.mark.parametrize("s1,s2", [((4, 6), (24,)), ((4, 6), (2, 12)), ((4, 6), (8, 3)), ((2, 3, 4), (6, 4)), ((2, 3, 4), (4, 6)),
                                   ((6, 4), (2, 3, 4)), ((12,), (3, 4)), ((3, 4), (2, 2, 3)), ((16, 16), (4, 4, 4, 4)), ((5, 7), (35,))])
def test_reshape_unflatten_reflatten(s1, s2):
  """What lowering a reshape builds: the flat index of s1's ranges, unflattened to s2 and flattened again."""
  flat = _flat([rng(i, m) for i, m in enumerate(s1)], s1)
  idx = [simplify(x) for x in _unflat(flat, s2)]
  assert all(x.vmin >= 0 and x.vmax < m for x, m in zip(idx, s2))
  same(simplify(_flat(idx, s2)), simplify(flat))

def test_reshape_round_trip_random():
  """Unflatten then flatten any index >= 0 (offsets and overlapping strides included): it is the index % size."""
  r = random.Random(0)
  for _ in range(200):
    lin = sum((v * r.choice([1, 2, 3, 4, 8, 12, 16]) for v in r.sample([a, b, n, rng(0, 16), rng(1, 5)], r.randint(1, 3))), c(r.randint(0, 8)))
    shape = [r.choice([2, 3, 4, 6]) for _ in range(r.randint(1, 3))]
    same(simplify(_flat(_unflat(lin, shape), shape)), simplify(lin % math.prod(shape)))

def test_reshape_unflatten_is_simple():
  r0, r1 = rng(0, 6), rng(1, 4)
  same(simplify((r0 * 4 + r1) // 12), r0 // 3)    # r1 < 4 cannot carry r0*4 past a multiple of 12
  same(simplify(((r0 * 4 + r1) // 4) % 3), r0 % 3)
  same(simplify((r0 * 4 + r1) % 8), r1 + (r0 % 2) * 4)

@pytest.mark.parametrize("x", [Variable("y", 0, 100), Variable("w", -50, 50)])
def test_divmod_pairs_through_mod(x):
  same(simplify(((x % 12) // 4) * 4 + x % 4), x % 12)            # (x%12)%4 became x%4, the pair is still found
  same(simplify(((x // 3) % 4) * 3 + x % 3), x % 12)
  same(simplify((x // 12) * 12 + ((x // 3) % 4) * 3 + x % 3), x)

def test_split_divmod():
  same(simplify((a * 4 + b) // 4), a)
  same(simplify((a * 4 + b) % 4), b)
  same(simplify((a * 4 + b + 4) // 4), a + 1)
  same(simplify((a * 8 + b * 2) // 2), a * 4 + b)
  same(simplify((a * 8 + b * 2) % 4), (b % 2) * 2)
  big_b = Variable("bb", 0, 9)
  same(simplify((a * 4 + big_b) % 4), big_b % 4)        # the remainder does not fit: multiples of 4 still leave
  same(simplify((a * 4 + big_b) // 4), (a * 4 + big_b) // 4)  # a + bb//4 would hide the pair from the round trip
  same(simplify(((a * 4 + big_b) // 4) * 4 + (a * 4 + big_b) % 4), a * 4 + big_b)

def test_nested_div_and_mod():
  x = Variable("x", 0, 1000)
  same(simplify((x // 2) // 3), x // 6)
  w = Variable("w", -50, 50)
  same(simplify((w // 2) // 3), w // 6)  # also for negatives under truncation
  same(simplify((x % 12) % 4), x % 4)
  same(simplify((x % 4) % 12), x % 4)
  same(simplify((x // 4) % 1), c(0))
  same(simplify(x % 1), c(0))

def test_div_mod_from_bounds():
  same(simplify(b // 4), c(0))
  same(simplify(b % 4), b)
  same(simplify(rng(0, 16) // 16), c(0))
  same(simplify((a + 2) // 10), c(0))

# ***** comparisons *****

def test_lt_common_factor():
  T = UOp.const(dtypes.bool, True)
  same(simplify(a * 4 < 9), a < 3)
  same(simplify(a * 4 < 8), a < 2)
  same(simplify((a * 4 + b) < 8), a < 2)       # 0 <= b < 4 cannot carry a*4 past a multiple of 4
  same(simplify((a * 4 + b + 1) < 9), a < 2)
  same(simplify(a + 3 < 5), a < 2)
  same(simplify(a < 8), T)
  same(simplify(a < 0), UOp.const(dtypes.bool, False))
  same(simplify((a * 6 + b * 2) < 12), (a * 3 + b) < 6)

def test_cmp_same():
  F = UOp.const(dtypes.bool, False)
  same(simplify(a < a), F)
  same(simplify(a.ne(a)), F)

# ***** bounds *****

def test_bounds():
  assert rng(0, 16).vmin_vmax == (0, 15)
  assert a.vmin_vmax == (0, 7) and s.vmin_vmax == (-5, 5)
  assert (a * 4 + b).vmin_vmax == (0, 31)
  assert (a - b).vmin_vmax == (-3, 7)
  assert (s * -2).vmin_vmax == (-10, 10)
  assert (a // 2).vmin_vmax == (0, 3) and (s // 2).vmin_vmax == (-2, 2)
  assert (a % 4).vmin_vmax == (0, 3) and (s % 4).vmin_vmax == (-3, 3) and (b % 4).vmin_vmax == (0, 3)
  assert a.maximum(s).vmin_vmax == (0, 7)
  assert (a < 8).vmin_vmax == (True, True) and (a < 3).vmin_vmax == (False, True)
  assert (a < b).where(a, c(9)).vmin_vmax == (0, 9)

# ***** where / and / or *****

def test_where_and_or():
  T, F = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
  cond = a < 3
  same(simplify(cond.where(b, b)), b)
  same(simplify((a < 8).where(a, b)), a)
  same(simplify((a < 0).where(a, b)), b)
  same(simplify(cond & T), cond)
  same(simplify(cond & F), F)
  same(simplify(cond | T), T)
  same(simplify(cond | F), cond)
  same(simplify(cond & cond), cond)
  same(simplify(cond | cond), cond)
  same(simplify(cond.where(T, F)), cond)
  same(simplify(a.maximum(a + 1)), a + 1)
  same(simplify(a.maximum(b + 8)), b + 8)

def test_float_math_is_left_alone():
  x = Variable("x", 0, 10).cast(dtypes.float32)
  y = UOp(Ops.NEG, dtypes.float32, (x,))
  assert simplify(y.ne(y)) is y.ne(y)  # NaN != NaN: not foldable for floats

def test_big_graphs():
  """Deep chains and long sums simplify without recursion errors, and a sum built in order stays linear."""
  x = Variable("x", 0, 100)
  e = x
  for i in range(2000): e = (e + i % 5) % 1000 if i % 2 else e.maximum(x + i % 7)
  assert simplify(e).vmax <= 1106
  rs = [rng(i, 10) for i in range(300)]
  total, want = c(0), rs[0]
  for i, r in enumerate(rs): total = total + r * (i + 1)
  for i, r in enumerate(rs[1:]): want = want + r * (i + 2)
  same(simplify(total), want)
  same(simplify(sum(reversed(rs[:60]), c(3)) - 3), simplify(sum(rs[:60], c(0))))  # each term goes first: quadratic

# ***** fuzz: random index expressions, proved by z3 *****

VARS = [a, b, n, s, rng(0, 16), rng(1, 5)]

def gen_int(r: random.Random, depth: int) -> UOp:
  if depth == 0 or r.random() < 0.15:
    return r.choice(VARS) if r.random() < 0.8 else c(r.randint(-8, 16))
  k = r.randint(0, 14)
  x = gen_int(r, depth - 1)
  if k <= 2: return x + gen_int(r, depth - 1)
  if k == 3: return x - gen_int(r, depth - 1)
  if k <= 5: return x * r.choice([-3, -1, 2, 3, 4, 8, 16])
  if k == 6: return x // r.choice([1, 2, 3, 4, 5, 8, 16, 16, -3, 0])  # rarely a negative or zero divisor
  if k == 7: return x % r.choice([1, 2, 3, 4, 6, 8, 16, 16, -4, 0])
  if k == 8: return x.maximum(gen_int(r, depth - 1))
  if k == 9: return x.minimum(gen_int(r, depth - 1))
  if k == 10: return gen_bool(r, depth - 1).where(x, gen_int(r, depth - 1))
  if k == 11: return gen_int(r, 0) * gen_int(r, 0)  # a product of two unknowns
  # the shapes codegen builds: strided sums of ranges, unflattened by // and % and flattened again
  lin = sum((v * r.choice([1, 2, 3, 4, 8, 12, 16]) for v in r.sample(VARS, r.randint(1, 3))), c(r.randint(-2, 8)))
  if k == 12: return lin
  shape = [r.choice([2, 3, 4, 6]) for _ in range(r.randint(1, 3))]
  idx = _unflat(lin, shape)
  return _flat(idx, shape) if k == 13 else idx[r.randrange(len(idx))]

def gen_bool(r: random.Random, depth: int) -> UOp:
  k = r.randint(0, 5)
  if depth <= 0 or k <= 2:
    x = gen_int(r, max(depth - 1, 0))
    y = c(r.randint(-4, 40)) if r.random() < 0.6 else gen_int(r, max(depth - 1, 0))
    return [x < y, x.ne(y), y < x][k % 3]
  if k == 3: return gen_bool(r, depth - 1) & gen_bool(r, depth - 1)
  if k == 4: return gen_bool(r, depth - 1) | gen_bool(r, depth - 1)
  return gen_bool(r, depth - 1).logical_not()

@pytest.mark.parametrize("seed", range(6))
def test_fuzz_z3(seed):
  r = random.Random(seed)
  for _ in range(50):
    prove_simplify(gen_bool(r, 3) if r.random() < 0.2 else gen_int(r, r.randint(1, 4)))

def test_fuzz_checker_can_fail(monkeypatch):
  """The prover rejects a wrong simplification and a wrong bound."""
  x = Variable("x", 0, 9)
  monkeypatch.setattr(__import__(__name__), "simplify", lambda u: (u // 2) * 2)
  with pytest.raises(AssertionError, match="simplified != original"): prove_simplify(x)
  monkeypatch.setattr(__import__(__name__), "simplify", lambda u: u)
  wrong = UOp(Ops.MAX, dtypes.index, (x, c(3)))
  monkeypatch.setattr(UOp, "vmin_vmax", property(lambda self: (4, 9) if self is wrong else _min_max(self)))
  with pytest.raises(AssertionError, match="vmin=4"): prove_simplify(wrong)
  with pytest.raises(AssertionError, match="outside"): check_every_value(wrong, wrong)
  monkeypatch.setattr(__import__(__name__), "simplify", lambda u: (u // 2) * 2)
  with pytest.raises(AssertionError, match="differ"): check_every_value(x + 1, (x + 1) // 2 * 2)

def test_checkers_divide_like_c():
  """Both checkers' division and remainder: C truncation, and 0 for a zero divisor."""
  x = Variable("x", -9, 9)
  for d in (-4, -3, -1, 0, 1, 2, 5):
    q, r = UOp(Ops.IDIV, dtypes.index, (x, c(d))), UOp(Ops.MOD, dtypes.index, (x, c(d)))
    want = [(_cdiv(xv, d), _cmod(xv, d)) if d else (0, 0) for xv in range(-9, 10)]
    grid = {x: np.arange(-9, 10)}
    assert list(zip(_np_eval(q, grid)[q].tolist(), _np_eval(r, grid)[r].tolist())) == want
    leaves, defs = {}, []
    zq, zr = z3_expr(q, leaves, defs)[q], z3_expr(r, leaves, defs)[r]
    solver = z3.Solver()
    solver.add(*defs)
    for xv, (wq, wr) in zip(range(-9, 10), want):
      solver.push()
      solver.add(leaves["x"][0] == xv)
      assert solver.check() == z3.sat
      m = solver.model()
      assert (m.eval(zq).as_long(), m.eval(zr).as_long()) == (wq, wr)
      solver.pop()

@settings(max_examples=200, deadline=None)
@given(st.integers(-20, 20), st.integers(0, 15), st.integers(1, 6), st.integers(0, 5), st.booleans())
@example(xlo=-1, xw=0, dlo=4, dw=0, neg=False)   # -1 % 4: the bounds were (-3, 0), wider than x itself
def test_bounds_of_division_by_a_variable(xlo, xw, dlo, dw, neg):
  # x // d and x % d with d a Variable of one sign: every value the pair can take lies inside vmin/vmax
  x = Variable("x", xlo, xlo + xw)
  d = Variable("d", -(dlo + dw), -dlo) if neg else Variable("d", dlo, dlo + dw)
  for op in (Ops.IDIV, Ops.MOD):
    lo, hi = x.alu(op, d).vmin_vmax
    vals = [exec_alu(op, dtypes.int64, [a, b]) for a in range(xlo, xlo + xw + 1) for b in range(d.vmin, d.vmax + 1)]
    assert lo <= min(vals) and max(vals) <= hi, (op, lo, hi, min(vals), max(vals))
    assert hi - lo <= 2 * max(abs(xlo), abs(xlo + xw)), f"{op} bounds {lo, hi} are not finite/tight: 32-bit targets need them"
