"""tinycore: a small deep-learning framework; a minimal core with hardware backends as plugins."""
import atexit
from tinycore.dtype import dtypes, DType
from tinycore.helpers import Context, getenv, fetch, GlobalCounters
from tinycore.uop import UOp, Ops, Variable
from tinycore.runtime.device import Device, Buffer
from tinycore.tensor import Tensor
from tinycore.jit import TinyJit
from tinycore.function import function   # tinygrad's spelling: the decorator (the module stays importable as tinycore.function)
from tinycore.trace import profile
from tinycore import trace, viz

if trace.capture is not None: atexit.register(viz.serve_at_exit)   # VIZ=1: the page of this run, served when it ends

__all__ = ["Tensor", "dtypes", "DType", "Device", "Context", "GlobalCounters", "Variable", "UOp", "Ops", "Buffer", "getenv", "fetch", "function",
           "TinyJit", "profile"]
