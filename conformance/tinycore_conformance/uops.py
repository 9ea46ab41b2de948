"""One-op kernels built straight from UOps: run on a backend through its own roles, and PYTHON's definition of the same op.

A plugin author reproduces any row of the `uops` section in one line, e.g.
  python -c "from tinycore_conformance.uops import show; show('CPU', 'IDIV', 'int32', [-2**31], [-1])"
"""
from __future__ import annotations
import numpy as np
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops, GroupOp, exec_alu, exec_cast, bf16_to_f32, f32_to_bf16
from tinycore_conformance.oracle import np_type
from tinycore_conformance.target import DTYPE_NAMES

DTYPES = {v: k for k, v in DTYPE_NAMES.items()}
CASTS = (Ops.CAST, Ops.BITCAST)

def as_op(op: Ops | str) -> Ops: return op if isinstance(op, Ops) else Ops[op.upper()]
def as_dtype(dt: DType | str) -> DType: return dt if isinstance(dt, DType) else DTYPES[dt]

def signature(op: Ops, dt: DType, to: DType | None = None) -> tuple[DType, tuple[DType, ...]]:
  """(result dtype, operand dtypes) of `op` on operands of dtype `dt`; `to` is the result of a CAST/BITCAST."""
  if op in CASTS: return to, (dt,)
  if op in GroupOp.Comparison: return dtypes.bool, (dt, dt)
  if op is Ops.WHERE: return dt, (dtypes.bool, dt, dt)
  return dt, (dt,) * (1 if op in GroupOp.Unary else 3 if op is Ops.MULACC else 2)

# ***** bytes: how each dtype is stored (bool: one byte, 0 or 1; bfloat16: the top half of a float32) *****

def to_bytes(vals, dt: DType) -> bytes:
  if dt == dtypes.bfloat16: return f32_to_bf16(np.asarray(vals, np.float32)).tobytes()
  if dt == dtypes.bool: return np.asarray(vals, np.bool_).astype(np.uint8).tobytes()
  if dtypes.is_int(dt): return np.array([int(v) for v in np.ravel(np.asarray(vals, dtype=object))], dtype=object).astype(np_type(dt)).tobytes()
  return np.asarray(vals).astype(np_type(dt)).tobytes()

def from_bytes(raw: bytes, dt: DType) -> np.ndarray:
  """The values stored in `raw`; bools stay raw bytes (uint8), so a stored 2 is seen as 2, not as True."""
  if dt == dtypes.bfloat16: return bf16_to_f32(np.frombuffer(raw, np.uint16))
  return np.frombuffer(raw, np.uint8 if dt == dtypes.bool else np_type(dt))

def operands(dts: tuple[DType, ...], cols) -> list[np.ndarray]:
  """Operand columns as the values a kernel loads (through their stored form, so bfloat16 inputs are rounded)."""
  return [from_bytes(to_bytes(c, d), d).astype(np.bool_) if d == dtypes.bool else from_bytes(to_bytes(c, d), d) for c, d in zip(cols, dts)]

# ***** the kernel *****

def one_op_kernel(op: Ops, dt: DType, n: int, to: DType | None = None) -> UOp:
  """out[i] = op(in1[i], in2[i], ...) over n elements: a kernel AST in the scheduler's form (buffer 0 the output)."""
  out_dt, in_dts = signature(op, dt, to)
  ins = [UOp(Ops.DEFINE_GLOBAL, d.ptr(n), (), i + 1) for i, d in enumerate(in_dts)]
  value = UOp(op, out_dt, tuple(ins), None)
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, out_dt.ptr(n), (), 0).store(value),))

def run_kernel(device: str, ast: UOp, out: tuple[int, DType], inputs: list[tuple[bytes, DType]]) -> bytes:
  """Render `ast` with the backend's renderer, assemble, load and launch it on fresh buffers; the output's bytes."""
  from tinycore.runtime.device import Device
  from tinycore_conformance.kernels import Launch
  dev = Device[device]
  launch = Launch(dev, ast, [out] + [(len(raw) // dt.itemsize, dt) for raw, dt in inputs])
  for i, (raw, _) in enumerate(inputs): launch.bufs[i + 1].copyin(raw)
  launch()
  dev.synchronize()
  return launch.bufs[0].as_bytes()

def run_op(device: str, op: Ops | str, dt: DType | str, *cols, to: DType | str | None = None) -> bytes:
  """`op` on the backend, one element per row of the operand columns `cols`; the result's bytes."""
  op, dt, to = as_op(op), as_dtype(dt), None if to is None else as_dtype(to)
  out_dt, in_dts = signature(op, dt, to)
  n = len(cols[0])
  return run_kernel(device, one_op_kernel(op, dt, n, to), (n, out_dt), [(to_bytes(c, d), d) for c, d in zip(cols, in_dts)])

def definition(op: Ops | str, dt: DType | str, *cols, to: DType | str | None = None) -> bytes:
  """What `op` gives by tinycore's definition (exec_alu / exec_cast, what the PYTHON device runs), as stored bytes."""
  op, dt, to = as_op(op), as_dtype(dt), None if to is None else as_dtype(to)
  out_dt, in_dts = signature(op, dt, to)
  vals = operands(in_dts, cols)
  got = exec_cast(vals[0], dt, to, bitcast=op is Ops.BITCAST) if op in CASTS else exec_alu(op, out_dt, vals)
  return to_bytes(np.broadcast_to(got, (len(cols[0]),)), out_dt)

def show(device: str, op: Ops | str, dt: DType | str, *cols, to: DType | str | None = None) -> None:
  """Print each row: operands, the backend's result and the definition's (values, and bytes where they differ)."""
  op, dt, to = as_op(op), as_dtype(dt), None if to is None else as_dtype(to)
  out_dt, in_dts = signature(op, dt, to)
  got, want = run_op(device, op, dt, *cols, to=to), definition(op, dt, *cols, to=to)
  w = out_dt.itemsize
  for i, row in enumerate(zip(*operands(in_dts, cols))):
    g, e = got[i * w:(i + 1) * w], want[i * w:(i + 1) * w]
    print(f"{op.name} {DTYPE_NAMES[dt]}{f' -> {DTYPE_NAMES[to]}' if to else ''} {tuple(x.item() for x in row)}: "
          f"{device} {from_bytes(g, out_dt)[0].item()!r}, definition {from_bytes(e, out_dt)[0].item()!r}" + ("" if g == e else f"  (bytes {g.hex()} vs {e.hex()})"))
