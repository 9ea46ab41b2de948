"""codegen/emulate.py: every op and cast of the uops conformance table, emulated for targets that lack dtypes, run on the
PYTHON interpreter and compared byte for byte with the definition."""
import contextlib
import numpy as np
import pytest
from tinycore.dtype import ALL_DTYPES, dtypes
from tinycore.uop import Ops, GroupOp
from tinycore.codegen import get_program
from tinycore.runtime.errors import UnsupportedError
from tinycore.runtime.builtin import PythonRenderer, PythonProgram
from tinycore_conformance import uop_table as T
from tinycore_conformance.test_uops import table_cases, cols_for, table
from tinycore_conformance.uops import one_op_kernel, signature, definition, operands, to_bytes

SMALL = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
class Words32(PythonRenderer):
  """WGSL's kind of target: 32-bit arithmetic and 32-bit words of memory only, no float64."""
  supported_dtypes = frozenset(ALL_DTYPES) - {dtypes.float64}
  alu_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32})
  memory_word = 4
  mulacc_dtypes = frozenset({dtypes.float16, dtypes.float32})
  exact_division = False   # half quotients and roots through the correction WGSL needs (exact here: PYTHON divides exactly)
  tensor_cores = ()   # PYTHON's WMMA computes on values, not the bits a half is held as here
class HalfConverts(PythonRenderer):
  """AMD's and NV's kind: float64, half converted natively but computed in float32, no 64-bit or 8/16-bit integer arithmetic."""
  alu_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.float64})
  float_conversions = frozenset({dtypes.float16})
  mulacc_dtypes = frozenset({dtypes.float16, dtypes.float32, dtypes.float64})
  tensor_cores = ()
RENDERERS = {"words32": Words32(), "half_converts": HalfConverts()}

def cases(ren):
  # a bitcast between float64 and a 64-bit integer is a pair of words the PYTHON interpreter (no vectors) cannot hold; a
  # fused multiply-add of a float the target does not declare is never formed (test_mulacc_of_an_emulated_bfloat16_is_refused)
  return [(op, dt, to) for op, dt, to in table_cases(type("T", (), {"dtypes": [d for d in ALL_DTYPES if d in ren.supported_dtypes]})())
          if not (op is Ops.BITCAST and dtypes.float64 in (dt, to)) and not (op is Ops.MULACC and dtypes.is_float(dt) and dt not in ren.mulacc_dtypes)]
ALL = [(k, *c) for k, r in RENDERERS.items() for c in cases(r)]

def run(ren, op, dt, to, cols) -> bytes:
  out_dt, in_dts = signature(op, dt, to)
  n = len(cols[0])
  spec = get_program(one_op_kernel(op, dt, n, to), ren)
  lacking = ren.supported_dtypes - ren.alu_dtypes
  assert not any(u.op in GroupOp.ALU and u.op is not Ops.WHERE and u.src[-1].dtype.scalar in lacking for u in spec.uops), "an emulated op is left"
  # whole 32-bit words for every buffer (a target with memory_word 4 allocates them)
  bufs = [bytearray(-(-n * out_dt.itemsize // 4) * 4)] + [bytearray(to_bytes(c, d)) + bytes(-len(to_bytes(c, d)) % 4) for c, d in zip(cols, in_dts)]
  gsize, lsize = spec.launch_dims({})
  PythonProgram(spec.name, spec.src)(*[memoryview(b) for b in bufs], global_size=gsize, local_size=lsize)
  return bytes(bufs[0][:n * out_dt.itemsize])

@pytest.mark.parametrize("ren,op,dt,to", ALL, ids=[f"{k}-{op.name}-{dt.name}" + (f"-{to.name}" if to else "") for k, op, dt, to in ALL])
def test_emulated_op(ren, op, dt, to):
  cols = cols_for(op, dt, to)
  got, want = run(RENDERERS[ren], op, dt, to, cols), definition(op, dt, *cols, to=to)
  out_dt, in_dts = signature(op, dt, to)
  bad = T.mismatched_rows(op, dt, out_dt, got, want, operands(in_dts, cols))
  if bad.size: raise AssertionError(table(op, dt, to, cols, got, want, bad))

@pytest.mark.parametrize("ren", RENDERERS)
def test_mulacc_of_an_emulated_bfloat16_is_refused(ren):
  """A bfloat16 product can leave float32's range (or round among its subnormals), so no float32 method is exact: refused."""
  with pytest.raises(UnsupportedError, match="no fused multiply-add \\(MULACC\\) of bfloat16"): get_program(one_op_kernel(Ops.MULACC, dtypes.bfloat16, 4), RENDERERS[ren])

# integers that float32 rounds onto a bfloat16 tie (then to even) though they lie past it: only one rounding gets them right
ROUND_ONCE = {dtypes.int32: [2**30 + 2**22 + 1, -(2**30 + 2**22 + 1), 2**24 + 2**16 + 1], dtypes.uint32: [2**31 + 2**23 + 1, 2**32 - 1],
              dtypes.int64: [2**62 + 2**54 + 1, -(2**62 + 2**54 + 1), 2**40 + 2**32 + 1, 2**53 + 2**45 + 1], dtypes.uint64: [2**63 + 2**55 + 1]}
@pytest.mark.parametrize("ren", list(RENDERERS))
@pytest.mark.parametrize("dt", list(ROUND_ONCE), ids=lambda d: d.name)
def test_integers_to_bfloat16_round_once(ren, dt):
  cols = [ROUND_ONCE[dt]]
  assert run(RENDERERS[ren], Ops.CAST, dt, dtypes.bfloat16, cols) == definition(Ops.CAST, dt, *cols, to=dtypes.bfloat16)

@contextlib.contextmanager
def python_renderer(ren):
  """The PYTHON device rendering with `ren` (its compiled kernels not shared with other tests)."""
  from tinycore import engine
  from tinycore.runtime.device import Device
  dev, saved = Device["PYTHON"], dict(engine._runners)
  old = Device._renderers.get("PYTHON"), dev.renderer
  Device._renderers["PYTHON"] = dev.renderer = ren
  engine._runners.clear()
  try: yield
  finally:
    Device._renderers["PYTHON"], dev.renderer = old
    engine._runners.clear()
    engine._runners.update(saved)

PROGRAMS = {"sum": lambda t: t.sum(1), "max": lambda t: t.max(1), "matmul": lambda t: t[:, :32] @ t[:, 32:64].T,
            "cumsum": lambda t: t[:, :48].cumsum(1), "where": lambda t: (t > t.flip(1)).where(t, t * 3),
            # short reductions: one thread's loop, its accumulator assigned several times a trip (UNROLL)
            "prod": lambda t: t[:, :8].prod(1), "short_max": lambda t: t[:, :64].max(1),
            # an unrolled sum whose terms past the pad's gate are equal: the same update and assignment several times a trip
            "padded_sum": lambda t: t[:, :1].expand(4, 31).pad(((0, 0), (1, 0))).sum(1)}
@pytest.mark.parametrize("ren", list(RENDERERS))
@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint16, dtypes.int64, dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_emulated_programs(ren, name, dt):
  """Whole programs (reductions through shared memory, matmuls, scans) on an emulating target: the PYTHON device's own
  answers, bit for bit."""
  from tinycore import Tensor
  x = np.random.default_rng(3).integers(-40, 40, (4, 4096))   # long rows: sums and maxes through shared memory
  with python_renderer(type("NoTensorCores", (PythonRenderer,), {"tensor_cores": ()})()):   # the same sums as the emulating targets
    want = PROGRAMS[name](Tensor(x, device="PYTHON").cast(dt)).numpy()
  with python_renderer(RENDERERS[ren]): got = PROGRAMS[name](Tensor(x, device="PYTHON").cast(dt)).numpy()
  assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), (got, want)

@pytest.mark.parametrize("ren", list(RENDERERS))
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_a_16_bit_float_constant_reaches_the_renderer_as_a_constant(ren, dt):
  """x * -0.0 in a 16-bit float held as bits: the float32 operand is the constant -0.0, not its value computed from bits
  in the kernel (a renderer decides constant zero operands on the constant: WGSL's shader compilers fold x * -0.0 they
  can see through to +0.0); a NaN constant keeps its payload through the bits."""
  from tinycore import Tensor
  from tinycore.codegen import get_program
  with python_renderer(RENDERERS[ren]):
    held_as_bits = dt not in RENDERERS[ren].float_conversions   # (a half the target converts itself is cast, not decoded)
    for fill, want in ((-0.0, lambda c: c.arg == 0.0 and np.signbit(c.arg)), *([(float("nan"), None)] if held_as_bits else [])):
      t = Tensor.ones(8, device="PYTHON", dtype=dt).contiguous().realize() * fill
      uops = get_program(t.schedule()[-1].ast, RENDERERS[ren]).uops
      operands = [s for u in uops if u.op is Ops.MUL and u.dtype.scalar == dtypes.float32 for s in u.src if s.op is Ops.CONST]
      assert any(want(c) for c in operands) if want else not any(np.isnan(c.arg) for c in operands), operands

# what emulation code looks like: bfloat16's rounding increment and half's overflow threshold and infinity (16-bit float
# rounding), 64-bit shifts and multiplies of 32-bit words (64-bit integers), and the helpers the backends used to have
EMULATION_MARKERS = r"0x7fff\b|\b32767\b|0x477ff000|0x7c00|\b31744\b|rev_b64|rev_i64|mad_u64_u32|\bbf16_|\bf16_bits|\bfit\(|half_bits|round_to\("
def test_renderers_hold_no_emulation():
  """16-bit float rounding, sub-word packing and 64-bit integers from halves live in codegen/emulate.py only: no backend
  computes bfloat16 or converts it itself, and no renderer holds code of that kind."""
  import pathlib, re
  from tinycore.runtime.device import Device
  for name in ("CPU", "NV", "AMD", "QCOM", "WEBGPU"):
    ren = Device.specs[name].renderer()
    assert dtypes.bfloat16 not in (ren.alu_dtypes or ren.supported_dtypes) | ren.float_conversions, f"{name} computes bfloat16 itself"
  for path in sorted(pathlib.Path(__file__).parents[1].glob("backends/*/tinygrad_*/renderer.py")):
    found = [(i + 1, line.strip()) for i, line in enumerate(path.read_text().splitlines()) if re.search(EMULATION_MARKERS, line)]
    assert not found, f"{path.name} of {path.parent.name} holds emulation code: {found}"
