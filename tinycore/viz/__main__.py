"""`python -m tinycore.viz PATH [--port N]`: serve a saved VIZ dump or a profiler trace on 127.0.0.1."""
import argparse
from tinycore.viz import load, serve

def main() -> None:
  ap = argparse.ArgumentParser(prog="python -m tinycore.viz", description=__doc__)
  ap.add_argument("path", help="a VIZ dump (VIZ=1 saves one) or a Chrome trace JSON (PROFILE=1, tinycore.profile)")
  ap.add_argument("--port", type=int, default=8000, help="the port on 127.0.0.1 (default 8000; 0: any free one)")
  args = ap.parse_args()
  try: serve(load(args.path), args.port)
  except (OSError, ValueError) as e: ap.error(str(e))   # a missing file, one that is not a run, a port taken: said, without a traceback

if __name__ == "__main__": main()
