"""The rewrite engine: what a UPat matches, dispatch by op, rewrite order (top-down vs bottom-up), fixed points, graph_rewrite_map."""
from hypothesis import given, settings, strategies as st
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops, Variable
from tinycore.rewrite import UPat, PatternMatcher, graph_rewrite, graph_rewrite_map, graph_substitute

def c(v, dt=dtypes.int32) -> UOp: return UOp.const(dt, v)
x, y, z = (Variable(n, 0, 9, dtypes.int32) for n in ("rx", "ry", "rz"))

def matches(pat: UPat, u: UOp) -> list[dict]: return pat.match(u, {})

# ***** UPat fields *****

def test_op_set_and_name_binding():
  pat = UPat((Ops.ADD, Ops.MUL), name="n")
  assert matches(pat, x + y) == [{"n": x + y}]
  assert matches(pat, x * y) == [{"n": x * y}]
  assert matches(pat, x.maximum(y)) == []

def test_dtype_matches_exact_and_scalar_of_vectors():
  pat = UPat(Ops.CONST, dtype=dtypes.float32)
  assert matches(pat, c(1.0, dtypes.float32)) and not matches(pat, c(1))
  vec = UOp(Ops.CONST, dtypes.float32.vec(4), arg=1.0)
  assert matches(pat, vec)

def test_arg_must_be_equal():
  assert matches(UPat(Ops.CONST, arg=3), c(3)) and not matches(UPat(Ops.CONST, arg=3), c(4))

def test_src_tuple_is_ordered():
  pat = UPat(Ops.ADD, src=(UPat(Ops.CONST, name="k"), UPat.var("v")))
  assert matches(pat, UOp(Ops.ADD, dtypes.int32, (c(1), x))) == [{"k": c(1), "v": x}]
  assert matches(pat, UOp(Ops.ADD, dtypes.int32, (x, c(1)))) == []

def test_src_list_tries_every_order():
  pat = UPat(Ops.ADD, src=[UPat(Ops.CONST, name="k"), UPat.var("v")])
  for u in (UOp(Ops.ADD, dtypes.int32, (c(1), x)), UOp(Ops.ADD, dtypes.int32, (x, c(1)))):
    assert {"k": c(1), "v": x} in matches(pat, u)

def test_three_source_permutations():
  pat = UPat(Ops.WHERE, src=[UPat(Ops.CONST, arg=True, name="t"), UPat.var("a"), UPat(Ops.CONST, arg=5, name="five")])
  u = UOp(Ops.WHERE, dtypes.int32, (c(5), UOp.const(dtypes.bool, True), x))
  assert matches(pat, u) == [{"t": UOp.const(dtypes.bool, True), "a": x, "five": c(5)}]

def test_single_upat_src_matches_every_source():
  pat = UPat(Ops.ADD, src=UPat(Ops.CONST))
  assert matches(pat, UOp(Ops.ADD, dtypes.int32, (c(1), c(2))))
  assert not matches(pat, UOp(Ops.ADD, dtypes.int32, (c(1), x)))

def test_repeated_name_must_bind_the_same_node():
  pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
  assert matches(pat, x + x) == [{"a": x}]
  assert matches(pat, x + y) == []

def test_repeated_name_across_levels():
  pat = UPat(Ops.MUL, src=[UPat.var("a"), UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("b")])])
  assert {"a": x, "b": y} in matches(pat, x * (y + x))
  assert matches(pat, x * (y + z)) == []

def test_source_count_and_allow_any_len():
  three = UOp(Ops.WHERE, dtypes.int32, (UOp.const(dtypes.bool, True), x, y))
  assert not matches(UPat(Ops.WHERE, src=(UPat.var("c"),)), three)
  assert matches(UPat(Ops.WHERE, src=(UPat.var("c"),), allow_any_len=True), three) == [{"c": UOp.const(dtypes.bool, True)}]

def test_operator_sugar_builds_commutative_patterns():
  pat = UPat.var("a") + 0
  pm = PatternMatcher([(pat, lambda a: a)])
  assert pm.rewrite(UOp(Ops.ADD, dtypes.int32, (c(0), x))) is x
  assert pm.rewrite(UOp(Ops.ADD, dtypes.int32, (x, c(0)))) is x

# ***** PatternMatcher *****

def test_dispatch_only_tries_rules_for_the_op():
  tried = []
  pm = PatternMatcher([
    (UPat(Ops.MUL, name="m"), lambda m: tried.append("mul")),
    (UPat(Ops.ADD, name="a"), lambda a: tried.append("add")),
    (UPat(name="any"), lambda any: tried.append("wild")),
  ])
  pm.rewrite(x + y)
  assert tried == ["add", "wild"]

def test_first_rule_that_returns_wins_and_none_falls_through():
  pm = PatternMatcher([
    (UPat(Ops.ADD), lambda: None),
    (UPat(Ops.ADD, name="a"), lambda a: c(1)),
    (UPat(Ops.ADD, name="a"), lambda a: c(2)),
  ])
  assert pm.rewrite(x + y) is c(1)

def test_ctx_is_passed_only_when_asked_for():
  seen = []
  pm = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda ctx, a: seen.append(ctx))])
  pm.rewrite(x + y, ctx="hello")
  assert seen == ["hello"]

# ***** graph_rewrite: order and fixed points *****

def test_rewrites_to_a_fixed_point():
  fold = PatternMatcher([(UPat(Ops.ADD, src=(UPat(Ops.CONST, name="a"), UPat(Ops.CONST, name="b"))), lambda a, b: c(a.arg + b.arg))])
  e = UOp(Ops.ADD, dtypes.int32, (UOp(Ops.ADD, dtypes.int32, (c(1), c(2))), UOp(Ops.ADD, dtypes.int32, (c(3), c(4)))))
  assert graph_rewrite(e, fold) is c(10)

def test_top_down_rewrites_sources_before_users_and_bottom_up_users_first():
  neg = lambda u: UOp(Ops.NEG, dtypes.int32, (u,))
  def rules(log):
    return PatternMatcher([
      (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("a"),)),)), lambda a: log.append("double") or a),
      (UPat(Ops.NEG, src=(UPat(Ops.CONST, name="k"),)), lambda k: log.append("fold") or c(-k.arg)),
    ])
  e = neg(neg(c(3)))
  down, up = [], []
  assert graph_rewrite(e, rules(down)) is c(3)
  assert graph_rewrite(e, rules(up), bottom_up=True) is c(3)
  assert down == ["fold", "fold"]  # the inner NEG folds first, then the outer one
  assert up == ["double"]          # the outer pattern sees the untouched inner NEG

def test_rewritten_result_is_rewritten_again():
  # x*2 -> x+x, and x+x -> x<<1 only exists as a second step
  pm = PatternMatcher([
    (UPat(Ops.MUL, src=(UPat.var("a"), UPat(Ops.CONST, arg=2))), lambda a: a + a),
    (UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a"))), lambda a: UOp(Ops.SHL, a.dtype, (a, c(1)))),
  ])
  assert graph_rewrite(x * 2, pm) is UOp(Ops.SHL, dtypes.int32, (x, c(1)))

def test_graph_rewrite_map_reports_every_visited_node():
  pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("a"), UPat(Ops.CONST, arg=1))), lambda a: a)])
  inner = x * 1
  outer = (inner + y) * 1
  m = graph_rewrite_map(outer, pm)
  assert m[outer] is x + y
  assert m[inner] is x and m[inner + y] is x + y
  assert m[y] is y

def test_shared_subgraph_is_rewritten_once():
  calls = []
  pm = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: calls.append(m) or None)])
  shared = x * y
  graph_rewrite((shared + 1) + (shared + 2), pm)
  assert calls.count(shared) == 1

def test_graph_substitute_rebuilds_only_users():
  e = (x + y) * z
  out = graph_substitute(e, {y: c(4)})
  assert out is (x + c(4)) * z
  assert graph_substitute(e, {}) is e

@settings(max_examples=60, deadline=None)
@given(st.recursive(st.integers(-5, 5).map(c) | st.sampled_from([x, y]),
                    lambda kids: st.tuples(st.sampled_from([Ops.ADD, Ops.MUL]), kids, kids).map(lambda t: UOp(t[0], dtypes.int32, (t[1], t[2]))),
                    max_leaves=12), st.integers(0, 9), st.integers(0, 9))
def test_constant_folding_preserves_value(e, xv, yv):
  """Top-down and bottom-up folding of a random expression agree with evaluating it directly."""
  fold = PatternMatcher([
    (UPat(Ops.ADD, src=(UPat(Ops.CONST, name="a"), UPat(Ops.CONST, name="b"))), lambda a, b: c(a.arg + b.arg)),
    (UPat(Ops.MUL, src=(UPat(Ops.CONST, name="a"), UPat(Ops.CONST, name="b"))), lambda a, b: c(a.arg * b.arg)),
    (UPat(Ops.MUL, src=[UPat.var("a"), UPat(Ops.CONST, arg=0)]), lambda a: c(0)),
    (UPat(Ops.ADD, src=[UPat.var("a"), UPat(Ops.CONST, arg=0)]), lambda a: a),
  ])
  def ev(u):
    if u.op is Ops.CONST: return u.arg
    if u is x: return xv
    if u is y: return yv
    a, b = ev(u.src[0]), ev(u.src[1])
    return a + b if u.op is Ops.ADD else a * b
  for bottom_up in (False, True):
    out = graph_rewrite(e, fold, bottom_up=bottom_up)
    assert ev(out) == ev(e)
    assert len(out.toposort()) <= len(e.toposort())
