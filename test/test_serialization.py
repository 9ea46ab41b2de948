"""Tests of tinycore.nn.serialization: safetensors against the reference package, torch checkpoints without torch."""
import collections, io, json, os, pickle, sys, types, zipfile
import numpy as np
import pytest
import safetensors.numpy
from tinycore.nn.serialization import (bfloat16_to_float32, float32_to_bfloat16, is_bfloat16, safetensors_load_arrays,
                                       safetensors_metadata, safetensors_save_arrays, torch_load, torch_load_arrays)

NUMPY_DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
                np.float16, np.float32, np.float64]

def sample(dtype, shape=(3, 5), seed=0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if dtype == np.bool_: return np.asarray(rng.random(shape) < 0.5)
  if np.issubdtype(dtype, np.integer):
    info = np.iinfo(dtype)
    return np.asarray(rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True))
  return np.asarray(rng.standard_normal(shape) * 100, dtype=dtype)

def assert_same(a, b):
  assert a.dtype == b.dtype and a.shape == b.shape
  np.testing.assert_array_equal(a, b)

# ---------------------------------------------------------------------------------------------------- safetensors

@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_reference_writer_to_our_reader(tmp_path, dtype):
  arrays = {"m": sample(dtype), "v": sample(dtype, (7,), 1), "s": sample(dtype, (), 2), "e": sample(dtype, (0, 4))}
  safetensors.numpy.save_file(arrays, tmp_path / "ref.safetensors", metadata={"format": "np"})
  for src in (tmp_path / "ref.safetensors", str(tmp_path / "ref.safetensors"), (tmp_path / "ref.safetensors").read_bytes()):
    loaded = safetensors_load_arrays(src)
    assert loaded.keys() == arrays.keys()
    for name in arrays: assert_same(loaded[name], arrays[name])
    assert safetensors_metadata(src) == {"format": "np"}

@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_our_writer_to_reference_reader(tmp_path, dtype):
  arrays = {"m": sample(dtype), "t": sample(dtype, (4, 6)).T, "s": sample(dtype, (), 2), "e": sample(dtype, (2, 0))}
  safetensors_save_arrays(tmp_path / "ours.safetensors", arrays, metadata={"step": "7"})
  loaded = safetensors.numpy.load_file(tmp_path / "ours.safetensors")
  for name in arrays: assert_same(loaded[name], arrays[name])
  with safetensors.safe_open(tmp_path / "ours.safetensors", framework="np") as f: assert f.metadata() == {"step": "7"}

def test_mixed_dtypes_are_aligned_and_padded(tmp_path):
  arrays = {"a": np.ones(3, np.uint8), "b": np.ones(3, np.float64), "c": np.ones(1, np.int16), "d": np.ones(5, np.float32)}
  safetensors_save_arrays(tmp_path / "x.safetensors", arrays)
  raw = (tmp_path / "x.safetensors").read_bytes()
  n = int.from_bytes(raw[:8], "little")
  assert n % 8 == 0 and raw[8:8 + n].decode().endswith(("}", " "))
  for info in json.loads(raw[8:8 + n]).values():
    assert info["data_offsets"][0] % np.dtype({"U8": "u1", "F64": "f8", "I16": "i2", "F32": "f4"}[info["dtype"]]).itemsize == 0
  for name, a in safetensors_load_arrays(tmp_path / "x.safetensors").items(): assert_same(a, arrays[name])
  assert sorted(p.name for p in tmp_path.iterdir()) == ["x.safetensors"]  # the temporary file is gone

def test_load_is_zero_copy_and_read_only(tmp_path):
  buf = safetensors.numpy.save({"w": np.arange(12, dtype=np.float32).reshape(3, 4)})
  w = safetensors_load_arrays(buf)["w"]
  assert np.shares_memory(w, np.frombuffer(buf, np.uint8)) and not w.flags.writeable
  (tmp_path / "w.safetensors").write_bytes(buf)
  w = safetensors_load_arrays(tmp_path / "w.safetensors")["w"]
  assert isinstance(w.base, np.ndarray) and not w.flags.writeable and type(w) is np.ndarray

def test_bfloat16_round_trips_as_tagged_bits(tmp_path):
  torch = pytest.importorskip("torch")
  import safetensors.torch
  values = torch.tensor([[1.0, -2.5, 3.14159, 1e-3], [65504.0, -0.0, float("inf"), 1e30]], dtype=torch.bfloat16)
  safetensors.torch.save_file({"bf": values}, tmp_path / "ref.safetensors")
  bits = safetensors_load_arrays(tmp_path / "ref.safetensors")["bf"]
  assert is_bfloat16(bits) and bits.dtype == np.uint16 and bits.shape == (2, 4)
  np.testing.assert_array_equal(bfloat16_to_float32(bits), values.float().numpy())
  safetensors_save_arrays(tmp_path / "ours.safetensors", {"bf": bits, "plain": bits.view(np.uint16)})
  back = safetensors.torch.load_file(tmp_path / "ours.safetensors")
  assert back["bf"].dtype == torch.bfloat16 and torch.equal(back["bf"], values)
  assert back["plain"].dtype == torch.uint16  # untagged uint16 bits stay U16

def test_float32_to_bfloat16_rounds_like_torch():
  torch = pytest.importorskip("torch")
  x = np.concatenate([np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3,
                      np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-40, 1.00390625, 1.01171875], np.float32)])
  ours = float32_to_bfloat16(x)
  assert is_bfloat16(ours)
  np.testing.assert_array_equal(ours.view(np.int16), torch.from_numpy(x).bfloat16().view(torch.int16).numpy())
  assert np.isnan(bfloat16_to_float32(float32_to_bfloat16(np.array([np.nan], np.float32)))).all()

def test_save_rejects_what_safetensors_cannot_hold(tmp_path):
  with pytest.raises(ValueError, match="complex"): safetensors_save_arrays(tmp_path / "x", {"c": np.ones(2, np.complex64)})
  with pytest.raises(ValueError, match="name"): safetensors_save_arrays(tmp_path / "x", {"__metadata__": np.ones(2)})
  with pytest.raises(ValueError, match="metadata"): safetensors_save_arrays(tmp_path / "x", {"a": np.ones(2)}, {"k": 1})
  assert list(tmp_path.iterdir()) == []

def st_bytes(header, data: bytes = b"", length: int | None = None) -> bytes:
  text = header if isinstance(header, bytes) else json.dumps(header).encode()
  return (len(text) if length is None else length).to_bytes(8, "little") + text + data

F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
MALFORMED = {
  "empty": (b"", "shorter than the 8-byte"),
  "short": (b"\x10\x00\x00", "shorter than the 8-byte"),
  "header length past end": (st_bytes({"a": F32x2}, bytes(8), length=10_000), "larger than the"),
  "huge header length": (st_bytes({}, length=2**64 - 1), "larger than the"),
  "truncated data": (st_bytes({"a": F32x2}, bytes(5)), "run past"),
  "trailing data": (st_bytes({"a": F32x2}, bytes(12)), "cover 8 bytes but the data buffer holds 12"),
  "bad json": (st_bytes(b'{"a": {"dtype": "F32",'), "not valid JSON"),
  "not utf-8": (st_bytes(b'{"\xff": 1}'), "not valid JSON"),
  "not an object": (st_bytes([1, 2]), "not a JSON object"),
  "duplicate key": (st_bytes(b'{"a": %s, "a": %s}' % ((json.dumps(F32x2).encode(),) * 2), bytes(8)), "duplicate"),
  "unknown dtype": (st_bytes({"a": {**F32x2, "dtype": "F8_E4M3"}}, bytes(8)), "unknown dtype 'F8_E4M3'"),
  "missing field": (st_bytes({"a": {"dtype": "F32", "shape": [2]}}, bytes(8)), "needs dtype, shape and data_offsets"),
  "negative dim": (st_bytes({"a": {**F32x2, "shape": [-2]}}, bytes(8)), "invalid shape"),
  "float dim": (st_bytes({"a": {**F32x2, "shape": [2.0]}}, bytes(8)), "invalid shape"),
  "reversed offsets": (st_bytes({"a": {**F32x2, "data_offsets": [8, 0]}}, bytes(8)), "invalid data_offsets"),
  "offsets out of bounds": (st_bytes({"a": {**F32x2, "data_offsets": [2**40, 2**40 + 8]}}, bytes(8)), "run past"),
  "wrong size": (st_bytes({"a": {**F32x2, "shape": [3]}}, bytes(8)), "12 bytes but its offsets span 8"),
  "overlap": (st_bytes({"a": F32x2, "b": {**F32x2, "data_offsets": [4, 12]}}, bytes(12)), "overlaps"),
  "gap": (st_bytes({"a": F32x2, "b": {**F32x2, "data_offsets": [12, 20]}}, bytes(20)), "gap"),
  "bad metadata": (st_bytes({"__metadata__": {"k": 3}}), "__metadata__"),
  "bool byte not 0/1": (st_bytes({"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x02"), "other than 0 and 1"),
}

@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_safetensors_raise_value_error(tmp_path, case):
  raw, message = MALFORMED[case]
  (tmp_path / "bad.safetensors").write_bytes(raw)
  for src in (raw, tmp_path / "bad.safetensors"):
    with pytest.raises(ValueError, match=message): safetensors_load_arrays(src)
    with pytest.raises(ValueError, match=message): safetensors_metadata(src)

def test_every_truncation_of_a_real_file_is_refused():
  raw = safetensors.numpy.save({"a": sample(np.float32), "b": sample(np.int64, (4,))})
  assert safetensors_load_arrays(raw)
  for cut in range(len(raw)):
    with pytest.raises(ValueError): safetensors_load_arrays(raw[:cut])

# ---------------------------------------------------------------------------------------------------- torch checkpoints

def torch_bits(t) -> np.ndarray:
  """What torch_load returns for tensor `t`: its values, bfloat16 as uint16 bits."""
  import torch
  return t.view(torch.uint16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()

def test_torch_checkpoint_every_dtype(tmp_path):
  torch = pytest.importorskip("torch")
  sd = {np.dtype(d).name: torch.from_numpy(sample(d, (2, 3))) for d in NUMPY_DTYPES}
  sd["bfloat16"] = torch.randn(4, 3).bfloat16()
  sd["scalar"] = torch.tensor(7, dtype=torch.int64)
  sd["empty"] = torch.zeros(0, 5)
  for legacy in (False, True):
    torch.save(sd, tmp_path / "ckpt.pth", _use_new_zipfile_serialization=not legacy)
    loaded = torch_load_arrays(tmp_path / "ckpt.pth")
    assert loaded.keys() == sd.keys()
    for name, t in sd.items(): assert_same(loaded[name], torch_bits(t))
    assert is_bfloat16(loaded["bfloat16"]) and not is_bfloat16(loaded["uint16"])

def test_torch_views_strides_and_shared_storage(tmp_path):
  torch = pytest.importorskip("torch")
  base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
  sd = {"transposed": base.t(), "sliced": base[1:5, 2:9:3], "row": base[3], "base": base,
        "half_strided": torch.randn(8, 8).half()[::2, 1::3], "expanded": torch.ones(3, 1).expand(3, 4),
        "bf16_t": torch.randn(5, 3).bfloat16().t(), "i64_col": torch.arange(20).reshape(4, 5)[:, 2]}
  for legacy in (False, True):
    torch.save(sd, tmp_path / "views.pth", _use_new_zipfile_serialization=not legacy)
    loaded = torch_load_arrays(tmp_path / "views.pth")
    for name, t in sd.items():
      assert_same(loaded[name], np.ascontiguousarray(torch_bits(t.contiguous())))
      assert loaded[name].flags.c_contiguous and loaded[name].flags.writeable
    loaded["base"][0, 0] = -1  # views of one storage become independent arrays
    assert loaded["transposed"][0, 0] == 0

def test_torch_module_state_dict_and_training_checkpoint(tmp_path):
  torch = pytest.importorskip("torch")
  model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.Linear(4, 2))
  opt = torch.optim.Adam(model.parameters())
  model(torch.randn(2, 1, 3, 3)).sum().backward()
  opt.step()
  sd = model.state_dict()
  torch.save({"epoch": 3, "model": sd, "optimizer": opt.state_dict(), "note": "x"}, tmp_path / "train.pth")
  loaded = torch_load_arrays(tmp_path / "train.pth")
  assert loaded.keys() == sd.keys()
  for name, t in sd.items(): assert_same(loaded[name], t.numpy())
  raw = torch_load(tmp_path / "train.pth")
  assert raw["epoch"] == 3 and raw["note"] == "x" and isinstance(raw["optimizer"]["state"][0]["exp_avg"], np.ndarray)
  torch.save({"encoder": {"w": torch.ones(2)}, "head": [torch.zeros(1), torch.ones(1)]}, tmp_path / "nested.pth")
  assert sorted(torch_load_arrays(tmp_path / "nested.pth")) == ["encoder.w", "head.0", "head.1"]

def test_torch_parameter_and_new_unsigned_dtypes(tmp_path):
  torch = pytest.importorskip("torch")
  torch.save(torch.nn.Parameter(torch.arange(4.0)), tmp_path / "p.pth")
  assert_same(torch_load(tmp_path / "p.pth"), np.arange(4, dtype=np.float32))
  sd = {np.dtype(d).name: torch.from_numpy(sample(d, (3, 2))).t() for d in (np.uint16, np.uint32, np.uint64)}  # via _rebuild_tensor_v3
  torch.save(sd, tmp_path / "u.pth")
  for d, t in sd.items(): assert_same(torch_load_arrays(tmp_path / "u.pth")[d], np.ascontiguousarray(t.numpy()))

def test_torch_refuses_pickled_module(tmp_path):
  torch = pytest.importorskip("torch")
  torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pth")
  with pytest.raises(ValueError, match="refusing to unpickle global torch.nn.modules.linear.Linear"): torch_load(tmp_path / "module.pth")

def write_pth(path, pickled: bytes, storages: dict[str, bytes], byteorder: str = "little"):
  """A .pth zip laid out as torch.save lays it out."""
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", pickled)
    zf.writestr("archive/byteorder", byteorder)
    for key, data in storages.items(): zf.writestr(f"archive/data/{key}", data)

@pytest.fixture
def fake_torch(monkeypatch):
  """Just enough of a `torch` module for pickle to write the globals a checkpoint references."""
  torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")
  def _rebuild_tensor_v2(*args): raise AssertionError("never called: only pickled by name")
  _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
  utils._rebuild_tensor_v2, torch._utils = _rebuild_tensor_v2, utils
  for name in ("FloatStorage", "LongStorage"): setattr(torch, name, type(name, (), {"__module__": "torch"}))
  monkeypatch.setitem(sys.modules, "torch", torch)
  monkeypatch.setitem(sys.modules, "torch._utils", utils)
  return torch

class FakeStorage:
  def __init__(self, storage_type, key, numel, view=None): self.storage_type, self.key, self.numel, self.view = storage_type, key, numel, view

class FakeTensor:
  def __init__(self, storage, offset, size, stride): self.args = (storage, offset, size, stride)
  def __reduce__(self): return sys.modules["torch._utils"]._rebuild_tensor_v2, self.args + (False, collections.OrderedDict())

def pickle_checkpoint(obj) -> bytes:
  class CheckpointPickler(pickle.Pickler):
    def persistent_id(self, o):
      return ("storage", o.storage_type, o.key, "cpu", o.numel) if isinstance(o, FakeStorage) else None
  f = io.BytesIO()
  CheckpointPickler(f, protocol=2).dump(obj)
  return f.getvalue()

@pytest.mark.parametrize("byteorder", ["little", "big"])
def test_hand_built_checkpoint_without_torch(tmp_path, fake_torch, byteorder):
  values = np.arange(24, dtype=np.float32) * 1.5
  longs = np.array([2**40, -3, 5], np.int64)
  floats, ints = FakeStorage(fake_torch.FloatStorage, "0", 24), FakeStorage(fake_torch.LongStorage, "1", 3)
  sd = collections.OrderedDict(w=FakeTensor(floats, 2, (3, 4), (1, 5)), row=FakeTensor(floats, 20, (4,), (1,)), n=FakeTensor(ints, 0, (3,), (1,)))
  order = "<" if byteorder == "little" else ">"
  write_pth(tmp_path / "hand.pth", pickle_checkpoint({"state_dict": sd}),
            {"0": values.astype(order + "f4").tobytes(), "1": longs.astype(order + "i8").tobytes()}, byteorder)
  loaded = torch_load_arrays(tmp_path / "hand.pth")
  assert_same(loaded["w"], np.lib.stride_tricks.as_strided(values[2:], (3, 4), (4, 20)).copy())
  assert_same(loaded["row"], values[20:24])
  assert_same(loaded["n"], longs)

def test_hand_built_legacy_checkpoint_with_storage_view(tmp_path, fake_torch):
  values = np.arange(10, dtype=np.float32)
  root = FakeStorage(fake_torch.FloatStorage, "root", 10)
  view = FakeStorage(fake_torch.FloatStorage, "root", 10, view=("view", 4, 6))  # (view key, offset, numel) in the root
  class LegacyPickler(pickle.Pickler):
    def persistent_id(self, o):
      if isinstance(o, FakeStorage): return ("storage", o.storage_type, o.key, "cpu", o.numel, o.view)
  f = io.BytesIO()
  for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}): pickle.dump(header, f, protocol=2)
  LegacyPickler(f, protocol=2).dump({"all": FakeTensor(root, 0, (2, 5), (5, 1)), "tail": FakeTensor(view, 1, (2, 2), (1, 2))})
  pickle.dump(["root"], f, protocol=2)
  f.write((10).to_bytes(8, "little") + values.tobytes())
  (tmp_path / "legacy.pth").write_bytes(f.getvalue())
  loaded = torch_load_arrays(tmp_path / "legacy.pth")
  assert_same(loaded["all"], values.reshape(2, 5))
  assert_same(loaded["tail"], np.array([[5, 7], [6, 8]], np.float32))
  (tmp_path / "cut.pth").write_bytes(f.getvalue()[:-1])
  with pytest.raises(ValueError, match="truncated"): torch_load(tmp_path / "cut.pth")

@pytest.mark.parametrize("offset,size,stride,numel", [(0, (5, 5), (5, 1), 24), (20, (5,), (1,), 24), (0, (2, 2), (30, 1), 24),
                                                      (0, (4,), (1,), 25)])
def test_hand_built_checkpoint_out_of_bounds_is_refused(tmp_path, fake_torch, offset, size, stride, numel):
  storage = FakeStorage(fake_torch.FloatStorage, "0", numel)
  write_pth(tmp_path / "oob.pth", pickle_checkpoint({"t": FakeTensor(storage, offset, size, stride)}), {"0": bytes(96)})
  with pytest.raises(ValueError, match="reads element|holds 96 bytes"): torch_load(tmp_path / "oob.pth")

class Exploit:
  def __init__(self, marker): self.marker = marker
  def __reduce__(self): return os.system, (f"touch {self.marker}",)

def test_malicious_pickle_global_is_refused(tmp_path):
  marker = tmp_path / "pwned"
  write_pth(tmp_path / "evil.pth", pickle.dumps({"w": Exploit(marker)}, protocol=2), {})
  with pytest.raises(ValueError, match=r"refusing to unpickle global (posix|nt|os)\.system"): torch_load(tmp_path / "evil.pth")
  (tmp_path / "evil.pkl").write_bytes(pickle.dumps(Exploit(marker), protocol=2))  # a bare pickle, as in the legacy format
  with pytest.raises(ValueError, match="not a torch checkpoint"): torch_load(tmp_path / "evil.pkl")
  assert not marker.exists()

def test_crafted_pickle_cannot_demand_huge_allocations(tmp_path):
  huge_memo_index = b"\x80\x02Nr" + (2**31).to_bytes(4, "little") + b"."  # the C unpickler would size its memo to 2**31
  write_pth(tmp_path / "memo.pth", huge_memo_index, {})
  assert torch_load(tmp_path / "memo.pth") is None
  huge_bytearray = b"\x80\x05\x96" + (2**40).to_bytes(8, "little") + b"."  # BYTEARRAY8 zero-fills before reading
  write_pth(tmp_path / "bytearray.pth", huge_bytearray, {})
  with pytest.raises(ValueError, match="bytearray"): torch_load(tmp_path / "bytearray.pth")

def test_not_a_checkpoint(tmp_path):
  (tmp_path / "junk.pth").write_bytes(b"\x00garbage" * 10)
  with pytest.raises(ValueError, match="not a torch checkpoint"): torch_load(tmp_path / "junk.pth")
  with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf: zf.writestr("readme.txt", "hi")
  with pytest.raises(ValueError, match="data.pkl"): torch_load(tmp_path / "other.zip")
  write_pth(tmp_path / "cut.pth", pickle.dumps({"a": 1}, protocol=2)[:-3], {})
  with pytest.raises(ValueError, match="corrupt pickle"): torch_load(tmp_path / "cut.pth")
