"""`python -m tinygrad_remote serve`: put a backend behind HTTP; `with-server`: run a command against a fresh local server."""
from __future__ import annotations
import argparse, os, secrets, subprocess, sys, tempfile

def _serve(args) -> int:
  from tinygrad_remote.server import Limits, RemoteServer, serve
  if args.token_file:
    with open(args.token_file) as f: token = f.read().strip()
    if len(token) < 16: raise SystemExit(f"tinygrad-remote: the token in {args.token_file} is shorter than 16 characters")
  else: token = secrets.token_urlsafe(24)
  limits = Limits(max_request_bytes=args.max_request_bytes, max_alloc_bytes=args.max_alloc_bytes, session_timeout_s=args.session_timeout)
  remote = RemoteServer(args.device, token, limits)
  if args.host not in ("127.0.0.1", "localhost", "::1"):
    print(f"tinygrad-remote: listening on {args.host}: anyone who can reach it and holds the token can run kernels here", file=sys.stderr)
  def ready(url: str) -> None:
    print(f"tinygrad-remote: serving {remote.backend} ({remote.spec.package} {remote.spec.version}) at {url}", flush=True)
    if not args.token_file: print(f"tinygrad-remote: token {token} (clients: REMOTE_URL={url} REMOTE_TOKEN=...)", flush=True)
  try: serve(remote, args.host, args.port, args.verbose, ready)
  except KeyboardInterrupt: pass
  return 0

def _with_server(args) -> int:
  """Start a server on a free port with a fresh token, run the command with REMOTE_URL/REMOTE_TOKEN set, stop the server."""
  cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not cmd: raise SystemExit("tinygrad-remote with-server: give a command after --")
  with tempfile.TemporaryDirectory() as tmp:
    token_file = os.path.join(tmp, "token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f: f.write(secrets.token_urlsafe(24))
    server = subprocess.Popen([sys.executable, "-m", "tinygrad_remote", "serve", "--device", args.device, "--port", "0", "--token-file", token_file],
                              stdout=subprocess.PIPE, text=True)
    try:
      line = server.stdout.readline() if server.stdout else ""
      if " at http://" not in line: raise SystemExit(f"tinygrad-remote: the server did not start (exit {server.poll()}): {line.strip()}")
      url = line.rsplit(" at ", 1)[1].strip()
      print(line.strip(), flush=True)
      env = {**os.environ, "REMOTE_URL": url, "REMOTE_TOKEN_FILE": token_file}
      env.pop("REMOTE_TOKEN", None)
      return subprocess.run(cmd, env=env).returncode
    finally:
      server.terminate()
      server.wait(timeout=30)

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m tinygrad_remote", description=__doc__)
  sub = ap.add_subparsers(dest="cmd", required=True)
  s = sub.add_parser("serve", help="serve a backend over HTTP")
  s.add_argument("--device", default="CPU", help="the backend to serve (all its instances): CPU, WEBGPU, ...")
  s.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
  s.add_argument("--port", type=int, default=6667, help="port (0: any free one, printed)")
  s.add_argument("--token-file", help="file holding the shared token (default: generate one and print it)")
  s.add_argument("--max-request-bytes", type=int, default=1 << 30)
  s.add_argument("--max-alloc-bytes", type=int, default=1 << 34)
  s.add_argument("--session-timeout", type=float, default=900.0, help="seconds before an idle client's buffers are freed")
  s.add_argument("--verbose", action="store_true", help="log every HTTP request")
  w = sub.add_parser("with-server", help="run a command against a fresh local server: with-server --device CPU -- cmd args...")
  w.add_argument("--device", default="CPU")
  w.add_argument("command", nargs=argparse.REMAINDER)
  args = ap.parse_args(argv)
  return _serve(args) if args.cmd == "serve" else _with_server(args)

if __name__ == "__main__": sys.exit(main())
