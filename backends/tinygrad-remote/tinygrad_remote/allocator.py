"""REMOTE memory: buffers live on the server; here each is an id, a view is (id, offset, size), copies are queued requests."""
from __future__ import annotations
from typing import Any
from tinycore.runtime.device import LRUAllocator
from tinycore.runtime.errors import DeviceError

class RemoteBuffer:
  __slots__ = ("id", "offset", "size")
  def __init__(self, id: int, offset: int, size: int): self.id, self.offset, self.size = id, offset, size
  @property
  def ref(self) -> list[int]: return [self.id, self.offset, self.size]

class RemoteAllocator(LRUAllocator):
  supports_transfer = True   # the server copies between its instances itself
  def __init__(self, driver):
    super().__init__(driver.device)
    self.conn, self.index = driver.conn, driver.index
    self.supports_offset = driver.info["supports_offset"]
  def _alloc(self, size: int, options: Any) -> RemoteBuffer:
    if options is not None: raise DeviceError(f"{self.device}: buffer options ({options!r}) do not travel to the server")
    if size > (limit := self.conn.info()["max_alloc_bytes"]):
      raise MemoryError(f"{self.device}: {size} bytes is more than the server allows per buffer ({limit}, its --max-alloc-bytes)")
    buf = RemoteBuffer(self.conn.new_id(), 0, size)
    self.conn.send("alloc", buf=buf.id, dev=self.index, size=size)
    return buf
  def _free(self, buf: RemoteBuffer, size: int, options: Any) -> None: self.conn.send("free", buf=buf.id)
  def _copyin(self, dest: RemoteBuffer, src: memoryview) -> None: self.conn.send("copyin", buf=dest.ref, blob=self.conn.attach(bytes(src)))
  def _copyout(self, dest: memoryview, src: RemoteBuffer) -> None:
    result, blobs = self.conn.call("copyout", buf=src.ref)
    dest[:] = blobs[result["blob"]]
  def _offset(self, buf: RemoteBuffer, size: int, offset: int) -> RemoteBuffer: return RemoteBuffer(buf.id, buf.offset + offset, size)
  def _transfer(self, dest: RemoteBuffer, src: RemoteBuffer, size: int, src_dev, dest_dev) -> None:
    self.conn.send("transfer", dest=dest.ref, src=src.ref)
