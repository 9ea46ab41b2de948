"""The profiler: Chrome trace-event JSON of a training step on two device instances (tracks, nesting, flow arrows,
memory, kernel times within the step's wall time), PROFILE=1 for a whole run, and nothing recorded or waited for when off."""
import json, os, subprocess, sys, time
from collections import defaultdict
import numpy as np
import pytest
from tinycore import Tensor, profile, trace
from tinycore.nn import Linear
from tinycore.nn.optim import SGD
from tinycore.runtime.runner import CompiledRunner

def two_device_step(path):
  """A training step split over CPU and CPU:1: the first layer on one, the second on the other, activations and their
  gradients copied between them. Returns the loaded trace and the step's wall time in microseconds."""
  l1, l2 = Linear(13, 7), Linear(7, 3)
  l2.weight, l2.bias = l2.weight.to("CPU:1").realize(), l2.bias.to("CPU:1").realize()
  l2.weight.requires_grad = l2.bias.requires_grad = True
  opts = [SGD([l1.weight, l1.bias], lr=0.1), SGD([l2.weight, l2.bias], lr=0.1)]
  x = Tensor(np.random.default_rng(1).random((4, 13), dtype=np.float32))
  with Tensor.train(), profile(path):
    st = time.perf_counter()
    loss = l2(l1(x).relu().to("CPU:1")).sum()
    for o in opts: o.zero_grad()
    loss.backward()
    for o in opts: o.step()
    loss.item()
    wall_us = (time.perf_counter() - st) * 1e6
  with open(path) as f: return json.load(f), wall_us

@pytest.fixture(scope="module")
def step(tmp_path_factory):
  return two_device_step(tmp_path_factory.mktemp("profile") / "trace.json")

def tracks(tr) -> dict[tuple[int, int], str]:
  procs = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
  return {(e["pid"], e["tid"]): f"{procs[e['pid']]} {e['args']['name']}" for e in tr["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}

def spans(tr, track_name: str | None = None) -> list[dict]:
  names = tracks(tr)
  return [e for e in tr["traceEvents"] if e["ph"] == "X" and (track_name is None or names[(e["pid"], e["tid"])] == track_name)]

def test_trace_is_chrome_trace_event_json(step):
  tr, _ = step
  assert isinstance(tr["traceEvents"], list) and tr["traceEvents"]
  for e in tr["traceEvents"]:
    assert e["ph"] in "XMCsf" and isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int) and isinstance(e["name"], str)
    if e["ph"] != "M": assert isinstance(e["ts"], float) and e["ts"] >= 0
    if e["ph"] == "X": assert e["dur"] >= 0 and isinstance(e["args"], dict)
  json.dumps(tr)

def test_one_track_per_device_queue(step):
  names = set(tracks(step[0]).values())
  assert {"HOST realize", "CPU kernels", "CPU:1 kernels", "CPU:1 copies", "CPU copies", "CPU compile", "CPU:1 compile"} <= names, names
  assert len(names) == len(tracks(step[0])), "each (device, queue) is one track"
  # every span is on a named track, and the copies say where they went
  assert all((e["pid"], e["tid"]) in tracks(step[0]) for e in spans(step[0]))
  assert {e["name"] for e in spans(step[0], "CPU:1 copies")} == {"copy CPU -> CPU:1"}
  assert {e["name"] for e in spans(step[0], "CPU copies")} == {"copy CPU:1 -> CPU"}

def test_spans_nest_on_every_track_and_launches_sit_inside_runs(step):
  tr, _ = step
  by_track = defaultdict(list)
  for e in spans(tr): by_track[(e["pid"], e["tid"])].append(e)
  eps = 1e-3  # microseconds: the float sums of start and length
  for evs in by_track.values():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    open_ends: list[float] = []
    for e in evs:  # two spans on a track are either disjoint or one holds the other
      while open_ends and open_ends[-1] <= e["ts"] + eps: open_ends.pop()
      assert not open_ends or e["ts"] + e["dur"] <= open_ends[-1] + eps, f"{e['name']} overlaps the end of an enclosing span"
      open_ends.append(e["ts"] + e["dur"])
  runs = spans(tr, "HOST realize")
  assert {e["name"] for e in runs} == {"schedule", "run"}
  launches = [e for name in ("CPU kernels", "CPU:1 kernels", "CPU copies", "CPU:1 copies") for e in spans(tr, name)]
  for e in launches:
    assert any(r["name"] == "run" and r["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + eps for r in runs), e["name"]
  for name in ("CPU compile", "CPU:1 compile"):
    compiles = [e for e in spans(tr, name) if e["name"] == "compile"]
    assert compiles, f"the step compiles new kernels on {name.split()[0]}"
    for e in spans(tr, name):
      if e["name"] != "compile":
        assert e["name"].split()[0] in ("codegen", "assemble", "load")
        assert any(c["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + eps for c in compiles), e["name"]

def test_kernel_times_sum_to_within_the_step_wall_time(step):
  tr, wall_us = step
  kernels = spans(tr, "CPU kernels") + spans(tr, "CPU:1 kernels")
  assert len(kernels) >= 6 and all(e["args"]["timer"] == "device" for e in kernels), "the CPU driver times its kernels"
  busy = sum(e["dur"] for e in kernels) + sum(e["dur"] for e in spans(tr, "CPU copies") + spans(tr, "CPU:1 copies"))
  assert 0 < busy <= wall_us
  runs = [e for e in spans(tr, "HOST realize") if e["name"] == "run"]
  assert sum(e["dur"] for e in kernels) <= sum(e["dur"] for e in runs) <= wall_us

def test_flow_arrows_go_from_a_launch_to_the_launches_that_read_its_output(step):
  tr, _ = step
  names = tracks(tr)
  ends = defaultdict(dict)
  for e in tr["traceEvents"]:
    if e["ph"] in "sf": ends[e["id"]][e["ph"]] = e
  assert ends and all(set(v) == {"s", "f"} for v in ends.values())
  def enclosing(e):
    return [x for x in spans(tr) if (x["pid"], x["tid"]) == (e["pid"], e["tid"]) and x["ts"] <= e["ts"] <= x["ts"] + x["dur"]]
  pairs = set()
  for v in ends.values():
    a, b = enclosing(v["s"]), enclosing(v["f"])
    assert len(a) == 1 and len(b) == 1, "each end of an arrow sits on exactly one launch"
    assert a[0]["ts"] <= b[0]["ts"], "an arrow points forward in time"
    pairs.add((names[(a[0]["pid"], a[0]["tid"])], names[(b[0]["pid"], b[0]["tid"])]))
  # the activation is computed on CPU, copied to CPU:1, used there; its gradient comes back the same way
  assert {("CPU kernels", "CPU:1 copies"), ("CPU:1 copies", "CPU:1 kernels"), ("CPU:1 kernels", "CPU copies"), ("CPU copies", "CPU kernels")} <= pairs, pairs

def test_memory_graph_per_device(step):
  tr, _ = step
  procs = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
  mem = defaultdict(list)
  for e in tr["traceEvents"]:
    if e["ph"] == "C":
      assert e["name"] == "memory" and e["args"]["bytes"] >= 0
      mem[procs[e["pid"]]].append(e["args"]["bytes"])
  assert {"CPU", "CPU:1"} <= set(mem)
  # the step allocates the activation's copy on CPU:1 (4x7 floats) at least
  assert max(mem["CPU:1"]) - min(mem["CPU:1"]) >= 4 * 7 * 4

def test_nothing_is_recorded_or_waited_for_when_off(monkeypatch):
  assert trace.profiling is None and trace.capture is None, "PROFILE and VIZ are off in the test run"
  waits = []
  call = CompiledRunner.__call__
  monkeypatch.setattr(CompiledRunner, "__call__", lambda self, bufs, vv, wait=False: waits.append(wait) or call(self, bufs, vv, wait))
  (Tensor([1.0, 2.0]) * 3 + 1).tolist()
  assert waits and not any(waits), "launches are asynchronous when not profiling"
  with profile() as p: (Tensor([1.0, 2.0]) * 3 + 2).tolist()
  assert waits[-1] is True and p.events
  n = len(p.events)
  (Tensor([1.0, 2.0]) * 3 + 3).tolist()
  assert len(p.events) == n and trace.profiling is None

def test_profile_env_var_writes_the_trace_at_exit(tmp_path):
  out = tmp_path / "run.json"
  code = "from tinycore import Tensor; print((Tensor([1.0, 2.0]) + 1).tolist())"
  env = {**os.environ, "PROFILE": "1", "PROFILE_PATH": str(out)}
  env.pop("VIZ", None)
  proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert f"PROFILE: wrote {out}" in proc.stdout
  tr = json.loads(out.read_text())
  assert any(e["ph"] == "X" and e["name"].startswith("E_") for e in tr["traceEvents"])
