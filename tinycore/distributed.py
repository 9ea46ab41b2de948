"""Data parallelism past one process: MPI ranks (mpi4py) all-reduce tensors in the fixed order of tinycore/multi.py.

    mpiexec -n 2 python train.py        # each rank: init(), its slice of every batch, allreduce_grads(params), step

`pip install tinycore[mpi]` brings mpi4py and the mpich wheel (no system MPI needed). The all-reduce gathers every rank's
contribution and folds them in the order tinycore.multi documents, so N ranks give the same bits as N devices in one
process. A rank that raises aborts the job (MPI_Abort: every rank ends); a rank that dies without a word is noticed by
the others' next all-reduce, which waits at most TINYCORE_MPI_TIMEOUT seconds (default 300) and then raises."""
from __future__ import annotations
import os, sys, time
import numpy as np
from tinycore.tensor import Tensor
from tinycore.multi import acc_np_dtype, fold
from tinycore.uop import Ops

rank, world_size = 0, 1
_comm = None
_OPS = {"sum": Ops.ADD, "max": Ops.MAX, "prod": Ops.MUL}

class DistributedError(RuntimeError):
  """Another rank failed, died or did not answer in time."""

def init() -> None:
  """Join the MPI job this process was started in (by mpiexec); sets rank and world_size. Safe to call twice."""
  global _comm, rank, world_size
  if _comm is not None: return
  try: from mpi4py import MPI
  except ImportError as e: raise ImportError("tinycore.distributed needs mpi4py and an MPI: pip install tinycore[mpi]") from e
  _comm = MPI.COMM_WORLD
  rank, world_size = _comm.Get_rank(), _comm.Get_size()
  previous = sys.excepthook
  def abort_job(kind, value, tb):  # an uncaught error in one rank ends every rank instead of leaving them waiting
    # the one line that names the rank and the error goes first, in one write: mpiexec forwards output asynchronously
    # and tears the job down on Abort, so whatever is written last is what may be lost
    sys.stderr.write(f"tinycore.distributed: rank {rank} of {world_size} failed ({kind.__name__}: {value}); aborting the job\n")
    sys.stderr.flush()
    previous(kind, value, tb)
    sys.stderr.flush()
    time.sleep(0.5)  # let mpiexec pass the traceback on before Abort ends every process
    _comm.Abort(1)
  sys.excepthook = abort_job

def _timeout() -> float: return float(os.environ.get("TINYCORE_MPI_TIMEOUT", "300"))

def _wait(req, what: str) -> None:
  deadline = time.monotonic() + _timeout()
  while not req.Test():
    if time.monotonic() > deadline:
      raise DistributedError(f"rank {rank} of {world_size}: {what} waited {_timeout():.0f} s (TINYCORE_MPI_TIMEOUT) for the other "
                             "ranks; one of them has died or is stuck")
    time.sleep(0.0005)

def _gather(arr: np.ndarray) -> np.ndarray:
  """Every rank's array, as rows in rank order."""
  if _comm is None: raise DistributedError("tinycore.distributed.init() was not called (start the program with mpiexec)")
  out = np.empty((world_size, arr.size), arr.dtype)
  _wait(_comm.Iallgather(np.ascontiguousarray(arr.reshape(-1)), out), "an all-reduce")
  return out

def allreduce(*tensors: Tensor, op: str = "sum") -> list[Tensor]:
  """The reduction of each tensor over all ranks (every rank gets it), in one exchange; half and bfloat16 reduced in
  float32, folded in rank order: the fixed order of an all-reduce over devices in one process."""
  if op not in _OPS: raise ValueError(f"allreduce op {op!r}: pick one of {sorted(_OPS)}")
  host = [t.numpy().astype(acc_np_dtype(t.dtype)).reshape(-1) for t in tensors]
  acc = np.result_type(*[h.dtype for h in host]) if host else np.float32
  rows = _gather(np.concatenate([h.astype(acc) for h in host]) if host else np.zeros(0, acc))
  out, off = [], 0
  for t, h in zip(tensors, host):
    part = fold([r[off:off + h.size].astype(h.dtype) for r in rows], _OPS[op]).reshape(t.shape)
    out.append(Tensor(part, device=t.device).cast(t.dtype))
    off += h.size
  return out

def allreduce_grads(params: list[Tensor]) -> None:
  """The data-parallel step's exchange: each parameter's gradient becomes the sum over ranks (scale the loss by the
  global batch, not the rank's, so the sum is the gradient of the global mean). Composes with sharding over devices
  inside a rank: a parameter replicated there has a gradient already reduced over the rank's devices."""
  with_grad = [p for p in params if p.grad is not None]
  for p, g in zip(with_grad, allreduce(*[p.grad for p in with_grad])): p.grad = g

def barrier() -> None:
  if _comm is not None: _wait(_comm.Ibarrier(), "a barrier")
