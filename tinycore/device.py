"""tinygrad's import path for devices (`from tinygrad.device import Device`): the names of tinycore/runtime/device.py."""
from tinycore.runtime.device import Device, Buffer, GlobalCounters, Allocator, LRUAllocator, Compiled, canonicalize_device
from tinycore.runtime.errors import CompileError
from tinycore.multi import MultiBuffer

__all__ = ["Device", "Buffer", "GlobalCounters", "Allocator", "LRUAllocator", "Compiled", "canonicalize_device", "CompileError", "MultiBuffer"]
