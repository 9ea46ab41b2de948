"""Section edges: odd launch sizes, one-element and empty buffers, allocation-size boundaries, views at odd offsets, variable bounds."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops
from tinycore.tensor import Tensor
from tinycore.runtime.device import Buffer
from tinycore.runtime.errors import UnsupportedError
from tinycore_conformance import oracle as O
from tinycore_conformance.kernels import Launch
from tinycore_conformance.target import Target, target_for, dtype_name
from tinycore_conformance.uops import one_op_kernel, to_bytes, from_bytes

pytestmark = pytest.mark.edges

# primes and powers of two plus or minus one: never a multiple of a vector width or a local size (except 1 and 2)
ODD_SIZES = (1, 2, 3, 5, 7, 13, 17, 31, 33, 63, 65, 127, 129, 255, 257, 1023, 1025, 4097)
# allocation sizes in bytes around the boundaries allocators align to (16 ... 4096)
BOUNDARY_BYTES = (1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 4095, 4096, 4097)

def edge_dtypes(t: Target) -> list[DType]:
  """One dtype per width the backend declares (vector widths and packing differ by element size)."""
  return [d for d in (t.primary(dtypes.uint8, dtypes.int8, dtypes.bool), t.primary(dtypes.float16, dtypes.int16, dtypes.bfloat16),
                      t.primary(dtypes.float32, dtypes.int32), t.primary(dtypes.float64, dtypes.int64)) if d is not None]

def pytest_generate_tests(metafunc) -> None:
  t = target_for(metafunc.config)
  if "edge_dtype" in metafunc.fixturenames:
    dts = edge_dtypes(t)
    metafunc.parametrize("edge_dtype", dts, ids=[dtype_name(d) for d in dts])

def values(dt: DType, n: int, seed=0) -> np.ndarray:
  if dt == dtypes.bool: return O.rng_for("edges", n, seed).random(n) < 0.5
  if O.is_int(dt): return (np.arange(n) * 37 + seed).astype(O.np_type(dt))
  return O.representable((np.arange(n) % 97) * 0.25 - 7 + seed, dt)

def add_one(x: np.ndarray, dt: DType) -> np.ndarray:
  return x | True if dt == dtypes.bool else O.representable(x.astype(np.float64) + 1, dt) if O.is_float(dt) else (x + 1).astype(x.dtype)

@pytest.mark.covers("odd global sizes")
def test_odd_sizes_elementwise_and_reduce(device, edge_dtype):
  """x + 1 and sum(x) over sizes that leave a remainder for every vector width and local size: every element exactly once."""
  dt = edge_dtype
  for n in ODD_SIZES:
    x = values(dt, n)
    got = (Tensor(x, dtype=dt) + (True if dt == dtypes.bool else 1)).numpy()
    assert np.array_equal(got, add_one(x, dt)), f"x + 1 over {n} {dtype_name(dt)} elements: wrong at {np.flatnonzero(got != add_one(x, dt))[:8]}"
    if dt in (dtypes.bool, dtypes.float16, dtypes.bfloat16): continue   # sums exact in any order: integers (mod 2**bits), float32/64 here
    got_sum = Tensor(x, dtype=dt).sum().numpy()
    with np.errstate(over="ignore"): want_sum = np.array(x.astype(np.int64).sum() if O.is_int(dt) else x.astype(np.float64).sum()).astype(got_sum.dtype)
    assert got_sum == want_sum, f"sum over {n} {dtype_name(dt)} elements: got {got_sum!r}, expected {want_sum!r}"

@pytest.mark.covers("one-element and empty buffers")
def test_one_element_and_empty(device, edge_dtype):
  """Shapes (1,), (1, 1) and (0,), (0, 3): kernels over one element, and over none (which must not launch garbage)."""
  dt = edge_dtype
  for shape in ((1,), (1, 1), (0,), (0, 3), (3, 0)):
    x = values(dt, int(np.prod(shape))).reshape(shape)
    t = Tensor(x, dtype=dt)
    got = (t + (True if dt == dtypes.bool else 1)).numpy()
    assert got.shape == shape and np.array_equal(got, add_one(x, dt)), f"x + 1 on shape {shape} {dtype_name(dt)}: got {got!r}"
    assert np.array_equal(t.flip(0).contiguous().numpy(), x[::-1]), f"flip on shape {shape} {dtype_name(dt)}"

def sentinel(nbytes: int) -> bytes: return bytes((i * 89 + 7) % 251 for i in range(nbytes))

@pytest.mark.covers("allocation size boundaries")
def test_allocation_boundaries(device, target: Target):
  """One-op kernels (out = a + 1 on uint8) on buffers of sizes around alignment boundaries; a view of each size inside a
  larger buffer is written exactly where it lies (the bytes around it keep their sentinel)."""
  dt = target.primary(dtypes.uint8, dtypes.int8, dtypes.int32, dtypes.float32)
  for nbytes in BOUNDARY_BYTES:
    n = max(1, nbytes // dt.itemsize)
    a = values(dt, n, seed=3)
    launch = Launch(device, one_op_kernel(Ops.ADD, dt, n), [(n, dt)] * 3)
    launch.write(1, a)
    launch.write(2, np.ones(n, O.np_type(dt)))
    launch()
    device.synchronize()
    got = from_bytes(launch.bufs[0].as_bytes(), dt)
    assert np.array_equal(got, add_one(a, dt)), f"a + 1 on a {n}-element {dtype_name(dt)} buffer: wrong at {np.flatnonzero(got != add_one(a, dt))[:8]}"
    if device.allocator.supports_offset:
      check_view_write(device, launch, dt, n, offset_elems=1, what=f"a {n}-element view at element 1")

def check_view_write(device, launch: Launch, dt: DType, n: int, offset_elems: int, what: str, inputs_as_views: bool = False) -> str | None:
  """Run `launch` (out = a + b) with its output (and optionally inputs) as views `offset_elems` elements into larger buffers
  filled with a sentinel: the view gets the result, and every byte around it keeps the sentinel. Returns the backend's
  UnsupportedError message if it refuses the offset cleanly."""
  pad = offset_elems * dt.itemsize
  total = pad + n * dt.itemsize + 2 * dt.itemsize
  base = Buffer(device.spec.name, total, dtypes.uint8).ensure_allocated()
  base.copyin(sentinel(total))
  out = base.view(n, dt, pad).ensure_allocated()
  bufs = [out] + launch.bufs[1:]
  a = from_bytes(launch.bufs[1].as_bytes(), dt)
  b = from_bytes(launch.bufs[2].as_bytes(), dt)
  if inputs_as_views:
    bufs = [out]
    for i, arr in enumerate((a, b)):
      ib = Buffer(device.spec.name, total, dtypes.uint8).ensure_allocated()
      raw = bytearray(sentinel(total))
      raw[pad:pad + n * dt.itemsize] = to_bytes(arr, dt)
      ib.copyin(bytes(raw))
      bufs.append(ib.view(n, dt, pad).ensure_allocated())
  try:
    launch(bufs=bufs)
    device.synchronize()
  except UnsupportedError as e:   # a hardware limit on binding offsets, refused cleanly (rule 6): fine, if it names the backend
    assert device.spec.name.lower() in str(e).lower(), f"{what}: the refusal does not name the backend: {e}"
    return str(e)
  raw = base.as_bytes()
  want = to_bytes(np.asarray(a, np.float64 if O.is_float(dt) else None) + np.asarray(b, np.float64 if O.is_float(dt) else None) if dt != dtypes.bool else a | b, dt)
  if raw[pad:pad + n * dt.itemsize] != want:
    raise AssertionError(f"{what} ({dtype_name(dt)}, byte offset {pad}): the view holds {raw[pad:pad + n * dt.itemsize].hex()}, expected {want.hex()}")
  outside = raw[:pad] + raw[pad + n * dt.itemsize:]
  keep = sentinel(total)[:pad] + sentinel(total)[pad + n * dt.itemsize:]
  if outside != keep: raise AssertionError(f"{what} ({dtype_name(dt)}, byte offset {pad}): a kernel writing the view changed bytes outside it")
  return None

@pytest.mark.covers("views at odd offsets")
def test_views_at_odd_offsets(device, edge_dtype):
  """A one-op kernel reading and writing views at odd element offsets (byte offsets that break 16-byte vector alignment)."""
  if not device.allocator.supports_offset: pytest.skip(f"{device.spec.name} declares allocator.supports_offset = False")
  dt = edge_dtype
  for n in (1, 5, 33):
    launch = Launch(device, one_op_kernel(Ops.ADD, dt, n), [(n, dt)] * 3)
    launch.write(1, values(dt, n, seed=1))
    launch.write(2, values(dt, n, seed=2))
    refused = [r for off in (1, 3, 7) if (r := check_view_write(device, launch, dt, n, off, f"{n} elements at element offset {off}", inputs_as_views=True))]
  if refused: pytest.skip(f"every result was right, and some offsets were refused cleanly: {refused[0]}")

def var_bound_kernel(n: int, bounds: dict[str, tuple[int, int]], dt: DType) -> UOp:
  """out[i] = in[i] + a - b for integer variables a, b with the given bounds, cast to `dt`."""
  out, inp = UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), 0), UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), 1)
  a, b = (UOp.variable(k, *bounds[k]) for k in ("a", "b"))
  def spread(v: UOp) -> UOp: return UOp(Ops.CAST, dt, (v,)).reshape((1,)).expand((n,))
  value = UOp(Ops.SUB, dt, (UOp(Ops.ADD, dt, (inp, spread(a))), spread(b)))
  return UOp(Ops.SINK, dtypes.void, (out.store(value),))

@pytest.mark.covers("integer variables at their bounds")
def test_variables_at_bounds(device, target: Target):
  """Launch variables at the ends of their declared ranges: int32 (most negative and most positive), and 64-bit where
  the renderer addresses with 64-bit integers; the variables' order follows ProgramSpec.vars."""
  ranges = [(-(2**31) + 1, 2**31 - 1)] + ([(-(2**40), 2**40)] if target.renderer.index_bits >= 64 and dtypes.int64 in target.dtypes else [])
  for lo, hi in ranges:
    dt = dtypes.int64 if hi >= 2**31 else target.primary(dtypes.int32, dtypes.int64)
    if dt is None: pytest.skip(f"{target.name} declares neither int32 nor int64")
    n = 3
    launch = Launch(device, var_bound_kernel(n, {"a": (lo, hi), "b": (0, 7)}, dt), [(n, dt), (n, dt)])
    assert [v.arg[0] for v in launch.spec.vars] == ["a", "b"], f"ProgramSpec.vars: {launch.spec.vars}"
    launch.write(1, np.array([0, 1, -1], O.np_type(dt)))
    for a, b in ((lo, 0), (hi, 0), (hi, 7), (lo, 7), (0, 7)):
      launch({"a": a, "b": b})
      device.synchronize()
      got = launch.read(0, O.np_type(dt))
      want = np.array([(v + a - b + 2**63) % 2**64 - 2**63 for v in (0, 1, -1)], np.int64).astype(O.np_type(dt))
      assert np.array_equal(got, want), f"a={a}, b={b} (a in [{lo}, {hi}]): got {got.tolist()}, expected {want.tolist()}"
