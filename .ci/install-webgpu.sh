#!/usr/bin/env bash
# Installs what the WEBGPU backend needs on a headless Linux machine: mesa's lavapipe (software Vulkan) and llvmpipe behind EGL (software OpenGL), the wgpu package, and chromium for the browser tests (the WEBGPU export runs on its WebGPU over SwiftShader, which chromium-common ships; VIZ's page). Idempotent.
set -euo pipefail
SUDO=""; if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
# Vulkan: the loader and lavapipe; OpenGL: glvnd's EGL, mesa's EGL vendor and its llvmpipe driver (swrast_dri.so)
PACKAGES="mesa-vulkan-drivers libvulkan1 libegl1 libegl-mesa0 libgl1-mesa-dri chromium"
if ! dpkg -s $PACKAGES >/dev/null 2>&1 || ! command -v chromium >/dev/null; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $PACKAGES
fi
PY="${PYTHON:-python3}"
"$PY" -c "import wgpu" 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check "wgpu>=0.32,<0.33"
# both adapters must be found headless (CI runs the conformance suite on each), or the runs would fail later with a less direct message
"$PY" - <<'PYEOF'
import wgpu
adapters = {a.info["backend_type"]: a.info["device"] for a in wgpu.gpu.enumerate_adapters_sync()}
for backend in ("Vulkan", "OpenGL"):
  assert backend in adapters, f"no {backend} WebGPU adapter after installing mesa's drivers; wgpu found {adapters or 'none'}"
  print(f"WebGPU adapter: {adapters[backend]} / {backend}")
PYEOF
