"""Kernels the contract and resource checks launch by hand: real schedule items, and ASTs with integer launch variables."""
from __future__ import annotations
import numpy as np
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops
from tinycore.tensor import Tensor
from tinycore.runtime.device import Buffer
from tinycore.codegen import get_program

def var_kernel(n: int, dt: DType = dtypes.float32) -> UOp:
  """out[i] = inp[i] * a + b, where a and b are integer launch variables: a kernel AST in the scheduler's form."""
  out, inp = UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), 0), UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), 1)
  def spread(v: UOp) -> UOp: return UOp(Ops.CAST, dt, (v,)).reshape((1,)).expand((n,))
  a, b = UOp.variable("a", 0, 1000), UOp.variable("b", -50, 50)
  value = UOp(Ops.ADD, dt, (UOp(Ops.MUL, dt, (inp, spread(a))), spread(b)))
  return UOp(Ops.SINK, dtypes.void, (out.store(value),))

def nested_sum_kernel(rows: int, outer: int, inner: int, dt: DType = dtypes.float32) -> UOp:
  """out[i] = sum over j of (sum over k of inp[i, j, k])^2, both sums in one kernel (a reduction inside a reduction's
  loop, which the scheduler makes on CPU-style targets and a GPU-style one meets splitting long rows)."""
  out, inp = UOp(Ops.DEFINE_GLOBAL, dt.ptr(rows), (), 0), UOp(Ops.DEFINE_GLOBAL, dt.ptr(rows * outer * inner), (), 1)
  s = UOp(Ops.REDUCE_AXIS, dt, (UOp(Ops.RESHAPE, dt, (inp,), (rows, outer, inner)),), (Ops.ADD, (2,)))
  total = UOp(Ops.REDUCE_AXIS, dt, (UOp(Ops.MUL, dt, (s, s)),), (Ops.ADD, (1,)))
  return UOp(Ops.SINK, dtypes.void, (out.store(UOp(Ops.RESHAPE, dt, (total,), (rows,))),))

class Launch:
  """One kernel compiled through the backend's roles directly (renderer, assembler, driver), with its own buffers."""
  def __init__(self, dev, ast: UOp, sizes: list[tuple[int, DType]], opts: tuple = ()):
    """`opts`: optimisation actions (tinycore.codegen.opt.Opt) to compile with, instead of the renderer's own choice."""
    self.dev = dev
    self.spec = get_program(ast, dev.renderer, opts=opts)
    self.binary = dev.assembler.assemble(self.spec.src)
    self.program = dev.driver.load(self.spec.name, self.binary, self.spec)
    self.bufs = [Buffer(dev.spec.name, n, dt).ensure_allocated() for n, dt in sizes]
  def write(self, i: int, arr: np.ndarray) -> None: self.bufs[i].copyin(memoryview(np.ascontiguousarray(arr)).cast("B"))
  def read(self, i: int, npdt) -> np.ndarray: return np.frombuffer(self.bufs[i].as_bytes(), npdt)
  def __call__(self, var_vals: dict[str, int] | None = None, wait: bool = False, bufs: list | None = None):
    vv = var_vals or {}
    self.spec.check_aligned(bufs or self.bufs)   # as the core's runner does: views off a wide kernel's alignment are refused
    gsize, lsize = self.spec.launch_dims(vv)
    vals = tuple(vv[v.arg[0]] for v in self.spec.vars)
    return self.program(*[b._buf for b in (bufs or self.bufs)], global_size=gsize, local_size=lsize, vals=vals, wait=wait)

def launch_for(dev, t: Tensor) -> Launch:
  """The single kernel realizing t (an expression over Tensor.empty inputs), with buffers shaped like its parameters."""
  items = [si for si in t.schedule() if si.ast.op is Ops.SINK]
  assert len(items) == 1, f"expected one kernel for {t}, the schedule has {len(items)}"
  si = items[0]
  return Launch(dev, si.ast, [(b.size, b.dtype) for b in si.bufs])
