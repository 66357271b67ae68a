"""Stop inductor's compile-worker pools before a rank ends through os._exit.

Private torch internal (torch._inductor.async_compile.shutdown_compile_workers, there in 2.11 and
2.13): a rank that compiled (--fuse) and ends without the interpreter's exit handlers would leave the
pools' processes and semaphores behind ('leaked semaphore objects' from the resource tracker)."""

from __future__ import annotations

import sys


def stop_compile_workers() -> None:
    module = sys.modules.get("torch._inductor.async_compile")
    shutdown = getattr(module, "shutdown_compile_workers", None)
    if shutdown is None:  # never imported (no --fuse), or another torch: nothing to stop
        return
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - best effort on the way out; the process ends either way
        pass


def release_process_resources() -> None:
    """What a normal exit of a multiprocessing child would do first: run the finalizers that give the
    semaphores of pools and queues back to the resource tracker (stdlib-private, Python 3.8-3.13)."""
    import multiprocessing.util

    stop_compile_workers()
    run = getattr(multiprocessing.util, "_run_finalizers", None)
    if run is not None:
        try:
            run(0)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
