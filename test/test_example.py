"""The digits example end to end on a tiny subset (a smoke run: it trains, evaluates, writes a checkpoint and a loss curve)."""
import struct, zlib
import numpy as np
from safetensors.numpy import load_file
from tinycore.examples.train_digits import main, write_png, _line_chart

def read_png(path) -> np.ndarray:
  """Decode an 8-bit RGB PNG with filter 0 rows (what write_png writes), checking every chunk's CRC."""
  data = path.read_bytes()
  assert data[:8] == b"\x89PNG\r\n\x1a\n"
  pos, chunks = 8, {}
  while pos < len(data):
    n, tag = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    assert struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(tag + body), f"bad CRC in {tag}"
    chunks[tag] = chunks.get(tag, b"") + body
    pos += 12 + n
  w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
  assert (depth, color) == (8, 2) and b"IEND" in chunks
  rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 1 + 3 * w)
  assert (rows[:, 0] == 0).all()
  return rows[:, 1:].reshape(h, w, 3)

def test_png_writer_round_trips(tmp_path):
  img = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
  write_png(tmp_path / "x.png", img)
  np.testing.assert_array_equal(read_png(tmp_path / "x.png"), img)
  chart = _line_chart([2.0, 1.0, 0.5, 0.4], width=120, height=80, margin=10)
  assert chart.shape == (80, 120, 3) and ((chart == (31, 119, 180)).all(-1)).sum() > 100  # the curve is drawn

def test_train_digits_smoke(tmp_path):
  out = tmp_path / "run"
  # 2 steps of 2 images: the plain run and the TinyJit capture; replays are covered by test_jit.py
  res = main(["--epochs", "1", "--subset", "4", "--batch-size", "2", "--width", "1", "--dataset", "sklearn", "--out", str(out), "--no-progress"])
  assert res["dataset"] == "sklearn_digits" and 0.0 <= res["accuracy"] <= 1.0 and len(res["losses"]) == 2
  assert all(np.isfinite(res["losses"]))
  weights = load_file(res["checkpoint"])
  assert weights["layers.0.weight"].shape == (1, 1, 3, 3) and weights["layers.5.weight"].shape == (10, 13 * 13)
  assert res["loss_curve"] == out / "loss_curve.png" and res["loss_curve"].stat().st_size > 100
  assert res["loss_curve"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
