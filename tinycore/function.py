"""tinygrad's `@function` decorator (`from tinygrad.function import function`): here the function itself, called as is."""
from __future__ import annotations
from typing import Any, Callable

def function(fxn: Callable | None = None, *, precompile: bool = False, precompile_backward: bool = False) -> Any:
  """tinygrad builds one graph node for a decorated function's body so it is scheduled once; tinycore's tensors are lazy,
  so a plain call already adds the body's graph to the caller's and the scheduler fuses it the same way (gradients flow
  through it too). The precompile flags have nothing to precompile here and are accepted for compatibility."""
  return fxn if fxn is not None else (lambda f: f)
