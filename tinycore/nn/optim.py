"""Optimizers (SGD, LARS, Muon, Adam, AdamW, LAMB) whose step is one scheduled graph, and learning-rate schedules."""
from __future__ import annotations
import math
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor, _plain, _storage
from tinycore.schedule import buffers
from tinycore.runtime.device import canonicalize_device

HALF = (dtypes.float16, dtypes.bfloat16)

class Optimizer:
  """Holds the parameters (tensors with requires_grad) and the buffers (requires_grad=False, e.g. BatchNorm running stats,
  realized with each step). lr is a 1-element tensor, so a learning-rate change reaches a TinyJit-captured step. tinygrad's
  `device` (where the state lives) may only name the parameters' device, and `fused` (one buffer for every parameter) is
  accepted with no effect: the step is one scheduled graph already."""
  def __init__(self, params: list[Tensor], lr: float, device: str | tuple | None = None, fused: bool = False):
    for t in params:
      if t.requires_grad is None: t.requires_grad = True
    unique = list({id(t): t for t in params}.values())
    self.params = [t for t in unique if t.requires_grad]
    self.buffers = [t for t in unique if not t.requires_grad]
    if not self.params: raise ValueError("optimizer: none of the given tensors requires grad")
    if len(devices := {t.device for t in self.params}) > 1: raise ValueError(f"optimizer: parameters are on several devices {sorted(devices)}")
    self.device = self.params[0].device
    if device is not None and canonicalize_device(device) != self.device:
      raise ValueError(f"optimizer: the state lives on the parameters' device {self.device}, not {device}; move the parameters there")
    self._own_buffers(self.params + self.buffers)
    # float16/bfloat16 parameters are updated through float32 copies (master weights): a step smaller than half a 16-bit
    # weight's spacing (|lr*update| < |w|*2^-11 in float16, 2^-8 in bfloat16) would round away and training stall. The
    # parameter is the master rounded after every step; the optimizer reads the master, so load weights before building it.
    self.weights = [t.empty_like(dtype=dtypes.float32, requires_grad=False).assign(t.detach().float()) if t.dtype in HALF else t
                    for t in self.params]
    self.masters = [w for w, t in zip(self.weights, self.params) if w is not t]
    self.lr = Tensor([lr], device=self.device, requires_grad=False)
    Tensor.realize_all(self.lr, *self.masters)

  @staticmethod
  def _zeros(t: Tensor, dtype=None) -> Tensor:
    """Zeros shaped like t, in a buffer of its own."""
    return t.empty_like(dtype=dtype or t.dtype, requires_grad=False).assign(0)

  @staticmethod
  def _own_buffers(ts: list[Tensor]) -> None:
    """Give each tensor a plain buffer of its own to update in place: a view of another tensor's storage (a slice, a
    transpose) or storage shared with another parameter is copied out. (Equal lazy graphs built separately already
    realize into separate buffers: Tensor.realize_all.)"""
    Tensor.realize_all(*ts)
    seen: set[int] = set()
    for t in ts:
      if not _plain(t.uop) or id(buffers[_storage(t.uop)].base) in seen:
        t.uop = t.empty_like().assign(t.detach()).realize().uop
      seen.add(id(buffers[_storage(t.uop)].base))

  def zero_grad(self) -> None:
    for t in self.params: t.grad = None

  def _set(self, i: int, w: Tensor) -> None:
    """Parameter i's new value w: its master (if it has one) takes it in float32, the parameter rounded to its dtype."""
    if (m := self.weights[i]) is not self.params[i]: m.assign(w.cast(m.dtype))
    self.params[i].assign(w.cast(self.params[i].dtype))

  def schedule_step(self) -> list[Tensor]:
    """Assign every parameter's (and state's) new value lazily; return the tensors to realize together: the gradients, the
    buffers, then the assigned parameters and state. Add the loss to get forward, backward and update in one schedule:
    `loss.realize(*opt.schedule_step())` (the scheduler runs every read of a parameter before the write that updates it)."""
    grads, updates = self._schedule_parts()
    return [*grads, *self.buffers, *updates]

  def _schedule_parts(self) -> tuple[list[Tensor], list[Tensor]]:
    if missing := [f"#{i} {tuple(t.shape)}" for i, t in enumerate(self.params) if t.grad is None]:
      raise RuntimeError(f"optimizer step: parameters {', '.join(missing)} have no gradient; call loss.backward() first "
                         f"(a parameter the loss does not use gets no gradient: leave it out of the optimizer)")
    grads = [t.grad for t in self.params]
    return grads, self._update(grads)

  def step(self) -> None:
    """One optimizer step: all parameters and state updated by one scheduled graph."""
    Tensor.realize_all(*self.schedule_step())

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    """Assign the new parameter and state values; return the assigned tensors."""
    raise NotImplementedError

class OptimizerGroup(Optimizer):
  """Several optimizers (e.g. different learning rates for different parameters) stepped as one scheduled graph."""
  def __init__(self, *optimizers: Optimizer):
    self.optimizers = list(optimizers)
    self.params = [t for o in optimizers for t in o.params]
    self.buffers = list({id(t): t for o in optimizers for t in o.buffers}.values())
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def _schedule_parts(self) -> tuple[list[Tensor], list[Tensor]]:
    # all gradients, then all updates: the group's step is one schedule like a single optimizer's
    parts = [o._schedule_parts() for o in self.optimizers]
    return [g for gs, _ in parts for g in gs], [u for _, us in parts for u in us]

class SGD(Optimizer):
  """g = grad + weight_decay*w; with momentum b = momentum*b + g and g = b (nesterov: g + momentum*b); w -= lr*g.
  classic=True applies lr before the momentum buffer instead (b = momentum*b + lr*g; w -= b)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
               classic: bool = False, device: str | tuple | None = None, fused: bool = False):
    super().__init__(params, lr, device, fused)
    if nesterov and momentum == 0: raise ValueError("SGD: nesterov needs momentum > 0")
    self.momentum, self.wd, self.nesterov, self.classic = momentum, weight_decay, nesterov, classic
    self.b = [self._zeros(w) for w in self.weights] if momentum else []
    Tensor.realize_all(*self.b)

  def _grad(self, w: Tensor, g: Tensor) -> Tensor:
    """The gradient the momentum sees: plus weight decay (LARS scales it first). w: the weight (its master, if any)."""
    return g + self.wd * w if self.wd else g
  def _direction(self, w: Tensor, g: Tensor) -> Tensor:
    """The step before the learning rate, from the momentum's output (Muon orthogonalizes it)."""
    return g

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    for i, g in enumerate(grads):
      w = self.weights[i].detach()
      g = self._grad(w, g)
      if self.momentum:
        if self.classic: g = g * self.lr
        self.b[i].assign((self.momentum * self.b[i] + g).cast(self.b[i].dtype))
        g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
      g = self._direction(w, g)
      if not self.classic or not self.momentum: g = g * self.lr
      self._set(i, w - g)
    return [*self.b, *self.masters, *self.params]

class LARS(SGD):
  """SGD whose gradient is first scaled per tensor by the trust ratio tcoef*|w| / (|g| + weight_decay*|w|) (1 where a norm
  is 0), then weight decay and momentum as SGD (classic: lr inside the momentum buffer, as the LARS paper has it). tinygrad
  builds Muon from LARS (ns_steps, ns_coefficients, pre_wd=False): here that is the Muon class."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4, ns_steps: int = 0,
               ns_coefficients: tuple[float, float, float] | None = None, nesterov: bool = False, classic: bool = True, pre_wd: bool = True,
               tcoef: float = 0.001, device: str | tuple | None = None, fused: bool = False):
    if ns_steps or ns_coefficients or not pre_wd: raise NotImplementedError("LARS with Newton-Schulz steps or decoupled weight decay is Muon: use optim.Muon")
    super().__init__(params, lr, momentum, weight_decay, nesterov, classic, device, fused)
    self.tcoef = tcoef
  def _grad(self, w: Tensor, g: Tensor) -> Tensor:
    w_norm, g_norm = w.float().square().sum().sqrt(), g.float().square().sum().sqrt()
    r = ((w_norm > 0) & (g_norm > 0)).where(self.tcoef * w_norm / (g_norm + self.wd * w_norm), 1.0)
    return super()._grad(w, g * r.cast(g.dtype))

class Muon(SGD):
  """Momentum SGD (nesterov by default) whose step for a matrix (a parameter of 2+ dims, flattened after dim 0) is made
  orthogonal by ns_steps Newton-Schulz iterations with the quintic ns_coefficients, scaled by sqrt(max(1, rows/cols));
  weight decay is decoupled (w -= lr*weight_decay*w). Vectors (biases, norms) take the plain momentum step."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1, ns_steps: int = 5,
               ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315), nesterov: bool = True, device: str | tuple | None = None,
               fused: bool = False):
    super().__init__(params, lr, momentum, 0.0, nesterov, device=device, fused=fused)
    self.decay, self.ns_steps, self.ns_coefficients = weight_decay, ns_steps, ns_coefficients
  def _direction(self, w: Tensor, g: Tensor) -> Tensor:
    if w.ndim >= 2:
      x = g.float().reshape(w.shape[0], -1).newton_schulz(self.ns_steps, self.ns_coefficients)
      g = x.reshape(w.shape).cast(g.dtype) * max(1.0, w.shape[0] / (w.numel() // w.shape[0])) ** 0.5
    return g + self.decay * w if self.decay else g

class LAMB(Optimizer):
  """Adam moments with bias correction; up = m_hat/(sqrt(v_hat)+eps) + weight_decay*w. LAMB scales the step by the
  trust ratio |w|/|up| per tensor; adam=True leaves it out (Adam/AdamW: decoupled weight decay)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False, device: str | tuple | None = None, fused: bool = False):
    super().__init__(params, lr, device, fused)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    self.b1_t, self.b2_t = Tensor([1.0], device=self.device, requires_grad=False), Tensor([1.0], device=self.device, requires_grad=False)  # b1**t, b2**t
    # the moments stay float32 for half-precision parameters: v underflows in float16
    self.m, self.v = [self._zeros(w, dtypes.float32) for w in self.weights], [self._zeros(w, dtypes.float32) for w in self.weights]
    Tensor.realize_all(self.b1_t, self.b2_t, *self.m, *self.v)

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    # built once for every parameter; a weight decay of 0 and Adam's trust ratio of 1 add no ops (each graph op costs
    # Python time on every step, and its kernel a load)
    c1, c2 = 1.0 - self.b1_t, 1.0 - self.b2_t
    for i, g in enumerate(grads):
      w, g = self.weights[i].detach(), g.float()
      self.m[i].assign((self.b1 * self.m[i] + (1.0 - self.b1) * g).cast(self.m[i].dtype))
      self.v[i].assign((self.b2 * self.v[i] + (1.0 - self.b2) * (g * g)).cast(self.v[i].dtype))
      up = (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + self.eps)
      if self.wd: up = up + self.wd * w
      if self.adam: step = self.lr * up
      else:
        w_norm, up_norm = w.float().square().sum().sqrt(), up.square().sum().sqrt()
        step = self.lr * (w_norm > 0).where((up_norm > 0).where(w_norm / up_norm, 1.0), 1.0) * up
      self._set(i, w - step)
    return [self.b1_t, self.b2_t, *self.m, *self.v, *self.masters, *self.params]

def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, device: str | tuple | None = None,
         fused: bool = False) -> LAMB:
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, device=device, fused=fused)

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01,
          device: str | tuple | None = None, fused: bool = False) -> LAMB:
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, device=device, fused=fused)

# ***** learning-rate schedules *****

class LRScheduler:
  """Sets the optimizer's lr to base_lr * factor(n) for step count n: at construction (n=0) and after each .step()
  (call it once per optimizer step or once per epoch, as the schedule's unit)."""
  def __init__(self, optimizer: Optimizer):
    self.optimizers = getattr(optimizer, "optimizers", [optimizer])
    self.base_lrs = [float(o.lr.numpy()[0]) for o in self.optimizers]
    self.epoch_counter = 0
    self._apply()
  def factor(self, n: int) -> float: raise NotImplementedError
  def get_lr(self) -> list[float]: return [lr * self.factor(self.epoch_counter) for lr in self.base_lrs]
  def step(self) -> None:
    self.epoch_counter += 1
    self._apply()
  def _apply(self) -> None:
    for o, lr in zip(self.optimizers, self.get_lr()): o.lr.assign(Tensor([lr], device=o.lr.device, dtype=o.lr.dtype))
    Tensor.realize_all(*[o.lr for o in self.optimizers])

class StepLR(LRScheduler):
  """Multiply the lr by gamma every step_size steps."""
  def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
    if step_size <= 0: raise ValueError(f"StepLR: step_size must be positive, got {step_size}")
    self.step_size, self.gamma = step_size, gamma
    super().__init__(optimizer)
  def factor(self, n: int) -> float: return self.gamma ** (n // self.step_size)

class LinearWarmupLR(LRScheduler):
  """Ramp the lr linearly from start_factor*lr at step 0 to lr at step warmup_steps, then hold it."""
  def __init__(self, optimizer: Optimizer, warmup_steps: int, start_factor: float = 0.0):
    if warmup_steps < 0: raise ValueError(f"LinearWarmupLR: warmup_steps must be >= 0, got {warmup_steps}")
    self.warmup_steps, self.start_factor = warmup_steps, start_factor
    super().__init__(optimizer)
  def factor(self, n: int) -> float:
    return 1.0 if n >= self.warmup_steps else self.start_factor + (1.0 - self.start_factor) * n / self.warmup_steps

class CosineAnnealingLR(LinearWarmupLR):
  """Optional linear warmup over warmup_steps, then a half cosine from lr down to eta_min at step T_max (held after)."""
  def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, warmup_steps: int = 0, start_factor: float = 0.0):
    if T_max <= warmup_steps: raise ValueError(f"CosineAnnealingLR: T_max ({T_max}) must exceed warmup_steps ({warmup_steps})")
    self.T_max, self.eta_min = T_max, eta_min
    super().__init__(optimizer, warmup_steps, start_factor)
  def get_lr(self) -> list[float]:
    n = self.epoch_counter
    if n < self.warmup_steps: return super().get_lr()
    progress = min(n - self.warmup_steps, self.T_max - self.warmup_steps) / (self.T_max - self.warmup_steps)
    return [self.eta_min + (lr - self.eta_min) * (1 + math.cos(math.pi * progress)) / 2 for lr in self.base_lrs]
