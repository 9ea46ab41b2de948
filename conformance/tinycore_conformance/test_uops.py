"""Section uops: one-op kernels built from UOps, every ALU op and cast on edge operands, compared byte for byte with the definition."""
from __future__ import annotations
import json, subprocess, sys, textwrap
import numpy as np
import pytest
from tinycore.dtype import DType, dtypes, FLOATS, INTS
from tinycore.uop import UOp, Ops, exec_alu
from tinycore_conformance.target import Target, target_for, dtype_name, child_env
from tinycore_conformance.uops import signature, operands, definition, run_op, run_kernel, to_bytes, from_bytes
from tinycore_conformance import uop_table as T

pytestmark = pytest.mark.uops

def table_cases(t: Target) -> list[tuple[Ops, DType, DType | None]]:
  """(op, operand dtype, cast target) for every op on every declared dtype, every cast and every same-size bitcast."""
  alu = [(op, dt, None) for dt in t.dtypes for op in T.ops_for(dt)]
  casts = [(Ops.CAST, a, b) for a in t.dtypes for b in t.dtypes if a != b]
  bitcasts = [(Ops.BITCAST, a, b) for a in t.dtypes for b in t.dtypes if a != b and a != dtypes.bool and b != dtypes.bool and a.itemsize == b.itemsize]
  return alu + casts + bitcasts

def case_id(op: Ops, dt: DType, to: DType | None) -> str: return f"{op.name}-{dtype_name(dt)}" + (f"->{dtype_name(to)}" if to else "")

def pytest_generate_tests(metafunc) -> None:
  if "uop_case" in metafunc.fixturenames:
    cases = table_cases(target_for(metafunc.config))
    metafunc.parametrize("uop_case", cases, ids=[case_id(*c) for c in cases])
  elif "fused" in metafunc.fixturenames:
    t = target_for(metafunc.config)
    cases = [(name, dt) for name, (dts, *_) in FUSED.items() for dt in dts if dt in t.dtypes]
    metafunc.parametrize("fused", cases, ids=[f"{n}-{dtype_name(d)}" for n, d in cases])

def cols_for(op: Ops, dt: DType, to: DType | None) -> list[list]:
  if op is Ops.CAST: return [T.cast_column(dt, to)]
  if op is Ops.BITCAST: return [T.bitcast_column(dt)]
  return T.columns(op, dt)

def usable_rows(target: Target, op: Ops, dt: DType, to: DType | None, cols: list[list]) -> np.ndarray:
  """Rows the backend's declared capabilities cover: no NaN/inf operands or results without inf_nan, no subnormals without
  denormals (the operands and the definition's result are both looked at)."""
  out_dt, in_dts = signature(op, dt, to)
  vals = [v.astype(np.float64) for v, d in zip(operands(in_dts, cols), in_dts) if d in FLOATS]
  if out_dt in FLOATS: vals.append(from_bytes(definition(op, dt, *cols, to=to), out_dt).astype(np.float64))
  keep = np.ones(len(cols[0]), bool)
  tiny = {d: T.finfo(d)[1] for d in FLOATS}
  for v, d in zip(vals, [d for d in in_dts if d in FLOATS] + ([out_dt] if out_dt in FLOATS else [])):
    if not target.cap("inf_nan"): keep &= np.isfinite(v)
    if not target.cap("denormals"): keep &= ~((v != 0) & (np.abs(v) < tiny[d]))
  return keep

def table(op: Ops, dt: DType, to: DType | None, cols: list[list], got: bytes, want: bytes, bad: np.ndarray, limit: int = 8) -> str:
  """The differing rows as a table: operands, got, expected."""
  out_dt, in_dts = signature(op, dt, to)
  ins, w = operands(in_dts, cols), out_dt.itemsize
  g, e = from_bytes(got, out_dt), from_bytes(want, out_dt)
  lines = [f"{len(bad)} of {len(cols[0])} rows differ from the definition (op, dtype, operands: got, expected):"]
  for i in bad[:limit]:
    hexes = "" if out_dt in INTS else f" [bytes {got[i * w:(i + 1) * w].hex()} vs {want[i * w:(i + 1) * w].hex()}]"
    lines.append(f"  {case_id(op, dt, to)} {tuple(c[i].item() for c in ins)}: got {g[i].item()!r}, expected {e[i].item()!r}{hexes}")
  return "\n".join(lines)

# ***** the definition itself, pinned against an independent reference *****

def test_definition_matches_reference(target: Target, uop_case):
  """exec_alu/exec_cast (what PYTHON runs and what every backend is held to) agree with Python ints, math and numpy."""
  op, dt, to = uop_case
  cols = cols_for(op, dt, to)
  out_dt = signature(op, dt, to)[0]
  want = definition(op, dt, *cols, to=to)
  ref = to_bytes(T.reference(op, dt, cols, to), out_dt)
  bad = T.mismatched_rows(op, dt, out_dt, want, ref, operands(signature(op, dt, to)[1], cols))
  if bad.size: raise AssertionError("tinycore's definition disagrees with the reference: " + table(op, dt, to, cols, want, ref, bad))

# ***** the backend, one op per kernel *****

def test_uop(device, target: Target, uop_case):
  """One kernel per op and dtype, one row per edge operand combination; every result's bytes against the definition."""
  op, dt, to = uop_case
  if op is Ops.MULACC and dt in FLOATS and dt not in target.renderer.mulacc_dtypes:
    pytest.skip(f"{target.name} does not declare {dtype_name(dt)} in renderer.mulacc_dtypes: codegen never forms a fused multiply-add for it")
  cols = cols_for(op, dt, to)
  keep = usable_rows(target, op, dt, to, cols)
  cols = [list(np.array(c, dtype=object)[keep]) for c in cols]
  out_dt, in_dts = signature(op, dt, to)
  got = isolated(target, op, dt) if op in T.DIVISIONS and dt in INTS else run_op(target.name, op, dt, *cols, to=to)
  want = definition(op, dt, *cols, to=to)
  bad = T.mismatched_rows(op, dt, out_dt, got, want, operands(in_dts, cols))
  if bad.size: raise AssertionError(table(op, dt, to, cols, got, want, bad))

# integer division runs in a child interpreter: a backend whose kernel traps (SIGFPE on MIN // -1 or on a zero divisor)
# fails the test of that op and dtype instead of taking the whole run down. One child runs every division case; after
# a crash, another child goes on with the cases after the one it died in.
CHILD = textwrap.dedent("""
  import json, sys
  from tinycore_conformance.target import check_pinned
  from tinycore_conformance.uops import run_op
  jobs = json.loads(sys.stdin.read())
  check_pinned(jobs[0]["device"])
  for j in jobs: print(j["key"], run_op(j["device"], j["op"], j["dtype"], *j["cols"]).hex(), flush=True)
""")
_isolated: dict[str, bytes | str] = {}   # case id -> the result's bytes, or why the child died

def isolated(target: Target, op: Ops, dt: DType) -> bytes:
  if not _isolated:
    pending = [{"key": case_id(o, d, None), "device": target.name, "op": o.name, "dtype": dtype_name(d),
                "cols": [[int(v) for v in c] for c in T.columns(o, d)]} for d in target.ints for o in sorted(T.DIVISIONS, key=lambda o: o.name)]
    while pending:
      proc = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(pending), capture_output=True, text=True, env=child_env(target), timeout=600)
      for line in proc.stdout.splitlines():
        key, _, hexed = line.partition(" ")
        _isolated[key] = bytes.fromhex(hexed)
      pending = [j for j in pending if j["key"] not in _isolated]
      if proc.returncode == 0 or not pending: break
      why = f"killed the process with signal {-proc.returncode}" if proc.returncode < 0 else f"failed: {(proc.stderr.strip().splitlines() or [''])[-1]}"
      _isolated[pending.pop(0)["key"]] = f"on the edge operands (MIN // -1, x // 0, every sign combination) the kernel {why}"
  got = _isolated[case_id(op, dt, None)]
  if isinstance(got, str): raise AssertionError(f"{case_id(op, dt, None)}: {got}")
  return got

# ***** several ops in one kernel: each intermediate is rounded (or wrapped) to its dtype, as if stored *****

def _v(name: str): return ("in", name)
# name: (dtypes, expression over inputs a, b, c as nested (op, *srcs) tuples, rows of (a, b, c)). Each row's result
# differs when a backend keeps intermediates wider than their dtype: float16/bfloat16 in float32, int8/int16 in int32.
FUSED = {
  "(a+b)-a": ((dtypes.float16, dtypes.bfloat16, dtypes.float32), (Ops.SUB, (Ops.ADD, _v("a"), _v("b")), _v("a")),
              [(2048.0, 1.0, 0.0), (256.0, 1.0, 0.0), (2.0**24, 1.0, 0.0), (1.0, 2.0**-12, 0.0), (65504.0, 65504.0, 0.0)]),
  "(a*b)/b": ((dtypes.float16, dtypes.bfloat16, dtypes.float32), (Ops.FDIV, (Ops.MUL, _v("a"), _v("b")), _v("b")),
              [(300.0, 300.0, 0.0), (1e-5, 1e-5, 0.0), (3e38, 10.0, 0.0), (1.0 / 3, 3.0, 0.0)]),
  "(a+b)<c": ((dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32),
              (Ops.CMPLT, (Ops.ADD, _v("a"), _v("b")), _v("c")),
              [(100, 100, 0), (127, 1, 0), (200, 100, 50), (255, 1, 1), (32767, 1, 0), (65535, 1, 1), (2**31 - 1, 1, 0), (2**32 - 1, 1, 1)]),
  "int32(a+b)": ((dtypes.bool,), (Ops.CAST, (Ops.ADD, _v("a"), _v("b"))), [(True, True, False), (True, False, False), (False, False, False)]),
}

def inputs_of(e) -> list[str]: return [e[1]] if e[0] == "in" else list(dict.fromkeys(k for s in e[1:] for k in inputs_of(s)))

def fused_kernel(expr, dt: DType, n: int) -> tuple[UOp, list[str]]:
  """The expression as one kernel AST; its parameters are the output and the inputs it reads, in order of appearance."""
  names = inputs_of(expr)
  ins = {k: UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), i + 1) for i, k in enumerate(names)}
  def build(e) -> UOp:
    if e[0] == "in": return ins[e[1]]
    srcs = tuple(build(s) for s in e[1:])
    if e[0] is Ops.CAST: return UOp(Ops.CAST, dtypes.int32, srcs[:1])
    return UOp(e[0], dtypes.bool if e[0] in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt, srcs)
  value = build(expr)
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, value.dtype.ptr(n), (), 0).store(value),)), names

def fused_definition(expr, dt: DType, vals: dict[str, np.ndarray]) -> np.ndarray:
  if expr[0] == "in": return vals[expr[1]]
  srcs = [fused_definition(s, dt, vals) for s in expr[1:]]
  if expr[0] is Ops.CAST: return srcs[0].astype(np.int32)
  return exec_alu(expr[0], dtypes.bool if expr[0] in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt, srcs)

def test_fused_intermediates(device, target: Target, fused):
  """Several ops in one kernel: every intermediate is rounded to its dtype ((2048h + 1) - 2048 is 0 in float16), integers
  wrap between ops, and a bool stored by one op is a 0/1 byte the next op reads as such (True + True is True, cast 1)."""
  name, dt = fused
  dts, expr, rows = FUSED[name]
  rows = [r for r in rows if all(T.holds(dt, v) for v in r)]
  ast, names = fused_kernel(expr, dt, len(rows))
  vals = dict(zip("abc", operands((dt,) * 3, [list(c) for c in zip(*rows)])))
  out_dt = ast.src[0].src[1].dtype
  want = to_bytes(fused_definition(expr, dt, vals), out_dt)
  got = run_kernel(target.name, ast, (len(rows), out_dt), [(to_bytes(vals[k], dt), dt) for k in names])
  bad = T.mismatched_rows(Ops.NOOP, dt, out_dt, got, want, [])
  if out_dt in FLOATS and not target.cap("inf_nan"): bad = bad[np.isfinite(from_bytes(want, out_dt)[bad].astype(np.float64))]
  if bad.size: raise AssertionError(f"{name} in one {dtype_name(dt)} kernel: " + "; ".join(
    f"{tuple(vals[k][i].item() for k in names)}: got {from_bytes(got, out_dt)[i].item()!r}, expected {from_bytes(want, out_dt)[i].item()!r}" for i in bad[:6]))
