"""The suite can fail: each deliberately broken backend is reported failing, naming the op; correct ones pass."""
from __future__ import annotations
import os, shutil, subprocess, sys
from conformance_helpers import HERE, run_cli

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
  """A driver that launches at most 65536 threads: every check past 2**16 elements fails, every smaller one passes."""
  proc, rep = run_cli("BROKEN_LAUNCH", "-k", "test_big or test_driver_launch_sizes", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 1, proc.stdout[-3000:]
  ops = {f["op"] for f in rep["failures"]}
  assert {"driver.launch", "add", "neg", "where"} <= ops, ops
  shapes = {f["shape"] for f in rep["failures"] if f["op"] == "driver.launch"}
  assert shapes == {"(65537,)", "(300, 301)"}, f"only the launches past 65536 threads should fail: {shapes}"

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
  proc, rep = run_cli("BROKEN_REFUSES", "--section", "ops", "-k", "test_forward and float32 and (exp or add)", path=plugin_path, tmp=tmp_path)
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

def test_narrow_backend_passes_and_says_why_it_skips(plugin_path, tmp_path):
  """Declaring only bool, int32 and float32 is fine: what is missing is skipped with a reason and checked to fail cleanly."""
  proc, rep = run_cli("NARROW", "--section", "dtypes", path=plugin_path, tmp=tmp_path)
  assert proc.returncode == 0, proc.stdout[-3000:]
  assert rep["sections"]["dtypes"]["passed"] >= 10 and not rep["failures"]
  undeclared = [s for s in rep["skips"] if s["op"] == "test_undeclared_dtype_fails_cleanly"]
  assert not undeclared, f"the undeclared dtypes must be checked (raising UnsupportedError), not skipped: {undeclared}"
  assert any("does not declare float16" in s["message"] for s in rep["skips"]), [s["message"] for s in rep["skips"]][:5]
  assert "SKIPS" in proc.stdout

def test_pytest_plugin_entry_point(plugin_path, tmp_path):
  """The suite also runs as plain pytest (the pytest11 entry point), selected by marker."""
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(plugin_path)}
  proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "tinycore_conformance", "--device", "BROKEN_OFFSET", "-m", "contract",
                         "-k", "allocator", "-p", "no:cacheprovider", "-q", "-rs"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
  assert proc.returncode == 1 and "test_allocator_offset_views" in proc.stdout, proc.stdout[-3000:]
  assert "1 failed" in proc.stdout

def test_example_plugin_installs_and_passes(tmp_path):
  """The example in docs/writing-a-backend.md: pip-install it (into a private target) and run the suite on EXAMPLE."""
  site, src = tmp_path / "site", tmp_path / "example_plugin"
  shutil.copytree(HERE / "example_plugin", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))  # builds stay out of the checkout
  pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), str(src)],
                       capture_output=True, text=True, timeout=300)
  assert pip.returncode == 0, pip.stderr[-3000:]
  proc, rep = run_cli("EXAMPLE", "-k", "not test_forward and not test_backward", path=[str(site)], tmp=tmp_path)
  assert proc.returncode == 0, proc.stdout[-5000:]
  assert rep["package"] == "tinygrad-example" and not rep["failures"]
  for section in ("contract", "dtypes", "fuzz", "models", "resources"): assert rep["sections"][section]["passed"] > 0, section
  assert any("does not declare bfloat16" in s["message"] for s in rep["skips"])

def test_writing_a_backend_doc_shows_the_example_verbatim():
  """docs/writing-a-backend.md and example_plugin/ are one text: every file of the example appears in the doc unchanged."""
  doc = (HERE.parents[1] / "docs" / "writing-a-backend.md").read_text()
  files = [HERE / "example_plugin" / "pyproject.toml", *sorted((HERE / "example_plugin" / "tinygrad_example").glob("*.py"))]
  for f in files: assert f.read_text().strip() in doc, f"{f.relative_to(HERE)} differs from its copy in docs/writing-a-backend.md"
