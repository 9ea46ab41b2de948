"""The protobuf wire format and the ONNX schema (field numbers as data): ONNX files read into plain objects, no onnx package."""
from __future__ import annotations
import os, struct
from types import SimpleNamespace
import numpy as np

# wire types: 0 varint, 1 fixed 64 bits, 2 length-delimited (bytes, strings, messages, packed repeated numbers), 5 fixed 32 bits
def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
  result = shift = 0
  while True:
    if pos >= len(buf): raise ValueError("protobuf: truncated varint (the file is cut short or not an ONNX model)")
    b = buf[pos]
    result |= (b & 0x7F) << shift
    pos, shift = pos + 1, shift + 7
    if b < 0x80: return result, pos

def _fields(buf: memoryview):
  """Yield (field number, wire type, value) for each field of one message; value is an int or a memoryview."""
  pos = 0
  while pos < len(buf):
    key, pos = _varint(buf, pos)
    field, wire = key >> 3, key & 7
    if wire == 0: val, pos = _varint(buf, pos)
    elif wire == 1: val, pos = buf[pos:pos + 8], pos + 8
    elif wire == 5: val, pos = buf[pos:pos + 4], pos + 4
    elif wire == 2:
      n, pos = _varint(buf, pos)
      val, pos = buf[pos:pos + n], pos + n
    else: raise ValueError(f"protobuf: wire type {wire} of field {field} is not supported (groups are deprecated)")
    if pos > len(buf): raise ValueError(f"protobuf: field {field} runs past the end of its message")
    yield field, wire, val

def _signed(v: int) -> int: return v - (1 << 64) if v >= 1 << 63 else v

def _scalar(kind: str, wire: int, val):
  """One non-message value of `kind` from its wire form (a packed run is handled by the caller)."""
  if kind == "int": return _signed(val)
  if kind == "uint": return val
  if kind == "f32": return struct.unpack("<f", val)[0]
  if kind == "f64": return struct.unpack("<d", val)[0]
  if kind == "str": return bytes(val).decode("utf-8")
  if kind == "bytes": return bytes(val)
  raise AssertionError(kind)

def _packed(kind: str, buf: memoryview) -> list:
  if kind == "f32": return np.frombuffer(buf, "<f4").tolist()
  if kind == "f64": return np.frombuffer(buf, "<f8").tolist()
  out, pos = [], 0
  while pos < len(buf):
    v, pos = _varint(buf, pos)
    out.append(_signed(v) if kind == "int" else v)
  return out

# message name -> {field number: (attribute, kind)}; a kind starting with * is repeated; a capitalised kind is a message.
# Field numbers are those of onnx.proto (onnx/onnx.proto3 in the ONNX repository).
SCHEMA: dict[str, dict[int, tuple[str, str]]] = {
  "Model": {1: ("ir_version", "int"), 7: ("graph", "Graph"), 8: ("opset_import", "*OpsetId"), 2: ("producer_name", "str"),
            25: ("functions", "*Function")},
  "OpsetId": {1: ("domain", "str"), 2: ("version", "int")},
  "Graph": {1: ("node", "*Node"), 2: ("name", "str"), 5: ("initializer", "*Tensor"), 11: ("input", "*ValueInfo"),
            12: ("output", "*ValueInfo"), 15: ("sparse_initializer", "*SparseTensor")},
  "Node": {1: ("input", "*str"), 2: ("output", "*str"), 3: ("name", "str"), 4: ("op_type", "str"), 5: ("attribute", "*Attribute"),
           7: ("domain", "str")},
  "Function": {1: ("name", "str"), 10: ("domain", "str")},
  "Attribute": {1: ("name", "str"), 20: ("type", "int"), 2: ("f", "f32"), 3: ("i", "int"), 4: ("s", "bytes"), 5: ("t", "Tensor"),
                6: ("g", "Graph"), 7: ("floats", "*f32"), 8: ("ints", "*int"), 9: ("strings", "*bytes"), 10: ("tensors", "*Tensor"),
                11: ("graphs", "*Graph"), 22: ("sparse_tensor", "SparseTensor"), 14: ("tp", "Type"), 21: ("ref_attr_name", "str")},
  "ValueInfo": {1: ("name", "str"), 2: ("type", "Type")},
  "Type": {1: ("tensor_type", "TensorType"), 4: ("sequence_type", "SequenceType"), 9: ("optional_type", "SequenceType"),
           5: ("map_type", "MapType"), 8: ("sparse_tensor_type", "TensorType")},
  "TensorType": {1: ("elem_type", "int"), 2: ("shape", "Shape")},
  "SequenceType": {1: ("elem_type", "Type")},
  "MapType": {1: ("key_type", "int"), 2: ("value_type", "Type")},
  "Shape": {1: ("dim", "*Dim")},
  "Dim": {1: ("dim_value", "int"), 2: ("dim_param", "str")},
  "Tensor": {1: ("dims", "*int"), 2: ("data_type", "int"), 4: ("float_data", "*f32"), 5: ("int32_data", "*int"),
             6: ("string_data", "*bytes"), 7: ("int64_data", "*int"), 8: ("name", "str"), 9: ("raw_data", "bytes"),
             10: ("double_data", "*f64"), 11: ("uint64_data", "*uint"), 13: ("external_data", "*StringString"),
             14: ("data_location", "int")},
  "SparseTensor": {1: ("values", "Tensor"), 2: ("indices", "Tensor"), 3: ("dims", "*int")},
  "StringString": {1: ("key", "str"), 2: ("value", "str")},
}
_DEFAULTS = {"int": 0, "uint": 0, "f32": 0.0, "f64": 0.0, "str": "", "bytes": b""}

def parse(msg: str, buf: bytes | memoryview) -> SimpleNamespace:
  """Decode one message of type `msg`: every schema field is present (repeated ones as lists, absent messages as None).
  Fields the schema does not name are skipped, as protobuf readers do."""
  spec = SCHEMA[msg]
  out = SimpleNamespace(**{name: [] if kind[0] == "*" else _DEFAULTS.get(kind) for name, kind in spec.values()})
  for field, wire, val in _fields(memoryview(buf)):
    if field not in spec: continue
    name, kind = spec[field]
    rep, base = kind[0] == "*", kind.lstrip("*")
    if base in SCHEMA: v = parse(base, val)
    elif rep and wire == 2 and base not in ("str", "bytes"):
      getattr(out, name).extend(_packed(base, val))
      continue
    else: v = _scalar(base, wire, val)
    if rep: getattr(out, name).append(v)
    else: setattr(out, name, v)
  return out

# TensorProto.DataType -> numpy dtype (None: a type tinycore has no numpy form for, handled by name below)
ONNX_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
           10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64, 16: None}
ONNX_TYPE_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64", 8: "STRING",
                   9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128",
                   16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4",
                   22: "INT4", 23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}

def tensor_to_numpy(t: SimpleNamespace, base_dir: str | None) -> np.ndarray:
  """A TensorProto's values as a numpy array (bfloat16 as float32: its bits widened), from raw, typed or external data."""
  name, dims = t.name or "<unnamed>", tuple(t.dims)
  if t.data_type not in ONNX_NP:
    raise NotImplementedError(f"ONNX tensor {name!r}: data type {ONNX_TYPE_NAMES.get(t.data_type, t.data_type)} is not supported by tinycore")
  npdt = np.dtype(ONNX_NP[t.data_type] or np.uint16)  # bfloat16 travels as its uint16 bits
  raw = t.raw_data
  if t.data_location == 1:
    ext = {e.key: e.value for e in t.external_data}
    if base_dir is None: raise ValueError(f"ONNX tensor {name!r} lives in external file {ext.get('location')!r}: load the model from a path")
    path = os.path.normpath(os.path.join(base_dir, ext["location"]))
    if os.path.commonpath([os.path.abspath(base_dir), os.path.abspath(path)]) != os.path.abspath(base_dir):
      raise ValueError(f"ONNX tensor {name!r}: external data path {ext['location']!r} leaves the model's directory")
    with open(path, "rb") as f:
      f.seek(int(ext.get("offset", 0)))
      raw = f.read(int(ext["length"])) if "length" in ext else f.read()
  if raw: arr = np.frombuffer(raw, npdt.newbyteorder("<")).astype(npdt)
  elif t.data_type in (1,): arr = np.array(t.float_data, npdt)
  elif t.data_type == 11: arr = np.array(t.double_data, npdt)
  elif t.data_type in (7,): arr = np.array(t.int64_data, npdt)
  elif t.data_type in (12, 13): arr = np.array(t.uint64_data, npdt)
  elif t.data_type in (10, 16): arr = np.array(t.int32_data, np.int64).astype(np.uint16)  # half types are stored as their bits
  else: arr = np.array(t.int32_data, np.int64).astype(npdt)
  if t.data_type == 10 and arr.dtype == np.uint16: arr = arr.view(np.float16)
  if t.data_type == 16: arr = (arr.astype(np.uint32) << 16).view(np.float32)
  if arr.size != int(np.prod(dims)): raise ValueError(f"ONNX tensor {name!r}: {arr.size} values for dims {dims}")
  return arr.reshape(dims)
