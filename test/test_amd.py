"""Tests of the AMD backend: encodings against LLVM, the RDNA3 emulator instruction by instruction on edge values, code
objects, the renderer without a device, and kernels end to end on the emulator."""
import os, re, struct, subprocess, tempfile
import numpy as np
import pytest

pytest.importorskip("tinygrad_amd", reason="the AMD backend is not installed (pip install -e backends/tinygrad-amd)")
from tinygrad_amd.asm import assemble_code, decode, disassemble, AsmError
from tinygrad_amd.codeobject import KernelInfo, build, parse
from tinygrad_amd.emulator import Program, launch, EmulatorError, LdsOrder
from tinygrad_amd import llvm_check

def llvm_tool(name: str) -> str:
  """The LLVM 19 tool, else a skip (a failure under CI, which installs llvm-19)."""
  path = llvm_check.find_tool(name)
  if path is not None: return path
  why = f"{name}-19 is not installed (apt-get install llvm-19)"
  if os.environ.get("CI"): pytest.fail(f"CI is set but {why}")
  pytest.skip(why)

# ***** encodings *****

def test_every_instruction_form_encodes_like_llvm_mc():
  mc = llvm_tool("llvm-mc")
  bad = llvm_check.compare_encodings(mc)
  assert not bad, f"{len(bad)} of {len(llvm_check.all_samples())} lines differ from llvm-mc:\n" + "\n".join(bad[:30])

def test_disassembler_round_trips_every_sample():
  for line in llvm_check.all_samples():
    if line.startswith(("s_branch", "s_cbranch")): continue
    code = assemble_code([line])
    assert assemble_code(disassemble(code)) == code, f"{line} -> {disassemble(code)}"

@pytest.mark.parametrize("bad,why", [("v_add_f32 v1, v2", "takes 3 operands"), ("v_frob_b32 v1, v2", "unknown instruction"),
                                      ("v_add_f32_e64 v1, 0x12345, 0x54321", "two different literals"),
                                      ("v_add_f64 v[1:2], v[2:3], 0x1234567", "64-bit"), ("s_branch nowhere", "unknown label"),
                                      ("v_mov_b32 v1, v[2:3]", "spans 2 registers"),
                                      ("ds_load_b128 v[1:4], v5 offset:65536", r"outside 0\.\.65535"),
                                      ("global_load_b32 v1, v2, s[8:9] offset:4096", r"outside -4096\.\.4095")])
def test_assembler_errors_say_what_is_wrong(bad, why):
  with pytest.raises(AsmError, match=why): assemble_code([bad])

def kernel_object(lines: list[str], vgprs: int = 16, lds: int = 0, nbufs: int = 3) -> bytes:
  return build(KernelInfo("k", vgprs, 16, lds, 8 * nbufs, nbufs, 0), assemble_code(lines))

def test_code_object_disassembles_with_llvm_objdump_like_ours():
  objdump = llvm_tool("llvm-objdump")
  blob = kernel_object(PROLOGUE + ["v_add_f32_e64 v3, -v1, |v2|", "v_cmp_lt_f32_e32 vcc_lo, 1.0, v1", "s_cbranch_vccz L", "v_mov_b32_e32 v3, 0x3f8ccccd",
                                   "L:", "s_waitcnt vmcnt(0) lgkmcnt(0)"] + EPILOGUE)
  with tempfile.NamedTemporaryFile(suffix=".co") as f:
    f.write(blob); f.flush()
    assert llvm_check.compare_code_objects({f.name: blob}, objdump) == []
    r = subprocess.run([llvm_check.find_tool("llvm-readelf"), "--notes", "-s", f.name], capture_output=True, text=True)
  assert r.returncode == 0 and "k.kd" in r.stdout and "amdhsa.kernels" in r.stdout, r.stdout + r.stderr

def test_code_object_round_trip_and_corruption():
  blob = kernel_object(PROLOGUE + EPILOGUE, vgprs=24, lds=512)
  lo = parse(blob)
  assert lo.name == "k" and lo.lds == 512 and lo.kernarg_size == 24 and ((lo.rsrc1 & 0x3f) + 1) * 8 == 24
  assert disassemble(lo.code)[-1] == "s_endpgm"
  for bad in (blob[:100], b"\x7fELF" + b"\0" * 60, bytes(reversed(blob))):
    with pytest.raises(ValueError): parse(bad)

# ***** the emulator, instruction by instruction *****
# work-item i (workgroups of 64): v1 = a[i], v2 = b[i] (loaded); the instructions under test leave the result in v4, stored to out[i]

PROLOGUE = ["s_load_b64 s[6:7], s[0:1], 0x0", "s_load_b64 s[8:9], s[0:1], 0x8", "s_load_b64 s[10:11], s[0:1], 0x10",
            "s_waitcnt lgkmcnt(0)", "v_lshl_add_u32 v10, s2, 6, v0", "v_lshlrev_b32_e32 v10, 2, v10", "global_load_b32 v1, v10, s[8:9]", "global_load_b32 v2, v10, s[10:11]",
            "s_waitcnt vmcnt(0)", "v_mov_b32_e32 v4, 0"]
EPILOGUE = ["global_store_b32 v10, v4, s[6:7]", "s_endpgm"]

def emulate(body: list[str], a, b=None, lanes: int = 32, lds: int = 0) -> np.ndarray:
  a = np.ascontiguousarray(np.resize(np.asarray(a).view(np.uint32), lanes))
  b = np.ascontiguousarray(np.resize(np.asarray(b if b is not None else a).view(np.uint32), lanes))
  out = np.zeros(lanes, np.uint32)
  prog = Program(parse(kernel_object(PROLOGUE + body + EPILOGUE, lds=lds)))
  args = np.array([out.ctypes.data, a.ctypes.data, b.ctypes.data], np.uint64).view(np.uint8)
  launch(prog, [out, a, b], args, (lanes, 1, 1), (64, 1, 1))
  return out

def f32(*xs): return np.array(xs, np.float32)
def bits(x): return np.asarray(x, np.float32).view(np.uint32)
NAN, INF = float("nan"), float("inf")

def test_float_to_int_conversions_saturate_and_send_nan_to_zero():
  x = f32(NAN, INF, -INF, 3e9, -3e9, -2.7, 2.7, -0.0, 1e-40)
  assert emulate(["v_cvt_i32_f32_e32 v4, v1"], x)[:9].view(np.int32).tolist() == [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, -2, 2, 0, 0]
  assert emulate(["v_cvt_u32_f32_e32 v4, v1"], x)[:9].tolist() == [0, 2**32 - 1, 0, 3000000000, 0, 0, 2, 0, 0]

def test_int_to_float_rounds_to_nearest_even():
  x = np.array([2**24 + 1, 2**24 + 3, -(2**31), 2**31 - 1], np.int32)
  got = emulate(["v_cvt_f32_i32_e32 v4, v1"], x)[:4].view(np.float32)
  assert got.tolist() == [16777216.0, 16777220.0, -2147483648.0, 2147483648.0]

def test_ieee_min_max_return_the_number_and_compares_on_nan():
  a, b = f32(NAN, 1.0, -INF, 2.0), f32(1.0, NAN, 5.0, 2.0)
  assert emulate(["v_max_f32_e32 v4, v1, v2"], a, b)[:4].view(np.float32).tolist() == [1.0, 1.0, 5.0, 2.0]
  assert emulate(["v_min_f32_e32 v4, v1, v2"], a, b)[:4].view(np.float32).tolist() == [1.0, 1.0, -INF, 2.0]
  # compares write a lane mask to vcc; v_cndmask picks src1 where the lane's bit is set
  lt = emulate(["v_cmp_lt_f32_e32 vcc_lo, v1, v2", "v_cndmask_b32_e64 v4, 0, 1, vcc_lo"], a, b)[:4]
  neq = emulate(["v_cmp_neq_f32_e32 vcc_lo, v1, v2", "v_cndmask_b32_e64 v4, 0, 1, vcc_lo"], a, b)[:4]
  assert lt.tolist() == [0, 0, 1, 0] and neq.tolist() == [1, 1, 1, 0]

def test_div_fixup_gives_the_ieee_special_cases():
  # v_div_fixup_f32 q, den, num: the quotient v3 (here 7.0) unless num/den is special
  num, den = f32(1.0, 0.0, 0.0, INF, INF, 1.0, -1.0, NAN, 6.0), f32(0.0, 0.0, 5.0, INF, 2.0, INF, 0.0, 1.0, -3.0)
  got = emulate(["v_mov_b32_e32 v3, 0x40e00000", "v_div_fixup_f32 v4, v3, v2, v1"], num, den)[:9].view(np.float32)
  want = [INF, NAN, 0.0, NAN, INF, 0.0, -INF, NAN, -7.0]
  np.testing.assert_array_equal(got, np.array(want, np.float32))
  assert np.signbit(emulate(["v_mov_b32_e32 v3, 0x40e00000", "v_div_fixup_f32 v4, v3, v2, v1"], f32(-0.0), f32(3.0))[:1].view(np.float32))[0]

def test_integer_multiply_high_low_and_shift_masking():
  a, b = np.array([0xffffffff, 0x80000000, 7, 3], np.uint32), np.array([0xffffffff, 2, 33, 35], np.uint32)
  assert emulate(["v_mul_lo_u32 v4, v1, v2"], a, b)[:4].tolist() == [1, 0, 231, 105]
  assert emulate(["v_mul_hi_u32 v4, v1, v2"], a, b)[:4].tolist() == [0xfffffffe, 1, 0, 0]
  # shift amounts are the first source, masked to 5 bits: 33 -> 1, 35 -> 3
  assert emulate(["v_lshlrev_b32_e32 v4, v2, v1"], a, b)[2:4].tolist() == [14, 24]
  neg = np.array([-8, -1, 5, -2**31], np.int32)
  assert emulate(["v_ashrrev_i32_e32 v4, 1, v1"], neg)[:4].view(np.int32).tolist() == [-4, -1, 2, -2**30]
  assert emulate(["v_lshrrev_b32_e32 v4, 1, v1"], neg)[:4].tolist() == [0x7ffffffc, 0x7fffffff, 2, 0x40000000]

def test_carry_chain_and_bitfield_extract():
  a, b = np.array([0xffffffff, 1, 0x80000000, 0], np.uint32), np.array([1, 1, 0x80000000, 0], np.uint32)
  # 64-bit add of (a, a) + (b, b): the high word gets the carry
  got = emulate(["v_add_co_u32 v5, vcc_lo, v1, v2", "v_add_co_ci_u32_e32 v4, vcc_lo, v1, v2, vcc_lo"], a, b)[:4]
  assert got.tolist() == [1, 2, 1, 0]
  x = np.array([0xabcd1234, 0xffff8000, 0x7f00, 0], np.uint32)
  assert emulate(["v_bfe_u32 v4, v1, 8, 8"], x)[:4].tolist() == [0x12, 0x80, 0x7f, 0]
  assert emulate(["v_bfe_i32 v4, v1, 8, 8"], x)[:4].view(np.int32).tolist() == [0x12, -128, 127, 0]

def test_transcendentals_take_their_documented_inputs():
  x = f32(0.25, 0.5, -0.25, 1.0)
  np.testing.assert_allclose(emulate(["v_sin_f32_e32 v4, v1"], x)[:4].view(np.float32), [1, 0, -1, 0], atol=1e-6)  # revolutions
  np.testing.assert_array_equal(emulate(["v_exp_f32_e32 v4, v1"], f32(3, -INF, INF, NAN))[:4].view(np.float32), f32(8, 0, INF, NAN))
  np.testing.assert_array_equal(emulate(["v_log_f32_e32 v4, v1"], f32(8, 0, -1, INF))[:4].view(np.float32), f32(3, -INF, NAN, INF))
  np.testing.assert_array_equal(emulate(["v_rcp_f32_e32 v4, v1"], f32(0.0, -0.0, INF, 4))[:4].view(np.float32), f32(INF, -INF, 0, 0.25))
  np.testing.assert_array_equal(emulate(["v_fract_f32_e32 v4, v1"], f32(-0.25, 2.75, -1e-9, 3))[:4].view(np.float32),
                                f32(0.75, 0.75, np.nextafter(np.float32(1), np.float32(0)), 0))

def test_fma_rounds_once():
  # (2**-24 + 2**-47) * (1 - 2**-24 + 2**-47) = 2**-24 + 2**-48 + 2**-94: just over the midpoint, so it rounds up; a float64
  # sum rounded again to float32 would land on the midpoint and round to even (down)
  a, b = f32(-2.0**-24 + 2.0**-47), f32(2.0**-24 + 2.0**-47)
  assert emulate(["v_fma_f32 v4, v1, v2, v2"], a, b)[:1].view(np.float32)[0] == np.float32(2.0**-24 + 2.0**-47)
  from fractions import Fraction
  from tinygrad_amd.emulator import VALU
  rng = np.random.default_rng(4)
  x, y = (rng.integers(0, 2**64, 3000, dtype=np.uint64).view(np.float64) for _ in range(2))
  x, y = x[np.isfinite(x)][:1000], y[np.isfinite(y)][:1000]
  with np.errstate(all="ignore"): c = np.concatenate([-(x[:500] * y[:500]) * (1 + 2.0**-52 * rng.integers(-3, 4, 500)), rng.standard_normal(500)])
  c = np.where(np.isfinite(c), c, 1.0)   # half of them cancel the product to its last bits
  def exact(a, b, c):
    v = Fraction(a) * Fraction(b) + Fraction(c)
    if v == 0: return a * b + c if a == 0 or b == 0 else 0.0
    try: return float(v)
    except OverflowError: return float("inf") if v > 0 else float("-inf")
  with np.errstate(all="ignore"): got = VALU["v_fma_f64"](x, y, c)
  want = np.array([exact(*t) for t in zip(x.tolist(), y.tolist(), c.tolist())])
  assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
  with np.errstate(all="ignore"):
    inf = VALU["v_fma_f64"](np.array([1e300, np.inf, 0.0, -0.0]), np.array([1e300, 0.0, 5.0, 0.0]), np.array([-np.inf, 1.0, -0.0, -0.0]))
  assert inf[0] == -np.inf and np.isnan(inf[1]) and not np.signbit(inf[2]) and np.signbit(inf[3])   # +0 + -0 is +0, -0 + -0 is -0

def test_vop3_modifiers_and_inline_constants():
  a = f32(1.5, -2.0, 3.0, -0.0)
  np.testing.assert_array_equal(emulate(["v_add_f32_e64 v4, -|v1|, 0.5"], a)[:4].view(np.float32), f32(-1.0, -1.5, -2.5, 0.5))
  np.testing.assert_array_equal(emulate(["v_mul_f32_e64 v4, v1, 0x40490fdb"], a)[:2].view(np.float32), f32(1.5 * np.float32(np.pi), -2 * np.float32(np.pi)))
  assert emulate(["v_add_nc_u32_e32 v4, -16, v1"], np.arange(4, dtype=np.int32))[:4].view(np.int32).tolist() == [-16, -15, -14, -13]

def test_exec_masks_lanes_and_scalar_branches():
  body = ["v_cmp_gt_u32_e32 vcc_lo, 5, v0", "s_and_b32 exec_lo, exec_lo, vcc_lo",   # lanes 0..4 only
          "v_mov_b32_e32 v4, 7", "s_mov_b32 exec_lo, -1",
          "s_cmp_eq_u32 s2, 0", "s_cbranch_scc0 skip", "v_add_nc_u32_e32 v4, 100, v4", "skip:"]
  got = emulate(body, np.zeros(32, np.uint32))
  assert got.tolist() == [107] * 5 + [100] * 27
  # a partial last workgroup: lanes past the grid never run (their outputs keep their value)
  out = emulate(["v_mov_b32_e32 v4, 9"], np.zeros(100, np.uint32), lanes=100)
  assert out.tolist() == [9] * 100

def test_barrier_orders_lds_across_the_waves_of_a_workgroup():
  # 64 work-items (two waves): each writes its id to LDS, then reads its mirror's after the barrier
  body = ["v_lshlrev_b32_e32 v5, 2, v0", "ds_store_b32 v5, v0", "s_waitcnt lgkmcnt(0)", "s_barrier",
          "v_sub_nc_u32_e32 v6, 63, v0", "v_lshlrev_b32_e32 v6, 2, v6", "ds_load_b32 v4, v6", "s_waitcnt lgkmcnt(0)"]
  got = emulate(body, np.zeros(128, np.uint32), lanes=128, lds=256)
  assert got.tolist() == list(range(63, -1, -1)) * 2

def test_barrier_waits_for_the_waves_still_running():
  # wave 1 of each workgroup skips the first s_barrier and ends: the barrier waits for the surviving wave only (the ISA's
  # S_BARRIER); wave 0 then reads back what it stored
  body = ["v_lshlrev_b32_e32 v5, 2, v0", "ds_store_b32 v5, v0", "v_cmp_gt_u32_e32 vcc_lo, 32, v0", "s_cbranch_vccz skip",
          "s_waitcnt lgkmcnt(0)", "s_barrier", "ds_load_b32 v4, v5", "s_waitcnt lgkmcnt(0)", "skip:"]
  got = emulate(body, np.zeros(64, np.uint32), lanes=64, lds=256)
  assert got.tolist() == list(range(32)) + [0] * 32

# two waves of one workgroup (64 work-items): v5 = lane i's word (4 i) in words 0..31, v7 = 100 + work-item id; words 0..31
# first hold wave 0's ids + 100 (ordered by a barrier). Wave 0 runs `first`, then `sync`; wave 1 runs `sync`, then `second`.
# The emulator steps the lowest program counter first, so wave 0's `first` runs before wave 1's `second`
RACE_SETUP = ["v_and_b32_e32 v5, 31, v0", "v_lshlrev_b32_e32 v5, 2, v5", "v_add_nc_u32_e32 v7, 100, v0", "v_lshlrev_b32_e32 v8, 2, v0",
              "ds_store_b32 v8, v7", "s_waitcnt lgkmcnt(0)", "s_barrier", "v_cmp_gt_u32_e32 vcc_lo, 32, v0"]
def two_waves(first: list[str], second: list[str], sync: list[str]) -> list[str]:
  return RACE_SETUP + ["s_cbranch_vccz second", *first, *sync, "s_branch end", "second:", *sync, *second, "end:", "s_waitcnt lgkmcnt(0)"]
ORDERED = ["s_waitcnt lgkmcnt(0)", "s_barrier"]
READ_BACK = ["s_waitcnt lgkmcnt(0)", "s_barrier", "ds_load_b32 v4, v5", "s_waitcnt lgkmcnt(0)"]   # both waves, after the end
ITEMS = np.arange(64)
LDS_RACES = {   # wave 0's accesses, wave 1's, what both do after, every work-item's v4 when a barrier orders them, the race's error
  "read after write": (["ds_store_b32 v5, v0"], ["ds_load_b32 v4, v5"], [], np.where(ITEMS < 32, 0, ITEMS - 32),
                       r"ds_load_b32 at byte \d+ by wave 1 of workgroup 0 reads LDS byte 0, which wave 0 of the workgroup wrote"),
  "write after read": (["ds_load_b32 v4, v5"], ["ds_store_b32 v5, v0", "ds_load_b32 v4, v5"], [], np.where(ITEMS < 32, ITEMS + 100, ITEMS),
                       r"ds_store_b32 at byte \d+ by wave 1 of workgroup 0 writes LDS byte 0, which wave 0 of the workgroup read"),
  "write after write": (["ds_store_b32 v5, v0"], ["ds_store_b32 v5, v0"], READ_BACK, np.tile(ITEMS[32:], 2),   # wave 1's, written last
                        r"ds_store_b32 at byte \d+ by wave 1 of workgroup 0 writes LDS byte 0, which wave 0 of the workgroup wrote"),
}

@pytest.fixture(params=[None, 2], ids=["epochs", "epochs_wrapping"])
def epochs(request, monkeypatch):
  """The emulator's count of barrier epochs as it is, and starting again every 2 barriers (as it does every 2**15)."""
  if request.param: monkeypatch.setattr(LdsOrder, "EPOCHS", request.param)

@pytest.mark.parametrize("race", LDS_RACES)
def test_lds_races_between_waves_are_errors_and_a_waited_barrier_orders_them(race, epochs):
  """LDS accesses of two waves, one a write, are ordered only by an s_barrier both pass between them, the earlier access
  retired (s_waitcnt lgkmcnt) before it (LLVM AMDGPUUsage, memory model GFX10-GFX11: different waves' LDS operations
  may be reordered; a workgroup release is s_waitcnt lgkmcnt(0)). Without that the emulator's order is one the hardware
  need not take: an error naming the instruction, the wave, the workgroup and the LDS address."""
  first, second, after, want, why = LDS_RACES[race]
  with pytest.raises(EmulatorError, match=why): emulate(two_waves(first, second, []) + after, np.zeros(64, np.uint32), lanes=64, lds=256)
  np.testing.assert_array_equal(emulate(two_waves(first, second, ORDERED) + after, np.zeros(64, np.uint32), lanes=64, lds=256), want)

@pytest.mark.parametrize("sync", [["s_barrier"], ["s_barrier", "s_barrier"], ["s_waitcnt lgkmcnt(1)", "s_barrier"]])
def test_an_lds_access_not_waited_for_before_the_barrier_is_not_ordered_by_it(sync, epochs):
  """s_barrier itself does not wait for LDS accesses (GFX11 has the back-off barrier; LLVM's execution synchronization:
  barriers do not order memory): an access still in flight when its wave passes the barrier stays unordered with the
  other waves' accesses after it, at any later barrier too, until its wave waits for it (the renderer's s_waitcnt
  lgkmcnt(0) before s_barrier). lgkmcnt(1) leaves wave 0's last access in flight."""
  first = ["ds_load_b32 v9, v5", "ds_store_b32 v5, v0"]
  with pytest.raises(EmulatorError, match=r"ds_load_b32 .* wave 1 .* reads LDS byte 0, which wave 0 of the workgroup wrote"):
    emulate(two_waves(first, ["ds_load_b32 v4, v5"], sync), np.zeros(64, np.uint32), lanes=64, lds=256)
  with pytest.raises(EmulatorError, match=r"ds_store_b32 .* wave 1 .* writes LDS byte 0, which wave 0 of the workgroup read"):
    emulate(two_waves(["ds_load_b32 v4, v5"], ["ds_store_b32 v5, v0"], sync), np.zeros(64, np.uint32), lanes=64, lds=256)

def test_lds_accesses_one_wave_or_one_instruction_orders():
  """A wave's own LDS accesses complete in its program order: it may write, read and rewrite its words, and its lanes
  each other's, with no barrier. Two waves writing one word in one instruction (both at the same program counter) are a
  race; two writing the two halves of a word are not (16-bit accesses are tracked per 2 bytes)."""
  body = ["v_lshlrev_b32_e32 v5, 2, v0", "ds_store_b32 v5, v0", "v_xor_b32_e32 v6, 4, v5", "ds_load_b32 v4, v6", "s_waitcnt lgkmcnt(0)",
          "v_add_nc_u32_e32 v9, 1000, v4", "ds_store_b32 v6, v9", "ds_load_b32 v4, v5", "s_waitcnt lgkmcnt(0)"]
  np.testing.assert_array_equal(emulate(body, np.zeros(64, np.uint32), lanes=64, lds=256), np.arange(64) + 1000)
  with pytest.raises(EmulatorError, match=r"ds_store_b32 .* wave 0 .* writes LDS byte 0, which wave 1 of the workgroup wrote"):
    emulate(["v_and_b32_e32 v5, 31, v0", "v_lshlrev_b32_e32 v5, 2, v5", "ds_store_b32 v5, v0"], np.zeros(64, np.uint32), lanes=64, lds=256)
  # lane i of wave w writes the half w of word i; after a barrier each reads the whole word
  halves = ["v_and_b32_e32 v5, 31, v0", "v_lshlrev_b32_e32 v5, 2, v5", "v_lshrrev_b32_e32 v6, 4, v0", "v_and_b32_e32 v6, 2, v6",
            "v_add_nc_u32_e32 v6, v5, v6", "ds_store_b16 v6, v0", *READ_BACK]
  np.testing.assert_array_equal(emulate(halves, np.zeros(64, np.uint32), lanes=64, lds=256), np.tile(np.arange(32) | (np.arange(32, 64) << 16), 2))
  with pytest.raises(EmulatorError, match=r"ds_store_b16 .* writes LDS byte 0, which wave 1 of the workgroup wrote"):
    emulate(halves[:2] + ["ds_store_b16 v5, v0"], np.zeros(64, np.uint32), lanes=64, lds=256)

def test_loads_land_at_the_waitcnt_that_retires_them():
  """A load's data reaches its VGPRs when an s_waitcnt lets it retire, loads of a counter in issue order: vmcnt(1) after
  two global loads lands the first only, so reading the second's register before vmcnt(0) is an error (the hardware
  would read its old value); an LDS load waits on lgkmcnt, which LDS stores count too."""
  a, b = np.arange(32, dtype=np.uint32) + 100, np.arange(32, dtype=np.uint32) + 200
  two = ["global_load_b32 v11, v10, s[8:9]", "global_load_b32 v12, v10, s[10:11]"]
  assert emulate(two + ["s_waitcnt vmcnt(1)", "v_mov_b32_e32 v4, v11"], a, b).tolist() == a.tolist()
  assert emulate(two + ["s_waitcnt vmcnt(0)", "v_add_nc_u32_e32 v4, v11, v12"], a, b).tolist() == (a + b).tolist()
  with pytest.raises(EmulatorError, match="reads v12, which a load in flight will write"):
    emulate(two + ["s_waitcnt vmcnt(1)", "v_add_nc_u32_e32 v4, v11, v12"], a, b)
  with pytest.raises(EmulatorError, match="reads v11, which a load in flight will write"):
    emulate(["global_load_b32 v11, v10, s[8:9]", "global_store_b32 v10, v11, s[6:7]"], a, b)
  # a store counted after the load: lgkmcnt(1) retires the load, the store may still be in flight
  lds = ["v_lshlrev_b32_e32 v5, 2, v0", "ds_store_b32 v5, v1", "s_waitcnt lgkmcnt(0)", "ds_load_b32 v13, v5", "ds_store_b32 v5, v2"]
  assert emulate(lds + ["s_waitcnt lgkmcnt(1)", "v_mov_b32_e32 v4, v13"], a, b, lds=128).tolist() == a.tolist()
  with pytest.raises(EmulatorError, match="reads v13"): emulate(lds + ["s_waitcnt lgkmcnt(2)", "v_mov_b32_e32 v4, v13"], a, b, lds=128)

def test_d16_lds_loads_write_one_half_and_keep_the_other():
  """ds_load_u16_d16 writes the low 16 bits of its VGPR, ds_load_u16_d16_hi the high 16, the other half kept (the ISA's
  D16 loads); two in flight into one VGPR land together, and reading it before the second retires is an error."""
  a, b = np.arange(32, dtype=np.uint32) * 0x00010003 + 0x12345678, np.arange(32, dtype=np.uint32) * 0x00070001 + 0x9abcdef0
  store = ["v_lshlrev_b32_e32 v5, 2, v0", "ds_store_b32 v5, v1", "s_waitcnt lgkmcnt(0)", "v_mov_b32_e32 v4, v2"]
  assert emulate(store + ["ds_load_u16_d16 v4, v5 offset:2", "s_waitcnt lgkmcnt(0)"], a, b, lds=128).tolist() == ((b & 0xFFFF0000) | (a >> 16)).tolist()
  assert emulate(store + ["ds_load_u16_d16_hi v4, v5", "s_waitcnt lgkmcnt(0)"], a, b, lds=128).tolist() == ((a << 16) & 0xFFFFFFFF | (b & 0xFFFF)).tolist()
  both = store + ["ds_load_u16_d16 v4, v5 offset:2", "ds_load_u16_d16_hi v4, v5"]
  assert emulate(both + ["s_waitcnt lgkmcnt(0)"], a, b, lds=128).tolist() == ((a >> 16) | (a << 16) & 0xFFFFFFFF).tolist()
  with pytest.raises(EmulatorError, match="reads v4"): emulate(both + ["s_waitcnt lgkmcnt(1)", "v_mov_b32_e32 v6, v4"], a, b, lds=128)

def test_lds_b128_with_offsets_and_counters():
  """64 work-items (two waves) store 16 bytes each at 16 + 16 i, pass a barrier, load their mirror's; the counters: 16
  bytes per lane each way, one barrier for the workgroup, global traffic of the two loads and the store."""
  body = ["v_lshlrev_b32_e32 v5, 4, v0", "v_mov_b32_e32 v20, v0", "v_add_nc_u32_e32 v21, 1, v0", "v_add_nc_u32_e32 v22, 2, v0",
          "v_add_nc_u32_e32 v23, 3, v0", "ds_store_b128 v5, v[20:23] offset:16", "s_waitcnt lgkmcnt(0)", "s_barrier",
          "v_sub_nc_u32_e32 v6, 63, v0", "v_lshlrev_b32_e32 v6, 4, v6", "ds_load_b128 v[24:27], v6 offset:16", "s_waitcnt lgkmcnt(0)",
          "v_add_nc_u32_e32 v4, v24, v27"]
  a = np.zeros(64, np.uint32)
  out = np.zeros(64, np.uint32)
  prog = Program(parse(kernel_object(PROLOGUE + body + EPILOGUE, vgprs=32, lds=16 + 64 * 16)))
  c = launch(prog, [out, a, a], np.array([out.ctypes.data, a.ctypes.data, a.ctypes.data], np.uint64).view(np.uint8), (64, 1, 1), (64, 1, 1))
  assert out.tolist() == [2 * (63 - i) + 3 for i in range(64)]
  assert (c.shared_written, c.shared_read, c.barriers, c.threads, c.blocks) == (64 * 16, 64 * 16, 1, 64, 1)
  assert (c.global_read, c.global_written) == (64 * 8, 64 * 4)
  assert c.instructions == 2 * len(PROLOGUE + body + EPILOGUE) and c.thread_instructions == 32 * c.instructions
  with pytest.raises(EmulatorError, match="addresses LDS byte"):
    emulate(["v_lshlrev_b32_e32 v5, 4, v0", "ds_load_b128 v[24:27], v5 offset:16"], a, lanes=64, lds=64 * 16)
  with pytest.raises(EmulatorError, match="65537 bytes of LDS"): emulate(["s_nop 0"], a, lds=65537)

def test_fmac_rounds_once_into_its_destination():
  a, b = f32(-2.0**-24 + 2.0**-47), f32(2.0**-24 + 2.0**-47)
  assert emulate(["v_mov_b32_e32 v4, v2", "v_fmac_f32_e32 v4, v1, v2"], a, b)[:1].view(np.float32)[0] == np.float32(2.0**-24 + 2.0**-47)

def test_work_item_ids_follow_the_descriptor():
  """v0 packs x, y and z (10 bits each) for an 8x4x2 workgroup; with the descriptor asking for x only, only x."""
  lines = ["s_load_b64 s[6:7], s[0:1], 0x0", "s_waitcnt lgkmcnt(0)", "v_and_b32_e32 v1, 0x3ff, v0", "v_bfe_u32 v2, v0, 10, 10",
           "v_bfe_u32 v3, v0, 20, 10", "v_lshl_add_u32 v4, v3, 2, v2", "v_lshl_add_u32 v4, v4, 3, v1", "v_lshlrev_b32_e32 v5, 2, v4",
           "global_store_b32 v5, v0, s[6:7]", "s_endpgm"]
  blob = kernel_object(lines, nbufs=1)
  def run(blob):
    out = np.zeros(64, np.uint32)
    launch(Program(parse(blob)), [out], np.array([out.ctypes.data], np.uint64).view(np.uint8), (8, 4, 2), (8, 4, 2))
    return out
  i = np.arange(64)
  assert run(blob).tolist() == (i % 8 | (i // 8 % 4) << 10 | (i // 32) << 20).tolist()
  lo = parse(blob)
  at = blob.find(struct.pack("<II", lo.rsrc1, lo.rsrc2))
  x_only = blob[:at + 4] + struct.pack("<I", lo.rsrc2 & ~(3 << 11)) + blob[at + 8:]
  assert parse(x_only).rsrc2 >> 11 & 3 == 0
  got = run(x_only)   # every work-item writes its x at index x
  assert got.tolist() == list(range(8)) + [0] * 56

def wmma_kernel(name: str) -> list[str]:
  return ["s_load_b64 s[6:7], s[0:1], 0x0", "s_load_b64 s[8:9], s[0:1], 0x8", "s_load_b64 s[10:11], s[0:1], 0x10",
          "s_load_b64 s[12:13], s[0:1], 0x18", "s_waitcnt lgkmcnt(0)", "v_lshlrev_b32_e32 v40, 5, v0",
          "global_load_b128 v[8:11], v40, s[8:9]", "global_load_b128 v[12:15], v40, s[8:9] offset:16",
          "global_load_b128 v[16:19], v40, s[10:11]", "global_load_b128 v[20:23], v40, s[10:11] offset:16",
          "global_load_b128 v[0:3], v40, s[12:13]", "global_load_b128 v[4:7], v40, s[12:13] offset:16", "s_waitcnt vmcnt(0)",
          f"{name} v[24:31], v[8:15], v[16:23], v[0:7]", "global_store_b128 v40, v[24:27], s[6:7]",
          "global_store_b128 v40, v[28:31], s[6:7] offset:16", "s_endpgm"]

def run_wmma(name: str, a_lanes: np.ndarray, b_lanes: np.ndarray, c_lanes: np.ndarray, lanes: int = 32) -> np.ndarray:
  """One wave's WMMA on per-lane registers: a, b (32, 8) u32 words, c (32, 8) f32; the (32, 8) words of D."""
  out = np.zeros((32, 8), np.uint32)
  bufs = [out, np.ascontiguousarray(a_lanes), np.ascontiguousarray(b_lanes), np.ascontiguousarray(c_lanes)]
  prog = Program(parse(build(KernelInfo("k", 48, 16, 0, 32, 4, 0), assemble_code(wmma_kernel(name)))))
  launch(prog, bufs, np.array([x.ctypes.data for x in bufs], np.uint64).view(np.uint8), (lanes, 1, 1), (32, 1, 1))
  return out

@pytest.mark.parametrize("ty", ["f16", "bf16"])
def test_wmma_multiplies_the_documented_lane_layout(ty):
  """Lane l (and l + 16) holds row l % 16 of A and column l % 16 of B (K along the 8 registers, low half first); VGPR v
  of C and D holds (row 2 v + l // 16, column l % 16). D = A B + C to within f32 accumulation error."""
  rng = np.random.default_rng(5)
  A, B, C = rng.standard_normal((16, 16)), rng.standard_normal((16, 16)), rng.standard_normal((16, 16)).astype(np.float32)
  def halves(m):   # (16, 16) -> the 16-bit patterns of each row
    if ty == "f16": return m.astype(np.float16).view(np.uint16), m.astype(np.float16).astype(np.float64)
    b = (m.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return b, (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
  (a16, A), (b16, Bt) = halves(A), halves(B.T)
  lane = np.arange(32)
  a_lanes, b_lanes = a16[lane % 16].view(np.uint32), b16[lane % 16].view(np.uint32)   # (32, 8): two halves per word
  c_lanes = C[2 * np.arange(8)[None, :] + lane[:, None] // 16, lane[:, None] % 16]
  name = f"v_wmma_f32_16x16x16_{ty}"
  d = run_wmma(name, a_lanes, b_lanes, c_lanes).view(np.float32)
  D = np.zeros((16, 16), np.float32)
  D[2 * np.arange(8)[None, :] + lane[:, None] // 16, lane[:, None] % 16] = d
  want = A @ Bt.T + C
  assert (np.abs(D - want) <= 2.0 ** -21 * (np.abs(A) @ np.abs(Bt.T) + np.abs(C))).all()
  bad = a_lanes.copy()
  bad[20, 3] ^= 1
  with pytest.raises(EmulatorError, match="lanes 16-31 must hold a copy"): run_wmma(name, bad, b_lanes, c_lanes)
  with pytest.raises(EmulatorError, match="EXEC not all ones"): run_wmma(name, a_lanes, b_lanes, c_lanes, lanes=31)

def test_code_object_with_new_instructions_disassembles_like_llvm_objdump():
  objdump = llvm_tool("llvm-objdump")
  blob = build(KernelInfo("k", 48, 16, 1024, 32, 4, 0), assemble_code(wmma_kernel("v_wmma_f32_16x16x16_bf16")[:-1] +
               ["ds_store_b128 v1, v[4:7] offset:32", "ds_load_b128 v[8:11], v1 offset:1024", "v_fmac_f32_e32 v1, v2, v3", "s_endpgm"]))
  with tempfile.NamedTemporaryFile(suffix=".co") as f:
    f.write(blob); f.flush()
    assert llvm_check.compare_code_objects({f.name: blob}, objdump) == []

def test_unknown_and_unimplemented_instructions_are_errors_naming_them():
  unknown = assemble_code(PROLOGUE) + struct.pack("<I", (0b0111111 << 25) | (0x7f << 9)) + assemble_code(EPILOGUE)
  with pytest.raises(EmulatorError, match="unknown VOP1 opcode 0x7f"):
    Program(parse(build(KernelInfo("k", 16, 16, 0, 24, 3, 0), unknown)))
  with pytest.raises(EmulatorError, match="v_perm_b32"): Program(parse(kernel_object(PROLOGUE + ["v_perm_b32 v4, v1, v2, v3"] + EPILOGUE)))

def test_memory_faults_and_register_overflow_are_errors():
  with pytest.raises(EmulatorError, match="memory fault"): emulate(["global_load_b32 v4, v10, s[8:9] offset:4000"], np.zeros(32, np.uint32))
  with pytest.raises(EmulatorError, match="VGPRs"): Program(parse(kernel_object(PROLOGUE + ["v_mov_b32_e32 v40, 0"] + EPILOGUE)))

# ***** renderer and end to end *****

from tinycore import Tensor, dtypes
from tinycore.runtime.errors import UnsupportedError

@pytest.fixture
def amd(monkeypatch):
  monkeypatch.setenv("AMD_EMULATE", "1")
  from tinycore.runtime.device import Device
  return Device["AMD"]

def test_renders_without_a_device():
  from tinygrad_amd.renderer import RDNA3Renderer
  from tinycore.codegen import get_program
  t = Tensor(np.ones((4, 5), np.float32), device="PYTHON").sum(1)
  src = get_program(t.schedule()[-1].ast, RDNA3Renderer()).src
  assert "s_endpgm" in src and "global_store_b32" in src

def test_a_selection_reads_the_comparison_left_in_vcc(amd):
  """A WHERE right after its comparison selects on VCC as the comparison left it (no test of the bool's VGPR again); one
  whose comparison VCC no longer holds (a division, whose steps compare, came between) tests the VGPR. Both give
  numpy's results."""
  a, b = (np.random.default_rng(i).standard_normal(255).astype(np.float32) for i in range(2))   # (one element a thread)
  x, y = Tensor(a, device="AMD"), Tensor(b, device="AMD")
  one = (x < y).where(x, y * 2)
  lines = [l.strip() for l in program_for(one).src.splitlines()]
  at = next(i for i, l in enumerate(lines) if l.startswith("v_cmp_lt_f32"))
  sel = next(i for i, l in enumerate(lines) if i > at and l.startswith("v_cndmask_b32_e32"))
  assert not any(l.startswith("v_cmp") for l in lines[at + 1:sel]), lines[at:sel + 1]
  np.testing.assert_array_equal(one.numpy(), np.where(a < b, a, b * 2))
  two = (x < y).where(x / y, y)
  assert "v_cmp_ne_u32" in program_for(two).src
  np.testing.assert_array_equal(two.numpy(), np.where(a < b, a / b, b))

def test_products_with_powers_of_two_are_shifts_of_the_other_operand(amd):
  """A product with a power of two is a shift (v_lshlrev_b32, not the quarter-rate v_mul_lo_u32) of the other operand,
  also where both are constants the int64 emulation left unfolded (0 * 2: an int64 sum's output word; shifting the 2
  instead wrote past the buffer)."""
  x = np.arange(1031, dtype=np.int64) * 3 - 7
  t = Tensor(x, device="AMD").sum()
  assert "v_lshlrev_b32" in program_for(t).src
  assert t.item() == x.sum()
  y = np.arange(64, dtype=np.int32)
  u = Tensor(y, device="AMD") * 8 + 1
  assert "v_mul_lo_u32" not in program_for(u).src
  np.testing.assert_array_equal(u.numpy(), y * 8 + 1)

def test_loops_of_constant_trips_test_at_their_end(amd):
  """A loop of a constant number of trips runs its body first and branches back while its count is short: an add, a
  compare and a branch a trip, EXEC untouched. A loop whose bound is a value (it may run no trip) keeps its test at the
  top, narrowing EXEC. Both sum as numpy does on the emulator."""
  from tinycore import Variable
  x = np.arange(40, dtype=np.float32).reshape(4, 10)
  src = program_for(Tensor(x, device="AMD").sum(1)).src
  assert re.search(r"v_add_nc_u32_e32 (v\d+), 1, \1\n\s*v_cmp_gt_i32_e32 vcc_lo, \d+, \1\n\s*s_cbranch_vccnz L\d+", src) and "exec_lo" not in src, src
  np.testing.assert_array_equal(Tensor(x, device="AMD").sum(1).numpy(), x.sum(1))
  v = Variable("v", 0, 10)
  t = Tensor(x, device="AMD")[:, :v.bind(3)].sum(1)
  assert "s_cbranch_execz" in program_for(t).src
  np.testing.assert_array_equal(t.numpy(), x[:, :3].sum(1))

def test_running_out_of_registers_is_a_clear_error():
  from tinygrad_amd.renderer import AMDKernel, RDNA3Renderer
  k = AMDKernel(RDNA3Renderer(), "k", [])
  for _ in range(255): k.vreg()   # v0 holds the work-item ids
  with pytest.raises(UnsupportedError, match="AMD.*256 VGPRs"): k.vreg()
  k.next_s = 105
  k.sreg()
  with pytest.raises(UnsupportedError, match="AMD.*SGPRs"): k.sreg()

def test_kernels_end_to_end(amd):
  a = np.random.default_rng(0).standard_normal((33, 17)).astype(np.float32)
  x = Tensor(a, device="AMD")
  np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((x / 3 - x.exp2()).numpy(), a / 3 - np.exp2(a), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(x.sin().numpy(), np.sin(a), atol=1e-5)
  i = np.array([7, -7, 2**31 - 1, -2**31, 5, 0], np.int32)
  j = np.array([2, 2, -1, -1, 0, 3], np.int32)
  got = (Tensor(i, device="AMD").idiv(Tensor(j, device="AMD"))).numpy()
  assert got.tolist() == [3, -3, -(2**31 - 1), -2**31, 0, 0]

def test_constant_divisors_take_shifts_only_where_the_dividend_is_never_negative(amd):
  """Division by a power of two (address math's): v_lshrrev_b32 / v_and_b32 where the dividend's bounds are never
  negative nor past the dtype's, the exact division otherwise (negative values; a sum whose bounds pass 2^31 wraps to
  negative values in int32). The emulator's results equal the CPU backend's on each."""
  from tinycore.codegen import get_program
  cases = {"never negative": (8, lambda d: Tensor.arange(1000, device=d).idiv(8) * 100 + Tensor.arange(1000, device=d) % 8),
           "negative": (8, lambda d: (Tensor.arange(1000, device=d) - 500).idiv(8) * 100 + (Tensor.arange(1000, device=d) - 500) % 8),
           "wraps": (4, lambda d: (Tensor.arange(16, device=d) + (2**31 - 8)).idiv(4) * 10 + (Tensor.arange(16, device=d) + (2**31 - 8)) % 4)}
  for name, (c, f) in cases.items():
    src = get_program(f("AMD").schedule()[-1].ast, amd.renderer).src
    shifted = bool(re.search(rf"v_lshrrev_b32(_e32)? v\d+, {c.bit_length() - 1}, v\d+", src)) and bool(re.search(rf"v_and_b32(_e32)? v\d+, {c - 1}, v\d+", src))
    assert shifted == (name == "never negative") and ("v_rcp_iflag_f32" in src) != shifted, f"{name}:\n{src}"
    np.testing.assert_array_equal(f("AMD").numpy(), f("CPU").numpy(), err_msg=name)

@pytest.mark.parametrize("start, n", [(0, 1 << 16), (2**31 - 70001, 70000)], ids=["from_zero", "to_2^31-1"])
@pytest.mark.parametrize("c", [3, 7, 49, 100, 12345, 65537, 2**30 + 1, 2**31 - 1])
def test_constant_divisors_of_indexes_take_a_high_product_and_a_shift(amd, c, start, n):
  """An index (never negative, under 2^31) divided by a constant no power of two: v_mul_hi_u32 by its reciprocal and a
  shift (the remainder one product and a subtraction more), not the ~30 instructions of the general division (its
  float reciprocal), exact at both ends of the range (the emulator against numpy). A value that may be negative keeps
  the general division."""
  from tinycore.codegen import get_program
  f = lambda d: Tensor.arange(start, start + n, dtype=dtypes.int32, device=d).idiv(c) * 7 + Tensor.arange(start, start + n, dtype=dtypes.int32, device=d) % c
  src = get_program(f("AMD").schedule()[-1].ast, amd.renderer).src
  assert "v_mul_hi_u32" in src and "v_rcp_iflag_f32" not in src, src
  want = np.arange(start, start + n, dtype=np.int64)
  np.testing.assert_array_equal(f("AMD").numpy(), (want // c * 7 + want % c).astype(np.int32))
  signed = Tensor(np.arange(-50, 50, dtype=np.int32), device="AMD").idiv(c)   # (a loaded value: any int32)
  assert "v_rcp_iflag_f32" in get_program(signed.schedule()[-1].ast, amd.renderer).src

def innermost_loop(src: str) -> list[str]:
  """The instructions of a kernel's innermost loop: from a label to the branch back to it, with no label between."""
  lines = [l.strip() for l in src.splitlines()]
  for i in reversed(range(len(lines))):
    if (m := re.fullmatch(r"s_(?:branch|cbranch_vccnz) (L\d+)", lines[i])) and (top := lines.index(m.group(1) + ":")) < i and \
       not any(re.fullmatch(r"L\d+:", l) for l in lines[top + 1:i]):
      return lines[top + 1:i]
  raise AssertionError(f"no loop in:\n{src}")

def test_a_register_tiles_reads_share_an_address_and_read_vector_elements_in_place(amd):
  """A float32 matmul's innermost loop: each thread's reads of the shared tiles are 16-byte ds_load_b128 at constant
  offsets from one address (the offset field, not an address computed per read), and each multiply-add reads the
  elements of the loaded vectors in their own VGPRs (no v_mov copying them out first). The emulator gives numpy's
  product."""
  from tinycore.codegen import get_program
  a, b = (np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32) for i in range(2))
  loop = innermost_loop(get_program((Tensor.empty(64, 64, device="AMD") @ Tensor.empty(64, 64, device="AMD")).schedule()[-1].ast, amd.renderer).src)
  reads, fmas = [l for l in loop if l.startswith("ds_load")], [l for l in loop if l.startswith("v_fma_f32")]
  assert fmas and not any(l.startswith("v_mov_b32") for l in loop), loop
  assert all(l.startswith("ds_load_b128") for l in reads) and sum("offset:" in l for l in reads) >= len(reads) // 2, loop
  assert len({l.split(", ")[1].split()[0] for l in reads}) <= 2, loop   # one address per operand's tile
  np.testing.assert_allclose((Tensor(a, device="AMD") @ Tensor(b, device="AMD")).numpy(), a @ b, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_a_tensor_core_fragment_read_along_its_row_is_two_wide_loads(amd, dt):
  """A WMMA's A fragment is a lane's row of 16 K values: consecutive in the shared tile, it is read as two ds_load_b128
  into the fragment's 8 VGPRs, not 16 ds_load_u16 and 8 packs. B's fragment, a column, is 16 D16 loads straight into
  the halves of its 8 VGPRs (no pack). The emulator's product equals numpy's within the 16-bit inputs' rounding."""
  from tinycore.codegen import get_program
  d = getattr(dtypes, dt)
  src = get_program((Tensor.empty(64, 64, device="AMD", dtype=d) @ Tensor.empty(64, 64, device="AMD", dtype=d)).schedule()[-1].ast, amd.renderer).src
  loop = innermost_loop(src)
  wmma = [l for l in loop if l.startswith("v_wmma")]
  assert wmma and sum(l.startswith("ds_load_b128") for l in loop) >= 2 * len({l.split(", ")[1] for l in wmma}), loop
  assert sum(l.startswith("ds_load_u16_d16") for l in loop) == 16 * len({l.split(", ")[2] for l in wmma}), loop
  assert not any(l.startswith(("ds_load_u16 ", "v_lshl_or_b32", "v_perm_b32")) for l in loop), loop
  a, b = (np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32) for i in range(2))
  x, y = Tensor(a, device="AMD").cast(d), Tensor(b, device="AMD").cast(d)
  want = x.float().numpy().astype(np.float64) @ y.float().numpy().astype(np.float64)
  np.testing.assert_allclose((x @ y).float().numpy(), want, rtol=2e-2, atol=2e-2)

def test_loads_are_waited_for_where_first_read(amd):
  """A load is in flight until an instruction reads it: a * 2 + b issues both loads (a 16-byte vector each), then waits
  for each where its first element is read, vmcnt(1) for a's (b's may still be in flight) at the first multiply,
  vmcnt(0) for b's at the first add. A tensor core's fragments load from LDS back to back before the trip's first WMMA
  (lds_loads_early), each WMMA waiting by the count of the loads after its own: LDS loads retire in order. The emulator,
  where a load's data lands only at the s_waitcnt retiring it, gives numpy's results."""
  from tinycore.codegen import get_program
  a, b = (np.random.default_rng(i).standard_normal(4096).astype(np.float32) for i in range(2))
  src = get_program((Tensor.empty(4096, device="AMD") * 2 + Tensor.empty(4096, device="AMD")).schedule()[-1].ast, amd.renderer).src
  lines = [l.strip() for l in src.splitlines()]
  loads = [l for l in lines if l.startswith(("global_load", "s_waitcnt vmcnt"))]
  assert [l.split()[0] for l in loads] == ["global_load_b128", "global_load_b128", "s_waitcnt", "s_waitcnt"] and \
    loads[2:] == ["s_waitcnt vmcnt(1)", "s_waitcnt vmcnt(0)"], loads
  after = lambda w: lines[lines.index(w) + 1].split()[0]
  assert after("s_waitcnt vmcnt(1)").startswith("v_mul_f32") and after("s_waitcnt vmcnt(0)").startswith(("v_add_f32", "v_fma_f32")), src
  np.testing.assert_array_equal((Tensor(a, device="AMD") * 2 + Tensor(b, device="AMD")).numpy(), a * 2 + b)
  x, y = (Tensor(np.random.default_rng(i).standard_normal((128, 128)).astype(np.float16), device="AMD") for i in range(2))
  loop = innermost_loop(get_program((x @ y).schedule()[-1].ast, amd.renderer).src)
  first = next(i for i, l in enumerate(loop) if l.startswith("v_wmma"))
  reads = [l for l in loop if l.startswith("ds_load")]
  waits = [int(m.group(1)) for l in loop[first - 1:] if (m := re.fullmatch(r"s_waitcnt lgkmcnt\((\d+)\)", l))]
  assert all(l.startswith("ds_load") for l in loop if l.startswith("ds_")) and len(reads) == sum(l.startswith("ds_load") for l in loop[:first]), loop
  assert len(waits) >= 2 and waits[0] > 0 and waits == sorted(waits, reverse=True) and waits[-1] == 0, loop
  np.testing.assert_allclose((x @ y).float().numpy(), x.float().numpy() @ y.float().numpy(), rtol=2e-3, atol=2e-3)

def test_loads_issued_early_give_way_where_the_vgprs_run_out(amd, monkeypatch):
  """LDS loads issued early (lds_loads_early) hold VGPRs longer: where a kernel then needs more than the target has, it
  is rendered with each load at its place; where it needs more even so, the error says so."""
  from tinycore.codegen import get_program
  import tinygrad_amd.renderer as R
  x = Tensor.empty(128, 128, device="AMD", dtype=dtypes.float16)
  spec = get_program((x @ x).schedule()[-1].ast, amd.renderer)
  early, late = (R.AMDKernel(amd.renderer, spec.name, spec.uops, ahead).write_all().max_v for ahead in (R.LOADS_AHEAD, 0))
  assert early > late, (early, late)
  monkeypatch.setattr(R, "VGPRS", late)
  assert f".vgprs {late}\n" in amd.renderer.render(spec.name, spec.uops)
  monkeypatch.setattr(R, "VGPRS", late - 1)
  with pytest.raises(UnsupportedError, match=f"more than {late - 1} VGPRs"): amd.renderer.render(spec.name, spec.uops)

def test_a_loop_that_may_run_no_trip_settles_the_loads_before_it(amd):
  """A row's scale is loaded before a sum of a variable length and read inside the loop and after it. Its wait would sit
  in the loop's first trip, which a length of 0 skips: the loads in flight are waited for before such a loop (without
  that, the emulator's add after the loop reads the scale's VGPR while its load is in flight)."""
  from tinycore import Variable
  a, b = np.arange(64, dtype=np.float32).reshape(8, 8), np.arange(8, dtype=np.float32) + 1
  v = Variable("v", 0, 8)
  for k in (0, 3):
    scale = Tensor(b, device="AMD")
    got = ((Tensor(a, device="AMD")[:, :v.bind(k)] * scale.reshape(8, 1)).sum(1) + scale).numpy()
    np.testing.assert_array_equal(got, (a[:, :k] * b[:, None]).sum(1) + b)

def test_loop_bounds_live_through_their_loop(amd):
  # the inner loop's bound (a value computed before it) is compared at the top of every iteration: its register must not
  # be reused inside the loop (it was, and the sum of 257 elements read past the buffer)
  for n in (255, 257, 1025, 4097):
    x = np.arange(n, dtype=np.float32)
    assert Tensor(x, device="AMD").sum().item() == x.sum(), n

def program_for(t: Tensor):
  """The rendered program of t's last kernel (no device)."""
  from tinycore.codegen import get_program
  from tinycore.uop import Ops
  from tinygrad_amd.renderer import RDNA3Renderer
  return get_program([si for si in t.schedule() if si.ast.op is Ops.SINK][-1].ast, RDNA3Renderer())

def test_thread_blocks_with_lds_end_to_end(amd):
  """A staged matmul (tiles of both operands in LDS between barriers), a grouped sum (partials through LDS, each group's
  first lane storing under a narrowed EXEC) and softmax: numpy's results, with LDS traffic and barriers counted."""
  from tinygrad_amd import emulator
  rng = np.random.default_rng(4)
  a, b, x = (rng.standard_normal(s).astype(np.float32) for s in ((64, 48), (48, 80), (8, 1024)))
  A, B, X = (Tensor(v, device="AMD") for v in (a, b, x))
  assert "s_and_b32 exec_lo, exec_lo, vcc_lo\n  global_store_b32" in program_for(X.sum(1)).src
  for make, want in ((lambda: A @ B, a.astype(np.float64) @ b), (lambda: X.sum(1), x.astype(np.float64).sum(1)),
                     (lambda: X.softmax(1), np.exp(x) / np.exp(x).sum(1, keepdims=True))):
    emulator.LAUNCHES.clear()
    np.testing.assert_allclose(make().numpy(), want, rtol=1e-5, atol=1e-5)
    assert any(c.shared_written and c.shared_read and c.barriers and c.threads > c.blocks for _, c in emulator.LAUNCHES), emulator.LAUNCHES

def test_a_row_kernel_reads_its_input_once(amd):
  """softmax and layernorm of 8 rows of 1024 floats on the RDNA3 emulator: one launch each, a workgroup of 256 lanes
  per row, each lane 4 floats 256 apart (the steps of the row written out, not a loop): the row's statistics go
  through LDS between barriers, and global memory sees the input read once and the output written once."""
  from tinygrad_amd import emulator
  x = np.random.default_rng(3).standard_normal((8, 1024)).astype(np.float32)
  X = Tensor(x, device="AMD").realize()
  mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
  e = np.exp(x - x.max(1, keepdims=True))
  for t, want in ((X.softmax(-1), e / e.sum(1, keepdims=True)), (X.layernorm(), (x - mean) / np.sqrt(var + 1e-5))):
    emulator.LAUNCHES.clear()
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)
    assert len(emulator.LAUNCHES) == 1, emulator.LAUNCHES
    c = emulator.LAUNCHES[0][1]
    assert (c.global_read, c.global_written, c.blocks, c.threads) == (x.nbytes, x.nbytes, 8, 8 * 256) and c.barriers > 0 and c.shared_read > 0, c

def test_the_staged_matmul_without_its_wait_before_the_barrier_is_a_race(amd):
  """The renderer waits for a wave's LDS accesses (s_waitcnt lgkmcnt(0)) before each s_barrier; the staged matmul's
  kernel with those waits taken out (its tile stores may still be in flight when the other waves read the tile after
  the barrier) is caught by the emulator, where it would give the right numbers."""
  import dataclasses
  from tinycore.runtime.runner import CompiledRunner
  from tinycore.runtime.errors import DeviceError
  from tinycore.uop import Ops
  rng = np.random.default_rng(6)
  A, B = (Tensor(rng.standard_normal(s).astype(np.float32), device="AMD").realize() for s in ((64, 48), (48, 80)))
  si = [si for si in (A @ B).schedule() if si.ast.op is Ops.SINK][-1]
  spec = program_for(A @ B)
  unwaited = dataclasses.replace(spec, src=spec.src.replace("s_waitcnt lgkmcnt(0)\n  s_barrier", "s_barrier"))
  assert unwaited.src.count("s_barrier") == spec.src.count("s_barrier") > unwaited.src.count("lgkmcnt(0)\n  s_barrier") == 0
  CompiledRunner("AMD", spec)(si.bufs, {}, wait=True)
  with pytest.raises(DeviceError, match=r"ds_load_b\d+ at byte \d+ by wave \d+ of workgroup \d+ reads LDS byte \d+, which wave \d+ .* wrote .* a race"):
    CompiledRunner("AMD", unwaited)(si.bufs, {}, wait=True)

@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_tensor_core_matmuls_end_to_end(amd, dt):
  """v_wmma on a multiple of its 16x16x16 tile and on sizes padded to it: exact products summed in float32."""
  rng = np.random.default_rng(5)
  for m, k, n in ((32, 48, 64), (20, 11, 9)):
    A, B = (Tensor(rng.uniform(-2, 2, s).astype(np.float32), device="AMD").cast(getattr(dtypes, dt)).realize() for s in ((m, k), (k, n)))
    out = A.matmul(B, dtype=dtypes.float32)
    assert f"v_wmma_f32_16x16x16_{'f16' if dt == 'float16' else 'bf16'}" in program_for(out).src
    want = A.float().numpy().astype(np.float64) @ B.float().numpy().astype(np.float64)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)

def test_rendered_lds_and_wmma_kernels_disassemble_like_llvm_objdump():
  objdump = llvm_tool("llvm-objdump")
  from tinygrad_amd.assembler import RDNA3Assembler
  work = [Tensor.empty(64, 64) @ Tensor.empty(64, 64), Tensor.empty(8, 1024).sum(1)]
  work += [Tensor.empty(48, 32, dtype=dt) @ Tensor.empty(32, 40, dtype=dt) for dt in (dtypes.float16, dtypes.bfloat16)]
  with tempfile.TemporaryDirectory() as tmp:
    blobs = {os.path.join(tmp, f"k{i}.co"): RDNA3Assembler().assemble(program_for(t).src) for i, t in enumerate(work)}
    for path, blob in blobs.items():
      with open(path, "wb") as f: f.write(blob)
    assert llvm_check.compare_code_objects(blobs, objdump) == []
  names = {d.inst.base for blob in blobs.values() for d in decode(parse(blob).code)}
  # (a tile's copy and its reads are 16-byte vectors: memory_vector; the sum's partials one word each)
  assert {"ds_store_b32", "ds_store_b128", "ds_load_b128", "global_load_b128", "global_store_b128", "s_barrier",
          "v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16"} <= names

@pytest.mark.parametrize("dt, access", [(dtypes.float32, "b128"), (dtypes.float64, "b128"), (dtypes.float16, "b64"), (dtypes.int16, "b64"),
                                        (dtypes.uint16, "b64"), (dtypes.int8, "b32"), (dtypes.uint8, "b32"), (dtypes.int32, "b128")])
def test_elementwise_work_loads_and_stores_vectors_of_every_element_size(dt, access, amd):
  """A thread's consecutive elements (4 a thread, upcast_max; float64 2) are one global_load and one global_store of
  their bytes: 8/16-bit ones packed in a VGPR, taken out sign- or zero-extended (v_bfe_i32 / v_bfe_u32) and packed again
  from computed values whose high bits are anything (a * 3 - b wraps); float64s a VGPR pair each. Results equal numpy's,
  negative values too."""
  r = np.random.default_rng(4)
  a, b = (r.integers(-100, 100, 4096) if dtypes.is_int(dt) else r.standard_normal(4096) * 50 for _ in range(2))
  from tinycore.dtype import to_np_dtype
  a, b = (np.asarray(v).astype(to_np_dtype(dt)) for v in (a, b))
  x, y = Tensor(a, device="AMD"), Tensor(b, device="AMD")
  src = program_for(x * 3 - y).src
  assert sorted({l.split()[0] for l in src.splitlines() if l.strip().startswith(("global_load", "global_store"))}) == \
    [f"global_load_{access}", f"global_store_{access}"], src
  with np.errstate(over="ignore"): want = a * a.dtype.type(3) - b
  np.testing.assert_array_equal((x * 3 - y).numpy(), want)

def test_elementwise_work_of_many_operations_keeps_one_element_a_thread(amd):
  """Copies of a long computation per thread multiply the VGPRs it holds, which AMD cannot spill: a float64 tangent (982
  operations once the renderer's expansions are made) at 2 elements a thread needed more than 256 VGPRs and was refused.
  Work above ELEMENT_OPS_MOST operations an element keeps one a thread (element-by-element accesses); an exp, a few
  operations, still takes 4 as vectors. The tangent's results match numpy's."""
  from tinycore.codegen.opt.gpu import ELEMENT_OPS_MOST
  assert ELEMENT_OPS_MOST < 198   # a float32 sine's expansion
  x = np.linspace(-3, 3, 4096)
  t = Tensor(x, device="AMD")
  assert "global_load_b128" not in (src := program_for(t.tan()).src) and "global_load_b64" in src, src
  assert "global_load_b128" not in program_for(t.float().sin()).src and "global_load_b128" in program_for(t.float().exp()).src
  np.testing.assert_allclose(t.tan().numpy(), np.tan(x), rtol=1e-12)

def test_half_constants_are_their_bits(amd):
  """A half is held as its 16 bits: a constant it is selected against (sigmoid's 1, hardtanh's bounds) is too."""
  x = np.linspace(-3, 3, 15).astype(np.float16)
  np.testing.assert_allclose(Tensor(x, device="AMD").sigmoid().numpy(), 1 / (1 + np.exp(-x.astype(np.float64))), atol=1e-3)
  assert Tensor(x, device="AMD").clip(-1, 1).tolist() == np.clip(x, -1, 1).tolist()

def test_products_join_their_accumulator_rounded_once(amd):
  """-(1 + 2^-11) + x * x with x = 1 + 2^-12: x * x joins the sum rounded once (a v_fma; the sum of two terms is written
  out, its first term a product), which keeps the 2^-24 that rounding x * x first would lose."""
  x = np.float32(1 + 2**-12)
  a, b = np.array([-1, x], np.float32), np.array([1 + 2**-11, x], np.float32)
  dot = (Tensor(a, device="AMD") * Tensor(b, device="AMD")).sum()
  assert program_for(dot).src.count("v_fma_f32") == 1
  assert dot.item() == 2**-24

def test_64bit_integers_and_float64(amd):
  rng = np.random.default_rng(2)
  a = np.concatenate([rng.integers(-2**63, 2**63 - 1, 300, dtype=np.int64), [-2**63, 2**63 - 1, 0, 7, -7]])
  b = np.concatenate([rng.integers(-2**63, 2**63 - 1, 150, dtype=np.int64), rng.integers(-1000, 1000, 150), [-1, 2, 0, 0, 2]]).astype(np.int64)
  A, B = Tensor(a, device="AMD"), Tensor(b, device="AMD")
  with np.errstate(all="ignore"): assert np.array_equal((A * B + A).numpy(), a * b + a)
  q = [0 if y == 0 else int(abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a.tolist(), b.tolist())]
  assert A.idiv(B).tolist() == [((v + 2**63) % 2**64) - 2**63 for v in q]
  assert np.array_equal(A.cast(dtypes.float32).numpy(), a.astype(np.float32))   # rounded once
  x = np.concatenate([rng.standard_normal(64) * 4, [1e-310, 5e-324, 1e300, -0.0, np.inf, np.nan]])
  X = Tensor(x, device="AMD")
  with np.errstate(all="ignore"):
    np.testing.assert_allclose((X / 3.0 + X.reciprocal()).numpy(), x / 3.0 + 1 / x, rtol=1e-14)
    np.testing.assert_allclose(X.exp2().numpy(), np.exp2(x), rtol=1e-14)
    np.testing.assert_allclose(X.abs().log2().numpy(), np.log2(np.abs(x)), rtol=1e-14)
    np.testing.assert_allclose(X[:64].sin().numpy(), np.sin(x[:64]), rtol=1e-13, atol=1e-15)
    assert np.array_equal(X.cast(dtypes.float16).numpy(), x.astype(np.float16), equal_nan=True)   # one rounding

def test_float32_division_is_correctly_rounded_at_the_ends_of_the_range(amd):
  rng = np.random.default_rng(3)
  a = np.concatenate([rng.standard_normal(300).astype(np.float32) * 10, np.array([1, 1, 1e-40, 3e38, 1e-45, 0, np.inf, 1, 1e30], np.float32)])
  b = np.concatenate([rng.standard_normal(300).astype(np.float32), np.array([1e-40, 3e38, 1e-40, 1e-40, 3e38, 0, 2, -0.0, 1e-10], np.float32)])
  with np.errstate(all="ignore"): want = a / b
  got = (Tensor(a, device="AMD") / Tensor(b, device="AMD")).numpy()
  assert np.array_equal(got, want, equal_nan=True)

def nudged(exact, ulps: int):
  """exact, its results moved by up to `ulps` units in the last place, by a different amount for each input: what an
  approximate hardware instruction (v_rcp_f32: about 1 ulp) may return where the emulator computes exactly."""
  def f(a):
    r = np.asarray(exact(a))
    ints = np.int64 if r.dtype == np.float64 else np.int32
    h = (np.asarray(a).view(ints).astype(np.int64) * 0x9E3779B1 >> 7) % (2 * ulps + 1) - ulps
    return np.where(np.isfinite(r) & (r != 0), (r.view(ints) + h.astype(ints)).view(r.dtype), r)
  return f

def hard_quotients(ft, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
  """Numerators and denominators whose quotients are hard to round: random significands over the whole exponent range
  (subnormal and overflowing quotients), all-ones significands, quotients on and next to the subnormals' midpoints."""
  rng = np.random.default_rng(5)
  fi = np.finfo(ft)
  ints = np.uint64 if ft == np.float64 else np.uint32
  bits = lambda k: rng.integers(0, np.iinfo(ints).max, k, dtype=ints, endpoint=True).view(ft)
  a, b = bits(n), bits(n)
  ones = np.nextafter(ft(2), ft(0)) * ft(2.0) ** rng.integers(fi.minexp, fi.maxexp, 200).astype(ft)   # 1.11...1 * 2**e
  tiny = fi.smallest_subnormal * rng.integers(1, 4000, 200).astype(ft)
  near2 = np.array([2, np.nextafter(ft(2), ft(3)), np.nextafter(ft(2), ft(1)), 6, 10], ft)
  a = np.concatenate([a, bits(200), tiny, [ft(1), fi.max, fi.tiny, -fi.tiny, 3 * fi.smallest_subnormal]])
  b = np.concatenate([b, ones, np.resize(near2, 200), [np.nextafter(ft(1), ft(2)), np.nextafter(ft(1), ft(0)), ft(3), ft(2) ** (fi.maxexp - 1), ft(2)]])
  keep = np.isfinite(a) & np.isfinite(b)
  return a[keep], b[keep]

@pytest.mark.parametrize("rough", [False, True], ids=["exact", "approximate"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_division_is_correctly_rounded_even_with_an_approximate_reciprocal(amd, monkeypatch, rough, dt):
  # the hardware's v_rcp is approximate: with the emulator's reciprocals moved by up to 1 ulp (float32) or 2**30 ulps
  # (float64, about 2**-22 relative), FDIV and RECIP are still numpy's correctly rounded division, byte for byte
  tc = pytest.importorskip("tinycore_conformance.uops", reason="tinycore-conformance is not installed")
  from tinygrad_amd import emulator
  if rough:
    monkeypatch.setitem(emulator.VALU, "v_rcp_f32", nudged(emulator.VALU["v_rcp_f32"], 1))
    monkeypatch.setitem(emulator.VALU, "v_rcp_f64", nudged(emulator.VALU["v_rcp_f64"], 2**30))
    x = np.array([3, 7, 1e-3, 5e30], np.float32)   # the nudge is real: v_rcp itself is off somewhere
    assert not np.array_equal(emulate(["v_rcp_f32_e32 v4, v1"], x)[:4].view(np.float32), 1 / x)
  ft = np.dtype(dt).type
  a, b = hard_quotients(ft)
  with np.errstate(all="ignore"): want, rwant = a / b, 1 / b
  got = np.frombuffer(tc.run_op("AMD", "FDIV", dt, list(a), list(b)), ft)
  assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), [(x, y, g, w) for x, y, g, w in zip(a, b, got, want) if g != w][:5]
  got = np.frombuffer(tc.run_op("AMD", "RECIP", dt, list(b)), ft)
  assert np.array_equal(got.view(np.uint8), rwant.view(np.uint8)), [(y, g, w) for y, g, w in zip(b, got, rwant) if g != w][:5]

@pytest.mark.parametrize("rough", [False, True], ids=["exact", "approximate"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_sqrt_is_correctly_rounded_even_with_an_approximate_rsq(amd, monkeypatch, rough, dt):
  # v_rsq and v_sqrt are approximate on the hardware (v_rsq_f32 about 1 ulp): with v_rsq moved by up to 2**-8 relative
  # (far coarser than that, so the last correction really picks neighbours), SQRT is still numpy's, byte for byte, on
  # every kind of input: random bits, subnormals, roots next to a midpoint, squares
  tc = pytest.importorskip("tinycore_conformance.uops", reason="tinycore-conformance is not installed")
  from tinygrad_amd import emulator
  if rough:
    for name, ulps in (("v_rsq_f32", 2**15), ("v_sqrt_f32", 1), ("v_rsq_f64", 2**44), ("v_sqrt_f64", 2**44)):
      monkeypatch.setitem(emulator.VALU, name, nudged(emulator.VALU[name], ulps))
  ft = np.dtype(dt).type
  ints = np.uint64 if ft == np.float64 else np.uint32
  rng = np.random.default_rng(6)
  x = np.abs(rng.integers(0, np.iinfo(ints).max, 3000, dtype=ints, endpoint=True).view(ft))
  sq = np.square(rng.integers(1, 2**11, 300).astype(ft)) * ft(2.0) ** rng.integers(-60, 60, 300).astype(ft)
  fi = np.finfo(ft)
  # 1 + odd * eps: the root is just under the midpoint 1 + odd * eps / 2 (by about odd**2 * eps**2 / 8), the hardest case
  hard = (1 + (2 * rng.integers(0, 2048, 300) + 1) * fi.eps).astype(ft) * ft(4.0) ** rng.integers(-30, 30, 300).astype(ft)
  with np.errstate(all="ignore"):
    x = np.concatenate([x, hard, np.nextafter(hard, ft(np.inf)), sq, np.nextafter(sq, ft(0)), np.nextafter(sq, ft(np.inf)), fi.smallest_subnormal * rng.integers(1, 10**6, 300).astype(ft),
                        [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, fi.max, fi.tiny, fi.smallest_subnormal]]).astype(ft)
    want = np.sqrt(x)
  got = np.frombuffer(tc.run_op("AMD", "SQRT", dt, list(x)), ft)
  same = (got.view(ints) == want.view(ints)) | (np.isnan(got) & np.isnan(want))
  assert same.all(), [(v, g, w) for v, g, w in zip(x[~same], got[~same], want[~same])][:5]

def test_exp2_log2_never_hand_the_hardware_a_subnormal(amd, monkeypatch):
  # the hardware's v_exp_f32/v_log_f32 may flush subnormals: with the emulator's flushing them too, EXP2 into the
  # subnormal results and LOG2 of subnormal inputs are still within 2 ulps
  tc = pytest.importorskip("tinycore_conformance.uops", reason="tinycore-conformance is not installed")
  from tinygrad_amd import emulator
  tiny = np.finfo(np.float32).tiny
  flush = lambda x: np.where(np.abs(x) < tiny, np.float32(0) * x, x)
  monkeypatch.setitem(emulator.VALU, "v_exp_f32", lambda a: flush(np.exp2(a)))
  monkeypatch.setitem(emulator.VALU, "v_log_f32", lambda a: np.log2(flush(a)))
  x = np.linspace(-149, -120, 500).astype(np.float32)
  got = np.frombuffer(tc.run_op("AMD", "EXP2", "float32", list(x)), np.float32)
  ulp = np.spacing(np.exp2(x.astype(np.float64)).astype(np.float32))
  assert (np.abs(got - np.exp2(x.astype(np.float64))) <= 2 * ulp).all()
  y = (np.finfo(np.float32).smallest_subnormal * np.arange(1, 2**23, 4099)).astype(np.float32)
  got = np.frombuffer(tc.run_op("AMD", "LOG2", "float32", list(y)), np.float32)
  want = np.log2(y.astype(np.float64))
  assert (np.abs(got - want) <= 2 * np.abs(np.spacing(want.astype(np.float32)))).all()

def test_integer_division_is_exact_on_random_and_edge_values(amd):
  rng = np.random.default_rng(1)
  a = np.concatenate([rng.integers(0, 2**32, 4000, dtype=np.uint64), [2**32 - 1, 2**32 - 1, 1, 0]]).astype(np.uint32)
  b = np.concatenate([rng.integers(1, 2**32, 2000, dtype=np.uint64), rng.integers(1, 70000, 2000), [1, 2**32 - 1, 2**32 - 1, 7]]).astype(np.uint32)
  A, B = Tensor(a, device="AMD"), Tensor(b, device="AMD")
  assert np.array_equal(A.idiv(B).numpy(), a // b)
  assert np.array_equal((A.fmod(B)).numpy(), a % b)

# ***** KFD: the ioctl structures against the installed kernel header *****

def test_kfd_structures_match_kfd_ioctl_h(tmp_path):
  """Sizes, field offsets and ioctl numbers of our ctypes structures, compared with what a C compiler makes of
  <linux/kfd_ioctl.h> (linux-libc-dev)."""
  import ctypes, shutil
  from tinygrad_amd import kfd
  cc, header = shutil.which("cc") or shutil.which("gcc"), "/usr/include/linux/kfd_ioctl.h"
  if cc is None or not os.path.exists(header):
    why = "needs a C compiler and linux/kfd_ioctl.h (apt-get install gcc linux-libc-dev)"
    if os.environ.get("CI"): pytest.fail(f"CI is set but the test {why}")
    pytest.skip(why)
  lines, expect = [], []
  for name, (_, nr, st) in kfd.IOCTLS.items():
    lines.append(f'printf("%zu\\n", sizeof(struct {st.__name__}));'); expect.append(ctypes.sizeof(st))
    for f, _ in st._fields_:
      lines.append(f'printf("%zu\\n", offsetof(struct {st.__name__}, {f}));'); expect.append(getattr(st, f).offset)
    lines.append(f'printf("%lu\\n", (unsigned long)AMDKFD_IOC_{name});'); expect.append(kfd.IOCTL_NUMBERS[name])
  (tmp_path / "drm").mkdir()   # the header includes <drm/drm.h> (libdrm-dev) for nothing these structures use
  (tmp_path / "drm" / "drm.h").write_text("#include <linux/types.h>\n")
  src = tmp_path / "layout.c"
  src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <linux/kfd_ioctl.h>\nint main(void) {\n" + "\n".join(lines) + "\nreturn 0; }\n")
  subprocess.run([cc, "-I", str(tmp_path), "-o", str(tmp_path / "layout"), str(src)], check=True)
  got = [int(x) for x in subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout.split()]
  assert got == expect, [(l, g, e) for l, g, e in zip(lines, got, expect) if g != e]

def test_aql_dispatch_packet_layout():
  from tinygrad_amd.kfd import dispatch_packet
  pkt = dispatch_packet(0x1000, 0x2000, 0x3000, (300, 2, 1), (128, 1, 1), 512)
  assert len(pkt) == 64 and pkt[0] == 2 and struct.unpack_from("<H", pkt, 2)[0] == 3   # kernel dispatch, 3 dimensions
  assert struct.unpack_from("<3H", pkt, 4) == (128, 1, 1) and struct.unpack_from("<3I", pkt, 12) == (300, 2, 1)
  assert struct.unpack_from("<IQQ", pkt, 28) == (512, 0x1000, 0x2000) and struct.unpack_from("<Q", pkt, 56)[0] == 0x3000

def test_without_kfd_the_driver_says_what_to_do(monkeypatch):
  from tinygrad_amd import kfd
  from tinycore.runtime.errors import DeviceError
  monkeypatch.setattr(kfd, "KFD_PATH", "/nonexistent/kfd")
  with pytest.raises(DeviceError, match="AMD_EMULATE=1"): kfd.KFDDevice(0)
