"""Fixtures and hooks for the suite's test modules: the target, the opened device, and each test's op/dtype/shape."""
from __future__ import annotations
from pathlib import Path
import pytest
from tinycore_conformance.target import Target, target_for, dtype_name

HERE = Path(__file__).parent

@pytest.fixture(scope="session")
def target(request) -> Target: return target_for(request.config)

@pytest.fixture(scope="session")
def device(target: Target):
  """The opened backend, made tinycore's default device: every test that executes kernels asks for it."""
  if not target.cap("runs"): pytest.skip(f"{target.name} declares capabilities['runs'] = False: it executes nothing")
  from tinycore.runtime.device import Device
  dev = target.open()
  Device.DEFAULT = target.name
  return dev

def case_properties(item) -> list[tuple[str, str]]:
  """op, dtype and shape of a test, from its parameters (named op, dtype, case) or its covers(...) marker."""
  params = getattr(getattr(item, "callspec", None), "params", {})
  props = []
  if "uop_case" in params:   # (op, dtype, cast target)
    op, dt, to = params["uop_case"]
    what = op.name + (f" -> {dtype_name(to)}" if to is not None else "")
    props += [("op", f"definition of {what}" if item.originalname == "test_definition_matches_reference" else what), ("dtype", dtype_name(dt))]
    return props
  if "swept" in params or "fused" in params:   # (name, dtype)
    name, dt = params.get("swept") or params["fused"]
    return [("op", name), ("dtype", dtype_name(dt))]
  if "op" in params: props.append(("op", getattr(params["op"], "name", str(params["op"]))))
  elif "src" in params: props.append(("op", f"{item.originalname.removeprefix('test_')} from {dtype_name(params['src'])}"))
  elif (m := item.get_closest_marker("covers")) is not None: props.append(("op", m.args[0]))
  else: props.append(("op", item.originalname))
  if "edge_dtype" in params: props.append(("dtype", dtype_name(params["edge_dtype"])))
  if "dtype" in params and params["dtype"] is not None: props.append(("dtype", dtype_name(params["dtype"]) if not isinstance(params["dtype"], str) else params["dtype"]))
  if "case" in params: props.append(("shape", params["case"].describe() if hasattr(params["case"], "describe") else str(params["case"])))
  elif "dtype" not in params and params: props.append(("shape", item.callspec.id))
  return props

def pytest_collection_modifyitems(config, items) -> None:
  for item in items:
    if HERE in Path(str(item.path)).parents: item.user_properties.extend(case_properties(item))
