"""tinygrad-remote: results equal local CPU, one round trip per training step, uploads by hash, a server that survives hostile requests."""
from __future__ import annotations
import http.client, json, os, random, signal, struct, subprocess, sys, time
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from tinycore import Tensor, Device, dtypes
from tinycore.nn import Linear
from tinycore.nn.optim import SGD
from tinycore.runtime.errors import DeviceError
from tinygrad_remote import connection as conn_mod
from tinygrad_remote.server import RemoteServer, Limits
from tinygrad_remote.wire import VERSION, REQUESTS, WireError, blob_id, decode_batch, decode_reply, encode_batch, encode_reply

TOKEN = "test-token-0123456789abcdef"

def start_server(tmp_path, *extra: str) -> tuple[subprocess.Popen, str]:
  tf = tmp_path / "token"
  tf.write_text(TOKEN)
  proc = subprocess.Popen([sys.executable, "-m", "tinygrad_remote", "serve", "--device", "CPU", "--port", "0", "--token-file", str(tf), *extra],
                          stdout=subprocess.PIPE, text=True)
  line = proc.stdout.readline()
  assert " at http://" in line, f"server did not start: {line!r}"
  return proc, line.rsplit(" at ", 1)[1].strip()

def use_server(url: str, monkeypatch) -> conn_mod.Connection:
  """Point this process's REMOTE device at `url`, forgetting any earlier connection and opened REMOTE instances."""
  monkeypatch.setenv("REMOTE_URL", url)
  monkeypatch.setenv("REMOTE_TOKEN", TOKEN)
  monkeypatch.setenv("REMOTE_TIMEOUT", "10")
  conn_mod._connection = None
  for name in [n for n in Device._opened if n.startswith("REMOTE")]: del Device._opened[name]
  Device._renderers.pop("REMOTE", None)
  return conn_mod.connection()

@pytest.fixture(scope="module")
def server(tmp_path_factory):
  proc, url = start_server(tmp_path_factory.mktemp("remote"))
  yield url
  proc.terminate(); proc.wait(timeout=30)

@pytest.fixture
def remote(server, monkeypatch):
  yield use_server(server, monkeypatch)
  conn_mod._connection = None
  for name in [n for n in Device._opened if n.startswith("REMOTE")]: del Device._opened[name]
  Device._renderers.pop("REMOTE", None)

# ***** results *****

def test_ops_match_cpu(remote):
  a = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
  for dev in ("REMOTE", "CPU"):
    x = Tensor(a, device=dev)
    got = [(x @ x.T).relu().sum(1).numpy(), x[1:4, ::2].contiguous().numpy(), x.max(0).numpy(), (x.cast(dtypes.int32) // 2).numpy()]
    if dev == "REMOTE": remote_out = got
  for g, w in zip(remote_out, got): np.testing.assert_allclose(g, w, rtol=1e-6)

def test_instances_and_transfers(remote):
  x = Tensor(np.arange(6, dtype=np.float32), device="REMOTE")
  y = x.to("REMOTE:1") * 2
  assert y.device == "REMOTE:1"
  np.testing.assert_equal(y.numpy(), np.arange(6) * 2)
  np.testing.assert_equal((y.to("CPU") + Tensor.ones(6, device="CPU")).numpy(), np.arange(6) * 2 + 1)

def test_description_names_the_server(remote):
  text = Device["REMOTE"].driver.description
  assert remote.url in text and "CPU" in text and "tinygrad-cpu" in text

def train_steps(device: str, steps: int, conn=None) -> tuple[list[float], list[int]]:
  Tensor.manual_seed(1)
  model = Linear(8, 3)
  for p in (model.weight, model.bias): p.replace(p.to(device)).realize()
  opt = SGD([model.weight, model.bias], lr=0.1)
  rng = np.random.default_rng(2)
  xs, ys = rng.standard_normal((16, 8)).astype(np.float32), rng.integers(0, 3, 16)
  losses, trips = [], []
  with Tensor.train():
    for _ in range(steps):
      before = conn.round_trips if conn else 0
      loss = model(Tensor(xs, device=device)).sparse_categorical_crossentropy(Tensor(ys, device=device))
      opt.zero_grad(); loss.backward(); opt.step()
      losses.append(loss.item())
      trips.append(conn.round_trips - before if conn else 0)
  return losses, trips

def test_a_training_step_is_one_round_trip(remote):
  losses, trips = train_steps("REMOTE", 5, remote)
  cpu_losses, _ = train_steps("CPU", 5)
  np.testing.assert_allclose(losses, cpu_losses, rtol=1e-5)
  assert trips[-2:] == [1, 1], f"round trips per step: {trips} (the first steps compile and load kernels)"

def test_uploads_go_once(remote):
  data = np.random.default_rng(3).standard_normal(1 << 16).astype(np.float32)
  Tensor(data, device="REMOTE").realize(); remote.flush()
  sent = remote.bytes_sent
  y = Tensor(data, device="REMOTE").sum().numpy()   # same bytes again: referenced by hash
  assert remote.bytes_sent - sent < data.nbytes // 8, f"{remote.bytes_sent - sent} bytes sent for data the server already has"
  np.testing.assert_allclose(y, data.sum(), rtol=1e-4)

def test_errors_name_the_server(monkeypatch):
  monkeypatch.setenv("REMOTE_URL", "http://127.0.0.1:9"); monkeypatch.setenv("REMOTE_TOKEN", TOKEN)
  with pytest.raises(DeviceError, match=r"127\.0\.0\.1:9 did not answer"): conn_mod.Connection("http://127.0.0.1:9", TOKEN, 5).info()
  monkeypatch.delenv("REMOTE_URL")
  with pytest.raises(DeviceError, match="set REMOTE_URL"): conn_mod.settings()

def test_wrong_token_is_refused(server):
  with pytest.raises(DeviceError, match="wrong token"): conn_mod.Connection(server, "not-the-token", 5).info()

# ***** the wire format *****

def test_wire_round_trip_and_version():
  reqs = [("alloc", {"buf": 1, "dev": 0, "size": 16}), ("copyin", {"buf": [1, 0, 16], "blob": blob_id(b"x" * 16)})]
  sid, got, blobs = decode_batch(encode_batch("s" * 16, reqs, [b"x" * 16]))
  assert sid == "s" * 16 and got == reqs and list(blobs) == [blob_id(b"x" * 16)]
  body = bytearray(encode_batch("s" * 16, reqs, []))
  struct.pack_into("<H", body, 4, VERSION + 1)
  with pytest.raises(WireError, match=f"version {VERSION + 1}.*speaks {VERSION}"): decode_batch(bytes(body))
  results, rblobs, err, failed = decode_reply(encode_reply([None, {"blob": 0}], [b"abc"], "x", 1))
  assert results == [None, {"blob": 0}] and bytes(rblobs[0]) == b"abc" and (err, failed) == ("x", 1)

# ***** hostile requests: every one gets a clean error and the server keeps serving *****

def post(url: str, body: bytes, token: str = TOKEN, length: int | None = None) -> tuple[int, bytes]:
  host, port = url.split("//")[1].split(":")
  c = http.client.HTTPConnection(host, int(port), timeout=20)
  c.putrequest("POST", "/batch")
  c.putheader("Authorization", f"Bearer {token}")
  c.putheader("Content-Length", str(len(body) if length is None else length))
  c.endheaders()
  c.send(body)
  if length is not None and length > len(body): c.sock.shutdown(1)   # a truncated body: the client stops sending
  r = c.getresponse()
  data = r.read(); c.close()
  return r.status, data

def error_of(status: int, body: bytes) -> str:
  _, _, err, _ = decode_reply(body)
  assert err, f"HTTP {status}: expected an error reply"
  return err

def batch(*reqs, blobs=()) -> bytes: return encode_batch("fuzzsession01", list(reqs), list(blobs))

HOSTILE = {
  "wrong token": (dict(body=batch(("sync", {"dev": 0})), token="nope"), "token"),
  "not a frame": (dict(body=b"GET / HTTP/1.0\r\n\r\n"), "not a tinygrad-remote request"),
  "truncated header": (dict(body=batch(("sync", {"dev": 0}))[:12]), "truncated"),
  "truncated body": (dict(body=batch(("sync", {"dev": 0}))[:20], length=200), "truncated"),
  "over the size limit": (dict(body=b"", length=1 << 40), "over the server's limit"),
  "unknown op": (dict(body=batch(("format_disk", {}))), "unknown op"),
  "missing field": (dict(body=batch(("alloc", {"buf": 1}))), "fields"),
  "bool as int": (dict(body=batch(("alloc", {"buf": 1, "dev": 0, "size": True}))), "bad value"),
  "negative size": (dict(body=batch(("alloc", {"buf": 1, "dev": 0, "size": -5}))), "bad value"),
  "huge allocation": (dict(body=batch(("alloc", {"buf": 1, "dev": 0, "size": 1 << 60}))), "limit"),
  "unknown buffer": (dict(body=batch(("copyout", {"buf": [99999, 0, 4]}))), "no buffer 99999"),
  "view out of range": (dict(body=batch(("alloc", {"buf": 7, "dev": 0, "size": 8}), ("copyout", {"buf": [7, 4, 8]}))), "outside"),
  "free twice": (dict(body=batch(("alloc", {"buf": 8, "dev": 0, "size": 8}), ("free", {"buf": 8}), ("free", {"buf": 8}))), "no buffer 8"),
  "no such instance": (dict(body=batch(("alloc", {"buf": 9, "dev": 10 ** 6, "size": 8}))), "does not exist"),
  "unknown program": (dict(body=batch(("exec", {"prog": 5, "bufs": [], "global": [1, 1, 1], "local": None, "vals": [], "wait": False}))), "no program 5"),
  "missing blob": (dict(body=batch(("alloc", {"buf": 10, "dev": 0, "size": 3}), ("copyin", {"buf": [10, 0, 3], "blob": "0" * 64}))), "missing blob"),
  "blob lengths lie": (dict(body=encode_batch("fuzzsession01", [], [b"abc"])[:-1]), "blobs announce"),
}

@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_request_gets_a_clean_error(server, case):
  kw, expect = HOSTILE[case]
  status, body = post(server, **kw)
  assert expect in error_of(status, body), f"{case}: {error_of(status, body)}"

@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_batches_never_take_the_server_down(server, flips):
  body = bytearray(batch(("alloc", {"buf": 1, "dev": 0, "size": 4}), ("copyin", {"buf": [1, 0, 4], "blob": blob_id(b"abcd")}),
                         ("copyout", {"buf": [1, 0, 4]}), ("free", {"buf": 1}), blobs=[b"abcd"]))
  for at, byte in flips: body[at % len(body)] = byte
  status, reply = post(server, bytes(body))
  assert status in (200, 400), status
  decode_reply(reply)   # always a well-formed reply

def test_server_still_serves_a_good_client_after_abuse(server, remote):
  for case in ("unknown op", "huge allocation", "truncated body"): post(server, **HOSTILE[case][0])
  np.testing.assert_equal((Tensor([1.0, 2.0], device="REMOTE") * 4).numpy(), [4.0, 8.0])

# ***** sessions and failures *****

def test_close_frees_the_session():
  srv = RemoteServer("PYTHON", TOKEN, Limits(session_timeout_s=0.0))
  reply = srv.run_batch(encode_batch("session-close", [("alloc", {"buf": 1, "dev": 0, "size": 64})], []))
  assert decode_reply(reply)[2] is None and len(srv.sessions["session-close"].bufs) == 1
  srv.run_batch(encode_batch("session-close", [("close", {})], []))
  assert "session-close" not in srv.sessions
  srv.run_batch(encode_batch("session-idle", [("alloc", {"buf": 1, "dev": 0, "size": 64})], []))
  srv.expire_sessions()   # idle longer than the timeout (0 s): freed
  assert "session-idle" not in srv.sessions

def test_a_killed_server_gives_a_clear_error_in_bounded_time(tmp_path, monkeypatch):
  proc, url = start_server(tmp_path)
  try:
    conn = use_server(url, monkeypatch)
    x = Tensor(np.ones(64, np.float32), device="REMOTE")
    np.testing.assert_equal((x + 1).numpy(), 2)
    y = (x * 3).sum()   # a step in flight: queued, not yet sent
    y.schedule()
    proc.send_signal(signal.SIGKILL); proc.wait(timeout=30)
    start = time.perf_counter()
    with pytest.raises(DeviceError, match=f"server at {url}"): y.numpy()
    assert time.perf_counter() - start < 15
  finally:
    if proc.poll() is None: proc.kill()
    conn_mod._connection = None
    for name in [n for n in Device._opened if n.startswith("REMOTE")]: del Device._opened[name]
    Device._renderers.pop("REMOTE", None)
