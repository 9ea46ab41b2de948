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

def _two_outputs() -> bytes:
  g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("Identity", ["x"], ["z"])], "g",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                        [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

def test_repeated_calls_replay_without_rebuilding():
  run = OnnxRunner(_two_outputs())
  builds = []
  run._run = (lambda orig: lambda *a: builds.append(1) or orig(*a))(run._run)
  outs = [run({"x": np.full((2, 3), i, np.float32)}) for i in range(5)]
  assert len(builds) == 2  # a plain call, the captured call; the other three replay the kernels
  for i, o in enumerate(outs):  # each call's outputs are its own (a replay does not overwrite earlier results), inputs included
    np.testing.assert_equal(o["y"].numpy(), np.full((2, 3), i + 1, np.float32))
    np.testing.assert_equal(o["z"].numpy(), np.full((2, 3), i, np.float32))

def test_a_graph_that_reads_input_data_is_rebuilt_every_call():
  g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]), helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
  run = OnnxRunner(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
  for s in ([2, 3], [3, 2], [6, 1], [1, 6]):  # same input shapes, but the output shape comes from s's values
    np.testing.assert_equal(run({"x": np.arange(6, dtype=np.float32), "s": np.array(s)})["y"].numpy(), np.arange(6).reshape(s))
  assert run.reads_data and not run.jits

def _shape_math_model() -> bytes:
  """y = Reshape(x, [Shape(x)[0], -1]) * 2 and r = Range(0, Shape(x)[0], 1): shape arithmetic on a named dimension."""
  i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
  nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
           helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]), helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
           helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("Mul", ["flat", "two"], ["y"]),
           helper.make_node("Range", ["zero", "n", "one"], ["r"])]
  g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("r", TensorProto.INT64, None)],
                        [i64("zero", 0), i64("one", 1), i64("axes", [0]), i64("minus1", [-1]), numpy_helper.from_array(np.array(2, np.float32), "two")])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

def test_named_dimension_compiles_once_through_shape_arithmetic():
  from tinycore import engine
  run = OnnxRunner(_shape_math_model())
  compiled = []
  for b in (1, 3, 7, 2):
    x = np.arange(b * 6, dtype=np.float32).reshape(b, 2, 3)
    before = engine.stats["loaded"]
    out = run({"x": x})
    assert out["y"].shape == (b, 6) and out["r"].shape == (b,)  # this call's sizes, as plain ints
    np.testing.assert_equal(out["y"].numpy(), x.reshape(b, 6) * 2)
    np.testing.assert_equal(out["r"].numpy(), np.arange(b))
    compiled.append(engine.stats["loaded"] - before)
  assert compiled[0] > 0 and compiled[1:] == [0, 0, 0], compiled
  assert run.symbolic and not run.reads_data and len(run.jits) == 1

def test_named_dimension_above_max_dim_is_an_error(monkeypatch):
  run = OnnxRunner(_shape_math_model(), max_dim=4)
  np.testing.assert_equal(run({"x": np.ones((4, 2, 3), np.float32)})["r"].numpy(), np.arange(4))
  with pytest.raises(OnnxError, match=r"'batch'\) is 5, above max_dim=4.*ONNX_MAX_DIM"): run({"x": np.ones((5, 2, 3), np.float32)})
  monkeypatch.setenv("ONNX_MAX_DIM", "6")
  assert OnnxRunner(_shape_math_model()).max_dim == 6

def test_named_dimension_that_cannot_stay_symbolic_falls_back():
  # the weight fixes the "batch" to 2: no Variable can broadcast against it, so each size is built on its own (with a warning)
  run = OnnxRunner(_model().SerializeToString())
  with pytest.warns(UserWarning, match="named dimensions \\(batch\\) cannot stay symbolic"): y = run({"x": X})["y"]
  np.testing.assert_equal(y.numpy(), X + np.arange(6).reshape(2, 3))
  assert not run.symbolic
  with pytest.raises(OnnxError, match="op Add"): run({"x": np.ones((4, 3), np.float32)})  # the model's own error, at a fixed size
