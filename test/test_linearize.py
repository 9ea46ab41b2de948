"""The linearizer's order: every value is defined in a loop scope that encloses each of its uses (a C or LLVM kernel would
not compile otherwise), checked on the kernels of graphs that nest reductions."""
import numpy as np
from tinycore import Tensor, Device
from tinycore.uop import Ops
from tinycore.codegen import get_program

def scoping_errors(uops) -> list[str]:
  """Uses of a value outside the loop it was defined in."""
  open_loops: list = []
  scope: dict = {}
  errors = []
  for u in uops:
    for s in u.src:
      if s in scope and not set(scope[s]) <= set(open_loops): errors.append(f"{u.op.name} uses {s.op.name} outside the loop it was defined in")
    if u.op is Ops.ENDRANGE: open_loops.remove(u.src[0])
    else: scope[u] = tuple(open_loops)
    if u.op is Ops.RANGE: open_loops.append(u)
  return errors

def kernels(t: Tensor) -> list:
  ren = Device.renderer("PYTHON")
  return [get_program(si.ast, ren).uops for si in t.schedule() if si.ast.op is Ops.SINK]

def conv_pool_net(T):
  x = T(2, 3, 16, 16).pad(((0, 0), (0, 0), (1, 1), (1, 1))).conv2d(T(8, 3, 3, 3), T(8)).relu().max_pool2d((2, 2), (2, 2), (1, 1), 0, False)
  x = x.conv2d(T(16, 8, 3, 3), T(16), stride=(2, 2)).relu().avg_pool2d((2, 2), (2, 2), (1, 1), 0, True, count_include_pad=True).mean((2, 3), keepdim=True)
  return (x.reshape(2, 16) @ T(10, 16).T + T(10)).softmax(-1)

def test_an_index_shared_by_a_store_and_a_nested_reduction_is_defined_outside_the_loops():
  """A store's index also used inside a nested reduction's body was emitted inside the outer reduction's loop: LLVM
  refused the kernel ("Instruction does not dominate all uses") and C did not know the name."""
  rng = np.random.default_rng(0)
  arrays = []
  def T(*s):
    arrays.append(rng.standard_normal(s).astype(np.float32))
    return Tensor(arrays[-1], device="PYTHON")
  out = conv_pool_net(T)
  for uops in kernels(out): assert not scoping_errors(uops), scoping_errors(uops)[:3]
  it = iter(arrays)
  got = conv_pool_net(lambda *s: Tensor(next(it))).numpy()   # the default device (CPU where installed) runs the same net
  np.testing.assert_allclose(got, out.numpy(), rtol=1e-4, atol=1e-6)

def loop_errors(uops) -> list[str]:
  """Loops opened twice, closed without being open, or never closed."""
  open_loops, errors = [], []
  for u in uops:
    if u.op is Ops.RANGE:
      if u in open_loops: errors.append(f"RANGE {u.arg} opened again inside itself")
      open_loops.append(u)
    elif u.op is Ops.ENDRANGE:
      if u.src[0] not in open_loops: errors.append(f"ENDRANGE of {u.src[0].arg}, which is not open")
      else: open_loops.remove(u.src[0])
  return errors + [f"RANGE {u.arg} never closed" for u in open_loops]

def test_a_constant_summed_over_a_chunk_whose_length_varies_with_the_outer_chunk_loop_stays_inside_it():
  """tree_sums cuts a float sum of n > SUM_CHUNK terms into an outer loop over chunks and an inner loop whose length,
  min(n - chunk*SUM_CHUNK, SUM_CHUNK), reads the outer loop. A constant body (ones(257) + 1) reads no loop, so the inner
  reduction's loop dependencies came from its body alone: it looked loop-invariant, was hoisted above the outer loop, and
  emitting its length opened the outer loop with no ENDRANGE (LLVM: "use of undefined value '%r0_exit'"; PYTHON: "opens
  a loop it never closes"). A reduction changes with the loops its own loops' lengths read."""
  from tinycore.codegen.reduce import SUM_CHUNK
  for n in (SUM_CHUNK + 1, 3 * SUM_CHUNK - 1, SUM_CHUNK * SUM_CHUNK + 1):
    for t, want in (((Tensor.ones(n) + 1).sum(), 2.0 * n), ((Tensor.ones(n, 3) * 2 + 1).sum(0), np.full(3, 3.0 * n)),
                    (Tensor.full((n,), 0.5).sum() + Tensor.ones(n).sum(), 1.5 * n)):
      for uops in kernels(t): assert not loop_errors(uops), (n, loop_errors(uops))
      np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
  assert (Tensor.ones(SUM_CHUNK + 1, device="PYTHON") * 2).sum().item() == 2.0 * (SUM_CHUNK + 1)

def test_values_only_the_code_after_the_loops_needs_are_computed_there():
  """Only what a loop uses is computed before the loops. A GPU matmul block's thread stores up to 64 outputs after its
  sum loop: their addresses, computed up front, were held in registers across the loop (ptxas spilled the 4096^2 fp16
  tensor-core kernel's accumulators)."""
  ren = Device.renderer("PYTHON")
  # (a long sum's threads each take a few vectors, written out: no loop; a convolution's tiles loop)
  for t in (Tensor.empty(256, 256) @ Tensor.empty(256, 256), Tensor.empty(8, 16, 32, 32).conv2d(Tensor.empty(32, 16, 3, 3))):
    for uops in kernels(t):
      depth, inside = 0, set()
      for u in uops:
        depth += (u.op is Ops.RANGE) - (u.op is Ops.ENDRANGE)
        if depth or u.op is Ops.ENDRANGE: inside.add(u)
      assert inside, "the kernel has no loop"
      needed = set()
      for u in reversed(uops):
        if u in inside or u in needed: needed.update(u.src)
      first = next(i for i, u in enumerate(uops) if u.op is Ops.RANGE)
      early = [u for u in uops[:first] if u not in needed and u.op not in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL)]
      assert not early, f"computed before the loops, used only after them: {[u.op.name for u in early]}"

def test_an_asynchronous_tile_copy_is_issued_after_the_trips_barrier_and_before_its_sums():
  """A double-buffered tile's next copy on a target that copies global to shared memory without registers (NV's
  cp.async, Renderer.async_copy_bytes): issued whole at the top of the trip, after the trip's barrier (it fills the
  buffer the trip before read) and before the sums it overlaps; elsewhere its loads come before the barrier and its
  stores after the sums. Either way the PYTHON device computes the same matmul."""
  from tinycore.codegen.linearize import NEXT_TRIP
  from tinycore.renderer import async_copies
  a, b = (np.random.default_rng(1).integers(-3, 4, (128, 128)).astype(np.float32) for _ in range(2))
  base = Device.renderer("PYTHON")
  for ren in (base, type("AsyncCopies", (type(base),), {"async_copy_bytes": (4, 8, 16)})()):
    t = Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")
    (si,) = [si for si in t.schedule() if si.ast.op is Ops.SINK]
    uops = get_program(si.ast, ren).uops
    barrier = next(i for i, u in enumerate(uops) if u.op is Ops.BARRIER and u.arg == NEXT_TRIP)
    loop = max(i for i, u in enumerate(uops[:barrier]) if u.op is Ops.RANGE)
    first_sum = next(i for i, u in enumerate(uops) if i > barrier and u.op is Ops.ASSIGN)
    copies = [i for i, u in enumerate(uops) if i > loop and u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_LOCAL]
    assert copies and not scoping_errors(uops)
    if ren is base: assert not async_copies(uops, ren) and min(copies) > first_sum
    else: assert set(uops[i] for i in copies) <= async_copies(uops, ren) and barrier < min(copies) and max(copies) < first_sum
    from tinycore.engine import CompiledRunner
    CompiledRunner("PYTHON", get_program(si.ast, ren))(si.bufs, {})
    np.testing.assert_array_equal(si.bufs[0].numpy().reshape(128, 128), a @ b)
