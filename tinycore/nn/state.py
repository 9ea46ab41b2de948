"""Model state: find a model's tensors by attribute path, load them strictly, and read/write them as safetensors or torch files."""
from __future__ import annotations
import functools, io, json, pathlib, tarfile, zipfile
from typing import Any, Callable
import numpy as np
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor, _plain
from tinycore.nn.serialization import safetensors_load_arrays, safetensors_save_arrays, torch_load_arrays, is_bfloat16, BFLOAT16

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type | tuple[type, ...] = Tensor) -> dict[str, Any]:
  """Every Tensor (every instance of tensor_type) reachable from obj through attributes, lists, tuples and dicts, keyed by
  its dotted path ("layers.0.weight"). A tensor reachable twice (tied weights) appears under both names; cycles are followed once."""
  out: dict[str, Any] = {}
  def walk(o: Any, path: str, seen: frozenset[int]) -> None:
    if isinstance(o, tensor_type): out[path.rstrip(".")] = o; return
    if id(o) in seen: return
    seen = seen | {id(o)}
    if hasattr(o, "_asdict"): o = o._asdict()  # namedtuple
    elif not isinstance(o, (dict, list, tuple)) and isinstance(getattr(o, "__dict__", None), dict): o = vars(o)
    if isinstance(o, dict):
      for k, v in o.items(): walk(v, f"{path}{k}.", seen)
    elif isinstance(o, (list, tuple)):
      for i, v in enumerate(o): walk(v, f"{path}{i}.", seen)
  walk(obj, prefix, frozenset())
  return out

def get_parameters(obj: Any) -> list[Tensor]:
  """The distinct tensors of get_state_dict(obj), in order (what an optimizer is given)."""
  return list({id(t): t for t in get_state_dict(obj).values()}.values())

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False, consume: bool = False,
                    realize: bool = True) -> list[Tensor]:
  """Copy state_dict's tensors into model's (same names as get_state_dict), cast to each model tensor's dtype and device.

  strict: every model tensor must be given and nothing else. A shape mismatch is always an error. The error lists every
  missing key, unexpected key and shape mismatch at once. Realized tensors are written in place (other references to them,
  an optimizer or a TinyJit, see the new values); everything is realized together. consume pops loaded keys from state_dict."""
  model_state = get_state_dict(model)
  missing = [k for k in model_state if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model_state]
  mismatched = [f"{k}: model {model_state[k].shape} vs state_dict {tuple(state_dict[k].shape)}" for k in model_state
                if k in state_dict and tuple(model_state[k].shape) != tuple(state_dict[k].shape)]
  if mismatched or (strict and (missing or unexpected)):
    problems = [f"missing keys ({len(missing)}): {missing}" if missing and strict else "",
                f"unexpected keys ({len(unexpected)}): {unexpected}" if unexpected and strict else "",
                f"shape mismatches ({len(mismatched)}): {mismatched}" if mismatched else ""]
    raise RuntimeError("load_state_dict: " + "; ".join(p for p in problems if p))
  if verbose and (missing or unexpected): print(f"load_state_dict: not loaded {missing}, ignored {unexpected}")
  loaded = []
  for k, v in model_state.items():
    if k not in state_dict: continue
    src = state_dict.pop(k) if consume else state_dict[k]
    if not isinstance(src, Tensor): src = Tensor(np.asarray(src), device=v.device)
    src = src.to(v.device).cast(v.dtype)
    if _plain(v.uop): v.assign(src)
    else: v.replace(src)
    loaded.append(v)
  if realize: Tensor.realize_all(*loaded)
  return loaded

def _array_to_tensor(a: np.ndarray, device: str | None) -> Tensor:
  if is_bfloat16(a): return Tensor(a.view(np.uint16), device=device).bitcast(dtypes.bfloat16)
  return Tensor(a, device=device)

def _tensor_to_array(t: Tensor) -> np.ndarray:
  if t.dtype == dtypes.bfloat16: return t.bitcast(dtypes.uint16).numpy().astype(BFLOAT16)  # the exact bits, tagged
  return t.numpy()

def safetensors_load(fn, device: str | None = None) -> dict[str, Tensor]:
  """The tensors of a safetensors file (path or bytes) on `device`; a malformed file raises ValueError saying what is wrong."""
  return {k: _array_to_tensor(a, device) for k, a in safetensors_load_arrays(fn).items()}

def safetensors_save(tensors: dict[str, Tensor], fn, metadata: dict[str, str] | None = None) -> None:
  """Write {name: Tensor} to fn as safetensors (bfloat16 stays BF16)."""
  bad = [k for k, t in tensors.items() if not isinstance(t, Tensor)]
  if bad: raise TypeError(f"safetensors_save: values for {bad} are not Tensors")
  safetensors_save_arrays(fn, {k: _tensor_to_array(t) for k, t in tensors.items()}, metadata)

def torch_load(t, device: str | None = None) -> dict[str, Tensor]:
  """The tensors of a torch.save checkpoint (a path, or a uint8 Tensor of the file's bytes; a state_dict, possibly inside a
  training checkpoint) as {name: Tensor}."""
  return {k: _array_to_tensor(a, device) for k, a in torch_load_arrays(TensorIO(t) if isinstance(t, Tensor) else t).items()}

# ***** tinygrad's names: files given as a path or as a uint8 Tensor of their bytes *****

# the safetensors dtype names
safe_dtypes = {"BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16, "I32": dtypes.int32,
               "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
               "F32": dtypes.float32, "F64": dtypes.float64}
inverse_safe_dtypes = {v: k for k, v in safe_dtypes.items()}

def _file_tensor(fn: Tensor | str | pathlib.Path) -> Tensor:
  if isinstance(fn, Tensor):
    if fn.dtype != dtypes.uint8 or fn.ndim != 1: raise TypeError(f"a file as a Tensor must be 1-D uint8 bytes, got {fn.shape} {fn.dtype}")
    return fn
  return Tensor(pathlib.Path(fn).read_bytes())

def accept_filename(func: Callable[[Tensor], Any]) -> Callable[[Tensor | str | pathlib.Path], Any]:
  """func of a file's bytes (a 1-D uint8 Tensor) called with the Tensor or with a path."""
  @functools.wraps(func)
  def wrapper(fn: Tensor | str | pathlib.Path) -> Any: return func(_file_tensor(fn))
  return wrapper

class TensorIO(io.RawIOBase):
  """A 1-D uint8 Tensor read as a binary file (seekable): what file readers such as torch_load take."""
  def __init__(self, t: Tensor):
    self._data, self._pos = bytes(_file_tensor(t).numpy()), 0
  def readable(self) -> bool: return True
  def seekable(self) -> bool: return True
  def readinto(self, buffer: Any) -> int:
    chunk = self._data[self._pos:self._pos + len(buffer)]
    buffer[:len(chunk)] = chunk
    self._pos += len(chunk)
    return len(chunk)
  def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
    self._pos = max(0, {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._data)}[whence] + offset)
    return self._pos
  def tell(self) -> int: return self._pos

@accept_filename
def safe_load_metadata(t: Tensor) -> tuple[Tensor, int, dict[str, Any]]:
  """(the file as uint8 bytes, where its tensor data starts, its JSON header) of a safetensors file."""
  n = int.from_bytes(bytes(t[:8].numpy()), "little")
  if 8 + n > t.shape[0]: raise ValueError(f"safetensors header of {n} bytes does not fit a file of {t.shape[0]} bytes")
  return t, 8 + n, json.loads(bytes(t[8:8 + n].numpy()))

def safe_load(fn: Tensor | str | pathlib.Path, device: str | None = None) -> dict[str, Tensor]:
  return safetensors_load(fn if not isinstance(fn, Tensor) else bytes(_file_tensor(fn).numpy()), device)
safe_save = safetensors_save

@accept_filename
def tar_extract(t: Tensor) -> dict[str, Tensor]:
  """The regular files of a tar archive (gzip'd too), each as a uint8 Tensor of its bytes."""
  with tarfile.open(fileobj=TensorIO(t), mode="r:*") as tar:
    return {m.name: Tensor(tar.extractfile(m).read()) for m in tar if m.isreg()}  # type: ignore[union-attr]

@accept_filename
def zip_extract(t: Tensor) -> dict[str, Tensor]:
  """The files of a zip archive (stored or deflated), each as a uint8 Tensor of its bytes."""
  with zipfile.ZipFile(TensorIO(t)) as zf:
    return {zi.filename: Tensor(zf.read(zi)) for zi in zf.infolist() if not zi.is_dir()}

__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "safetensors_load", "safetensors_save", "torch_load",
           "safe_load", "safe_save", "safe_load_metadata", "tar_extract", "zip_extract", "safe_dtypes", "inverse_safe_dtypes", "accept_filename",
           "TensorIO"]
