"""The shared codegen: kernel AST -> a list of named passes (lower, optimise, expand, thread ids, ...) -> linear UOps -> text."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable
from tinycore.dtype import dtypes
from tinycore.helpers import DEBUG, prod
from tinycore import trace
from tinycore.uop import UOp, Ops, GroupOp, print_uops, symbolic_rules
from tinycore.rewrite import graph_rewrite, PatternMatcher, UPat
from tinycore.renderer import Renderer, ProgramSpec
from tinycore.runtime.errors import UnsupportedError
from tinycore.codegen.lowerer import lower_ast
from tinycore.codegen.opt import optimize, gpu_style, Opt
from tinycore.codegen.opt import cpu
from tinycore.codegen.expander import expand
from tinycore.codegen.reduce import group_reduces, tree_sums
from tinycore.codegen.gpudims import map_gpu_dims
from tinycore.codegen.widen import widen
from tinycore.codegen.linearize import linearize, TERMS
from tinycore.codegen.emulate import emulate, rewrite_linear

def _index_dtype(sink: UOp, ren: Renderer):
  lim = max([max(abs(u.vmin), abs(u.vmax)) for u in sink.toposort() if u.dtype == dtypes.index], default=0)
  return dtypes.int32 if lim < 2**31 else dtypes.int64

def lower_index_dtype(sink: UOp, ren: Renderer) -> UOp:
  """Index math has no fixed width until here: int32 when every index fits, else int64."""
  dt = _index_dtype(sink, ren)
  if dt == dtypes.int64 and ren.index_bits < 64:
    raise UnsupportedError(f"backend {ren.device} addresses with {ren.index_bits}-bit integers, but this kernel needs 64-bit indices")
  def retype(x: UOp):
    if x.dtype != dtypes.index: return None
    if x.op is Ops.CONST: return UOp.const(dt, x.arg)
    return x.replace(dtype=dt, arg=(x.arg[0], x.arg[1], x.arg[2]) if x.op is Ops.DEFINE_VAR else x.arg)
  return graph_rewrite(sink, PatternMatcher([(UPat(dtype=dtypes.index, name="x"), retype)]), bottom_up=False)

def estimate_cost(uops: list[UOp], gsize, lsize=None) -> tuple[int, int]:
  """FLOPs (ALU ops times trip counts) and bytes of global memory touched by loads and stores, over every thread."""
  mult, flops, mem = 1, 0, 0
  stack = []
  for u in uops:
    if u.op is Ops.RANGE:
      end = u.src[0].arg if u.src[0].op is Ops.CONST else int(u.src[0].vmax)
      stack.append(mult); mult *= max(end, 0)
    elif u.op is Ops.ENDRANGE: mult = stack.pop()
    elif u.op in GroupOp.ALU and u.dtype != dtypes.bool and u.op not in (Ops.WHERE,) and not dtypes.is_int(u.dtype): flops += mult * u.dtype.count
    elif u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL: mem += mult * u.dtype.nbytes
    elif u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL: mem += mult * u.src[1].dtype.nbytes
  g = prod(x if isinstance(x, int) else int(x.vmax) for x in gsize) * prod(lsize or ())
  return flops * g, mem * g

def aligned_bytes(uops: list[UOp], ren: Renderer) -> int:
  """The widest global access of a thread, which codegen/widen.py made assuming every buffer starts at a multiple of its
  size (1: element by element; CPU-style vectors assume nothing)."""
  if ren.memory_vector <= 1: return 1
  return max((u.src[0].dtype.nbytes for u in uops if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and
              u.src[0].dtype.count > 1), default=1)

def lower_to_sink(ast: UOp, ren: Renderer) -> UOp:
  """The kernel as loops, loads and stores with simplified index math: what optimisations (and BEAM) work on."""
  for u in ast.toposort():
    if u.op not in (Ops.SINK, Ops.STORE): ren.check_dtype(u.dtype.base if hasattr(u.dtype, "base") and u.dtype.base is not None else u.dtype)
  return graph_rewrite(lower_ast(ast), symbolic_rules)

def kernel_name(ast: UOp) -> str:
  """tinygrad-style: r_ for kernels with a reduction, E_ otherwise, then the output shape."""
  has_reduce = any(u.op is Ops.REDUCE_AXIS for u in ast.toposort())
  shape = ast.src[0].src[1].shape
  return ("r_" if has_reduce else "E_") + ("_".join(str(s) if isinstance(s, int) else "v" for s in shape) or "1")

@dataclass
class Pass:
  """One named step from the lowered kernel to the graph the linearizer orders; VIZ shows each as a step."""
  name: str
  run: Callable[[UOp, CodegenState], UOp]

@dataclass
class CodegenState:
  """What the passes share: the target, BEAM's actions, and the launch size the thread-id pass decides."""
  ren: Renderer
  opts: tuple[Opt, ...] = ()
  global_size: tuple = (1, 1, 1)
  local_size: tuple | None = None

def thread_ids(sink: UOp, st: CodegenState) -> UOp:
  """GPU-style targets: grouped reductions (warp shuffles, shared memory), then grid and block ids (codegen/gpudims.py).
  CPU-style targets: their own register tiles, vectors and the outer loop across cores (codegen/opt/cpu.py)."""
  if gpu_style(st.ren): sink, st.global_size, st.local_size = map_gpu_dims(group_reduces(sink, st.ren), st.ren)
  elif st.ren.threads > 0 or st.ren.vector_width > 1: sink, st.global_size = cpu.optimize(sink, st.ren)
  return sink

PASSES = [
  Pass("optimize", lambda s, st: optimize(s, st.ren, st.opts)),        # actions on typed ranges: BEAM's, else hand-coded
  Pass("expand", lambda s, st: expand(s)),                              # UPCAST / UNROLL ranges written out as copies
  Pass("thread ids", thread_ids),                                       # grouped reductions, grid/block ids, CPU tiles
  Pass("tree sums", lambda s, st: tree_sums(s)),                        # long float sums as trees of short loops (accuracy)
  Pass("wide accesses", lambda s, st: widen(s, st.ren)),                # a thread's consecutive aligned elements: one vector access
  Pass("renderer rules", lambda s, st: s if st.ren.extra_matcher is None else graph_rewrite(s, st.ren.extra_matcher)),
  Pass("index width", lambda s, st: lower_index_dtype(s, st.ren)),      # index math in int32 where it fits, else int64
]

def run_passes(sink: UOp, st: CodegenState) -> UOp:
  for p in PASSES:
    if trace.capture is None or trace.capture.group is None: sink = p.run(sink, st)
    else:
      with trace.capture.pass_step(p.name, sink) as done: sink = done(p.run(sink, st))
  return sink

# a reduction's order and rounding are free (docs/architecture.md "Accuracy of reductions"): where the target renders a
# fused multiply-add of the dtype, a product joins its accumulator rounded once, or, in a sum written out whole (its
# loops unrolled: an ADD of TERMS, the running sum first), the sum of the terms before it. Outside reductions a * b + c
# stays two roundings, as the graph says.
def _joins_sum(x: UOp, ren: Renderer) -> bool:
  """x adds a product to its accumulator, or to the terms before it in a sum written out, in a dtype ren fuses."""
  return x.src[1].op is Ops.MUL and (x.src[0].op is Ops.DEFINE_ACC or x.arg == TERMS) and x.dtype.scalar in ren.mulacc_dtypes
fuse_products = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda ctx, x: UOp(Ops.MULACC, x.dtype, (*x.src[1].src, x.src[0])) if _joins_sum(x, ctx) else None)])

def fuse_mulacc(uops: list[UOp], ren: Renderer) -> list[UOp]:
  return rewrite_linear(uops, fuse_products, ren) if any(u.op is Ops.ADD and _joins_sum(u, ren) for u in uops) else uops

def get_program(ast: UOp, ren: Renderer, name: str | None = None, opts: tuple[Opt, ...] = ()) -> ProgramSpec:
  """`opts`: optimisation actions (codegen/opt/kernel.py) BEAM chose; none: the target's hand-coded choice. Lowered, then
  PASSES in order, then linearized and rendered."""
  st = CodegenState(ren, opts)
  sink = run_passes(lower_to_sink(ast, ren), st)
  gsize, lsize = st.global_size, st.local_size
  # every parameter, used or simplified away, so the kernel's signature is the schedule item's buffer list
  uops = linearize(sink, [u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL], ren)
  flops, mem = estimate_cost(uops, gsize, lsize)
  uops = emulate(fuse_mulacc(uops, ren), ren)   # the dtypes the renderer lacks (on the linear program: the linearizer makes the accumulators)
  if DEBUG >= 5: print_uops(uops)
  name = name or kernel_name(ast)
  params = sorted({u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}.items())
  written = {u.src[0].src[0].arg for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL}
  src = ren.render(name, uops)
  return ProgramSpec(name, src, ren.device, uops, gsize, lsize, tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg)),
                     tuple(sorted(written)), tuple(i for i, _ in params if i not in written), flops, mem,
                     aligned_bytes(uops, ren))
