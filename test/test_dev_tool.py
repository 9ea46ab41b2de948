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
  monkeypatch.setattr(mod, "run", lambda *cmd, **kw: ran.append((cmd, {k: v for k, v in kw.get("env", {}).items() if k in ("DEV", "WGPU_BACKEND_TYPE", "CPU_RENDERER")})))
  monkeypatch.delenv("CI", raising=False)
  mod.ran = ran
  return mod

def conformance_runs(mod) -> list[dict]: return [env for cmd, env in mod.ran if "tinycore_conformance.cli" in cmd]

def test_a_backend_without_a_runtime_is_skipped_with_the_reason(dev, monkeypatch, capsys):
  monkeypatch.setattr(dev, "installed_backends", lambda: [("CPU", True, ""), ("WEBGPU", False, "WEBGPU: no WebGPU adapter found")])
  monkeypatch.setitem(dev.RUNS, "CPU", lambda: [("CPU", {}, None)])
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
