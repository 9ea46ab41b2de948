"""REMOTE's renderer: the server's backend's own renderer, run here (kernels are rendered locally, compiled on the server)."""
from __future__ import annotations
import os
from tinycore.runtime.device import Device
from tinycore.runtime.errors import PluginError

def remote_renderer():
  """REMOTE_BACKEND names the backend without asking the server (rendering needs no device); else the server says."""
  backend = os.environ.get("REMOTE_BACKEND", "").upper()
  package = "its plugin"
  if not backend:
    from tinygrad_remote.connection import connection
    info = connection().info()
    backend, package = info["backend"].split(":")[0], info["package"]
  if backend == "REMOTE": raise PluginError("REMOTE: the server must serve a real backend, not REMOTE itself")
  if backend not in Device.specs:
    raise PluginError(f"REMOTE: the server runs {backend}, whose renderer must be installed here too: kernels are rendered on this "
                      f"machine (pip install {package}); installed here: {sorted(Device.specs)}")
  ren = Device.specs[backend].renderer()
  ren.device = "REMOTE"   # kernels, errors and caches name the device they run on
  return ren
