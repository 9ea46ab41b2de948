"""Tests of tinycore.datasets without the network: IDX parsing, verified caching against a file:// mirror, the fallback."""
import gzip, hashlib, struct, warnings
import numpy as np
import pytest
from tinycore import datasets
from tinycore.datasets import DatasetUnavailable, fetch_mnist, load_digits_dataset, mnist_cache_dir, parse_idx

def idx_bytes(a: np.ndarray, code: int) -> bytes:
  return bytes([0, 0, code, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(a.dtype.newbyteorder(">")).tobytes()

IDX_CASES = [(np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4), 0x08), (np.array([-5, 7], np.int8), 0x09),
             (np.array([[-300, 2], [4, 5]], np.int16), 0x0B), (np.array([2**31 - 1, -2**31], np.int32), 0x0C),
             (np.array([1.5, -np.inf], np.float32), 0x0D), (np.array([[np.pi]], np.float64), 0x0E)]

@pytest.mark.parametrize("array,code", IDX_CASES, ids=lambda x: getattr(x, "dtype", None) and x.dtype.name)
def test_parse_idx_plain_and_gzip(array, code):
  for data in (idx_bytes(array, code), gzip.compress(idx_bytes(array, code))):
    parsed = parse_idx(data)
    assert parsed.dtype == array.dtype and parsed.dtype.isnative and parsed.flags.writeable
    np.testing.assert_array_equal(parsed, array)

GOOD = idx_bytes(np.zeros((2, 3), np.uint8), 0x08)
@pytest.mark.parametrize("data,message", [
  (b"", "magic"), (b"\x01\x00\x08\x01", "magic"), (b"\x00\x00\x07\x01" + bytes(8), "dtype code 0x07"),
  (GOOD[:9], "truncated IDX header"), (GOOD[:-1], "truncated"), (GOOD + b"\x00", "trailing bytes"),
  (gzip.compress(GOOD, mtime=0)[:-6], "does not decompress"), (b"\x1f\x8bnot gzip at all", "does not decompress")])
def test_parse_idx_rejects_malformed(data, message):
  with pytest.raises(ValueError, match=message): parse_idx(data)

@pytest.fixture
def mirror(tmp_path, monkeypatch):
  """A tiny MNIST-shaped file:// mirror; MNIST_SHA256 is pointed at its files."""
  rng = np.random.default_rng(0)
  arrays = {"train-images-idx3-ubyte.gz": (rng.integers(0, 256, (6, 28, 28), dtype=np.uint8), 0x08),
            "train-labels-idx1-ubyte.gz": (rng.integers(0, 10, 6, dtype=np.uint8), 0x08),
            "t10k-images-idx3-ubyte.gz": (rng.integers(0, 256, (4, 28, 28), dtype=np.uint8), 0x08),
            "t10k-labels-idx1-ubyte.gz": (rng.integers(0, 10, 4, dtype=np.uint8), 0x08)}
  server = tmp_path / "server"
  server.mkdir()
  for name, (a, code) in arrays.items(): (server / name).write_bytes(gzip.compress(idx_bytes(a, code)))
  monkeypatch.setattr(datasets, "MNIST_SHA256", {n: hashlib.sha256((server / n).read_bytes()).hexdigest() for n in arrays})
  monkeypatch.delenv("TINYCORE_MNIST_URL", raising=False)
  return server, [a for a, _ in arrays.values()]

def test_fetch_downloads_verifies_and_caches(tmp_path, mirror):
  server, expected = mirror
  got = fetch_mnist(tmp_path / "cache", base_url=server.as_uri())
  for a, b in zip(got, expected): np.testing.assert_array_equal(a, b)
  assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(datasets.MNIST_SHA256)  # no partial files left
  for p in server.iterdir(): p.unlink()  # the mirror is gone: the verified cache serves, online or offline
  for offline in (False, True):
    for a, b in zip(fetch_mnist(tmp_path / "cache", offline=offline, base_url=server.as_uri()), expected): np.testing.assert_array_equal(a, b)

def test_corrupt_cache_file_is_downloaded_again(tmp_path, mirror):
  server, expected = mirror
  cache = tmp_path / "cache"
  cache.mkdir()
  (cache / "t10k-labels-idx1-ubyte.gz").write_bytes(b"half a download")
  got = fetch_mnist(cache, base_url=server.as_uri() + "/")
  np.testing.assert_array_equal(got[3], expected[3])
  assert (cache / "t10k-labels-idx1-ubyte.gz").read_bytes() == (server / "t10k-labels-idx1-ubyte.gz").read_bytes()
  (cache / "t10k-labels-idx1-ubyte.gz").write_bytes(b"corrupt again")
  with pytest.raises(DatasetUnavailable, match="corrupt and offline=True"): fetch_mnist(cache, offline=True)

def test_mirror_serving_wrong_bytes_is_refused(tmp_path, mirror):
  server, _ = mirror
  (server / "train-labels-idx1-ubyte.gz").write_bytes(b"tampered")
  with pytest.raises(DatasetUnavailable, match="SHA-256"): fetch_mnist(tmp_path / "cache", base_url=server.as_uri())
  assert not (tmp_path / "cache" / "train-labels-idx1-ubyte.gz").exists()
  assert not list((tmp_path / "cache").glob("*.part"))

def test_unreachable_mirror_and_offline_miss(tmp_path, mirror, monkeypatch):
  with pytest.raises(DatasetUnavailable, match="could not download file:"): fetch_mnist(tmp_path / "cache", base_url=(tmp_path / "nowhere").as_uri())
  monkeypatch.setenv("TINYCORE_MNIST_URL", (tmp_path / "nowhere").as_uri())
  with pytest.raises(DatasetUnavailable, match="nowhere"): fetch_mnist(tmp_path / "cache")
  with pytest.raises(DatasetUnavailable, match="missing and offline=True"): fetch_mnist(tmp_path / "cache", offline=True)

def test_cache_dir_follows_tinycore_data(tmp_path, monkeypatch, mirror):
  monkeypatch.setenv("TINYCORE_DATA", str(tmp_path / "data"))
  assert mnist_cache_dir() == tmp_path / "data" / "mnist"
  fetch_mnist(base_url=mirror[0].as_uri())
  assert (tmp_path / "data" / "mnist" / "train-images-idx3-ubyte.gz").exists()
  monkeypatch.delenv("TINYCORE_DATA")
  assert mnist_cache_dir().parts[-3:] == (".cache", "tinycore", "mnist")

def test_sklearn_fallback_format_and_deterministic_split():
  pytest.importorskip("sklearn")
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # prefer_mnist=False goes straight to sklearn, without a warning
    d = load_digits_dataset(prefer_mnist=False)
  assert d.name == "sklearn_digits"
  assert d.X_train.shape == (1438, 1, 28, 28) and d.X_test.shape == (359, 1, 28, 28)
  assert d.X_train.dtype == d.X_test.dtype == np.float32 and d.Y_train.dtype == d.Y_test.dtype == np.int32
  assert d.X_train.min() == 0 and d.X_train.max() == 1 and set(np.unique(d.Y_train)) == set(range(10))
  assert not d.X_train[:, :, :2].any() and not d.X_train[:, :, :, -2:].any()  # the blank margin
  from sklearn.datasets import load_digits
  ref = load_digits()
  label_of = {img.tobytes(): label for img, label in zip(ref.images.astype(np.float32) / 16, ref.target)}
  for x, y in zip(np.concatenate([d.X_train, d.X_test]), np.concatenate([d.Y_train, d.Y_test])):
    assert label_of[x[0, 2:26:3, 2:26:3].tobytes()] == y  # every image kept its own label
  again = load_digits_dataset(prefer_mnist=False)
  for a, b in zip(d[1:], again[1:]): np.testing.assert_array_equal(a, b)

def test_falls_back_when_mnist_fails(monkeypatch):
  pytest.importorskip("sklearn")
  def offline(*args, **kwargs): raise DatasetUnavailable("could not download http://mirror/x: no network")
  monkeypatch.setattr(datasets, "fetch_mnist", offline)
  with pytest.warns(UserWarning, match="no network"): d = load_digits_dataset()
  assert d.name == "sklearn_digits"

def test_uses_mnist_when_available(monkeypatch):
  x = np.full((5, 28, 28), 255, np.uint8)
  monkeypatch.setattr(datasets, "fetch_mnist", lambda *a, **k: (x, np.arange(5, dtype=np.uint8), x[:2], np.arange(2, dtype=np.uint8)))
  d = load_digits_dataset()
  assert d.name == "mnist" and d.X_train.shape == (5, 1, 28, 28) and d.X_test.shape == (2, 1, 28, 28)
  assert d.X_train.dtype == np.float32 and d.X_train.max() == 1 and d.Y_train.dtype == np.int32
