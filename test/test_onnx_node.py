"""ONNX's own backend node tests (onnx.backend.test) through a Backend adapter over OnnxRunner; one exclusion list with reasons."""
import os, re
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
    return [_to_numpy(v) for v in self.runner(feeds).values()]

def _to_numpy(v):
  """An output as numpy: a sequence (list) element by element, an empty optional (None) as None."""
  return None if v is None else [_to_numpy(x) for x in v] if isinstance(v, list) else v.numpy()

class TinycoreBackend(Backend):
  """onnx.backend.base.Backend for tinycore: prepare() builds an OnnxRunner from the serialized model."""
  @classmethod
  def prepare(cls, model, device="CPU", **kwargs): return TinycoreRep(OnnxRunner(model.SerializeToString(), device=device))
  @classmethod
  def supports_device(cls, device: str) -> bool: return device in ("CPU", "PYTHON")

def as_numpy(v):
  """A test value as numpy; TensorProtos (types numpy lacks, like bfloat16) widened to float32; sequences as lists, None kept."""
  if v is None or isinstance(v, list): return v if v is None else [as_numpy(x) for x in v]
  if isinstance(v, onnx.TensorProto):
    v = numpy_helper.to_array(v)
    if v.dtype.kind == "V" or "bfloat16" in str(v.dtype): v = v.astype(np.float32)
  return np.asarray(v)

CASES = {c.name: c for c in node_cases.collect_testcases(None)}

# The one exclusion list: tests outside what tinycore can represent (skipped, each with its reason).
EXCLUDED = {
  r"string|regex_full_match|strnorm|tfidf|label_encoder": "strings: tinycore has no string dtype",
  r"bernoulli|training_dropout_(default|mask|$)|training_dropout$": "random sampling: the expected values come from numpy's generator",
  r"image_decoder": "image codecs (JPEG, PNG, ...) are out of scope",
  r"ai_onnx_ml|adagrad|adam|momentum|^test_flexattention(?!.*expanded)": "ops of other domains (ai.onnx.ml, ai.onnx.preview[.training])",
}
# Known failures (strict xfail, so a fix shows up as XPASS and must be moved out of here).
KNOWN_FAILURES = {
  r"affine_grid(?!.*expanded)|gridsample|deform_conv|col2im|test_dft|test_stft|melweightmatrix|nonmaxsuppression|roialign|"
  r"antialias|blocked": "attribute not implemented yet (Resize antialias, blocked quantization)",
  r"attention_.*bf16|attention_4d_fp16|attention_4d_gqa_with_past_and_present_fp16|celu_bfloat16":
    "half precision: rounds differently from the reference",
}
def reason(table: dict, name: str) -> str | None: return next((why for pat, why in table.items() if re.search(pat, name)), None)

# The default run takes the first test of every op (about 200, a minute or two); ONNX_NODE_TESTS=all runs the whole suite
# (tools/dev.py does, as its own step).
def _one_per_op() -> list[str]:
  seen, out = set(), []
  for n in sorted(CASES):
    op = CASES[n].model.graph.node[0].op_type if CASES[n].model.graph.node else n
    if op not in seen and reason(EXCLUDED, n) is None and reason(KNOWN_FAILURES, n) is None: seen.add(op); out.append(n)
  return out
SELECTED = sorted(CASES) if os.environ.get("ONNX_NODE_TESTS") == "all" else _one_per_op()

def _param(n: str):
  if why := reason(EXCLUDED, n): return pytest.param(n, marks=pytest.mark.skip(reason=f"excluded: {why}"))
  if why := reason(KNOWN_FAILURES, n): return pytest.param(n, marks=pytest.mark.xfail(reason=why, strict=True))
  return n

def test_exclusions_stay_under_a_tenth_of_the_suite():  # issue 22's acceptance
  n = sum(reason(EXCLUDED, c) is not None for c in CASES)
  assert n < 0.1 * len(CASES), f"{n} of {len(CASES)} node tests excluded"

def test_known_failures_stay_under_a_twentieth_of_the_rest():  # issue 22: >= 95% of the non-excluded tests pass (strict xfails keep this true)
  kept = [c for c in CASES if reason(EXCLUDED, c) is None]
  n = sum(reason(KNOWN_FAILURES, c) is not None for c in kept)
  assert n <= 0.05 * len(kept), f"{n} of {len(kept)} non-excluded node tests are known failures"

@pytest.mark.parametrize("name", [_param(n) for n in SELECTED])
def test_node(name):
  case = CASES[name]
  rep = TinycoreBackend.prepare(case.model, "CPU")
  for inputs, outputs in case.data_sets:
    got = rep.run([as_numpy(i) for i in inputs])
    assert len(got) == len(outputs)
    for g, ref in zip(got, outputs): _check(g, as_numpy(ref), case)

def _check(g, ref, case) -> None:
  """One output against the reference: sequences element by element, empty optionals as None, integers exactly."""
  if ref is None or isinstance(ref, list):
    assert (g is None) == (ref is None) and isinstance(g, list) == isinstance(ref, list), f"got {type(g).__name__}, expected {type(ref).__name__}"
    if ref is not None:
      assert len(g) == len(ref), f"sequence of {len(g)} tensors, expected {len(ref)}"
      for x, r in zip(g, ref): _check(x, r, case)
    return
  assert g.shape == ref.shape, f"shape {g.shape} != {ref.shape}"
  if ref.dtype.kind in "biu": np.testing.assert_array_equal(g, ref)
  else: np.testing.assert_allclose(g.astype(np.float64), ref.astype(np.float64), rtol=case.rtol, atol=max(case.atol, 1e-6), equal_nan=True)

# the PYTHON device (the UOp interpreter) runs a few cheap ops, so the importer is checked on a second, independent backend
PYTHON_SUBSET = ["test_add_bcast", "test_relu", "test_gemm_default_no_bias", "test_softmax_axis_1", "test_gather_0",
                 "test_reduce_sum_keepdims_example", "test_transpose_default", "test_where_example", "test_cumsum_1d", "test_slice"]

@pytest.mark.parametrize("name", PYTHON_SUBSET)
def test_node_on_python(name):
  case = CASES[name]
  rep = TinycoreBackend.prepare(case.model, "PYTHON")
  for inputs, outputs in case.data_sets:
    for g, ref in zip(rep.run([as_numpy(i) for i in inputs]), outputs):
      np.testing.assert_allclose(g.astype(np.float64), as_numpy(ref).astype(np.float64), rtol=case.rtol, atol=max(case.atol, 1e-6))
