"""Device instances (plugin contract 2): NAME:i opens instance i with its own driver and allocator; copies between them."""
import numpy as np
import pytest
from tinycore import Tensor, Device
from tinycore.runtime.errors import PluginError

@pytest.mark.parametrize("backend", ["PYTHON", "NULL"])
def test_instances_are_separate_devices(backend):
  a, b = Device[backend], Device[f"{backend}:1"]
  assert a is Device[f"{backend}:0"] and a is not b and b is Device[f"{backend.lower()}:1"]
  assert (a.name, b.name) == (backend, f"{backend}:1") and b.driver.device == f"{backend}:1" and b.allocator.device == f"{backend}:1"
  assert a.renderer is b.renderer   # one renderer per backend: kernels are rendered once for every instance
  assert Device.instances(backend) is None   # virtual: as many as asked

def test_tensors_move_between_instances():
  x = Tensor([1.0, 2.0, 3.0], device="PYTHON:2")
  assert x.device == "PYTHON:2"
  y = (x.to("PYTHON:3") * 2).to("PYTHON")
  assert y.device == "PYTHON" and y.tolist() == [2.0, 4.0, 6.0]

def test_a_missing_instance_is_a_clear_error(monkeypatch):
  from tinycore.runtime.builtin import PythonRenderer, PythonDriver, HostAllocator
  from tinycore.runtime.device import Assembler
  from tinycore.runtime.plugin import BackendSpec
  opened = []
  def driver(index):
    opened.append(index)
    return PythonDriver(index)
  spec = BackendSpec("TWOGPUS", (2, 0), PythonRenderer, Assembler, driver, lambda drv: HostAllocator(drv.device), instances=lambda: 2)
  monkeypatch.setitem(Device.specs, "TWOGPUS", spec)
  monkeypatch.setattr(Device, "_opened", dict(Device._opened))   # the opened TWOGPUS:1 goes with the test
  assert Device["TWOGPUS:1"].name == "TWOGPUS:1" and opened == [1]
  with pytest.raises(PluginError, match=r"TWOGPUS:2 does not exist: this machine has 2 instances of TWOGPUS \(TWOGPUS, TWOGPUS:1"): Device["TWOGPUS:2"]
  assert opened == [1]   # refused before the driver is asked

@pytest.mark.parametrize("bad", ["PYTHON:x", "PYTHON:-1", "PYTHON:"])
def test_malformed_instance_names_are_refused(bad):
  with pytest.raises(ValueError, match="must be a number"): Device.canonicalize(bad)

def test_transfer_between_instances_uses_the_allocator_when_offered(monkeypatch):
  from tinycore.runtime.builtin import HostAllocator
  calls = []
  def transfer(self, dest, src, size, src_dev, dest_dev):
    calls.append((src_dev.name, dest_dev.name, size))
    dest[:size] = src[:size]
  monkeypatch.setattr(HostAllocator, "supports_transfer", True, raising=False)
  monkeypatch.setattr(HostAllocator, "_transfer", transfer, raising=False)
  y = Tensor(np.arange(4, dtype=np.float32), device="PYTHON:5").to("PYTHON:6").realize()
  assert y.numpy().tolist() == [0, 1, 2, 3] and calls == [("PYTHON:5", "PYTHON:6", 16)]
