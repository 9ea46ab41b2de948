"""Hypothesis profiles for every property test (`ci`, chosen when CI is set, replays the same examples on every run), and
how a crashed test worker ended."""
import os
import pytest
from hypothesis import settings

# no deadline anywhere: on a loaded 2-core machine a slow example is not a failure. "ci" derandomizes (examples come
# from a fixed seed, and no example database carries failures from one run into the next), so the same command passes
# or fails the same way on every run; a failure hypothesis finds elsewhere is pinned with @example in its test.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

# A test worker (pytest-xdist) that dies shows only "worker crashed while running T"; a fatal signal Python handles
# prints its traceback (pytest's faulthandler), but a SIGKILL (the kernel's out-of-memory killer, a process-group kill)
# prints nothing. The run says how each crashed worker ended, and how large the largest worker grew.
@pytest.hookimpl(optionalhook=True)   # pytest-xdist's hooks: a run without it never calls them
def pytest_testnodedown(node, error):
  import resource, signal, sys
  popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
  if error is None or popen is None: return
  try: rc = popen.wait(timeout=10)
  except Exception: return
  how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
  peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
  _ended[node.gateway.id] = f"the test worker {how}; the largest worker ended so far peaked at {peak} MB"
  print(f"\n[{node.gateway.id}] {_ended[node.gateway.id]}", file=sys.stderr, flush=True)
_ended: dict[str, str] = {}

@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):   # the same words in the failure's own report (the run's summary)
  node = getattr(report, "node", None)
  if node is not None and (why := _ended.get(node.gateway.id)) is not None: report.longrepr = f"{report.longrepr}: {why}"
