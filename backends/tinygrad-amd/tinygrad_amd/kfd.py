"""KFD: AMD's kernel driver interface (/dev/kfd + a DRM render node) through ioctls with ctypes."""
from __future__ import annotations
import os
from tinycore.runtime.errors import DeviceError

KFD_PATH = "/dev/kfd"
TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"

def gpu_count() -> int:
  """GPUs KFD lists in sysfs (nodes with a nonzero gpu_id); 0 without the driver. Opens nothing."""
  try: nodes = os.listdir(TOPOLOGY)
  except OSError: return 0
  n = 0
  for node in nodes:
    try:
      with open(f"{TOPOLOGY}/{node}/gpu_id") as f: n += int(f.read().strip() or 0) != 0
    except (OSError, ValueError): pass
  return n

class KFDDevice:
  def __init__(self, index: int):
    if not os.path.exists(KFD_PATH):
      raise DeviceError(f"AMD: {KFD_PATH} not found: no AMD GPU driver (amdgpu with KFD) on this machine; "
                        "set AMD_EMULATE=1 to run kernels on the RDNA3 emulator")
    raise DeviceError("AMD: the KFD driver is not implemented yet; set AMD_EMULATE=1 to run kernels on the RDNA3 emulator")
