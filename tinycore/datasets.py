"""Digit datasets for examples and tests: MNIST from a verified cache or mirror, else scikit-learn's bundled digits."""
from __future__ import annotations
import gzip, hashlib, http.client, math, os, struct, urllib.request, warnings, zlib
from pathlib import Path
from typing import NamedTuple
import numpy as np

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
# SHA-256 of the four gzip files as the MNIST mirrors serve them (train, then test: images, labels)
MNIST_SHA256 = {
  "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
  "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
  "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
  "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}

class DatasetUnavailable(OSError):
  """A dataset could be neither read from the cache nor downloaded and verified."""

# IDX: two zero bytes, a dtype code, the number of dims, each dim as a big-endian u32, then big-endian data
_IDX_DTYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}

def parse_idx(data: bytes) -> np.ndarray:
  """The array in IDX bytes (gzip-compressed or not), in native byte order. Malformed input raises ValueError."""
  if data[:2] == b"\x1f\x8b":
    try: data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e: raise ValueError(f"IDX data is gzip-compressed but does not decompress: {e}") from None
  if len(data) < 4 or data[:2] != b"\0\0": raise ValueError(f"not IDX data: the magic number must start with two zero bytes, got {data[:4]!r}")
  code, ndim = data[2], data[3]
  if code not in _IDX_DTYPES: raise ValueError(f"IDX dtype code 0x{code:02x} is unknown; known: {[hex(c) for c in _IDX_DTYPES]}")
  start = 4 + 4 * ndim
  if len(data) < start: raise ValueError(f"truncated IDX header: {ndim} dims need {start} bytes, got {len(data)}")
  shape = struct.unpack(f">{ndim}I", data[4:start])
  dtype = _IDX_DTYPES[code]
  if len(data) != (end := start + math.prod(shape) * dtype.itemsize):
    raise ValueError(f"IDX data of shape {shape} is {end} bytes but got {len(data)} ({'truncated' if len(data) < end else 'trailing bytes'})")
  return np.frombuffer(data, dtype, math.prod(shape), start).reshape(shape).astype(dtype.newbyteorder("="))

def mnist_cache_dir() -> Path:
  """Where MNIST files are cached: $TINYCORE_DATA/mnist if that variable is set, else ~/.cache/tinycore/mnist."""
  return Path(os.environ.get("TINYCORE_DATA") or Path.home() / ".cache" / "tinycore") / "mnist"

def _sha256(data: bytes) -> str: return hashlib.sha256(data).hexdigest()

def _write_atomic(path: Path, data: bytes) -> None:
  """Readers see the old file or the whole new one, never a partial download."""
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
  try:
    tmp.write_bytes(data)
    os.replace(tmp, path)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise

def _fetch_verified(name: str, cache: Path, base_url: str, offline: bool, timeout: float) -> bytes:
  """The bytes of MNIST file `name`: from the cache when its SHA-256 matches, else downloaded, verified and cached."""
  path, want = cache / name, MNIST_SHA256[name]
  if path.exists() and _sha256(data := path.read_bytes()) == want: return data
  state = "corrupt" if path.exists() else "missing"  # a corrupt or partial file is downloaded again
  if offline: raise DatasetUnavailable(f"{path} is {state} and offline=True forbids downloading it")
  url = base_url.rstrip("/") + "/" + name
  try:
    with urllib.request.urlopen(url, timeout=timeout) as response: data = response.read()
  except (OSError, ValueError, http.client.HTTPException) as e: raise DatasetUnavailable(f"could not download {url}: {e}") from e
  if (got := _sha256(data)) != want: raise DatasetUnavailable(f"{url} sent data with SHA-256 {got}, expected {want}; not using it")
  _write_atomic(path, data)
  return data

def fetch_mnist(cache_dir=None, offline: bool = False, base_url: str | None = None, timeout: float = 30.0):
  """MNIST as (X_train uint8 [60000,28,28], Y_train uint8 [60000], X_test uint8 [10000,28,28], Y_test uint8 [10000]).

  Files come from `cache_dir` (default `mnist_cache_dir()`) when their SHA-256 is right, else from `base_url`
  (default $TINYCORE_MNIST_URL, else MNIST_URL; file:// works) and are cached atomically. Raises DatasetUnavailable
  when a file can be neither read nor downloaded (offline=True never downloads)."""
  cache = Path(cache_dir) if cache_dir is not None else mnist_cache_dir()
  base_url = base_url or os.environ.get("TINYCORE_MNIST_URL") or MNIST_URL
  x_train, y_train, x_test, y_test = (parse_idx(_fetch_verified(name, cache, base_url, offline, timeout)) for name in MNIST_SHA256)
  for x, y in ((x_train, y_train), (x_test, y_test)):
    if x.ndim != 3 or y.shape != x.shape[:1]: raise ValueError(f"MNIST images {x.shape} and labels {y.shape} do not match")
  return x_train, y_train, x_test, y_test

class Digits(NamedTuple):
  """Images float32 [N,1,28,28] in [0,1] and int32 labels 0-9; `name` says which dataset they came from."""
  name: str  # "mnist" or "sklearn_digits"
  X_train: np.ndarray
  Y_train: np.ndarray
  X_test: np.ndarray
  Y_test: np.ndarray

def _sklearn_digits(test_fraction: float = 0.2, seed: int = 0) -> Digits:
  from sklearn.datasets import load_digits  # ships its 1797 8x8 digits inside the package: no download
  digits = load_digits()
  # 8x8 -> 24x24 by repeating each pixel 3x3, plus a 2-pixel blank margin: the 28x28 frame MNIST digits sit in
  images = np.pad(digits.images.repeat(3, axis=1).repeat(3, axis=2), ((0, 0), (2, 2), (2, 2)))
  images = (images / 16.0).astype(np.float32)[:, None]  # pixel values run 0..16
  order = np.random.default_rng(seed).permutation(len(images))
  test, train = order[:round(len(images) * test_fraction)], order[round(len(images) * test_fraction):]
  labels = digits.target.astype(np.int32)
  return Digits("sklearn_digits", images[train], labels[train], images[test], labels[test])

def load_digits_dataset(prefer_mnist: bool = True, cache_dir=None, timeout: float = 5.0) -> Digits:
  """MNIST when the cache or a download gives it (a short timeout), else scikit-learn's digits in the same format.

  Falling back warns with the reason; the returned `name` says which dataset was used. The sklearn split is fixed:
  a seeded permutation with 20% held out."""
  if prefer_mnist:
    try:
      x_train, y_train, x_test, y_test = fetch_mnist(cache_dir, timeout=timeout)
      return Digits("mnist", (x_train / np.float32(255))[:, None], y_train.astype(np.int32),
                    (x_test / np.float32(255))[:, None], y_test.astype(np.int32))
    except Exception as e:
      warnings.warn(f"MNIST unavailable ({e}); falling back to scikit-learn's bundled 8x8 digits", stacklevel=2)
  return _sklearn_digits()
