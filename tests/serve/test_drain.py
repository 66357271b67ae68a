"""SIGTERM on a server process: new requests get 503 at once, a request that can finish within --drain-s does,
one that cannot fails with 503 at the deadline, and the process exits 0."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from serving import client, openai

SCRIPT = Path(__file__).with_name("serve_tiny.py")
ROOT = Path(__file__).resolve().parents[2]


def _listening(process: subprocess.Popen, timeout: float) -> int:
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(deadline - time.monotonic()):
            line = process.stdout.readline()
            if line.startswith("listening "):
                return int(line.split()[1])
            if not line:
                break
    process.kill()
    raise AssertionError(f"the server did not start: {process.stderr.read()[-2000:]}")


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_sigterm_refuses_new_requests_drains_what_runs_and_exits_0():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--drain-s", "2.5", "--step-s", "0.03"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{_listening(process, 180)}"
        api = client(url)
        name = api.models.list().data[0].id
        short = iter(api.completions.create(model=name, prompt="def main(", max_tokens=30, temperature=0, stream=True))
        long = iter(api.completions.create(model=name, prompt="def f(", max_tokens=120, temperature=0, stream=True))
        next(short), next(long)  # both are decoding (30 steps: about 1 s; 120: well past the deadline)
        process.send_signal(signal.SIGTERM)
        ends = {}

        def read_long():
            try:
                list(long)
            except openai.APIError as err:
                ends["long"] = err

        reader = threading.Thread(target=read_long)
        reader.start()
        deadline = time.monotonic() + 5
        while _health(url) != 503 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _health(url) == 503
        try:
            api.completions.create(model=name, prompt="def g(", max_tokens=2)
            raise AssertionError("a request during the drain was taken")
        except openai.APIStatusError as err:
            assert err.status_code == 503
        finish = [c.choices[0].finish_reason for c in short][-1]
        assert finish == "length"  # the short one finished within the drain
        reader.join(30)
        assert "did not finish within 2.5 s" in str(ends["long"])
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err[-2000:]
        assert out.strip().endswith("stopped")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
