"""tinycore: a small deep-learning framework; a minimal core with hardware backends as plugins."""
from tinycore.dtype import dtypes, DType
from tinycore.helpers import Context, getenv
from tinycore.uop import UOp, Ops, Variable
from tinycore.runtime.device import Device, GlobalCounters, Buffer
from tinycore.tensor import Tensor
from tinycore.jit import TinyJit

__all__ = ["Tensor", "dtypes", "DType", "Device", "Context", "GlobalCounters", "Variable", "UOp", "Ops", "Buffer", "getenv", "TinyJit"]
