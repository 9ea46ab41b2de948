"""Plugin discovery end to end: fake backend packages installed into a temporary directory, used from a fresh interpreter."""
import ast, json, os, re, subprocess, sys, textwrap
from pathlib import Path
import pytest
from tinycore.runtime.plugin import CONTRACT_VERSION, SUPPORTED, version_str

# each fake plugin: (distribution name, module name, entry-point name, module source)
PLUGINS = [
  ("fake-good", "fake_good", "fakegood", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    class GoodRenderer(PythonRenderer): device = "FAKEGOOD"
    @hookimpl
    def tinycore_backends():
      return [BackendSpec("FAKEGOOD", (2, 0), GoodRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEGOOD"), priority=-5)]
  """),
  ("fake-broken", "fake_broken", "fakebroken", """
    raise ImportError("fake_broken needs libnothing.so")
  """),
  ("fake-old", "fake_old", "fakeold", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    @hookimpl
    def tinycore_backends():
      return [BackendSpec("FAKEOLD", (0, 4), PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEOLD"))]
  """),
  ("fake-future", "fake_future", "fakefuture", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    @hookimpl
    def tinycore_backends():  # a major this core does not know yet
      return [BackendSpec("FAKEFUTURE", (3, 0), PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEFUTURE"))]
  """),
  ("fake-malformed", "fake_malformed", "fakemalformed", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    @hookimpl
    def tinycore_backends():
      return [BackendSpec(name, version, PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator(name))
              for name, version in (("FAKEBADSTR", "2.0"), ("FAKEBADLEN", (2,)), ("FAKEBADNEG", (2, -1)))]
  """),
  # written for contract 1: the driver factory takes no instance index; FAKEV1ARG states 1.0 with a factory that needs one
  ("fake-v1", "fake_v1", "fakev1", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    class V1Renderer(PythonRenderer): device = "FAKEV1"
    class V1Driver(PythonDriver):
      def __init__(self): super().__init__(0)
    def needs_index(index): return PythonDriver(index)
    @hookimpl
    def tinycore_backends():
      return [BackendSpec("FAKEV1", (1, 0), V1Renderer, Assembler, V1Driver, lambda drv: HostAllocator("FAKEV1")),
              BackendSpec("FAKEV1ARG", (1, 0), PythonRenderer, Assembler, needs_index, lambda drv: HostAllocator("FAKEV1ARG"))]
  """),
  # contract 1's docs, verbatim in form: the version imported from the core (so it claims the running core's version)
  ("fake-imported", "fake_imported", "fakeimported", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, CONTRACT_VERSION, hookimpl
    class ImportedRenderer(PythonRenderer): device = "FAKEIMPORTED"
    class ImportedDriver(PythonDriver):
      def __init__(self): super().__init__(0)
    @hookimpl
    def tinycore_backends():
      return [BackendSpec(name="FAKEIMPORTED", contract_version=CONTRACT_VERSION, renderer=ImportedRenderer, assembler=Assembler,
                          driver=ImportedDriver, allocator=lambda driver: HostAllocator("FAKEIMPORTED")),
              BackendSpec("FAKEIMPORTED2", CONTRACT_VERSION, PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEIMPORTED2"))]
  """),
  ("fake-single", "fake_single", "fakesingle", """
    from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    @hookimpl
    def tinycore_backends():  # one spec, not a list of them
      return BackendSpec("FAKESINGLE", (2, 0), PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKESINGLE"))
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
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    @hookimpl
    def tinycore_backends():  # the same device name as fake-good
      return [BackendSpec("FAKEGOOD", (2, 0), PythonRenderer, Assembler, PythonDriver, lambda drv: HostAllocator("FAKEGOOD"))]
  """),
  ("fake-nohw", "fake_nohw", "fakenohw", """
    from tinycore.runtime.builtin import PythonRenderer, HostAllocator
    from tinycore.runtime.device import Assembler
    from tinycore.runtime.plugin import BackendSpec, hookimpl
    class NoHwRenderer(PythonRenderer): device = "FAKENOHW"
    def open_driver(index): raise OSError("no /dev/fakegpu0 on this machine")
    @hookimpl
    def tinycore_backends():
      return [BackendSpec("FAKENOHW", (2, 0), NoHwRenderer, Assembler, open_driver, lambda drv: HostAllocator("FAKENOHW"), priority=-5)]
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
       "python_result": (Tensor([1.0, 2.0], device="PYTHON") + 1).numpy().tolist(),
       "status": {n: s.contract_status for n, s in [*Device.specs.items(), *Device.refused.items()]},
       "adapted_results": {n: (Tensor([1.0, 2.0], device=n) * 2).to("PYTHON:1").numpy().tolist() for n in ("FAKEV1", "FAKEIMPORTED")},
       "adapted_instances": [Device.instances(n) for n in ("FAKEV1", "FAKEIMPORTED")]}
for name in ("FAKEOLD", "FAKENOHW", "FAKEFUTURE", "FAKEBADSTR", "FAKEBADLEN", "FAKEBADNEG", "FAKEV1ARG", "FAKEV1:1"):
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

def supported() -> str:
  return f"{version_str(SUPPORTED[0])} to {version_str(SUPPORTED[1])}"

def warning_for(stderr: str, device: str) -> str:
  """The warning line about `device` in a probe's stderr (warnings print as 'file:line: Category: message')."""
  return next(line for line in stderr.splitlines() if f"provides {device} " in line)

@pytest.mark.parametrize("name,says", [("FAKEOLD", "contract 0.4, which is older than this tinycore supports"),
                                       ("FAKEFUTURE", "contract 3.0, newer than this tinycore's")])
def test_version_outside_the_range_is_refused_at_registration(probe, name, says):
  """Refused when the hooks are read, naming the package, its version, the contract it states and the supported range;
  the other devices keep working."""
  found, stderr = probe
  assert name not in found["devices"] and found["status"][name] == "refused"
  msg, pkg = found[name], f"fake-{name.removeprefix('FAKE').lower()}"
  assert f"plugin {pkg} 0.3.0 provides {name} for {says}" in msg and f"supports contracts {supported()}" in msg, msg
  assert ("Upgrade tinycore" if name == "FAKEFUTURE" else f"Upgrade {pkg}") in msg, msg
  assert "RuntimeWarning" in warning_for(stderr, name)   # warned at registration, not first at use
  assert found["python_result"] == [2.0, 3.0] and found["good_result"] == [4.0, 7.0]

@pytest.mark.parametrize("name,stated", [("FAKEBADSTR", "'2.0'"), ("FAKEBADLEN", "(2,)"), ("FAKEBADNEG", "(2, -1)")])
def test_malformed_version_is_refused_saying_how_to_state_it(probe, name, stated):
  found, _ = probe
  assert name not in found["devices"] and found["status"][name] == "refused"
  assert f"fake-malformed 0.3.0 provides {name} with contract_version={stated}, which is not a version" in found[name]
  assert "as a literal (major, minor) of ints" in found[name] and supported() in found[name]

def test_contract_1_plugin_is_adapted_with_a_deprecation_warning(probe):
  """A driver factory without an index (contract 1): one instance, opened with driver(); it computes, copies to another
  device, and NAME:1 is a clear error; the warning says what to change."""
  found, stderr = probe
  assert found["status"]["FAKEV1"] == "adapted" and found["adapted_results"]["FAKEV1"] == [2.0, 4.0]
  assert found["adapted_instances"] == [1, 1] and "FAKEV1:1 does not exist: this machine has 1 instance of FAKEV1" in found["FAKEV1:1"]
  line = warning_for(stderr, "FAKEV1")
  assert "ContractDeprecationWarning" in line and "fake-v1 0.3.0 provides FAKEV1 for contract 1.0" in line and "deprecated" in line
  assert "driver(index)" in line and "state contract_version=(2, 0)" in line and supported() in line, line

def test_contract_1_plugin_that_imported_the_version_is_adapted_too(probe):
  """The form contract 1's docs taught: CONTRACT_VERSION imported, so it claims the running core's version; its driver
  factory without an index gives it away. Adapted, not a TypeError at first use; the warning names both problems."""
  found, stderr = probe
  assert found["status"]["FAKEIMPORTED"] == "adapted" and found["adapted_results"]["FAKEIMPORTED"] == [2.0, 4.0]
  line = warning_for(stderr, "FAKEIMPORTED")
  assert "ContractDeprecationWarning" in line and "for contract 1.0 (it states" in line and "by importing CONTRACT_VERSION" in line
  assert "driver factory takes no instance index" in line and "driver(index)" in line, line

def test_current_plugin_that_imported_the_version_is_told_to_state_it(probe):
  found, stderr = probe
  assert found["status"]["FAKEIMPORTED2"] == "current" and "FAKEIMPORTED2" in found["devices"]
  line = warning_for(stderr, "FAKEIMPORTED2")
  assert "ContractDeprecationWarning" in line and "importing CONTRACT_VERSION" in line and "literally" in line, line

def test_contract_1_version_with_a_driver_needing_an_index_is_refused(probe):
  found, _ = probe
  assert found["status"]["FAKEV1ARG"] == "refused"
  assert "needs an argument, which contract 1 never passed" in found["FAKEV1ARG"] and "contract_version=(2, 0)" in found["FAKEV1ARG"]

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
  assert "fake-old" in rows["FAKEOLD"] and " 0.4 refused " in rows["FAKEOLD"]
  assert "fake-future" in rows["FAKEFUTURE"] and " 3.0 refused " in rows["FAKEFUTURE"] and supported() in rows["FAKEFUTURE"]
  assert " 1.0 adapted (deprecated) " in rows["FAKEV1"] and " yes " in rows["FAKEV1"] and "driver(index)" in rows["FAKEV1"]
  assert " 2.0 current " in rows["FAKEGOOD"] and " 2.0 current " in rows["PYTHON"]
  assert "libnothing.so" in rows["fakebroken"]
  assert "RuntimeWarning" not in out.stderr  # problems are rows of the table

def test_cli_json_lists_every_backend(site):
  out = run(site, "-m", "tinycore", "devices", "--json")
  assert out.returncode == 0, out.stderr
  data = json.loads(out.stdout)
  by_name = {d["name"]: d for d in data["devices"]}
  assert by_name["FAKEGOOD"]["opens"] and by_name["FAKEGOOD"]["package"] == "fake-good" and by_name["FAKEGOOD"]["version"] == "0.3.0"
  assert not by_name["FAKENOHW"]["opens"] and "fakegpu0" in by_name["FAKENOHW"]["error"]
  assert (by_name["FAKEOLD"]["contract"], by_name["FAKEOLD"]["contract_status"]) == ("0.4", "refused") and not by_name["FAKEOLD"]["opens"]
  assert (by_name["FAKEFUTURE"]["contract"], by_name["FAKEFUTURE"]["contract_status"]) == ("3.0", "refused")
  assert (by_name["FAKEBADSTR"]["contract"], by_name["FAKEBADSTR"]["contract_status"]) == ("'2.0'", "refused")
  assert (by_name["FAKEV1"]["contract"], by_name["FAKEV1"]["contract_status"]) == ("1.0", "adapted") and by_name["FAKEV1"]["opens"]
  assert "driver(index)" in by_name["FAKEV1"]["contract_note"] and by_name["FAKEV1"]["instances"] == 1
  assert data["contract_supported"] == supported().split(" to ") and data["contract_version"] == data["contract_supported"][1]
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

def test_every_backend_in_the_repository_states_its_contract_version_literally():
  """Every BackendSpec(...) of a plugin in the repository (a module with a tinycore_backends hook) and of the docs' python
  blocks states contract_version as a literal (major, minor), never the core's imported CONTRACT_VERSION (which claims
  whichever version runs it). The fixtures above that state it otherwise on purpose are source text in strings."""
  root = Path(__file__).resolve().parents[1]
  sources = {f: f.read_text() for d in ("tinycore", "backends", "conformance", "test", "examples", "bench", "tools") for f in (root / d).rglob("*.py")}
  for doc in (root / "docs").glob("*.md"):
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)): sources[doc.with_suffix(f".md#python{i}")] = block
  stated = []
  for f, src in sources.items():
    tree = ast.parse(src)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "tinycore_backends" for n in ast.walk(tree)): continue
    for node in ast.walk(tree):
      if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "BackendSpec":
        arg = node.args[1] if len(node.args) > 1 else next(k.value for k in node.keywords if k.arg == "contract_version")
        assert isinstance(arg, ast.Tuple) and all(isinstance(e, ast.Constant) and type(e.value) is int for e in arg.elts) and len(arg.elts) == 2, \
          f"{f.relative_to(root)}:{node.lineno}: state contract_version as a literal (major, minor), not {ast.unparse(arg)}"
        stated.append(f.relative_to(root))
  assert len(stated) >= 12 and {p.parts[0] for p in stated} >= {"tinycore", "backends", "conformance", "docs"}, stated

def _no_index(): pass
def _index(index): pass
NEXT_MINOR = (CONTRACT_VERSION[0], CONTRACT_VERSION[1] + 1)
@pytest.mark.parametrize("stated,driver,status,run_as", [
  ((2, 0), _index, "current", (2, 0)), (2, _index, "current", (2, 0)),             # contracts 1 and 2 were stated as plain ints
  ((1, 0), _no_index, "adapted", (1, 0)), (1, _no_index, "adapted", (1, 0)),
  ((2, 0), _no_index, "adapted", (1, 0)),                                           # contract 1's driver factory under 2.0's number
  ((1, 0), _index, "refused", None),                                                # 1.0 never passed the factory an argument
  ((1, 1), _no_index, "refused", None), ((0, 9), _no_index, "refused", None),       # no contract 1.1; older than the range
  (NEXT_MINOR, _index, "refused", None), ((3, 0), _index, "refused", None),        # newer than this core
  ((2, 0.0), _index, "refused", None), ([2, 0], _index, "refused", None), (True, _index, "refused", None), ((2, 0, 1), _index, "refused", None)])
def test_check_contract_table(stated, driver, status, run_as):
  """What the registry makes of a stated version and a driver factory (a core speaking any 2.x runs these rows alike)."""
  from tinycore.runtime.plugin import BackendSpec, check_contract
  spec = check_contract(BackendSpec("X", stated, object, object, driver, object, package="pkg", version="1.2"))
  assert (spec.contract_status, spec.contract_run_as) == (status, run_as), spec.contract_note
  assert (status == "current") == (spec.contract_note == "") and (status == "current" or "plugin pkg 1.2 provides X" in spec.contract_note)
  if status == "adapted":
    spec.driver(0)   # called without the index underneath
    assert spec.instances() == 1

def test_renderer_attribute_no_longer_read_is_named_with_what_to_declare():
  """`fma` sized CPU tiles at 2.2 and is not read since 2.3 (the core never turns it into MULACC, which an old renderer
  may not render): a 2.2 plugin setting it runs with no warning, as the policy promises an older minor; one stating 2.3
  is told it meant `mulacc_dtypes`; a renderer without it gets no note."""
  from tinycore.runtime.plugin import BackendSpec, unread_attribute_notes
  from tinycore.renderer import Renderer
  class OldRenderer(Renderer): fma = True
  def spec(stated): return BackendSpec("OLDFMA", stated, OldRenderer, object, _index, object, package="old-fma", version="0.1")
  assert unread_attribute_notes(spec((2, 2)), OldRenderer()) == [] and OldRenderer.mulacc_dtypes == frozenset()
  notes = unread_attribute_notes(spec((2, 3)), OldRenderer())
  assert len(notes) == 1 and "old-fma 0.1 states contract 2.3" in notes[0] and "`fma`" in notes[0] and "since contract 2.3" in notes[0], notes
  assert "mulacc_dtypes" in notes[0] and "writing-a-backend.md" in notes[0], notes
  assert unread_attribute_notes(spec((2, 3)), Renderer()) == []

def _two_args(index, queue): pass
def _keyword_index(*, index): pass
@pytest.mark.parametrize("driver", [_two_args, _keyword_index])
def test_contract_2_driver_that_cannot_take_the_index_alone_is_refused_saying_so(driver):
  """Stating 2.x with a driver factory that neither driver(index) nor contract 1's driver() can call: refused at
  registration, told what contract 2 calls (not to state the contract_version it already states)."""
  from tinycore.runtime.plugin import BackendSpec, check_contract
  spec = check_contract(BackendSpec("X", (2, 0), object, object, driver, object, package="pkg", version="1.2"))
  assert (spec.contract_status, spec.contract_run_as) == ("refused", None)
  assert spec.contract_note == ("plugin pkg 1.2 provides X for contract 2.0, but its driver factory cannot be called as driver(index) (contract 2 "
                                "passes the instance index as its one positional argument): make every other parameter optional"), spec.contract_note
