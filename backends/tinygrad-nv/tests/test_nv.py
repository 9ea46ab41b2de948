"""tinygrad-nv: ptxas accepts every kernel of the reference workloads for sm_90 and sm_80, the emulator's PTX semantics, launches."""
from __future__ import annotations
import itertools, json, os, re, subprocess, sys
import numpy as np
import pytest

if not os.environ.get("CI"): pytest.importorskip("tinygrad_nv", reason="tinygrad-nv is not installed (pip install -e backends/tinygrad-nv)")
os.environ.setdefault("NV_EMULATE", "1")   # before tinycore reads its backends: these tests run kernels on the emulator
from tinycore import Tensor, Device, nn, dtypes, Context
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

def tensor_cores() -> list[Tensor]:
  """fp16 and bf16 matmuls on mma.sync, their fragments loaded with each ldmatrix form (x4 and x2, plain and .trans)."""
  out = []
  for dt in (dtypes.float16, dtypes.bfloat16):
    a, b = Tensor.empty(512, 512, dtype=dt, device="NV"), Tensor.empty(512, 512, dtype=dt, device="NV")
    out += [a @ b, a.T @ b, a @ b.T]
  return out

WORKLOADS = {"matmul": matmul, "conv": conv, "digits_step": digits_step, "every_dtype": every_dtype, "tensor_cores": tensor_cores}

@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_ptxas_accepts(workload, arch):
  """NVIDIA's assembler accepts every kernel (a PTX it refuses raises CompileError); the matmul, conv and tensor-core
  kernels spill nothing."""
  if PTXAS is None: pytest.fail("CI must check NV kernels with ptxas: install tinygrad-nv[ptxas] (NVIDIA's nvidia-cuda-nvcc-cu12 wheel)")
  tensors = WORKLOADS[workload]()
  # tensor-core matmuls scheduled together share their inputs' loads in one kernel of three sums, which no tensor core
  # takes: each is scheduled alone, and each kernel must be the mma one
  progs = [p for t in tensors for p in programs(t, arch=arch)] if workload == "tensor_cores" else programs(*tensors, arch=arch)
  assert progs, f"{workload} scheduled no kernels"
  if workload == "tensor_cores": assert all("mma.sync" in p.src for p in progs), [p.name for p in progs if "mma.sync" not in p.src]
  for p in progs:
    _, log = run_ptxas(p.src, arch, PTXAS, "-v")
    if workload in ("matmul", "conv", "tensor_cores"):
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
  # without a local_size a kernel of thread blocks gets blocks of one thread: three sizes each, never more (a longer
  # tuple would shift every later argument of cuLaunchKernel)
  assert launches(src, (16, 1, 1), None) == [((16, 1, 1), (1, 1, 1), 0, 0)] and launches(src, (4,), (8,)) == [((4, 1, 1), (8, 1, 1), 0, 0)]

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

# ***** the emulator follows the PTX ISA and the measured hardware, not the core's definition *****

DATA = os.path.join(os.path.dirname(__file__), "data")
PTX_TYPE = {np.float32: "f32", np.float64: "f64", np.int32: "s32", np.uint32: "u32", np.int64: "s64", np.uint64: "u64"}
REG = {"f32": "f", "f64": "fd", "s32": "r", "u32": "r", "s64": "rd", "u64": "rd"}

def emulate(instr: str, out: str, *args: np.ndarray) -> np.ndarray:
  """`instr` (with {d} for its destination, {a} {b} {c} for its operands, registers of the operands' types) run by one
  thread per element of the arrays; the destinations as a numpy array of type `out`."""
  from tinygrad_nv.emulator import NP
  n = len(args[0])
  block = min(n, 256)
  args = tuple(np.concatenate([a, np.zeros(-n % block, a.dtype)]) for a in args)   # whole blocks of up to 256 threads
  tys = [PTX_TYPE[a.dtype.type] for a in args]
  lines = ["mov.u32 %r7, %tid.x;", "mov.u32 %r6, %ctaid.x;", "mov.u32 %r5, %ntid.x;", "mad.lo.s32 %r7, %r6, %r5, %r7;"]
  for i, ty in enumerate([out, *tys]):
    lines += [f"ld.param.u64 %ad{i}, [data{i}];", f"mul.wide.u32 %ad{8 + i}, %r7, {np.dtype(NP[ty]).itemsize};", f"add.s64 %ad{i}, %ad{i}, %ad{8 + i};"]
  lines += [f"ld.global.{ty} %{REG[ty]}{i}, [%ad{i}];" for i, ty in enumerate(tys, 1)]
  lines += [instr.format(d=f"%{REG[out]}0", **{k: f"%{REG[ty]}{i}" for k, i, ty in zip("abc", range(1, 4), tys)}) + ";",
            f"st.global.{out} [%ad0], %{REG[out]}0;", "ret;"]
  params = ", ".join(f".param .u64 data{i}" for i in range(len(args) + 1))
  regs = ".reg .f32 %f<4>;\n.reg .f64 %fd<4>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<4>;\n.reg .b64 %ad<16>;\n.reg .pred %p<2>;\n"
  ptx = f".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k({params})\n{{\n{regs}" + "\n".join(lines) + "\n}"
  mem, padded = EmulatedMemory(), len(args[0])
  addrs = [mem.alloc(padded * np.dtype(NP[out]).itemsize)] + [mem.alloc(a.nbytes) for a in args]
  for addr, a in zip(addrs[1:], args): mem.span(addr, a.nbytes)[:] = a.view(np.uint8)
  EmulatedKernel(ptx, "k", mem)({f"data{i}": a for i, a in enumerate(addrs)}, (padded // block, 1, 1), (block, 1, 1))
  return mem.span(addrs[0], padded * np.dtype(NP[out]).itemsize).view(NP[out])[:n].copy()

def f32(*xs) -> np.ndarray: return np.array(xs, np.float32)
def bits(x: np.ndarray) -> list[int]: return x.view(np.uint32 if x.itemsize == 4 else np.uint64).tolist()

def test_emulator_reproduces_the_h100_cvt_table():
  """cvt.rzi from f32 and f64 into every integer width over NaN, +-inf, out-of-range and rounding inputs: the emulator gives
  exactly what an H100 gave (NaN from an f64 or into 64 bits is 1 << (bits - 1), not 0: the ISA's Integer Notes)."""
  from tinygrad_nv import edges
  with open(os.path.join(DATA, "h100_cvt_rzi.json")) as f: h100 = json.load(f)
  assert h100["inputs"] == edges.INPUTS and sorted(h100["results"]) == sorted(edges.PAIRS)
  assert edges.differences(edges.on_emulator(), h100) == []

def test_emulator_float_conversions_give_the_canonical_nan():
  """An H100 gave 0x7fff for float16 NaNs of every payload and sign passed through cvt.f32.f16 and cvt.rn.f16.f32 (the GPU
  proof's conformance run: bitcasts of half NaNs that went through float32 and back lost their bits). The emulator does
  the same, so a renderer that routes a bitcast's bits through a conversion fails here as it did on the silicon."""
  body = """
  ld.param.u64 %rd0, [data0];
  mov.u32 %r0, %tid.x;
  shl.b32 %r1, %r0, 5;
  or.b32 %r1, %r1, 0xfc01;
  cvt.u16.u32 %h0, %r1;
  cvt.f32.f16 %f0, %h0;
  cvt.rn.f16.f32 %h1, %f0;
  cvt.u32.u16 %r2, %h1;
  mov.b32 %r3, %f0;
  shr.u32 %r3, %r3, 16;
  shl.b32 %r3, %r3, 16;
  or.b32 %r2, %r2, %r3;
  mul.wide.u32 %rd1, %r0, 4;
  add.s64 %rd1, %rd1, %rd0;
  st.global.u32 [%rd1], %r2;
  ret;"""
  got = run_ptx(body, 8, ".reg .pred %p<4>;\n.reg .b16 %h<4>;\n.reg .b32 %r<8>;\n.reg .f32 %f<4>;\n.reg .b64 %rd<4>;\n").view(np.uint32)
  assert [hex(v) for v in got] == ["0x7fff7fff"] * 8   # f32 0x7fffffff's high half, f16 0x7fff

def test_edge_tables_run_through_an_opened_device():
  """The GPU proof's path (tools/gpu_proof.py): the raw PTX assembled, loaded and launched through the NV device (here the
  emulator) gives the emulator's tables; and the .approx sweep's errors stay inside the ISA's bounds."""
  from tinygrad_nv import edges
  with open(os.path.join(DATA, "h100_cvt_rzi.json")) as f: h100 = json.load(f)
  assert edges.differences(edges.on_device("NV"), h100) == []
  x = edges.approx_inputs(1 << 9)
  for op in edges.APPROX:
    got = edges.approx_run(op, x, "NV")
    assert np.array_equal(got.view(np.uint32), edges.approx_run(op, x).view(np.uint32))
    errs = edges.approx_errors(op, x, got)
    assert errs["worst"] <= (2 if op == "ex2" else 1) and errs["inexact_where_representable"] == errs["specials_differ"] == 0, errs

@pytest.mark.parametrize("src", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_float_to_int_casts_of_edge_values_give_the_definition(src):
  """The renderer makes the hardware's conversions give the core's definition (saturating, NaN -> 0) for every integer
  dtype, on the emulator that gives the hardware's NaN results."""
  from tinycore.uop import exec_cast
  from tinygrad_nv import edges
  x = np.array([float(v) for v in edges.INPUTS], np.float32)
  ints = [d for d in sorted(PTXRenderer.supported_dtypes, key=lambda d: d.name) if dtypes.is_int(d)]
  xs = Tensor(x, device="NV").cast(src).realize()
  outs = [xs.cast(d) for d in ints]
  Tensor.realize_all(*outs)
  for d, got in zip(ints, outs):
    want = exec_cast(exec_cast(x, dtypes.float32, src), src, d)
    assert got.numpy().tolist() == want.tolist(), f"{src.name} -> {d.name} over {edges.INPUTS}"

def test_emulator_min_max_follow_the_isa():
  """min/max.f32: a NaN operand loses to a number, two NaNs give the canonical NaN, .NaN makes any NaN win, +0.0 > -0.0."""
  nan, payload = np.float32(np.nan), np.uint32(0x7FC00001).view(np.float32)
  a, b = f32(nan, 1, payload, -0.0, 0.0, 3), f32(1, nan, nan, 0.0, -0.0, 2)
  assert bits(emulate("max.f32 {d}, {a}, {b}", "f32", a, b)) == bits(f32(1, 1, 0, 0.0, 0.0, 3)[:2]) + [0x7FFFFFFF] + bits(f32(0.0, 0.0, 3))
  assert bits(emulate("min.f32 {d}, {a}, {b}", "f32", a, b)) == bits(f32(1, 1)) + [0x7FFFFFFF] + bits(f32(-0.0, -0.0, 2))
  assert bits(emulate("max.NaN.f32 {d}, {a}, {b}", "f32", a, b))[:3] == [0x7FFFFFFF] * 3

def test_emulator_integer_division_by_zero_is_not_the_definitions_zero():
  """The ISA leaves x / 0 and x % 0 unspecified: the emulator gives all bits set and x, never the core's 0, so a kernel
  that skips the renderer's zero guard fails here; and division truncates."""
  a, b = np.array([7, -7, -7, 7], np.int32), np.array([0, 0, 2, -2], np.int32)
  assert emulate("div.s32 {d}, {a}, {b}", "s32", a, b).tolist() == [-1, -1, -3, -3]
  assert emulate("rem.s32 {d}, {a}, {b}", "s32", a, b).tolist() == [7, -7, -1, 1]
  assert emulate("div.u32 {d}, {a}, {b}", "u32", np.array([7, 9], np.uint32), np.array([0, 2], np.uint32)).tolist() == [2**32 - 1, 4]

def test_emulator_bfe_follows_the_isa():
  a = np.array([0xF0, 0xF0, 0xF0, -(2**31), 0x7FFFFFFF, 0xF0], np.int32)
  pos, ln = np.array([4, 4, 4, 40, 28, 260], np.uint32), np.array([4, 0, 3, 8, 8, 4], np.uint32)   # pos and len are taken & 0xff
  assert emulate("bfe.s32 {d}, {a}, {b}, {c}", "s32", a, pos, ln).tolist() == [-1, 0, -1, -1, 7, -1]
  assert emulate("bfe.u32 {d}, {a}, {b}, {c}", "u32", a.view(np.uint32), pos, ln).tolist() == [15, 0, 7, 0, 7, 15]

def test_emulator_approximations_are_not_exact_and_stay_inside_the_isa_bounds():
  """ex2/lg2.approx.f32 are not exact on the hardware: the emulator's results are one ulp off the correctly rounded value,
  in both directions, inside the ISA's bounds (ex2: 2 ulp; lg2: 2**-22 absolute in (0.5, 2), relative elsewhere); exact
  where the result is an f32 (2**integer, log2 of a power of two) and for the ISA's special values; subnormal inputs are
  kept unless .ftz."""
  x = np.random.default_rng(0).uniform(-100, 100, 4096).astype(np.float32)
  want = np.exp2(x.astype(np.float64))
  ulps = (emulate("ex2.approx.f32 {d}, {a}", "f32", x) - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
  assert np.all(np.abs(ulps) <= 1.5) and ulps.max() > 0.5 and ulps.min() < -0.5
  y = np.abs(x) / 40
  err = emulate("lg2.approx.f32 {d}, {a}", "f32", y).astype(np.float64) - np.log2(y.astype(np.float64))
  bound = np.where((y > 0.5) & (y < 2), 2.0**-22, 2.0**-22 * np.abs(np.log2(y.astype(np.float64))))
  assert np.all(np.abs(err) <= bound) and err.max() > 0 and err.min() < 0
  ints = f32(-3, 0, 1, 7, 100)
  assert emulate("ex2.approx.f32 {d}, {a}", "f32", ints).tolist() == [0.125, 1.0, 2.0, 128.0, 2.0**100]
  assert emulate("lg2.approx.f32 {d}, {a}", "f32", f32(0.25, 1, 2, 2**60)).tolist() == [-2.0, 0.0, 1.0, 60.0]
  specials = f32(-np.inf, -0.0, 0.0, np.inf, np.nan, -1)
  assert emulate("ex2.approx.f32 {d}, {a}", "f32", specials).tolist()[:4] == [0.0, 1.0, 1.0, np.inf]
  got = emulate("lg2.approx.f32 {d}, {a}", "f32", specials)
  assert np.isnan(got[[0, 4, 5]]).all() and got[1:4].tolist() == [-np.inf, -np.inf, np.inf]
  sub = f32(1e-40)
  assert emulate("lg2.approx.f32 {d}, {a}", "f32", sub)[0] > -133 and emulate("lg2.approx.ftz.f32 {d}, {a}", "f32", sub)[0] == -np.inf

def test_emulator_float_modifiers_and_nans():
  """fma rounds once; .ftz flushes subnormals, which are kept otherwise; .sat clamps to [0, 1] with NaN -> 0; an f32 NaN
  result is the canonical NaN, an f64 one keeps its payload; a cvt from f64 NaN into s32 gives INT_MIN."""
  a = f32(1 + 2**-12)
  got = emulate("fma.rn.f32 {d}, {a}, {b}, {c}", "f32", a, a, f32(2**-70))
  assert got[0] == np.float32(1 + 2**-11 + 2**-23)   # a*a is a tie 1 + 2**-11 + 2**-24: the tiny c decides it upward
  tiny = f32(1e-39, 0.7, np.nan)
  assert emulate("add.f32 {d}, {a}, {b}", "f32", tiny, f32(0, 0.7, 1)).tolist()[:2] == [np.float32(1e-39), np.float32(1.4)]
  assert emulate("add.ftz.f32 {d}, {a}, {b}", "f32", tiny, f32(0, 0, 0)).tolist()[0] == 0.0
  assert emulate("add.sat.f32 {d}, {a}, {b}", "f32", tiny, f32(0, 0.7, 1)).tolist() == [np.float32(1e-39), 1.0, 0.0]
  assert bits(emulate("add.f32 {d}, {a}, {b}", "f32", np.uint32([0xFFC00001]).view(np.float32), f32(1))) == [0x7FFFFFFF]
  payload = np.uint64([0x7FF8000000000123]).view(np.float64)
  assert bits(emulate("add.f64 {d}, {a}, {b}", "f64", payload, np.float64([1]))) == [0x7FF8000000000123]
  assert emulate("cvt.rzi.s32.f64 {d}, {a}", "s32", np.float64([np.nan, 2.9])).tolist() == [-(2**31), 2]
  assert emulate("cvt.rpi.s32.f32 {d}, {a}", "s32", f32(1e-40)).tolist() == [1]
  assert emulate("cvt.rpi.ftz.s32.f32 {d}, {a}", "s32", f32(1e-40)).tolist() == [0]
  assert emulate("cvt.rn.sat.f32.f64 {d}, {a}", "f32", np.float64([2.0, np.nan, -1, 0.25])).tolist() == [1.0, 0.0, 0.0, 0.25]

@pytest.mark.parametrize("instr", ["add.rz.f32 {d}, {a}, {b}", "div.approx.f32 {d}, {a}, {b}", "div.f32 {d}, {a}, {b}",
                                   "max.xorsign.abs.f32 {d}, {a}, {b}", "cvt.f32.f64 {d}, {a}", "sqrt.approx.f32 {d}, {a}"])
def test_emulator_refuses_what_it_does_not_implement(instr):
  """A modifier the emulator does not implement, or a missing rounding modifier the ISA requires, is an error naming it:
  never the instruction without it."""
  ops = [np.float64([1.0])] if "f32.f64" in instr else [f32(1.0)] * (instr.count("{") - 1)
  with pytest.raises(EmulatorError, match=r"modifier \.\w+ of \w+ is not implemented|rounding modifier|only \.approx"):
    emulate(instr, "f32", *ops)

def test_jit_replays_through_the_emulators_graph(monkeypatch):
  """TinyJit's graph path (Driver.graph) on the emulator: the graph is made once, at the first replay, and each replay
  with new inputs and a new Variable value computes what the function computes."""
  from tinycore import TinyJit, Variable
  made = []
  drv = Device["NV"].driver
  monkeypatch.setattr(drv, "graph", lambda launches, real=drv.graph: made.append(len(launches)) or real(launches))
  w = Tensor(np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8), device="NV").realize()
  @TinyJit
  def step(x, n): return ((x.shrink(((0, n), None)) @ w.T).relu().contiguous() * 2).sum(axis=1).contiguous().exp()
  rng = np.random.default_rng(0)
  for k in (3, 4, 5, 2, 5):
    x = rng.standard_normal((5, 8)).astype(np.float32)
    got = step(Tensor(x, device="NV"), Variable("n", 1, 5).bind(k)).numpy()
    np.testing.assert_allclose(got, np.exp((np.maximum(x[:k] @ w.numpy().T, 0) * 2).sum(axis=1)), rtol=1e-5, atol=1e-5)
  assert len(made) == 1 and made[0] >= 2, made

def test_constant_divisors_take_shifts_only_where_the_dividend_is_never_negative():
  """Integer division by a constant (address math's): no zero or -1 divisor checks; a power of two is shr/and where the
  dividend's bounds are never negative nor past the dtype's, and signed div/rem otherwise (negative values; a sum whose
  bounds pass 2^31 wraps to negative values in int32); another constant unsigned div/rem where they are not negative. NV's results equal the PYTHON device's (the definition, in the core: the
  NV package's environment need not have the CPU backend, as on the GPU proof's machine) on each."""
  from tinycore.codegen import get_program
  cases = {"never negative": (8, lambda d: Tensor.arange(1000, device=d).idiv(8) * 100 + Tensor.arange(1000, device=d) % 8),
           "negative": (8, lambda d: (Tensor.arange(1000, device=d) - 500).idiv(8) * 100 + (Tensor.arange(1000, device=d) - 500) % 8),
           "wraps": (4, lambda d: (Tensor.arange(16, device=d) + (2**31 - 8)).idiv(4) * 10 + (Tensor.arange(16, device=d) + (2**31 - 8)) % 4)}
  for name, (c, f) in cases.items():
    src = programs(f("NV"))[-1].src
    shifted = bool(re.search(rf"shr\.u32 %r\d+, %r\d+, {c.bit_length() - 1};", src)) and bool(re.search(rf"and\.b32 %r\d+, %r\d+, {c - 1};", src))
    assert not re.search(r"setp\.eq\.s32 %p\d+, %r\d+, -1", src), f"{name}: a constant divisor checked for -1:\n{src}"
    assert shifted == (name == "never negative") and ("div.s32" in src) != shifted, f"{name}:\n{src}"
    np.testing.assert_array_equal(f("NV").numpy(), f("PYTHON").numpy(), err_msg=name)
  # by a constant no power of two, an unsigned div/rem for the never-negative dividend (ptxas: a high product and a
  # shift, without the sign's corrections), a signed one for the others
  dividends = {"never negative": (lambda d: Tensor.arange(1000, device=d), True), "negative": (lambda d: Tensor.arange(1000, device=d) - 500, False),
               "wraps": (lambda d: Tensor.arange(16, device=d) + (2**31 - 8), False)}
  for name, (x, unsigned) in dividends.items():
    f = lambda d, x=x: x(d).idiv(7) * 100 + x(d) % 7
    src = programs(f("NV"))[-1].src
    assert ("div.u32" in src and "rem.u32" in src) == unsigned and ("div.s32" in src and "rem.s32" in src) != unsigned, f"{name}:\n{src}"
    np.testing.assert_array_equal(f("NV").numpy(), f("PYTHON").numpy(), err_msg=name)

def test_a_tensor_core_kernel_tells_ptxas_its_block_shape():
  """A tensor-core kernel declares its block (.maxntid, CUDA's __launch_bounds__) as its launch has it, so ptxas fits
  its registers to that many threads; other kernels (an fp32 matmul's block, one whose blocks the driver shapes)
  declare none. The declared kernel runs on the emulator, which enforces the bound."""
  a, b = (Tensor((np.arange(64 * 64).reshape(64, 64) % 7).astype(np.float16), device="NV") for _ in range(2))
  mm = programs(a @ b)[-1]
  assert "mma.sync" in mm.src and mm.local_size, mm.src[:600]
  assert re.search(r"\)\n\.maxntid (\d+), (\d+), (\d+)\n\{", mm.src).groups() == tuple(str(x) for x in (*mm.local_size, 1, 1)[:3]), mm.src[:600]
  f32 = programs(Tensor.empty(64, 64, device="NV") @ Tensor.empty(64, 64, device="NV"))[-1]
  assert f32.local_size and "mma.sync" not in f32.src and ".maxntid" not in f32.src
  with Context(NOOPT=1): add = programs(Tensor.empty(64, 64, device="NV") + 1)[-1]   # (unoptimised: no local ids)
  assert "// launch: threads" in add.src and ".maxntid" not in add.src
  want = (np.arange(64 * 64).reshape(64, 64) % 7).astype(np.float32)
  np.testing.assert_allclose((a @ b).numpy().astype(np.float32), want @ want, rtol=1e-3)
