"""tinygrad's `@function` decorator (`from tinygrad import function`): here the function itself, called as is."""
from __future__ import annotations
from typing import Any, Callable

def function(fxn: Callable | None = None, *, precompile: bool = False, precompile_backward: bool = False, allow_implicit: bool = False,
             grad_fxn: Callable | None = None) -> Any:
  """tinygrad builds one graph node for a decorated function's body so it is scheduled once; tinycore's tensors are lazy,
  so a plain call already adds the body's graph to the caller's and the scheduler fuses it the same way (gradients flow
  through it too). The precompile flags have nothing to precompile here, and allow_implicit nothing to allow (a body may
  read any tensor, as any lazy graph does): they are accepted for compatibility. grad_fxn, a gradient written over
  tinygrad's UOps, would not port: it raises."""
  if grad_fxn is not None:
    raise NotImplementedError("function(grad_fxn=...) takes a gradient over tinygrad's own UOps, which tinycore's are not; "
                              "the decorated function's gradient is its body's, computed by autograd")
  return fxn if fxn is not None else (lambda f: f)
