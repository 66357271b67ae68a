"""Run a command, keep its output in a log, and say how long it took to end after its last line.

Usage: python3 benchmarks/timed_exit.py LOG -- COMMAND...   (prints one line: exit code, total, exit lag)
The exit lag is issue 17's 'every process exits by itself within 10 s of the work ending': with --tp the
parent ends only after every rank has left the process group (or given up on it) and ended."""

from __future__ import annotations

import subprocess
import sys
import time


def main() -> int:
    log_path, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
    start = last = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:
            log.write(line)
            last = time.monotonic()
        code = process.wait()
    end = time.monotonic()
    print(f"exit {code}; {end - start:.1f} s in all; ended {end - last:.1f} s after its last line")
    return code


if __name__ == "__main__":
    sys.exit(main())
