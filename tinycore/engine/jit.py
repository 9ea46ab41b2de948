"""tinygrad's import path for the jit (`from tinygrad.engine.jit import TinyJit`): the names of tinycore/jit.py."""
from tinycore.jit import TinyJit, JitError

__all__ = ["TinyJit", "JitError"]
