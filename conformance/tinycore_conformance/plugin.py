"""The pytest plugin (entry point `pytest11`): the --device and --conformance-profile options and the section markers."""
from __future__ import annotations
from tinycore_conformance import SECTIONS

def pytest_addoption(parser) -> None:
  group = parser.getgroup("tinycore-conformance", "tinycore backend conformance (pytest --pyargs tinycore_conformance)")
  group.addoption("--device", default=None, help="the tinycore backend to check (default: $DEV, else tinycore's default device)")
  group.addoption("--conformance-profile", default="ci", choices=("ci", "vendor"),
                  help="ci: fixed seeds and few random graphs; vendor: many more random graphs with fresh seeds")
  group.addoption("--fuzz-programs", type=int, default=None, metavar="N",
                  help="random programs per test of the fuzz section (default: the profile's; each dtype's movement test N/10)")

def pytest_configure(config) -> None:
  for name, what in SECTIONS.items(): config.addinivalue_line("markers", f"{name}: tinycore conformance section: {what}")
  config.addinivalue_line("markers", "covers(feature): the backend feature a conformance test checks, reported as its op")
  if config.getoption("device") is not None or any(str(a).startswith("tinycore_conformance") for a in config.args):
    # resolve (import) the plugin under test now, with the interpreter's own sys.path: collecting the suite makes pytest put
    # the suite's install directory first on sys.path, where another copy of the plugin may sit
    from tinycore_conformance.target import target_for
    target_for(config)

def pytest_report_header(config) -> list[str] | None:
  if config.getoption("device") is None: return None
  from tinycore_conformance.target import target_for, dtype_name, contract_lines
  t = target_for(config)
  return [f"tinycore conformance: device {t.name} (package {t.spec.package} {t.spec.version}, module {t.spec.module}), profile {config.getoption('conformance_profile')}",
          *[f"  {line}" for line in contract_lines(t.spec)], f"  declared dtypes: {', '.join(dtype_name(d) for d in t.dtypes)}; capabilities: {t.spec.capabilities}"]

def pytest_terminal_summary(terminalreporter, config) -> None:
  """Name the plugin module that was tested, whatever the verbosity (-q hides the header)."""
  from tinycore_conformance.target import _pinned_path, target_for, contract_lines
  if not _pinned_path: return   # the suite did not run in this session
  t = target_for(config)
  terminalreporter.write_line(f"tinycore conformance: tested {t.name} from {t.spec.module} (package {t.spec.package} {t.spec.version})")
  for line in contract_lines(t.spec): terminalreporter.write_line(f"  {line}")
