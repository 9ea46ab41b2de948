#!/usr/bin/env bash
# Installs what the QCOM backend's tests need off a phone: an OpenCL runtime (pocl on the CPU, through the ICD loader) and clinfo. Idempotent.
set -euo pipefail
SUDO=""; if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
if ! ls /etc/OpenCL/vendors/pocl*.icd >/dev/null 2>&1 || ! ldconfig -p | grep -q libOpenCL.so.1 || ! command -v clinfo >/dev/null; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q pocl-opencl-icd ocl-icd-libopencl1 clinfo
fi
# a device must be listed, or the QCOM tests would fail later with a less direct message
clinfo -l | grep -q "Device" || { echo "no OpenCL device found after installing pocl-opencl-icd" >&2; exit 1; }
clinfo -l
