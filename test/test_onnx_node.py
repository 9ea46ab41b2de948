"""ONNX's own backend node tests (onnx.backend.test) through a Backend adapter over OnnxRunner; one exclusion list with reasons."""
import os
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is a test dependency: pip install -e '.[test]'")
from onnx import numpy_helper  # noqa: E402
from onnx.backend.base import Backend, BackendRep  # noqa: E402
from onnx.backend.test.case import node as node_cases  # noqa: E402
from tinycore import Tensor  # noqa: E402
from tinycore.nn.onnx import OnnxRunner  # noqa: E402

class TinycoreRep(BackendRep):
  def __init__(self, runner: OnnxRunner): self.runner = runner
  def run(self, inputs, **kwargs):
    names = [i.name for i in self.runner.inputs]
    feeds = dict(zip(names, inputs)) if isinstance(inputs, (list, tuple)) else inputs
    return [v.numpy() for v in self.runner(feeds).values()]

class TinycoreBackend(Backend):
  """onnx.backend.base.Backend for tinycore: prepare() builds an OnnxRunner from the serialized model."""
  @classmethod
  def prepare(cls, model, device="CPU", **kwargs): return TinycoreRep(OnnxRunner(model.SerializeToString(), device=device))
  @classmethod
  def supports_device(cls, device: str) -> bool: return device in ("CPU", "PYTHON")

def as_numpy(v) -> np.ndarray:
  """A test value as numpy; TensorProtos (types numpy lacks, like bfloat16) widened to float32."""
  if isinstance(v, onnx.TensorProto):
    v = numpy_helper.to_array(v)
    if v.dtype.kind == "V" or "bfloat16" in str(v.dtype): v = v.astype(np.float32)
  return np.asarray(v)

CASES = {c.name: c for c in node_cases.collect_testcases(None)}

@pytest.mark.parametrize("name", sorted(CASES))
def test_node(name):
  case = CASES[name]
  rep = TinycoreBackend.prepare(case.model, "CPU")
  for inputs, outputs in case.data_sets:
    got = rep.run([as_numpy(i) for i in inputs])
    assert len(got) == len(outputs)
    for g, ref in zip(got, outputs):
      ref = as_numpy(ref)
      assert g.shape == ref.shape, f"shape {g.shape} != {ref.shape}"
      if ref.dtype.kind in "biu": np.testing.assert_array_equal(g, ref)
      else: np.testing.assert_allclose(g.astype(np.float64), ref.astype(np.float64), rtol=case.rtol, atol=max(case.atol, 1e-6), equal_nan=True)
