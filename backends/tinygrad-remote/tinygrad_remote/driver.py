"""REMOTE driver: programs are loaded and launched on the server; launches are queued and go with the next batch."""
from __future__ import annotations
from tinycore.runtime.device import Driver
from tinycore.runtime.errors import DeviceError
from tinycore.runtime.plugin import instance_name
from tinygrad_remote.connection import connection

class RemoteProgram:
  def __init__(self, driver: RemoteDriver, name: str, pid: int): self.conn, self.name, self.pid = driver.conn, name, pid
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals: tuple[int, ...] = (), wait: bool = False):
    fields = dict(prog=self.pid, bufs=[b.ref for b in bufs], vals=list(vals), wait=wait,
                  local=None if local_size is None else list(local_size), **{"global": list(global_size)})
    if not wait: return self.conn.send("exec", **fields)
    return self.conn.call("exec", **fields)[0]   # the time the server measured

class RemoteDriver(Driver):
  """Instance `index` of the server's backend. synchronize() sends nothing: the server runs requests in order, so the next
  request that needs a reply (a copyout, a timed launch) is where the client waits, and a step costs one round trip."""
  def __init__(self, index: int = 0):
    super().__init__(instance_name("REMOTE", index))
    self.conn, self.index = connection(), index
    self.info = self.conn.info()
    if index >= self.info["instances"]:
      raise DeviceError(f"{self.device} does not exist: the server at {self.conn.url} has {self.info['instances']} instances of {self.info['backend']}")
    # what `tinycore devices` shows: the server and the device behind it
    self.description = f"{self.conn.url}: {self.info['backend']}:{index} ({self.info['package']} {self.info['version']})"
  def load(self, name: str, binary: bytes, spec) -> RemoteProgram:
    pid = self.conn.new_id()
    info = {"outs": list(spec.outs), "ins": list(spec.ins), "nvars": len(spec.vars),
            "flops": spec.flops if isinstance(spec.flops, int) else None, "mem_bytes": spec.mem_bytes if isinstance(spec.mem_bytes, int) else None,
            "local": None if spec.local_size is None else list(spec.local_size)}
    # sent at once, so a kernel the server cannot build fails here, as a CompileError, like on a local backend
    self.conn.call("program", prog=pid, dev=self.index, name=name, src=self.conn.attach(binary), info=info)
    return RemoteProgram(self, name, pid)
