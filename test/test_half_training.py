"""Half-precision training (`python -m tinycore.examples.train_digits --dtype float16|bfloat16`): the digits convnet and the
MLP follow float32's loss on CPU, PYTHON and the NV emulator, their matmuls and convolutions run on the tensor cores of
PYTHON and NV, and a loss that overflows stops training with an error."""
from importlib import import_module
from importlib.util import find_spec
import numpy as np
import pytest
from tinycore import Tensor, Device, dtypes
from tinycore.uop import Ops
from tinycore.codegen import get_program
from tinycore.nn import optim
from tinycore.nn.state import get_parameters
from tinycore.datasets import load_digits_dataset
from tinycore.examples.train_digits import MODELS, to_dtype, digits_loss, main

DIGITS = load_digits_dataset(prefer_mnist=False)   # scikit-learn's bundled digits: no network
EPS = {"float16": 2 ** -10, "bfloat16": 2 ** -7}    # the spacing of the dtype's values in [1, 2)
LR = {"convnet": 3e-3, "mlp": 1e-2}                 # Adam's: the loss falls far in a few steps and smoothly

def step_tensors(model, opt, dtype, x: np.ndarray, y: np.ndarray) -> tuple[Tensor, list[Tensor]]:
  """One training step as the example builds it, lazily: the loss (in float32) and what the optimizer assigns."""
  opt.zero_grad()
  loss = digits_loss(model, Tensor(x), Tensor(y), dtype, len(x))
  loss.backward()
  return loss, opt.schedule_step()

def overfit(model_name: str, width: int, batch: int, steps: int, dtype_name: str) -> tuple[np.ndarray, list]:
  """Adam steps on the first `batch` training images, on the default device: the losses, and the programs of the first
  step's kernels as that device's renderer compiles them."""
  dtype = getattr(dtypes, dtype_name)
  Tensor.manual_seed(0)
  model = to_dtype(MODELS[model_name][0](width), dtype)
  opt = optim.Adam(get_parameters(model), lr=LR[model_name])
  x, y, losses, programs = DIGITS.X_train[:batch], DIGITS.Y_train[:batch], [], []
  with Tensor.train():
    for i in range(steps):
      loss, updates = step_tensors(model, opt, dtype, x, y)
      if i == 0: programs = [get_program(si.ast, Device.renderer(Device.DEFAULT)) for si in loss.schedule(*updates) if si.ast.op is Ops.SINK]
      losses.append(loss.realize(*updates).item())
  return np.array(losses), programs

_float32: dict[tuple, np.ndarray] = {}
def float32_losses(model_name: str, width: int, batch: int, steps: int) -> np.ndarray:
  """The reference: the same steps in float32 on CPU (once per configuration)."""
  key = (model_name, width, batch, steps)
  pytest.importorskip("tinygrad_cpu")
  if key not in _float32:
    default, Device.DEFAULT = Device.DEFAULT, "CPU"
    try: _float32[key] = overfit(model_name, width, batch, steps, "float32")[0]
    finally: Device.DEFAULT = default
  return _float32[key]

def assert_follows_float32(losses: np.ndarray, ref: np.ndarray, dtype_name: str) -> None:
  """Every step's loss within 4 eps (times float32's first loss) of float32's, and it falls at least 80% as far.
  Why 4 eps: every tensor is rounded to the dtype (u = eps/2 each); the logits are a few roundings deep (input, weights,
  activations: ~2 eps), and the trajectories drift apart step by step. Measured on CPU over 12 and 20 steps of these
  models the largest gap was 0.64 eps (convnet) and 0.11 eps (MLP) in float16, 0.15 and 1.8 eps in bfloat16. A tensor
  core off by 1% in its products (PYTHON's WMMA scaled by 1.01, tried) fails the float16 MLP run."""
  bound = 4 * EPS[dtype_name] * ref[0]
  assert np.all(np.isfinite(losses)) and np.abs(losses - ref).max() <= bound, (losses, ref, bound)
  assert ref[-1] < 0.9 * ref[0] and losses[0] - losses[-1] >= 0.8 * (ref[0] - ref[-1]), (losses, ref)

def wmma_kernels(programs) -> list[str]: return [p.name for p in programs if any(u.op is Ops.WMMA for u in p.uops)]

@pytest.fixture
def on(monkeypatch):
  """Make a device the default for the test (NV through its emulator)."""
  def use(device: str):
    if device == "CPU": pytest.importorskip("tinygrad_cpu")
    if device == "NV":
      pytest.importorskip("tinygrad_nv")
      monkeypatch.setenv("NV_EMULATE", "1")
    monkeypatch.setattr(Device, "DEFAULT", device)
  return use

# CPU has no tensor cores: half precision there checks the arithmetic (float32 sums of exact products, master weights)
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("model_name,width", [("convnet", 8), ("mlp", 64)])
def test_half_training_follows_float32_on_cpu(on, model_name, width, dtype_name):
  on("CPU")
  losses, _ = overfit(model_name, width, 16, 8, dtype_name)
  assert_follows_float32(losses, float32_losses(model_name, width, 16, 8), dtype_name)

# PYTHON runs WMMA from its own definition, the NV emulator runs mma.sync m16n8k16 as the PTX ISA lays it out: a few steps
# each (PYTHON's interpreter and the emulator are slow; the convnet's BatchNorm sums are the slowest kernels, so batch 1)
DEVICE_RUNS = [("PYTHON", "mlp", 32, 16, 3, "float16"), ("PYTHON", "mlp", 32, 16, 3, "bfloat16"), ("PYTHON", "convnet", 8, 1, 2, "float16"),
               ("NV", "mlp", 32, 16, 3, "float16"), ("NV", "mlp", 32, 16, 3, "bfloat16"), ("NV", "convnet", 8, 1, 2, "bfloat16")]

@pytest.mark.parametrize("device,model_name,width,batch,steps,dtype_name", DEVICE_RUNS)
def test_half_training_on_tensor_cores_follows_float32(on, device, model_name, width, batch, steps, dtype_name):
  ref = float32_losses(model_name, width, batch, steps)
  on(device)
  losses, programs = overfit(model_name, width, batch, steps, dtype_name)
  assert wmma_kernels(programs), f"no kernel of the {model_name}'s step uses {device}'s tensor core"
  if device == "NV": assert all("mma.sync.aligned.m16n8k16" in p.src for p in programs if p.name in wmma_kernels(programs))
  assert_follows_float32(losses, ref, dtype_name)

# the example's default sizes (batch 64): every matmul and convolution of a step on the tensor core, forward and backward
MATMULS = {"mlp": 8,       # 3 layers forward, 3 weight gradients, 2 input gradients (the images need none)
           "convnet": 5}   # the convolution and its weight gradient, the classifier forward and its two gradients

@pytest.mark.parametrize("model_name", list(MATMULS))
def test_every_matmul_of_a_step_is_on_the_tensor_core(monkeypatch, model_name):
  """(float16 here; the bfloat16 instructions run in the tests above)"""
  monkeypatch.setattr(Device, "DEFAULT", "NULL")   # schedules without running anything
  dtype = dtypes.float16
  model = to_dtype(MODELS[model_name][0](MODELS[model_name][1]), dtype)
  opt = optim.Adam(get_parameters(model), lr=3e-3)
  with Tensor.train(): loss, updates = step_tensors(model, opt, dtype, np.zeros((64, 1, 28, 28), np.float32), np.zeros(64, np.int32))
  asts = [si.ast for si in loss.schedule(*updates) if si.ast.op is Ops.SINK]
  renderers = [Device.renderer("PYTHON")] + ([import_module("tinygrad_nv.renderer").PTXRenderer("sm_90")] if find_spec("tinygrad_nv") else [])
  for ren in renderers:
    programs = [get_program(ast, ren) for ast in asts]
    tc = wmma_kernels(programs)
    assert len(tc) == MATMULS[model_name], (ren.device, tc)
    if ren.device == "NV" and (ptxas := import_module("tinygrad_nv.assembler").find_ptxas()):   # and every kernel assembles
      assert not import_module("tinygrad_nv.ptxas_check").check([p.src for p in programs], "sm_90", ptxas)

def test_an_overflowing_loss_stops_training(tmp_path):
  """float16 ends at 65504: weights stepped by lr=1e4 overflow the logits at once; the example stops with an error naming
  the step and what to do, instead of training on inf/NaN."""
  pytest.importorskip("tinygrad_cpu")
  args = ["--model", "mlp", "--width", "16", "--epochs", "1", "--subset", "16", "--batch-size", "8", "--dataset", "sklearn",
          "--out", str(tmp_path), "--no-progress", "--dtype", "float16"]
  with pytest.raises(FloatingPointError, match=r"training loss is (nan|inf) at step 1 .*float16.*--dtype bfloat16"): main(args + ["--lr", "1e4"])
  res = main(args)   # the same run at the default rate trains
  assert all(np.isfinite(res["losses"])) and res["checkpoint"].name == "digits_mlp.safetensors"
