"""The Renderer base: how a backend describes its target to the shared codegen, and turns linear UOps into text."""
from __future__ import annotations
import re
from dataclasses import dataclass, field
from typing import Any
from tinycore.dtype import DType, dtypes, ALL_DTYPES
from tinycore.uop import UOp, Ops, sym_eval
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.runtime.errors import UnsupportedError

@dataclass
class ProgramSpec:
  """One compiled kernel's interface: what the driver needs to launch it."""
  name: str
  src: str
  device: str
  uops: list[UOp]
  global_size: tuple[Any, ...] = (1, 1, 1)   # ints or symbolic UOps resolved at launch
  local_size: tuple[int, ...] | None = None
  vars: tuple[UOp, ...] = ()                 # DEFINE_VARs in launch order
  outs: tuple[int, ...] = ()                 # param indices written
  ins: tuple[int, ...] = ()                  # param indices read
  flops: Any = 0
  mem_bytes: Any = 0
  aligned: int = 1                           # bytes every buffer's address must be a multiple of: its widest access (codegen/widen.py)
  def launch_dims(self, var_vals: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    return tuple(sym_eval(g, var_vals) for g in self.global_size), self.local_size
  def check_aligned(self, bufs: list) -> None:
    """Refuse buffers (views) not starting at a multiple of `aligned` bytes, which this kernel's wide accesses assume."""
    if (aligned := self.aligned) <= 1: return
    for i, b in enumerate(bufs):   # a plain loop: the runner calls this at every launch of such a kernel
      if b.offset % aligned:
        raise UnsupportedError(f"backend {self.device}: kernel {self.name} accesses {aligned} bytes at a time, so each of its buffers must "
                               f"start at a multiple of {aligned} bytes, but buffer {i} is a view at byte offset {b.offset}: "
                               f"pass a view at such an offset, or a copy")

@dataclass(frozen=True)
class TensorCore:
  """A matrix instruction the threads of one warp (or wave) run together: D[M, N] = A[M, K] @ B[K, N] + C, each thread
  (lane) holding a few elements of each operand in registers (its fragment). Where each element lives is data: for
  each bit of the lane id, then each bit of an element's position in the fragment, the bit of the tile coordinate it
  sets, as (coordinate, bit) with coordinates "m", "n", "k"; None where lanes differing in that bit hold the same
  elements (copies). A's coordinates are m and k, B's k and n, C's and D's m and n."""
  name: str                                   # what the renderer emits for it (its instruction)
  dims: tuple[int, int, int]                  # M, N, K
  dtype_in: DType                             # A's and B's elements
  dtype_out: DType                            # C's and D's: the products are exact, summed in this type
  threads: int                                # the lanes running it together (a warp, a wave)
  a: tuple[tuple, tuple]                      # (lane bits, element bits) of A
  b: tuple[tuple, tuple]                      # of B
  c: tuple[tuple, tuple]                      # of C and D
  def elements(self, operand: str) -> int: return 1 << len(getattr(self, operand)[1])
  def coords(self, operand: str, lane: int, element: int) -> dict[str, int]:
    """The tile coordinates of `element` of `lane`'s fragment of `operand` ("a", "b", "c")."""
    lane_bits, elem_bits = getattr(self, operand)
    out = {c: 0 for c in {"a": "mk", "b": "kn", "c": "mn"}[operand]}
    for value, bits in ((lane, lane_bits), (element, elem_bits)):
      for i, to in enumerate(bits):
        if to is not None: out[to[0]] |= ((value >> i) & 1) << to[1]
    return out
  def literal(self) -> tuple:
    """As plain values (for program text): the fields in order, dtypes by name."""
    return (self.name, self.dims, self.dtype_in.name, self.dtype_out.name, self.threads, self.a, self.b, self.c)

class Renderer:
  """Subclass per target. Class attributes describe the target; `render` turns linear UOps into source text."""
  device: str = "NONE"
  supported_dtypes: frozenset[DType] = frozenset(ALL_DTYPES)
  has_local: bool = False             # workgroups / thread blocks
  has_shared: bool = False            # workgroup shared memory
  global_dims: int = 0                # >0: output loops become SPECIAL global ids (GPU style), at most this many dims
  global_max: tuple[int, ...] | None = None   # max launch size per global dim
  local_max: tuple[int, ...] | None = None
  shared_max: int = 0
  max_threads_per_group: int = 0
  shuffle_width: int = 0              # lanes of a warp (wave) SHUFFLE_XOR reads across; 0: none (grouped reductions
                                      # combine their partials through shared memory alone)
  threads: int = 0                    # >0: CPU style, the outermost loop is split across this many threads
  upcast_max: int = 8                 # largest unroll/upcast the optimizer may use
  vector_width: int = 1               # native SIMD width in float32 lanes (1: no vector types)
  vector_registers: int = 16          # SIMD registers the register tiles of CPU-style targets may fill
  registers: int = 0                  # 32-bit registers one GPU thread may hold (0: no limit): tensor-core tiles stay within it
  mulacc_dtypes: frozenset[DType] = frozenset()   # float dtypes whose MULACC (a * b + c rounded once) the target renders: a
                                              # reduction's product joins its accumulator as one (codegen/__init__.py)
  cache_bytes: int = 0                # a core's own cache nearest memory (L2 on x86) in bytes, 0: unknown (CPU-style cache blocking)
  max_buffers: int = 0                # 0: unlimited; else params per kernel (incl. output)
  loop_pass_max: int = 0              # 0: unlimited; else loop passes one thread may make in all (the scheduler splits kernels under it)
  index_bits: int = 64                # widest integer the target uses for addressing
  extra_matcher: PatternMatcher | None = None  # target-specific decompositions applied before linearizing
  tensor_cores: tuple[TensorCore, ...] = ()   # the matrix instructions the TC action may use (codegen/opt/tc.py)
  # what the target computes natively; codegen/emulate.py rewrites every other supported dtype into these before rendering:
  alu_dtypes: frozenset[DType] | None = None   # arithmetic (None: every supported dtype). Outside it a 16-bit float op is done in
                                              # float32 and rounded to nearest even, an 8/16-bit integer op in 32 bits and wrapped,
                                              # a 64-bit integer is two 32-bit halves (uint32.vec(2): low word first)
  float_conversions: frozenset[DType] = frozenset()  # 16-bit floats outside alu_dtypes the target converts to and from float32
                                                     # itself; the others are carried as their bits (uint16), converted in integer code
  exact_division: bool = True         # float32 FDIV, RECIP and SQRT correctly rounded (else the core rounds half results from them itself)
  memory_word: int = 1                # bytes of the narrowest load and store; narrower elements are packed in 32-bit words
                                      # (a store of one is STORE(word index, bits, mask): only the mask's bits are written)
  memory_vector: int = 0              # bytes of the widest load and store of a thread's consecutive elements (0: one element
                                      # each): the core makes one only at an index it proves aligned (codegen/widen.py)
  language: str = ""                  # what render() writes (for error messages)
  rules: PatternMatcher | None = None  # a rule renderer's table from UOps to text (renderer/cstyle.py, renderer/isa.py)
  async_copy_bytes: tuple[int, ...] = ()   # sizes of a copy from global to shared memory the target makes without a register
                                      # (NV's cp.async): async_copies() says which stores are such copies
  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError
  def check_dtype(self, dt: DType) -> None:
    if dt.scalar not in self.supported_dtypes and dt.scalar not in (dtypes.index, dtypes.void):
      raise UnsupportedError(f"backend {self.device} does not support dtype {dt.scalar.name}; supported: {sorted(d.name for d in self.supported_dtypes)}")
  def describe(self) -> dict[str, Any]:
    keys = ("device", "has_local", "has_shared", "global_dims", "global_max", "local_max", "shared_max", "threads", "upcast_max", "vector_width", "vector_registers", "registers", "cache_bytes", "max_buffers", "loop_pass_max", "memory_vector", "async_copy_bytes", "shuffle_width")
    return {k: getattr(self, k) for k in keys} | {k: sorted(d.name for d in getattr(self, k)) for k in ("supported_dtypes", "mulacc_dtypes")}

def async_copies(uops, ren: Renderer) -> set[UOp]:
  """The STOREs `ren` makes as asynchronous copies from global to shared memory (ren.async_copy_bytes): a store into
  shared memory of a global LOAD nothing else reads, of one of those sizes. The data goes from memory to shared memory
  without a register and lands only when the thread waits for its copies, which the target does before every barrier:
  so the linearizer issues a double-buffered tile's next copy at the top of the trip, where it overlaps the trip's sums
  (codegen/linearize.py). `uops`: a kernel's nodes (the graph's, or the linear program, where a node may repeat)."""
  if not ren.async_copy_bytes: return set()
  nodes = dict.fromkeys(uops)
  users: dict[UOp, int] = {}
  for u in nodes:
    for s in u.src: users[s] = users.get(s, 0) + 1
  # a store's other sources: a gate (a tile the threads do not divide) and the barrier it follows
  return {u for u in nodes if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_LOCAL and (v := u.src[1]).op is Ops.LOAD
          and all(g.dtype == dtypes.bool or g.op is Ops.BARRIER for g in u.src[2:]) and v.arg is None and len(v.src) == 1
          and v.src[0].src[0].op is Ops.DEFINE_GLOBAL and users[v] == 1 and v.dtype.nbytes in ren.async_copy_bytes}

class KernelWriter:
  """One kernel being written by a renderer's rule table: its rules (ctx is this writer) return each value's text (a
  name, a register, an inline constant) and add lines; an op with no rule is a clean error naming the backend."""
  def __init__(self, ren: Renderer, name: str, uops: list[UOp]):
    self.ren, self.name, self.uops = ren, re.sub(r"\W", "_", name), uops   # the kernel's name as an identifier
    self.r: dict[UOp, Any] = {}
    self.lines: list[str] = []
  def __getitem__(self, u: UOp): return self.r[u]
  def args(self, u: UOp) -> list: return [self[s] for s in u.src]
  def write(self, u: UOp):
    if self.ren.rules is None or (text := self.ren.rules.rewrite(u, ctx=self)) is None:
      raise UnsupportedError(f"backend {self.ren.device}: the {self.ren.language} renderer has no rule for {u.op} on {u.src[-1].dtype if u.src else u.dtype}")
    return text
  def write_all(self) -> KernelWriter:
    for u in self.uops: self.r[u] = self.write(u)
    return self

def on(ops, dts=None) -> UPat:
  """A rule's pattern: the ops `ops` whose first operand is of a dtype in `dts` (named x)."""
  return UPat(ops, src=(UPat(dtype=dts),), allow_any_len=True, name="x")
