"""UOp: hash-consing, weak caching (unreferenced nodes are freed) and the children index kept in sync with the cache."""
import gc, pickle, weakref
import pytest
from hypothesis import given, settings, strategies as st
from tinycore.dtype import dtypes
from tinycore.uop import UOp, UOpMeta, Ops, Variable, users_of

def c(v: int) -> UOp: return UOp.const(dtypes.int32, v)

def test_same_node_twice_is_the_same_object():
  x = Variable("hc_x", 0, 10)
  assert (x + 1) is (x + 1)
  assert UOp(Ops.ADD, dtypes.int32, (c(1), c(2))) is UOp(Ops.ADD, dtypes.int32, (c(1), c(2)))

@pytest.mark.parametrize("change", [
  dict(op=Ops.MUL), dict(dtype=dtypes.int64), dict(arg="tag"), dict(src=(c(2), c(1))),
])
def test_any_field_makes_a_different_node(change):
  base = UOp(Ops.ADD, dtypes.int32, (c(1), c(2)))
  assert base.replace(**change) is not base

def test_arg_equality_is_by_value():
  assert UOp(Ops.RESHAPE, dtypes.float32, (c(1),), (1, 1)) is UOp(Ops.RESHAPE, dtypes.float32, (c(1),), tuple([1, 1]))

def test_unreferenced_node_is_freed():
  x = Variable("free_x", 0, 5)
  y = x * 7 + 3
  key = (y.op, y.dtype, y.src, y.arg)
  ref = weakref.ref(y)
  del y
  gc.collect()
  assert ref() is None
  assert UOpMeta.cache.get(key) is None
  assert len(x.children) == 1  # x*7 is still referenced by `key`
  del key
  gc.collect()
  assert x.children == []

def test_children_index_tracks_users():
  x = Variable("ch_x", 0, 5)
  a, b = x + 1, x * 2
  assert set(x.children) == {a, b}
  assert a.children == []
  s = a + b
  assert a.children == [s] and b.children == [s]
  del s
  gc.collect()
  assert a.children == [] and set(x.children) == {a, b}

def test_children_of_a_node_used_twice_by_one_user():
  x = Variable("twice_x", 0, 5)
  sq = x * x
  assert x.children == [sq]

def test_rebuilt_node_after_free_is_new_and_indexed():
  x = Variable("reb_x", 0, 5)
  ref = weakref.ref(x + 100)
  gc.collect()
  assert ref() is None
  again = x + 100
  assert x.children == [again]

@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX]), st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=25),
       st.lists(st.booleans(), min_size=25, max_size=25))
def test_children_index_matches_cache(steps, keep):
  """Build a random DAG, drop a random subset of it; the children index must equal what the live nodes say."""
  leaves = [Variable(f"dag{i}", 0, 9) for i in range(3)]
  nodes = list(leaves)
  for op, i, j in steps: nodes.append(UOp(op, dtypes.index, (nodes[i % len(nodes)], nodes[j % len(nodes)])))
  kept = leaves + [n for n, k in zip(nodes[3:], keep) if k]
  del nodes  # refcounting frees the dropped nodes at once: UOps hold no reference cycles
  live = set().union(*(k.toposort() for k in kept))  # everything still referenced; the rest was freed
  users = users_of(kept)   # what .children answers (tested below), for every leaf in one scan of the node cache
  for leaf in kept:
    assert set(users[leaf]) == {u for u in live if leaf in u.src} and len(users[leaf]) == len(set(users[leaf]))

def test_toposort_orders_sources_first_and_handles_deep_graphs():
  x = Variable("deep_x", 0, 5)
  y = x
  for i in range(5000): y = y + i
  order = list(y.toposort())
  pos = {u: i for i, u in enumerate(order)}
  assert order[-1] is y and all(pos[s] < pos[u] for u in order for s in u.src)

def test_pickle_roundtrip_gives_the_same_node():
  x = Variable("pk_x", 0, 5) * 3
  assert pickle.loads(pickle.dumps(x)) is x

def test_truth_value_is_an_error():
  with pytest.raises(TypeError, match="truth value"): bool(Variable("tv", 0, 1) < 1)

def test_seeded_shape_and_device_are_what_the_properties_compute():
  """Tensor-level builders store a new node's shape and device (seed) instead of the graph properties computing them:
  every node of a graph built through those paths (constants, broadcasts, binary and unary ops, reshapes, expands,
  reductions, a conv) holds the values the properties' own rules give from its sources."""
  from tinycore import Tensor
  x, w = Tensor.ones(2, 3, 6, 6).contiguous(), Tensor.ones(4, 3, 3, 3).contiguous()
  y = (x.conv2d(w) * 0.5 + 1).relu().max_pool2d().reshape(2, -1)
  out = ((y - y.mean(axis=1).reshape(2, 1)) / Tensor([[2.0] * 16, [3.0] * 16]).sqrt() + (-1)).sum(axis=0).exp2()
  checked = 0
  for u in out.uop.toposort():
    for prop in (UOp.shape, UOp.device):
      if prop.name in u.__dict__:
        assert u.__dict__[prop.name] == prop.fn(u), (u.op, prop.name, u.__dict__[prop.name], prop.fn(u))
        checked += 1
  assert checked > 40

def test_tensor_level_constants_are_kept_by_value():
  """UOp.const keeps a device constant's CONST node by its value: built again, it is the same node; 0.0 and -0.0 (equal as
  Python keys) stay two nodes; a value's Python class never merges two dtypes' constants; NaN (never equal to itself) is
  not kept, so constants of NaN do not pile up."""
  import math
  from tinycore import uop
  konst = lambda dt, b: UOp.const(dt, b, "CPU", (3,)).src[0].src[0]   # EXPAND(RESHAPE(CONST))
  assert konst(dtypes.float32, 1.5) is konst(dtypes.float32, 1.5)
  zero, negzero = konst(dtypes.float32, 0.0), konst(dtypes.float32, -0.0)
  assert zero is not negzero and math.copysign(1.0, negzero.arg) < 0 < math.copysign(1.0, zero.arg)
  assert konst(dtypes.int32, True).arg == 1 and konst(dtypes.bool, 1).arg is True and konst(dtypes.float32, 1).arg == 1.0
  assert konst(dtypes.int32, 1).dtype is dtypes.int32 and konst(dtypes.float32, 1).dtype is dtypes.float32
  before = len(uop._device_consts)
  for _ in range(5): assert math.isnan(konst(dtypes.float32, float("nan")).arg)
  assert len(uop._device_consts) == before

def test_constant_folding_keeps_each_constant_in_its_dtype():
  """A fold of uint64 constants past 2**63 with small ones: numpy read the bare 2**64-1 as uint64 and 9 as int64, and
  took their max, or a choice between them, in float64 (max(2**64-1, 9) folded to 0; a vendor fuzz program found it:
  -1.71 cast to int8, then uint64, then .maximum(9)); comparisons near 2**63 rounded alike."""
  big, small = UOp.const(dtypes.uint64, 2**64 - 1), UOp.const(dtypes.uint64, 9)
  assert big.maximum(small).simplify().arg == 2**64 - 1
  assert UOp.const(dtypes.bool, True).where(big, small).simplify().arg == 2**64 - 1
  assert UOp.const(dtypes.uint64, 2**63 - 1).alu(Ops.CMPLT, UOp.const(dtypes.uint64, 2**63)).simplify().arg is True
  assert UOp.const(dtypes.int64, -2**63).alu(Ops.MAX, UOp.const(dtypes.int64, 2**62)).simplify().arg == 2**62
  from tinycore import Tensor
  t = Tensor.full((3,), -1.71, device="PYTHON").cast(dtypes.int8).cast(dtypes.uint64).maximum(9)
  assert t.tolist() == [2**64 - 1] * 3
