#!/usr/bin/env python3
"""The fault and load program of `specdec serve` (issue 22): it starts the server on loopback,
runs every scenario an operator of a shared machine worries about against it, and prints one
table row per scenario: what was sent, what came back, the worst /health latency while it ran,
and the server's peak resident memory (sampled every 5 ms) against its idle one.

    tools/serve_faults.py --specdec build/ci/bin/specdec \
        --server-args "-m models/target-q8_0.gguf -md models/draft-q8_0.gguf -c 1024 -np 2"

It fails (exit 1) when a scenario's answer is not the expected one: a 500 to a request that
passed validation, /health slower than 1 s under idle and slow clients, a peak over 2x the idle
memory under the compressed, chunked and oversized bodies, a shutdown past its bound. It is a
program, not a unit test: it takes about a minute. Only the Python standard library is used.
"""

import argparse
import gzip
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from serve_process import start_server


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Watch:
    """While a scenario runs: the server's peak RSS, and /health's worst latency (polled)."""

    def __init__(self, pid, port):
        self.pid, self.port = pid, port
        self.peak = 0
        self.health_worst = 0.0
        self.health_failures = 0
        self.stop = threading.Event()

    def __enter__(self):
        self.threads = [threading.Thread(target=self._memory), threading.Thread(target=self._health)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()

    def _memory(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            time.sleep(0.005)

    def _health(self):
        while not self.stop.is_set():
            start = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("GET", "/health")
                conn.getresponse().read()
                conn.close()
            except OSError:
                self.health_failures += 1
            self.health_worst = max(self.health_worst, time.perf_counter() - start)
            time.sleep(0.05)


def raw(port, data, shutdown_write=False, timeout=30.0):
    """Sends bytes on a new connection, reads until the server closes: the reply's bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server answered and closed before taking it all (413)
        if shutdown_write:
            s.shutdown(socket.SHUT_WR)
        reply = b""
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            reply += chunk
        return reply
    finally:
        s.close()


def concurrently(n, fn):
    """fn() on n threads at once: their results, in the order they finished."""
    out = []
    threads = [threading.Thread(target=lambda: out.append(fn())) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def statuses(reply):
    return [int(m.group(1)) for m in re.finditer(rb"(?:^|\n)HTTP/1\.1 (\d{3})", reply)]


def post(port, path, body, headers=None, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    text = resp.read()
    conn.close()
    return resp.status, text


def request_bytes(method, path, body=b"", headers=""):
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specdec", required=True)
    ap.add_argument("--server-args", required=True)
    a = ap.parse_args()
    proc, port, err_path = start_server(a.specdec, a.server_args.split() + ["--timeout", "5"], "serve-faults")
    pid = proc.pid
    post(port, "/v1/completions", {"prompt": "warm up", "max_tokens": 4})
    idle = rss_bytes(pid)
    rows, failures = [], []

    def scenario(name, sent, run, expect, memory_bound=False, health_bound=None):
        with Watch(pid, port) as w:
            got = run()
        ok = expect(got)
        if memory_bound and w.peak > 2 * idle:
            ok = False
        if health_bound is not None and (w.health_worst > health_bound or w.health_failures):
            ok = False
        rows.append((name, sent, str(got)[:60], f"{w.health_worst * 1000:.0f} ms",
                     f"{w.peak / 1e6:.0f} MB ({w.peak / idle:.2f}x)", "ok" if ok else "FAIL"))
        if not ok:
            failures.append(name)

    big_prompt = json.dumps({"prompt": "a " * (32 << 20), "max_tokens": 4}).encode()  # 64 MiB
    scenario("gzip body", f"{len(gzip.compress(big_prompt)) // 1024} KB gzip of a 64 MiB prompt",
             lambda: statuses(raw(port, request_bytes("POST", "/v1/completions", gzip.compress(big_prompt),
                                                      "Content-Encoding: gzip\r\n"))),
             lambda got: got == [415], memory_bound=True)

    def chunked():
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        piece = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
        return statuses(raw(port, head + piece * 64))
    scenario("chunked body", "64 MiB in 1 MiB chunks", chunked, lambda got: got == [413],
             memory_bound=True)

    fifteen = json.dumps({"prompt": "a " * (15 << 19), "max_tokens": 4}).encode()  # 15 MiB
    def oversized():
        return sorted(concurrently(4, lambda: post(port, "/v1/completions", fifteen)[0]))
    scenario("4 x 15 MiB prompts", "4 concurrent, past the context",
             oversized, lambda got: all(code in (400, 413) for code in got), memory_bound=True)

    two = json.dumps({"prompt": "a " * (1 << 20), "max_tokens": 4}).encode()  # 2 MiB
    def past_context():
        out = concurrently(4, lambda: post(port, "/v1/completions", two))
        return sorted({(status, json.loads(text)["error"]["code"]) for status, text in out})
    scenario("4 x 2 MiB prompts", "4 concurrent, within the body limit, past the context",
             past_context, lambda got: got == [(400, "context_length_exceeded")], memory_bound=True)

    def idle_sockets():
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        time.sleep(3)
        for s in socks:
            s.close()
        return "200 held 3 s"
    scenario("200 silent sockets", "connect, send nothing", idle_sockets, lambda got: True,
             health_bound=1.0)

    def slow_clients():
        stop = time.time() + 4
        def one():
            s = socket.create_connection(("127.0.0.1", port))
            try:
                for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                    if time.time() > stop:
                        break
                    s.send(bytes([b]))
                    time.sleep(1.0)
            except OSError:
                pass
            s.close()
        concurrently(40, one)
        return "40 x 1 byte/s for 4 s"
    scenario("40 slow clients", "a header byte a second", slow_clients, lambda got: True,
             health_bound=1.0)

    def burst():
        def one():
            start = time.perf_counter()
            raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return time.perf_counter() - start
        return f"slowest {max(concurrently(200, one)) * 1000:.0f} ms"
    scenario("burst of 200", "200 connections at once", burst,
             lambda got: float(got.split()[1]) < 900)

    for field, value in [("temperature", 1e-39), ("temperature", 1e-40), ("top_p", 1e-300),
                         ("min_p", 1e-300), ("repetition_penalty", 1.0)]:
        body = {"prompt": "def f(x):", "max_tokens": 8, field: value}
        scenario(f"{field}={value}", json.dumps({field: value}),
                 lambda body=body: post(port, "/v1/completions", body)[0],
                 lambda got: got in (200, 400))

    def huge_value():
        status, text = post(port, "/v1/completions", {"prompt": "x", "temperature": "9" * (15 << 20)})
        return f"{status}, {len(text)} bytes"
    scenario("15 MB bad value", "temperature: a 15 MB string", huge_value,
             lambda got: got.split(",")[0] in ("400", "413") and int(got.split()[1]) < 2000)

    long_body = json.dumps({"prompt": "def fibonacci(n):", "max_tokens": 1000, "ignore_eos": True,
                            "temperature": 0.8}).encode()
    def disconnect():
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(request_bytes("POST", "/v1/completions", long_body))
        time.sleep(0.3)
        s.close()
        start = time.perf_counter()
        while time.perf_counter() - start < 30:
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.request("GET", "/health")
            if json.loads(conn.getresponse().read())["slots_processing"] == 0:
                return f"slot free after {(time.perf_counter() - start) * 1000:.0f} ms"
            time.sleep(0.01)
        return "slot still busy after 30 s"
    scenario("client gone (not streamed)", "close 0.3 s into a 1000-token request", disconnect,
             lambda got: got.startswith("slot free"))

    short = json.dumps({"prompt": "def add(a, b):", "max_tokens": 16, "temperature": 0}).encode()
    half = json.dumps({"prompt": "def add(a, b):", "max_tokens": 200, "ignore_eos": True}).encode()
    scenario("half-close", "a 200-token request, then shutdown(SHUT_WR)",
             lambda: statuses(raw(port, request_bytes("POST", "/v1/completions", half), shutdown_write=True)),
             lambda got: got == [100, 200])
    scenario("pipelined", "3 requests in one write",
             lambda: statuses(raw(port, request_bytes("GET", "/health") + request_bytes("POST", "/v1/completions", short)
                                  + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
             lambda got: got == [200, 200, 200])
    scenario("cross-origin POST", "text/plain from http://evil.example",
             lambda: post(port, "/v1/completions", short, {"Origin": "http://evil.example",
                                                           "Content-Type": "text/plain"})[0],
             lambda got: got == 403)

    # Shutdown with a silent client and a slow one connected: SIGTERM exits within its bound
    # (the last answers' --timeout, here 5 s; nothing is running).
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    socks[1].send(b"GET /he")
    start = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "killed"
    took = time.perf_counter() - start
    rows.append(("SIGTERM", "with a silent and a slow client", f"exit {code} after {took * 1000:.0f} ms", "-", "-",
                 "ok" if code == 0 and took < 5 else "FAIL"))
    if not (code == 0 and took < 5):
        failures.append("SIGTERM")
    for s in socks:
        s.close()
    with open(err_path, encoding="utf-8", errors="replace") as f:
        log = f.read()
    os.unlink(err_path)
    fives = len(re.findall(r"-> 5\d\d", log))
    for line in log.splitlines():
        if re.search(r"-> 5\d\d", line):
            print(line, file=sys.stderr)
    rows.append(("5xx logged", "the whole run", f"{fives} responses of 5xx", "-", "-", "ok" if fives == 0 else "FAIL"))
    if fives:
        failures.append("5xx")

    print(f"idle RSS {idle / 1e6:.0f} MB\n")
    print("| scenario | sent | came back | /health worst | peak RSS | |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if failures:
        sys.exit("failed: " + ", ".join(failures))


if __name__ == "__main__":
    main()
