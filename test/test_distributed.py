"""tinycore.distributed over `mpiexec -n 2` (loopback): one data-parallel step is bit-identical to 2 devices in one
process, and a rank that dies or raises ends the job with a clear error in bounded time. Run as a script by the tests."""
import os, shutil, subprocess, sys, time
from pathlib import Path
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.nn import optim

B, D2 = 8, ("CPU:0", "CPU:1")

def _mpiexec() -> str | None:
  try: import mpi4py  # noqa: F401
  except ImportError: return None
  return shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")

def _need_mpi() -> str:
  exe = _mpiexec()
  if exe is None:
    if os.environ.get("CI"): pytest.fail("CI must run the MPI tests: pip install tinycore[mpi] (mpi4py and the mpich wheel)")
    pytest.skip("needs mpi4py and mpiexec: pip install tinycore[mpi]")
  return exe

def _data():
  r = np.random.default_rng(7)
  return (r.standard_normal((B, 6)).astype(np.float32), r.integers(0, 4, B).astype(np.int32),
          [r.standard_normal(s).astype(np.float32) * 0.5 for s in ((6, 16), (16,), (16, 4), (4,))])

def dp_steps(x: Tensor, y: Tensor, weights: list[np.ndarray], devices=None, exchange=None, steps: int = 2) -> list[np.ndarray]:
  """Adam steps of a 2-layer MLP on (x, y); the loss is scaled by the global batch B, so the per-rank gradients sum to
  the gradient of the mean. `exchange` (distributed.allreduce_grads) runs between backward and the update."""
  params = [Tensor(w, requires_grad=True) for w in weights]
  if devices:
    for p in params: p.shard_(devices)
  opt = optim.Adam(params, lr=0.01)
  for _ in range(steps):
    opt.zero_grad()
    w1, b1, w2, b2 = params
    ((x @ w1 + b1).relu() @ w2 + b2).sparse_categorical_crossentropy(y, reduction="sum").div(B).backward()
    if exchange: exchange(opt.params)
    opt.step()
  return [p.numpy() for p in params]

def _run(mode: str, out: Path, timeout_env: str = "20", limit: float = 120) -> tuple[subprocess.CompletedProcess, float]:
  st = time.perf_counter()
  env = {**os.environ, "TINYCORE_MPI_TIMEOUT": timeout_env, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
  p = subprocess.run([_need_mpi(), "-n", "2", sys.executable, __file__, mode, str(out)], capture_output=True, text=True, timeout=limit, env=env)
  return p, time.perf_counter() - st

def test_two_ranks_bit_identical_to_two_devices(tmp_path):
  _need_mpi()
  p, _ = _run("step", tmp_path / "ranks.npz")
  assert p.returncode == 0, p.stdout + p.stderr
  got = np.load(tmp_path / "ranks.npz")
  x, y, weights = _data()
  two_devices = dp_steps(Tensor(x).shard(D2, 0), Tensor(y).shard(D2, 0), weights, devices=D2)
  one_device = dp_steps(Tensor(x), Tensor(y), weights)
  for i, (d, s) in enumerate(zip(two_devices, one_device)):
    np.testing.assert_array_equal(got[f"p{i}"], d)           # bit for bit: ranks vs devices
    np.testing.assert_allclose(d, s, rtol=1e-5, atol=1e-6)   # and within float tolerance of one device
    assert not np.array_equal(d, weights[i])                 # the step did move the parameters

# killed: mpiexec (hydra) sees the rank die and ends the job, else rank 0's all-reduce times out; stuck: rank 0 times out;
# raises: the rank aborts the job itself
@pytest.mark.parametrize("mode, messages", [("die", ("BAD TERMINATION", "rank 0 of 2: an all-reduce waited")),
                                            ("stuck", ("rank 0 of 2: an all-reduce waited 5 s",)),
                                            ("raise", ("rank 1 of 2 failed (ValueError: this rank fails on purpose)",))])
def test_failed_rank_ends_the_others(tmp_path, mode, messages):
  _need_mpi()
  p, seconds = _run(mode, tmp_path / "x.npz", timeout_env="5", limit=90)
  text = p.stdout + p.stderr
  assert text.strip(), f"mpiexec exited {p.returncode} without a word: the ranks did not start (another MPI job on this machine?)"
  assert p.returncode != 0 and any(m in text for m in messages), text
  assert seconds < 60

def test_train_digits_distributed_same_accuracy(tmp_path):
  """`mpiexec -n 2 python -m tinycore.examples.train_digits --distributed` against one process, on a small run."""
  exe = _need_mpi()
  args = ["--dataset", "sklearn", "--epochs", "2", "--subset", "256", "--width", "4", "--batch-size", "32", "--no-progress", "--out", str(tmp_path)]
  env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
  def accuracy(cmd: list[str]) -> float:
    p = subprocess.run(cmd + args, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return float(p.stdout.split("test accuracy ")[1].split("%")[0])
  one = accuracy([sys.executable, "-m", "tinycore.examples.train_digits"])
  two = accuracy([exe, "-n", "2", sys.executable, "-m", "tinycore.examples.train_digits", "--distributed"])
  assert one > 50 and abs(one - two) <= 5, (one, two)   # BatchNorm's statistics are per rank: close, not equal

def _main(mode: str, out: str) -> None:
  from tinycore import distributed
  distributed.init()
  r, n = distributed.rank, distributed.world_size
  x, y, weights = _data()
  if mode == "die" and r == 1: os.kill(os.getpid(), 9)   # killed without a word: rank 0's all-reduce must time out
  if mode == "raise" and r == 1: raise ValueError("this rank fails on purpose")
  if mode == "stuck" and r == 1: time.sleep(3600)
  sl = slice(r * B // n, (r + 1) * B // n)
  params = dp_steps(Tensor(x[sl]), Tensor(y[sl]), weights, exchange=distributed.allreduce_grads)
  if r == 0: np.savez(out, **{f"p{i}": p for i, p in enumerate(params)})

if __name__ == "__main__": _main(sys.argv[1], sys.argv[2])
