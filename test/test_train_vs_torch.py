"""End to end against PyTorch: a convnet with BatchNorm, max-pool and Adam trains step for step like torch.nn (same weights,
same data), running statistics included, and `loss.item()` after the step is the loss the step came from. Skips without torch (CI installs it)."""
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.nn import Conv2d, BatchNorm2d, Linear
from tinycore.nn.optim import Adam

def test_convnet_with_batchnorm_and_adam_matches_torch():
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(0)
  x = rng.standard_normal((8, 1, 10, 10)).astype(np.float32)
  y = rng.integers(0, 5, 8)
  # no conv bias: BatchNorm cancels it, so its gradient is rounding noise that Adam would blow up to +-lr per step
  conv, bn, fc = Conv2d(1, 4, 3, bias=False), BatchNorm2d(4), Linear(4 * 4 * 4, 5)
  tconv, tbn, tfc = torch.nn.Conv2d(1, 4, 3, bias=False), torch.nn.BatchNorm2d(4), torch.nn.Linear(64, 5)
  for mine, theirs in [(conv.weight, tconv.weight), (fc.weight, tfc.weight), (fc.bias, tfc.bias)]:
    with torch.no_grad(): theirs.copy_(torch.from_numpy(mine.numpy()))
  params = [conv.weight, bn.weight, bn.bias, fc.weight, fc.bias]
  opt = Adam(params, lr=0.01)
  topt = torch.optim.Adam([tconv.weight, tbn.weight, tbn.bias, tfc.weight, tfc.bias], lr=0.01)
  def forward(c, b, f, xx, pool, flat): return f(flat(pool(b(c(xx)).relu())))
  losses, tlosses = [], []
  for _ in range(4):
    with Tensor.train():
      opt.zero_grad()
      loss = forward(conv, bn, fc, Tensor(x), lambda t: t.max_pool2d(2), lambda t: t.flatten(1)).sparse_categorical_crossentropy(Tensor(y))
      loss.backward()
      opt.step()
    losses.append(loss.item())
    topt.zero_grad()
    tloss = torch.nn.functional.cross_entropy(forward(tconv, tbn, tfc, torch.from_numpy(x), lambda t: torch.nn.functional.max_pool2d(t, 2),
                                                      lambda t: t.flatten(1)), torch.from_numpy(y))
    tloss.backward()
    topt.step()
    tlosses.append(tloss.item())
  np.testing.assert_allclose(losses, tlosses, rtol=1e-4, atol=1e-5)
  assert losses[-1] < losses[0]
  for mine, theirs in [(conv.weight, tconv.weight), (bn.weight, tbn.weight), (bn.bias, tbn.bias), (fc.weight, tfc.weight),
                       (bn.running_mean, tbn.running_mean), (bn.running_var, tbn.running_var)]:
    np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=str(tuple(theirs.shape)))
  # eval mode uses the running statistics, like torch's eval()
  tbn.eval()
  out = forward(conv, bn, fc, Tensor(x), lambda t: t.max_pool2d(2), lambda t: t.flatten(1)).numpy()
  tout = forward(tconv, tbn, tfc, torch.from_numpy(x), lambda t: torch.nn.functional.max_pool2d(t, 2), lambda t: t.flatten(1)).detach().numpy()
  np.testing.assert_allclose(out, tout, rtol=1e-4, atol=1e-5)
