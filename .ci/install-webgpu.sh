#!/usr/bin/env bash
# Installs what the WEBGPU backend needs on a headless Linux machine: mesa's lavapipe (software Vulkan), the wgpu package, and chromium for the export test. Idempotent.
set -euo pipefail
SUDO=""; if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || ! ldconfig -p | grep -q libvulkan.so.1 || ! command -v chromium >/dev/null; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q mesa-vulkan-drivers libvulkan1 chromium
fi
PY="${PYTHON:-python3}"
"$PY" -c "import wgpu" 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check "wgpu>=0.32,<0.33"
# an adapter must be found headless, or the WEBGPU tests would fail later with a less direct message
"$PY" - <<'PYEOF'
import wgpu
adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
assert adapter is not None, "no WebGPU adapter found after installing mesa-vulkan-drivers"
print("WebGPU adapter:", adapter.info["device"], "/", adapter.info["backend_type"])
PYEOF
