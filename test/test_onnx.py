"""OnnxRunner's own behaviour: model sources (path, bytes, file, external data), input checks, errors naming node/op/opset, the CLI."""
import io
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is a test dependency: pip install -e '.[test]'")
from onnx import helper, numpy_helper, TensorProto  # noqa: E402
from tinycore.nn.onnx import OnnxRunner, OnnxError, main  # noqa: E402

def _model(op="Add", opset=17, init=None, **attrs) -> onnx.ModelProto:
  w = init if init is not None else np.arange(6, dtype=np.float32).reshape(2, 3)
  g = helper.make_graph([helper.make_node(op, ["x", "w"], ["y"], name="the_node", **attrs)], "g",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

X = np.ones((2, 3), np.float32)

def test_bytes_path_and_file_object(tmp_path):
  m = _model()
  p = tmp_path / "m.onnx"
  onnx.save(m, p)
  for src in (m.SerializeToString(), str(p), open(p, "rb")):
    np.testing.assert_equal(OnnxRunner(src)({"x": X})["y"].numpy(), X + np.arange(6).reshape(2, 3))

def test_external_data(tmp_path):
  m = _model(init=np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32))
  w = numpy_helper.to_array(m.graph.initializer[0])
  onnx.save(m, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
  assert (tmp_path / "w.bin").exists()
  np.testing.assert_allclose(OnnxRunner(str(tmp_path / "m.onnx"))({"x": X})["y"].numpy(), X + w)

def test_named_dimension_takes_any_size():
  run = OnnxRunner(_model(init=np.ones((1, 3), np.float32)).SerializeToString())
  for b in (1, 4, 7): assert run({"x": np.zeros((b, 3), np.float32)})["y"].shape == (b, 3)

def test_unsupported_op_names_node_op_and_opset():
  with pytest.raises(OnnxError, match=r"node 'the_node' \(op NoSuchOp, opset 17\).*not supported"):
    OnnxRunner(_model("NoSuchOp").SerializeToString())({"x": X})

def test_unknown_attribute_is_an_error():
  with pytest.raises(OnnxError, match=r"op Add.*attribute.*'bogus'"):
    OnnxRunner(_model(bogus=1).SerializeToString())({"x": X})

def test_input_errors():
  run = OnnxRunner(_model().SerializeToString())
  with pytest.raises(OnnxError, match="missing inputs"): run({})
  with pytest.raises(OnnxError, match="unknown inputs"): run({"x": X, "z": X})
  with pytest.raises(OnnxError, match="dim 1 must be 3"): run({"x": np.ones((2, 4), np.float32)})

def test_opset_newer_than_known_is_refused():
  with pytest.raises(OnnxError, match="opset 99"): OnnxRunner(_model(opset=99).SerializeToString())

def test_not_a_model():
  with pytest.raises((OnnxError, TypeError)): OnnxRunner(b"\xff\xff\xff")
  with pytest.raises(TypeError, match="path, bytes or a file object"): OnnxRunner(12)

def test_cli(tmp_path, capsys):
  onnx.save(_model(), tmp_path / "m.onnx")
  np.savez(tmp_path / "x.npz", x=X)
  assert main([str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "x.npz"), "--bench"]) == 0
  out = capsys.readouterr().out
  assert "y: float32[2, 3]" in out and "time per run" in out
