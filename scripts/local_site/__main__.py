from __future__ import annotations

import argparse
import sys
import threading

from scripts.local_site.server import start


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.local_site")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server, url = start(args.port)
    print(f"SITE {url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
