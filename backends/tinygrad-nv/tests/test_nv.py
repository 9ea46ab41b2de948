"""tinygrad-nv: ptxas accepts every kernel of the reference workloads for sm_90 and sm_80, the emulator's PTX semantics, launches."""
from __future__ import annotations
import itertools, os, re, subprocess, sys
import numpy as np
import pytest

if not os.environ.get("CI"): pytest.importorskip("tinygrad_nv", reason="tinygrad-nv is not installed (pip install -e backends/tinygrad-nv)")
os.environ.setdefault("NV_EMULATE", "1")   # before tinycore reads its backends: these tests run kernels on the emulator
from tinycore import Tensor, Device, nn, dtypes
from tinycore.uop import UOp, Ops
from tinycore.codegen import get_program
from tinycore.nn import optim
from tinycore.nn.state import get_parameters
from tinycore.runtime.errors import CompileError, DeviceError
from tinygrad_nv.renderer import PTXRenderer
from tinygrad_nv.assembler import find_ptxas, run_ptxas, pack, unpack, PTXAssembler
from tinygrad_nv.driver import launches
from tinygrad_nv.ptxas_check import check_cache_dir, retarget
from tinygrad_nv.emulator import EmulatedKernel, EmulatedMemory, EmulatorError

PTXAS = find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None and not os.environ.get("CI"),
                                 reason="ptxas not found: pip install 'tinygrad-nv[ptxas]' (NVIDIA's wheel) or put ptxas on PATH")

def programs(*tensors: Tensor, arch: str = "sm_90") -> list:
  """Every kernel realizing the tensors, rendered for arch (nothing runs)."""
  ren = PTXRenderer(arch)
  sched = tensors[0].schedule(*tensors[1:])
  return [get_program(si.ast, ren) for si in sched if si.ast.op is Ops.SINK]

def matmul() -> list[Tensor]: return [Tensor.empty(64, 96, device="NV") @ Tensor.empty(96, 80, device="NV")]
def conv() -> list[Tensor]:
  x, w = Tensor.empty(4, 3, 16, 16, device="NV", requires_grad=True), Tensor.empty(8, 3, 3, 3, device="NV", requires_grad=True)
  out = x.conv2d(w, padding=1)
  gx, gw = out.sum().gradient(x, w)
  return [out, gx, gw]
def digits_step() -> list[Tensor]:
  from tinycore.examples.train_digits import ConvNet
  prev, Tensor.training = (Tensor.training, Device.DEFAULT), True
  Device.DEFAULT = "NV"   # the model's parameters are made on the default device
  try:
    model = ConvNet()
    opt = optim.Adam(get_parameters(model), lr=1e-3)
    opt.zero_grad()
    loss = model(Tensor.empty(16, 1, 28, 28, device="NV")).sparse_categorical_crossentropy(Tensor.empty(16, dtype=dtypes.int32, device="NV"))
    loss.backward()
    return [loss, *opt.schedule_step()]
  finally: Tensor.training, Device.DEFAULT = prev
def every_dtype() -> list[Tensor]:
  """Each op family in each dtype, and every cast pair: the kernels whose PTX differs by type."""
  out = []
  dts = sorted(PTXRenderer.supported_dtypes, key=lambda d: d.name)
  for dt in dts:
    a, b = Tensor.empty(33, dtype=dt, device="NV"), Tensor.empty(33, dtype=dt, device="NV")
    out += [a + b, a * b, a.maximum(b), a < b, a.eq(b), (a < b).where(a, b), a.sum(), a.max()]
    if dt != dtypes.bool: out += [a - b, -a]
    if dtypes.is_int(dt): out += [a // b, a % b, a ^ b, a | b, a & b, a << 3, a >> 2]
    if dtypes.is_float(dt): out += [a / b, a.sqrt(), a.exp2(), a.log2(), a.sin(), a.trunc(), a.reciprocal()]
    out += [a.cast(o) for o in dts if o != dt]
    out += [a.bitcast(o) for o in dts if o.itemsize == dt.itemsize and o != dt and dtypes.bool not in (o, dt)]
  return out

WORKLOADS = {"matmul": matmul, "conv": conv, "digits_step": digits_step, "every_dtype": every_dtype}

@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_ptxas_accepts(workload, arch):
  """NVIDIA's assembler accepts every kernel (a PTX it refuses raises CompileError); the matmul and conv kernels spill nothing."""
  if PTXAS is None: pytest.fail("CI must check NV kernels with ptxas: install tinygrad-nv[ptxas] (NVIDIA's nvidia-cuda-nvcc-cu12 wheel)")
  progs = programs(*WORKLOADS[workload](), arch=arch)
  assert progs, f"{workload} scheduled no kernels"
  for p in progs:
    _, log = run_ptxas(p.src, arch, PTXAS, "-v")
    if workload in ("matmul", "conv"):
      spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
      assert spills and not any(spills), f"kernel {p.name} spills registers on {arch}:\n{log}"

@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_ptxas_accepts_decompositions(arch):
  """SIN and float MOD arrive decomposed into integer and IEEE float ops (tinycore/codegen/transcendental.py): ptxas takes
  them in every float dtype without spilling, and no sin.approx (good to 2**-20.5 only) is left."""
  if PTXAS is None: pytest.fail("CI must check NV kernels with ptxas: install tinygrad-nv[ptxas] (NVIDIA's nvidia-cuda-nvcc-cu12 wheel)")
  for op, dt in itertools.product((Ops.SIN, Ops.MOD), (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)):
    ins = tuple(UOp(Ops.DEFINE_GLOBAL, dt.ptr(64), (), i + 1) for i in range(1 if op is Ops.SIN else 2))
    p = get_program(UOp(Ops.SINK, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(64), (), 0).store(UOp(op, dt, ins)),)), PTXRenderer(arch))
    assert "sin.approx" not in p.src and not re.search(r"\brem\.f", p.src), f"{op} {dt} was not decomposed"
    _, log = run_ptxas(p.src, arch, PTXAS, "-v")
    assert not any(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)), f"{op} {dt} spills on {arch}:\n{log}"

def test_rendering_for_another_arch_changes_only_the_target():
  """ptxas_check assembles a run's cached sm_90 kernels for sm_80 by retargeting their PTX: that must be exactly what
  the renderer makes for sm_80 (an arch-dependent instruction choice in the renderer fails this, and needs re-rendering)."""
  for make in WORKLOADS.values():
    tensors = make()
    for p90, p80 in zip(programs(*tensors), programs(*tensors, arch="sm_80"), strict=True): assert retarget(p90.src, "sm_80") == p80.src

def cache_entry(blob: bytes) -> None:
  from tinycore.runtime.diskcache import diskcache_put, cache_key
  diskcache_put("binaries", cache_key(blob), blob)

@needs_ptxas
def test_ptxas_check_names_every_kernel_ptxas_refuses(tmp_path, monkeypatch):
  """The check after the emulator's conformance run: every cached kernel through ptxas for sm_90 and sm_80 (one ptxas run
  per batch, a refused batch kernel by kernel), each refusal naming its kernel; exit status 1 from the command line."""
  if PTXAS is None: pytest.fail("CI must check NV kernels with ptxas: install tinygrad-nv[ptxas] (NVIDIA's nvidia-cuda-nvcc-cu12 wheel)")
  monkeypatch.setenv("TINYCORE_CACHE", str(tmp_path))
  asm = PTXAssembler(PTXRenderer())
  good = programs(*matmul(), *conv())
  for p in good: cache_entry(asm.assemble(p.src))
  assert check_cache_dir(str(tmp_path), ["sm_90", "sm_80"], PTXAS, batch=3) == (len(good), [])
  # sm_90 accepts it (the run's own assembler did), sm_80 has no thread-block clusters
  sm90_only = good[0].src.replace(f".entry {good[0].name}(", ".entry only_sm90(").replace("\tret;", "\tmov.u32 %r0, %cluster_ctarank;\n\tret;")
  cache_entry(asm.assemble(sm90_only))
  # cached without a cubin (a run without ptxas): checked for sm_90 here
  cache_entry(pack("sm_90", good[1].src.replace(f".entry {good[1].name}(", ".entry bogus(").replace("\tret;", "\tbogus.instr %r0;\n\tret;").encode(), b""))
  count, problems = check_cache_dir(str(tmp_path), ["sm_90", "sm_80"], PTXAS, batch=3)
  assert count == len(good) + 2 and len(problems) == 3, problems
  assert sorted(re.match(r"NV: ptxas rejected kernel (\w+) for (sm_\d+)", p).groups() for p in problems) == \
    [("bogus", "sm_80"), ("bogus", "sm_90"), ("only_sm90", "sm_80")]
  out = subprocess.run([sys.executable, "-m", "tinygrad_nv.ptxas_check", str(tmp_path)], capture_output=True, text=True)
  assert out.returncode == 1 and f"{len(good) + 2} NV kernels" in out.stdout and "3 problems" in out.stdout, out.stdout + out.stderr

def test_debug4_shows_the_ptx_of_every_kernel_without_a_gpu():
  """Without a GPU (and without NV_EMULATE) a Tensor program on NV prints every kernel's PTX with DEBUG=4, then fails
  saying what is missing."""
  import ctypes
  try: ctypes.CDLL("libcuda.so.1"); pytest.skip("this machine has libcuda.so.1")
  except OSError: pass
  code = """
from tinycore import Tensor
from tinycore.runtime.errors import PluginError
x = Tensor([[1.0, 2.0], [3.0, 4.0]], device="NV")
out = (x.exp().contiguous() @ x).relu().sum(axis=0)
print("KERNELS", sum(si.ast.op.name == "SINK" for si in out.schedule()), flush=True)
try: out.numpy()
except PluginError as e: print("ERROR", e)
"""
  env = {k: v for k, v in os.environ.items() if k not in ("NV_EMULATE", "DEV")}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, "DEBUG": "4"}, timeout=120)
  assert out.returncode == 0, out.stderr
  n = int(re.search(r"^KERNELS (\d+)$", out.stdout, re.M).group(1))
  before, _, error = out.stdout.partition("\nERROR ")
  assert n >= 2 and len(re.findall(r"^\.visible \.entry \w+\(", before, re.M)) == n, out.stdout
  assert "libcuda.so.1" in error and "NV_EMULATE=1" in error

@needs_ptxas
def test_ptxas_error_names_kernel():
  bad = PTXRenderer().render("k", []).replace("ret;", "bogus.instr %r0;\n\tret;")
  with pytest.raises(CompileError, match=r"NV: ptxas rejected kernel k"):
    PTXAssembler(PTXRenderer()).assemble(bad)

def test_container_round_trip_and_corruption():
  blob = pack("sm_90", b"// ptx", b"\x7fELF")
  assert unpack(blob) == ("sm_90", "// ptx", b"\x7fELF")
  for bad in (blob[:-1], b"junk" + blob, blob.replace(b"TCNV2", b"TCNV1")):   # truncated, foreign, an older format
    with pytest.raises(CompileError, match="NV: corrupt kernel binary"): unpack(bad)

def test_renderer_never_opens_the_device():
  src = programs(Tensor.empty(8, device="NV") * 2)[0].src
  assert ".entry E_8" in src and ".target sm_90" in src and ".ftz" not in src

def test_launch_slices_tall_grids():
  """gridDim.y/z are at most 65535: taller launches are slices with the first block passed in, covering every block once."""
  src = "// launch: groups"
  got = launches(src, (2, 70000, 3), (4, 1, 1))
  assert all(g[1] <= 65535 and g[2] <= 65535 for g, *_ in got)
  covered = sorted((z0 + z, y0 + y) for g, _, y0, z0 in got for z in range(g[2]) for y in range(g[1]))
  assert covered == [(z, y) for z in range(3) for y in range(70000)]

def test_tall_launch_runs():
  """A kernel whose second global dimension is past 65535 computes every element (on the emulator)."""
  x = Tensor(np.arange(3 * 70000, dtype=np.float32).reshape(70000, 3), device="NV")
  got = (x * 2).numpy()
  assert np.array_equal(got, np.arange(3 * 70000, dtype=np.float32).reshape(70000, 3) * 2)

# ***** the emulator on hand-written PTX *****

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 data0)\n{\n"
def run_ptx(body: str, n: int, regs: str = ".reg .pred %p<4>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<4>;\n") -> np.ndarray:
  mem = EmulatedMemory()
  out = mem.alloc(4 * n)
  EmulatedKernel(HEAD + regs + body + "\n}", "k", mem)({"data0": out}, (1, 1, 1), (n, 1, 1))
  return mem.span(out, 4 * n).view(np.int32).copy()

def test_emulator_divergent_loop():
  """Each lane loops tid times (divergent trip counts), then all lanes reconverge and store: out[i] = 0 + 1 + ... + (i-1)."""
  body = """
  ld.param.u64 %rd0, [data0];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, 0;
  mov.u32 %r2, 0;
$top:
  setp.ge.s32 %p0, %r1, %r0;
  @%p0 bra $done;
  add.s32 %r2, %r2, %r1;
  add.s32 %r1, %r1, 1;
  bra $top;
$done:
  mul.wide.s32 %rd1, %r0, 4;
  add.s64 %rd1, %rd1, %rd0;
  st.global.s32 [%rd1], %r2;
  ret;"""
  i = np.arange(8)
  assert np.array_equal(run_ptx(body, 8), i * (i - 1) // 2)

def test_emulator_refuses_unknown_instructions():
  with pytest.raises(EmulatorError, match="'tex' is not implemented"): run_ptx("tex.1d.v4.f32.s32 %r0, [%rd0];\nret;", 4)

def test_emulator_refuses_out_of_bounds():
  body = "ld.param.u64 %rd0, [data0];\nst.global.s32 [%rd0+4096], %r0;\nret;"
  with pytest.raises(EmulatorError, match="outside one allocated buffer"): run_ptx(body, 4)

def test_emulator_ptx_semantics():
  """The PTX rules the renderer leans on: float->int cvt saturates with NaN -> 0, shifts past the width clamp."""
  regs = ".reg .pred %p<4>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<4>;\n.reg .f32 %f<4>;\n"
  body = """
  ld.param.u64 %rd0, [data0];
  mov.f32 %f0, 0f7F800000;
  cvt.rzi.s32.f32 %r0, %f0;
  st.global.s32 [%rd0], %r0;
  mov.f32 %f1, 0f7FC00000;
  cvt.rzi.s32.f32 %r1, %f1;
  st.global.s32 [%rd0+4], %r1;
  mov.s32 %r2, -8;
  shr.s32 %r3, %r2, 40;
  st.global.s32 [%rd0+8], %r3;
  shl.b32 %r4, %r2, 33;
  st.global.s32 [%rd0+12], %r4;
  ret;"""
  mem = EmulatedMemory()
  out = mem.alloc(16)
  EmulatedKernel(HEAD + regs + body + "\n}", "k", mem)({"data0": out}, (1, 1, 1), (1, 1, 1))
  assert mem.span(out, 16).view(np.int32).tolist() == [2**31 - 1, 0, -1, 0]

def test_no_gpu_error_names_what_is_missing(monkeypatch):
  """Without NV_EMULATE and without libcuda, opening NV says what is missing and how to get the emulator."""
  import ctypes
  from tinygrad_nv import driver
  try: ctypes.CDLL("libcuda.so.1"); pytest.skip("this machine has libcuda.so.1")
  except OSError: pass
  monkeypatch.delenv("NV_EMULATE")
  with pytest.raises(DeviceError, match=r"libcuda\.so\.1.*NV_EMULATE=1"): driver.NVDriver(0)
  assert driver.gpu_count() == 0
