"""The op vocabulary: every UOp op (Ops) and the groups rules talk about (GroupOp)."""
from enum import Enum, auto

class Ops(Enum):
  # graph structure
  SINK = auto(); NOOP = auto()
  # tensor-level sources and boundaries
  DEVICE = auto(); UNIQUE = auto(); BUFFER = auto(); CONST = auto(); DEFINE_VAR = auto(); BIND = auto()
  IOTA = auto()  # the tensor [0, 1, ..., n-1]: lowered straight to the loop index, O(n) without host data
  CONTIGUOUS = auto(); CONTIGUOUS_BACKWARD = auto(); DETACH = auto(); COPY = auto(); ASSIGN = auto()
  # CUSTOM_GRADIENT(value, *inputs), arg (fn, data): the value of src[0], whose gradients with respect to the inputs are
  # fn(gradient of the node, the node) (autograd does not look inside src[0]); the scheduler computes src[0]
  CUSTOM_GRADIENT = auto()
  # sharded tensors (tinycore/multi.py): MULTI holds one shard's graph on a tuple of devices (arg: the shard axis or None);
  # ALLREDUCE (arg: (reduce op, grid sizes, grid dims reduced over)) and ALLGATHER (arg: the destination) move data between the shards, scheduled like COPY
  MULTI = auto(); ALLREDUCE = auto(); ALLGATHER = auto()
  # movement (tensor-level, resolved into index math by codegen)
  RESHAPE = auto(); EXPAND = auto(); PERMUTE = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()
  REDUCE_AXIS = auto()
  # kernel-level. DEFINE_LOCAL: workgroup (shared) memory every thread of a block sees, dtype T.ptr(size, "local"), arg its number;
  # DEFINE_REG: a scratch buffer of each thread (CPU style), dtype T.ptr(size, "reg"), arg its number
  DEFINE_GLOBAL = auto(); DEFINE_LOCAL = auto(); DEFINE_REG = auto(); DEFINE_ACC = auto(); SPECIAL = auto(); RANGE = auto(); ENDRANGE = auto(); REDUCE = auto()
  # LOAD(INDEX, *after): srcs past the index order it (a BARRIER); STORE(INDEX, value, [gate], [after]): a bool gate
  # stores only where it holds, a BARRIER src orders it after that barrier
  INDEX = auto(); LOAD = auto(); STORE = auto(); IF = auto(); ENDIF = auto()
  # every thread of a block waits here until all have arrived; srcs: the stores it makes visible, or the loop it runs in
  BARRIER = auto()
  # SHUFFLE_XOR(x), arg m (below renderer.shuffle_width): x as the thread whose lane in its warp is this one's xor m holds
  # it. Every thread of the warp runs it together (as every thread of a block reaches a barrier)
  SHUFFLE_XOR = auto()
  # dtype changes
  CAST = auto(); BITCAST = auto()
  # unary ALU
  EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIP = auto(); NEG = auto(); TRUNC = auto()
  # binary ALU
  ADD = auto(); SUB = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); XOR = auto(); OR = auto(); AND = auto(); SHL = auto(); SHR = auto()
  # ternary ALU
  WHERE = auto(); MULACC = auto()
  # SIMD vectors (CPU-style codegen): VECTORIZE builds a vector from scalars, GEP takes lane `arg` of a vector
  VECTORIZE = auto(); GEP = auto()
  # WMMA(a, b, c) -> d: a tensor core instruction (arg: its renderer.TensorCore) run by the lanes of a warp together,
  # a, b, c and d each lane's fragment (a vector): D = A @ B + C with the elements where the TensorCore's layout puts them
  WMMA = auto()
  def __repr__(self): return f"Ops.{self.name}"
  __hash__ = object.__hash__  # members are singletons; Enum's default hashes the name in Python on every dict lookup

class AxisType(Enum):
  """What a RANGE's loop is (RANGE arg = (id, AxisType)): the kernel's description that the optimiser's actions change.
  GLOBAL: an output axis (GPU: a block/grid id; CPU: a loop the cores share); LOCAL: threads of one block (GPU);
  GROUP_REDUCE: a reduction spread over threads of one block, combined through shared memory; REDUCE: a reduction's loop;
  UPCAST / UNROLL: an output / reduce axis written out as copies (register tiles); WARP: the lanes of a warp running a
  tensor core instruction together (the fastest thread id); CPU only: LANE (SIMD vector lanes),
  BLOCK (a sum run in blocks through its output), PACK (a loop filling a thread's scratch buffer, DEFINE_REG)."""
  GLOBAL = auto(); LOCAL = auto(); GROUP_REDUCE = auto(); REDUCE = auto(); UPCAST = auto(); UNROLL = auto(); WARP = auto()
  LANE = auto(); BLOCK = auto(); PACK = auto()
  def __repr__(self): return f"AxisType.{self.name}"
  __hash__ = object.__hash__

class GroupOp:
  Unary = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
            Ops.XOR, Ops.OR, Ops.AND, Ops.SHL, Ops.SHR}
  Ternary = {Ops.WHERE, Ops.MULACC}
  ALU = Unary | Binary | Ternary
  Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.OR, Ops.AND}
  Movement = {Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP}
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  # ops whose zero input gives a zero output: padding may be pushed through them
  SafePad = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.SQRT, Ops.TRUNC, Ops.SIN, Ops.CAST, Ops.BITCAST}
