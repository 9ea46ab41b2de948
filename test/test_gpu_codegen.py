"""The GPU-style codegen: each optimisation action keeps results, refuses what it cannot do, and the renderers' kernels have
thread blocks, shared memory, barriers and tensor-core instructions where the work calls for them (no device needed)."""
import re
import numpy as np
import pytest
from tinycore import Tensor, Device, dtypes
from tinycore.uop import Ops, AxisType, split_terms
from tinycore.codegen import get_program, lower_to_sink
from tinycore.codegen.opt import Kernel, Opt, OptOps, OptError, apply_opt
from tinycore.engine import CompiledRunner

def last_kernel(t: Tensor):
  return [si for si in t.schedule() if si.ast.op is Ops.SINK][-1]

def run_with(si, opts) -> np.ndarray:
  """The schedule item's kernel compiled with `opts` on PYTHON, run on its buffers: its output."""
  CompiledRunner("PYTHON", get_program(si.ast, Device.renderer("PYTHON"), opts=tuple(opts)))(si.bufs, {})
  return si.bufs[0].numpy().copy()

def kernel_of(si) -> Kernel:
  ren = Device.renderer("PYTHON")
  return Kernel(lower_to_sink(si.ast, ren), ren)

def padded_conv_reference(xs, ws, gs):
  """numpy's (output, input gradient, weight gradient) of a 3x3 conv with padding 1 whose output's gradient is gs."""
  windows = np.lib.stride_tricks.sliding_window_view(np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))   # (b, i, y, x, kh, kw)
  gwin = np.lib.stride_tricks.sliding_window_view(np.pad(gs, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  return (np.einsum("biyxhw,oihw->boyx", windows, ws), np.einsum("boyxhw,oihw->biyx", gwin, ws[:, :, ::-1, ::-1]),
          np.einsum("boyx,biyxhw->oihw", gs, windows))

rng = np.random.default_rng(0)
A = rng.integers(-3, 4, (24, 40)).astype(np.float32)
B = rng.integers(-3, 4, (40, 36)).astype(np.float32)

# small integers: every order of summation is exact, so every action must give the same bits
ACTIONS = {
  "LOCAL": [Opt(OptOps.LOCAL, 1, 4)], "UPCAST": [Opt(OptOps.UPCAST, 0, 3)], "UNROLL": [Opt(OptOps.UNROLL, 2, 8)],
  "GROUP": [Opt(OptOps.GROUP, 2, 8)], "GROUPTOP": [Opt(OptOps.GROUPTOP, 2, 5)],
  "LOCAL+GROUP onto its threads": [Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.GROUP, 2, 4)],
  "PADTO rows": [Opt(OptOps.PADTO, 0, 16)], "PADTO sum": [Opt(OptOps.PADTO, 2, 32)],
  "MERGE": [Opt(OptOps.MERGE, 0, 1)],
  "LOCAL+UPCAST+STAGE+UNROLL": [Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UPCAST, 0, 2),
                                Opt(OptOps.STAGE, 2, 8), Opt(OptOps.UNROLL, 7, 4)],
}

@pytest.mark.parametrize("name", list(ACTIONS))
def test_every_action_keeps_the_result(name):
  si = last_kernel(Tensor(A, device="PYTHON").realize() @ Tensor(B, device="PYTHON").realize())
  np.testing.assert_array_equal(run_with(si, ACTIONS[name]).reshape(24, 36), A @ B)

def test_actions_that_do_not_apply_say_why():
  si = last_kernel(Tensor(A, device="PYTHON").realize() @ Tensor(B, device="PYTHON").realize())
  k = kernel_of(si)
  for opt, why in ((Opt(OptOps.LOCAL, 1, 7), "does not divide"), (Opt(OptOps.UNROLL, 0, 2), "splits a REDUCE range"),
                   (Opt(OptOps.LOCAL, 9, 2), "no range 9"), (Opt(OptOps.PADTO, 0, 100), "more than doubles"),
                   (Opt(OptOps.STAGE, 2, 8), "no thread axes"), (Opt(OptOps.TC, 2, 0), "not the axis of one sum of half products")):
    with pytest.raises(OptError, match=why): apply_opt(k, opt)
  staged = apply_opt(apply_opt(k, Opt(OptOps.LOCAL, 1, 4)), Opt(OptOps.STAGE, 2, 8))
  with pytest.raises(OptError, match="only UNROLL may follow STAGE"): apply_opt(staged, Opt(OptOps.UPCAST, 0, 2))

def test_grouped_reduction_gates_its_store_and_shares_threads_with_the_rows():
  """A sum over few outputs gets threads of its own (the group's first stores); a row's sum in a kernel that then writes
  the row (softmax's) runs on the row's threads, each storing its own element."""
  x = Tensor(rng.standard_normal((8, 1024)).astype(np.float32), device="PYTHON").realize()
  spec = get_program(last_kernel(x.sum(1)).ast, Device.renderer("PYTHON"))
  assert spec.local_size[0] >= 64 and any(u.op is Ops.STORE and len(u.src) > 2 and u.src[0].src[0].op is Ops.DEFINE_GLOBAL for u in spec.uops)
  for si in [si for si in x.softmax(1).schedule() if si.ast.op is Ops.SINK]:
    spec = get_program(si.ast, Device.renderer("PYTHON"))
    loads = [u for u in spec.uops if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    # every global read happens once per thread per trip: no thread reads a whole row alone
    assert all(not any(r.op is Ops.RANGE and r.src[0].op is Ops.CONST and r.src[0].arg >= 1024 for r in ld.toposort()) for ld in loads), spec.name
  np.testing.assert_allclose(x.softmax(1).numpy(), np.exp(x.numpy()) / np.exp(x.numpy()).sum(1, keepdims=True), rtol=1e-5)

def test_a_sum_whose_axes_no_power_of_two_divides_is_merged_and_grouped():
  """A convolution's bias gradient: 16 outputs, each a sum over a batch and a 26x26 map. No power of two of 16 or more
  divides any one axis, so the sum's axes are merged and spread over a block (not 16 threads summing 10816 terms each)."""
  xs = rng.integers(-3, 4, (16, 16, 26, 26)).astype(np.float32)   # small integers: every order of summation is exact
  x = Tensor(xs, device="PYTHON").realize()
  si = last_kernel(x.sum((0, 2, 3)))
  spec = get_program(si.ast, Device.renderer("PYTHON"))
  assert np.prod(spec.local_size) >= 64 and np.prod(spec.global_size) * np.prod(spec.local_size) >= 16 * 64, (spec.global_size, spec.local_size)
  np.testing.assert_array_equal(x.sum((0, 2, 3)).numpy(), xs.sum((0, 2, 3)))

def test_tensor_core_action_matches_the_definition_and_pads():
  """The TC action's fragments (index math built from the layout) against PYTHON's WMMA (its own gather of the same
  layout): sizes that are multiples of the tile and ones padded to it."""
  for m, k, n in ((16, 24, 8), (13, 11, 7)):
    a, b = rng.uniform(-2, 2, (m, k)).astype(np.float16), rng.uniform(-2, 2, (k, n)).astype(np.float16)
    out = Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")
    spec = get_program(last_kernel(out).ast, Device.renderer("PYTHON"))
    assert any(u.op is Ops.WMMA for u in spec.uops) and spec.local_size[0] == 32
    np.testing.assert_allclose(out.numpy().astype(np.float32), (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16), rtol=2e-3, atol=2e-3)

@pytest.mark.parametrize("shape", [(64, 64, 64), (2, 32, 48, 64), (100, 77, 33)])
def test_tensor_core_operands_are_staged_in_shared_memory(shape):
  """Blocks of several warps copy both operands' tiles to shared memory (a barrier, then the fragments read from there):
  square, batched and padded sizes, on PYTHON's 8x8x8 tensor core against numpy."""
  *bs, m, k, n = shape
  a, b = rng.uniform(-2, 2, (*bs, m, k)).astype(np.float16), rng.uniform(-2, 2, (*bs, k, n)).astype(np.float16)
  out = Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")
  spec = get_program(last_kernel(out).ast, Device.renderer("PYTHON"))
  assert any(u.op is Ops.WMMA for u in spec.uops) and any(u.op is Ops.BARRIER for u in spec.uops)
  smem = [u for u in spec.uops if u.op is Ops.DEFINE_LOCAL]
  assert smem and all(any(u.op is Ops.LOAD and u.src[0].src[0] is s for u in spec.uops) for s in smem)
  np.testing.assert_allclose(out.numpy().astype(np.float32), (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16), rtol=2e-3, atol=2e-3)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_nv_tensor_core_kernel_reads_fragments_from_shared_memory(dt):
  """The PTX of an fp16 or bf16 matmul: mma.sync on fragments loaded from .shared, the tiles copied there between
  bar.syncs; each thread's global reads per trip are the block's two tiles shared out, not its warps' fragments, 8
  consecutive 16-bit elements (16 bytes) at a time, the same for bfloat16 (held as its bits) as for halves: one
  cp.async of 16 bytes each, no register holding them. A target without asynchronous copies moves them through
  registers: one ld.global.v4.b32 and one st.shared.v4.b32 of the words as loaded, nothing unpacked between them."""
  nv = renderer("NV")
  for ren in (nv, type("RegisterStaged", (type(nv),), {"async_copy_bytes": ()})(nv.arch)):
    src = get_program(last_kernel(Tensor.empty(512, 512, dtype=dt) @ Tensor.empty(512, 512, dtype=dt)).ast, ren).src
    assert "mma.sync.aligned.m16n8k16" in src and ".shared" in src and "bar.sync" in src and "ldmatrix.sync.aligned.m8n8" in src
    # a block of 2x2 warps, each 64x64 of the output: per trip of 32 along the sum, 128x32 of A and 32x128 of B over 128
    # threads, copied once before the loop (the first tile) and once in each trip (the next)
    copies = 2 * (128 * 32 + 32 * 128) // 128 // 8
    loaded = re.findall(r"ld\.global\.v4\.b32 (\{[^}]*\})", src)
    stored = re.findall(r"st\.shared\.v4\.b32 \[%r\d+\], (\{[^}]*\})", src)   # shared addresses are 32-bit
    if ren is nv: assert len(re.findall(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16;", src)) == copies and not loaded and not stored, src
    else: assert len(loaded) == copies and sorted(loaded) == sorted(stored) and "cp.async" not in src, (loaded, stored)
    assert not re.search(r"(ld|st)\.(global|shared)\.(b16|u16|v\d\.b16|v\d\.u16) ", src.split("$end")[0])   # no 16-bit copy
    assert src.count("mma.sync") == 4 * 8

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_nv_tensor_core_loop_loads_each_fragment_once_with_ldmatrix(dt):
  """The loop over a staged tile of a 512x512 matmul: each warp's 4x8 mmas read 4 fragments of A (16x16, its rows of
  8 consecutive halves: one ldmatrix.x4) and 8 of B (16x8, stored k-major: ldmatrix.x2.trans), each loaded once and
  read by every mma that uses it as loaded (nothing packed, no element loaded alone), an operand's fragments from one
  address register; each mma adds into its accumulator's registers (d is c), nothing copied after it."""
  src = get_program(last_kernel(Tensor.empty(512, 512, dtype=dt) @ Tensor.empty(512, 512, dtype=dt)).ast, renderer("NV")).src
  label = re.findall(r"^\$(loop\d+):$", src, re.M)[-1]   # the innermost loop: the one over the staged tile
  body = src[src.index(f"${label}:"):src.index(f"bra ${label};")]
  mmas = re.findall(r"mma\.sync\S* \{([^}]*)\}, \{[^}]*\}, \{[^}]*\}, \{([^}]*)\};", body)
  assert len(mmas) == 32 and all(d == c for d, c in mmas)
  assert body.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 4 and body.count("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16") == 8
  assert "ld.shared" not in body and "mov.b32" not in body and "shl.b32" not in body, body
  # one address per operand, each fragment at its constant offset from it
  assert len(set(re.findall(r"ldmatrix\S* \{[^}]*\}, \[(%r\d+)", body))) == 2, body

def test_wmma_refuses_lanes_that_disagree_on_a_copy():
  """PYTHON's WMMA checks the layout: lanes holding copies of one element (none in its own tensor core) must agree."""
  from tinycore.renderer import TensorCore
  from tinycore.runtime.builtin import wmma
  tc = TensorCore("copies", (2, 2, 2), dtypes.float16, dtypes.float32, 2, a=((None,), (("m", 0), ("k", 0))),
                  b=((("n", 0),), (("k", 0),)), c=((("n", 0),), (("m", 0),)))
  a = np.array([[1, 2, 3, 4], [1, 2, 3, 5]], np.float16)   # lane 1's copy of A differs in its last element
  with pytest.raises(RuntimeError, match=r"disagree"): wmma(tc, a, np.ones((2, 2)), np.zeros((2, 2)), lanes=2)

# ***** rendered kernels: the structure, without a device *****

def renderer(name: str):
  if name == "NV":
    nv = pytest.importorskip("tinygrad_nv.renderer")
    return nv.PTXRenderer("sm_90")
  if name == "AMD": return pytest.importorskip("tinygrad_amd.renderer").RDNA3Renderer()
  if name == "QCOM": return pytest.importorskip("tinygrad_qcom.renderer").OpenCLRenderer()
  return pytest.importorskip("tinygrad_webgpu.renderer").WGSLRenderer()

MARKS = {"NV": (".shared", "bar.sync"), "AMD": ("ds_store_", "ds_load_", "s_waitcnt lgkmcnt(0)\n  s_barrier"),
         "QCOM": ("__local", "barrier(CLK_LOCAL_MEM_FENCE)"), "WEBGPU": ("var<workgroup>", "workgroupBarrier()")}
def conv_grads():
  """Scheduled for PYTHON, which has blocks as the GPUs do (the CPU's schedule sums the input gradient's windows in the
  kernel writing the pixels: schedule.py find_realizes)."""
  x, w = Tensor.empty(8, 16, 32, 32, requires_grad=True, device="PYTHON"), Tensor.empty(32, 16, 3, 3, requires_grad=True, device="PYTHON")
  return x.conv2d(w, padding=1).sum().gradient(x, w)

WORK = {
  "matmul 512": lambda: Tensor.empty(512, 512) @ Tensor.empty(512, 512),
  "conv forward": lambda: Tensor.empty(8, 16, 32, 32).conv2d(Tensor.empty(32, 16, 3, 3), padding=1),
  "conv backward": conv_grads,
  "softmax": lambda: Tensor.empty(256, 1024).softmax(1),
  "sum 2^20": lambda: Tensor.empty(1 << 20).sum(),
}

@pytest.mark.parametrize("dev", list(MARKS))
def test_gpu_kernels_use_blocks_shared_memory_and_barriers(dev):
  ren = renderer(dev)
  for name, make in WORK.items():
    outs = make()
    items = [si for t in (outs if isinstance(outs, (list, tuple)) else [outs]) for si in t.schedule() if si.ast.op is Ops.SINK]
    specs = [get_program(si.ast, ren) for si in items]
    big = [s for s, si in zip(specs, items) if sum(b.size for b in si.bufs[1:]) >= 4096]   # (not a sum of 32 partials)
    assert big and all(s.local_size is not None and np.prod(s.local_size) > 1 for s in big), (dev, name, [s.local_size for s in specs])
    shared = [s for s in specs if all(m in s.src for m in MARKS[dev])]
    assert shared, f"{dev} {name}: no kernel uses shared memory and a barrier"

TENSOR_CORES = {"NV": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                "AMD": ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16")}

@pytest.mark.parametrize("dev", list(TENSOR_CORES))
def test_half_matmuls_render_the_tensor_core_instruction(dev):
  """fp16 and bf16 matmuls (a multiple of the tile, one padded to it, a batched one) on the target's own instruction."""
  ren = renderer(dev)
  for dt, inst in zip((dtypes.float16, dtypes.bfloat16), TENSOR_CORES[dev]):
    for a, b in (((512, 512), (512, 512)), ((1000, 333), (333, 777)), ((4, 64, 48), (4, 48, 32))):
      src = get_program(last_kernel(Tensor.empty(*a, dtype=dt) @ Tensor.empty(*b, dtype=dt)).ast, ren).src
      assert inst in src, (dev, dt, a, b)

def test_a_sum_stored_twice_is_lowered_once():
  """A training step's forward kernel stores a matmul's float32 sum (for the ReLU's gradient) and the half activation
  (the sum cast, reshaped back to the kernel's shape): the lowerer reaches the sum along both paths as one (u, index),
  so it is one REDUCE, on the tensor core; two copies of it would be twice the work and keep the TC action off."""
  h, r = dtypes.float16, np.random.default_rng(1)
  xs, w1s, b1s, w2s = (r.integers(-2, 3, s).astype(np.float16) for s in ((16, 32), (32, 64), (64,), (64, 16)))
  x, w1, b1, w2 = (Tensor(v, device="PYTHON", requires_grad=True) for v in (xs, w1s, b1s, w2s))
  loss = (x.linear(w1, b1).relu() @ w2).float().square().sum()
  grads = loss.gradient(w1, w2)
  items = [si for si in Tensor.schedule(*grads) if si.ast.op is Ops.SINK]
  (fwd,) = [si for si in items if len(si.ast.src) == 2]   # the one kernel with two outputs: the sum and the activation
  ren = Device.renderer("PYTHON")
  assert sum(u.op is Ops.REDUCE for u in lower_to_sink(fwd.ast, ren).toposort()) == 1
  assert any(u.op is Ops.WMMA for u in get_program(fwd.ast, ren).uops)
  a = np.maximum(xs.astype(np.float64) @ w1s + b1s, 0)
  g_out = 2 * (a @ w2s)
  want = (xs.T @ ((g_out @ w2s.T) * (a > 0)), a.T @ g_out)
  for got, ref in zip(grads, want):   # the intermediates are rounded to half: 2^-11 of each, a few times over
    np.testing.assert_allclose(got.numpy().astype(np.float64), ref, atol=4e-3 * np.abs(ref).max())

# ***** MULACC: a product joining its accumulator is one fused multiply-add where the renderer declares the dtype *****

def test_products_fuse_into_accumulators_only_where_declared():
  """fuse_mulacc: each term of a matmul's sum becomes MULACC(a, b, acc) in the renderer's mulacc_dtypes (PYTHON: every
  float), or MULACC(a, b, the terms before it) where the sum is written out (its 8 terms: no loop), none without them,
  and an elementwise a * b + c stays a product and a sum (its two roundings are the graph's)."""
  from tinycore.runtime.builtin import PythonRenderer
  class NoFma(PythonRenderer): mulacc_dtypes = frozenset()
  a, b = (Tensor(np.arange(64, dtype=np.float32).reshape(8, 8) / 7, device="PYTHON") for _ in range(2))
  mm, ew = last_kernel(a @ b).ast, last_kernel(a * b + a).ast
  fused = [u for u in get_program(mm, PythonRenderer()).uops if u.op is Ops.MULACC]
  assert len(fused) == 7 and all(u.src[2].op in (Ops.DEFINE_ACC, Ops.MUL, Ops.MULACC) for u in fused)
  assert not any(u.op is Ops.MULACC for u in get_program(mm, NoFma()).uops)
  assert not any(u.op is Ops.MULACC for u in get_program(ew, PythonRenderer()).uops)
  np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-6)

def spread(spec) -> bool:
  """Whether a kernel combines partial results of several threads: through shared memory or warp shuffles."""
  return any(u.op in (Ops.DEFINE_LOCAL, Ops.SHUFFLE_XOR) for u in spec.uops)

def test_the_definition_refuses_a_shuffle_past_its_block():
  """PYTHON runs SHUFFLE_XOR as the hardware does, lane t reading lane t ^ m of its warp, and refuses one whose partner
  is not a thread of the block (the core shuffles only in blocks of whole warps) or lies outside the warp of 32."""
  from tinycore.uop import UOp
  from tinycore.runtime.builtin import PythonRenderer, PythonProgram
  def program(m: int, threads: int) -> tuple[PythonProgram, memoryview]:
    lid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, threads),), "lidx0")
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(threads), (), 0)
    uops = list(out.index(lid).store(UOp(Ops.SHUFFLE_XOR, dtypes.int32, (lid,), m)).toposort())
    return PythonProgram("shfl", PythonRenderer().render("shfl", uops)), memoryview(bytearray(4 * threads))
  prog, buf = program(4, 64)
  prog(buf, local_size=(64, 1, 1))
  assert np.frombuffer(buf, np.int32).tolist() == [t ^ 4 for t in range(64)]
  for m, threads, why in ((16, 16, "reads thread 16, past the block's 16"), (32, 64, "outside the warp of 32")):
    prog, buf = program(m, threads)
    with pytest.raises(RuntimeError, match=why): prog(buf, local_size=(threads, 1, 1))

# ***** wide accesses: a thread's consecutive elements at a provably aligned index, one vector load or store *****

def vector_accesses(spec) -> list[tuple[str, int]]:
  return [(u.op.name, (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count) for u in spec.uops
          if u.op in (Ops.LOAD, Ops.STORE) and (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count > 1]

@pytest.mark.parametrize("dt, lanes", [(dtypes.float32, 4), (dtypes.int32, 4), (dtypes.float64, 2), (dtypes.float16, 8), (dtypes.bfloat16, 8),
                                       (dtypes.int16, 8), (dtypes.uint8, 8)])
def test_elementwise_work_loads_and_stores_whole_vectors(dt, lanes):
  """PYTHON (memory_vector 16, as NV) runs a + b with each thread's `lanes` consecutive elements as one load per input and
  one store (16 bytes of them; bytes 8 at a time, the most copies of its work a thread takes: upcast_max), and gets
  numpy's result; the definition itself refuses a vector access at an index that is not a multiple of its length, so
  every conformance run checks the core's alignment proofs. Sums below 128: exact in every dtype."""
  x, y = (np.arange(4096) % 115).astype(np.float32), (np.arange(4096) % 13).astype(np.float32)
  out = Tensor(x, device="PYTHON").cast(dt).realize() + Tensor(y, device="PYTHON").cast(dt).realize()
  spec = get_program(last_kernel(out).ast, Device.renderer("PYTHON"))
  assert sorted(vector_accesses(spec)) == [("LOAD", lanes)] * 2 + [("STORE", lanes)], vector_accesses(spec)
  assert spec.aligned == lanes * dt.itemsize
  np.testing.assert_array_equal(out.cast(dtypes.float32).numpy(), x + y)

def test_elementwise_work_over_maps_no_vector_divides_is_merged_into_vectors():
  """Elementwise work over 26x26 maps (a conv's output in the digits model): no vector of 4 divides a row of 26, so each
  thread took one element, loaded one at a time. The row is first merged with the one the output continues along
  (676 = 169 x 4, as the threads' layout merges it anyway): 4 elements a thread, one vector per input and one store. A
  row that pads to a block's threads keeps its shape (rows of 4099: test_rows_no_power_of_two_divides_run_along_a_block),
  and so does one a load reads otherwise than as one axis (a 13x13 map upsampled, read at (y // 2, x // 2): its
  elements one at a time, lanes 16 bytes apart, would touch 4 times the sectors). PYTHON's answers equal numpy's."""
  x, c = rng.standard_normal((4, 16, 26, 26)).astype(np.float32), rng.standard_normal((1, 16, 1, 1)).astype(np.float32)
  out = (Tensor(x, device="PYTHON") * Tensor(c, device="PYTHON")).relu()
  spec = get_program(last_kernel(out).ast, Device.renderer("PYTHON"))
  assert sorted(vector_accesses(spec)) == [("LOAD", 4), ("STORE", 4)], (spec.name, vector_accesses(spec))
  np.testing.assert_allclose(out.numpy(), np.maximum(x * c, 0), rtol=1e-6)
  small = rng.standard_normal((4, 16, 13, 13)).astype(np.float32)
  up = Tensor(small, device="PYTHON").reshape(4, 16, 13, 1, 13, 1).expand(4, 16, 13, 2, 13, 2).reshape(4, 16, 26, 26)
  out = up + Tensor(x, device="PYTHON")
  assert vector_accesses(get_program(last_kernel(out).ast, Device.renderer("PYTHON"))) == []
  np.testing.assert_allclose(out.numpy(), small.repeat(2, 2).repeat(2, 3) + x, rtol=1e-6)

def test_accesses_not_provably_aligned_stay_element_by_element():
  """a[1:] + a[:-1]: the shifted read starts one element past a multiple of 4, a[::2] steps by 2, a bool is a byte the
  renderer turns into a predicate: none is read as a vector (the store of the first, aligned, still is), and every
  result is right."""
  ren, a = Device.renderer("PYTHON"), np.arange(4097, dtype=np.float32)
  t = Tensor(a, device="PYTHON")
  shifted = t[1:] + t[:-1]
  assert sorted(vector_accesses(get_program(last_kernel(shifted).ast, ren))) == [("LOAD", 4), ("STORE", 4)]
  np.testing.assert_array_equal(shifted.numpy(), a[1:] + a[:-1])
  strided = t[:4096:2] * 2
  assert [n for op, n in vector_accesses(get_program(last_kernel(strided).ast, ren)) if op == "LOAD"] == []
  np.testing.assert_array_equal(strided.numpy(), a[:4096:2] * 2)
  flags = Tensor(a[:4096] > 9, device="PYTHON") & Tensor(a[:4096] < 99, device="PYTHON")
  assert vector_accesses(get_program(last_kernel(flags).ast, ren)) == []
  np.testing.assert_array_equal(flags.numpy(), (a[:4096] > 9) & (a[:4096] < 99))

def test_a_wide_kernel_refuses_a_buffer_view_off_its_alignment():
  """The core proves an index a multiple of the access's length, so the buffer's start must be a multiple of its bytes:
  a view at byte offset 4 is refused at launch, saying which buffer and what to pass; one at 16 runs."""
  from tinycore.runtime.device import Buffer
  from tinycore.runtime.errors import UnsupportedError
  si = last_kernel(Tensor.empty(64, device="PYTHON") * 2)
  runner = CompiledRunner("PYTHON", get_program(si.ast, Device.renderer("PYTHON")))
  assert runner.spec.aligned == 16
  base = Buffer("PYTHON", 72, dtypes.float32).ensure_allocated().copyin(memoryview(np.arange(72, dtype=np.float32)).cast("B"))
  out = Buffer("PYTHON", 64, dtypes.float32).ensure_allocated()
  with pytest.raises(UnsupportedError, match=r"backend PYTHON: .* buffer 1 is a view at byte offset 4: pass a view at such an offset, or a copy"):
    runner([out, base.view(64, dtypes.float32, 4)], {})
  runner([out, base.view(64, dtypes.float32, 16)], {})
  np.testing.assert_array_equal(out.numpy(), np.arange(4, 68, dtype=np.float32) * 2)

def test_grouped_sums_read_whole_vectors():
  """A long sum and softmax's row statistics, spread over a block's threads, take each thread's 4 consecutive terms a
  trip (UNROLL before GROUP, codegen/opt/gpu.py `_group`): one vector load each, on PYTHON and NV, and numpy's results."""
  rng = np.random.default_rng(5)
  x, rows = rng.standard_normal(1 << 16).astype(np.float32), rng.standard_normal((64, 1024)).astype(np.float32)
  for name in ("PYTHON", "NV"):
    ren = Device.renderer("PYTHON") if name == "PYTHON" else renderer("NV")
    for t in (Tensor.empty(1 << 16).sum(), Tensor.empty(64, 1024).softmax(-1)):
      specs = [get_program(si.ast, ren) for si in t.schedule() if si.ast.op is Ops.SINK]
      grouped = [s for s in specs if s.local_size is not None and spread(s)]
      assert grouped and all(("LOAD", 4) in vector_accesses(s) for s in grouped), (name, [vector_accesses(s) for s in specs])
  np.testing.assert_allclose(Tensor(x, device="PYTHON").sum().numpy(), x.astype(np.float64).sum(), rtol=1e-5)
  want = np.exp(rows - rows.max(1, keepdims=True))
  np.testing.assert_allclose(Tensor(rows, device="PYTHON").softmax(-1).numpy(), want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)

def test_a_rows_statistics_load_each_element_once():
  """softmax over rows of 4096 with 256 threads (scheduled for PYTHON, whose rows NV splits alike): one kernel, each
  thread's 16 elements 4 vector loads written out (not a loop over them), so the max, the exp-sum and the row's outputs
  all read them from registers: the kernel loads its input once and stores each thread's 16 outputs as 4 vectors, a
  block per row."""
  for ren in (Device.renderer("PYTHON"), renderer("NV")):
    (spec,) = [get_program(si.ast, ren) for si in Tensor.empty(8, 4096, device="PYTHON").softmax(-1).schedule() if si.ast.op is Ops.SINK]
    glob = [u for u in spec.uops if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    assert [(u.op, (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count) for u in glob] == [(Ops.LOAD, 4)] * 4 + [(Ops.STORE, 4)] * 4, (ren.device, glob)
    assert (spec.global_size[0], spec.local_size[0]) == (8, 256) and spread(spec), (spec.global_size, spec.local_size)

def test_a_sum_no_large_power_of_two_divides_is_spread_over_its_largest_divisor():
  """A linear layer's logits over 2704 = 16 x 13^2 features (the digits model's) for 128 images: 1280 sums of 2704
  terms. The largest power of two dividing 2704, 16, left each of 16 threads 169 terms (80 blocks on NV, each warp
  2574 instructions long); 208 threads a sum (13 terms each, combined through shared memory) take it. PYTHON's answer
  equals numpy's."""
  for ren in (Device.renderer("PYTHON"), renderer("NV"), renderer("AMD")):
    (spec,) = [get_program(si.ast, ren) for si in (Tensor.empty(128, 2704, device="PYTHON") @ Tensor.empty(2704, 10, device="PYTHON")).schedule()
               if si.ast.op is Ops.SINK]
    assert spec.local_size[0] == 208 and spread(spec), (ren.device, spec.global_size, spec.local_size)
  x, w = rng.standard_normal((3, 2704)).astype(np.float32), rng.standard_normal((2704, 10)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x, device="PYTHON") @ Tensor(w, device="PYTHON")).numpy(), x @ w, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("n", [4099, 50257])
def test_rows_no_power_of_two_divides_run_along_a_block(n):
  """softmax over rows of a prime length too long for one block (GPT-2's vocabulary, 50257, and 4099): every kernel's
  256 threads run along the row, padded past its end (PADTO): each row's max and sum are spread over a block (warp
  shuffles, shared memory) (no thread loops over more than its share of a row, where each thread took a whole row before), and
  the kernel writing the rows takes ceil(n / 256) blocks per row (before, its threads ran across 256 rows: a warp read
  a sector of each of 32 rows). A row longer than REDUCE_SPLIT (50257) is first cut into partials, each spread over a
  block alike, which a small kernel then combines, each of its threads summing one row's few partials. PYTHON's answer
  equals numpy's."""
  from tinycore.schedule import REDUCE_SPLIT, SPLIT_OUTPUTS
  for ren in (Device.renderer("PYTHON"), renderer("NV"), renderer("AMD")):
    items = [si for si in Tensor.empty(8, n, device="PYTHON").softmax(-1).schedule() if si.ast.op is Ops.SINK]
    specs = [get_program(si.ast, ren) for si in items]
    combining = [max(b.size for b in si.bufs[1:]) <= 8 * SPLIT_OUTPUTS for si in items]
    assert sum(combining) == (2 if n > REDUCE_SPLIT else 0), (ren.device, [s.name for s in specs])   # the max's and the sum's
    for s, c in zip(specs, combining):
      trips = [u.src[0].arg for u in s.uops if u.op is Ops.RANGE]
      assert (c and s.local_size[0] == 8 and all(t <= SPLIT_OUTPUTS for t in trips)) or \
             (not c and s.local_size[0] == 256 and all(t <= -(-n // 256) for t in trips)), (ren.device, s.name, s.local_size, trips)
    assert all(spread(s) for s, c in zip(specs[:-1], combining) if not c) and specs[-1].global_size[:2] == (-(-n // 256), 8), (ren.device, [s.global_size for s in specs])
  x = rng.standard_normal((3, 4099)).astype(np.float32)
  e = np.exp(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(Tensor(x, device="PYTHON").softmax(-1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-8)

def test_a_load_a_pad_does_not_move_is_read_once():
  """softmax over rows of 50257 (a prime) in partial sums: the scheduler pads each row to a multiple of its parts, and
  a load under a pad reads element 0 where the pad is not valid. The row's max, read by every term of the row's exp-sum,
  lies in its buffer whatever the term: its address is not gated, so it is loaded once before the loops, not once a
  term (global reads of softmax 16x50257 on NV: 19.42 -> 16.19 MB); the row's own elements keep their gate."""
  for si in [si for si in Tensor.empty(2, 50257, device="PYTHON").softmax(-1).schedule() if si.ast.op is Ops.SINK and len(si.bufs) == 3]:
    spec = get_program(si.ast, Device.renderer("PYTHON"))
    first = next(i for i, u in enumerate(spec.uops) if u.op is Ops.RANGE)
    gated = {u.src[0].src[0].arg: (i < first, any(x.op is Ops.WHERE for x in u.src[0].toposort())) for i, u in enumerate(spec.uops)
             if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL}
    assert gated == {2: (True, False), 1: (False, True)}, gated   # (before the loops, address gated) of the max and of the row
  x = rng.standard_normal((2, 50257)).astype(np.float32)
  e = np.exp(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(Tensor(x, device="PYTHON").softmax(-1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-9)

def test_a_convs_weight_gradient_is_staged_over_its_merged_sum():
  """dw[o, i, kh, kw] = the sum over batch, rows and columns of g[b, o, y, x] * x[b, i, y + kh - 1, x + kw - 1]: a
  matmul whose sum runs over three axes both loads read, nested. A tile is copied once per trip of the loop over tiles,
  which no loop the loads read may enclose, so the three are merged into one (MERGE) and that is tiled (STAGE): both
  operands come from shared memory (before, the whole sum's tile was too big for it, and each thread loaded both
  operands from global memory for each of its 512 terms), and the gradients equal numpy's (PYTHON)."""
  rng = np.random.default_rng(7)
  xs, ws, gs = (rng.integers(-3, 4, s).astype(np.float32) for s in ((2, 16, 16, 16), (32, 16, 3, 3), (2, 32, 16, 16)))
  x, w = Tensor(xs, device="PYTHON").requires_grad_(), Tensor(ws, device="PYTHON").requires_grad_()
  dx, dw = (x.conv2d(w, padding=1) * Tensor(gs, device="PYTHON")).sum().gradient(x, w)
  for ren in (Device.renderer("PYTHON"), renderer("NV"), renderer("AMD")):
    (spec,) = [get_program(si.ast, ren) for si in dw.schedule() if si.ast.op is Ops.SINK and si.bufs[0].size == 32 * 16 * 9]
    opts = [u.arg for u in spec.uops if u.op is Ops.DEFINE_LOCAL]
    assert len(opts) == 2 and any(u.op is Ops.BARRIER for u in spec.uops), (ren.device, spec.name)
    terms = [u.src[0].arg for u in spec.uops if u.op is Ops.RANGE]
    assert max(terms) <= 2 * 16 * 16 // 16, (ren.device, terms)   # the merged sum's tiles of 16, not a loop per axis
  np.testing.assert_array_equal(dw.numpy(), padded_conv_reference(xs, ws, gs)[2])   # small integers: every order of summation is exact
  assert dx.shape == xs.shape

def test_a_merged_sums_tile_copies_divide_each_index_once():
  """A conv's weight gradient over 7x7 maps sums over images x pixels merged into one axis, which its loads read through
  divisions by 49 and 7 (and remainders). A thread copying n consecutive elements of that axis a step would divide n
  indexes one apart; it copies one a step instead (its copies of a trip then a whole block apart, at the same place
  along the axis), so no two divisions by a constant other than a power of two divide indexes a constant apart (at
  22061e6, 51 divisions, 49 such pairs). The gradient equals numpy's (PYTHON; small integers: exact). (AMD, with its
  64-thread waves, tiles this one differently.)"""
  rng = np.random.default_rng(3)
  xs, ws, gs = (rng.integers(-3, 4, s).astype(np.float32) for s in ((16, 4, 7, 7), (64, 4, 3, 3), (16, 64, 7, 7)))
  x, w = Tensor(xs, device="PYTHON").requires_grad_(), Tensor(ws, device="PYTHON").requires_grad_()
  dx, dw = (x.conv2d(w, padding=1) * Tensor(gs, device="PYTHON")).sum().gradient(x, w)
  for ren in (Device.renderer("PYTHON"), renderer("NV")):
    (spec,) = [get_program(si.ast, ren) for si in dw.schedule() if si.ast.op is Ops.SINK and si.bufs[0].size == 64 * 4 * 9]
    assert sum(u.op is Ops.DEFINE_LOCAL for u in spec.uops) == 2, (ren.device, spec.name)
    divs = [u for u in spec.uops if u.op in (Ops.IDIV, Ops.MOD) and u.src[1].op is Ops.CONST and u.src[1].arg & (u.src[1].arg - 1)]
    assert any(u.src[1].arg % 7 == 0 for u in divs), (ren.device, [u.src[1].arg for u in divs])   # (the map's rows)
    apart = [(a.src[0].render(), b.src[0].render()) for i, a in enumerate(divs) for b in divs[i + 1:]
             if a.op is b.op and a.src[1].arg == b.src[1].arg and split_terms(a.src[0])[0] == split_terms(b.src[0])[0]]
    assert not apart, (ren.device, apart)
  np.testing.assert_array_equal(dw.numpy(), padded_conv_reference(xs, ws, gs)[2])

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_a_mixed_precision_matmuls_tiles_are_copied_converted(dt, monkeypatch):
  """float32 operands cast to the tensor core's 16-bit dtype in the kernel: the tiles are copied converted (shared arrays
  of the 16-bit dtype, each element converted once per tile where the copy stores it, after the trip's sums, not at
  every fragment read), so NV reads them with ldmatrix, and AMD renders 256x512x128 within its 256 VGPRs (at 8a9635a
  it needed more: float32 fragments converted at each read). The product equals numpy's within the 16-bit rounding of
  the operands, on the emulators."""
  def mm(dev, m, k, n): return Tensor.empty(m, k, device=dev).cast(dt) @ Tensor.empty(k, n, device=dev).cast(dt)
  for name in ("NV", "AMD"):
    ren = renderer(name)
    spec = get_program(last_kernel(mm("PYTHON", 256, 512, 128)).ast, ren)
    assert [u.dtype.base.itemsize for u in spec.uops if u.op is Ops.DEFINE_LOCAL] == [2, 2], (name, spec.name)
    if name == "NV": assert "ldmatrix" in spec.src and "mma.sync" in spec.src
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((96, 80)).astype(np.float32), rng.standard_normal((80, 48)).astype(np.float32)
  want = Tensor(a).cast(dt).float().numpy().astype(np.float64) @ Tensor(b).cast(dt).float().numpy().astype(np.float64)
  for dev in ("NV", "AMD"):
    monkeypatch.setenv(f"{dev}_EMULATE", "1")
    got = (Tensor(a, device=dev).cast(dt) @ Tensor(b, device=dev).cast(dt)).float().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max(), err_msg=dev)

def test_a_convs_input_gradient_is_stored_the_way_it_is_read():
  """A conv's input gradient (scheduled for PYTHON, whose blocks NV's and AMD's match) is two kernels: each tap's
  product (b, c, y, x, ky, kx), then those summed into pixels through a permute to (b, c, ky, y, kx, x). The products
  are stored in the permuted order (schedule.py _layouts): both kernels' neighbouring threads then write and read
  neighbouring words along x (its stores' coefficient of the fastest thread id is 1; it was 144 here, a 32-byte sector
  a lane). The gradients equal numpy's."""
  from tinycore.uop import split_terms
  rng = np.random.default_rng(3)
  xs, ws, gs = (rng.integers(-3, 4, s).astype(np.float32) for s in ((2, 16, 16, 16), (32, 16, 3, 3), (2, 32, 16, 16)))
  x, w = Tensor(xs, device="PYTHON").requires_grad_(), Tensor(ws, device="PYTHON").requires_grad_()
  (dx,) = (x.conv2d(w, padding=1) * Tensor(gs, device="PYTHON")).sum().gradient(x)
  for ren in (Device.renderer("PYTHON"), renderer("NV"), renderer("AMD")):
    (taps, pixels) = [get_program(si.ast, ren) for si in dx.schedule() if si.ast.op is Ops.SINK]
    for spec in (taps, pixels):
      lane = next(u for u in spec.uops if u.op is Ops.SPECIAL and u.arg == "lidx0")
      (store,) = [u for u in spec.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
      assert split_terms(store.src[0].src[1])[0].get(lane) == 1, (ren.device, spec.name, spec.local_size)
  pad = np.pad(gs, ((0, 0), (0, 0), (1, 1), (1, 1)))   # dx[b, i, h, w] = sum g[b, o, h + 1 - ky, w + 1 - kx] w[o, i, ky, kx]
  want = sum(np.einsum("bohw,oi->bihw", pad[:, :, 2 - ky:18 - ky, 2 - kx:18 - kx], ws[:, :, ky, kx]) for ky in range(3) for kx in range(3))
  np.testing.assert_array_equal(dx.numpy(), want)   # small integers: every order of summation is exact

def test_short_sums_are_not_spread_over_a_block():
  """A loss accumulated over a loop fuses many means of 4 into one kernel of 4 outputs. Each mean is summed by every
  thread alone (GROUP_LEAST): combining 4 terms through shared memory and barriers costs more than adding them, and
  spreading each of the kernel's sums rewrote the whole kernel once per sum (compile time quadratic in its length).
  A conv's input gradient sums 32 channels' weights that every thread of a row of pixels needs: that sum is spread
  (no thread loops over it: it takes 4 of the 32 at most)."""
  from tinycore.codegen.opt.gpu import GROUP_LEAST
  assert 4 < GROUP_LEAST <= 32
  (dx, _) = [get_program(si.ast, Device.renderer("PYTHON")) for si in conv_grads()[0].schedule() if si.ast.op is Ops.SINK]
  assert spread(dx) and not any(u.op is Ops.RANGE for u in dx.uops) and \
    sum(u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL for u in dx.uops) <= 4, dx.name
  rows = rng.standard_normal((40, 4)).astype(np.float32)
  total = Tensor.zeros(4, device="PYTHON")
  for r in rows: total = total + Tensor(r, device="PYTHON").square().mean()
  spec = get_program(last_kernel(total).ast, Device.renderer("PYTHON"))
  assert not spread(spec) and not any(u.op is Ops.BARRIER for u in spec.uops)
  np.testing.assert_allclose(total.numpy(), np.square(rows).mean(1).sum() + np.zeros(4, np.float32), rtol=1e-5)

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16], ids=lambda d: d.name)
def test_a_matmuls_tiles_are_double_buffered(dt):
  """Each trip of the loop over the sum's tiles waits at one barrier and copies the next tile into the other buffer
  while it sums; the first tile is copied before the loop. Through registers (a target without asynchronous copies),
  the trip loads the next tile before its barrier and sums (the loads' latency spent summing) and stores it after them.
  NV's cp.async copies it after the barrier (the buffer it fills was read in the trip before) and before the sums, and
  the next trip's barrier first waits for the thread's copies. Where two copies of the tiles do not fit in shared
  memory, a trip copies its own tile between two barriers."""
  def loop(ren) -> str:
    src = get_program(last_kernel(Tensor.empty(512, 512, dtype=dt) @ Tensor.empty(512, 512, dtype=dt)).ast, ren).src
    return src[src.index("$loop"):src.rindex("bra $loop")]   # the outer loop's body, its inner loops included
  at = lambda pattern, body: [m.start() for m in re.finditer(pattern, body)]
  nv = renderer("NV")
  body = loop(type("RegisterStaged", (type(nv),), {"async_copy_bytes": ()})(nv.arch))
  sums = at(r"mma\.sync|fma\.rn", body)
  assert body.count("bar.sync") == 1 and sums and "cp.async" not in body, body
  barrier, loads, stores = body.index("bar.sync"), at(r"ld\.global", body), at(r"st\.shared", body)
  assert loads and stores and max(loads) < barrier < min(sums) and max(sums) < min(stores), body
  body = loop(nv)
  sums, copies = at(r"mma\.sync|fma\.rn", body), at(r"cp\.async\.c[ag]", body)
  assert body.count("bar.sync") == 1 and body.count("cp.async.wait_all;\n\tbar.sync 0;") == 1 and "ld.global" not in body and "st.shared" not in body, body
  assert copies and body.index("bar.sync") < min(copies) and max(copies) < min(sums), body
  # room for one copy of the padded tiles (fp32: two 64x4 tiles, the shortest STAGE makes, 2.1 KiB, as a longer tile
  # double-buffered is taken before a single one; fp16: 128x32 and 32x128, 18.5 KiB), not two
  small = (3 << 10) if dt == dtypes.float32 else (20 << 10)
  single = loop(type("SmallShared", (type(nv),), {"shared_max": small})("sm_90"))
  bars, copies = at(r"bar\.sync", single), at(r"cp\.async\.c[ag]", single)
  assert len(bars) == 2 and copies and bars[0] < min(copies) and max(copies) < bars[1] < min(at(r"mma\.sync|fma\.rn", single)), single

def test_a_convs_tile_is_the_longest_that_is_double_buffered():
  """A conv's tiles hold a tile of input channels x 3 x 3 x the block's 64 filters and the input rows its whole row of
  56 pixels reads: of 16 channels (67.5 KiB) they do not fit shared memory, of 8 (41.6 KiB) only once, of 4 twice. A
  single buffer's copies all wait at the barrier together (with 16-channel tiles that fit once, an earlier layout gave
  ptxas 255 registers and spills: 81 copies per thread in flight); a double-buffered tile's next copies run beside the
  sums. The longest tile that double-buffers is taken, not the longest that fits."""
  from tinycore.codegen.linearize import NEXT_TRIP
  from tinycore.codegen.opt import gpu
  ren = renderer("NV")
  si = last_kernel(Tensor.empty(32, 64, 56, 56, device="PYTHON").conv2d(Tensor.empty(64, 64, 3, 3, device="PYTHON"), padding=1))
  k = gpu.hand_coded(Kernel(lower_to_sink(si.ast, ren), ren))
  assert [o.amount for o in k.applied if o.op is OptOps.STAGE] == [4], k.applied
  assert any(u.op is Ops.BARRIER and u.arg is NEXT_TRIP for u in k.sink.toposort())

def innermost_loops(ptx: str) -> list[str]:
  """The bodies of the PTX's loops that hold no other loop."""
  bodies = [ptx[ptx.index(f"$loop{n}:"):ptx.index(f"$end{n}:")] for n in re.findall(r"\$loop(\d+):", ptx)]
  return [b for b in bodies if len(re.findall(r"\$loop\d+:", b)) == 1]

def test_a_convs_rows_of_seven_times_a_power_of_two_are_register_tiled_and_copied_masked(monkeypatch):
  """A conv over rows of 28 pixels (4 x 7: what is left after the block's 4 threads has no power of two to upcast):
  each thread takes 7 consecutive pixels of a row (UPCAST 7 before LOCAL 4) beside its filters, so the innermost loop
  does several multiply-adds per shared-memory read (before: one pixel a thread, 16 fma.rn to 18 ld.shared); and the
  input's zero padding is written by the tile's copy, so that loop selects nothing (before: a selp per input value
  read, beside the multiply-adds). The NV emulator's results equal numpy's."""
  from tinycore.codegen.opt import gpu
  monkeypatch.setenv("NV_EMULATE", "1")
  ren = renderer("NV")
  r = np.random.default_rng(3)
  xs, ws, gs = (r.integers(-3, 4, s).astype(np.float32) for s in ((2, 8, 28, 28), (32, 8, 3, 3), (2, 32, 28, 28)))
  x, w = Tensor(xs, device="NV").requires_grad_(), Tensor(ws, device="NV").requires_grad_()
  out = x.conv2d(w, padding=1)
  si = last_kernel(out)
  k = gpu.hand_coded(Kernel(lower_to_sink(si.ast, ren), ren))
  tiles = [(o.op, o.amount) for o in k.applied if o.axis == 3]   # axis 3: the output's pixels along a row
  assert tiles[:2] == [(OptOps.UPCAST, 7), (OptOps.LOCAL, 4)], k.applied
  (body,) = innermost_loops(get_program(si.ast, ren).src)
  fma, lds = body.count("fma.rn.f32"), body.count("ld.shared")
  assert fma >= 3 * lds and "selp" not in body, (fma, lds, body.count("selp"))
  dx, dw = (out * Tensor(gs, device="NV")).sum().gradient(x, w)
  for got, want in zip((out, dx, dw), padded_conv_reference(xs, ws, gs)):
    np.testing.assert_array_equal(got.numpy(), want)   # small integers: exact sums

def test_a_convs_small_maps_are_tiled_as_one_axis_of_pixels(monkeypatch):
  """A conv over 7x7 maps (a deep layer's): no output axis is 16 long, which the matmul tile wants, so before each
  thread computed one output reading both operands from global memory (sm_90: 36 FFMA of 340 instructions in the
  loop, 72 global loads). The map's rows and columns are merged into one axis of 49 pixels (in the input gradient's
  tap products too, whose rows and columns are not adjacent in memory), tiled as 7 threads x 7 pixels, and the weight
  gradient's 98-term sum (2 images x 49 pixels), which no tile of 4, 8 or 16 divides, is staged 14 terms a tile. Every
  kernel of the forward and backward pass uses shared memory; the NV emulator's results equal numpy's."""
  monkeypatch.setenv("NV_EMULATE", "1")
  ren = renderer("NV")
  r = np.random.default_rng(5)
  xs, ws, gs = (r.integers(-3, 4, s).astype(np.float32) for s in ((2, 16, 7, 7), (32, 16, 3, 3), (2, 32, 7, 7)))
  x, w = Tensor(xs, device="NV").requires_grad_(), Tensor(ws, device="NV").requires_grad_()
  out = x.conv2d(w, padding=1)
  dx, dw = (out * Tensor(gs, device="NV")).sum().gradient(x, w)
  items = [si for si in out.schedule(dx, dw) if si.ast.op is Ops.SINK]
  # the forward conv, the input gradient's tap products (b, c, 3, 7, 3, 7), the weight gradient (by their sizes)
  products = [next(si for si in items if si.bufs[0].size == n) for n in (2 * 32 * 49, 2 * 16 * 9 * 49, 32 * 16 * 9)]
  for si in products:
    spec = get_program(si.ast, ren)
    assert ".shared" in spec.src and "bar.sync" in spec.src, spec.name
  from tinycore.codegen.opt import gpu
  fwd = gpu.hand_coded(Kernel(lower_to_sink(products[0].ast, ren), ren)).applied   # rows and columns as one axis: 7 threads x 7
  assert [(o.op, o.amount) for o in fwd[:3]] == [(OptOps.MERGE, 3), (OptOps.UPCAST, 7), (OptOps.LOCAL, 7)], fwd
  wgrad = gpu.hand_coded(Kernel(lower_to_sink(products[2].ast, ren), ren)).applied
  assert [o.amount for o in wgrad if o.op is OptOps.STAGE] == [14], wgrad
  for got, want in zip((out, dx, dw), padded_conv_reference(xs, ws, gs)): np.testing.assert_array_equal(got.numpy(), want)

@pytest.mark.parametrize("work", ["conv of one image", "matmul of few outputs", "matmul of a prime sum"])
def test_a_product_whose_tiles_fill_few_blocks_is_summed_in_partials(work, monkeypatch):
  """One image's 7x7 map of 256 channels convolved into 32: the matmul tile holds its 1568 outputs in one block, whose
  threads would each sum 2304 terms while the rest of a GPU idled (a batch of one through a deep layer: 8 blocks for
  512 channels). On a target with blocks the sum is cut along its outermost axis (the input channels, a matmul's K)
  into partials, a kernel whose grid has them as an axis (16 blocks here, each tiled through shared memory as before),
  then summed (codegen/opt/gpu.py tile_parts, schedule.py split_reduce); on a CPU, whose threads take output rows, it is
  one kernel. A sum of a prime length has no cut: one kernel. The NV emulator's results equal numpy's."""
  monkeypatch.setenv("NV_EMULATE", "1")
  r = np.random.default_rng(11)
  if work == "conv of one image":
    a, b, parts = r.integers(-3, 4, (1, 256, 7, 7)).astype(np.float32), r.integers(-3, 4, (32, 256, 3, 3)).astype(np.float32), 16
    f, want = lambda x, y: x.conv2d(y, padding=1), padded_conv_reference(a, b, np.zeros((1, 32, 7, 7), np.float32))[0]
  else:
    n, parts = (4096, 16) if work == "matmul of few outputs" else (1031, 1)
    a, b = r.integers(-3, 4, (16, n)).astype(np.float32), r.integers(-3, 4, (n, 16)).astype(np.float32)
    f, want = lambda x, y: x @ y, a @ b
  out = f(Tensor(a, device="NV"), Tensor(b, device="NV"))
  items = [si for si in out.schedule() if si.ast.op is Ops.SINK]
  assert len(items) == (2 if parts > 1 else 1), [si.ast.src[0].src[0].arg for si in items]
  assert len([si for si in f(Tensor.empty(*a.shape, device="CPU"), Tensor.empty(*b.shape, device="CPU")).schedule() if si.ast.op is Ops.SINK]) == 1
  spec = get_program(items[0].ast, renderer("NV"))
  assert items[0].bufs[0].size == parts * want.size, spec.name
  if parts > 1: assert all(m in spec.src for m in MARKS["NV"]) and parts in spec.global_size, (spec.name, spec.global_size)
  np.testing.assert_array_equal(out.numpy(), want)   # small integers: every order of summation is exact

def test_beam_is_offered_the_amounts_without_a_power_of_two_the_heuristic_takes():
  """BEAM searches the actions the hand-coded choice makes: beside powers of two, an axis's largest odd divisor within
  an action's range (UPCAST 7 and LOCAL 7 for a conv's row of 28 pixels) and a sum's longest odd tile (STAGE 11 of a
  matmul's 33 terms, once the block has its threads). Each is applied and keeps the result."""
  from tinycore.codegen.opt import candidate_opts, gpu
  ren = Device.renderer("PYTHON")
  conv = last_kernel(Tensor.empty(2, 8, 28, 28, device="PYTHON").conv2d(Tensor.empty(32, 8, 3, 3, device="PYTHON"), padding=1))
  opts = candidate_opts(lower_to_sink(conv.ast, ren), ren)
  assert {Opt(OptOps.UPCAST, 3, 7), Opt(OptOps.LOCAL, 3, 7)} <= set(opts), opts
  a, b = rng.integers(-3, 4, (96, 33)).astype(np.float32), rng.integers(-3, 4, (33, 80)).astype(np.float32)
  si = last_kernel(Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON"))
  chosen = gpu.hand_coded(kernel_of(si)).applied
  threads = tuple(o for o in chosen if o.op is not OptOps.STAGE and o.op is not OptOps.UNROLL)
  stages = [o for o in candidate_opts(lower_to_sink(si.ast, ren), ren, threads) if o.op is OptOps.STAGE]
  assert [o.amount for o in stages] == [11], stages
  np.testing.assert_array_equal(run_with(si, threads + (stages[0],)).reshape(96, 80), a @ b)

def test_a_long_matmul_sum_adds_its_register_tile_into_the_next_level_once_per_256_terms(monkeypatch):
  """K = 4096 in tiles of 16 (2 trips of 8 unrolled products a tile): tree_sums keeps each accumulator to SUM_CHUNK =
  256 terms. The tile loop is split in two, so 16 tiles (2 * 8 * 16 terms) share the register tile's accumulators
  before they join the next level's (was: fresh ones every tile, 64 zeroings and 64 adds a trip, and 249 registers for
  ptxas at 4096^2, now 220). The double-buffered tile's barrier goes with the inner, 16-trip loop, inside one of 16
  trips. The NV emulator's result matches numpy."""
  from tinycore.codegen.reduce import SUM_CHUNK
  pytest.importorskip("tinygrad_nv")
  monkeypatch.setenv("NV_EMULATE", "1")
  a, b = rng.standard_normal((64, 4096)).astype(np.float32), rng.standard_normal((4096, 64)).astype(np.float32)
  ta, tb = Tensor(a, device="NV"), Tensor(b, device="NV")
  uops = get_program(last_kernel(Tensor.empty(4096, 4096, device="NV") @ Tensor.empty(4096, 4096, device="NV")).ast, renderer("NV")).uops
  at = next(i for i, u in enumerate(uops) if u.op is Ops.BARRIER)
  open_loops = []
  for u in uops[:at]:
    if u.op is Ops.RANGE: open_loops.append(u)
    elif u.op is Ops.ENDRANGE: open_loops.remove(u.src[0])
  tile, outer = open_loops[-1], open_loops[-2]
  assert (tile.src[0].arg, outer.src[0].arg) == (16, 16) and 16 * 16 == SUM_CHUNK, [r.src[0] for r in open_loops]
  start, end = uops.index(tile), next(i for i, u in enumerate(uops) if u.op is Ops.ENDRANGE and u.src[0] is tile)
  assert not [u for u in uops[start:end] if u.op is Ops.DEFINE_ACC], "accumulators made anew in every tile"
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("m, k, n", [(96, 72, 80), (64, 36, 68)])
def test_nv_copies_past_a_tiles_end_are_gated_cp_async_and_match_numpy(m, k, n, monkeypatch):
  """Tiles the block's threads do not divide: the copies past the tile's end are predicated off (`@%p cp.async`), and
  the NV emulator's matmul equals numpy's exactly (small integers)."""
  pytest.importorskip("tinygrad_nv")
  monkeypatch.setenv("NV_EMULATE", "1")
  a, b = rng.integers(-3, 4, (m, k)).astype(np.float32), rng.integers(-3, 4, (k, n)).astype(np.float32)
  ta, tb = Tensor(a, device="NV"), Tensor(b, device="NV")
  src = get_program(last_kernel(ta @ tb).ast, renderer("NV")).src
  assert re.search(r"@%p\d+ cp\.async\.c[ag]\.shared\.global", src), src
  np.testing.assert_array_equal((ta @ tb).numpy(), a @ b)

def test_a_matmuls_tiles_are_copied_and_read_as_whole_vectors():
  """The fp32 512x512 matmul on NV: per trip of 16 along the sum, each of the 16x16 threads copies 4 consecutive floats of
  A's 64x16 tile and of B's 16x64 tile (one 16-byte cp.async each, before the loop for the first tile and in the loop
  for the next), and reads its 4x4 register tile's operands from shared memory 4 at a time: A's rows
  along the sum, B's 4 consecutive columns (the thread's outputs are consecutive columns, stored with st.global.v4). No
  access is left element by element."""
  src = get_program(last_kernel(Tensor.empty(512, 512) @ Tensor.empty(512, 512)).ast, renderer("NV")).src
  assert src.count("cp.async.cg.shared.global") == 2 * 2 and "ld.global.v4.f32" not in src and "st.shared" not in src
  # the sum's tile of 16 unrolled 8 at a time: A's 4 rows x 2 vectors and B's 8 rows of one vector a trip of the loop
  assert src.count("ld.shared.v4.f32") == 4 * 2 + 8 and src.count("st.global.v4.f32") == 4
  assert not re.search(r"(ld|st)\.(global|shared)\.f32", src)

def smem_vectors(spec) -> list[tuple[str, int]]:
  return [(u.op.name, n) for u in spec.uops if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].src[0].op is Ops.DEFINE_LOCAL and
          (n := (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count) > 1]

@pytest.mark.parametrize("m, k, n, transposed, staged", [(128, 64, 128, False, True), (128, 64, 128, True, True), (100, 48, 72, False, True),
                                                         (64, 36, 68, True, True), (96, 33, 80, False, True), (96, 37, 80, False, False)])
def test_staged_matmuls_with_wide_accesses_match_numpy(m, k, n, transposed, staged):
  """Staged matmuls on PYTHON, which refuses a vector access at an index that is not a multiple of its length: square,
  read through transposed views (the tiles' shared layout follows the operands' contiguous axes), and sizes that only
  some vectors divide (100 rows, 36 along the sum staged 4 at a time; 33, which no tile of 4, 8 or 16 divides, staged
  11 at a time; 37, a prime, not staged): what is not provably aligned stays element by element. Where the tile is
  whole, its copy stores and register-tile reads in shared memory are vectors."""
  a, b = rng.integers(-3, 4, (m, k)).astype(np.float32), rng.integers(-3, 4, (k, n)).astype(np.float32)
  ta, tb = (Tensor(np.ascontiguousarray(x.T), device="PYTHON").T if transposed else Tensor(x, device="PYTHON") for x in (a, b))
  spec = get_program(last_kernel(ta @ tb).ast, Device.renderer("PYTHON"))
  assert any(u.op is Ops.BARRIER for u in spec.uops) == staged
  if (m, k, n) == (128, 64, 128): assert {("STORE", 4), ("LOAD", 4)} <= set(smem_vectors(spec)), smem_vectors(spec)
  np.testing.assert_array_equal((ta @ tb).numpy(), a @ b)

@pytest.mark.parametrize("dev", ["PYTHON", "NV", "AMD"])
def test_a_grouped_sums_store_keeps_its_padded_outputs_gate(dev, monkeypatch):
  """Found by the conformance fuzzer (vendor profile): 72 sums of 193 terms are spread over groups of 16 threads and
  their outputs padded to 80 for blocks of 16 (PADTO). The group's first thread stores, and only for outputs inside the
  tensor: the group's gate replaced the pad's, and the 8 outputs past the end were stored outside the buffer (the NV
  emulator's error; on a GPU, someone else's memory)."""
  monkeypatch.setenv(f"{dev}_EMULATE", "1")
  x = (np.arange(193 * 8 * 9) % 7).astype(np.float32).reshape(193, 8, 9)
  np.testing.assert_array_equal(Tensor(x, device=dev).sum(0).numpy(), x.sum(0))

@pytest.mark.parametrize("dev", ["PYTHON", "NV", "AMD"])
def test_a_grouped_sum_whose_terms_fold_to_a_constant_still_launches_its_group(dev, monkeypatch):
  """Found by the conformance fuzzer: |0| summed over 385 terms folds to a constant inside the kernel, so no value
  depends on the group's threads any more; the kernel launched 1 thread for its 32 lanes' shuffles. The group's axes are
  taken before the sums are combined and gate the store: the launch keeps its 32 threads, one of them stores."""
  monkeypatch.setenv(f"{dev}_EMULATE", "1")
  assert Tensor.zeros(385, dtype=dtypes.int32, device=dev).abs().sum().item() == 0
  assert Tensor.ones(385, dtype=dtypes.int32, device=dev).abs().sum().item() == 385
