"""Networks exported from PyTorch (both torch.onnx exporters) run by OnnxRunner on CPU and WEBGPU, checked against onnxruntime."""
import io, os
import numpy as np
import pytest

try: import torch
except ImportError:
  if os.environ.get("CI"): raise  # CI installs torch: a missing one is a failure there
  pytest.skip("exporting models needs torch (pip install torch==2.13.0)", allow_module_level=True)
ort = pytest.importorskip("onnxruntime", reason="the reference is onnxruntime: pip install -e '.[test]'")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tinycore.nn.onnx import OnnxRunner  # noqa: E402

class ConvNet(nn.Module):
  """Convolutions with batch norm, max and average pooling, a linear head."""
  def __init__(self):
    super().__init__()
    self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
    self.c2, self.b2 = nn.Conv2d(8, 16, 3, stride=2), nn.BatchNorm2d(16)
    self.fc = nn.Linear(16, 10)
  def forward(self, x):
    x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
    x = F.avg_pool2d(F.relu(self.b2(self.c2(x))), 2, ceil_mode=True)
    return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)).softmax(-1)

class MobileBlock(nn.Module):
  """An inverted residual: pointwise expand, depthwise 3x3, squeeze-and-excite, hardswish, pointwise project, skip."""
  def __init__(self, c=8, e=24):
    super().__init__()
    self.expand, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
    self.dw, self.bn2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
    self.se1, self.se2 = nn.Conv2d(e, 6, 1), nn.Conv2d(6, e, 1)
    self.project, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)
  def forward(self, x):
    y = F.relu6(self.bn1(self.expand(x)))
    y = F.hardswish(self.bn2(self.dw(y)))
    y = y * F.hardsigmoid(self.se2(F.relu(self.se1(y.mean((2, 3), keepdim=True)))))
    return x + self.bn3(self.project(y))

class Transformer(nn.Module):
  """An embedding, a causal-masked encoder layer (multi-head attention, layer norm, GELU MLP) and a head."""
  def __init__(self, vocab=50, d=32):
    super().__init__()
    self.emb = nn.Embedding(vocab, d)
    self.layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
    self.head = nn.Linear(d, vocab)
  def forward(self, ids):
    n = ids.shape[1]
    mask = torch.triu(torch.full((n, n), float("-inf")), 1)
    return self.head(self.layer(self.emb(ids), src_mask=mask))

class Recurrent(nn.Module):
  """A bidirectional LSTM feeding a GRU."""
  def __init__(self):
    super().__init__()
    self.lstm = nn.LSTM(6, 8, batch_first=True, bidirectional=True)
    self.gru = nn.GRU(16, 5, batch_first=True)
  def forward(self, x):
    y, _ = self.lstm(x)
    y, h = self.gru(y)
    return y, h

class IntegerWork(nn.Module):
  """Integer and indexing work: top-k, cumulative sums, gathers, padding modes, casts, remainders."""
  def forward(self, x, idx):
    vals, pos = torch.topk(x, 3, dim=-1)
    cs = torch.cumsum(pos, -1)
    g = torch.gather(x, 1, idx)
    q = (x * 10).to(torch.int32)
    rem = torch.remainder(q, 7)
    p = torch.cat([F.pad(x.unsqueeze(0), (2, 2), mode=m).squeeze(0) for m in ("reflect", "replicate", "circular")], -1)
    return vals, cs, g, rem, p, x[:, 1::2].argmax(-1)

def _models():
  torch.manual_seed(0)
  ids = torch.randint(0, 50, (2, 7))
  return {
    "convnet": (ConvNet(), (torch.randn(2, 3, 16, 16),)),
    "mobile_block": (MobileBlock(), (torch.randn(2, 8, 10, 10),)),
    "transformer": (Transformer(), (ids,)),
    "recurrent": (Recurrent(), (torch.randn(2, 5, 6),)),
    "integer_work": (IntegerWork(), (torch.randn(4, 9), torch.randint(0, 9, (4, 5)))),
  }

def _export(model, args, dynamo: bool) -> bytes:
  model.eval()
  for m in model.modules():  # non-trivial batch-norm statistics, so normalisation is really checked
    if isinstance(m, nn.BatchNorm2d):
      m.running_mean.uniform_(-0.5, 0.5)
      m.running_var.uniform_(0.5, 2.0)
  f = io.BytesIO()
  names = [f"in{i}" for i in range(len(args))]
  # the fused fast path of nn.TransformerEncoderLayer is one op the TorchScript exporter cannot write: take the plain layers
  torch.backends.mha.set_fastpath_enabled(False)
  with torch.no_grad():
    if dynamo:
      prog = torch.onnx.export(model, args, dynamo=True, input_names=names, verbose=False)
      return prog.model_proto.SerializeToString()
    torch.onnx.export(model, args, f, dynamo=False, input_names=names, opset_version=17)
  return f.getvalue()

def _devices():
  from tinycore.runtime.device import Device
  out = ["CPU"]
  try:
    Device["WEBGPU"]
    out.append("WEBGPU")
  except Exception as e:  # no adapter or no wgpu: a skip outside CI, a failure in CI
    if os.environ.get("CI"): raise
    print(f"WEBGPU not available: {e}")
  return out

@pytest.fixture(scope="module")
def exported():
  cache = {}
  def get(name: str, dynamo: bool):
    if (name, dynamo) not in cache:
      model, args = _models()[name]
      cache[(name, dynamo)] = (_export(model, args, dynamo), [a.numpy() for a in args])
    return cache[(name, dynamo)]
  return get

@pytest.mark.parametrize("device", ["CPU", "WEBGPU"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(_models()))
def test_matches_onnxruntime(name, dynamo, device, exported):
  if device not in _devices(): pytest.skip(f"{device} is not available here")
  raw, args = exported(name, dynamo)
  sess = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  feeds = {i.name: a for i, a in zip(sess.get_inputs(), args)}
  refs = sess.run(None, feeds)
  got = OnnxRunner(raw, device=device)(feeds)
  assert len(got) == len(refs)
  for (k, g), ref in zip(got.items(), refs):
    g = g.numpy()
    assert g.shape == ref.shape, f"{k}: shape {g.shape} != {ref.shape}"
    if ref.dtype.kind in "biu": np.testing.assert_array_equal(g, ref, err_msg=k)
    else: np.testing.assert_allclose(g, ref, rtol=1e-3, atol=1e-4, err_msg=k)

def _export_dynamic(model, args, dynamo: bool) -> bytes:
  """Exported with dimension 0 of every input named "batch" (a dim_param)."""
  model.eval()
  torch.backends.mha.set_fastpath_enabled(False)
  names = [f"in{i}" for i in range(len(args))]
  with torch.no_grad():
    if dynamo:
      dims = tuple({0: torch.export.Dim("batch", min=1, max=64)} for _ in args)
      return torch.onnx.export(model, args, dynamo=True, input_names=names, dynamic_shapes=dims, verbose=False).model_proto.SerializeToString()
    f = io.BytesIO()
    torch.onnx.export(model, args, f, dynamo=False, input_names=names, opset_version=17, dynamic_axes={n: {0: "batch"} for n in names})
  return f.getvalue()

@pytest.mark.parametrize("device", ["CPU", "WEBGPU"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", ["convnet", "transformer"])
def test_named_batch_dimension_compiles_once(name, dynamo, device):
  # batch 1 compiles; batch 3 (the jit's capture) and 7 (a replay) run the very same kernels, with results of their own size
  if device not in _devices(): pytest.skip(f"{device} is not available here")
  from tinycore import engine
  model, args = _models()[name]
  raw = _export_dynamic(model, args, dynamo)
  sess = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  run, rng = OnnxRunner(raw, device=device), np.random.default_rng(0)
  compiled = []
  for b in (1, 3, 7):
    feeds = {i.name: (rng.integers(0, 50, (b, *a.shape[1:])) if a.dtype == torch.int64 else rng.standard_normal((b, *a.shape[1:])))
             .astype(a.numpy().dtype) for i, a in zip(sess.get_inputs(), args)}
    before = engine.stats["loaded"]
    got = [v.numpy() for v in run(feeds).values()]
    compiled.append(engine.stats["loaded"] - before)
    for g, ref in zip(got, sess.run(None, feeds), strict=True):
      assert g.shape == ref.shape
      np.testing.assert_allclose(g, ref, rtol=1e-3, atol=1e-4)
  assert compiled[0] > 0 and compiled[1:] == [0, 0], f"kernels compiled per call: {compiled}"
  assert run.symbolic and not run.reads_data and len(run.jits) == 1
