"""The two devices the core ships: PYTHON, an interpreter of linear UOps (their executable definition), and NULL."""
from __future__ import annotations
import ast, math
import numpy as np
from tinycore.dtype import DType, PtrDType, dtypes, to_np_dtype, to_np_value_dtype, DTYPES_BY_NAME
from tinycore.uop import UOp, Ops, AxisType, GroupOp, exec_alu, exec_cast, bf16_to_f32, f32_to_bf16
from tinycore.renderer import Renderer, TensorCore
from tinycore.runtime.device import Allocator, LRUAllocator, Driver, Assembler
from tinycore.runtime.errors import CompileError
from tinycore.runtime.plugin import BackendSpec, hookimpl, instance_name, virtual_instances

# ***** the text form: one Python literal per UOp, readable and parseable without eval *****

def _enc_dtype(dt: DType):
  if isinstance(dt, PtrDType): return (dt.base.name, dt.base.count, dt.size, dt.addrspace)
  return (dt.name, dt.count)
def _dec_dtype(t) -> DType:
  base = DTYPES_BY_NAME[t[0]].vec(t[1])
  return base.ptr(t[2], t[3]) if len(t) == 4 else base

class PythonRenderer(Renderer):
  """GPU-style, so the definition device runs every GPU feature: every thread of the launch is a lane of one numpy
  vector, the threads run in lockstep (a barrier is where they already are), a block's shared memory is its row."""
  device = "PYTHON"
  global_dims = 3
  has_local = has_shared = True
  local_max = (1024, 1024, 64)
  max_threads_per_group = 1024
  shared_max = 48 << 10
  shuffle_width = 32   # SHUFFLE_XOR within warps of 32 threads, as NV's shfl.sync
  mulacc_dtypes = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})   # exec_alu's fma, rounded once
  memory_vector = 16   # loads and stores of up to 16 bytes of consecutive elements, as NV's: the definition runs them
  # a tensor core of its own, so the TC action and WMMA run everywhere the core does: 8x8x8 over a warp of 32, each lane
  # two elements of each operand, the lane and element bits spread over the coordinates (a swizzle to get wrong)
  tensor_cores = tuple(TensorCore(f"wmma_8x8x8_{dt.name}", (8, 8, 8), dt, dtypes.float32, 32,
                                  a=((("m", 0), ("m", 1), ("m", 2), ("k", 1), ("k", 2)), (("k", 0),)),
                                  b=((("n", 0), ("n", 1), ("n", 2), ("k", 0), ("k", 1)), (("k", 2),)),
                                  c=((("n", 0), ("n", 1), ("m", 0), ("m", 1), ("m", 2)), (("n", 2),)))
                       for dt in (dtypes.float16, dtypes.bfloat16))
  def render(self, name: str, uops: list[UOp]) -> str:
    ids: dict[UOp, int] = {}   # a node computed again after a loop (its first value gone with the loop): its latest line
    lines = [f"# {name}"]
    for i, u in enumerate(uops):
      # Ops by name; inf/nan as strings so every line stays a Python literal
      arg = u.arg.name if isinstance(u.arg, Ops) else repr(u.arg) if isinstance(u.arg, float) and not math.isfinite(u.arg) else u.arg
      if u.op is Ops.RANGE: arg = (u.arg[0], u.arg[1].name)
      if u.op is Ops.WMMA: arg = u.arg.literal()
      lines.append(repr((u.op.name, _enc_dtype(u.dtype), tuple(ids[s] for s in u.src), arg)))
      ids[u] = i
    return "\n".join(lines)

def _tensor_core(t: tuple) -> TensorCore:
  name, dims, din, dout, threads, a, b, c = t
  return TensorCore(name, tuple(dims), DTYPES_BY_NAME[din], DTYPES_BY_NAME[dout], threads, a, b, c)

def wmma(tc: TensorCore, a: np.ndarray, b: np.ndarray, c: np.ndarray, lanes: int) -> np.ndarray:
  """D = A @ B + C per warp (tc.threads consecutive lanes), gathered from and scattered to the lanes' fragments where the
  TensorCore's layout says each element lives; products and sums in float64, rounded once to dtype_out. Lanes holding
  copies of an element must agree (the hardware reads one of them: a kernel that lets them differ is wrong)."""
  M, N, K = tc.dims
  frag = {op: np.broadcast_to(np.asarray(v, np.float64), (lanes, tc.elements(op))).reshape(-1, tc.threads, tc.elements(op))
          for op, v in (("a", a), ("b", b), ("c", c))}
  def gather(op: str, rows: str, cols: str, shape: tuple[int, int]) -> np.ndarray:
    out, seen = np.zeros((frag[op].shape[0],) + shape), np.zeros(shape, bool)
    for lane in range(tc.threads):
      for e in range(tc.elements(op)):
        at = tc.coords(op, lane, e)
        r, col, v = at[rows], at[cols], frag[op][:, lane, e]
        if seen[r, col] and not np.array_equal(out[:, r, col], v, equal_nan=True):
          raise RuntimeError(f"WMMA {tc.name}: lanes holding copies of {op.upper()}[{r}, {col}] disagree")
        out[:, r, col], seen[r, col] = v, True
    return out
  d = gather("a", "m", "k", (M, K)) @ gather("b", "k", "n", (K, N)) + gather("c", "m", "n", (M, N))
  out = np.empty(frag["c"].shape)
  for lane in range(tc.threads):
    for e in range(tc.elements("c")):
      at = tc.coords("c", lane, e)
      out[:, lane, e] = d[:, at["m"], at["n"]]
  out = out.reshape(lanes, -1).astype(np.float32)
  return bf16_to_f32(f32_to_bf16(out)) if tc.dtype_out == dtypes.bfloat16 else out.astype(to_np_dtype(tc.dtype_out))

class PythonProgram:
  """Runs a kernel: each UOp's value is a numpy array over all global lanes; loops run in Python."""
  def __init__(self, name: str, src: str):
    try:
      rows = [ast.literal_eval(line) for line in src.splitlines() if line and not line.startswith("#")]
      self.uops = [(Ops[op], _dec_dtype(dt), srcs, Ops[arg] if op in ("REDUCE", "DEFINE_ACC") and isinstance(arg, str) else
                    (arg[0], AxisType[arg[1]]) if op == "RANGE" else _tensor_core(arg) if op == "WMMA" else arg) for op, dt, srcs, arg in rows]
    except Exception as e: raise CompileError(f"PYTHON: cannot load kernel {name!r}: corrupt program text ({type(e).__name__}: {e})") from e
    self.name = name
    self.ends = {src[0]: i for i, (op, _, src, _) in enumerate(self.uops) if op is Ops.ENDRANGE}
    if any(op is Ops.RANGE and i not in self.ends for i, (op, *_) in enumerate(self.uops)): raise CompileError(f"PYTHON: kernel {name!r} opens a loop it never closes")
  def elements(self, idx, n: int):
    """The elements a load or store of n at idx reads or writes: a vector access (n > 1, codegen/widen.py) takes n
    consecutive ones from an index the core proved a multiple of n; one that is not is the core's bug, never rounded."""
    if n == 1: return idx
    if np.any(np.asarray(idx) % n): raise RuntimeError(f"PYTHON: kernel {self.name!r} accesses {n} elements at an index that is not a multiple of {n}")
    return np.asarray(idx)[..., None] + np.arange(n)
  def __call__(self, *bufs: memoryview, global_size=(1, 1, 1), local_size=None, vals: tuple[int, ...] = (), wait: bool = False):
    import time
    st = time.perf_counter()
    gdims, ldims = tuple(int(g) for g in global_size), tuple(int(x) for x in (local_size or (1, 1, 1)))
    nblocks, nthreads = int(np.prod(gdims)), int(np.prod(ldims))
    lane = np.arange(nblocks * nthreads)
    block, thread = lane // nthreads, lane % nthreads
    def ids(flat: np.ndarray, dims: tuple[int, ...], d: int) -> np.ndarray: return (flat // int(np.prod(dims[:d]))) % dims[d]
    views: dict = {}   # buffer key -> flat numpy view: ("g", param) for globals, ("l", pc) for a shared-memory array of every block
    vals_it = iter(vals)
    v: list = [None] * len(self.uops)
    loop_end: dict[int, int] = {}
    pc = 0
    uops = self.uops
    while pc < len(uops):
      op, dt, src, arg = uops[pc]
      if op is Ops.DEFINE_GLOBAL:
        base = dt.base
        mv = bufs[arg]
        views[("g", arg)] = np.frombuffer(mv, dtype=to_np_dtype(base), count=mv.nbytes // base.itemsize)
        v[pc] = (("g", arg), 0)
      elif op is Ops.DEFINE_LOCAL:
        views[("l", pc)] = np.zeros(nblocks * dt.size, to_np_value_dtype(dt.base))
        v[pc] = (("l", pc), block * dt.size)
      elif op is Ops.DEFINE_VAR: v[pc] = np.asarray(next(vals_it), to_np_dtype(dt))
      elif op is Ops.SPECIAL:
        d = int(arg[4:])
        v[pc] = (ids(thread, ldims, d) if arg.startswith("lidx") else ids(block, gdims, d)).astype(to_np_dtype(dt))
      elif op is Ops.CONST: v[pc] = np.asarray(float(arg) if isinstance(arg, str) else arg, to_np_value_dtype(dt))
      elif op is Ops.RANGE:  # entered once per loop: ENDRANGE jumps back to the instruction after it
        loop_end[pc] = int(np.max(v[src[0]]))
        v[pc] = np.asarray(0, to_np_dtype(dt))
        if loop_end[pc] <= 0: pc = self.ends[pc] + 1; continue
      elif op is Ops.ENDRANGE:
        r = src[0]
        v[r] = v[r] + 1
        if int(v[r]) < loop_end[r]: pc = r + 1; continue
      elif op is Ops.INDEX: v[pc] = (v[src[0]][0], v[src[0]][1] + v[src[1]])
      elif op is Ops.LOAD:   # srcs past the index only order it (a barrier: every lane is already there)
        key, idx = v[src[0]]
        x = views[key][self.elements(idx, dt.count)]
        v[pc] = bf16_to_f32(x) if dt.scalar == dtypes.bfloat16 and key[0] == "g" else x
      elif op is Ops.STORE:
        key, idx = v[src[0]]
        val, n = v[src[1]], uops[src[1]][1].count
        if key[0] == "g" and uops[src[1]][1].scalar == dtypes.bfloat16: val = f32_to_bf16(val)
        # srcs past the value: a bool gate (store where it holds), a uint32 mask (a sub-word store: only the mask's bits
        # are written, lane after lane, since lanes may share a word), a barrier (order only)
        gate, mask = (next((v[s] for s in src[2:] if uops[s][1] == d), True) for d in (dtypes.bool, dtypes.uint32))
        if n > 1: idx, gate = self.elements(idx, n), np.asarray(gate)[..., None]   # a vector: each lane's n elements
        idx, val, keep, mask = np.broadcast_arrays(idx, val, gate, mask)
        idx, val, mask = idx[keep], val[keep], mask[keep]
        if mask.dtype == bool: views[key][idx] = val
        else:
          np.bitwise_and.at(views[key], idx, ~mask)
          np.bitwise_or.at(views[key], idx, val & mask)
      elif op is Ops.BARRIER: pass   # lockstep: every thread of every block has arrived
      elif op is Ops.SHUFFLE_XOR:    # lockstep: every thread of the warp is here; the partner must be in it and exist
        partner, width = thread ^ arg, PythonRenderer.shuffle_width
        if not 0 < arg < width or (bad := partner >= nthreads).any():
          raise RuntimeError(f"PYTHON: kernel {self.name!r}: SHUFFLE_XOR by {arg} " + (f"reads a lane outside the warp of {width}" if not 0 < arg < width else
                             f"reads thread {int(partner[bad][0])}, past the block's {nthreads}"))
        v[pc] = np.broadcast_to(v[src[0]], lane.shape)[block * nthreads + partner]
      elif op is Ops.VECTORIZE: v[pc] = np.stack(np.broadcast_arrays(*[v[s] for s in src]), axis=-1)
      elif op is Ops.GEP: v[pc] = v[src[0]][..., arg]
      elif op is Ops.WMMA: v[pc] = wmma(arg, *[v[s] for s in src], lanes=len(lane))
      elif op is Ops.DEFINE_ACC: v[pc] = v[src[0]]
      elif op is Ops.ASSIGN: v[src[0]] = v[pc] = v[src[1]]
      elif op is Ops.CAST: v[pc] = exec_cast(v[src[0]], uops[src[0]][1], dt)
      elif op is Ops.BITCAST: v[pc] = exec_cast(v[src[0]], uops[src[0]][1], dt, bitcast=True)
      elif op in GroupOp.ALU: v[pc] = exec_alu(op, dt, [v[s] for s in src])
      else: raise CompileError(f"PYTHON: no semantics for {op} in kernel {self.name}")
      pc += 1
    return time.perf_counter() - st if wait else None

class PythonDriver(Driver):
  def __init__(self, index: int = 0): super().__init__(instance_name("PYTHON", index))
  def load(self, name: str, binary: bytes, spec=None) -> PythonProgram:
    try: src = binary.decode()
    except UnicodeDecodeError as e: raise CompileError(f"{self.device}: kernel {name!r} is not valid program text") from e
    return PythonProgram(name, src)

class HostAllocator(LRUAllocator):
  """Host memory as bytearrays; views are memoryview slices."""
  supports_offset = True
  def _alloc(self, size: int, options) -> memoryview: return memoryview(bytearray(size))
  def _copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def _copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview: return buf[offset:offset+size]
  def _as_buffer(self, buf: memoryview) -> memoryview: return buf

class NullProgram:
  def __init__(self, name: str): self.name = name
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False): return 0.0 if wait else None
class NullDriver(Driver):
  def __init__(self, index: int = 0): super().__init__(instance_name("NULL", index))
  def load(self, name: str, binary: bytes, spec=None) -> NullProgram: return NullProgram(name)
class NullRenderer(PythonRenderer): device = "NULL"
class NullAllocator(Allocator):
  """Allocates nothing: copies in are dropped and copies out read zeros."""
  supports_offset = True
  def _alloc(self, size: int, options): return size
  def _copyin(self, dest, src: memoryview) -> None: pass
  def _copyout(self, dest: memoryview, src) -> None: dest[:] = bytes(len(dest))
  def _offset(self, buf, size: int, offset: int): return size

@hookimpl
def tinycore_backends() -> list[BackendSpec]:
  return [
    BackendSpec("PYTHON", (2, 0), PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator(drv.device), priority=0, instances=virtual_instances,
                capabilities={"dtypes": "all", "speed": "slow: an interpreter, the reference semantics", "reduce_scale_elements": 1 << 18, "fuzz_elements": 40_000}),
    BackendSpec("NULL", (2, 0), NullRenderer, Assembler, NullDriver, lambda drv: NullAllocator(drv.device), priority=-100, instances=virtual_instances,
                capabilities={"runs": False}),
  ]
