"""Section resources: buffers come back after many launches, 1000 small launches finish, impossible requests fail cleanly."""
from __future__ import annotations
import gc, subprocess, sys, textwrap
import numpy as np
import pytest
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.runtime.device import GlobalCounters, LRUAllocator
from tinycore_conformance.target import Target, child_env

pytestmark = pytest.mark.resources

def settle(device) -> int:
  """Live allocations once garbage is collected and the LRU cache (which keeps freed buffers for reuse) is emptied."""
  gc.collect()
  device.synchronize()
  if isinstance(device.allocator, LRUAllocator): device.allocator.free_cache()
  return device.allocator.live

def workload(target: Target) -> float:
  """Tensors of several sizes and dtypes, kernels with intermediates, a training-like step: all dropped at the end."""
  x = Tensor(np.linspace(-1, 1, 1000, dtype=np.float32).reshape(10, 100))
  w = Tensor(np.ones((100, 7), np.float32) * 0.01, requires_grad=True)
  loss = ((x @ w).relu() + 1).log().mean()
  (g,) = loss.gradient(w)
  out = float(loss.item() + g.sum().item())
  y = (x.reshape(1000) * 3).flip(0).pad(((3, 5),)).contiguous()
  out += float(y[3:8].sum().item())
  if dtypes.int32 in target.dtypes: out += float((Tensor.arange(70000, dtype=dtypes.int32) % 7).numpy()[-1])
  return out

@pytest.mark.covers("buffer lifetime")
def test_live_buffers_return_to_baseline(device, target: Target):
  """After many launches and every tensor going out of scope, the allocator holds what it held before."""
  workload(target)  # compile everything once: the kernel cache may keep what it needs
  before = settle(device)
  for _ in range(5): workload(target)
  after = settle(device)  # lower is fine: buffers of earlier tests may be collected meanwhile
  assert after <= before, f"{after - before} allocations still live after 5 rounds of launches and every tensor dropped (Allocator.live {before} -> {after})"

@pytest.mark.covers("buffer lifetime")
def test_memory_counter_returns_to_baseline(device, target: Target):
  gc.collect()
  before = GlobalCounters.mem_used
  for _ in range(3): workload(target)
  gc.collect()
  assert GlobalCounters.mem_used <= before, f"GlobalCounters.mem_used grew by {GlobalCounters.mem_used - before} bytes"

@pytest.mark.covers("1000 launches")
def test_a_thousand_small_launches(device, target: Target):
  """1000 dependent launches of a tiny kernel: all run, in order, and leave no allocations behind."""
  target.require_dtype(dtypes.float32)
  x = Tensor.zeros(16).contiguous().realize()
  before, kernels = settle(device), GlobalCounters.kernel_count
  for _ in range(1000): x = (x + 1).realize()
  got = x.numpy()
  assert np.all(got == 1000), f"after 1000 launches of x + 1: {np.unique(got)}"
  assert GlobalCounters.kernel_count - kernels >= 1000, f"only {GlobalCounters.kernel_count - kernels} kernels were launched"
  del x
  assert settle(device) <= before, f"1000 launches left {settle(device) - before} allocations live"

IMPOSSIBLE_ALLOC = textwrap.dedent("""
  import sys
  from tinycore.dtype import dtypes
  from tinycore.runtime.device import Buffer
  from tinycore_conformance.target import check_pinned
  check_pinned(sys.argv[1])
  try: Buffer(sys.argv[1], 1 << 60, dtypes.uint8).ensure_allocated()
  except Exception as e: print(f"RAISED {type(e).__module__}.{type(e).__name__}: {e}")
  else: print("ALLOCATED")
""")

@pytest.mark.covers("allocator.alloc(2**60)")
def test_impossible_allocation_fails_cleanly(device, target: Target):
  """Asking for 2**60 bytes raises a Python exception (MemoryError or a tinycore error); it must not crash the process."""
  proc = subprocess.run([sys.executable, "-c", IMPOSSIBLE_ALLOC, target.name], capture_output=True, text=True, env=child_env(target), timeout=120)
  assert proc.returncode == 0, f"the process died (exit {proc.returncode}) allocating 2**60 bytes on {target.name}:\n{proc.stderr[-2000:]}"
  line = proc.stdout.strip().splitlines()[-1]
  assert line.startswith("RAISED"), f"allocating 2**60 bytes on {target.name} did not fail: {line}"
  assert "MemoryError" in line or "tinycore.runtime.errors" in line, f"expected MemoryError or a tinycore error, got {line}"
