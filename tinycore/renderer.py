"""The Renderer base: how a backend describes its target to the shared codegen, and turns linear UOps into text."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from tinycore.dtype import DType, dtypes, ALL_DTYPES
from tinycore.uop import UOp, Ops, sym_eval
from tinycore.rewrite import PatternMatcher
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
  def launch_dims(self, var_vals: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    return tuple(sym_eval(g, var_vals) for g in self.global_size), self.local_size

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
  threads: int = 0                    # >0: CPU style, the outermost loop is split across this many threads
  upcast_max: int = 8                 # largest unroll/upcast the optimizer may use
  vector_width: int = 1               # native SIMD width in float32 lanes (1: no vector types)
  vector_registers: int = 16          # SIMD registers the register tiles of CPU-style targets may fill
  fma: bool = False                   # a fused multiply-add: reductions of products accumulate with one rounding per term
  cache_bytes: int = 0                # a core's own cache nearest memory (L2 on x86) in bytes, 0: unknown (CPU-style cache blocking)
  max_buffers: int = 0                # 0: unlimited; else params per kernel (incl. output)
  loop_pass_max: int = 0              # 0: unlimited; else loop passes one thread may make in all (the scheduler splits kernels under it)
  index_bits: int = 64                # widest integer the target uses for addressing
  extra_matcher: PatternMatcher | None = None  # target-specific decompositions applied before linearizing
  tensor_cores: tuple = ()
  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError
  def check_dtype(self, dt: DType) -> None:
    if dt.scalar not in self.supported_dtypes and dt.scalar not in (dtypes.index, dtypes.void):
      raise UnsupportedError(f"backend {self.device} does not support dtype {dt.scalar.name}; supported: {sorted(d.name for d in self.supported_dtypes)}")
  def describe(self) -> dict[str, Any]:
    keys = ("device", "has_local", "has_shared", "global_dims", "global_max", "local_max", "shared_max", "threads", "upcast_max", "vector_width", "vector_registers", "fma", "cache_bytes", "max_buffers", "loop_pass_max")
    return {k: getattr(self, k) for k in keys} | {"supported_dtypes": sorted(d.name for d in self.supported_dtypes)}
