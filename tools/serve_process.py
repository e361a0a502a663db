"""`specdec serve` started on a free loopback port, for the tools that drive it
(serve_load.py, serve_faults.py). Only the Python standard library is used."""

import re
import subprocess
import sys
import tempfile
import time


def start_server(specdec, args, name="serve"):
    """Starts `specdec serve --host 127.0.0.1 --port 0 ARGS` with stderr in a temporary file and
    waits for its "listening on" line: (process, port, path of the stderr file)."""
    err = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".err", delete=False)
    proc = subprocess.Popen([specdec, "serve", "--host", "127.0.0.1", "--port", "0"] + args,
                            stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 300
    while True:
        with open(err.name, encoding="utf-8", errors="replace") as f:
            text = f.read()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
        if m:
            return proc, int(m.group(1)), err.name
        if proc.poll() is not None or time.time() > deadline:
            sys.exit("the server did not start:\n" + text)
        time.sleep(0.05)
