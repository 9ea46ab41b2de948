"""Plugin discovery end to end: fake backend packages installed into a temporary directory, used from a fresh interpreter."""
import json, os, subprocess, sys, textwrap
from pathlib import Path
import pytest

# each fake plugin: (distribution name, module name, entry-point name, module source)
PLUGINS = [
  ("fake-good", "fake_good", "fakegood", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl
    class GoodRenderer(PythonRenderer): device = "FAKEGOOD"
    @hookimpl
    def tinycore_backends():
      return [BackendSpec("FAKEGOOD", CONTRACT_VERSION, GoodRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEGOOD"), priority=-5)]
  """),
  ("fake-broken", "fake_broken", "fakebroken", """
    raise ImportError("fake_broken needs libnothing.so")
  """),
  ("fake-old", "fake_old", "fakeold", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl
    @hookimpl
    def tinycore_backends():
      return [BackendSpec("FAKEOLD", CONTRACT_VERSION + 41, PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEOLD"))]
  """),
  ("fake-single", "fake_single", "fakesingle", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl
    @hookimpl
    def tinycore_backends():  # one spec, not a list of them
      return BackendSpec("FAKESINGLE", CONTRACT_VERSION, PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKESINGLE"))
  """),
  ("fake-nohook", "fake_nohook", "fakenohook", """
    def tinycore_backends(): return []   # no @hookimpl
  """),
  ("fake-misspelled", "fake_misspelled", "fakemisspelled", """
    from tinycore.runtime.plugin import hookimpl
    @hookimpl
    def tinycore_backend(): return []
  """),
  ("fake-twin", "fake_twin", "fakegoodtwin", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl
    @hookimpl
    def tinycore_backends():  # the same device name as fake-good
      return [BackendSpec("FAKEGOOD", CONTRACT_VERSION, PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEGOOD"))]
  """),
  ("fake-nohw", "fake_nohw", "fakenohw", """
    from tinycore.runtime.builtin import PythonRenderer, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl
    class NoHwRenderer(PythonRenderer): device = "FAKENOHW"
    def open_driver(index): raise OSError("no /dev/fakegpu0 on this machine")
    @hookimpl
    def tinycore_backends():
      return [BackendSpec("FAKENOHW", CONTRACT_VERSION, NoHwRenderer, Assembler, open_driver, lambda drv: HostAllocator("FAKENOHW"), priority=-5)]
  """),
]

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
  """A directory that, on sys.path, installs the fake plugins: a module and a .dist-info with entry points each."""
  root = tmp_path_factory.mktemp("site")
  for dist, mod, ep, src in PLUGINS:
    (root / mod).mkdir()
    (root / mod / "__init__.py").write_text(textwrap.dedent(src))
    info = root / f"{dist.replace('-', '_')}-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text(f"[tinycore.backends]\n{ep} = {mod}\n")
  return root

def run(site: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
  """A fresh interpreter that sees the fake plugins (and whatever real ones are installed)."""
  full_env = {k: v for k, v in os.environ.items() if k != "DEV"}
  full_env.update(PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), **(env or {}))
  return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full_env, timeout=120)

PROBE = """
import json
from tinycore import Device, Tensor
from tinycore.runtime.errors import PluginError
out = {"devices": sorted(Device), "good_pkg": [Device.specs["FAKEGOOD"].package, Device.specs["FAKEGOOD"].version],
       "good_result": (Tensor([1.0, 2.0], device="fakegood") * 3 + 1).numpy().tolist(),
       "python_result": (Tensor([1.0, 2.0], device="PYTHON") + 1).numpy().tolist()}
for name in ("FAKEOLD", "FAKENOHW"):
  try: Device[name]; out[name] = None
  except PluginError as e: out[name] = str(e)
print(json.dumps(out))
"""

@pytest.fixture(scope="module")
def probe(site) -> tuple[dict, str]:
  """One interpreter asked about every fake plugin: (its findings, its stderr)."""
  out = run(site, "-c", PROBE)
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout), out.stderr

def test_registered_plugin_is_listed_and_usable(probe):
  found, _ = probe
  assert "FAKEGOOD" in found["devices"]
  assert found["good_pkg"] == ["fake-good", "0.3.0"]
  assert found["good_result"] == [4.0, 7.0]

def test_plugin_broken_on_import_warns_and_the_rest_works(probe):
  found, stderr = probe
  assert "RuntimeWarning" in stderr and "fakebroken" in stderr and "libnothing.so" in stderr
  assert "FAKEBROKEN" not in found["devices"] and "fakebroken" not in found["devices"]
  assert found["python_result"] == [2.0, 3.0] and found["good_result"] == [4.0, 7.0]

def test_wrong_contract_version_is_refused_naming_both_versions(probe):
  found, stderr = probe
  assert "FAKEOLD" not in found["devices"]
  msg = found["FAKEOLD"]
  assert "fake-old" in msg and "version 43" in msg and "version 2" in msg
  assert "fake-old" in stderr  # warned at discovery too

def test_driver_failing_to_open_is_a_clear_error(probe):
  found, _ = probe
  assert "FAKENOHW" in found["devices"]  # registered: it renders without the hardware
  assert "FAKENOHW" in found["FAKENOHW"] and "fake-nohw" in found["FAKENOHW"] and "no /dev/fakegpu0" in found["FAKENOHW"]

def test_cli_table_reports_every_plugin(site):
  out = run(site, "-m", "tinycore", "devices")
  assert out.returncode == 0, out.stderr
  rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
  assert "no /dev/fakegpu0" in rows["FAKENOHW"] and " no " in rows["FAKENOHW"]
  assert "fake-good" in rows["FAKEGOOD"] and "0.3.0" in rows["FAKEGOOD"] and " yes " in rows["FAKEGOOD"]
  assert "fake-old" in rows["FAKEOLD"] and " 43 " in rows["FAKEOLD"]
  assert "libnothing.so" in rows["fakebroken"]
  assert "RuntimeWarning" not in out.stderr  # problems are rows of the table

def test_cli_json_lists_every_backend(site):
  out = run(site, "-m", "tinycore", "devices", "--json")
  assert out.returncode == 0, out.stderr
  data = json.loads(out.stdout)
  by_name = {d["name"]: d for d in data["devices"]}
  assert by_name["FAKEGOOD"]["opens"] and by_name["FAKEGOOD"]["package"] == "fake-good" and by_name["FAKEGOOD"]["version"] == "0.3.0"
  assert not by_name["FAKENOHW"]["opens"] and "fakegpu0" in by_name["FAKENOHW"]["error"]
  assert by_name["FAKEOLD"]["contract"] == data["contract_version"] + 41 and not by_name["FAKEOLD"]["opens"]
  assert by_name["fakebroken"]["contract"] is None and by_name["fakebroken"]["package"] == "fake-broken"
  assert {"PYTHON", "NULL"} <= set(by_name) and sum(d["default"] for d in data["devices"]) == 1

def test_dev_selects_the_default_device(site):
  out = run(site, "-c", "from tinycore import Device, Tensor; print(Device.DEFAULT, (Tensor([1.0]) + 1).device)", env={"DEV": "fakegood"})
  assert out.returncode == 0, out.stderr
  assert out.stdout.split() == ["FAKEGOOD", "FAKEGOOD"]

def test_hook_returning_one_spec_is_reported_and_the_rest_works(probe, site):
  found, stderr = probe
  assert "FAKESINGLE" not in found["devices"] and "wrap the one spec in a list" in stderr
  assert found["python_result"] == [2.0, 3.0] and found["good_result"] == [4.0, 7.0]
  rows = {d["name"]: d for d in json.loads(run(site, "-m", "tinycore", "devices", "--json").stdout)["devices"]}
  assert "list of BackendSpec" in rows["fakesingle"]["error"] and rows["fakesingle"]["package"] == "fake-single"

@pytest.mark.parametrize("plugin", ["fakenohook", "fakemisspelled"])
def test_plugin_without_a_hook_is_reported_not_dropped(probe, site, plugin):
  _, stderr = probe
  assert plugin in stderr and "no @hookimpl function named tinycore_backends" in stderr
  rows = {d["name"]: d for d in json.loads(run(site, "-m", "tinycore", "devices", "--json").stdout)["devices"]}
  assert not rows[plugin]["opens"] and "misspelled" in rows[plugin]["error"]

def test_two_packages_with_one_device_name_are_reported(probe, site):
  found, stderr = probe
  assert found["good_pkg"] == ["fake-good", "0.3.0"]   # the first by entry-point name keeps the name, deterministically
  assert "provided twice" in stderr and "fake-good" in stderr and "fake-twin" in stderr
  rows = {d["name"]: d for d in json.loads(run(site, "-m", "tinycore", "devices", "--json").stdout)["devices"]}
  assert "FAKEGOOD[fake-twin]" in rows and "Uninstall one" in rows["FAKEGOOD[fake-twin]"]["error"]
  assert rows["FAKEGOOD"]["module"].endswith("fake_good/__init__.py")

NO_HARDWARE_PROGRAM = """
from tinycore import Tensor
from tinycore.runtime.errors import PluginError
x = Tensor([[1.0, -2.0], [3.0, 4.0]], device="fakenohw")   # host data for a device that does not open: kept until realize
out = (x.exp().contiguous() @ x).softmax()
kernels = [si.ast for si in out.schedule() if si.ast.op.name == "SINK"]
print("KERNELS", len(kernels), flush=True)
try: out.numpy()
except PluginError as e: print("ERROR", e)
"""

def test_debug4_shows_every_kernel_where_the_device_does_not_open(site):
  """Renderers need no device: with DEBUG=4 every kernel of the realize is rendered and shown, then the program fails at
  the device, saying why it does not open (the Tensor made from host data does not fail earlier, before any source)."""
  out = run(site, "-c", NO_HARDWARE_PROGRAM, env={"DEBUG": "4"})
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  n = int(next(l for l in lines if l.startswith("KERNELS")).split()[1])
  err = next(i for i, l in enumerate(lines) if l.startswith("ERROR"))
  assert n >= 3 and "no /dev/fakegpu0" in lines[err] and "FAKENOHW" in lines[err]
  shown = [l for l in lines[:err] if l.startswith("# ")]   # the PYTHON renderer's source opens with "# <kernel name>"
  assert len(shown) == n, out.stdout
