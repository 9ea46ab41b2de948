"""Section blocks: thread blocks, shared memory, barriers, grouped reductions and shared-memory tiles, against numpy.

Kernels are compiled with explicit optimisation actions (codegen/opt/kernel.py: LOCAL, GROUP, GROUPTOP, UPCAST, STAGE,
UNROLL), so a backend that declares thread blocks and shared memory is checked on each mechanism whatever its own
heuristics choose; then common Tensor programs run with the heuristics and must use them where they apply."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.uop import Ops, AxisType
from tinycore.tensor import Tensor
from tinycore.codegen import get_program, lower_to_sink
from tinycore.codegen.opt import Opt, OptOps, Kernel, apply_opt
from tinycore_conformance import oracle as O
from tinycore_conformance.kernels import Launch
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
  launch = Launch(dev, si.ast, [(b.size, b.dtype) for b in si.bufs], opts=opts_for(dev, si.ast, actions))
  for i, x in enumerate(inputs): launch.write(i + 1, x)
  launch()
  dev.synchronize()
  return launch.bufs[0].numpy().reshape(t.shape), launch.spec.uops

def uses_shared(uops) -> bool:
  return any(u.op is Ops.DEFINE_LOCAL for u in uops) and any(u.op is Ops.BARRIER for u in uops)

GROUPINGS = {"GROUP16": [(OptOps.GROUP, AxisType.REDUCE, 16)], "GROUPTOP16": [(OptOps.GROUPTOP, AxisType.REDUCE, 16)],
             "LOCAL4+GROUP8": [(OptOps.LOCAL, AxisType.GLOBAL, 4), (OptOps.GROUP, AxisType.REDUCE, 8)],
             "GROUP4+UNROLL4": [(OptOps.GROUP, AxisType.REDUCE, 4), (OptOps.UNROLL, AxisType.REDUCE, 4)]}

@pytest.mark.covers("grouped reduction")
@pytest.mark.parametrize("grouping", list(GROUPINGS))
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_grouped_reduction(shared, device, target: Target, op: str, grouping: str):
  """Each output's reduction spread over threads of a block, partials combined through shared memory after a barrier."""
  for dt in dict.fromkeys(d for d in (target.default_float, target.default_int) if d is not None):
    x = O.sample(O.rng_for("blocks", op, grouping, dtype_name(dt)), dt, (8, 64), "small" if O.is_float(dt) else "any")
    if O.is_int(dt) and op == "sum": x = (x % 7).astype(x.dtype)   # no overflow: the sum is exact whatever its order
    got, uops = run(device, getattr(Tensor.empty(8, 64, dtype=dt), op)(1), [x], GROUPINGS[grouping])
    assert uses_shared(uops), f"{grouping}: the kernel has no shared memory and barrier"
    want = getattr(np, op)(x.astype(np.float64) if O.is_float(dt) else x, axis=1)
    if O.is_int(dt): np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=f"{op} of {dtype_name(dt)} with {grouping}")
    else: assert_close(got, want, dtype_name(dt), f"{op} with {grouping}", scale=np.abs(x).sum(1).max())

@pytest.mark.covers("grouped reduction identity")
def test_grouped_max_of_negative_infinities(shared, device, target: Target):
  """A group's partials start at the reduction's identity: a max over -inf (and over all-negative values) stays there."""
  dt = target.default_float
  if dt is None: pytest.skip(f"{target.name} declares no float dtype")
  x = np.full((4, 32), -np.inf, O.np_type(dt))
  x[1] = -3.0
  got, _ = run(device, Tensor.empty(4, 32, dtype=dt).max(1), [x], GROUPINGS["GROUP16"])
  assert got.tolist() == [-np.inf, -3.0, -np.inf, -np.inf], f"max over -inf rows with GROUP16: {got.tolist()}"

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
