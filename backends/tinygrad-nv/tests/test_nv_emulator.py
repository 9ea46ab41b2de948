"""The PTX emulator against the hardware: hand-written kernels (ptx_kernels.py) bit-exact with an H100's recorded
outputs, the PTX ISA's semantics of each warp and block instruction, the errors for what PTX leaves undefined, and the
per-launch counters."""
from __future__ import annotations
import json, os, pathlib, re
import numpy as np
import pytest

if not os.environ.get("CI"): pytest.importorskip("tinygrad_nv", reason="tinygrad-nv is not installed (pip install -e backends/tinygrad-nv)")
os.environ.setdefault("NV_EMULATE", "1")
import ptx_kernels as K
from tinygrad_nv.emulator import EmulatedKernel, EmulatedMemory, EmulatorError, fragment_index, _unpack, LAUNCHES

HERE = pathlib.Path(__file__).parent
H100 = json.loads((HERE / "h100_ptx.json").read_text())

@pytest.mark.parametrize("key", list(K.CASES))
def test_emulator_matches_the_h100_bit_for_bit(key):
  """Each case's outputs (the first KEPT elements) equal what an H100 computed for the same kernel and inputs."""
  case = K.CASES[key](np.random.default_rng(0))
  for i, (got, (dt, _)) in enumerate(zip(K.run_emulated(case), case.outputs)):
    want = K.decode(H100["cases"][key][i], dt)
    n = len(want)
    diff = np.flatnonzero((got[:n].view(np.uint8).reshape(n, -1) != want.view(np.uint8).reshape(n, -1)).any(axis=1))
    assert diff.size == 0, f"{key} output {i}: {diff.size} of {n} differ from the {H100['gpu']}, first at {diff[0]}: {got[diff[0]]!r} vs {want[diff[0]]!r}"

@pytest.mark.parametrize("key", list(K.CASES))
def test_hand_written_kernels_are_ptx_that_ptxas_accepts(key):
  from tinygrad_nv.assembler import find_ptxas, run_ptxas
  if (ptxas := find_ptxas()) is None:
    if os.environ.get("CI"): pytest.fail("CI must check the hand-written kernels with ptxas: install tinygrad-nv[ptxas]")
    pytest.skip("ptxas not found: pip install 'tinygrad-nv[ptxas]'")
  for arch in ("sm_80", "sm_90"): run_ptxas(K.CASES[key](np.random.default_rng(0)).ptx, arch, ptxas)

# ***** the documented semantics, without a GPU *****

def test_shared_memory_tree_and_shuffles_sum_in_their_order():
  case = K.block_sum(np.random.default_rng(1))
  assert np.array_equal(K.run_emulated(case)[0], K.block_sum_reference(case.inputs[0]))

@pytest.mark.parametrize("mode", ["up", "down", "bfly", "idx"])
def test_shfl_follows_the_ptx_pseudocode(mode):
  vals, preds = K.run_emulated(K.shfl(mode)(None))
  want_vals, want_preds = K.shfl_reference(mode, len(K.SHFL_CASES))
  assert np.array_equal(vals, want_vals) and np.array_equal(preds, want_preds)

def test_exited_threads_release_a_barrier_and_vector_accesses():
  case = K.exit_barrier(np.random.default_rng(1))
  x, out = case.inputs[0], K.run_emulated(case)[0]
  assert np.array_equal(out[:40], x[(np.arange(40) + 1) % 40]) and not out[40:].any()
  case = K.vectors(np.random.default_rng(1))
  assert np.array_equal(K.run_emulated(case)[0], case.inputs[0][np.arange(128) ^ 3])

def test_ldmatrix_gives_each_lane_its_fragment():
  case = K.ldmatrix_case(np.random.default_rng(1))
  assert np.array_equal(K.run_emulated(case)[0], K.ldmatrix_reference(*case.inputs))

def mma_matrices(ty: str, case: K.Case, out: np.ndarray):
  """A, B, C, D of each warp, placed by the PTX ISA's fragment tables."""
  shape = K.MMA_FORMS[ty][0]
  k = 16 if shape == "m16n8k16" else 8
  a, b, c = case.inputs
  W = len(c) // 128
  A, B, C, D = np.zeros((W, 16, k)), np.zeros((W, k, 8)), np.zeros((W, 16, 8)), np.zeros((W, 16, 8))
  w = np.arange(W)[:, None, None]
  (ar, ac), (br, bc), (cr, cc) = fragment_index((shape, "a"), 16 * k // 32), fragment_index((shape, "b"), 8 * k // 32), fragment_index(("c", "c"), 4)
  A[w, ar, ac] = _unpack(list(a.reshape(W, 32, 4).transpose(2, 0, 1)), ty)
  B[w, br, bc] = _unpack(list(b.reshape(W, 32, 2).transpose(2, 0, 1)), ty)
  C[w, cr, cc], D[w, cr, cc] = c.reshape(W, 32, 4), out.reshape(W, 32, 4)
  return A, B, C, D

@pytest.mark.parametrize("ty", list(K.MMA_FORMS))
def test_mma_is_the_matrix_product_of_the_documented_fragments(ty):
  """Independently of the adder's model: D is A B + C to within f32 accumulation error, A and B read from the lanes as
  the fragment tables say (a wrong layout is off by far more)."""
  case = K.mma_case(ty, warps=16)(np.random.default_rng(2))
  A, B, C, D = mma_matrices(ty, case, K.run_emulated(case)[0])
  scale = np.abs(A) @ np.abs(B) + np.abs(C)
  assert (np.abs(D - (A @ B + C)) <= 2.0 ** -22 * scale).all()

def single_mma(a_bits: np.ndarray, b_bits: np.ndarray, c: np.ndarray) -> np.ndarray:
  """One warp's m16n8k16.f16 mma on per-lane registers (a (32, 4), b (32, 2) u32, c (32, 4) f32)."""
  case = K.Case("mma_f16", K.mma_kernel("f16"), (1, 1, 1), (32, 1, 1), [a_bits.reshape(-1), b_bits.reshape(-1), c.reshape(-1)], [(np.float32, 128)])
  return K.run_emulated(case)[0].reshape(32, 4)

def test_mma_adds_as_the_h100_does():
  """The adder measured on the H100: c = 1 plus the product 3*2**-25 (0.75 of 1's last bit, kept whole: 25 bits below
  1) is truncated to 1, where rounding to nearest would give 1 + 2**-23; a NaN comes out as 0x7fffffff."""
  a = np.zeros((32, 4), np.uint32)
  b = np.zeros((32, 2), np.uint32)
  a[0, 0] = np.array([2.0 ** -12, 0], np.float16).view(np.uint32)[0]   # A[0, 0] (lane 0, register 0, low half)
  b[0, 0] = np.array([3 * 2.0 ** -13, 0], np.float16).view(np.uint32)[0]   # B[0, 0] (lane 0 holds column 0, rows 0 and 1)
  c = np.ones((32, 4), np.float32)
  d = single_mma(a, b, c)
  assert d[0, 0] == 1.0 and np.float32(1) + np.float32(3 * 2.0 ** -25) == np.float32(1 + 2.0 ** -23)
  c[0, 1] = np.nan
  assert single_mma(a, b, c).view(np.uint32)[0, 1] == 0x7fffffff

# ***** undefined behaviour is an error naming what went wrong *****

def run(body: str, block=(64, 1, 1), grid=(1, 1, 1), shared=".shared .align 16 .b8 smem[256];\n"):
  mem = EmulatedMemory()
  out = mem.alloc(4096)
  kern = EmulatedKernel(K.kernel("k", 1, shared + "ld.param.u64 %rd0, [data0];\nmov.u32 %r0, %tid.x;\n" + body), "k", mem)
  kern({"data0": out}, grid, block)
  return kern, mem.span(out, 4096).view(np.uint32)

@pytest.mark.parametrize("body,why", [
  ("setp.lt.u32 %p0, %r0, 16;\n@%p0 bra $a;\nbar.sync 0;\nbra $b;\n$a:\nbar.sync 0;\n$b:\nret;", "different barrier instructions"),
  ("and.b32 %r1, %r0, 32;\nshr.u32 %r1, %r1, 5;\nbar.sync %r1;\nret;", "different barrier numbers"),
  ("mov.u32 %r1, smem;\nst.shared.u32 [%r1+256], %r0;\nret;", "outside the block's 256 bytes of shared memory"),
  ("mov.u32 %r1, smem;\nst.shared.u32 [%r1+2], %r0;\nret;", "misaligned shared store"),
  ("ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd0+8];\nret;", "misaligned load of 4xu32"),
  ("mov.u32 %r1, smem;\nst.shared.v4.u32 [%r1+8], {%r0, %r0, %r0, %r0};\nret;", "misaligned shared store of 16 bytes"),
  ("mov.u32 %r1, smem;\nld.shared.v2.u32 {%r2, %r3}, [%r1+4];\nret;", "misaligned shared load of 8 bytes"),
  ("setp.lt.u32 %p0, %r0, 8;\n@%p0 exit;\nshfl.sync.idx.b32 %r1, %r0, 0, 31, -1;\nret;", r"source lane 0\) reads a source lane"),
  ("setp.lt.u32 %p0, %r0, 8;\n@%p0 bra $x;\nshfl.sync.idx.b32 %r1, %r0, 9, 31, -1;\n$x:\nret;", "names in membermask a thread that is not"),
  ("shfl.sync.idx.b32 %r1, %r0, 0, 31, 0xffff;\nret;", "not in membermask"),
  ("setp.lt.u32 %p0, %r0, 8;\n@%p0 exit;\nmov.u32 %r1, smem;\nldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r2}, [%r1];\nret;", "needs all 32 threads"),
  ("mov.u32 %r1, smem;\nadd.u32 %r1, %r1, 8;\nldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r2}, [%r1];\nret;", "not a multiple of 16"),
  ("bar.sync 0, 64;\nret;", "is not implemented"),
  ("ld.global.v4.b64 {%rd1, %rd2, %rd3, %rd4}, [%rd0];\nret;", r"\.v4\.b64 is not a PTX vector"),
  ("ld.global.v8.b32 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd0];\nret;", r"\.v8\.b32 is not a PTX vector"),
  ("st.global.v4.b32 [%rd0+8], {%r0, %r0, %r0, %r0};\nret;", "misaligned store of 4xb32"),
  # cp.async's data lands when its thread waits: a barrier alone does not wait, nor does the block's end
  ("mov.u32 %r1, smem;\nshl.b32 %r2, %r0, 2;\nadd.u32 %r1, %r1, %r2;\ncp.async.ca.shared.global [%r1], [%rd0], 4;\nbar.sync 0;\n"
   "ld.shared.u32 %r3, [%r1];\nret;", "a cp.async is still copying"),
  ("mov.u32 %r1, smem;\nshl.b32 %r2, %r0, 2;\nadd.u32 %r1, %r1, %r2;\ncp.async.ca.shared.global [%r1], [%rd0], 4;\nst.shared.u32 [%r1], %r0;\nret;",
   "a cp.async is still copying"),
  ("mov.u32 %r1, smem;\nshl.b32 %r2, %r0, 2;\nadd.u32 %r1, %r1, %r2;\ncp.async.ca.shared.global [%r1], [%rd0], 4;\nret;", "never waited for"),
  ("mov.u32 %r1, smem;\ncp.async.cg.shared.global [%r1], [%rd0], 8;\ncp.async.wait_all;\nret;", "copies 16 bytes, not 8"),
  ("mov.u32 %r1, smem;\ncp.async.ca.shared.global [%r1], [%rd0+4], 8;\ncp.async.wait_all;\nret;", "misaligned cp.async read"),
  ("mov.u32 %r1, smem;\ncp.async.ca.shared.global [%r1+4], [%rd0], 8;\ncp.async.wait_all;\nret;", "misaligned shared cp.async write"),
  ("mov.u32 %r1, smem;\ncp.async.commit_group;\nret;", "cp.async.commit_group is not implemented"),
  # two warps' accesses to one shared word, one a write, with no barrier between them: a race
  ("mov.u32 %r1, smem;\nst.shared.u32 [%r1], %r0;\nret;", r"shared store .* meets a word another warp"),   # both warps write word 0
  ("mov.u32 %r1, smem;\nshl.b32 %r2, %r0, 2;\nadd.u32 %r3, %r1, %r2;\nst.shared.u32 [%r3], %r0;\nxor.b32 %r4, %r2, 128;\n"
   "add.u32 %r4, %r1, %r4;\nld.shared.u32 %r5, [%r4];\nret;", r"shared load .* reads a word another warp of its block wrote"),
  ("mov.u32 %r1, smem;\nshl.b32 %r2, %r0, 2;\nadd.u32 %r3, %r1, %r2;\nld.shared.u32 %r5, [%r3];\nxor.b32 %r4, %r2, 128;\n"
   "add.u32 %r4, %r1, %r4;\nst.shared.u32 [%r4], %r0;\nret;", r"shared store .* meets a word another warp of its block read"),
  # a copy onto bytes another warp read since the last barrier: nothing orders that read before the copy's write
  ("mov.u32 %r1, smem;\nand.b32 %r2, %r0, 31;\nshl.b32 %r2, %r2, 2;\nadd.u32 %r1, %r1, %r2;\nld.shared.u32 %r3, [%r1];\n"
   "setp.lt.u32 %p0, %r0, 32;\n@%p0 cp.async.ca.shared.global [%r1], [%rd0], 4;\ncp.async.wait_all;\nret;", "a word another warp of its block read or wrote since the last barrier"),
])
def test_undefined_behaviour_is_an_error(body, why):
  with pytest.raises(EmulatorError, match=why): run(body)

def test_warps_exchange_words_through_shared_memory_across_a_barrier():
  """The ordered counterparts of the races above: each of 64 threads writes its word, and after a barrier reads the
  word of its partner in the other warp, then (after a second barrier) overwrites that word; a warp may read and
  write its own words with no barrier (nothing orders a warp against itself but its program order)."""
  body = """mov.u32 %r1, smem;
shl.b32 %r2, %r0, 2;
add.u32 %r3, %r1, %r2;
st.shared.u32 [%r3], %r0;
ld.shared.u32 %r6, [%r3];
bar.sync 0;
xor.b32 %r4, %r2, 128;
add.u32 %r4, %r1, %r4;
ld.shared.u32 %r5, [%r4];
bar.sync 0;
add.u32 %r6, %r6, 1000;
st.shared.u32 [%r4], %r6;
cvt.u64.u32 %rd1, %r2;
add.u64 %rd1, %rd0, %rd1;
st.global.u32 [%rd1], %r5;
ret;"""
  _, out = run(body, block=(64, 1, 1))
  np.testing.assert_array_equal(out[:64], np.arange(64) ^ 32)

def test_cp_async_after_a_barrier_may_overwrite_what_other_warps_read_before_it():
  """The other side of the race above: with a barrier between the two warps' reads and warp 0's copy, the copy is
  ordered after them, and after the wait and a second barrier every thread reads the copied word."""
  body = """mov.u32 %r1, smem;
and.b32 %r2, %r0, 31;
shl.b32 %r2, %r2, 2;
add.u32 %r1, %r1, %r2;
ld.shared.u32 %r3, [%r1];
bar.sync 0;
add.u32 %r4, %r0, 7;
cvt.u64.u32 %rd2, %r2;
add.u64 %rd2, %rd0, %rd2;
setp.lt.u32 %p0, %r0, 32;
@%p0 st.global.u32 [%rd2+2048], %r4;
@%p0 cp.async.ca.shared.global [%r1], [%rd2+2048], 4;
cp.async.wait_all;
bar.sync 0;
ld.shared.u32 %r5, [%r1];
cvt.u64.u32 %rd1, %r0;
shl.b64 %rd1, %rd1, 2;
add.u64 %rd1, %rd0, %rd1;
st.global.u32 [%rd1], %r5;
ret;"""
  _, out = run(body, block=(64, 1, 1))
  np.testing.assert_array_equal(out[:64], 7 + np.arange(64) % 32)

def test_cp_async_lands_at_the_wait_and_zero_fills_past_src_size():
  """cp.async (sm_80+): each of 16 threads copies 16 bytes of global memory into shared memory without a register,
  waits (cp.async.wait_all), meets the others at the barrier and reads its neighbour's; the second half copies only
  4 bytes of its 16 (src-size), the rest zero. The copy moves its bytes once each way and issues one instruction."""
  body = """shl.b32 %r2, %r0, 4;
cvt.u64.u32 %rd1, %r2;
add.u64 %rd2, %rd0, %rd1;
add.u32 %r4, %r0, 100;
st.global.v4.u32 [%rd2+1024], {%r0, %r4, %r0, %r4};
mov.u32 %r1, smem;
add.u32 %r3, %r1, %r2;
setp.lt.u32 %p0, %r0, 8;
selp.u32 %r5, 16, 4, %p0;
cp.async.cg.shared.global [%r3], [%rd2+1024], 16, %r5;
cp.async.wait_all;
bar.sync 0;
add.u32 %r6, %r0, 1;
and.b32 %r6, %r6, 15;
shl.b32 %r6, %r6, 4;
add.u32 %r6, %r1, %r6;
ld.shared.v4.u32 {%r7, %r8, %r9, %r10}, [%r6];
st.global.v4.u32 [%rd2], {%r7, %r8, %r9, %r10};
ret;"""
  kern, out = run(body, block=(16, 1, 1))
  nxt = (np.arange(16) + 1) % 16
  full = nxt < 8
  want = np.stack([nxt, np.where(full, nxt + 100, 0), np.where(full, nxt, 0), np.where(full, nxt + 100, 0)], 1)
  np.testing.assert_array_equal(out[:64].reshape(16, 4), want)
  c = kern.counters
  assert (c.global_read, c.shared_written, c.shared_read, c.barriers) == (16 * 16, 16 * 16, 16 * 16, 1)

def test_bfi_inserts_the_field_the_isa_defines():
  """bfi.b32 d, a, b, pos, len (pos and len taken & 0xff): b with its bits pos .. pos+len-1 below 32 replaced by a's low
  bits, for fields inside the word, reaching past its top, empty, and at positions past 255."""
  body = """mul.lo.u32 %r1, %r0, -1640531535;
xor.b32 %r2, %r1, 1540483477;
and.b32 %r3, %r0, 7;
mul.lo.u32 %r3, %r3, 5;
shr.u32 %r4, %r0, 5;
shl.b32 %r4, %r4, 8;
add.u32 %r3, %r3, %r4;
shr.u32 %r5, %r0, 3;
and.b32 %r5, %r5, 3;
mul.lo.u32 %r5, %r5, 11;
bfi.b32 %r6, %r1, %r2, %r3, %r5;
mul.wide.u32 %rd1, %r0, 4;
add.s64 %rd1, %rd0, %rd1;
st.global.u32 [%rd1], %r6;
ret;"""
  _, out = run(body)
  want = []
  for t in range(64):
    a = t * 2654435761 % 2**32
    b, pos, n = a ^ 1540483477, t % 8 * 5, t // 8 % 4 * 11   # pos & 0xff: the 256 added past thread 31 is dropped
    want.append(sum(((a >> (i - pos) if pos <= i < pos + n else b >> i) & 1) << i for i in range(32)))
  assert out[:64].tolist() == want

def test_launch_and_declaration_limits_are_errors():
  with pytest.raises(EmulatorError, match="more than 1024"): run("ret;", block=(1025, 1, 1))
  with pytest.raises(EmulatorError, match="static shared memory"): run("ret;", shared=".shared .align 4 .b8 big[49153];\n")

def test_a_non_aligned_barrier_may_be_reached_at_two_places():
  """barrier.sync (without .aligned) at two instructions, by the two halves of each warp: both halves wait for each
  other, then each thread reads the value its neighbour in the other half stored before the barrier."""
  body = """mov.u32 %r1, smem;
shl.b32 %r2, %r0, 2;
add.u32 %r3, %r1, %r2;
st.shared.u32 [%r3], %r0;
and.b32 %r4, %r0, 16;
setp.ne.u32 %p0, %r4, 0;
@%p0 bra $hi;
barrier.sync 0;
bra $join;
$hi:
barrier.sync 0;
$join:
xor.b32 %r5, %r2, 64;
add.u32 %r6, %r1, %r5;
ld.shared.u32 %r7, [%r6];
mul.wide.u32 %rd1, %r0, 4;
add.s64 %rd1, %rd1, %rd0;
st.global.u32 [%rd1], %r7;
ret;"""
  _, out = run(body)
  assert np.array_equal(out[:64], np.arange(64) ^ 16)

def test_module_scope_and_dynamic_shared_memory():
  """A .shared variable declared outside the kernel, and .extern dynamic shared memory sized at launch (after the
  static variables): each thread stores to both and reads its neighbour's; past the launch's size is an error."""
  ptx = K.kernel("k", 1, """ld.param.u64 %rd0, [data0];
mov.u32 %r0, %tid.x;
shl.b32 %r1, %r0, 2;
mov.u32 %r2, dyn;
add.u32 %r3, %r2, %r1;
st.shared.u32 [%r3], %r0;
mov.u32 %r4, stat;
add.u32 %r5, %r4, %r1;
st.shared.u32 [%r5], %r0;
bar.sync 0;
xor.b32 %r6, %r1, 4;
add.u32 %r7, %r2, %r6;
ld.shared.u32 %r8, [%r7];
add.u32 %r9, %r4, %r6;
ld.shared.u32 %r10, [%r9];
add.u32 %r8, %r8, %r10;
mul.wide.u32 %rd1, %r0, 4;
add.s64 %rd1, %rd1, %rd0;
st.global.u32 [%rd1], %r8;
ret;""").replace(".visible .entry", ".shared .align 4 .u32 stat[64];\n.extern .shared .align 16 .b8 dyn[];\n.visible .entry")
  mem = EmulatedMemory()
  out = mem.alloc(256)
  kern = EmulatedKernel(ptx, "k", mem)
  assert kern.static_shared == 256
  kern({"data0": out}, (1, 1, 1), (64, 1, 1), shared_bytes=256)
  assert np.array_equal(mem.span(out, 256).view(np.uint32), 2 * (np.arange(64) ^ 1))
  with pytest.raises(EmulatorError, match="outside the block's 384 bytes"): kern({"data0": out}, (1, 1, 1), (64, 1, 1), shared_bytes=128)

# ***** counters *****

def test_counters_of_a_kernel_with_known_traffic():
  """block_sum over 6 blocks of 256: each thread reads 4 bytes, block 0's thread 0 writes one float per block; shared
  memory: 256 stores, then 128 + 64 + 32 tree steps of two loads and a store, then 32 loads; four barriers per block."""
  case = K.block_sum(np.random.default_rng(0))
  kern = EmulatedKernel(case.ptx, case.name, mem := EmulatedMemory())
  addrs = [mem.alloc(4 * 6), mem.alloc(case.inputs[0].nbytes)]
  c = kern({"data0": addrs[0], "data1": addrs[1]}, case.grid, case.block)
  assert c is kern.counters
  assert (c.threads, c.blocks, c.barriers) == (6 * 256, 6, 6 * 4)
  assert (c.global_read, c.global_written) == (6 * 256 * 4, 6 * 4)
  assert c.global_sectors == 6 * 256 * 4 // 32 + 6   # coalesced reads, whole sectors; one sector per block's lone store
  assert (c.shared_written, c.shared_read) == (6 * 4 * (256 + 224), 6 * 4 * (2 * 224 + 32))
  assert c.instructions < c.thread_instructions <= 32 * c.instructions   # a warp instruction runs 1..32 threads

@pytest.mark.parametrize("index, sectors", [
  ("mov.u32 %r1, %r0;", 64 * 4 // 32),                    # lane i reads float i: each warp's 128 bytes, 4 sectors
  ("xor.b32 %r1, %r0, 31;", 64 * 4 // 32),                # the lanes of a warp in reverse order: the same 4 sectors
  ("shl.b32 %r1, %r0, 3;", 64),                           # 32 bytes apart: a sector per lane
  ("shl.b32 %r1, %r0, 1;", 64 * 8 // 32),                 # 8 bytes apart: half of each sector's bytes unused
  ("and.b32 %r1, %r0, 7;", 2 * 1),                        # a warp's lanes share 8 floats: one sector a warp
])
def test_global_sectors_count_what_the_warps_touch(index, sectors):
  """Each of 64 threads (two warps) reads float `index` of data1 and writes its own float of data0 (coalesced: 8
  sectors): global_sectors counts, per warp instruction, the distinct 32-byte sectors its lanes' bytes lie in."""
  ptx = K.kernel("k", 2, f"""ld.param.u64 %rd0, [data0];
ld.param.u64 %rd1, [data1];
mov.u32 %r0, %tid.x;
{index}
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd2, %rd2, %rd1;
ld.global.f32 %f0, [%rd2];
mul.wide.u32 %rd3, %r0, 4;
add.s64 %rd3, %rd3, %rd0;
st.global.f32 [%rd3], %f0;
ret;""")
  mem = EmulatedMemory()
  out, src = mem.alloc(64 * 4), mem.alloc(64 * 8 * 4)
  c = EmulatedKernel(ptx, "k", mem)({"data0": out, "data1": src}, (1, 1, 1), (64, 1, 1))
  assert (c.global_read, c.global_written) == (64 * 4, 64 * 4)
  assert c.global_sectors == sectors + 64 * 4 // 32

def test_vector_shared_accesses_move_and_count_whole_vectors():
  """st.shared.v4 / ld.shared.v4 (a staged tile's copy and its register tile's reads): each of 16 threads stores 4 words
  at its own 16 bytes, and after the barrier reads its neighbour's; every lane moves 16 bytes each way."""
  body = """mov.u32 %r1, smem;
shl.b32 %r2, %r0, 4;
add.u32 %r3, %r1, %r2;
add.u32 %r4, %r0, 100;
st.shared.v4.u32 [%r3], {%r0, %r4, %r0, %r4};
bar.sync 0;
add.u32 %r5, %r0, 1;
and.b32 %r5, %r5, 15;
shl.b32 %r5, %r5, 4;
add.u32 %r5, %r1, %r5;
ld.shared.v4.u32 {%r6, %r7, %r8, %r9}, [%r5];
cvt.u64.u32 %rd1, %r2;
add.u64 %rd1, %rd0, %rd1;
st.global.v4.u32 [%rd1], {%r6, %r7, %r8, %r9};
ret;"""
  kern, out = run(body, block=(16, 1, 1))
  nxt = (np.arange(16) + 1) % 16
  np.testing.assert_array_equal(out[:64].reshape(16, 4), np.stack([nxt, nxt + 100, nxt, nxt + 100], 1))
  c = kern.counters
  assert (c.shared_written, c.shared_read, c.global_written, c.barriers) == (16 * 16, 16 * 16, 16 * 16, 1)

def test_counters_of_launches_through_tinycore():
  """An elementwise add of 1000 floats reads 8000 bytes and writes 4000, each thread 4 consecutive floats (one ld.v4 per
  input, one st.v4); the program keeps its last launch's counters and the module's log has them."""
  from tinycore import Tensor
  a, b = Tensor.arange(1000, device="NV").float().realize(), Tensor.ones(1000, device="NV").contiguous().realize()
  LAUNCHES.clear()
  (a + b).realize()
  assert len(LAUNCHES) == 1
  name, c = LAUNCHES[0]
  assert (c.global_read, c.global_written, c.shared_read, c.barriers) == (8000, 4000, 0, 0) and c.threads == 250

def test_a_row_kernel_reads_its_input_once_and_writes_its_output_once():
  """softmax and layernorm of 8 rows of 1024 floats: one launch each, a block of 256 threads per row, each thread 4
  consecutive floats (one ld.v4 and one st.v4), and global memory sees the input read once and the output written once.
  Each of the row's two statistics is combined by 5 warp shuffles (shfl.sync.bfly), then one barrier: each warp's first
  lane writes its total (8 per block), and every thread reads the 8 (before, every thread wrote its partial and read 32
  after two barriers: 16x the shared reads, 2.6x the instructions)."""
  from tinycore import Tensor, Device
  from tinycore.uop import Ops
  from tinycore.codegen import get_program
  x = np.random.default_rng(3).standard_normal((8, 1024)).astype(np.float32)
  X = Tensor(x, device="NV").realize()
  mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
  e = np.exp(x - x.max(1, keepdims=True))
  for t, want in ((X.softmax(-1), e / e.sum(1, keepdims=True)), (X.layernorm(), (x - mean) / np.sqrt(var + 1e-5))):
    LAUNCHES.clear()
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)
    assert len(LAUNCHES) == 1, LAUNCHES
    c = LAUNCHES[0][1]
    assert (c.global_read, c.global_written, c.blocks, c.threads) == (x.nbytes, x.nbytes, 8, 8 * 256), c
    assert (c.barriers, c.shared_written, c.shared_read) == (8 * 2, 8 * 2 * 8 * 4, 8 * 256 * 2 * 8 * 4), c
    (si,) = [si for si in t.schedule() if si.ast.op is Ops.SINK]
    assert get_program(si.ast, Device["NV"].renderer).src.count("shfl.sync.bfly.b32") == 2 * 5
    assert c.global_sectors * 32 == 2 * x.nbytes   # every warp's accesses coalesced: whole sectors, each once

def test_rows_of_a_prime_length_are_read_across_a_blocks_threads():
  """softmax and layernorm over rows of 4099 floats (a prime, longer than a block holds: GPT-2's 50257-long rows at a
  size the emulator runs quickly): each launch's 256-thread blocks run along the row, padded past its end (PADTO), so
  no thread walks a row alone and a warp reads consecutive floats: the memory system moves no more than 1.25x the
  bytes asked for (each row's start is 4 bytes further into a sector), against about 5x when each thread took a row."""
  from tinycore import Tensor
  x = np.random.default_rng(4).standard_normal((6, 4099)).astype(np.float32)
  X = Tensor(x, device="NV").realize()
  e = np.exp(x - x.max(1, keepdims=True))
  for t, want in ((X.softmax(-1), e / e.sum(1, keepdims=True)), (X.layernorm(), (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5))):
    LAUNCHES.clear()
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-5)
    for name, c in LAUNCHES:
      # (a last sum of a split reduction's few partials may run on fewer threads: it reads no row)
      if c.global_read >= x.nbytes: assert c.threads // c.blocks == 256 and c.global_sectors * 32 <= 1.25 * (c.global_read + c.global_written), (name, c)

def test_a_grouped_reduction_in_a_loop_waits_before_rewriting_shared_memory():
  """softmax over GPT-2's vocabulary (50257, a prime): the row's max is spread over a block in each of 2 trips of a
  loop, each trip's warps write their totals to shared memory and read them after a barrier. Each trip first waits at
  a barrier of its own, so no warp overwrites the totals before every warp read the trip before's: without it the
  emulator stops at the race (one warp's store meeting another's read with no barrier between)."""
  from tinycore import Tensor
  x = np.random.default_rng(8).standard_normal((2, 50257)).astype(np.float32)
  e = np.exp(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(Tensor(x, device="NV").softmax(-1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-9)

def test_a_per_channel_sum_reading_a_pooled_gradient_runs_along_the_rows():
  """Batch-norm's backward in the digits model: per-channel sums over (64, 26, 26) of x times a max-pool's gradient
  read at (h // 2, w // 2). That read is no plain term of w, and it made the heuristic think no load ran along w: the
  block's threads split the batch instead, each lane a sector of its own (7.99x the bytes asked, the whole training
  step's largest traffic). Now the sum's axes are merged and spread along the rows: whole sectors."""
  from tinycore import Tensor
  rng = np.random.default_rng(6)
  xs, gs = rng.standard_normal((64, 16, 26, 26)).astype(np.float32), rng.standard_normal((64, 16, 13, 13)).astype(np.float32)
  x, g = Tensor(xs, device="NV").realize(), Tensor(gs, device="NV").realize()
  up = g.reshape(64, 16, 13, 1, 13, 1).expand(64, 16, 13, 2, 13, 2).reshape(64, 16, 26, 26)
  LAUNCHES.clear()
  got = (x * up).sum(axis=(0, 2, 3)).numpy()
  np.testing.assert_allclose(got, (xs * np.repeat(np.repeat(gs, 2, 2), 2, 3)).sum((0, 2, 3)), rtol=1e-4, atol=1e-3)
  name, c = max(LAUNCHES, key=lambda nc: nc[1].global_read)
  assert c.global_sectors * 32 <= 1.25 * (c.global_read + c.global_written), (name, c)

def test_a_26x26_map_is_written_along_its_rows():
  """The digits model's conv (one input channel, 3x3 taps, 16 filters, 26x26 outputs) and its max-pool's 13x13 rows: no
  power of two of 16 or more divides 26 or 13, so the blocks' threads ran across filters and images (32-thread blocks
  for the conv, 2.2x the bytes asked; the pool 5.5x). The map's rows are merged (and padded) so 256-thread blocks run
  along them, and the conv's 9-term sum is not tiled. Both equal numpy's."""
  from tinycore import Tensor
  rng = np.random.default_rng(8)
  xs, ws = rng.standard_normal((16, 1, 28, 28)).astype(np.float32), rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
  conv = np.einsum("bhwij,oij->bohw", np.lib.stride_tricks.sliding_window_view(xs[:, 0], (3, 3), axis=(1, 2)), ws[:, 0])
  # (the pool's lanes read every other element of a row per tap, half of each sector, the other half on the next tap)
  for t, want, most in ((lambda x, w: x.conv2d(w), conv, 1.1), (lambda x, w: x.conv2d(w).max_pool2d(), conv.reshape(16, 16, 13, 2, 13, 2).max((3, 5)), 2.5)):
    LAUNCHES.clear()
    np.testing.assert_allclose(t(Tensor(xs, device="NV"), Tensor(ws, device="NV")).numpy(), want, rtol=1e-4, atol=1e-4)
    for name, c in LAUNCHES:
      assert c.threads // c.blocks == 256 and c.global_sectors * 32 <= most * (c.global_read + c.global_written), (name, c)

# (dtype, its bits from float32 small integers, each thread's vector access, its elements): 16 bytes of floats and of 16-bit
# elements (packed two to a .b32 word: PTX vectors have at most 4 elements), 8 bytes of bytes (upcast_max: 8 copies)
WIDE = {"float32": (lambda x: x, "v4.f32", 4), "float16": (lambda x: x.astype(np.float16), "v4.b32", 8),
        "bfloat16": (lambda x: (x.view(np.uint32) >> 16).astype(np.uint16), "v4.b32", 8), "int8": (lambda x: x.astype(np.int8), "v2.b32", 8)}

@pytest.mark.parametrize("dt", list(WIDE))
def test_wide_accesses_take_fewer_instructions_for_the_same_bytes(dt):
  """a + b over 2^16 elements rendered with vector accesses (codegen/widen.py) and element by element: the same bits and
  global bytes, one ld.global per input and one st.global per thread's elements instead of one per element, and fewer
  instructions in all (though each thread also does several adds, and 8/16-bit elements are unpacked from and packed
  into their words: mov.b32 {%h, %h} for halves, bfe/bfi for a bfloat16's bits and bytes)."""
  from tinycore import Tensor, dtypes
  from tinycore.codegen import get_program
  from tinygrad_nv.renderer import PTXRenderer
  class Narrow(PTXRenderer): memory_vector = 0
  bits, vec, lanes = WIDE[dt]
  n, rng = 1 << 16, np.random.default_rng(3)
  a, b = (rng.integers(-60, 60, n).astype(np.float32) for _ in range(2))
  ins, want = [bits(a), bits(b)], bits(a + b)
  si = [si for si in (Tensor.empty(n, dtype=dt) + Tensor.empty(n, dtype=dt)).schedule() if si.ast.op.name == "SINK"][-1]
  results, counts = [], []
  for ren in (PTXRenderer("sm_90"), Narrow("sm_90")):
    spec = get_program(si.ast, ren)
    mem = EmulatedMemory()
    addrs = [mem.alloc(want.nbytes) for _ in range(3)]
    for addr, x in zip(addrs[1:], ins): mem.span(addr, x.nbytes)[:] = x.view(np.uint8)
    c = EmulatedKernel(spec.src, spec.name, mem)({f"data{i}": x for i, x in enumerate(addrs)} | {"block_y0": 0, "block_z0": 0},
                                                spec.global_size, spec.local_size or (1, 1, 1))
    results.append(mem.span(addrs[0], want.nbytes).view(want.dtype).copy())
    counts.append((c.global_read, c.global_written, c.thread_instructions, spec.src.count(f"ld.global.{vec} "), spec.src.count(f"st.global.{vec} "),
                   len(re.findall(r"(ld|st)\.global\.[^p]", spec.src))))
  assert np.array_equal(results[0], want) and np.array_equal(results[1], want)
  (wr, ww, wi, wl, ws, wn), (nr, nw, ni, nl, ns, nn) = counts
  assert (wr, ww) == (nr, nw) == (2 * want.nbytes, want.nbytes) and (wl, ws, wn, nl, ns, nn) == (2, 1, 3, 0, 0, 3), counts
  assert wi < ni and getattr(dtypes, dt).itemsize * lanes == {"v4": 16, "v2": 8}[vec[:2]], counts

def test_wide_bfloat16_accesses_keep_every_bit():
  """bfloat16 (held as its uint16 bits) selected elementwise through 16-byte loads and stores, unpacked and packed with
  bfe/bfi: NaN payloads (quiet and signalling, either sign), -0.0, a subnormal come back bit for bit."""
  from tinycore import Tensor, dtypes
  from tinycore.codegen import get_program
  from tinygrad_nv.renderer import PTXRenderer
  bits = np.array([0x7fc1, 0xffa3, 0x8000, 0x0000, 0x7f81, 0xff80, 0x0001, 0x3f80] * 64, np.uint16)
  a, keep = Tensor(bits, device="NV").bitcast(dtypes.bfloat16).realize(), Tensor(np.arange(512) % 3 == 0, device="NV")
  out = keep.where(a, a.flip(0))
  si = [si for si in out.schedule() if si.ast.op.name == "SINK"][-1]
  src = get_program(si.ast, PTXRenderer("sm_90")).src
  assert src.count("ld.global.v4.b32") == 2 and src.count("st.global.v4.b32") == 1 and "bfi.b32" in src, src
  assert np.array_equal(out.bitcast(dtypes.uint16).numpy(), np.where(np.arange(512) % 3 == 0, bits, bits[::-1]))

@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_ldmatrix_fragments_equal_fragments_loaded_element_by_element(dt):
  """64x64 matmuls whose operands' shared tiles hold rows of A (ldmatrix.x4) or of its transpose (.x4.trans), of B's
  transpose (.x2) or of B (.x2.trans): the products are numpy's exactly (small integers), the same as the kernel reading
  each fragment element alone, from the same shared bytes, in fewer instructions."""
  from tinycore import Tensor, dtypes
  from tinycore.codegen import get_program
  from tinycore.codegen.transcendental import sin_rules, fmod_rules, exp2_log2_f64_rules
  from tinygrad_nv.renderer import PTXRenderer
  class ElementByElement(PTXRenderer): extra_matcher = sin_rules + fmod_rules + exp2_log2_f64_rules
  rng, t = np.random.default_rng(4), getattr(dtypes, dt)
  bits = (lambda x: x.astype(np.float16).view(np.uint16)) if dt == "float16" else (lambda x: (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
  value = (lambda b: b.view(np.float16).astype(np.float32)) if dt == "float16" else (lambda b: (b.astype(np.uint32) << 16).view(np.float32))
  forms = set()
  for ta, tb in ((False, False), (True, False), (False, True)):
    a, b = rng.integers(-2, 3, (64, 64)).astype(np.float32), rng.integers(-2, 3, (64, 64)).astype(np.float32)
    A, B = Tensor.empty(64, 64, dtype=t), Tensor.empty(64, 64, dtype=t)
    si = [si for si in ((A.T if ta else A) @ (B.T if tb else B)).schedule() if si.ast.op.name == "SINK"][-1]
    results, counts = [], []
    for ren in (PTXRenderer("sm_90"), ElementByElement("sm_90")):
      spec = get_program(si.ast, ren)
      mem = EmulatedMemory()
      addrs = [mem.alloc(2 * 64 * 64) for _ in range(3)]
      mem.span(addrs[1], 2 * 64 * 64)[:] = bits(a).view(np.uint8).reshape(-1)
      mem.span(addrs[2], 2 * 64 * 64)[:] = bits(b).view(np.uint8).reshape(-1)
      c = EmulatedKernel(spec.src, spec.name, mem)({f"data{i}": x for i, x in enumerate(addrs)} | {"block_y0": 0, "block_z0": 0},
                                                  spec.global_size, spec.local_size or (1, 1, 1))
      results.append(value(mem.span(addrs[0], 2 * 64 * 64).view(np.uint16).copy()).reshape(64, 64))
      counts.append((c.shared_read, c.instructions, spec.src.count("ldmatrix"), spec.src.count("ld.shared")))
      forms |= set(re.findall(r"ldmatrix\S*", spec.src))
    ref = (a.T if ta else a) @ (b.T if tb else b)
    assert np.array_equal(results[0], ref) and np.array_equal(results[1], ref)
    (ms, mi, ml, md), (es, ei, el, ed) = counts
    assert ms == es and ml == 3 and md == el == 0 and ed > 0 and mi < ei, counts
  assert forms == {f"ldmatrix.sync.aligned.m8n8.{x}.shared.b16" for x in ("x4", "x4.trans", "x2", "x2.trans")}, forms

# ***** shared-memory banks *****

def bank_passes(instr: str, stride: int) -> tuple[int, int]:
  """(wavefronts, conflicts) of one warp's `instr` with lane l's address smem + l * stride."""
  kern, _ = run(f"mov.u32 %r1, smem;\nmul.lo.u32 %r2, %r0, {stride};\nadd.u32 %r3, %r1, %r2;\n{instr}\nret;", block=(32, 1, 1),
                shared=".reg .b16 %h<8>;\n.shared .align 16 .b8 smem[8192];\n")
  return kern.counters.shared_wavefronts, kern.counters.shared_conflicts

@pytest.mark.parametrize("instr,stride,passes", [
  ("ld.shared.u32 %r4, [%r3];", 4, (1, 0)),               # 32 consecutive words: 32 banks
  ("ld.shared.u32 %r4, [%r3];", 8, (2, 1)),               # every other word: 16 banks, two words each
  ("ld.shared.u32 %r4, [%r3];", 128, (32, 31)),           # one bank, 32 words
  ("ld.shared.u32 %r4, [%r3];", 0, (1, 0)),               # one word for all: a broadcast
  ("st.shared.u32 [%r3], %r0;", 128, (32, 31)),           # stores the same
  ("ld.shared.b16 %h4, [%r3];", 2, (1, 0)),              # two lanes a word
  ("ld.shared.b16 %h4, [%r3];", 64, (16, 15)),
  ("ld.shared.v2.u32 {%r4, %r5}, [%r3];", 8, (2, 0)),     # 8 bytes a lane: a half-warp (128 bytes) a pass
  ("ld.shared.v2.u32 {%r4, %r5}, [%r3];", 16, (4, 2)),
  ("ld.shared.v4.u32 {%r4, %r5, %r6, %r7}, [%r3];", 16, (4, 0)),    # 16 bytes a lane: a quarter-warp a pass
  ("ld.shared.v4.u32 {%r4, %r5, %r6, %r7}, [%r3];", 32, (8, 4)),    # a quarter-warp's 8 lanes in 4 groups of banks
  ("ld.shared.v4.u32 {%r4, %r5, %r6, %r7}, [%r3];", 0, (4, 0)),     # a broadcast still takes a pass per quarter
  ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r4, %r5, %r6, %r7}, [%r3];", 16, (4, 0)),   # a matrix's 8 rows of 16 bytes a pass
  ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r4, %r5, %r6, %r7}, [%r3];", 64, (16, 12)),  # rows 64 bytes apart: 4 to a group of banks
  ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r4, %r5, %r6, %r7}, [%r3];", 80, (4, 0)),    # 80: 8 rows, 8 groups
  ("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r4, %r5}, [%r3];", 256, (16, 14)),     # 256: every row in the same banks
])
def test_shared_accesses_take_a_pass_per_word_a_bank_must_give(instr, stride, passes):
  """The emulator's bank model (32 banks of 4 bytes; 8- and 16-byte accesses and ldmatrix's matrices served in phases of
  128 bytes): a pass for the most distinct words any bank holds in a phase; conflicts are the passes beyond one a phase."""
  assert bank_passes(instr, stride) == passes

def test_shared_banks_are_counted_per_warp_and_phase():
  """Inactive lanes take no part: 16 lanes (half a warp) reading one bank take 16 passes; two warps each 32."""
  kern, _ = run("setp.lt.u32 %p0, %r0, 16;\n@%p0 bra $x;\nmov.u32 %r1, smem;\nshl.b32 %r2, %r0, 7;\nand.b32 %r2, %r2, 4095;\nadd.u32 %r3, %r1, %r2;\n"
                "ld.shared.u32 %r4, [%r3];\n$x:\nret;", block=(32, 1, 1), shared=".shared .align 16 .b8 smem[4096];\n")
  assert (kern.counters.shared_wavefronts, kern.counters.shared_conflicts) == (16, 15)
  kern, _ = run("mov.u32 %r1, smem;\nshl.b32 %r2, %r0, 7;\nand.b32 %r2, %r2, 4095;\nadd.u32 %r3, %r1, %r2;\nld.shared.u32 %r4, [%r3];\nret;",
                block=(64, 1, 1), shared=".shared .align 16 .b8 smem[4096];\n")
  assert (kern.counters.shared_wavefronts, kern.counters.shared_conflicts) == (64, 62)

def one_block(a, b):
  """The counters of one block of the NV kernel computing a @ b (every block reads its tiles alike)."""
  from tinycore.codegen import get_program
  from tinygrad_nv.renderer import PTXRenderer
  si = [si for si in (a @ b).schedule() if si.ast.op.name == "SINK"][-1]
  spec = get_program(si.ast, PTXRenderer("sm_90"))
  mem = EmulatedMemory()
  addrs = [mem.alloc(b.nbytes()) for b in (a @ b, a, b)]
  return EmulatedKernel(spec.src, spec.name, mem)({f"data{i}": x for i, x in enumerate(addrs)} | {"block_y0": 0, "block_z0": 0},
                                                 (1, 1, 1), spec.local_size)

def test_fp32_matmul_tiles_are_read_and_written_without_bank_conflicts():
  """A block of the 512x512 fp32 matmul, 32 trips of 16 along the sum: per trip each of its 8 warps stores one v4 of A's
  and one of B's tile (4 passes each, a quarter-warp a pass) and reads 32 v4 (its register tile's operands): 1088
  passes a trip, none of them a conflict (B's reads are consecutive vectors, A's a broadcast per quarter-warp). The
  tiles are double-buffered: one copy more than trips (the first before the loop; the last trip's copies its own tile
  again, into the buffer no trip reads), 64 passes."""
  from tinycore import Tensor
  c = one_block(Tensor.empty(512, 512), Tensor.empty(512, 512))
  assert (c.shared_wavefronts, c.shared_conflicts) == (32 * 1088 + 64, 0)

def test_fp16_matmul_tiles_are_read_and_written_without_bank_conflicts():
  """A block of the 512x512 fp16 tensor-core matmul, 16 trips of 32 along the sum: per trip its 4 warps read 2 steps of
  4 ldmatrix.x4 of A and 8 .x2.trans of B (32 matrices a warp a step: 256 passes), each matrix's 8 rows in 8 groups of
  banks: the tiles' rows are padded to 80 bytes (A) and 272 (B). Their copies take 4 cp.async of 16 bytes a thread for
  each operand (64 passes a trip each, a quarter-warp a pass), none a conflict: a quarter-warp copies 128 bytes of one
  row of B, and one 16-byte chunk of 8 consecutive rows of A (in row order it would copy two of A's 64-byte rows, 80
  bytes apart, whose words share 4 banks: 64 conflicts a trip). Unpadded (64- and 256-byte rows) the reads took 4 and 8
  times as many. Double-buffered, the tiles are copied once more than there are trips (the first before the loop)."""
  from tinycore import Tensor, dtypes
  c = one_block(Tensor.empty(512, 512, dtype=dtypes.float16), Tensor.empty(512, 512, dtype=dtypes.float16))
  assert (c.shared_wavefronts, c.shared_conflicts) == (16 * (256 + 64 + 64) + 64 + 64, 0)

def test_launch_bounds_directives_are_enforced_as_the_gpu_does():
  """.maxntid and .reqntid (between the parameters and the body) bound the blocks a kernel may be launched with: a launch
  outside them fails on the GPU, so here too, naming the directive; within them it runs. .maxnreg and .minnctapersm
  steer ptxas only and are accepted; a directive the emulator does not know is an error, never ignored. ptxas accepts
  each form."""
  from tinygrad_nv.assembler import find_ptxas, run_ptxas
  body = "ld.param.u64 %rd0, [data0];\nmov.u32 %r0, %tid.x;\nmul.wide.u32 %rd1, %r0, 4;\nadd.s64 %rd1, %rd0, %rd1;\nst.global.u32 [%rd1], %r0;\nret;"
  def with_directives(d: str) -> str: return K.kernel("k", 1, body).replace(")\n{", f")\n{d}\n{{", 1)
  def launch(ptx: str, block: tuple[int, int, int]) -> np.ndarray:
    mem = EmulatedMemory()
    out = mem.alloc(4 * 64)
    EmulatedKernel(ptx, "k", mem)({"data0": out}, (1, 1, 1), block)
    return mem.span(out, 4 * 64).view(np.uint32)
  assert np.array_equal(launch(with_directives(".maxntid 64, 1, 1\n.maxnreg 32\n.minnctapersm 4"), (64, 1, 1)), np.arange(64))
  assert np.array_equal(launch(with_directives(".maxntid 64"), (32, 1, 1))[:32], np.arange(32))
  with pytest.raises(EmulatorError, match=r"larger than its \.maxntid \(64, 1, 1\)"): launch(with_directives(".maxntid 64"), (32, 4, 1))
  with pytest.raises(EmulatorError, match=r"larger than its \.maxntid \(16, 2, 1\)"): launch(with_directives(".maxntid 16, 2"), (32, 1, 1))
  with pytest.raises(EmulatorError, match=r"not its \.reqntid \(64, 1, 1\)"): launch(with_directives(".reqntid 64"), (32, 1, 1))
  assert np.array_equal(launch(with_directives(".reqntid 64"), (64, 1, 1)), np.arange(64))
  with pytest.raises(EmulatorError, match=r"unknown or malformed directive \.maxclusterrank"): launch(with_directives(".maxclusterrank 2"), (64, 1, 1))
  with pytest.raises(EmulatorError, match=r"malformed directive \.maxntid"): launch(with_directives(".maxntid 0"), (64, 1, 1))
  if (ptxas := find_ptxas()) is not None:
    for d in (".maxntid 64, 1, 1\n.maxnreg 32\n.minnctapersm 4", ".maxntid 16, 2", ".reqntid 64"): run_ptxas(with_directives(d), "sm_90", ptxas)
