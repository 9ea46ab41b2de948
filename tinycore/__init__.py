"""tinycore: a small deep-learning framework; a minimal core with hardware backends as plugins."""
import atexit
from tinycore.dtype import dtypes, DType
from tinycore.helpers import Context, getenv
from tinycore.uop import UOp, Ops, Variable
from tinycore.runtime.device import Device, GlobalCounters, Buffer
from tinycore.tensor import Tensor
from tinycore.jit import TinyJit
from tinycore.trace import profile
from tinycore import trace, viz

if trace.capture is not None: atexit.register(viz.serve_at_exit)   # VIZ=1: the page of this run, served when it ends

__all__ = ["Tensor", "dtypes", "DType", "Device", "Context", "GlobalCounters", "Variable", "UOp", "Ops", "Buffer", "getenv", "TinyJit", "profile"]
