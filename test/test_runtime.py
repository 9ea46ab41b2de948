"""Runtime: disk cache corruption, the LRU allocator, GlobalCounters, DEBUG output, kernel naming and signatures, copies."""
import os, random, re
import numpy as np
import pytest
from tinycore import Tensor, GlobalCounters, Context, Device
from tinycore.dtype import dtypes
from tinycore.runtime.device import Buffer
from tinycore.runtime import diskcache, runner
from tinycore.runtime.binary import pack_binary, unpack_binary
from tinycore.runtime.errors import CompileError
from tinycore.codegen.opt import OptOps
from tinycore import engine

@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYCORE_CACHE", str(tmp_path))
  return tmp_path

def cache_file(root, table: str, key: str) -> str: return os.path.join(root, table, key[:2], key)

# ***** disk cache *****

def test_diskcache_roundtrip_builds_once(cache_dir):
  calls = []
  def build(): calls.append(1); return b"payload-bytes"
  key = diskcache.cache_key("t", 1)
  assert diskcache.diskcached("tbl", key, build) == b"payload-bytes"
  assert diskcache.diskcached("tbl", key, build) == b"payload-bytes"
  assert len(calls) == 1

@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "flip_digest", "empty", "garbage"])
def test_corrupt_cache_entry_is_rebuilt(cache_dir, damage):
  key = diskcache.cache_key("corrupt", damage)
  diskcache.diskcache_put("tbl", key, b"good bytes " * 10)
  path = cache_file(cache_dir, "tbl", key)
  blob = bytearray(open(path, "rb").read())
  if damage == "truncate": blob = blob[:len(blob) // 2]
  elif damage == "flip_payload": blob[-3] ^= 0x40
  elif damage == "flip_digest": blob[5] ^= 0x01
  elif damage == "empty": blob = bytearray()
  else: blob = bytearray(random.Random(0).randbytes(20))
  open(path, "wb").write(blob)
  assert diskcache.diskcache_get("tbl", key) is None
  assert diskcache.diskcached("tbl", key, lambda: b"rebuilt") == b"rebuilt"
  assert diskcache.diskcache_get("tbl", key) == b"rebuilt"   # and the file holds the new entry

def test_binary_container_round_trip_and_every_corruption_names_the_backend():
  blob = pack_binary(b"TCX1\n", {"fn": "k", "nbufs": 2}, b"\x7fELF payload")
  assert unpack_binary(b"TCX1\n", blob, "X") == ({"fn": "k", "nbufs": 2}, b"\x7fELF payload")
  flipped = bytearray(blob); flipped[-2] ^= 0x10
  no_dict = pack_binary(b"TCX1\n", {}, b"").replace(b"{}", b"[]")
  for bad in (blob[:-1], bytes(flipped), b"junk" + blob, blob.replace(b"TCX1", b"TCX2"), blob[:6], no_dict):
    with pytest.raises(CompileError, match="X: corrupt kernel binary"): unpack_binary(b"TCX1\n", bad, "X")

def test_corrupt_kernel_binary_in_the_cache_is_rebuilt(cache_dir):
  src = "# a kernel\n('CONST', ('float', 1), (), 1.0)"
  good = runner.assemble("PYTHON", src, "k")
  (path,) = [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs]
  with open(path, "r+b") as f: f.seek(40); f.write(b"\xff\xfe")
  assert diskcache.diskcache_get("binaries", os.path.basename(path)) is None
  assert runner.assemble("PYTHON", src, "k") == good

def test_kernels_still_run_when_the_cache_is_corrupted(cache_dir):
  a = Tensor(np.arange(5, dtype=np.float32), device="PYTHON")
  c = float(random.Random().randint(1000, 10**6))  # a constant no earlier test compiled: a fresh kernel
  np.testing.assert_equal((a + c).numpy(), np.arange(5) + c)
  for d, _, fs in os.walk(cache_dir):
    for f in fs: open(os.path.join(d, f), "wb").write(b"\x00" * 7)
  engine._runners.clear()
  np.testing.assert_equal((a + c).numpy(), np.arange(5) + c)

# ***** allocator *****

def test_lru_allocator_reuses_freed_memory():
  alloc = Device["PYTHON"].allocator
  size = 4 * 12347  # a size no other test uses
  b = Buffer("PYTHON", 12347, dtypes.float32).ensure_allocated()
  raw, live = b._buf, alloc.live
  del b
  assert alloc.live == live - 1 and any(x is raw for x in alloc.cache[(size, None)])
  b2 = Buffer("PYTHON", 12347, dtypes.float32).ensure_allocated()
  assert b2._buf is raw and alloc.live == live

def test_lru_allocator_keeps_at_most_its_peak_in_freed_buffers():
  """A process whose shapes keep changing frees a buffer of every size: the cache keeps no more bytes than were ever live
  at once (it used to keep all of them), the least recently freed sizes going back first; a size freed and asked for
  again is still reused."""
  from tinycore.runtime.builtin import HostAllocator
  alloc = HostAllocator("PYTHON")
  for size in range(1000, 1400): alloc.free(alloc.alloc(size), size)
  assert alloc.peak_bytes == 1399 and alloc.cached_bytes <= 1399, (alloc.peak_bytes, alloc.cached_bytes)
  assert alloc.cached_bytes == sum(sz * len(bufs) for (sz, _), bufs in alloc.cache.items()) and (1399, None) in alloc.cache
  two = [alloc.alloc(700), alloc.alloc(700)]
  for b in two: alloc.free(b, 700)
  assert alloc.peak_bytes == 1400 and len(alloc.cache[(700, None)]) == 2
  assert alloc.alloc(700) is two[1] and alloc.live == 1

def test_lru_can_be_turned_off():
  alloc = Device["PYTHON"].allocator
  b = Buffer("PYTHON", 12349, dtypes.float32).ensure_allocated()
  raw = b._buf
  with Context(LRU=0): del b
  assert not any(x is raw for x in alloc.cache.get((4 * 12349, None), []))

def test_mem_used_follows_buffers():
  before, on_python = GlobalCounters.mem_used, GlobalCounters.mem_used_per_device["PYTHON"]
  b = Buffer("PYTHON", 1000, dtypes.float32).ensure_allocated()
  assert GlobalCounters.mem_used == before + 4000 and GlobalCounters.mem_peak >= before + 4000
  assert GlobalCounters.mem_used_per_device["PYTHON"] == on_python + 4000   # tinygrad's per-device count
  del b
  assert GlobalCounters.mem_used == before and GlobalCounters.mem_used_per_device["PYTHON"] == on_python

def test_host_data_waits_for_a_device_that_opens_later(monkeypatch):
  """A Tensor made from host data for a device that does not open yet keeps the data, and its buffer gets it when it is
  first allocated: never an empty buffer read as if it held the data."""
  monkeypatch.setattr(Device, "opens", lambda name: (False, "not now"))
  t = Tensor([[1.5, -2.0], [3.0, 4.0]], device="PYTHON")
  monkeypatch.undo()
  assert (t + 1).numpy().tolist() == [[2.5, -1.0], [4.0, 5.0]] and t.numpy().tolist() == [[1.5, -2.0], [3.0, 4.0]]

# ***** counters and DEBUG *****

def test_global_counters_count_kernels_flops_and_bytes():
  a, b = Tensor.ones(16).contiguous().realize(), Tensor.ones(16).contiguous().realize()
  GlobalCounters.reset()
  (a + b).realize()
  assert GlobalCounters.kernel_count == 1
  assert GlobalCounters.global_ops == 16          # one add per element
  assert GlobalCounters.global_mem == 3 * 16 * 4  # two loads and a store of float32 per element

def _fresh_kernel(device: str = "PYTHON") -> Tensor:
  """A kernel no earlier test compiled (compile-time DEBUG output happens once per kernel)."""
  return Tensor([1.0, 2.0], device=device) * float(random.Random().randint(10, 10**6))

@pytest.mark.parametrize("level,expected", [
  (2, [r"\*\*\* PYTHON.* E_2(n\d+)? .* us"]),       # kernel names and timings
  (3, [r"schedule 0: SINK", "DEFINE_GLOBAL"]),  # the schedule
  (4, [r"^# E_2", r"^\('STORE'"]),              # the rendered source
  (5, [r"^ +\d+ DEFINE_GLOBAL", r"^ +\d+ STORE"]), # the linear uops, numbered
])
def test_debug_levels_print(capsys, level, expected):
  t = _fresh_kernel()
  with Context(DEBUG=level): t.realize()
  out = capsys.readouterr().out
  for want in expected: assert re.search(want, out, re.M), want
  if level < 5: assert not re.search(r"^ +\d+ STORE", out, re.M)  # each level adds its output, no earlier

def test_debug_zero_is_silent(capsys):
  _fresh_kernel().realize()
  assert capsys.readouterr().out == ""

# ***** kernels: names and signatures *****

def test_different_kernels_with_one_shape_get_different_names():
  a = Tensor([1.0, 2.0, 3.0], device="PYTHON").realize()
  k1 = engine.get_runner("PYTHON", (a + 1.5).schedule()[0].ast)
  k2 = engine.get_runner("PYTHON", (a * 2.5).schedule()[0].ast)
  assert k1.spec.name.startswith("E_3") and k2.spec.name.startswith("E_3") and k1.spec.name != k2.spec.name

def test_kernel_takes_every_parameter_even_one_simplified_away():
  # the middle input only contributes padding, so the kernel never reads it; it is still parameter 2
  a, b, c = (Tensor(np.array(v, np.float32)).realize() for v in ([1.0, 2.0], [5.0], [10.0, 20.0]))
  out = a + b.pad((0, 2))[1:3] + c
  (item,) = out.schedule()
  assert len(item.bufs) == 4
  np.testing.assert_equal(out.numpy(), [11.0, 22.0])

def test_copy_between_devices_uses_host_memory_directly():
  src = Tensor(np.arange(6, dtype=np.float32), device="PYTHON").realize()
  dst = src.to("PYTHON:1").realize()
  assert dst.device == "PYTHON:1"
  np.testing.assert_equal(dst.numpy(), np.arange(6))

# ***** the compiled-kernel caches (bounded by KERNEL_CACHE_SIZE) *****

def test_kernel_caches_evict_at_their_bound_and_an_evicted_kernel_comes_back_from_the_disk_cache(cache_dir, monkeypatch):
  a = Tensor(np.arange(6, dtype=np.float32), device="PYTHON").realize()
  base = float(random.Random().randint(1000, 10**6))  # constants no earlier test compiled: fresh kernels of one shape
  outs = [a + (base + i) for i in range(5)]
  asts = [o.schedule()[-1].ast for o in outs]
  assembled = []
  real = Device["PYTHON"].assembler.assemble
  monkeypatch.setattr(Device["PYTHON"].assembler, "assemble", lambda src: assembled.append(src) or real(src))
  with Context(KERNEL_CACHE_SIZE=3):
    names = [engine.get_runner("PYTHON", ast).spec.name for ast in asts]
    assert len(set(names)) == 5 and len(assembled) == 5, names
    assert [k[1] for k in engine._runners] == asts[2:] and [k[1] for k in engine._programs] == asts[2:]
    again = engine.get_runner("PYTHON", asts[0])
    assert again.spec.name == names[0] and len(assembled) == 5, "made again under its old name, so from the disk cache"
    assert [k[1] for k in engine._runners] == [*asts[3:], asts[0]]
    np.testing.assert_equal(outs[0].numpy(), np.arange(6) + base)
    # a kernel made after the evictions still gets a name of its own
    assert engine.get_runner("PYTHON", (a * base).schedule()[-1].ast).spec.name not in names

def test_a_captured_jit_replays_after_its_kernels_were_evicted():
  from tinycore import TinyJit
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * 3 + 1).realize()
  with Context(KERNEL_CACHE_SIZE=1):
    for i in range(4):
      x = Tensor(np.full(5, i, np.float32), device="PYTHON")
      np.testing.assert_equal(f(x).numpy(), np.full(5, 3 * i + 1))
      for n in range(3): (Tensor.ones(7 + n, device="PYTHON") * i).realize()   # evicts f's kernel
      assert all(("PYTHON", si.ast) not in engine._runners for si, _ in f.captured)
  assert f.cnt == 4 and f.captured, "the last two calls replayed the capture"

def test_changing_shapes_stop_growing_the_node_cache(monkeypatch):
  """A loop whose shapes never repeat: with the kernel caches bounded, the live UOps stay level. (What is kept is bounded
  by the caches: compiled kernels, schedule templates, whose keys hold the constants' broadcasts, and those broadcasts;
  small bounds here, so that they fill within the test.)"""
  import gc
  from tinycore import uop, schedule_cache
  monkeypatch.setattr(schedule_cache, "SCHEDULE_CACHE_SIZE", 8)
  def live_after(sizes) -> int:
    for n in sizes: (Tensor.arange(n, device="PYTHON").float() * 0.5 + 1).sum().realize()
    gc.collect()
    return len(uop._node_refs)
  with Context(KERNEL_CACHE_SIZE=4):
    # windows as long as the broadcasts kept (each size broadcasts two constants): each ends with the caches full of its
    # own latest sizes, so a window's count is the bound's, never more. Windows of other sizes keep kernels of other
    # sizes (a grouped sum's written-out steps depend on the length's divisors), so a window is compared with itself:
    # run again after two more windows, it leaves exactly what it left the first time, nothing of the windows between
    n = uop.CONST_BROADCASTS_KEPT
    live_after(range(200, 200 + n))
    first = live_after(range(300, 300 + n))
    live_after(range(400, 400 + n)), live_after(range(500, 500 + n))
    assert live_after(range(300, 300 + n)) <= first

# ***** BEAM search *****

def _matmul_kernel(device: str = "PYTHON"):
  r = np.random.default_rng(3)
  a = Tensor(r.integers(-3, 4, (4, 32)).astype(np.float32), device=device).realize()
  b = Tensor(r.integers(-3, 4, (32, 8)).astype(np.float32), device=device).realize()
  # one reduction (a row's max would now fuse in as a second one); the random factor keeps the disk cache from answering
  out = (a @ b).relu() + (a[:, :1] * float(random.Random().randint(2, 10**6)))
  (si,) = [s for s in out.schedule() if s.ast.op.name == "SINK"][-1:]
  return out, si

def test_every_beam_option_computes_the_same_result():
  from tinycore.codegen import get_program, lower_to_sink
  from tinycore.search import candidate_opts
  out, si = _matmul_kernel()
  ren = Device.renderer("PYTHON")
  opts = candidate_opts(lower_to_sink(si.ast, ren), ren)
  assert {o.amount for o in opts if o.op is OptOps.UNROLL} == {2, 4, 8, 16}
  assert {o.op for o in opts} >= {OptOps.UNROLL, OptOps.UPCAST, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP}
  pair = next(((a, b) for a in opts for b in candidate_opts(lower_to_sink(si.ast, ren), ren, (a,)) if a.op is not b.op), ())
  results = []
  for o in [()] + [(x,) for x in opts] + [pair]:
    engine.CompiledRunner("PYTHON", get_program(si.ast, ren, opts=o))(si.bufs, {})
    results.append(si.bufs[0].numpy().copy())
  for r in results[1:]: np.testing.assert_equal(r, results[0])  # small integers: every summation order is exact

def test_beam_keeps_the_fastest_and_remembers_it(cache_dir, monkeypatch):
  from tinycore import search
  from tinycore.codegen import get_program, lower_to_sink
  _, si = _matmul_kernel()
  ren = Device.renderer("PYTHON")
  singles = search.candidate_opts(lower_to_sink(si.ast, ren), ren)
  (axis,) = {o.axis for o in singles if o.op is OptOps.UNROLL}
  tried = []
  def fake_measure(ast, ren, device, opts, bufs, var_vals):  # unrolling by 4 is fastest, 8 next, anything else slower
    tried.append(opts)
    return {(): 3.0, (search.Opt(OptOps.UNROLL, axis, 4),): 1.0, (search.Opt(OptOps.UNROLL, axis, 8),): 2.0}.get(opts, 5.0)
  monkeypatch.setattr(search, "measure", fake_measure)
  spec = search.beam_search_program(si.ast, ren, "PYTHON", 2)
  assert spec.src == get_program(si.ast, ren, opts=(search.Opt(OptOps.UNROLL, axis, 4),)).src
  # the baseline and each single option once, then pairs grown from the two best: none faster, so the search stops
  assert tried[:len(singles) + 1] == [()] + [(o,) for o in singles] and len(tried) == len(set(tried))
  assert all(len(t) == 2 and t[0] in ((search.Opt(OptOps.UNROLL, axis, 4)), search.Opt(OptOps.UNROLL, axis, 8)) for t in tried[len(singles) + 1:])
  def no_measuring(*a, **k): raise AssertionError("the cached choice must be used")
  monkeypatch.setattr(search, "measure", no_measuring)
  assert search.beam_search_program(si.ast, ren, "PYTHON", 2).src == spec.src

def test_beam_env_runs_the_search(cache_dir, monkeypatch):
  from tinycore import search
  calls = []
  real = search.beam_search_program
  monkeypatch.setattr(search, "beam_search_program", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
  out, _ = _matmul_kernel()
  with Context(BEAM=2): got = out.numpy()
  assert calls and all(w == 2 for w in calls)
  with Context(BEAM=0): np.testing.assert_equal((out * 1).numpy(), got)

# ***** linearizer *****

def test_reductions_sharing_a_range_open_it_once():
  """Two sums over one loop, one of them not depending on the output loop: the loop is emitted once, inside."""
  from tinycore.uop import UOp, Ops, AxisType
  from tinycore.codegen import linearize, lower_index_dtype
  from tinycore.runtime.builtin import PythonRenderer, PythonProgram
  idx = lambda v: UOp.const(dtypes.index, v)
  g = UOp(Ops.RANGE, dtypes.index, (idx(4),), (0, AxisType.GLOBAL))
  r = UOp(Ops.RANGE, dtypes.index, (idx(3),), (1, AxisType.REDUCE))
  out, inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(12), (), 1)
  summed = UOp(Ops.REDUCE, dtypes.float32, (inp.index(g * 3 + r).load(), r), Ops.ADD)
  count = UOp(Ops.REDUCE, dtypes.float32, (UOp.const(dtypes.float32, 1.0), r), Ops.ADD)
  uops = linearize(lower_index_dtype(UOp(Ops.SINK, dtypes.void, (out.index(g).store(summed + count),)), PythonRenderer()))
  assert [u.op for u in uops].count(Ops.RANGE) == 2 and len({u for u in uops if u.op is Ops.RANGE}) == 2
  src = PythonRenderer().render("k", uops)
  res, data = np.zeros(4, np.float32), np.arange(12, dtype=np.float32)
  PythonProgram("k", src)(memoryview(res).cast("B"), memoryview(data).cast("B"))
  np.testing.assert_equal(res, data.reshape(4, 3).sum(1) + 3)

# ***** schedule cache (tinycore/schedule_cache.py) *****

def _hits():
  from tinycore import schedule_cache
  return schedule_cache.stats["hits"]

def test_schedule_cache_replays_structurally_equal_graphs():
  a = Tensor(np.arange(16, dtype=np.float32)).realize()
  before = _hits()
  for i in range(5):
    b = Tensor(np.full(16, i, np.float32)).realize()  # a new input buffer each time: placeholders, not the buffers
    np.testing.assert_allclose(((a + b) * 2).numpy(), (np.arange(16) + i) * 2)
  assert _hits() - before >= 3
  # the same structure with one buffer used twice is another key: a+a must read a, not some other buffer
  np.testing.assert_allclose((a + a).numpy(), np.arange(16) * 2)
  np.testing.assert_allclose((a + a).numpy(), np.arange(16) * 2)
  np.testing.assert_allclose((a + a).numpy(), np.arange(16) * 2)

def test_schedule_cache_keys_of_one_hash_never_share_a_template(monkeypatch):
  """The cache is looked up by the key's hash, and keys of one hash share a bucket (in Python hash(-1) == hash(-2), so
  two args can collide): here every key has one hash (the module's hash made constant), and graphs differing only in a
  constant must each still run their own schedule."""
  from tinycore import schedule_cache
  monkeypatch.setattr(schedule_cache, "hash", lambda key: 7, raising=False)
  a = Tensor(np.arange(8, dtype=np.int32)).realize()
  key = lambda c: schedule_cache._walk([(a + c).uop])[0]
  assert key(-1) != key(-2)
  before = _hits()
  for _ in range(4):
    for c in (-1, -2, -1):
      np.testing.assert_equal((a + c).numpy(), np.arange(8) + c)
  assert _hits() > before

def test_schedule_cache_graphs_differing_only_in_dtype_or_in_sharing_never_share_a_template():
  """Key nodes hold dtypes compared by identity (interned) and sources by position in the walk: a graph differing from a
  cached one only in a dtype, or only in whether a subexpression is one node or two equal-valued ones, must miss."""
  from tinycore import schedule_cache
  a, b = Tensor(np.arange(8, dtype=np.float32)).realize(), Tensor(np.full(8, 3, np.float32)).realize()
  a16 = Tensor(np.arange(8, dtype=np.float16)).realize()
  assert schedule_cache._walk([(a + 1).uop])[0] != schedule_cache._walk([(a16 + 1).uop])[0]
  assert schedule_cache._walk([((a - b) * (a - b)).uop])[0] != schedule_cache._walk([((a - b) * (b - a)).uop])[0]
  for _ in range(4):  # alternating, so each structure is replayed after the other was cached
    r32, r16 = (a + 1).realize(), (a16 + 1).realize()
    assert r32.dtype == dtypes.float32 and r16.dtype == dtypes.float16
    np.testing.assert_equal(r32.numpy(), np.arange(8, dtype=np.float32) + 1)
    np.testing.assert_equal(r16.numpy(), np.arange(8, dtype=np.float16) + 1)
    np.testing.assert_equal(((a - b) * (a - b)).numpy(), (np.arange(8) - 3.0) ** 2)
    np.testing.assert_equal(((a - b) * (b - a)).numpy(), -((np.arange(8) - 3.0) ** 2))

def test_schedule_cache_keeps_no_buffer_alive():
  import gc, weakref
  from tinycore.schedule import buffers
  refs = []
  for i in range(4):
    x = Tensor(np.full(8, i, np.float32)).realize()
    y = (x * 3 + 1).realize()
    assert y.numpy()[0] == i * 3 + 1
    refs += [weakref.ref(buffers[x.uop.base]), weakref.ref(buffers[y.uop.base])]
    del x, y
  gc.collect()
  assert all(r() is None for r in refs)

def test_schedule_cache_assign_in_a_loop():
  w = Tensor(np.zeros(8, np.float32)).realize()
  g = Tensor(np.ones(8, np.float32)).realize()
  before = _hits()
  for i in range(6):
    w.assign(w - g * 0.5).realize()
    np.testing.assert_allclose(w.numpy(), np.full(8, -(i + 1) * 0.5))
  assert _hits() > before
  # two chained assigns in one realize, and an assign read again after it ran
  a = Tensor(np.zeros(4, np.float32)).realize()
  for i in range(4):
    a.assign(a + 1)
    a.assign(a * 2)
    a.realize()
  np.testing.assert_allclose(a.numpy(), np.full(4, 30.0))

def test_schedule_cache_bound_variables_take_the_new_value():
  from tinycore.uop import Variable
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  v = Variable("sc_i", 0, 100)
  for i in range(5):
    np.testing.assert_allclose((a + Tensor(v.bind(i * 7))).numpy(), np.arange(8) + i * 7)

def test_schedule_cache_contiguous_and_clone_in_a_loop():
  a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
  outs = []
  for _ in range(4):
    t = a.T.contiguous().realize()
    c = a.clone().realize()
    outs.append(t)
    np.testing.assert_allclose(t.numpy(), np.arange(12).reshape(3, 4).T)
    np.testing.assert_allclose(c.numpy(), np.arange(12).reshape(3, 4))
  assert len({id(o.uop.base) for o in outs}) == 4  # every realize got a buffer of its own

def test_getenv_reads_empty_as_unset_and_names_a_bad_value(monkeypatch):
  """`NV_EMULATE= cmd` (the shell's way of clearing a variable) reads as unset; a value of the wrong type says which
  variable and what it should be, instead of int()'s bare message surfacing from wherever the flag is read."""
  from tinycore.helpers import getenv
  monkeypatch.setenv("TINYCORE_TEST_FLAG", "")
  assert getenv("TINYCORE_TEST_FLAG", 3) == 3
  monkeypatch.setenv("TINYCORE_TEST_FLAG", "12")
  assert getenv("TINYCORE_TEST_FLAG", 3) == 12 and getenv("TINYCORE_TEST_FLAG", "x") == "12"
  monkeypatch.setenv("TINYCORE_TEST_FLAG", "yes")
  with pytest.raises(ValueError, match=r"TINYCORE_TEST_FLAG='yes' cannot be read as int"): getenv("TINYCORE_TEST_FLAG", 0)

def test_schedule_cache_keys_a_tensor_constant_by_its_node():
  """`x + 1` built again is the same constant node (UOp.const keeps its broadcast), and the schedule cache keys it as that
  node: the key has no entries for the constant's subgraph (DEVICE, CONST, RESHAPE), 0.0 and -0.0 get two keys, and each
  constant still computes its own values."""
  from tinycore import schedule_cache
  from tinycore.uop import CONST_LEAF
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  c = (a + 1).uop.src[1]
  assert (a + 1).uop.src[1] is c and CONST_LEAF in c.__dict__
  key, nodes = schedule_cache._walk([(a + 1).uop])[:2]
  assert len(key) == 4 and c in key and all(n.op.name not in ("CONST", "DEVICE", "RESHAPE") for n in nodes)   # buffer, constant, add; outputs
  assert schedule_cache._walk([(a * 0.0).uop])[0] != schedule_cache._walk([(a * -0.0).uop])[0]
  for _ in range(3):
    for k in (1.0, 2.0, -0.0):
      np.testing.assert_equal((a * k).numpy(), np.arange(8, dtype=np.float32) * k)
    assert np.signbit((a * -0.0).numpy()[0])
