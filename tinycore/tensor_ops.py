"""Tensor methods built from the primitives in tensor.py: pooling windows, convolution, normalisation, losses, indexing."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
from tinycore.helpers import make_tuple, prod
if TYPE_CHECKING: from tinycore.tensor import Tensor

class NNOpsMixin:
  __slots__ = ()
  def _pool(self: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1) -> Tensor:
    """Sliding windows over the last len(k_) dims: (..., i1, i2) -> (..., o1, o2, k1, k2), built from movement ops only.
    Repeating a dim e times and re-cutting it into rows of length i+d shifts each row by d: row a, column c*s is x[c*s + a*d]."""
    nd = len(k_)
    s_, d_ = make_tuple(stride, nd), make_tuple(dilation, nd)
    if self.ndim < nd: raise ValueError(f"pooling over {nd} dims needs a tensor with at least {nd} dims, got {self.shape}")
    x, lead = self, self.ndim - nd
    for j, (k, s, d) in enumerate(zip(k_, s_, d_)):
      ax, i = lead + j, x.shape[lead + j]
      o = (i - d * (k - 1) - 1) // s + 1
      if o <= 0 or k <= 0 or s <= 0 or d <= 0: raise ValueError(f"window {k} (stride {s}, dilation {d}) does not fit a dimension of size {i}")
      rest = [a for a in range(x.ndim) if a != ax]
      x = x.permute(*rest, ax)
      rs = x.shape[:-1]
      e = math.ceil(k * (i + d) / i)
      x = x.reshape(*rs, 1, i).expand(*rs, e, i).reshape(*rs, e * i)
      x = x.shrink(tuple([None] * len(rs) + [(0, k * (i + d))])).reshape(*rs, k, i + d)
      x = x.shrink(tuple([None] * (len(rs) + 1) + [(0, min(o * s, i + d))]))
      if o * s > i + d: x = x.pad(tuple([(0, 0)] * (len(rs) + 1) + [(0, o * s - (i + d))]))
      x = x.reshape(*rs, k, o, s).shrink(tuple([None] * (len(rs) + 2) + [(0, 1)])).reshape(*rs, k, o)
      # o back where the dim was, the new window axis last
      n = len(rs)
      x = x.permute(*range(ax), n + 1, *range(ax, n), n)
    return x

class IndexingMixin:
  __slots__ = ()
