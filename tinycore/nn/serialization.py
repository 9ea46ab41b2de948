"""Weight files as numpy arrays: safetensors read and written, PyTorch .pth checkpoints read without torch."""
from __future__ import annotations
import collections, io, json, math, os, pickle, tarfile, zipfile, zlib
from typing import NamedTuple
import numpy as np
from numpy.lib.stride_tricks import as_strided

# numpy has no bfloat16, so such arrays hold the raw uint16 bits (as tinycore.dtype.to_np_dtype does) under this dtype:
# uint16 tagged through numpy's dtype metadata. The tag survives views, copies and reshapes, so a loaded bfloat16 array
# saves back as BF16; a plain uint16 array stays U16. `is_bfloat16` reads the tag.
BFLOAT16 = np.dtype(np.uint16, metadata={"dtype": "bfloat16"})

def is_bfloat16(a: np.ndarray) -> bool: return (a.dtype.metadata or {}).get("dtype") == "bfloat16"

def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
  """Exact widening of bfloat16 bits to float32."""
  return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)

def float32_to_bfloat16(x: np.ndarray) -> np.ndarray:
  """Round-to-nearest-even narrowing of float32 to bfloat16 bits (tagged BFLOAT16); NaN stays NaN."""
  u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
  rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
  quiet_nan = (u >> 16) | 0x40
  return np.where((u & 0x7FFFFFFF) > 0x7F800000, quiet_nan, rounded).astype(BFLOAT16)

# ---------------------------------------------------------------------------------------------------------------------
# safetensors: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, "__metadata__":
# {str: str}}, then the data buffer. Offsets are relative to the buffer, and the tensors must tile it exactly.

_ST_DTYPES = {"BOOL": np.dtype("?"), "U8": np.dtype("u1"), "I8": np.dtype("i1"), "U16": np.dtype("<u2"),
              "I16": np.dtype("<i2"), "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "U64": np.dtype("<u8"),
              "I64": np.dtype("<i8"), "F16": np.dtype("<f2"), "BF16": BFLOAT16.newbyteorder("<"), "F32": np.dtype("<f4"),
              "F64": np.dtype("<f8")}
_ST_NAMES = {(dt.kind, dt.itemsize): name for name, dt in _ST_DTYPES.items() if name != "BF16"}
_ST_MAX_HEADER = 100_000_000  # the reference implementation's limit: a larger header is corrupt, not big

def _st_dtype_name(a: np.ndarray) -> str:
  if is_bfloat16(a): return "BF16"
  if (name := _ST_NAMES.get((a.dtype.kind, a.dtype.itemsize))) is None:
    raise ValueError(f"safetensors cannot store numpy dtype {a.dtype}; supported: {sorted(_ST_DTYPES)}")
  return name

def safetensors_save_arrays(path, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
  """Write `arrays` to `path` as safetensors, atomically (a temporary file renamed over `path`)."""
  if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
    raise ValueError("safetensors metadata must map str to str")
  for name in arrays:
    if not isinstance(name, str) or name == "__metadata__": raise ValueError(f"invalid safetensors tensor name {name!r}")
  arrays = {name: np.asarray(a) for name, a in arrays.items()}
  # widest dtype first (then by name), as the reference writer does: every tensor starts aligned to its itemsize
  order = sorted(arrays, key=lambda name: (-arrays[name].dtype.itemsize, name))
  header: dict = {"__metadata__": metadata} if metadata else {}
  offset = 0
  for name in order:
    a = arrays[name]
    header[name] = {"dtype": _st_dtype_name(a), "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
    offset += a.nbytes
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)  # pad with spaces so the data buffer starts 8-byte aligned
  tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
  try:
    with open(tmp, "wb") as f:
      f.write(len(text).to_bytes(8, "little"))
      f.write(text)
      for name in order:
        a = arrays[name]
        f.write(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).data)
    os.replace(tmp, path)
  except BaseException:
    os.unlink(tmp)
    raise

def _st_check(cond: bool, msg: str) -> None:
  if not cond: raise ValueError(f"malformed safetensors: {msg}")

def _json_object_no_duplicates(pairs):
  keys = [k for k, _ in pairs]
  _st_check(len(set(keys)) == len(keys), f"duplicate keys in header: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
  return dict(pairs)

def _is_uint(x) -> bool: return type(x) is int and x >= 0

def _st_read(src) -> tuple[dict[str, np.ndarray], dict[str, str]]:
  if isinstance(src, (bytes, bytearray, memoryview)): raw = np.frombuffer(src, np.uint8)
  else:
    _st_check(os.path.getsize(src) >= 8, f"{src} is shorter than the 8-byte header length")
    raw = np.memmap(src, np.uint8, mode="r").view(np.ndarray)  # read-only and zero-copy: pages load on first touch
  _st_check(raw.size >= 8, f"{raw.size} bytes is shorter than the 8-byte header length")
  n = int.from_bytes(raw[:8].tobytes(), "little")
  _st_check(n <= raw.size - 8, f"header length {n} is larger than the {raw.size - 8} bytes that follow it (truncated file?)")
  _st_check(n <= _ST_MAX_HEADER, f"header length {n} exceeds the {_ST_MAX_HEADER}-byte limit")
  try: header = json.loads(raw[8:8 + n].tobytes().decode("utf-8"), object_pairs_hook=_json_object_no_duplicates)
  except (UnicodeDecodeError, json.JSONDecodeError) as e: raise ValueError(f"malformed safetensors: header is not valid JSON: {e}") from None
  _st_check(isinstance(header, dict), "header is not a JSON object")
  metadata = header.pop("__metadata__", None) or {}
  _st_check(isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values()),
            "__metadata__ must be an object of strings")
  data = raw[8 + n:]
  spans = []
  for name, info in header.items():
    _st_check(isinstance(info, dict) and {"dtype", "shape", "data_offsets"} <= info.keys(),
              f"tensor {name!r} needs dtype, shape and data_offsets, got {info!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    _st_check(dtype in _ST_DTYPES, f"tensor {name!r} has unknown dtype {dtype!r}; supported: {sorted(_ST_DTYPES)}")
    _st_check(isinstance(shape, list) and all(_is_uint(d) for d in shape), f"tensor {name!r} has invalid shape {shape!r}")
    _st_check(isinstance(offsets, list) and len(offsets) == 2 and all(_is_uint(o) for o in offsets) and offsets[0] <= offsets[1],
              f"tensor {name!r} has invalid data_offsets {offsets!r}")
    begin, end = offsets
    _st_check(end <= data.size, f"tensor {name!r} data_offsets {offsets} run past the {data.size}-byte data buffer")
    nbytes = math.prod(shape) * _ST_DTYPES[dtype].itemsize
    _st_check(end - begin == nbytes, f"tensor {name!r} is {dtype}{shape} = {nbytes} bytes but its offsets span {end - begin}")
    spans.append((begin, end, name))
  pos = 0
  for begin, end, name in sorted(spans):
    _st_check(begin >= pos, f"tensor {name!r} at {begin} overlaps the previous tensor ending at {pos}")
    _st_check(begin == pos, f"gap in the data buffer between bytes {pos} and {begin} (before tensor {name!r})")
    pos = end
  _st_check(pos == data.size, f"the tensors cover {pos} bytes but the data buffer holds {data.size}")
  arrays = {}
  for name, info in header.items():
    begin, end = info["data_offsets"]
    if info["dtype"] == "BOOL": _st_check(bool((data[begin:end] <= 1).all()), f"BOOL tensor {name!r} holds bytes other than 0 and 1")
    arrays[name] = data[begin:end].view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
  return arrays, metadata

def safetensors_load_arrays(src) -> dict[str, np.ndarray]:
  """Tensors of a safetensors file (path) or buffer (bytes-like), as read-only zero-copy numpy views.

  From a path the file is memory-mapped and stays mapped while any returned array lives. BF16 tensors come back as
  uint16 bits tagged BFLOAT16. A malformed or truncated input raises ValueError, before any tensor is read."""
  return _st_read(src)[0]

def safetensors_metadata(src) -> dict[str, str]:
  """The `__metadata__` strings of a safetensors file or buffer ({} when it has none); validates like the loader."""
  return _st_read(src)[1]

# ---------------------------------------------------------------------------------------------------------------------
# PyTorch checkpoints. The zip format (torch >= 1.6): <prefix>/data.pkl pickles the object, each storage is a record
# <prefix>/data/<key>, <prefix>/byteorder says the byte order. The legacy format (torch.save(...,
# _use_new_zipfile_serialization=False)): pickled magic number, protocol version and sys info, the pickled object,
# the pickled list of storage keys, then per key an int64 element count and the little-endian bytes.
# Tensors reach the pickle as calls to torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...); the
# unpickler below answers only such names, with stand-ins that record what to build, so no pickle can run code.

_TORCH_DTYPES = {"bool": np.dtype("?"), "uint8": np.dtype("u1"), "int8": np.dtype("i1"), "int16": np.dtype("<i2"),
                 "uint16": np.dtype("<u2"), "int32": np.dtype("<i4"), "uint32": np.dtype("<u4"), "int64": np.dtype("<i8"),
                 "uint64": np.dtype("<u8"), "float16": np.dtype("<f2"), "bfloat16": np.dtype("<u2"),
                 "float32": np.dtype("<f4"), "float64": np.dtype("<f8")}
_TORCH_STORAGES = {"BoolStorage": "bool", "ByteStorage": "uint8", "CharStorage": "int8", "ShortStorage": "int16",
                   "IntStorage": "int32", "LongStorage": "int64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
                   "FloatStorage": "float32", "DoubleStorage": "float64"}
_TORCH_MAGIC, _TORCH_LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001

# The stand-ins are immutable tuples, so no pickle opcode (BUILD) can alter them after the loader made them.
class _TorchDType(NamedTuple):
  """What a pickled torch dtype or storage class (torch.float32, torch.FloatStorage) unpickles to."""
  name: str

class _Storage(NamedTuple):
  """A storage reference: `nbytes` bytes at `offset` of the storage record `key`, holding elements of `dtype`."""
  key: str
  offset: int
  nbytes: int
  dtype: str

class _TensorRef(NamedTuple):
  """A tensor to build once the storage bytes are known (the legacy format stores them after the pickle)."""
  storage: _Storage
  offset: int
  size: tuple
  stride: tuple
  dtype: str

def _dtype_name(t) -> str:
  if type(t) is not _TorchDType or t.name not in _TORCH_DTYPES: raise ValueError(f"torch checkpoint: {t!r} is not a supported dtype")
  return t.name

def _rebuild_tensor(storage, storage_offset, size, stride, *_):  # _rebuild_tensor and _rebuild_tensor_v2
  if type(storage) is not _Storage: raise ValueError(f"torch checkpoint: tensor built from {type(storage).__name__}, not a storage")
  return _TensorRef(storage, storage_offset, size, stride, storage.dtype)

def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, *_):
  return _rebuild_tensor(storage, storage_offset, size, stride)._replace(dtype=_dtype_name(dtype))

def _rebuild_parameter(data, *_): return data  # _rebuild_parameter and _rebuild_parameter_with_state: a Parameter is its data

_TORCH_GLOBALS = {("torch._utils", "_rebuild_tensor"): _rebuild_tensor, ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
                  ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
                  ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
                  ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
                  ("collections", "OrderedDict"): collections.OrderedDict}

class _RestrictedUnpickler(pickle._Unpickler):
  """Unpickles a checkpoint's object graph; any global other than the tensor-rebuilding few is refused.

  It extends the pure-Python unpickler: the C one sizes its memo by the largest index a pickle names, so a few crafted
  bytes could make it allocate gigabytes. The object graph is small (tensor data lives outside it), so speed is no issue.
  BYTEARRAY8, which zero-fills a length the pickle states before reading it, is refused for the same reason."""
  def _refuse_bytearray(self): raise ValueError("torch checkpoint: a bytearray in the pickle (torch never writes one)")
  dispatch = {**pickle._Unpickler.dispatch, pickle.BYTEARRAY8[0]: _refuse_bytearray}
  def __init__(self, file, storage_from_id):
    super().__init__(file)
    self.storage_from_id = storage_from_id
  def find_class(self, module, name):
    if (fn := _TORCH_GLOBALS.get((module, name))) is not None:
      return fn if isinstance(fn, type) else lambda *args: fn(*args)  # a fresh function: a BUILD cannot touch ours
    if module == "torch" and name in _TORCH_STORAGES: return _TorchDType(_TORCH_STORAGES[name])
    if module == "torch" and name in _TORCH_DTYPES: return _TorchDType(name)
    if (module, name) == ("torch.storage", "UntypedStorage"): return _TorchDType("uint8")
    allowed = sorted(f"{m}.{n}" for m, n in _TORCH_GLOBALS) + ["torch.<dtype>", "torch.<Type>Storage", "torch.storage.UntypedStorage"]
    raise ValueError(f"refusing to unpickle global {module}.{name} from a torch checkpoint: only {', '.join(allowed)} "
                     "are allowed, since anything else could run arbitrary code")
  def persistent_load(self, pid): return self.storage_from_id(pid)

def _refuse_pid(pid): raise ValueError(f"torch checkpoint: unexpected persistent id {pid!r}")

def _unpickle(f, storage_from_id=_refuse_pid):
  try: return _RestrictedUnpickler(f, storage_from_id).load()
  except ValueError: raise
  except Exception as e: raise ValueError(f"torch checkpoint: corrupt pickle ({type(e).__name__}: {e})") from None

def _storage_pid(pid, n: int) -> tuple:
  if not (isinstance(pid, tuple) and len(pid) == n and pid[0] == "storage"):
    kind = "a whole pickled nn.Module (save its state_dict() instead)" if isinstance(pid, tuple) and pid[:1] == ("module",) else repr(pid)
    raise ValueError(f"torch checkpoint: unsupported persistent id: {kind}")
  return pid[1:]

def _load_zip(path) -> tuple[object, dict]:
  with zipfile.ZipFile(path) as zf:
    names = zf.namelist()
    records = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(records) != 1: raise ValueError(f"torch checkpoint {path}: expected one <prefix>/data.pkl in the zip, found {records}")
    prefix = records[0][:-len("data.pkl")]
    byteorder = zf.read(prefix + "byteorder").decode() if prefix + "byteorder" in names else "little"
    if byteorder not in ("little", "big"): raise ValueError(f"torch checkpoint {path}: unknown byteorder {byteorder!r}")
    storages: dict[str, np.ndarray] = {}
    def storage_from_id(pid):
      storage_type, key, _location, numel = _storage_pid(pid, 5)
      dtype = _dtype_name(storage_type)
      if key not in storages:
        if not isinstance(key, str) or f"{prefix}data/{key}" not in names: raise ValueError(f"torch checkpoint {path}: no storage record {key!r}")
        storages[key] = np.frombuffer(zf.read(f"{prefix}data/{key}"), np.uint8)
      if not _is_uint(numel) or numel * _TORCH_DTYPES[dtype].itemsize != storages[key].size:
        raise ValueError(f"torch checkpoint {path}: storage {key!r} holds {storages[key].size} bytes, not {numel} {dtype}")
      return _Storage(key, 0, storages[key].size, dtype)
    obj = _unpickle(io.BytesIO(zf.read(records[0])), storage_from_id)
  return obj, {k: (v, byteorder) for k, v in storages.items()}

def _load_legacy(f, path) -> tuple[object, dict]:
  try: magic = _unpickle(f)
  except ValueError: magic = None
  if magic != _TORCH_MAGIC: raise ValueError(f"{path} is not a torch checkpoint (no zip archive, no legacy magic number)")
  if (version := _unpickle(f)) != _TORCH_LEGACY_PROTOCOL: raise ValueError(f"torch checkpoint {path}: unknown legacy protocol {version!r}")
  _unpickle(f)  # sys info: the legacy format writes storage bytes little-endian whatever the saving machine
  roots: dict[str, tuple[str, int]] = {}
  def storage_from_id(pid):
    storage_type, key, _location, numel, view = _storage_pid(pid, 6)
    dtype = _dtype_name(storage_type)
    if not (isinstance(key, str) and _is_uint(numel)): raise ValueError(f"torch checkpoint {path}: bad storage id {pid!r}")
    roots.setdefault(key, (dtype, numel))
    itemsize = _TORCH_DTYPES[dtype].itemsize
    if view is None: return _Storage(key, 0, numel * itemsize, dtype)
    _view_key, offset, view_numel = view
    if not (_is_uint(offset) and _is_uint(view_numel) and offset + view_numel <= numel):
      raise ValueError(f"torch checkpoint {path}: storage view {view!r} outside its storage of {numel}")
    return _Storage(key, offset * itemsize, view_numel * itemsize, dtype)
  obj = _unpickle(f, storage_from_id)
  keys = _unpickle(f)
  if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys) and sorted(keys) == sorted(roots)): raise ValueError(f"torch checkpoint {path}: storage key list does not match the pickle")
  storages = {}
  for key in keys:
    dtype, numel = roots[key]
    count = int.from_bytes(f.read(8), "little")
    nbytes = numel * _TORCH_DTYPES[dtype].itemsize
    if count != numel or len(data := f.read(nbytes)) != nbytes:
      raise ValueError(f"torch checkpoint {path}: storage {key!r} record is truncated or has the wrong size")
    storages[key] = (np.frombuffer(data, np.uint8), "little")
  return obj, storages

def _build_tensor(ref: _TensorRef, storages: dict, path) -> np.ndarray:
  size, stride, offset = ref.size, ref.stride, ref.offset
  if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride) and _is_uint(offset)
          and all(_is_uint(x) for x in size + stride)):
    raise ValueError(f"torch checkpoint {path}: bad tensor geometry offset={offset!r} size={size!r} stride={stride!r}")
  raw, byteorder = storages[ref.storage.key]
  dtype = _TORCH_DTYPES[ref.dtype].newbyteorder("<" if byteorder == "little" else ">")
  storage = raw[ref.storage.offset:ref.storage.offset + ref.storage.nbytes]
  if storage.size % dtype.itemsize: raise ValueError(f"torch checkpoint {path}: storage of {storage.size} bytes does not hold whole {ref.dtype}")
  elements = storage.view(dtype)
  if math.prod(size) == 0: out = np.empty(size, dtype)
  else:
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= elements.size:
      raise ValueError(f"torch checkpoint {path}: tensor size={size} stride={stride} offset={offset} reads element {last} "
                       f"of a storage of {elements.size}")
    out = as_strided(elements[offset:], size, tuple(s * dtype.itemsize for s in stride), writeable=False)
  out = out.astype(dtype.newbyteorder("="), order="C")  # a contiguous copy in native byte order
  return out.view(BFLOAT16) if ref.dtype == "bfloat16" else out

def _materialize(obj, storages, path):
  if type(obj) is _TensorRef: return _build_tensor(obj, storages, path)
  if type(obj) is _TorchDType: return obj.name  # e.g. a config's torch.float16 becomes "float16"
  if type(obj) is _Storage: raise ValueError(f"torch checkpoint {path}: holds a bare storage, not a tensor")
  if isinstance(obj, dict): return type(obj)((k, _materialize(v, storages, path)) for k, v in obj.items())
  if type(obj) in (list, tuple): return type(obj)(_materialize(v, storages, path) for v in obj)
  return obj

def torch_load(path):
  """The object a torch.save file holds (zip or legacy format), with every tensor a contiguous numpy array.

  Dicts, lists, tuples and plain values come back as they were, torch dtypes as their names ("float16"), BF16 tensors
  as uint16 bits tagged BFLOAT16. Only the globals needed to rebuild tensors are unpickled: anything else (os.system,
  a pickled nn.Module) raises ValueError, as does a malformed file. The pre-0.4 tar format is not supported."""
  def start(p):  # an open binary file is read from its start by each check (each moves its position)
    if hasattr(p, "seek"): p.seek(0)
    return p
  try: is_zip = zipfile.is_zipfile(start(path))
  except zipfile.BadZipFile: is_zip = True  # a zip, but a broken one: _load_zip says how
  if is_zip:
    try: obj, storages = _load_zip(start(path))
    except (zipfile.BadZipFile, RuntimeError, zlib.error, EOFError, OSError) as e:  # RuntimeError: unsupported zip features
      raise ValueError(f"torch checkpoint {path}: corrupt zip: {type(e).__name__}: {e}") from None
  elif tarfile.is_tarfile(start(path)): raise ValueError(f"{path} is a torch checkpoint in the pre-0.4 tar format, which is not supported")
  elif hasattr(path, "read"): obj, storages = _load_legacy(io.BytesIO(start(path).read()), path)
  else:
    with open(path, "rb") as f: obj, storages = _load_legacy(io.BytesIO(f.read()), path)  # a read past the end stays small
  return _materialize(obj, storages, path)

# training checkpoints wrap the weights, e.g. {"model": state_dict, "optimizer": ..., "epoch": 3}
_STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model", "module", "net")

def torch_load_arrays(path) -> dict[str, np.ndarray]:
  """The tensors of a torch checkpoint as a flat {name: array} dict, ready to load into a model.

  While the top level holds no tensor itself, it descends into the first of the keys "state_dict", "model_state_dict",
  "model", "module", "net" that holds a dict. What remains is flattened: nested keys join with ".", non-tensor values
  (epoch counters, config strings) are dropped. Use `torch_load` to see everything."""
  obj = torch_load(path)
  while isinstance(obj, dict) and not any(isinstance(v, np.ndarray) for v in obj.values()):
    key = next((k for k in _STATE_DICT_KEYS if isinstance(obj.get(k), dict)), None)
    if key is None: break
    obj = obj[key]
  flat: dict[str, np.ndarray] = {}
  def walk(prefix: str, o):
    if isinstance(o, np.ndarray): flat[prefix] = o
    elif isinstance(o, dict):
      for k, v in o.items(): walk(f"{prefix}.{k}" if prefix else str(k), v)
    elif isinstance(o, (list, tuple)):
      for i, v in enumerate(o): walk(f"{prefix}.{i}" if prefix else str(i), v)
  walk("", obj)
  return flat
