"""Train a small convnet (or an MLP) on handwritten digits (MNIST, else scikit-learn's digits), in float32 or half
precision: accuracy, checkpoint, loss curve."""
from __future__ import annotations
import argparse, math, struct, sys, time, zlib
from pathlib import Path
import numpy as np
from tinycore import Tensor, Device, dtypes
from tinycore.dtype import DType
from tinycore import nn, distributed
from tinycore.nn import optim
from tinycore.nn.state import get_parameters, get_state_dict, safetensors_save
from tinycore.jit import TinyJit
from tinycore.datasets import load_digits_dataset

class ConvNet:
  """conv-batchnorm-relu-maxpool, then a linear classifier: 1x28x28 -> 10 logits.
  One convolution: a second one's input gradient is today's slowest kernel on the CPU backend by far (see bench/train.py)."""
  def __init__(self, width: int = 16):
    self.layers = [nn.Conv2d(1, width, 3), nn.BatchNorm(width), Tensor.relu, Tensor.max_pool2d, lambda x: x.flatten(1),
                   nn.Linear(width * 13 * 13, 10)]
  def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)

class MLP:
  """Matmuls and ReLUs: 1x28x28 -> width -> width -> 10 logits (the tensor cores' work, nearly all of it)."""
  def __init__(self, width: int = 512):
    self.layers = [lambda x: x.flatten(1), nn.Linear(28 * 28, width), Tensor.relu, nn.Linear(width, width), Tensor.relu, nn.Linear(width, 10)]
  def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)

MODELS = {"convnet": (ConvNet, 16), "mlp": (MLP, 512)}   # the class and its default width

def to_dtype(model, dtype: DType):
  """The model's float tensors (parameters and BatchNorm's statistics) in dtype, in place; returns the model."""
  for t in get_state_dict(model).values():
    if dtypes.is_float(t.dtype) and t.dtype != dtype: t.replace(t.cast(dtype).realize())
  return model

def digits_loss(model, x: Tensor, y: Tensor, dtype: DType, batch_size: int) -> Tensor:
  """The training loss: the images cast to the model's dtype, the cross-entropy in float32 from the logits (the
  log-softmax's exp and log in half would round to 2^-11). Summed over the images given and divided by the whole batch's
  size, so slices' losses (ranks') add up."""
  return model(x.cast(dtype)).float().sparse_categorical_crossentropy(y, reduction="sum").div(batch_size)

def evaluate(model, X: np.ndarray, Y: np.ndarray, batch_size: int = 500, devices: tuple[str, ...] | None = None,
             dtype: DType = dtypes.float32) -> float:
  """Accuracy in eval mode (BatchNorm uses its running statistics); images cast to the model's dtype."""
  was_training, Tensor.training = Tensor.training, False
  try:
    hits = sum(int((model((Tensor(X[i:i + batch_size]).to(devices) if devices else Tensor(X[i:i + batch_size])).cast(dtype))
                    .argmax(-1).numpy() == Y[i:i + batch_size]).sum()) for i in range(0, len(X), batch_size))
  finally: Tensor.training = was_training
  return hits / len(X)

def train(epochs: int | None, batch_size: int, lr: float, out_dir: Path, subset: int | None = None, use_jit: bool = True, prefer_mnist: bool = True,
          seed: int = 0, progress: bool = True, width: int | None = None, devices: tuple[str, ...] | None = None, distributed_: bool = False,
          model_name: str = "convnet", dtype_name: str = "float32") -> dict:
  """devices: data parallel over these devices in this process (each batch sharded along its first axis, the parameters
  replicated). distributed_: data parallel over the MPI ranks of `mpiexec -n N` (each rank its slice of every batch,
  gradients all-reduced between backward and the update; composes with devices). dtype_name: float32, float16 or bfloat16,
  the dtype of parameters, activations and gradients (half: products summed in float32, on tensor cores where the device
  has them; the optimizer keeps float32 master weights; the loss is computed in float32). A loss that is not finite
  stops training with an error."""
  if distributed_:
    distributed.init()
    use_jit, progress = False, progress and distributed.rank == 0  # the exchange between ranks happens in Python: not replayable
  parts = (len(devices) if devices else 1) * distributed.world_size
  if batch_size % parts: raise SystemExit(f"batch size {batch_size} does not split evenly over {parts} devices and ranks")
  data = load_digits_dataset(prefer_mnist=prefer_mnist)
  # MNIST has 40x the images of sklearn's digits: each default is sized to train in under 3 minutes on 2 cores
  epochs = epochs or (2 if data.name == "mnist" else 15)
  X_train, Y_train, X_test, Y_test = data.X_train, data.Y_train, data.X_test, data.Y_test
  if subset is not None: X_train, Y_train, X_test, Y_test = X_train[:subset], Y_train[:subset], X_test[:subset], Y_test[:subset]
  if len(X_train) < batch_size: raise SystemExit(f"batch size {batch_size} is larger than the {len(X_train)} training images")
  Tensor.manual_seed(seed)
  rng = np.random.default_rng(seed)
  make, default_width, dtype = *MODELS[model_name], getattr(dtypes, dtype_name)
  model = to_dtype(make(width or default_width), dtype)
  if devices:
    for p in get_parameters(model): p.shard_(devices)
  steps_per_epoch = len(X_train) // batch_size  # the last partial batch is dropped: a captured step has one shape
  opt = optim.Adam(get_parameters(model), lr=lr)
  total_steps = epochs * steps_per_epoch
  sched = optim.CosineAnnealingLR(opt, T_max=total_steps, warmup_steps=min(20, total_steps // 5), start_factor=0.1)

  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    if devices: x, y = x.shard(devices, 0), y.shard(devices, 0)
    # the sum over this rank's slice divided by the global batch: the ranks' gradients add up to the global mean's
    loss = digits_loss(model, x, y, dtype, batch_size)
    loss.backward()
    if distributed_: distributed.allreduce_grads(opt.params)
    return loss.realize(*opt.schedule_step())  # forward, backward and update: one schedule, captured once by TinyJit
  train_step = TinyJit(step) if use_jit else step

  say = print if distributed.rank == 0 else (lambda *a, **k: None)
  where = ", ".join(devices) if devices else Device.DEFAULT
  if distributed_: where += f", {distributed.world_size} MPI ranks"
  say(f"training the {model_name} in {dtype_name} on {data.name}: {len(X_train)} train / {len(X_test)} test images, device {where}, "
        f"{sum(p.numel() for p in opt.params)} parameters, {epochs} epochs of {steps_per_epoch} steps")
  losses: list[float] = []
  st = time.perf_counter()
  Tensor.training = True
  try:
    for epoch in range(epochs):
      order = rng.permutation(len(X_train))
      bar = _progress(range(steps_per_epoch), f"epoch {epoch + 1}/{epochs}", progress)
      ep_st = time.perf_counter()
      for i in bar:
        idx = order[i * batch_size:(i + 1) * batch_size]
        if distributed_: idx = np.array_split(idx, distributed.world_size)[distributed.rank]
        loss = train_step(Tensor(X_train[idx]), Tensor(Y_train[idx])).item()
        if not math.isfinite(loss):   # an overflow (float16 ends at 65504) or a diverging run: never train on silently
          raise FloatingPointError(f"training loss is {loss} at step {len(losses)} ({model_name} in {dtype_name}, lr {lr}): "
                                   f"lower --lr{', or use --dtype bfloat16 (float32 range)' if dtype == dtypes.float16 else ''}")
        sched.step()
        losses.append(loss)
        if hasattr(bar, "set_postfix"): bar.set_postfix(loss=f"{loss:.3f}", img_per_s=f"{(i + 1) * batch_size / (time.perf_counter() - ep_st):.0f}")
  finally: Tensor.training = False
  train_s = time.perf_counter() - st
  acc = evaluate(model, X_test, Y_test, devices=devices, dtype=dtype)
  ckpt, curve = out_dir / f"digits_{model_name}.safetensors", out_dir / "loss_curve.png"
  if distributed.rank == 0:
    out_dir.mkdir(parents=True, exist_ok=True)
    safetensors_save({k: v.to(v.device[0]) if isinstance(v.device, tuple) else v for k, v in get_state_dict(model).items()}, ckpt,
                     metadata={"dataset": data.name, "test_accuracy": f"{acc:.4f}", "dtype": dtype_name})
    plot_losses(losses, curve)
  say(f"test accuracy {acc * 100:.2f}% on {data.name} after {train_s:.1f} s of training "
        f"({len(losses) * batch_size / train_s:.0f} images/s); wrote {ckpt} and {curve}")
  return {"dataset": data.name, "accuracy": acc, "train_seconds": train_s, "losses": losses, "checkpoint": ckpt, "loss_curve": curve}

def _progress(it, desc: str, enabled: bool):
  if not enabled: return it
  try: from tqdm import tqdm
  except ImportError: return it  # tqdm is optional (pip install tinycore[examples]); train silently without it
  return tqdm(it, desc=desc, file=sys.stdout, leave=True)

# ***** the loss curve: matplotlib when installed, else a small PNG written by hand *****

def plot_losses(losses: list[float], path: Path) -> None:
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    write_png(path, _line_chart(losses))
    return
  fig, ax = plt.subplots(figsize=(6.4, 4))
  ax.plot(losses)
  ax.set(xlabel="step", ylabel="training loss", yscale="log", title="digits")
  fig.savefig(path, dpi=100)
  plt.close(fig)

def _line_chart(values: list[float], width: int = 640, height: int = 400, margin: int = 40) -> np.ndarray:
  """An RGB image: axes and the values as a polyline on a log scale (no text: that needs a font)."""
  img = np.full((height, width, 3), 255, np.uint8)
  img[margin:height - margin + 1, margin] = img[height - margin, margin:width - margin + 1] = (96, 96, 96)
  if not values: return img
  y = np.log(np.maximum(np.asarray(values, np.float64), 1e-12))
  lo, hi = float(y.min()), float(y.max())
  px = margin + np.arange(len(y)) * (width - 2 * margin) / max(len(y) - 1, 1)
  py = height - margin - (y - lo) / (hi - lo if hi > lo else 1.0) * (height - 2 * margin)
  for (x0, y0), (x1, y1) in zip(zip(px, py), list(zip(px, py))[1:] or [(px[0], py[0])]):
    n = int(max(abs(x1 - x0), abs(y1 - y0))) + 2  # enough samples that the segment has no gaps
    xs, ys = np.linspace(x0, x1, n).round().astype(int), np.linspace(y0, y1, n).round().astype(int)
    for dy in (0, 1): img[np.clip(ys + dy, 0, height - 1), np.clip(xs, 0, width - 1)] = (31, 119, 180)
  return img

def write_png(path: Path, rgb: np.ndarray) -> None:
  """An 8-bit RGB PNG: signature, IHDR, one zlib-compressed IDAT (filter byte 0 per row), IEND."""
  h, w, _ = rgb.shape
  raw = b"".join(b"\x00" + row.tobytes() for row in np.ascontiguousarray(rgb, np.uint8))
  def chunk(tag: bytes, data: bytes) -> bytes: return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
  Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                         chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))

def main(argv: list[str] | None = None) -> dict:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--epochs", type=int, default=None, help="default: 2 on MNIST, 15 on sklearn's digits")
  p.add_argument("--batch-size", type=int, default=64)
  p.add_argument("--lr", type=float, default=3e-3)
  p.add_argument("--out", type=Path, default=Path("out/train_digits"), help="directory for the checkpoint and the loss curve")
  p.add_argument("--subset", type=int, default=None, help="use only the first N train and test images (a quick check)")
  p.add_argument("--dataset", choices=("auto", "sklearn"), default="auto", help="auto: MNIST if it can be fetched, else sklearn's digits")
  p.add_argument("--no-jit", action="store_true", help="schedule every step instead of replaying the captured kernels")
  p.add_argument("--no-progress", action="store_true")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--model", choices=tuple(MODELS), default="convnet")
  p.add_argument("--width", type=int, default=None, help="channels of the convolution (default 16), or the MLP's hidden units (default 512)")
  p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                 help="half precision: float32 sums (tensor cores where the device has them) and float32 master weights")
  p.add_argument("--devices", default=None, help="data parallel over these devices, e.g. CPU:0,CPU:1 (the batch must split evenly)")
  p.add_argument("--distributed", action="store_true", help="data parallel over MPI ranks: mpiexec -n 2 python -m tinycore.examples.train_digits --distributed")
  a = p.parse_args(argv)
  if min(1 if a.epochs is None else a.epochs, a.batch_size, 1 if a.width is None else a.width) < 1: p.error("--epochs, --batch-size and --width must be positive")
  devices = tuple(d.strip() for d in a.devices.split(",")) if a.devices else None
  return train(a.epochs, a.batch_size, a.lr, a.out, a.subset, not a.no_jit, a.dataset == "auto", a.seed, not a.no_progress, a.width,
               devices, a.distributed, a.model, a.dtype)

if __name__ == "__main__": main()
