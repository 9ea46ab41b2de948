"""The suite can fail: each deliberately broken backend is reported failing, naming the op; correct ones pass."""
from __future__ import annotations
import os, shutil, subprocess, sys
import pytest
from conformance_helpers import HERE, run_cli
from example_defects import DEFECTS

def failed(report: dict) -> set[tuple[str, str]]: return {(f["op"], f["dtype"]) for f in report["failures"]}

def test_signed_uint32_compare_is_caught(plugin_path, tmp_path):
  """CMPLT on uint32 done as signed: lt/gt/le/ge fail for uint32 only; int32 and the other uint32 ops pass."""
  proc, rep = run_cli("BROKEN_CMP", "--section", "ops", "-k", "test_forward and (uint32 or int32)", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
  bad = failed(rep)
  assert {("lt", "uint32"), ("gt", "uint32"), ("le", "uint32"), ("ge", "uint32")} <= bad, bad
  assert all(dt == "uint32" for _, dt in bad), f"failures outside uint32: {bad}"
  assert ("add", "uint32") not in bad and rep["sections"]["ops"]["passed"] > 50
  assert "lt uint32 (3, 5) x (3, 5)" in proc.stdout, "the human report must name the op, dtype and shape of each failure"

def test_rounding_float_to_int_cast_is_caught(plugin_path, tmp_path):
  proc, rep = run_cli("BROKEN_CAST", "--section", "dtypes", "-k", "test_cast", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert failed(rep) == {("cast from float32", "int32")}, failed(rep)
  assert "1.5" in rep["failures"][0]["message"], "the message should show the value that converted wrongly"

def test_allocator_offset_bug_is_caught(plugin_path, tmp_path):
  proc, rep = run_cli("BROKEN_OFFSET", "--section", "contract", "-k", "allocator", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {op for op, _ in failed(rep)} == {"allocator.offset"}, failed(rep)

def test_launch_size_bug_is_caught(plugin_path, tmp_path):
  """A driver that launches at most 65536 threads along x: every check past 2**16 elements in one dimension fails, every
  smaller one passes (a 300 x 301 launch is two dimensions of blocks, each short of it)."""
  proc, rep = run_cli("BROKEN_LAUNCH", "-k", "test_big or test_driver_launch_sizes", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  ops = {f["op"] for f in rep["failures"]}
  assert {"driver.launch", "add", "neg", "where"} <= ops, ops
  shapes = {f["shape"] for f in rep["failures"] if f["op"] == "driver.launch"}
  assert shapes == {"(65537,)"}, f"only the launches past 65536 threads along x should fail: {shapes}"

def test_naive_accumulation_is_caught(plugin_path, tmp_path):
  """One float32 accumulator per kernel (the codegen's tree of short sums undone): long sums of 0.1 drift past the
  documented tolerance; sums of ones and integers, exact either way, still pass."""
  proc, rep = run_cli("BROKEN_NAIVE", "--section", "reduce_scale", "-k", "constant or ones or int64", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {f["op"] for f in rep["failures"]} == {"reduce-scale constant"}, rep["failures"]
  assert "0.1" in rep["failures"][0]["message"] and rep["sections"]["reduce_scale"]["passed"] >= 2

def test_leaked_buffers_are_caught(plugin_path, tmp_path):
  proc, rep = run_cli("BROKEN_LEAK", "--section", "resources", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  ops = {f["op"] for f in rep["failures"]}
  assert {"buffer lifetime", "1000 launches"} <= ops, ops
  assert any("allocations" in f["message"] for f in rep["failures"])

def test_undeclared_dtype_that_computes_is_caught(plugin_path, tmp_path):
  proc, rep = run_cli("BROKEN_UNDECLARED", "-k", "test_undeclared_dtype_fails_cleanly", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert failed(rep) == {("test_undeclared_dtype_fails_cleanly", "float64")}, failed(rep)

def test_refusing_a_declared_op_is_caught(plugin_path, tmp_path):
  """UnsupportedError for an op on dtypes the backend declares is a failure naming the op, not a skip."""
  # "not expand": the movement ops' "expanded" input cases would match "exp" too (113 of them), and none computes EXP2
  proc, rep = run_cli("BROKEN_REFUSES", "--section", "ops", "-k", "test_forward and float32 and (exp or add) and not expand", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  bad = failed(rep)
  assert ("exp", "float32") in bad and ("add", "float32") not in bad, bad
  assert not [s for s in rep["skips"] if "refused" in s["message"]], rep["skips"]

def test_crashing_backend_is_reported_and_the_rest_still_runs(plugin_path, tmp_path):
  """A backend that kills the interpreter: the CLI names the test it died in and runs the remaining tests."""
  proc, rep = run_cli("BROKEN_CRASH", "-k", "test_driver_launch_sizes", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert [(f["op"], f["shape"]) for f in rep["failures"]] == [("driver.launch", "(7,)")], rep["failures"]
  assert "died" in rep["failures"][0]["message"] and rep["sections"]["contract"]["passed"] == 6

def test_int_min_division_trap_is_caught(plugin_path, tmp_path):
  """A kernel dying with SIGFPE on MIN // -1 and MIN % -1: those cases fail (naming the signal), the rest still runs."""
  proc, rep = run_cli("BROKEN_TRAP", "--section", "uops", "-k", "test_uop and (IDIV or MOD or ADD)", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  signed = {"int8", "int16", "int32", "int64"}
  assert failed(rep) == {(op, dt) for op in ("IDIV", "MOD") for dt in signed}, failed(rep)
  assert all("signal 8" in f["message"] for f in rep["failures"]), [f["message"] for f in rep["failures"]]
  assert rep["sections"]["uops"]["passed"] >= 8 + 13, "unsigned division and every ADD must still run and pass"

def test_bool_stored_as_two_is_caught(plugin_path, tmp_path):
  """True + True stored as the byte 2: numpy would read it as True; the uops table compares bytes, and the ops section
  checks that every stored bool is 0 or 1."""
  proc, rep = run_cli("BROKEN_BOOL", "--section", "uops", "--section", "ops", "-k", "bool and (uop or fused or test_forward and add)", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {("ADD", "bool"), ("add", "bool")} <= failed(rep) and all(dt == "bool" for _, dt in failed(rep)), failed(rep)
  assert any("got 2, expected 1" in f["message"] for f in rep["failures"]), [f["message"] for f in rep["failures"]]

def test_half_intermediates_kept_in_float32_are_caught(plugin_path, tmp_path):
  """(2048h + 1) - 2048 computed in float32 inside one kernel gives 1; rounding after each op gives 0. Single ops pass."""
  proc, rep = run_cli("BROKEN_HALF", "--section", "uops", "-k", "float16 and (fused or test_uop and (ADD or SUB))", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert failed(rep) == {("(a+b)-a", "float16")}, failed(rep)
  assert "(2048.0, 1.0" in rep["failures"][0]["message"] and "got 1.0, expected 0.0" in rep["failures"][0]["message"]

def test_naive_sin_range_reduction_is_caught(plugin_path, tmp_path):
  """A float32 sine reduced naively: the sweeps of sin, cos and tan fail and name the worst input; exp2 and sqrt pass."""
  proc, rep = run_cli("BROKEN_SIN", "--section", "accuracy", "-k", "float32", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {("sin", "float32"), ("cos", "float32")} <= failed(rep) <= {("sin", "float32"), ("cos", "float32"), ("tan", "float32")}, failed(rep)
  assert all("worst at x = " in f["message"] for f in rep["failures"])

def test_dropped_launch_remainder_is_caught(plugin_path, tmp_path):
  """A driver that launches the global size rounded down to a multiple of 4: the odd sizes fail, whole launches of one do not."""
  proc, rep = run_cli("BROKEN_TAIL", "--section", "edges", "-k", "odd_sizes", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {op for op, _ in failed(rep)} == {"odd global sizes"} and len(rep["failures"]) == 4, failed(rep)

def test_fuzz_section_catches_a_dropped_launch_remainder(plugin_path, tmp_path):
  """The random programs' sizes (primes, one off every power of two) leave launch remainders: the same broken driver
  fails them, and the failure shows the program."""
  proc, rep = run_cli("BROKEN_TAIL", "--section", "fuzz", "-k", "random_graph and int", "--fuzz-programs", "10", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {op for op, _ in failed(rep)} == {"random graph"}, failed(rep)
  assert "x = " in rep["failures"][0]["message"], rep["failures"][0]["message"][-2000:]

def test_variables_past_16_bits_are_caught(plugin_path, tmp_path):
  proc, rep = run_cli("BROKEN_VARS", "--section", "edges", "-k", "variables", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {op for op, _ in failed(rep)} == {"integer variables at their bounds"}, failed(rep)
  assert "a=-2147483647" in rep["failures"][0]["message"]

def test_view_offsets_are_checked_in_kernels(plugin_path, tmp_path):
  """The allocator that ignores view offsets also fails the odd-offset views and the allocation boundaries of the edges section."""
  proc, rep = run_cli("BROKEN_OFFSET", "--section", "edges", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert {op for op, _ in failed(rep)} == {"views at odd offsets", "allocation size boundaries"}, failed(rep)

def test_broken_definition_is_caught(tmp_path):
  """The uops section first pins tinycore's definition against an independent reference: a definition whose integer
  division floors fails there (and the backend, held to that definition, would pass, which is why it is pinned)."""
  env = {**os.environ, "PYTHONPATH": str(HERE)}
  proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "tinycore_conformance", "--device", "PYTHON", "-p", "broken_definition",
                         "-k", "test_definition_matches_reference and (IDIV or MOD-int32)", "-p", "no:cacheprovider", "-q"],
                        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert "4 failed, 5 passed" in proc.stdout and "IDIV-int8 (-128, 3): got -43, expected -42" in proc.stdout, proc.stdout[-3000:]   # signed only

def test_narrow_backend_passes_and_says_why_it_skips(plugin_path, tmp_path):
  """Declaring only bool, int32 and float32 is fine: what is missing is skipped with a reason and checked to fail cleanly."""
  proc, rep = run_cli("NARROW", "--section", "dtypes", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 0, proc.stdout[-3000:]
  assert rep["sections"]["dtypes"]["passed"] >= 10 and not rep["failures"]
  undeclared = [s for s in rep["skips"] if s["op"] == "test_undeclared_dtype_fails_cleanly"]
  assert not undeclared, f"the undeclared dtypes must be checked (raising UnsupportedError), not skipped: {undeclared}"
  assert any("does not declare float16" in s["message"] for s in rep["skips"]), [s["message"] for s in rep["skips"]][:5]
  assert "SKIPS" in proc.stdout

def test_contract_1_plugin_passes_with_a_deprecation_warning(plugin_path, tmp_path):
  """A backend written for contract 1.0 (its driver factory takes no instance index) passes on this core, adapted to one
  instance: the report states the contract it runs as, and the warning says what to change. (The sections on the roles
  the adaptation touches; the others check kernels PYTHON also runs, and CONTRACT1 is PYTHON: the whole suite is run by hand.)"""
  sections = ("contract", "multi", "resources")
  proc, rep = run_cli("CONTRACT1", *[a for s in sections for a in ("--section", s)], path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 0, proc.stdout[-5000:]
  assert (rep["contract"], rep["contract_stated"], rep["contract_status"]) == ("1.0", "1.0", "adapted") and not rep["failures"]
  assert rep["sections"]["contract"]["passed"] > 30 and rep["sections"]["resources"]["passed"] > 0
  assert "driver(index)" in rep["contract_note"] and "contract_version=(2, 0)" in rep["contract_note"], rep["contract_note"]
  assert "plugin contract: 1.0 adapted (deprecated)\n  ContractDeprecationWarning: plugin tinygrad-contract1 0.0.0 provides CONTRACT1" in proc.stdout
  assert any("declares 1 instance" in s["message"] for s in rep["skips"] if s["section"] == "multi"), [s for s in rep["skips"] if s["section"] == "multi"]

def test_false_contract_claim_is_caught(plugin_path, tmp_path):
  """Stating contract 2.0 with contract 1's driver factory: the core still runs it (as 1.0), and the suite fails the claim."""
  proc, rep = run_cli("BROKEN_CONTRACT", "--section", "contract", "-k", "stated_contract_version or allocator_roundtrip", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert [f["op"] for f in rep["failures"]] == ["contract version"], rep["failures"]
  assert "states contract 2.0, but tinycore runs it as 1.0" in rep["failures"][0]["message"]
  assert rep["sections"]["contract"]["passed"] == 4 and rep["contract_status"] == "adapted"

def test_pytest_plugin_entry_point(plugin_path, tmp_path):
  """The suite also runs as plain pytest (the pytest11 entry point), selected by marker."""
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(plugin_path)}
  proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "tinycore_conformance", "--device", "BROKEN_OFFSET", "-m", "contract",
                         "-k", "allocator", "-p", "no:cacheprovider", "-q", "-rs"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
  assert proc.returncode == 1 and "test_allocator_offset_views" in proc.stdout, proc.stdout[-3000:]
  assert "1 failed" in proc.stdout

def test_example_plugin_installs_and_passes(example_site, tmp_path):
  """The example in docs/writing-a-backend.md: pip-installed (into a private target), the suite run on EXAMPLE."""
  # the op sweeps, the definition's own pin and the accuracy sweeps are left out for time, and few random programs run:
  # every kernel is compiled by cc
  proc, rep = run_cli("EXAMPLE", "-k", "not test_forward and not test_backward and not test_definition and not test_sweep",
                      "--fuzz-programs", "30", path=[example_site], tmp=tmp_path)
  assert proc.returncode == 0, proc.stdout[-5000:]
  assert rep["package"] == "tinygrad-example" and not rep["failures"]
  for section in ("contract", "uops", "edges", "dtypes", "fuzz", "models", "resources"): assert rep["sections"][section]["passed"] > 0, section
  # it declares every dtype (the core emulates half and bfloat16 for it): none is left to refuse
  assert any("EXAMPLE declares every dtype" in s["message"] for s in rep["skips"]), [s["message"] for s in rep["skips"]]

def test_plugin_copy_on_pythonpath_cannot_steer_the_run(example_site, tmp_path):
  """The example plugin and the suite installed in one site directory, another copy of the plugin ahead of it on
  PYTHONPATH: `python -m tinycore devices`, the CLI, and pytest with -q and -v (whose collection puts the suite's site
  directory first on sys.path) all test the copy the registry shows, and say so; the render-alone child checks it too."""
  site, copy = tmp_path / "site", tmp_path / "copy"
  shutil.copytree(example_site, site)
  shutil.copytree(HERE.parent / "tinycore_conformance", site / "tinycore_conformance", ignore=shutil.ignore_patterns("__pycache__"))
  shutil.copytree(HERE / "example_plugin" / "tinygrad_example", copy / "tinygrad_example", ignore=shutil.ignore_patterns("__pycache__"))
  want = str(copy / "tinygrad_example" / "__init__.py")
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(site)])}
  env.pop("DEV", None)
  def run(*cmd: str) -> str:
    proc = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout
  assert want in run("-m", "tinycore", "devices"), "the registry should show the copy first on PYTHONPATH"
  checks = "test_renderer_needs_no_device or test_driver_integer_variables"
  out = run("-m", "tinycore_conformance.cli", "EXAMPLE", "-q", "-k", checks)
  assert f"plugin module under test: {want}" in out, out[-2000:]
  for verbosity in ("-q", "-v"):
    out = run("-m", "pytest", "--pyargs", "tinycore_conformance", "--device", "EXAMPLE", "-p", "no:cacheprovider", verbosity, "-k", checks)
    assert f"tested EXAMPLE from {want}" in out and "2 passed" in out, out[-2000:]

def test_writing_a_backend_doc_shows_the_example_verbatim():
  """docs/writing-a-backend.md and example_plugin/ are one text: every file of the example appears in the doc unchanged."""
  doc = (HERE.parents[1] / "docs" / "writing-a-backend.md").read_text()
  files = [HERE / "example_plugin" / "pyproject.toml", *sorted((HERE / "example_plugin" / "tinygrad_example").glob("*.py"))]
  for f in files: assert f.read_text().strip() in doc, f"{f.relative_to(HERE)} differs from its copy in docs/writing-a-backend.md"

# the specials section on float32 and float64 (and the casts naming them): every class has checks there
SPECIALS_RUN = ("--section", "specials", "-k", "float32 or float64")
# a piece of each class's failure report: the value or cast its defect gets wrong
DEFECT_SHOWS = {"signed zero constants": "expected -0.0 (0x80000000)", "double rounding": "cast float64 -> float16",
                "reduce identities": "got -3.4028234663852886e+38", "NaN payloads": "cast float32 -> bfloat16"}

def test_example_declaring_every_dtype_passes_the_specials(example_copy, tmp_path):
  """The baseline of the one-defect copies below: the example plugin declaring every dtype passes the specials section."""
  proc, rep = run_cli("EXAMPLE", *SPECIALS_RUN, path=example_copy(None), tmp=tmp_path)
  assert proc.returncode == 0 and not rep["failures"] and rep["sections"]["specials"]["passed"] >= 10, proc.stdout[-3000:]

@pytest.mark.parametrize("cls", list(DEFECTS))
def test_special_value_defects_are_caught_and_named(example_copy, tmp_path, cls):
  """Each defect of issue 42 planted alone in the example plugin (a -0.0 literal written as 0.0; float64 -> half through
  float32 and int64 -> float32 through float64; max accumulators starting at -FLT_MAX; float32 -> bfloat16 with no NaN
  guard) fails the specials section, and every failure names the defect's class, in the JSON and the human report."""
  proc, rep = run_cli("EXAMPLE", *SPECIALS_RUN, path=example_copy(cls), tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  fails = rep["failures"]
  assert fails and all(f["op"] == cls and f["message"].startswith(f"{cls}: ") for f in fails), [(f["op"], f["message"][:150]) for f in fails]
  assert any(DEFECT_SHOWS[cls] in f["message"] for f in fails), [f["message"][:300] for f in fails]
  assert f"[specials] {cls}" in proc.stdout
