"""tinygrad's import path for devices (`from tinygrad.device import Device`): the names of tinycore/runtime/device.py."""
from tinycore.runtime.device import Device, Buffer, GlobalCounters, Allocator, LRUAllocator

__all__ = ["Device", "Buffer", "GlobalCounters", "Allocator", "LRUAllocator"]
