"""Tests of the QCOM backend: OpenCL C rendering without a device, images and their limits, and kernels on an OpenCL runtime
(pocl in CI) checked against numpy."""
import os, re
import numpy as np
import pytest

pytest.importorskip("tinygrad_qcom", reason="the QCOM backend is not installed (pip install -e backends/tinygrad-qcom)")
from tinycore import Tensor, dtypes
from tinycore.codegen import get_program
from tinycore.runtime.device import Device
from tinycore.runtime.errors import CompileError, UnsupportedError
from tinygrad_qcom import opencl
from tinygrad_qcom.renderer import OpenCLRenderer, kernel_info, image_shape
from tinygrad_qcom.assembler import QCOMAssembler, unpack

def require_opencl() -> None:
  """Skip without an OpenCL runtime, except in CI (CI=true), where a missing one is a failure: CI installs pocl."""
  if opencl.device_info() is not None: return
  why = "no OpenCL runtime found (install pocl-opencl-icd and ocl-icd-libopencl1)"
  if os.environ.get("CI"): pytest.fail(f"CI is set but {why}")
  pytest.skip(why)

@pytest.fixture
def qcom():
  require_opencl()
  return Device["QCOM"]

def P(x, dtype=np.float32) -> Tensor: return Tensor(np.asarray(x, dtype), device="PYTHON")
def ast_of(t: Tensor): return t.schedule()[-1].ast   # scheduled on PYTHON: rendering needs no OpenCL
def Q(x, dtype=None) -> Tensor: return Tensor(np.asarray(x, dtype), device="QCOM")

# ***** the renderer alone *****

def test_without_opencl_the_ci_rule_holds(monkeypatch):
  monkeypatch.setattr(opencl, "device_info", lambda: None)
  monkeypatch.setenv("CI", "true")
  with pytest.raises(pytest.fail.Exception, match="CI is set"): require_opencl()
  monkeypatch.delenv("CI")
  with pytest.raises(pytest.skip.Exception, match="no OpenCL runtime"): require_opencl()

def test_renders_and_assembles_without_any_opencl(monkeypatch):
  """No libOpenCL at all: the renderer describes an Adreno (native half, no double), the assembler hands out the source,
  and opening the device is a clear error."""
  monkeypatch.setattr(opencl, "find_library", lambda: None)
  for fn in (opencl._device, opencl.device_info, opencl.runtime): fn.cache_clear()
  try:
    from tinygrad_qcom import _renderer, _assembler, _driver
    ren = _renderer()
    assert ren.fp16 and not ren.fp64 and dtypes.float64 not in ren.supported_dtypes
    src = get_program(ast_of(P([1.0, 2.0]).cast(dtypes.float16) * 3), ren).src
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in src and "__global half* data0" in src and "__kernel void" in src
    asm = _assembler(ren)
    assert asm.target == "opencl-c-source" and unpack(asm.assemble(src))[:2] == ("source", src)
    with pytest.raises(Exception, match="no OpenCL runtime found.*pocl-opencl-icd"): _driver(0)
    from tinygrad_qcom import _instances
    assert _instances() == 0
  finally:
    for fn in (opencl._device, opencl.device_info, opencl.runtime): fn.cache_clear()

def test_debug4_shows_the_opencl_c_without_any_opencl():
  """Acceptance: with no OpenCL library at all, DEBUG=4 prints the kernel's OpenCL C, then opening QCOM fails clearly."""
  import subprocess, sys
  code = ("import tinygrad_qcom.opencl as o; o.find_library = lambda: None\n"
          "from tinycore import Tensor\n(Tensor.empty(64, 32, device='QCOM') * 2 + 1).realize()")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEBUG": "4", "QCOM_IMAGE": "1"}, timeout=120)
  assert "__kernel void E_64_32(write_only image2d_t data0, read_only image2d_t data1)" in proc.stdout, proc.stdout + proc.stderr
  assert proc.returncode != 0 and "QCOM: no OpenCL runtime found" in proc.stderr

def test_undeclared_float64_is_a_clean_refusal():
  with pytest.raises(UnsupportedError, match="QCOM.*double"): get_program(ast_of(P([1.0]).cast(dtypes.float64)), OpenCLRenderer(fp64=False))
  src = get_program(ast_of(P([1.0]).cast(dtypes.float64) + 1), OpenCLRenderer(fp64=True)).src
  assert "cl_khr_fp64 : enable" in src and "__global double* data0" in src

def test_half_without_cl_khr_fp16_is_float_math_rounded_to_half():
  """Without cl_khr_fp16 the core computes half: float math, half held as its bits (a ushort), rounded in integer code."""
  src = get_program(ast_of(P([1.0]).cast(dtypes.float16) / 3), OpenCLRenderer(fp16=False)).src
  quotient = re.search(r"float (v\d+) = \(v\d+ / ", src).group(1)
  assert "cl_khr_fp16" not in src and "half" not in src and "__global ushort* data0" in src and f"as_uint({quotient})" in src, src

def test_integer_semantics_are_rendered_defined():
  """Division guards a zero divisor and MIN / -1, signed math wraps through unsigned types, shift counts are masked."""
  a, b = P([7, -8], np.int32), P([0, -1], np.int32)
  src = get_program(ast_of(a // b + (a << b)), OpenCLRenderer()).src
  assert "== 0 ? (int)0" in src and "== -1" in src and "as_int((uint)(" in src and "& 31)" in src

def test_header_tells_the_driver_writes_vars_and_images():
  ren = OpenCLRenderer(images=True)
  src = get_program(ast_of(P(np.ones((4, 8))) * 2), ren).src
  info = kernel_info(src)
  assert info.writes == (0,) and info.vars == ()
  assert [(i.param, i.width, i.height, i.access) for i in info.images] == [(0, 8, 4, "write"), (1, 8, 4, "read")]
  with pytest.raises(ValueError, match="not a tinycore QCOM kernel"): kernel_info("__kernel void f() {}")

def test_image_coordinates_fold_for_2d_tensors():
  """A (rows, cols) tensor becomes a cols x rows image: x = column, y = row, no division or modulo left in the kernel."""
  src = get_program(ast_of(P(np.ones((16, 32))).T.contiguous()), OpenCLRenderer(images=True)).src
  assert "read_only image2d_t data1" in src and "write_only image2d_t data0" in src
  assert "read_imagef(data1, smp, (int2)(" in src and "write_imagef(data0, (int2)(" in src
  assert " % " not in src and " / " not in src, src

def test_image_shape_respects_the_limits():
  assert image_shape(64, [], 16, 16) == (16, 4)
  assert image_shape(31, [], 16, 16) is None       # prime and wider than an image row: it stays a buffer
  assert image_shape(300, [], 16, 16) is None      # no divisor w <= 16 with 300 / w <= 16
  assert image_shape(12, [], 16, 16) == (12, 1)

def test_images_past_the_read_limit_fall_back_to_buffers():
  xs = [P(np.full((4, 4), i)) for i in range(4)]
  src = get_program(ast_of(xs[0] + xs[1] + xs[2] + xs[3]), OpenCLRenderer(images=True, max_read_images=2)).src
  assert src.count("read_only image2d_t") == 2 and src.count("__global float*") == 2

# ***** on an OpenCL device *****

def test_device_is_listed(qcom):
  rows = {r["name"]: r for r in Device.listing()}
  assert rows["QCOM"]["opens"] and rows["QCOM"]["package"] == "tinygrad-qcom" and rows["QCOM"]["instances"] == 1

def test_integer_division_and_casts(qcom):
  a = np.array([7, -7, -2**31, 5, 0], np.int32)
  b = np.array([2, 2, -1, 0, 3], np.int32)
  np.testing.assert_array_equal((Q(a) // Q(b)).numpy(), np.array([3, -4, -2**31, 0, 0], np.int32))   # floor division, x // 0 = 0
  f = np.array([np.nan, 1e30, -1e30, 3.9, -3.9], np.float32)
  np.testing.assert_array_equal(Q(f).cast(dtypes.int8).numpy(), np.array([0, 127, -128, 3, -3], np.int8))

def test_half_rounds_like_numpy(qcom):
  x = np.array([1.0, 3.0, 1e-5, 65504.0, 0.1], np.float16)
  np.testing.assert_array_equal((Q(x) / Q(x[::-1].copy())).numpy(), x / x[::-1])

def test_compile_errors_name_the_backend(qcom, monkeypatch):
  """A kernel the OpenCL compiler rejects is a CompileError naming QCOM and the kernel: from the assembler where it keeps the
  program binary (a vendor runtime), from the driver's load where it hands over the source (pocl, which caches kernels itself)."""
  bad = "// tinycore-qcom broken\n// writes\n// vars\n__kernel void broken() { nope; }\n"
  monkeypatch.setattr(opencl.runtime(), "caches_kernels", False)
  with pytest.raises(CompileError, match="QCOM.*kernel broken"): QCOMAssembler(qcom.renderer).assemble(bad)
  monkeypatch.setattr(opencl.runtime(), "caches_kernels", True)
  asm = QCOMAssembler(qcom.renderer)
  assert asm.target == "opencl-c-source" and unpack(asm.assemble(bad))[:2] == ("source", bad)
  with pytest.raises(CompileError, match="QCOM.*kernel broken"): qcom.driver.load("broken", asm.assemble(bad))

def test_binary_path_runs_kernels(qcom, monkeypatch):
  """The program binary a vendor runtime's assembler keeps loads and runs (pocl makes one too, though it is handed source)."""
  monkeypatch.setattr(opencl.runtime(), "caches_kernels", False)
  asm = QCOMAssembler(qcom.renderer)
  spec = get_program(ast_of(P(np.arange(6)) * 3 + 1), qcom.renderer)
  binary = asm.assemble(spec.src)
  assert asm.target.endswith(":binary") and unpack(binary)[0] == "binary" and asm.assemble(spec.src) == binary
  got = launch(qcom, spec, binary, np.arange(6, dtype=np.float32))
  np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32) * 3 + 1)

def launch(qcom, spec, binary: bytes, x: np.ndarray, prg=None) -> np.ndarray:
  """spec's kernel (out = f(x), both float32 like x) loaded from `binary` (or `prg`, already loaded) and run once."""
  from tinycore.runtime.device import Buffer
  prg = prg or qcom.driver.load(spec.name, binary, spec)
  out, inp = Buffer("QCOM", x.size, dtypes.float32).ensure_allocated(), Buffer("QCOM", x.size, dtypes.float32).ensure_allocated()
  inp.copyin(memoryview(x).cast("B"))
  gs, ls = spec.launch_dims({})
  prg(out._buf, inp._buf, global_size=gs, local_size=ls, wait=True)
  return np.frombuffer(out.as_bytes(), np.float32)

def test_built_programs_are_shared_and_bounded(qcom, monkeypatch):
  """Loads of one source share one built program; past max_built built programs the least recently launched is released,
  and launching its kernel again builds it again, with the same answer."""
  drv, x = qcom.driver, np.arange(5, dtype=np.float32)
  # the driver's own runtime: opencl.runtime() is another one after a test cleared its cache (no OpenCL at all, above)
  monkeypatch.setattr(drv.rt, "max_built", 2)
  specs = [get_program(ast_of(P(x) * k + 0.5), qcom.renderer) for k in (7, 8, 9)]
  binaries = [qcom.assembler.assemble(s.src) for s in specs]
  first, again = drv.load(specs[0].name, binaries[0], specs[0]), drv.load(specs[0].name, binaries[0], specs[0])
  assert drv.kernel(first) == drv.kernel(again), "two loads of one source built it twice"
  rest = [drv.load(s.name, b, s) for s, b in zip(specs[1:], binaries[1:])]
  assert first.key not in drv.built and all(p.key in drv.built for p in rest) and len(drv.built) <= 2
  np.testing.assert_array_equal(launch(qcom, specs[0], b"", x, first), x * 7 + 0.5)
  assert first.key in drv.built and rest[0].key not in drv.built
  np.testing.assert_array_equal(launch(qcom, specs[1], b"", x, rest[0]), x * 8 + 0.5)

def test_in_place_assign_through_images(qcom, monkeypatch):
  """x.assign(f(x)) reads and writes one buffer as two parameters: staged images keep the reads from seeing the writes."""
  monkeypatch.setattr(Device.renderer("QCOM"), "images", True)
  x = Q(np.arange(12, dtype=np.float32).reshape(3, 4))
  x.realize()
  x.assign(x.flip(1) * 2 + x).realize()
  want = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(x.numpy(), want[:, ::-1] * 2 + want)

@pytest.mark.parametrize("limit", [0, 2, 128])
def test_image_limit_falls_back_to_buffers_with_the_right_answer(qcom, monkeypatch, limit):
  """Acceptance: a kernel with more float inputs than the device binds read images gets images for the first `limit` and
  buffers for the rest (a fallback, not an error), and computes the same answer."""
  ren = Device.renderer("QCOM")
  if not opencl.device_info().has_images: pytest.skip("this OpenCL device has no image support")
  monkeypatch.setattr(ren, "images", True)
  monkeypatch.setattr(ren, "max_read_images", limit)
  data = [np.random.default_rng(i).standard_normal((6, 10 + limit)).astype(np.float32) for i in range(5)]
  t = Q(data[0])
  for d in data[1:]: t = t * 0.5 + Q(d)
  src = get_program(t.schedule()[-1].ast, ren).src
  assert src.count("read_only image2d_t") == min(limit, 5) and src.count("write_only image2d_t") == 1
  want = data[0]
  for d in data[1:]: want = want * np.float32(0.5) + d
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)

# ***** KGSL: structure layouts against msm_kgsl.h, and the bounded timestamp wait *****

import ctypes
from tinygrad_qcom import kgsl

@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the layouts checked are the 64-bit ABI's (arm64 Android, x86-64)")
def test_kgsl_layouts_match_msm_kgsl_h():
  """Sizes, offsets and request numbers as msm_kgsl.h defines them for a 64-bit kernel (_IOWR(0x09, nr, struct))."""
  def offsets(s): return {name: getattr(s, name).offset for name, *_ in s._fields_ if not name.startswith("_")}
  assert ctypes.sizeof(kgsl.GpumemAllocId) == 48 and offsets(kgsl.GpumemAllocId) == {"id": 0, "flags": 4, "size": 8, "mmapsize": 16, "gpuaddr": 24}
  assert ctypes.sizeof(kgsl.CommandObject) == 32 and offsets(kgsl.CommandObject) == {"offset": 0, "gpuaddr": 8, "size": 16, "flags": 24, "id": 28}
  assert ctypes.sizeof(kgsl.GpuCommand) == 64 and offsets(kgsl.GpuCommand) == {
    "flags": 0, "cmdlist": 8, "cmdsize": 16, "numcmds": 20, "objlist": 24, "objsize": 32, "numobjs": 36, "synclist": 40,
    "syncsize": 48, "numsyncs": 52, "context_id": 56, "timestamp": 60}
  assert [ctypes.sizeof(s) for s in (kgsl.DrawctxtCreate, kgsl.DrawctxtDestroy, kgsl.GpumemFreeId, kgsl.ReadTimestampCtxtid)] == [8, 4, 8, 12]
  assert {k: hex(v[0]) for k, v in kgsl.IOCTLS.items()} == {
    "DRAWCTXT_CREATE": "0xc0080913", "DRAWCTXT_DESTROY": "0x40040914", "CMDSTREAM_READTIMESTAMP_CTXTID": "0xc00c0916",
    "GPUMEM_ALLOC_ID": "0xc0300934", "GPUMEM_FREE_ID": "0xc0080935", "GPU_COMMAND": "0xc040094a"}

class FakeKGSL:
  """Answers the ioctls a KGSL object makes: a context, submissions that take timestamps, a GPU that retires `speed` per read."""
  def __init__(self, speed: int): self.speed, self.queued, self.done = speed, 0, 0
  def __call__(self, fd, req, arg):
    if req == kgsl.IOCTLS["DRAWCTXT_CREATE"][0]: arg.drawctxt_id = 7
    elif req == kgsl.IOCTLS["GPU_COMMAND"][0]:
      assert arg.context_id == 7 and arg.numcmds == 1
      self.queued += 1
      arg.timestamp = self.queued
    elif req == kgsl.IOCTLS["CMDSTREAM_READTIMESTAMP_CTXTID"][0]:
      self.done = min(self.queued, self.done + self.speed)
      arg.timestamp = self.done

def test_kgsl_wait_returns_when_the_timestamp_retires():
  dev = kgsl.KGSL(fd=-1, ioctl=FakeKGSL(speed=1))
  ts = [dev.submit(0x1000, 64) for _ in range(3)]
  dev.wait(ts[-1], timeout_s=5)
  assert ts == [1, 2, 3] and dev.retired() == 3

def test_kgsl_wait_is_bounded_when_the_gpu_hangs():
  dev = kgsl.KGSL(fd=-1, ioctl=FakeKGSL(speed=0))
  ts = dev.submit(0x1000, 64)
  with pytest.raises(Exception, match="QCOM: kernel E_1 did not finish within 0.05 s.*hung"): dev.wait(ts, timeout_s=0.05, what="kernel E_1")

def test_kgsl_without_qcom_opencl_says_what_to_do(monkeypatch):
  from tinygrad_qcom.driver import QCOMDriver
  monkeypatch.setattr(kgsl, "available", lambda: True)
  monkeypatch.delenv("QCOM_OPENCL", raising=False)
  with pytest.raises(Exception, match="QCOM: /dev/kgsl-3d0 is here.*not implemented.*QCOM_OPENCL=1"): QCOMDriver(0)

def test_half_images_only_with_cl_khr_fp16():
  """read_imageh/write_imageh come with cl_khr_fp16: without it half tensors stay buffers (float tensors still become images)."""
  t = P(np.ones((4, 8))).cast(dtypes.float16) * 2
  native = get_program(ast_of(t), OpenCLRenderer(fp16=True, images=True)).src
  assert "write_only image2d_t data0" in native and "write_imageh(data0" in native and "(half4)(" in native
  emulated = get_program(ast_of(t), OpenCLRenderer(fp16=False, images=True)).src
  assert "__global ushort* data0" in emulated and "read_only image2d_t data1" in emulated   # the core holds half as its bits

@pytest.mark.parametrize("dt, n", [(dtypes.float32, 4), (dtypes.float16, 4), (dtypes.int8, 4), (dtypes.uint8, 4), (dtypes.int16, 4), (dtypes.int32, 4)])
def test_elementwise_work_loads_and_stores_vectors(dt, n, qcom, monkeypatch):
  """A thread's consecutive elements (upcast_max of them) are one vloadn per input and one vstoren (any element
  alignment in OpenCL), lanes .s0 ..; with images (QCOM_IMAGE) a float buffer is an image read one element at a time,
  so none. Results equal numpy's, wrapping and negative values too."""
  from tinycore.dtype import to_np_dtype
  r = np.random.default_rng(6)
  a, b = (np.asarray(r.integers(-100, 100, 4096) if dtypes.is_int(dt) else r.standard_normal(4096) * 50).astype(to_np_dtype(dt)) for _ in range(2))
  x, y = Q(a), Q(b)
  ren = Device.renderer("QCOM")
  src = get_program([si for si in (x * 3 - y).schedule() if si.ast.op.name == "SINK"][-1].ast, ren).src
  assert src.count(f"vload{n}(0, ") == 2 and src.count(f"vstore{n}(") == 1, src
  with np.errstate(over="ignore"): want = a * a.dtype.type(3) - b
  np.testing.assert_array_equal((x * 3 - y).numpy(), want)
  monkeypatch.setattr(ren, "images", True)
  assert ren.memory_vector == 0 and "vload" not in get_program([si for si in (x + y).schedule() if si.ast.op.name == "SINK"][-1].ast, ren).src
