"""A pytest plugin (-p broken_definition) that breaks tinycore's own definition: integer IDIV floors instead of truncating."""
import numpy as np
import tinycore.uop
from tinycore.dtype import dtypes
from tinycore.uop import Ops

_exec_alu = tinycore.uop.exec_alu
def flooring_alu(op, dt, srcs):
  if op is Ops.IDIV and dtypes.is_int(dt):
    a, b = (np.asarray(s) for s in srcs)
    with np.errstate(all="ignore"): return np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b).astype(b.dtype))).astype(a.dtype)
  return _exec_alu(op, dt, srcs)
tinycore.uop.exec_alu = flooring_alu   # before the suite imports it (plugins given with -p load before collection)
