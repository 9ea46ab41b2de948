"""Section blocks: thread blocks, shared memory, barriers, warp shuffles, grouped reductions and shared-memory tiles, against numpy.

Kernels are compiled with explicit optimisation actions (codegen/opt/kernel.py: LOCAL, GROUP, GROUPTOP, UPCAST, STAGE,
UNROLL), so a backend that declares thread blocks and shared memory is checked on each mechanism whatever its own
heuristics choose; then common Tensor programs run with the heuristics and must use them where they apply."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops, AxisType
from tinycore.tensor import Tensor
from tinycore.codegen import get_program, lower_to_sink
from tinycore.codegen.opt import Opt, OptOps, Kernel, apply_opt
from tinycore_conformance import oracle as O
from tinycore_conformance.kernels import Launch, nested_sum_kernel
from tinycore_conformance.target import Target, dtype_name
from tinycore_conformance.tolerances import assert_close

pytestmark = pytest.mark.blocks

@pytest.fixture
def shared(device, target: Target) -> None:
  r = target.renderer
  if not (r.has_local and r.has_shared): pytest.skip(f"{target.name} declares no thread blocks with shared memory (has_local, has_shared)")

def schedule_item(t: Tensor):
  (si,) = [si for si in t.schedule() if si.ast.op is Ops.SINK][-1:]
  return si

def opts_for(dev, ast, actions) -> tuple[Opt, ...]:
  """`actions` (op, range, amount) as Opts applied in order to the lowered kernel: a range is its id, or the first range
  of that AxisType, as the kernel stands, whose trips the amount divides."""
  ren = dev.renderer
  k, opts = Kernel(lower_to_sink(ast, ren), ren), []
  for op, rng, amt in actions:
    r = rng if isinstance(rng, int) else next(r.arg[0] for r in k.ranges if r.arg[1] is rng and r.src[0].op is Ops.CONST and r.src[0].arg % amt == 0)
    k = apply_opt(k, o := Opt(op, r, amt))
    opts.append(o)
  return tuple(opts)

def run(dev, t: Tensor, inputs: list[np.ndarray], actions) -> tuple[np.ndarray, list]:
  """t's kernel (inputs: the Tensor.empty buffers it reads, in order) compiled with `actions`: (output, its linear UOps)."""
  si = schedule_item(t)
  out, uops = run_ast(dev, si.ast, [(b.size, b.dtype) for b in si.bufs], inputs, actions)
  return out.reshape(t.shape), uops

def run_ast(dev, ast, sizes: list, inputs: list[np.ndarray], actions) -> tuple[np.ndarray, list]:
  """A kernel AST on buffers of `sizes` (the output's first), the inputs written in order, compiled with `actions`:
  (the output's elements, the kernel's linear UOps)."""
  launch = Launch(dev, ast, sizes, opts=opts_for(dev, ast, actions))
  for i, x in enumerate(inputs): launch.write(i + 1, x)
  launch()
  dev.synchronize()
  return launch.bufs[0].numpy(), launch.spec.uops

def uses_shared(uops) -> bool:
  return any(u.op is Ops.DEFINE_LOCAL for u in uops) and any(u.op is Ops.BARRIER for u in uops)

def combines_threads(uops) -> bool:
  """Partials of several threads combined: through shared memory after a barrier, or warp shuffles."""
  return uses_shared(uops) or any(u.op is Ops.SHUFFLE_XOR for u in uops)

GROUPINGS = {"GROUP16": [(OptOps.GROUP, AxisType.REDUCE, 16)], "GROUPTOP16": [(OptOps.GROUPTOP, AxisType.REDUCE, 16)],
             "LOCAL4+GROUP8": [(OptOps.LOCAL, AxisType.GLOBAL, 4), (OptOps.GROUP, AxisType.REDUCE, 8)],
             "GROUP4+UNROLL4": [(OptOps.GROUP, AxisType.REDUCE, 4), (OptOps.UNROLL, AxisType.REDUCE, 4)]}

@pytest.mark.covers("grouped reduction")
@pytest.mark.parametrize("grouping", list(GROUPINGS))
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_grouped_reduction(shared, device, target: Target, op: str, grouping: str):
  """Each output's reduction spread over threads of a block, partials combined through shared memory after a barrier
  (or, where the backend declares shuffle_width and the group is consecutive lanes, warp shuffles)."""
  for dt in dict.fromkeys(d for d in (target.default_float, target.default_int) if d is not None):
    x = O.sample(O.rng_for("blocks", op, grouping, dtype_name(dt)), dt, (8, 64), "small" if O.is_float(dt) else "any")
    if O.is_int(dt) and op == "sum": x = (x % 7).astype(x.dtype)   # no overflow: the sum is exact whatever its order
    got, uops = run(device, getattr(Tensor.empty(8, 64, dtype=dt), op)(1), [x], GROUPINGS[grouping])
    assert combines_threads(uops), f"{grouping}: the kernel combines no partials through shared memory or warp shuffles"
    want = getattr(np, op)(x.astype(np.float64) if O.is_float(dt) else x, axis=1)
    if O.is_int(dt): np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=f"{op} of {dtype_name(dt)} with {grouping}")
    else: assert_close(got, want, dtype_name(dt), f"{op} with {grouping}", scale=np.abs(x).sum(1).max())

@pytest.mark.covers("grouped reduction")
@pytest.mark.parametrize("n, group", [(96, 48), (128, 64)])
def test_grouped_reduction_inside_a_loop(shared, device, target: Target, n: int, group: int):
  """sum over j of (sum over k of x[i, j, k])^2, the inner sum spread over `group` threads: it runs once per trip of
  the outer sum's loop, and each trip rewrites the shared memory the trip before read, so each trip first waits at a
  barrier (an emulator that tracks races between warps stops without it). 48: through shared memory alone; 64: warp
  shuffles too, where the backend declares them."""
  dt = dtypes.float32 if dtypes.float32 in target.dtypes else target.default_float
  if dt is None: pytest.skip(f"{target.name} declares no float dtype")
  x = O.sample(O.rng_for("blocks", "loop", str(n)), dt, (4, 8, n), "small")
  got, uops = run_ast(device, nested_sum_kernel(4, 8, n, dt), [(4, dt), (x.size, dt)], [x], [(OptOps.GROUP, AxisType.REDUCE, group)])
  assert combines_threads(uops), f"GROUP{group}: the kernel combines no partials through shared memory or warp shuffles"
  want = (x.astype(np.float64).sum(2) ** 2).sum(1)
  assert_close(got, want, dtype_name(dt), f"a grouped sum of {n} in a loop", scale=float((np.abs(x).sum(2) ** 2).sum(1).max()))

@pytest.mark.covers("grouped reduction identity")
def test_grouped_max_of_negative_infinities(shared, device, target: Target):
  """A group's partials start at the reduction's identity: a max over -inf (and over all-negative values) stays there."""
  dt = target.default_float
  if dt is None: pytest.skip(f"{target.name} declares no float dtype")
  x = np.full((4, 32), -np.inf, O.np_type(dt))
  x[1] = -3.0
  got, _ = run(device, Tensor.empty(4, 32, dtype=dt).max(1), [x], GROUPINGS["GROUP16"])
  assert got.tolist() == [-np.inf, -3.0, -np.inf, -np.inf], f"max over -inf rows with GROUP16: {got.tolist()}"

@pytest.fixture
def shuffles(shared, target: Target) -> int:
  if not (w := target.renderer.shuffle_width): pytest.skip(f"{target.name} declares no warp shuffles (shuffle_width)")
  return w

@pytest.mark.covers("warp shuffles")
@pytest.mark.parametrize("dt", ["float32", "int32"])
def test_shuffle_xor_reads_the_partner_lanes_value(shuffles, device, target: Target, dt: str):
  """SHUFFLE_XOR at the UOp level: out[t] = in[t ^ m] for every thread t of blocks of 64 threads, each m below the
  declared width, the value's bits exactly (NaN payloads, -0.0, integers' extremes)."""
  from tinycore.renderer import ProgramSpec
  from tinycore.runtime.device import Buffer
  dtype = getattr(dtypes, dt)
  if dtype not in target.dtypes: pytest.skip(f"{target.name} declares no {dt}")
  raw = O.rng_for("blocks", "shuffle", dt).integers(0, 1 << 32, 128, dtype=np.uint64).astype(np.uint32)
  raw[:4] = [0x7FC00001, 0x80000000, 0x7F800000, 0xFFFFFFFF]   # a NaN with a payload, -0.0, +inf, a NaN / -1
  for m in (m for m in (1, 2, 4, 8, 16, 32) if m < shuffles):
    gid, lid = (UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, n),), f"{k}idx0") for k, n in (("g", 2), ("l", 64)))
    out, inp = (UOp(Ops.DEFINE_GLOBAL, dtype.ptr(128), (), i) for i in (0, 1))
    t = UOp(Ops.ADD, dtypes.int32, (UOp(Ops.MUL, dtypes.int32, (gid, UOp.const(dtypes.int32, 64))), lid))
    value = UOp(Ops.SHUFFLE_XOR, dtype, (UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, dtype.ptr(128), (inp, t)),)),), m)
    uops = list(out.index(t).store(value).toposort())   # the linear program: every node after its sources
    spec = ProgramSpec(f"shfl_xor_{m}", device.renderer.render(f"shfl_xor_{m}", uops), target.name, uops, (2, 1, 1), (64, 1, 1), outs=(0,), ins=(1,))
    prog = device.driver.load(spec.name, device.assembler.assemble(spec.src), spec)
    bufs = [Buffer(target.name, 128, dtype).ensure_allocated() for _ in range(2)]
    bufs[1].copyin(memoryview(raw.copy()).cast("B"))
    prog(*[b._buf for b in bufs], global_size=(2, 1, 1), local_size=(64, 1, 1))
    device.synchronize()
    got = np.frombuffer(bufs[0].as_bytes(), np.uint32)
    want = raw[np.arange(128) ^ m]
    assert np.array_equal(got, want), f"SHUFFLE_XOR {m} of {dt}: lanes {np.flatnonzero(got != want)[:8].tolist()} got {got[got != want][:4]}, expected {want[got != want][:4]}"

SHUFFLED = {"LOCAL4+GROUP8": [(OptOps.LOCAL, AxisType.GLOBAL, 4), (OptOps.GROUP, AxisType.REDUCE, 8)], "GROUP32": [(OptOps.GROUP, AxisType.REDUCE, 32)],
            "GROUP128": [(OptOps.GROUP, AxisType.REDUCE, 128)], "LOCAL4+GROUP64": [(OptOps.LOCAL, AxisType.GLOBAL, 4), (OptOps.GROUP, AxisType.REDUCE, 64)]}

@pytest.mark.covers("warp shuffles")
@pytest.mark.parametrize("grouping", list(SHUFFLED))
@pytest.mark.parametrize("op", ["sum", "max"])
def test_grouped_reduction_through_shuffles(shuffles, device, target: Target, op: str, grouping: str):
  """Groups of consecutive lanes combine by warp shuffles: within a warp, and past one through shared memory."""
  dt = dtypes.float32 if dtypes.float32 in target.dtypes else target.default_float
  if dt is None: pytest.skip(f"{target.name} declares no float dtype")
  rng = O.rng_for("blocks", "shuffled", op, grouping)
  x = O.sample(rng, dt, (8, 256), "small")
  got, uops = run(device, getattr(Tensor.empty(8, 256, dtype=dt), op)(1), [x], SHUFFLED[grouping])
  assert any(u.op is Ops.SHUFFLE_XOR for u in uops), f"{grouping}: no warp shuffle in the kernel"
  assert_close(got, getattr(np, op)(x.astype(np.float64), axis=1), dtype_name(dt), f"{op} with {grouping}", scale=np.abs(x).sum(1).max())

@pytest.mark.covers("grouped reduction identity")
@pytest.mark.parametrize("n", [128, 1024])
def test_a_rows_max_is_one_value_for_all_its_threads(shared, device, target: Target, n: int):
  """A row's max spread over the threads that then write the row (a softmax's layout) gives every thread the same bits:
  the max of 0.0 and -0.0 may be either, but (x + 1) / max(x) over a row of them is one infinity, not both."""
  dt = target.default_float
  if dt is None or not target.cap("inf_nan"): pytest.skip(f"{target.name} declares no float dtype with infinities")
  zeros = np.where(O.rng_for("blocks", "signed zeros", str(n)).random((8, n)) < 0.5, -0.0, 0.0).astype(O.np_type(dt))
  x = Tensor(zeros, dtype=dt)
  got = ((x + 1) / x.max(1, keepdim=True)).numpy()
  assert all(np.isinf(r).all() and len(set(np.sign(r).tolist())) == 1 for r in got), f"rows of {n}: threads disagree on the max: {[sorted(set(np.sign(r).tolist())) for r in got]}"

TILES = {"LOCAL8x8+STAGE8": [(OptOps.LOCAL, 1, 8), (OptOps.LOCAL, 0, 8), (OptOps.STAGE, 2, 8)],
         "LOCAL8x4+UPCAST2x2+STAGE8+UNROLL4": [(OptOps.LOCAL, 1, 8), (OptOps.LOCAL, 0, 4), (OptOps.UPCAST, 1, 2), (OptOps.UPCAST, 0, 2),
                                               (OptOps.STAGE, 2, 8), (OptOps.UNROLL, 7, 4)]}

@pytest.mark.covers("shared-memory tiles")
@pytest.mark.parametrize("tiling", list(TILES))
def test_staged_matmul(shared, device, target: Target, tiling: str):
  """A matmul whose blocks copy tiles of both operands into shared memory (a barrier before and after each copy) and
  read them from there: every thread reads elements other threads copied."""
  dt = target.default_float
  if dt is None: pytest.skip(f"{target.name} declares no float dtype")
  rng = O.rng_for("blocks", "matmul", tiling)
  a, b = O.sample(rng, dt, (32, 48), "small"), O.sample(rng, dt, (48, 32), "small")
  got, uops = run(device, Tensor.empty(32, 48, dtype=dt) @ Tensor.empty(48, 32, dtype=dt), [a, b], TILES[tiling])
  assert uses_shared(uops), f"{tiling}: the kernel has no shared memory and barrier"
  want = a.astype(np.float64) @ b.astype(np.float64)
  assert_close(got, want, dtype_name(dt), f"matmul with {tiling}", scale=(np.abs(a) @ np.abs(b)).max())

# Tensor programs, the backend's own choices: the ones that reduce far must use the block's threads together
PROGRAMS = {
  "matmul": (lambda a, b: a @ b, ((96, 64), (64, 128)), lambda a, b: a @ b, True),
  "sum": (lambda x: x.sum(), ((1 << 14,),), lambda x: x.sum(), True),
  "row softmax": (lambda x: x.softmax(1), ((16, 512),), lambda x: O.softmax(x, 1), True),
  "layernorm": (lambda x: x.layernorm(1), ((16, 256),), lambda x: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5), False),
  "conv2d": (lambda x, w: x.conv2d(w, padding=1), ((2, 4, 16, 16), (8, 4, 3, 3)), lambda x, w: O.conv2d(x, w, padding=1), False),
}

@pytest.mark.covers("thread blocks in programs")
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_programs_use_blocks(shared, device, target: Target, name: str):
  dt = dtypes.float32 if dtypes.float32 in target.dtypes else target.default_float
  if dt is None: pytest.skip(f"{target.name} declares no float dtype")
  fn, shapes, ref, must_share = PROGRAMS[name]
  rng = O.rng_for("blocks", "program", name)
  xs = [O.sample(rng, dt, s, "small") for s in shapes]
  out = fn(*[Tensor(x, dtype=dt) for x in xs])
  specs = [get_program(si.ast, device.renderer) for si in out.schedule() if si.ast.op is Ops.SINK]
  assert all(s.local_size is not None and np.prod(s.local_size) > 1 for s in specs), f"{name}: a kernel runs without thread blocks"
  if must_share: assert any(uses_shared(s.uops) for s in specs), f"{name}: no kernel shares work through shared memory"
  want = ref(*[x.astype(np.float64) for x in xs])
  assert_close(out.numpy(), want, dtype_name(dt), name, scale=float(np.abs(want).max()) + 1.0)
