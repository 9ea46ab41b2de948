"""codegen/emulate.py: every op and cast of the uops conformance table, emulated for targets that lack dtypes, run on the
PYTHON interpreter and compared byte for byte with the definition."""
import numpy as np
import pytest
from tinycore.dtype import ALL_DTYPES, dtypes
from tinycore.uop import Ops, GroupOp
from tinycore.codegen import get_program
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
class HalfConverts(PythonRenderer):
  """AMD's and NV's kind: float64, half converted natively but computed in float32, no 64-bit or 8/16-bit integer arithmetic."""
  alu_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.float64})
  float_conversions = frozenset({dtypes.float16})
RENDERERS = {"words32": Words32(), "half_converts": HalfConverts()}

def cases(ren):
  # a bitcast between float64 and a 64-bit integer is a pair of words the PYTHON interpreter (no vectors) cannot hold
  return [(op, dt, to) for op, dt, to in table_cases(type("T", (), {"dtypes": [d for d in ALL_DTYPES if d in ren.supported_dtypes]})())
          if not (op is Ops.BITCAST and dtypes.float64 in (dt, to))]
ALL = [(k, *c) for k, r in RENDERERS.items() for c in cases(r)]

def run(ren, op, dt, to, cols) -> bytes:
  out_dt, in_dts = signature(op, dt, to)
  n = len(cols[0])
  spec = get_program(one_op_kernel(op, dt, n, to), ren)
  lacking = ren.supported_dtypes - ren.alu_dtypes
  assert not any(u.op in GroupOp.ALU and u.op is not Ops.WHERE and u.src[-1].dtype.scalar in lacking for u in spec.uops), "an emulated op is left"
  # whole 32-bit words for every buffer (a target with memory_word 4 allocates them)
  bufs = [bytearray(-(-n * out_dt.itemsize // 4) * 4)] + [bytearray(to_bytes(c, d)) + bytes(-len(to_bytes(c, d)) % 4) for c, d in zip(cols, in_dts)]
  PythonProgram(spec.name, spec.src)(*[memoryview(b) for b in bufs], global_size=tuple(int(g) for g in spec.global_size))
  return bytes(bufs[0][:n * out_dt.itemsize])

@pytest.mark.parametrize("ren,op,dt,to", ALL, ids=[f"{k}-{op.name}-{dt.name}" + (f"-{to.name}" if to else "") for k, op, dt, to in ALL])
def test_emulated_op(ren, op, dt, to):
  cols = cols_for(op, dt, to)
  got, want = run(RENDERERS[ren], op, dt, to, cols), definition(op, dt, *cols, to=to)
  out_dt, in_dts = signature(op, dt, to)
  bad = T.mismatched_rows(op, dt, out_dt, got, want, operands(in_dts, cols))
  if bad.size: raise AssertionError(table(op, dt, to, cols, got, want, bad))
