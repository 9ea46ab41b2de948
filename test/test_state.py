"""tinycore.nn.state: state-dict naming, strict loading, safetensors round trips against the `safetensors` package, torch files."""
import json
from typing import NamedTuple
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from tinycore import Tensor, dtypes, nn
from tinycore.nn.state import get_parameters, get_state_dict, load_state_dict, safetensors_load, safetensors_save, torch_load

class Pair(NamedTuple):
  a: Tensor
  b: Tensor

class Block:
  def __init__(self):
    self.conv = nn.Conv2d(1, 2, 3)
    self.norms = [nn.BatchNorm(2), nn.LayerNorm(4)]
    self.heads = {"cls": nn.Linear(4, 3, bias=False)}
    self.pair = Pair(Tensor([1.0]), Tensor([2.0]))
    self.act = Tensor.relu  # functions and other values are not state

def test_state_dict_names_follow_attributes_lists_dicts_and_namedtuples():
  names = sorted(get_state_dict(Block()))
  assert names == ["conv.bias", "conv.weight", "heads.cls.weight", "norms.0.bias", "norms.0.num_batches_tracked", "norms.0.running_mean",
                   "norms.0.running_var", "norms.0.weight", "norms.1.bias", "norms.1.weight", "pair.a", "pair.b"]
  assert list(get_state_dict(nn.Linear(2, 2), prefix="fc.")) == ["fc.weight", "fc.bias"]

def test_tied_weights_cycles_and_parameters():
  class Tied:
    def __init__(self):
      self.emb = nn.Embedding(5, 4)
      self.out = nn.Linear(4, 5, bias=False)
      self.out.weight = self.emb.weight
      self.me = self  # a cycle is walked once
  t = Tied()
  sd = get_state_dict(t)
  assert sorted(sd) == ["emb.weight", "out.weight"] and sd["emb.weight"] is sd["out.weight"]
  params = get_parameters(t)
  assert len(params) == 1 and params[0] is t.emb.weight

def test_load_state_dict_writes_in_place_and_casts():
  lin = nn.Linear(3, 2)
  Tensor.realize_all(lin.weight, lin.bias)
  buf = lin.weight.uop.base
  w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7, 8], np.int32)
  load_state_dict(lin, {"weight": Tensor(w), "bias": Tensor(b)})
  assert lin.weight.uop.base is buf  # the same buffer: an optimizer or a TinyJit holding it sees the new values
  np.testing.assert_array_equal(lin.weight.numpy(), w)
  assert lin.bias.dtype == dtypes.float32 and lin.bias.numpy().tolist() == [7.0, 8.0]

def test_load_state_dict_strict_lists_every_problem():
  lin = nn.Linear(3, 2)
  sd = {"weight": Tensor.zeros(2, 4), "extra": Tensor.zeros(1), "other": Tensor.zeros(1)}
  with pytest.raises(RuntimeError) as e: load_state_dict(lin, sd)
  msg = str(e.value)
  assert "missing keys (1): ['bias']" in msg and "unexpected keys (2): ['extra', 'other']" in msg
  assert "weight: model (2, 3) vs state_dict (2, 4)" in msg
  with pytest.raises(RuntimeError, match="shape mismatches"): load_state_dict(lin, sd, strict=False)  # shapes are never skipped
  before = lin.bias.numpy()
  load_state_dict(lin, {"weight": Tensor.ones(2, 3), "extra": Tensor.zeros(1)}, strict=False)
  np.testing.assert_array_equal(lin.weight.numpy(), np.ones((2, 3)))
  np.testing.assert_array_equal(lin.bias.numpy(), before)

def test_load_state_dict_consume():
  lin = nn.Linear(2, 2)
  sd = {"weight": Tensor.ones(2, 2), "bias": Tensor.zeros(2)}
  load_state_dict(lin, sd, consume=True)
  assert sd == {}

def test_safetensors_round_trip_through_the_reference_package(tmp_path):
  model = Block()
  sd = get_state_dict(model)
  safetensors_save(sd, tmp_path / "ours.safetensors", metadata={"note": "hi"})
  ref = load_file(tmp_path / "ours.safetensors")  # the reference reader
  assert sorted(ref) == sorted(sd)
  for k, t in sd.items(): np.testing.assert_array_equal(ref[k], t.numpy(), err_msg=k)
  assert ref["norms.0.num_batches_tracked"].dtype == np.int32
  # the reference writer, our reader, loaded into a fresh model
  save_file({k: (v * 2 if v.dtype.kind == "f" else v) for k, v in ref.items()}, tmp_path / "ref.safetensors")
  fresh = Block()
  load_state_dict(fresh, safetensors_load(tmp_path / "ref.safetensors"))
  for k, t in get_state_dict(fresh).items(): np.testing.assert_array_equal(t.numpy(), ref[k] * 2 if ref[k].dtype.kind == "f" else ref[k], err_msg=k)

def test_safetensors_keeps_dtypes_and_bfloat16_bits(tmp_path):
  bits = np.array([0x3F80, 0xC040, 0x7F80, 0x0001], np.uint16)  # 1.0, -3.0, inf, the smallest subnormal
  tensors = {"i8": Tensor(np.array([-3, 4], np.int8)), "u8": Tensor(np.array([1, 255], np.uint8)), "b": Tensor([True, False]),
             "bf": Tensor(bits).bitcast(dtypes.bfloat16)}
  safetensors_save(tensors, tmp_path / "d.safetensors")
  loaded = safetensors_load(tmp_path / "d.safetensors")
  assert {k: t.dtype for k, t in loaded.items()} == {"i8": dtypes.int8, "u8": dtypes.uint8, "b": dtypes.bool, "bf": dtypes.bfloat16}
  np.testing.assert_array_equal(loaded["bf"].bitcast(dtypes.uint16).numpy(), bits)
  np.testing.assert_array_equal(loaded["bf"].numpy(), [1.0, -3.0, np.inf, 2.0 ** -133])
  data = (tmp_path / "d.safetensors").read_bytes()
  header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
  assert header["bf"]["dtype"] == "BF16" and header["i8"]["dtype"] == "I8" and header["b"]["dtype"] == "BOOL"

def test_safetensors_save_refuses_non_tensors(tmp_path):
  with pytest.raises(TypeError, match="not Tensors"): safetensors_save({"x": np.zeros(2)}, tmp_path / "x.safetensors")

@pytest.mark.parametrize("data,message", [
  (b"", "shorter than the 8-byte header"), ((100).to_bytes(8, "little") + b"{}", "larger than the"),
  ((2).to_bytes(8, "little") + b"{]", "not valid JSON"),
  ((58).to_bytes(8, "little") + b'{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}    ' + b"\x00" * 4, "run past"),
  ((58).to_bytes(8, "little") + b'{"x":{"dtype":"Q32","shape":[2],"data_offsets":[0,8]}}    ' + b"\x00" * 8, "unknown dtype")])
def test_malformed_safetensors_raise_clear_errors(tmp_path, data, message):
  path = tmp_path / "bad.safetensors"
  path.write_bytes(data)
  with pytest.raises(ValueError, match=message): safetensors_load(path)

def test_truncated_checkpoint_is_refused(tmp_path):
  safetensors_save(get_state_dict(nn.Linear(4, 4)), tmp_path / "ok.safetensors")
  data = (tmp_path / "ok.safetensors").read_bytes()
  (tmp_path / "cut.safetensors").write_bytes(data[:-5])
  with pytest.raises(ValueError, match="malformed safetensors"): safetensors_load(tmp_path / "cut.safetensors")

def test_torch_load_reads_a_pytorch_state_dict(tmp_path):
  torch = pytest.importorskip("torch")
  tm = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
  with torch.no_grad(): tm[1].running_mean.add_(0.5)
  torch.save({"model": tm.state_dict(), "epoch": 3}, tmp_path / "ckpt.pth")
  ours = [nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)]
  load_state_dict(ours, torch_load(tmp_path / "ckpt.pth"))  # int64 num_batches_tracked is cast to the model's dtype
  for k, v in tm.state_dict().items(): np.testing.assert_array_equal(get_state_dict(ours)[k].numpy(), v.numpy(), err_msg=k)
  for legacy in (False, True):   # tinygrad's form: the file's bytes as a uint8 Tensor, the zip and the legacy format
    torch.save(tm.state_dict(), tmp_path / "sd.pth", _use_new_zipfile_serialization=not legacy)
    got = torch_load(Tensor((tmp_path / "sd.pth").read_bytes()))
    for k, v in tm.state_dict().items(): np.testing.assert_array_equal(got[k].numpy(), v.numpy(), err_msg=k)
