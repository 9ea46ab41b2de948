"""tinygrad's dataset loaders (`from tinygrad.nn.datasets import mnist, cifar`): uint8 Tensors from a local cache or a path.

Nothing here downloads unless asked (download=True): a missing file raises DatasetUnavailable naming where to put it."""
from __future__ import annotations
import os
from pathlib import Path
import numpy as np
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.datasets import DatasetUnavailable, fetch_mnist, parse_idx, MNIST_SHA256
from tinycore.nn.state import tar_extract

CIFAR_FILE = "cifar-10-binary.tar.gz"

def _data_dir(name: str) -> Path:
  return Path(os.environ.get("TINYCORE_DATA") or Path.home() / ".cache" / "tinycore") / name

def mnist(device: str | None = None, fashion: bool = False, path: str | Path | None = None, download: bool = False):
  """(X_train uint8 [60000,1,28,28], Y_train uint8 [60000], X_test uint8 [10000,1,28,28], Y_test uint8 [10000]).

  The four IDX files (gzip'd or not, MNIST's names) come from `path` if given, else from the cache (MNIST:
  tinycore.datasets.mnist_cache_dir(), checked against MNIST's SHA-256 sums and downloaded there only with download=True;
  Fashion-MNIST: $TINYCORE_DATA/fashion-mnist or ~/.cache/tinycore/fashion-mnist, never downloaded)."""
  if path is None and not fashion: arrays = fetch_mnist(offline=not download)
  else:
    folder = Path(path) if path is not None else _data_dir("fashion-mnist")
    def read(name: str) -> np.ndarray:
      for f in (folder / name, folder / name.removesuffix(".gz")):
        if f.is_file(): return parse_idx(f.read_bytes())
      raise DatasetUnavailable(f"{folder / name} is missing: put the {'Fashion-' if fashion else ''}MNIST file {name} there")
    arrays = tuple(read(name) for name in MNIST_SHA256)
  x_train, y_train, x_test, y_test = (Tensor(a, device=device, dtype=dtypes.uint8) for a in arrays)
  return x_train.reshape(-1, 1, 28, 28), y_train, x_test.reshape(-1, 1, 28, 28), y_test

def cifar(device: str | None = None, path: str | Path | None = None):
  """(X_train uint8 [50000,3,32,32], Y_train uint8 [50000], X_test uint8 [10000,3,32,32], Y_test uint8 [10000]) from
  CIFAR-10's binary archive (cifar-10-binary.tar.gz) at `path`, else in $TINYCORE_DATA/cifar10 or ~/.cache/tinycore/cifar10."""
  archive = Path(path) if path is not None else _data_dir("cifar10") / CIFAR_FILE
  if not archive.is_file(): raise DatasetUnavailable(f"{archive} is missing: put CIFAR-10's binary archive {CIFAR_FILE} there")
  files = tar_extract(archive)
  def rows(names: list[str]) -> np.ndarray:
    missing = [n for n in names if n not in files]
    if missing: raise DatasetUnavailable(f"{archive} lacks {missing}: is it CIFAR-10's binary version?")
    return np.concatenate([files[n].numpy().reshape(-1, 3073) for n in names])  # a label byte, then 3*32*32 pixels
  train = rows([f"cifar-10-batches-bin/data_batch_{i}.bin" for i in range(1, 6)])
  test = rows(["cifar-10-batches-bin/test_batch.bin"])
  def split(r: np.ndarray): return Tensor(r[:, 1:].reshape(-1, 3, 32, 32), device=device), Tensor(r[:, 0], device=device)
  return (*split(train), *split(test))
