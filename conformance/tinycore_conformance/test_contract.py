"""Section contract: the contract version the plugin states, then each plugin role on its own: renderer (without the device), assembler, allocator, driver."""
from __future__ import annotations
import gc, json, subprocess, sys, textwrap, warnings
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.uop import UOp, Ops
from tinycore.tensor import Tensor
from tinycore.renderer import ProgramSpec
from tinycore.codegen import get_program
from tinycore.codegen.linearize import linearize
from tinycore.runtime.device import Buffer, Device, LRUAllocator
from tinycore.runtime.errors import DeviceError, ContractDeprecationWarning
from tinycore.runtime.plugin import CONTRACT_VERSION, parse_version, version_str, instance_name
from tinycore_conformance import oracle as O
from tinycore_conformance.kernels import Launch, launch_for, var_kernel
from tinycore_conformance.target import Target, target_for, dtype_name, child_env

pytestmark = pytest.mark.contract

# ***** the contract version *****

@pytest.mark.covers("contract version")
def test_stated_contract_version(target: Target):
  """The version the plugin states (the report's header shows it, and how the core runs it) must be the one its roles
  keep: stating 2.x with contract 1's driver factory (no instance index) is a false claim. One the core adapts warns,
  saying what to change. (A version imported from the core states nothing; the registry's warning says so.)"""
  spec, stated = target.spec, parse_version(target.spec.contract_version)
  if spec.contract_version is not CONTRACT_VERSION:
    assert spec.contract_run_as == stated, (f"{target.name} states contract {version_str(stated)}, but tinycore runs it as "
                                            f"{version_str(spec.contract_run_as)}: {spec.contract_note}")
  if spec.contract_note: warnings.warn(ContractDeprecationWarning(f"{target.name}: {spec.contract_note}"))

# ***** renderer *****

RENDER_ALONE = textwrap.dedent("""
  import json, sys
  from tinycore.runtime.device import Device
  from tinycore.tensor import Tensor
  from tinycore.codegen import get_program
  from tinycore_conformance.target import check_pinned
  name = sys.argv[1]
  check_pinned(name)
  spec = Device.specs[name]
  def refuse(*args): raise RuntimeError("a role other than the renderer was opened while rendering")
  spec.driver, spec.allocator, spec.assembler = refuse, refuse, refuse
  ren = Device.renderer(name)
  x, y = Tensor.empty(4, 4, device=name), Tensor.empty(3, 5, device=name)
  progs = [get_program(si.ast, ren) for t in ((x + 1) * x, y.sum(1), y.permute(1, 0).flip(0)) for si in t.schedule()]
  again = [get_program(si.ast, ren).src for si in ((x + 1) * x).schedule()]
  print(json.dumps({"opened": sorted(Device._opened), "names": [p.name for p in progs], "devices": [p.device for p in progs],
                    "srcs": [p.src for p in progs], "again": again}))
""")

@pytest.mark.covers("renderer.render")
def test_renderer_needs_no_device(target: Target):
  """In a fresh interpreter whose driver, allocator and assembler factories raise: schedule and render three kernels."""
  proc = subprocess.run([sys.executable, "-c", RENDER_ALONE, target.name], capture_output=True, text=True, env=child_env(target), timeout=300)
  assert proc.returncode == 0, f"rendering {target.name} kernels without the device failed:\n{proc.stderr[-3000:]}"
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["opened"] == [], f"rendering opened devices {out['opened']}"
  assert all(isinstance(s, str) and s.strip() for s in out["srcs"]), "render() must return non-empty source text"
  assert len(set(out["srcs"])) == len(out["srcs"]), "different kernels rendered to the same text"
  assert out["again"][0] == out["srcs"][0], "rendering the same kernel twice gave different text"
  assert set(out["devices"]) == {target.name}, f"ProgramSpec.device should name the backend ({target.name}), got {out['devices']}"

def pytest_generate_tests(metafunc) -> None:
  t = target_for(metafunc.config)
  if metafunc.function.__name__ == "test_renderer_renders_dtype":
    metafunc.parametrize("dtype", t.dtypes, ids=[dtype_name(d) for d in t.dtypes])

def test_renderer_renders_dtype(target: Target, dtype):
  """Every declared dtype renders: loads, stores, an ALU op and a cast (rendering only, no device)."""
  x = Tensor.empty(7, dtype=dtype, device=target.name)
  other = dtypes.int32 if dtype != dtypes.int32 and dtypes.int32 in target.dtypes else target.dtypes[0]
  for t in (x.maximum(x.flip(0)), x.cast(other) if other != dtype else x.flip(0)):
    for si in t.schedule():
      a, b = get_program(si.ast, target.renderer), get_program(si.ast, target.renderer)
      assert isinstance(a.src, str) and a.src.strip(), f"empty source for a {dtype_name(dtype)} kernel"
      assert a.src == b.src, f"rendering a {dtype_name(dtype)} kernel twice gave different text"

# ***** assembler *****

@pytest.mark.covers("assembler.assemble")
def test_assembler_deterministic(target: Target):
  """assemble(src) returns bytes, the same bytes every time and from a fresh assembler (the disk cache depends on it)."""
  x = Tensor.empty(6, 5, device=target.name)
  srcs = [get_program(si.ast, target.renderer).src for t in (x * 2 + 1, x.sum(0)) for si in t.schedule()]
  first, second = target.spec.assembler(target.renderer), target.spec.assembler(target.renderer)
  for src in srcs:
    a, b, c = first.assemble(src), first.assemble(src), second.assemble(src)
    assert isinstance(a, bytes) and len(a) > 0, f"assemble() must return non-empty bytes, got {type(a).__name__}"
    assert a == b == c, "assembling the same source gave different bytes"
  assert first.assemble(srcs[0]) != first.assemble(srcs[1]), "different kernels assembled to the same bytes"

# ***** allocator *****

def pattern(n: int, seed: int = 0) -> bytes: return O.rng_for("bytes", n, seed).integers(0, 256, n, dtype=np.uint8).tobytes()

@pytest.mark.covers("allocator.copyin/copyout")
@pytest.mark.parametrize("nbytes", [1, 3, 4096, 65537 * 4 + 3])
def test_allocator_roundtrip(device, nbytes):
  buf = Buffer(device.spec.name, nbytes, dtypes.uint8).ensure_allocated()
  data = pattern(nbytes)
  buf.copyin(data)
  assert buf.as_bytes() == data, f"copyout after copyin of {nbytes} bytes returned different bytes"
  buf.copyin(data[::-1])
  assert buf.as_bytes() == data[::-1], f"a second copyin of {nbytes} bytes was not seen by copyout"

@pytest.mark.covers("allocator.offset")
def test_allocator_offset_views(device):
  """Views at byte offsets read and write the right bytes of their base, also as kernel parameters."""
  name, alloc = device.spec.name, device.allocator
  base = Buffer(name, 256, dtypes.uint8).ensure_allocated()
  if not alloc.supports_offset:
    with pytest.raises(DeviceError):
      base.view(16, dtypes.uint8, 8).ensure_allocated()
    pytest.skip(f"{name} declares allocator.supports_offset = False (views raise DeviceError, checked)")
  data = pattern(256)
  base.copyin(data)
  for offset, size in ((0, 16), (8, 16), (100, 156), (255, 1)):
    assert base.view(size, dtypes.uint8, offset).ensure_allocated().as_bytes() == data[offset:offset + size], f"view at offset {offset} read wrong bytes"
  nested = base.view(64, dtypes.uint8, 64).view(16, dtypes.uint8, 8).ensure_allocated()
  assert nested.as_bytes() == data[72:88], "a view of a view did not add the offsets"
  patch = bytes(range(200, 216))
  base.view(16, dtypes.uint8, 40).ensure_allocated().copyin(patch)
  want = data[:40] + patch + data[56:]
  assert base.as_bytes() == want, "copyin through a view at offset 40 wrote outside [40, 56) or not at all"
  # a view as a kernel input: out = in + 1 over floats taken 64 bytes into the base
  launch = launch_for(device, Tensor.empty(16, device=name) + 1)
  floats = np.arange(64, dtype=np.float32)
  base.copyin(floats.view(np.uint8).tobytes())
  view = base.view(16, dtypes.float32, 64).ensure_allocated()
  launch(bufs=[launch.bufs[0], view])
  device.synchronize()
  got = launch.read(0, np.float32)
  assert np.array_equal(got, floats[16:32] + 1), f"a kernel reading a view at byte offset 64 saw {got[:4]}..., expected {floats[16:20] + 1}..."

@pytest.mark.covers("allocator.alloc(0)")
def test_allocator_zero_size(device):
  buf = Buffer(device.spec.name, 0, dtypes.float32).ensure_allocated()
  buf.copyin(b"")
  assert buf.as_bytes() == b""
  t = Tensor.empty(0, 3)
  assert (t + 1).numpy().shape == (0, 3)

@pytest.mark.covers("allocator (large)")
def test_allocator_large(device, target: Target):
  nbytes = min(64 << 20, target.cap("max_alloc_bytes") or 64 << 20)
  buf = Buffer(device.spec.name, nbytes // 4, dtypes.uint32).ensure_allocated()
  data = np.arange(nbytes // 4, dtype=np.uint32) * np.uint32(2654435761)
  buf.copyin(memoryview(data).cast("B"))
  got = np.frombuffer(buf.as_bytes(), np.uint32)
  bad = np.flatnonzero(got != data)
  assert bad.size == 0, f"{bad.size} of {data.size} words of a {nbytes >> 20} MiB buffer came back wrong, first at word {bad[0] if bad.size else -1}"

@pytest.mark.covers("allocator.free")
def test_allocator_frees_what_it_allocates(device):
  """Allocator.live counts buffers handed out and not freed: it returns to where it was once the buffers are gone."""
  alloc = device.allocator
  gc.collect()
  before = alloc.live
  bufs = [Buffer(device.spec.name, n, dtypes.uint8).ensure_allocated() for n in (1, 7, 64, 4096, 4096, 100000)]
  assert alloc.live == before + len(bufs), f"allocating {len(bufs)} buffers moved Allocator.live by {alloc.live - before}"
  del bufs
  gc.collect()
  assert alloc.live == before, f"Allocator.live is {alloc.live - before} above its baseline after every buffer was freed"
  raw = [alloc.alloc(n) for n in (16, 32, 48)]
  for b, n in zip(raw, (16, 32, 48)): alloc.free(b, n)
  assert alloc.live == before, "alloc()/free() pairs did not balance Allocator.live"
  if isinstance(alloc, LRUAllocator):
    alloc.free_cache()
    assert not any(alloc.cache.values()), "free_cache() left buffers in the LRU cache"

# ***** driver *****

LAUNCH_SHAPES = [(1,), (7,), (64,), (1000,), (65537,), (3, 257), (300, 301)]

@pytest.mark.covers("driver.launch")
@pytest.mark.parametrize("shape", LAUNCH_SHAPES, ids=[str(s) for s in LAUNCH_SHAPES])
def test_driver_launch_sizes(device, shape):
  """One elementwise kernel per size, launched through driver.load and the program directly."""
  name = device.spec.name
  x = Tensor.empty(*shape, device=name)
  launch = launch_for(device, (x * 2 + 1).permute(*reversed(range(len(shape)))))
  data = O.rng_for("launch", shape).standard_normal(shape).astype(np.float32)
  launch.write(1, data)
  assert launch() is None, "program(..., wait=False) must return None"
  device.synchronize()
  got, want = launch.read(0, np.float32), (data * 2 + 1).T.reshape(-1)
  bad = np.flatnonzero(got != want)
  assert bad.size == 0, f"launch of {shape} (global {launch.spec.global_size}): {bad.size} of {want.size} outputs wrong, first at {bad[0]}"

@pytest.mark.covers("driver.launch(vals)")
def test_driver_integer_variables(device):
  """A kernel with two integer launch variables, run with several values without recompiling."""
  n = 37
  launch = Launch(device, var_kernel(n), [(n, dtypes.float32), (n, dtypes.float32)])
  assert [v.arg[0] for v in launch.spec.vars] == ["a", "b"], f"ProgramSpec.vars: {launch.spec.vars}"
  data = np.arange(n, dtype=np.float32)
  launch.write(1, data)
  for a, b in ((0, 0), (3, -7), (1000, 50), (1, -50)):
    launch({"a": a, "b": b})
    device.synchronize()
    got = launch.read(0, np.float32)
    assert np.array_equal(got, data * a + b), f"with a={a}, b={b}: got {got[:4]}..., expected {(data * a + b)[:4]}..."

@pytest.mark.covers("driver.launch(local_size)")
@pytest.mark.parametrize("groups,local", [((5, 1, 1), (8, 1, 1)), ((3, 2, 1), (4, 2, 1))])
def test_driver_local_sizes(device, groups, local):
  """GPU-style launches: global_size counts workgroups, local_size threads per group; out[flat id] = flat id + a."""
  ren = device.renderer
  if not ren.has_local: pytest.skip(f"{device.spec.name} declares renderer.has_local = False: it takes no local sizes")
  i32 = dtypes.int32
  dims = [d for d in range(3) if groups[d] * local[d] > 1]
  total = int(np.prod(groups) * np.prod(local))
  out = UOp(Ops.DEFINE_GLOBAL, i32.ptr(total), (), 0)
  a = UOp(Ops.DEFINE_VAR, i32, (), ("a", 0, 100))
  idx, stride = UOp.const(i32, 0), 1
  for d in dims:  # thread id along d = gidx*local + lidx; dims flattened with dim 0 fastest
    g, l = (UOp(Ops.SPECIAL, i32, (UOp.const(i32, n),), f"{k}{d}") for k, n in (("gidx", groups[d]), ("lidx", local[d])))
    tid = UOp(Ops.ADD, i32, (UOp(Ops.MUL, i32, (g, UOp.const(i32, local[d]))), l))
    idx = UOp(Ops.ADD, i32, (idx, UOp(Ops.MUL, i32, (tid, UOp.const(i32, stride)))))
    stride *= groups[d] * local[d]
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, i32.ptr(total), (out, idx)), UOp(Ops.ADD, i32, (idx, a))))
  uops = linearize(UOp(Ops.SINK, dtypes.void, (store,)))
  spec = ProgramSpec("local_ids", ren.render("local_ids", uops), device.spec.name, uops, groups, local, (a,), (0,), ())
  prog = device.driver.load(spec.name, device.assembler.assemble(spec.src), spec)
  buf = Buffer(device.spec.name, total, i32).ensure_allocated()
  prog(buf._buf, global_size=groups, local_size=local, vals=(5,))
  device.synchronize()
  got = np.frombuffer(buf.as_bytes(), np.int32)
  assert np.array_equal(got, np.arange(total) + 5), f"groups {groups} x local {local}: got {got[:8]}..."

@pytest.mark.covers("driver.launch(wait)")
def test_driver_wait_returns_seconds(device):
  launch = launch_for(device, Tensor.empty(100, device=device.spec.name) + 1)
  t = launch(wait=True)
  assert isinstance(t, float) and t >= 0, f"program(..., wait=True) must return the kernel's time in seconds, got {t!r}"

@pytest.mark.covers("driver.synchronize")
def test_driver_synchronize_after_queued_launches(device):
  """Forty launches queued without waiting, each reading the previous one's output, then one synchronize."""
  name = device.spec.name
  launch = launch_for(device, Tensor.empty(1024, device=name) + 1)
  a, b = launch.bufs
  b.copyin(memoryview(np.zeros(1024, np.float32)).cast("B"))
  for i in range(40): launch(bufs=[a, b] if i % 2 == 0 else [b, a])
  device.synchronize()
  got = np.frombuffer(b.as_bytes(), np.float32)
  assert np.all(got == 40), f"after 40 chained launches and synchronize(): {np.unique(got)[:5]}, expected 40"

@pytest.mark.covers("driver.load(corrupt)")
@pytest.mark.parametrize("corruption", ["garbage", "truncated"])
def test_driver_rejects_corrupt_binary(device, corruption):
  """A corrupt binary raises a Python exception naming the backend, at load or at the latest at launch (never a crash)."""
  name = device.spec.name
  launch = launch_for(device, Tensor.empty(64, device=name) * 3)
  junk = bytes((i * 167 + 13) % 256 for i in range(512)) + b"\xff\xfe\x00"
  binary = junk if corruption == "garbage" else launch.binary[: len(launch.binary) // 2] + junk[:64]
  with pytest.raises(Exception) as info:
    prog = device.driver.load("corrupt", binary, launch.spec)
    prog(*[b._buf for b in launch.bufs], global_size=launch.spec.global_size, local_size=launch.spec.local_size, vals=(), wait=True)
  assert name.lower() in str(info.value).lower(), f"the error does not name the backend {name}: {type(info.value).__name__}: {info.value}"

@pytest.mark.covers("instance names")
def test_instances_name_themselves(device, target: Target):
  """Instance 1 is named NAME:1 by its driver and allocator (their errors say which instance failed), whatever `instances`
  declares: where it declares fewer than two, driver(1) is called directly (the multi section, which needs two, is
  skipped there), and may refuse cleanly when this machine has no instance 1."""
  if target.spec.contract_run_as[0] < 2:
    pytest.skip(f"{target.name} runs as contract {version_str(target.spec.contract_run_as)}: instances and their names came with contract 2")
  want, n = instance_name(target.name, 1), target.spec.instances()
  if n is None or n >= 2: drv, alloc = Device[want].driver, Device[want].allocator
  else:
    try: drv = target.spec.driver(1)
    except Exception as e:
      pytest.skip(f"{target.name} declares {n} instance{'s' if n != 1 else ''} and driver(1) refuses instance 1 on this machine "
                  f"({type(e).__name__}: {e}): its name is checked where there is one")
    alloc = target.spec.allocator(drv)
  names = {"driver": getattr(drv, "device", None), "allocator": getattr(alloc, "device", None)}
  wrong = {role: got for role, got in names.items() if got != want}
  assert not wrong, (f"instance 1 of {target.name} names itself {wrong}, expected {want!r}: pass instance_name({target.name!r}, index) "
                     f"(tinycore.runtime.plugin) to the Driver, and the driver's device name to the Allocator")
