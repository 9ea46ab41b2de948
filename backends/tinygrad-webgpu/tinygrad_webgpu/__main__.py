"""`python -m tinygrad_webgpu serve DIR`: serve an exported model's folder on 127.0.0.1, where browsers allow WebGPU and modules."""
from __future__ import annotations
import argparse, functools, http.server, sys
from pathlib import Path

class Handler(http.server.SimpleHTTPRequestHandler):
  # modules must come as JavaScript; nothing is cached, so a page reloaded after a new export gets the new model
  extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript", ".json": "application/json",
                    ".safetensors": "application/octet-stream"}
  def end_headers(self):
    self.send_header("Cache-Control", "no-store")
    super().end_headers()
  def log_message(self, *args): pass

def server(folder: Path, port: int = 8000, host: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
  return http.server.ThreadingHTTPServer((host, port), functools.partial(Handler, directory=str(folder)))

def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(prog="python -m tinygrad_webgpu", description=__doc__)
  sub = p.add_subparsers(dest="command", required=True)
  s = sub.add_parser("serve", help="serve a folder written by tinygrad_webgpu.export")
  s.add_argument("folder", type=Path)
  s.add_argument("--port", type=int, default=8000, help="0 picks a free port")
  s.add_argument("--host", default="127.0.0.1", help="browsers give WebGPU to https:// pages and to localhost only")
  a = p.parse_args(argv)
  if not (a.folder / "model.js").is_file():
    p.error(f"{a.folder} has no model.js: write one with tinygrad_webgpu.export(fn, *example_inputs, path='{a.folder}')")
  srv = server(a.folder, a.port, a.host)
  print(f"serving {a.folder} at http://{a.host}:{srv.server_address[1]}/ (open it in a browser with WebGPU; Ctrl-C stops)", flush=True)
  try: srv.serve_forever()
  except KeyboardInterrupt: pass
  finally: srv.server_close()

if __name__ == "__main__": main(sys.argv[1:])
