#!/usr/bin/env python3
"""`specdec serve` driven by the real `openai` Python client (ctest: server.openai_client).

Starts the server on a free loopback port with the bundled demo pair and checks, through
openai.OpenAI: /v1/models; completions (greedy output equal to `specdec generate` for the same
prompt and settings, sampled output equal for the same seed), streamed and not; chat
completions streamed and not; concurrent requests each equal to their sequential result; a
stream closed mid-way frees its slot (the metrics count it cancelled); bad requests raise
openai.BadRequestError with the server's error object; SIGTERM ends the server with status 0.

When `import openai` fails, the client is installed with `python3 -m pip install --quiet
openai`; when that fails too the test exits 77, which ctest reports as SKIPPED (with the reason
printed), never as a pass.
"""

import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


def import_openai():
    try:
        import openai  # noqa: F401
        return openai
    except ImportError:
        pass
    print("openai is not installed: trying python3 -m pip install --quiet openai", flush=True)
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "openai"],
                             capture_output=True, text=True)
    if install.returncode != 0:
        # Debian's python refuses pip installs outside a virtual environment (PEP 668).
        install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                                  "--break-system-packages", "openai"],
                                 capture_output=True, text=True)
    try:
        import importlib
        importlib.invalidate_caches()
        import openai  # noqa: F401
        return openai
    except ImportError:
        print("SKIP: the openai Python package is not installed and pip could not install it:\n"
              + install.stdout + install.stderr, flush=True)
        sys.exit(SKIP)


class Server:
    """specdec serve on a free port, as a context manager: SIGTERM at the end of the block, whose
    exit status must be 0; on an exception, its stderr is printed and it is killed."""

    def __init__(self, specdec, args):
        self.err = tempfile.NamedTemporaryFile(prefix="specdec-serve-", suffix=".err",
                                               delete=False)
        self.proc = subprocess.Popen([specdec, "serve", "--host", "127.0.0.1", "--port", "0"]
                                     + args, stdout=subprocess.DEVNULL, stderr=self.err)
        deadline = time.time() + 120
        while True:
            text = self.stderr()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("the server did not start:\n" + text)
            time.sleep(0.01)
        self.base = f"http://127.0.0.1:{self.port}"

    def stderr(self):
        with open(self.err.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def metrics(self):
        import urllib.request
        with urllib.request.urlopen(self.base + "/metrics", timeout=30) as r:
            return r.read().decode()

    def metric(self, sample):
        for line in self.metrics().splitlines():
            if line.startswith(sample + " "):
                return float(line.split(" ")[-1])
        return None

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=120)
        finally:
            os.unlink(self.err.name)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            print(self.stderr(), file=sys.stderr)
            self.stop(signal.SIGKILL)
            return False
        status = self.stop()
        check(status == 0, f"exit status {status} after SIGTERM")
        return False


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def generate(args, prompt, max_tokens, temperature, seed, context, extra=()):
    out = subprocess.run([args.specdec, "generate", "-m", args.target, "-md", args.draft, "-p",
                          prompt, "-n", str(max_tokens), "--temp", str(temperature), "-s",
                          str(seed), "-c", str(context), "--top-k", "0", "--top-p", "1",
                          "--min-p", "0", "--sampler-order", "hf", "--json", *extra],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--specdec", required=True)
    parser.add_argument("--models", required=True)
    args = parser.parse_args()
    args.target = os.path.join(args.models, "target-q8_0.gguf")
    args.draft = os.path.join(args.models, "draft-q8_0.gguf")
    openai = import_openai()
    print(f"openai {openai.__version__}", flush=True)

    context = 1024
    with Server(args.specdec, ["-m", args.target, "-md", args.draft, "-c", str(context),
                               "-np", "4", "--chat-template", "chatml"]) as server:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="not-needed",
                               max_retries=0, timeout=120)
        models = client.models.list()
        check([m.id for m in models.data] == ["target-q8_0"], f"models: {models}")
        model = models.data[0].id

        # Completions equal `specdec generate`, greedy and sampled with a seed.
        cases = [("def fibonacci(n):", 0.0, 0), ("1 In the beginning God", 0.8, 7),
                 ("import os\n", 1.0, 12)]
        expected = {}
        for prompt, temperature, seed in cases:
            want = generate(args, prompt, 32, temperature, seed, context)
            got = client.completions.create(model=model, prompt=prompt, max_tokens=32,
                                            temperature=temperature, seed=seed)
            check(got.choices[0].text == want["text"],
                  f"{prompt!r} t={temperature}: {got.choices[0].text!r} != {want['text']!r}")
            check(got.usage.completion_tokens == len(want["tokens"]), f"usage {got.usage}")
            check(got.usage.prompt_tokens == len(want["prompt_tokens"]), f"usage {got.usage}")
            extra = got.model_extra or {}
            check(extra.get("speculative", {}).get("seed") == seed, f"extension {extra}")
            pieces, finish = [], None
            for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=32,
                                                   temperature=temperature, seed=seed,
                                                   stream=True):
                pieces.append(chunk.choices[0].text)
                finish = chunk.choices[0].finish_reason or finish
            check("".join(pieces) == want["text"], f"stream {''.join(pieces)!r}")
            check(finish == "length", f"finish_reason {finish}")
            expected[(prompt, temperature, seed)] = want["text"]
        print("completions: equal to specdec generate, streamed and not", flush=True)

        # Chat completions.
        messages = [{"role": "system", "content": "You write Python."},
                    {"role": "user", "content": "def fibonacci(n):"}]
        chat = client.chat.completions.create(model=model, messages=messages, max_tokens=24,
                                              temperature=0)
        check(chat.choices[0].message.role == "assistant", f"{chat}")
        check("<|im_end|>" not in chat.choices[0].message.content, "end of turn leaked")
        streamed = "".join(c.choices[0].delta.content or "" for c in
                           client.chat.completions.create(model=model, messages=messages,
                                                          max_tokens=24, temperature=0,
                                                          stream=True))
        check(streamed == chat.choices[0].message.content,
              f"chat stream {streamed!r} != {chat.choices[0].message.content!r}")
        print("chat completions: streamed equals whole", flush=True)

        # Log-probabilities: the client reads OpenAI's logprobs objects, equal to those of
        # `specdec generate --n-probs` (the target's processed distribution of each token).
        for prompt, temperature, seed in cases:
            want = generate(args, prompt, 12, temperature, seed, context, ("--n-probs", "3"))
            got = client.completions.create(model=model, prompt=prompt, max_tokens=12,
                                            temperature=temperature, seed=seed, logprobs=3)
            lp = got.choices[0].logprobs
            check(lp is not None and len(lp.token_logprobs) == len(want["tokens"]), f"{lp}")
            check(lp.token_logprobs == [t["logprob"] for t in want["logprobs"]],
                  f"{prompt!r}: {lp.token_logprobs} != {want['logprobs']}")
            check(all(len(top) <= 3 for top in lp.top_logprobs), f"{lp.top_logprobs}")
            for top, t in zip(lp.top_logprobs, want["logprobs"]):
                check(max(top.values()) == t["top_logprobs"][0]["logprob"], f"{top} {t}")
                check(t["logprob"] <= 0, f"{t}")
            check(lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset), f"{lp}")
        chat = client.chat.completions.create(model=model, messages=messages, max_tokens=8,
                                              temperature=0.7, seed=3, logprobs=True,
                                              top_logprobs=2)
        content = chat.choices[0].logprobs.content
        check(len(content) == chat.usage.completion_tokens, f"{chat.choices[0].logprobs}")
        for entry in content:
            check(entry.logprob <= 0 and 1 <= len(entry.top_logprobs) <= 2, f"{entry}")
            check(bytes(entry.bytes).decode("utf-8", "replace") == entry.token or
                  not entry.token.isprintable(), f"{entry}")
        streamed = []
        for c in client.chat.completions.create(model=model, messages=messages, max_tokens=8,
                                                temperature=0.7, seed=3, logprobs=True,
                                                top_logprobs=2, stream=True):
            if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content:
                streamed += c.choices[0].logprobs.content
        check([e.logprob for e in streamed] == [e.logprob for e in content],
              f"streamed logprobs {streamed} != {content}")
        print("logprobs: equal to specdec generate --n-probs; chat's, streamed and not", flush=True)

        # Penalties and logit bias through the client: the greedy first token, biased by -100,
        # is not the first token any more.
        plain = generate(args, "def fibonacci(n):", 8, 0.0, 0, context, ("--n-probs", "0"))
        first = plain["logprobs"][0]
        got = client.completions.create(model=model, prompt="def fibonacci(n):", max_tokens=8,
                                        temperature=0, presence_penalty=1.0,
                                        frequency_penalty=0.5,
                                        logit_bias={str(first["id"]): -100}, logprobs=0)
        check(got.choices[0].logprobs.tokens[0] != first["token"],
              f"{got.choices[0].logprobs.tokens} starts with the biased {first}")
        print("penalties and logit_bias: accepted, the biased token avoided", flush=True)

        # Concurrent requests: each gets what it got alone.
        def one(case):
            prompt, temperature, seed = case
            return client.completions.create(model=model, prompt=prompt, max_tokens=32,
                                             temperature=temperature, seed=seed).choices[0].text
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases)) as pool:
            for case, text in zip(cases, pool.map(one, cases * 2)):
                check(text == expected[case], f"concurrent {case}: {text!r}")
        print("concurrent requests: equal to their sequential results", flush=True)

        # A stream closed after two chunks: the request is cancelled and the slot freed.
        stream = client.completions.create(model=model, prompt="def f(x):", max_tokens=1000,
                                           temperature=0.8, stream=True,
                                           extra_body={"ignore_eos": True})
        for i, _ in enumerate(stream):
            if i == 1:
                break
        stream.close()
        deadline = time.time() + 120
        while server.metric('specdec_requests_total{finish_reason="cancelled"}') != 1:
            check(time.time() < deadline, "the closed stream was not cancelled")
            time.sleep(0.02)
        check(server.metric('specdec_slots{state="busy"}') == 0, "a slot is still busy")
        print("closed stream: cancelled, slot freed", flush=True)

        # Bad requests: BadRequestError with the server's error object.
        for kwargs, param in [({"n": 2}, "n"), ({"temperature": 5}, "temperature"),
                              ({"logprobs": 50}, "logprobs"),
                              ({"presence_penalty": 3}, "presence_penalty"),
                              ({"model": "gpt-4"}, "model"),
                              ({"prompt": "x" * 8000}, "prompt")]:
            request = {"model": model, "prompt": "def f():", "max_tokens": 4}
            request.update(kwargs)
            try:
                client.completions.create(**request)
                raise AssertionError(f"{kwargs} was accepted")
            except openai.BadRequestError as e:
                check(e.status_code == 400, f"{kwargs}: {e.status_code}")
                body = e.body if isinstance(e.body, dict) else {}
                body = body.get("error", body)
                check(body.get("param") == param, f"{kwargs}: {e.body}")
                check(isinstance(body.get("message"), str) and body["message"], f"{e.body}")
        check(client.completions.create(model=model, prompt="def f():", max_tokens=4)
              .choices[0].finish_reason == "length", "the server stopped serving")
        print("bad requests: 400 with an error object; the server goes on", flush=True)
    print("SIGTERM: exit 0", flush=True)

    # --api-key: the client's api_key is sent as "Authorization: Bearer"; a wrong one is refused
    # with 401, which the client raises as AuthenticationError.
    with Server(args.specdec, ["-m", args.target, "-md", args.draft, "-c", str(context),
                               "--api-key", "sk-specdec-test"]) as server:
        keyed = openai.OpenAI(base_url=server.base + "/v1", api_key="sk-specdec-test",
                              max_retries=0, timeout=120)
        want = generate(args, "def fibonacci(n):", 16, 0.0, 0, context)
        got = keyed.completions.create(model=model, prompt="def fibonacci(n):", max_tokens=16,
                                       temperature=0.0, seed=0)
        check(got.choices[0].text == want["text"], "with the API key: not generate's text")
        wrong = openai.OpenAI(base_url=server.base + "/v1", api_key="sk-wrong", max_retries=0,
                              timeout=120)
        try:
            wrong.completions.create(model=model, prompt="x", max_tokens=1)
            raise AssertionError("a wrong API key was accepted")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, f"wrong key: {e.status_code}")
        # Without any key (no Authorization header at all): 401 too.
        import urllib.error
        import urllib.request
        try:
            urllib.request.urlopen(urllib.request.Request(
                server.base + "/v1/completions", data=b'{"prompt": "x", "max_tokens": 1}',
                headers={"Content-Type": "application/json"}), timeout=60)
            raise AssertionError("a request without a key was accepted")
        except urllib.error.HTTPError as e:
            check(e.code == 401, f"no key: {e.code}")
        print("--api-key: the right key passes, a wrong one and none get 401", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
