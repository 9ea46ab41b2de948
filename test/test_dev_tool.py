"""tools/dev.py's test command: which conformance runs it makes, and what it does with a backend this machine cannot run."""
import importlib.util, json, subprocess
from pathlib import Path
import pytest

def load_dev():
  spec = importlib.util.spec_from_file_location("dev_tool", Path(__file__).resolve().parent.parent / "tools" / "dev.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

@pytest.fixture
def dev(monkeypatch):
  """dev.py with setup and every command replaced by a record of what it would run."""
  mod, ran = load_dev(), []
  monkeypatch.setattr(mod, "setup", lambda kind: None)
  keep = ("DEV", "WGPU_BACKEND_TYPE", "CPU_RENDERER", "NV_EMULATE")
  monkeypatch.setattr(mod, "run", lambda *cmd, **kw: ran.append((cmd, {k: v for k, v in kw.get("env", {}).items() if k in keep})))
  def conformance(dev, r):   # what one conformance run would execute, and its environment
    ran.append(((*r.prefix, mod.PY, "-m", "tinycore_conformance.cli", dev), {k: v for k, v in {"DEV": dev, **r.env}.items() if k in keep}))
    return True, "", 0.0
  monkeypatch.setattr(mod, "conformance", conformance)
  monkeypatch.delenv("CI", raising=False)
  mod.ran = ran
  return mod

def conformance_runs(mod) -> list[dict]: return [env for cmd, env in mod.ran if "tinycore_conformance.cli" in cmd]

def test_a_backend_without_a_runtime_is_skipped_with_the_reason(dev, monkeypatch, capsys):
  monkeypatch.setattr(dev, "installed_backends", lambda: [("CPU", True, ""), ("WEBGPU", False, "WEBGPU: no WebGPU adapter found")])
  monkeypatch.setitem(dev.RUNS, "CPU", lambda opens, why: [dev.Run("CPU")])
  assert dev.main(["test"]) == 0
  assert conformance_runs(dev) == [{"DEV": "CPU"}]
  assert "conformance: WEBGPU skipped: WEBGPU: no WebGPU adapter found" in capsys.readouterr().out

def test_in_ci_a_backend_without_a_runtime_fails(dev, monkeypatch):
  monkeypatch.setenv("CI", "true")
  monkeypatch.setattr(dev, "installed_backends", lambda: [("WEBGPU", False, "WEBGPU: no WebGPU adapter found")])
  with pytest.raises(SystemExit, match="WEBGPU cannot run: WEBGPU: no WebGPU adapter found; CI must run it"): dev.main(["test"])

def fake_adapters(dev, monkeypatch, present: list[str]) -> None:
  """webgpu_runs sees these wgpu backends (its child process answers for the machine)."""
  real = subprocess.run
  def answer(cmd, *a, **kw):
    if "enumerate_adapters_sync" in str(cmd[-1]): return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(present))
    return real(cmd, *a, **kw)
  monkeypatch.setattr(dev.subprocess, "run", answer)
  monkeypatch.setattr(dev, "installed_backends", lambda: [("WEBGPU", True, "")])

def test_webgpu_runs_once_per_adapter_backend(dev, monkeypatch, capsys):
  fake_adapters(dev, monkeypatch, ["OpenGL", "Vulkan"])
  assert dev.main(["test"]) == 0
  assert conformance_runs(dev) == [{"DEV": "WEBGPU", "WGPU_BACKEND_TYPE": "OpenGL"}, {"DEV": "WEBGPU", "WGPU_BACKEND_TYPE": "Vulkan"}]

def test_without_vulkan_the_opengl_run_alone_runs_and_ci_fails(dev, monkeypatch, capsys):
  fake_adapters(dev, monkeypatch, ["OpenGL"])   # the machine: Mesa's GL, no Vulkan driver
  assert dev.main(["test"]) == 0
  assert conformance_runs(dev) == [{"DEV": "WEBGPU", "WGPU_BACKEND_TYPE": "OpenGL"}]
  monkeypatch.setenv("CI", "true")
  dev.ran.clear()
  with pytest.raises(SystemExit, match="WEBGPU on Vulkan cannot run: wgpu has no Vulkan adapter on this machine"): dev.main(["test"])

def test_hardware_runs_skip_even_in_ci_and_emulators_run(dev, monkeypatch, capsys):
  monkeypatch.setenv("CI", "true")
  monkeypatch.setattr(dev, "installed_backends", lambda: [("NV", False, "NV: cannot load libcuda.so.1")])
  assert dev.main(["test"]) == 0   # no GPU on a CI machine: the GPU run is skipped, the emulator run is made
  assert [cmd for cmd, env in dev.ran if "tinycore_conformance.cli" in cmd] and "NV on the GPU skipped: NV: cannot load libcuda.so.1" in capsys.readouterr().out
  assert conformance_runs(dev) == [{"DEV": "NV", "NV_EMULATE": "1"}]

def test_remote_runs_inside_a_local_server(dev, monkeypatch):
  monkeypatch.setattr(dev, "installed_backends", lambda: [("REMOTE", False, "REMOTE: set REMOTE_URL")])
  assert dev.main(["test"]) == 0
  (cmd, env), = [(cmd, env) for cmd, env in dev.ran if "tinycore_conformance.cli" in cmd]
  assert cmd[1:4] == ("-m", "tinygrad_remote", "with-server") and env == {"DEV": "REMOTE"}

def test_a_failed_run_fails_the_command_after_every_run_is_made(dev, monkeypatch):
  monkeypatch.setattr(dev, "installed_backends", lambda: [("CPU", True, ""), ("PYTHON", True, "")])
  monkeypatch.setitem(dev.RUNS, "CPU", lambda opens, why: [dev.Run("CPU")])
  made = []
  monkeypatch.setattr(dev, "conformance", lambda d, r: (made.append(d), (d != "CPU", "output", 0.0))[1])
  with pytest.raises(SystemExit, match="conformance failed: CPU"): dev.main(["test"])
  assert sorted(made) == ["CPU", "PYTHON"]

def test_the_nv_emulator_run_fails_when_ptxas_refuses_a_kernel_after_it(monkeypatch, tmp_path):
  """The NV emulator run keeps its kernels in a fresh cache and ptxas_check assembles them for sm_90 and sm_80 after the
  suite: the run fails when that check fails, though the suite itself passed."""
  mod = load_dev()
  monkeypatch.setattr(mod, "NV_CACHE", tmp_path / "cache-nv")
  emu = next(r for r in mod.RUNS["NV"](False, "no GPU") if not r.hardware)
  assert emu.env["TINYCORE_CACHE"] == str(mod.NV_CACHE) and emu.after[1:] == ("-m", "tinygrad_nv.ptxas_check", mod.NV_CACHE, "sm_90", "sm_80")
  (tmp_path / "cache-nv").mkdir()
  (tmp_path / "cache-nv" / "stale").write_text("from an earlier run")
  cmds = []
  def fake(cmd, **kw):   # the suite passes, the check after it refuses
    cmds.append((cmd, kw["env"].get("TINYCORE_CACHE"), (tmp_path / "cache-nv" / "stale").exists()))
    return subprocess.CompletedProcess(cmd, 1 if "tinygrad_nv.ptxas_check" in cmd else 0)
  monkeypatch.setattr(mod.subprocess, "run", fake)
  ok, out, _ = mod.conformance("NV", emu)
  assert not ok and "tinygrad_nv.ptxas_check" in out
  assert [c[0][1:3] for c in cmds] == [["-m", "tinycore_conformance.cli"], ["-m", "tinygrad_nv.ptxas_check"]]
  assert all(c[1] == str(mod.NV_CACHE) and not c[2] for c in cmds)   # one fresh cache for both

# ***** tools/dev.py gpu: the one-command proof on an NVIDIA GPU *****

def load_gpu_proof():
  spec = importlib.util.spec_from_file_location("gpu_proof", Path(__file__).resolve().parent.parent / "tools" / "gpu_proof.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

def test_gpu_proof_without_a_gpu_runs_what_it_can_and_names_what_is_missing(monkeypatch, tmp_path, capsys):
  """On a machine without a GPU the proof runs the steps that need none, skips the others with the reason (libcuda
  missing), writes its report, and says so at the end; NV_EMULATE from the caller never turns the GPU steps into emulator runs."""
  import ctypes, sys
  try: ctypes.CDLL("libcuda.so.1"); pytest.skip("this machine has libcuda.so.1")
  except OSError: pass
  monkeypatch.setenv("TINYCORE_GPU_PYTHON", sys.executable)   # the installed checkout: nothing to install in a test
  monkeypatch.setenv("OUT", str(tmp_path))
  monkeypatch.setenv("NV_EMULATE", "1")
  assert load_dev().main(["gpu", "--steps=devices,edge table,conformance"]) == 2
  out = capsys.readouterr().out
  assert "NO NVIDIA GPU here" in out and "libcuda.so.1" in out
  report = json.loads((tmp_path / "gpu-proof.json").read_text())
  steps = {s["name"]: s for s in report["steps"]}
  assert list(steps) == ["tinycore devices", "cast edge table on the GPU vs the emulator", "conformance on the GPU (--profile ci)"]
  assert steps["tinycore devices"]["status"] == "passed" and "NV" in steps["tinycore devices"]["tail"]
  for name in list(steps)[1:]:
    assert steps[name]["status"] == "skipped" and steps[name]["why"].startswith("needs an NVIDIA GPU") and "libcuda.so.1" in steps[name]["why"]
  assert report["gpu"].startswith("none:") and "| tinycore devices | passed |" in (tmp_path / "gpu-proof.md").read_text()

def test_gpu_proof_names_the_commit_and_says_when_the_files_are_not_its(monkeypatch, tmp_path):
  """The report's commit is HEAD's only when the tracked files are HEAD's: a copy of a working tree that carries an older
  .git says that the code is not that commit's."""
  gp = load_gpu_proof()
  git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True, text=True).stdout.strip()
  git("init", "-q"); (tmp_path / "f.py").write_text("x = 1\n"); git("add", "f.py")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
  monkeypatch.setattr(gp, "ROOT", tmp_path)
  head = git("rev-parse", "--short", "HEAD")
  (tmp_path / "new.py").write_text("")   # an untracked file changes nothing that ran
  assert gp.commit() == head
  (tmp_path / "f.py").write_text("x = 2\n")
  assert gp.commit().startswith(head + " (") and "not that commit's code" in gp.commit()

def test_gpu_proof_steps_have_time_limits_and_never_stop_the_proof(tmp_path):
  """A step past its limit is ended with everything it started, one that fails or cannot run is recorded, and every step
  after still runs; a background step runs beside them; RESULT lines and pytest's per-test lines become the step's figures."""
  import sys, time
  gp = load_gpu_proof()
  py = sys.executable
  slow = "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('RESULT {\"child\": %d}' % c.pid); print('t.py::test_a PASSED'); print('t.py::test_b FAILED', flush=True); time.sleep(60)"
  steps = [gp.Step("slow", [py, "-c", slow], cap=3, floor=0), gp.Step("fails", [py, "-c", "raise SystemExit(3)"], cap=30, floor=0),
           gp.Step("cannot", [py, "-c", "pass"], cap=30, missing="needs an NVIDIA GPU: none here"),
           gp.Step("beside", [py, "-c", "print('RESULT {\"b\": 1}')"], cap=30, background=True),
           gp.Step("ok", [py, "-c", "print('RESULT {\"y\": 2}')"], cap=30, floor=0)]
  st = time.perf_counter()
  got = {r.name: r for r in gp.run_steps(steps, py, {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}, tmp_path, time.perf_counter() + 120)}
  assert time.perf_counter() - st < 40
  assert [(n, r.status) for n, r in got.items()] == [("slow", "timeout"), ("fails", "failed"), ("cannot", "skipped"), ("beside", "passed"), ("ok", "passed")]
  assert got["cannot"].why == "needs an NVIDIA GPU: none here" and got["ok"].figures == {"y": 2} and got["beside"].figures == {"b": 1}
  # a step cut short keeps what its pytest -vv output got to
  assert got["slow"].figures["failed tests"] == ["t.py::test_b"] and got["slow"].figures["passed so far"] == 1
  child = got["slow"].figures["child"]
  time.sleep(0.5)
  try: state = Path(f"/proc/{child}/status").read_text()
  except FileNotFoundError: state = "gone"
  assert state == "gone" or "zombie" in state, f"the timed-out step's child {child} still runs"

def test_gpu_proof_probes_run_against_the_libcuda_stand_in():
  """The launch and occupancy probes, which run only on the GPU machine, run here through the real NV driver against the
  libcuda stand-in (a C compiler builds it), in a process of their own: every figure they report is there, the register-
  capped variants assemble (ptxas where installed) and load, and the jitted step replays as one graph."""
  import os, shutil, sys
  pytest.importorskip("tinygrad_nv", reason="tinygrad-nv is not installed (pip install -e backends/tinygrad-nv)")
  if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
    if os.environ.get("CI"): pytest.fail("CI must build the libcuda stand-in: it installs a C compiler")
    pytest.skip("no C compiler to build the libcuda stand-in")
  root = Path(__file__).resolve().parent.parent
  code = (f"import sys, json, importlib.util; sys.path[:0] = [{str(root / 'tools')!r}]\n"
          f"spec = importlib.util.spec_from_file_location('fake', {str(root / 'backends/tinygrad-nv/tests/fake_libcuda.py')!r})\n"
          "fake = importlib.util.module_from_spec(spec); spec.loader.exec_module(fake); fake.install(fake.load())\n"
          "import gpu_proof; print('RESULT ' + json.dumps({'launch': gpu_proof.probe_launch(), 'occupancy': gpu_proof.probe_occupancy('64'), "
          "'kernels': gpu_proof.probe_kernels('64')}))")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, "NV_EMULATE": ""})
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
  launch, occupancy = got["launch"], got["occupancy"]
  assert all(launch[k] > 0 for k in ("s_plus_1_us", "python_reference_us", "launched_directly_us", "cuLaunchKernel_us", "jit_step_ms")), launch
  assert launch["jit_step_is_one_graph"] is True and any("schedule_cache.py" in ln for ln in launch["s_plus_1_profile"]), launch
  times = launch["jit_step_kernel_us"]   # the step's kernels one by one, each timed by the driver's events
  assert times["kernels"] == launch["jit_step_kernels"] and times["sum_us"] >= 0 and 0 < len(times["longest"]) <= 10, times
  assert list(occupancy) == [f"{dt} {v}" for dt in ("float16", "bfloat16", "float32") for v in ("as rendered", "maxnreg 168", "maxnreg 128")]
  assert all(v["tflops"] > 0 and v["registers"] == 0 for v in occupancy.values()), occupancy   # (the stand-in reports 0 registers)
  kernels = got["kernels"]
  assert list(kernels) == ["softmax 64x64", "layernorm 64x64", "exp(x*2+1).sum() over 16384", "a + b over 16384"]
  assert len(kernels["softmax 64x64"]) == len(kernels["layernorm 64x64"]) == len(kernels["a + b over 16384"]) == 1, kernels   # row kernels
  assert all(k["us"] > 0 and k["estimated_gb_per_s"] > 0 and k["global"] for ks in kernels.values() for k in ks), kernels
