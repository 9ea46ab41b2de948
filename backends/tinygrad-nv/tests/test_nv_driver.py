"""tinygrad-nv's CUDA driver path without a GPU: the driver against a stand-in for libcuda (fake_libcuda.py, compiled here)
that counts and logs every call. A cached launch is one cuLaunchKernel, the context is set only when it changes, copies go
through pinned staging on the instance's stream, and a TinyJit replay is one cuGraphLaunch with changed arguments set."""
from __future__ import annotations
import os, re, shutil, subprocess, sys, threading
import numpy as np
import pytest

pytest.importorskip("tinygrad_nv", reason="tinygrad-nv is not installed (pip install -e backends/tinygrad-nv)")
if not any(shutil.which(c) for c in ("cc", "gcc", "clang")): pytest.skip("no C compiler to build the libcuda stand-in", allow_module_level=True)
os.environ.setdefault("NV_EMULATE", "1")   # the registry's NV is the emulator: the stand-in serves only drivers these tests make
sys.path.insert(0, os.path.dirname(__file__))
import fake_libcuda
from tinygrad_nv import driver as nvdriver
from tinygrad_nv.assembler import pack
from tinygrad_nv.renderer import PTXRenderer
from tinycore import Tensor
from tinycore.codegen import get_program
from tinycore.uop import Ops

@pytest.fixture
def fake(monkeypatch, tmp_path_factory):
  """The stand-in as this process's libcuda, for drivers made inside the test (NV_EMULATE unset); the log on."""
  lib = fake_libcuda.load(str(tmp_path_factory.getbasetemp() / "fake-libcuda"))
  monkeypatch.delenv("NV_EMULATE", raising=False)
  monkeypatch.setattr(nvdriver, "_cuda", lib)
  monkeypatch.setattr(nvdriver, "_current", threading.local())
  lib.fake_reset(1)
  return lib

def calls(lib) -> list[str]:
  """The calls since the last reset, one per line (kernel launches and graph node runs with their arguments)."""
  out = lib.fake_log().decode().splitlines()
  lib.fake_reset(1)
  return out

def program(drv, *tensors: Tensor):
  """The kernels of the tensors rendered for NV and loaded by drv, with their ProgramSpecs."""
  sched = tensors[0].schedule(*tensors[1:])
  specs = [get_program(si.ast, PTXRenderer()) for si in sched if si.ast.op is Ops.SINK]
  return [(drv.load(s.name, pack("sm_90", s.src.encode(), b""), s), s) for s in specs]

def test_a_cached_launch_is_one_driver_call(fake):
  drv = nvdriver.NVDriver(0)
  (prog, spec), = program(drv, Tensor.empty(16, device="NV") + 1)
  out, a = drv.mem_alloc(64), drv.mem_alloc(64)
  prog(out, a, global_size=(16, 1, 1))
  calls(fake)
  for _ in range(3): prog(out, a, global_size=(16, 1, 1))
  # the arguments: data0, data1, then the slice's first blocks in y and z
  assert calls(fake) == ["cuLaunchKernel", f"  launch {spec.name} {out} {a} 0 0"] * 3

def test_the_context_is_made_current_only_when_it_changes(fake):
  """Per thread: switching between two GPUs sets it at each switch; a new thread sets it once, at its first launch."""
  gpus = [nvdriver.NVDriver(i) for i in range(2)]
  progs = [program(d, Tensor.empty(4, device="NV") * 2)[0][0] for d in gpus]
  bufs = [(d.mem_alloc(16), d.mem_alloc(16)) for d in gpus]
  calls(fake)
  for i in (0, 0, 1, 1, 0):
    progs[i](*bufs[i], global_size=(4, 1, 1))
  assert [c for c in calls(fake) if c.startswith("cu")] == ["cuCtxSetCurrent", "cuLaunchKernel", "cuLaunchKernel", "cuCtxSetCurrent",
                                                         "cuLaunchKernel", "cuLaunchKernel", "cuCtxSetCurrent", "cuLaunchKernel"]
  t = threading.Thread(target=lambda: [progs[0](*bufs[0], global_size=(4, 1, 1)) for _ in range(2)])
  t.start(); t.join()
  assert [c for c in calls(fake) if c.startswith("cu")] == ["cuCtxSetCurrent", "cuLaunchKernel", "cuLaunchKernel"]

def test_copies_go_through_pinned_staging_on_the_stream(fake):
  """A small copy in is staged and queued (no wait for the device); out waits for the stream, never the whole device; a
  copy bigger than a staging slot goes in slot-sized pieces; the bytes arrive whole."""
  drv = nvdriver.NVDriver(0)
  buf = drv.mem_alloc(64)
  data = np.arange(16, dtype=np.float32)
  calls(fake)
  drv.copyin(buf, memoryview(data).cast("B"))
  first = calls(fake)
  assert first.count("cuMemHostAlloc") == nvdriver.STAGING_SLOTS   # the slots, made on first use
  drv.copyin(buf, memoryview(data).cast("B"))
  assert calls(fake) == ["cuEventSynchronize", "cuMemcpyHtoDAsync_v2", "cuEventRecord"]
  got = np.empty_like(data)
  drv.copyout(memoryview(got).cast("B"), buf)
  assert calls(fake) == ["cuEventSynchronize", "cuMemcpyDtoHAsync_v2", "cuStreamSynchronize"] and np.array_equal(got, data)
  big = np.random.default_rng(0).integers(0, 255, 3 * nvdriver.STAGING_BYTES + 5, np.uint8)
  bigbuf = drv.mem_alloc(big.nbytes)
  drv.copyin(bigbuf, memoryview(big))
  assert calls(fake).count("cuMemcpyHtoDAsync_v2") == 4
  back = np.empty_like(big)
  drv.copyout(memoryview(back), bigbuf)
  drv.synchronize()
  assert np.array_equal(back, big) and "cuCtxSynchronize" not in calls(fake)

def test_graph_is_built_once_and_replays_with_changed_arguments(fake):
  """Driver.graph: three launches become a chain of three kernel nodes, instantiated once; a replay with the same
  arguments is one cuGraphLaunch, one with a new buffer sets that node's parameters first; other programs build anew."""
  drv = nvdriver.NVDriver(0)
  x = Tensor.empty(32, device="NV")
  progs = program(drv, (x + 1).contiguous() * 2, x.exp())
  pool = [drv.mem_alloc(128) for _ in range(3 * len(progs) + 1)]
  args = [pool[3 * k:3 * k + len(re.findall(r"\.param \.u64 data", s.src))] for k, (_, s) in enumerate(progs)]
  launches = [(p, a, (32, 1, 1), None, ()) for (p, _), a in zip(progs, args)]
  calls(fake)
  graph = drv.graph(launches)
  built = calls(fake)
  assert [c for c in built if c.startswith("cu")] == ["cuGraphCreate"] + ["cuGraphAddKernelNode_v2"] * len(progs) + ["cuGraphInstantiateWithFlags"]
  graph(launches)
  ran = calls(fake)
  assert ran[0] == "cuGraphLaunch" and [r.split()[1] for r in ran[1:]] == [s.name for _, s in progs]
  assert [r.split()[2:-2] for r in ran[1:]] == [[str(b) for b in a] for a in args]   # the buffers, then the slice's first blocks
  launches[1] = (progs[1][0], [pool[-1], *args[1][1:]], (32, 1, 1), None, ())
  graph(launches)
  log = calls(fake)
  assert [c for c in log if c.startswith("cu")] == ["cuGraphExecKernelNodeSetParams_v2", "cuGraphLaunch"]
  assert log[-len(progs) + 1].split()[2] == str(pool[-1])
  graph(launches[:1])
  assert [c for c in calls(fake) if c.startswith("cu")][:3] == ["cuGraphExecDestroy", "cuGraphDestroy", "cuGraphCreate"]

JIT_SCRIPT = """
import os, sys, numpy as np
sys.path.insert(0, {tests!r})
import fake_libcuda
lib = fake_libcuda.load({where!r}); fake_libcuda.install(lib)
from tinycore import Tensor, TinyJit
w = Tensor(np.ones((8, 8), np.float32), device="NV").realize()
@TinyJit
def step(x): return ((x @ w).relu().contiguous() * 2 + x).sum(axis=1).contiguous().exp()
xs = [Tensor(np.full((8, 8), i, np.float32), device="NV").realize() for i in range(5)]
for x in xs[:2]: step(x)
for x in xs[2:]:
  lib.fake_reset(1)
  step(x)
  print("REPLAY " + lib.fake_log().decode().replace(chr(10), ";"))
"""

def test_a_jitted_step_replays_as_one_graph_launch(tmp_path_factory):
  """TinyJit on NV (through the libcuda stand-in): from the first replay on, a call with a new input is the parameter
  updates of the nodes reading it and one cuGraphLaunch: no kernel launched one by one."""
  where = str(tmp_path_factory.getbasetemp() / "fake-libcuda")
  env = {k: v for k, v in os.environ.items() if k not in ("NV_EMULATE", "DEV")}
  out = subprocess.run([sys.executable, "-c", JIT_SCRIPT.format(tests=os.path.dirname(__file__), where=where)], capture_output=True,
                       text=True, env=env, timeout=300)
  assert out.returncode == 0, out.stderr
  replays = [ln[len("REPLAY "):].split(";") for ln in out.stdout.splitlines() if ln.startswith("REPLAY ")]
  assert len(replays) == 3
  first, *later = replays
  assert "cuGraphCreate" in first and first.count("cuGraphLaunch") == 1 and "cuLaunchKernel" not in first
  for log in later:
    cu = [c for c in log if c.startswith("cu")]
    assert cu.count("cuGraphLaunch") == 1 and "cuLaunchKernel" not in cu and "cuGraphCreate" not in cu
    assert 1 <= cu.count("cuGraphExecKernelNodeSetParams_v2") < len([c for c in log if c.strip().startswith("run")])
