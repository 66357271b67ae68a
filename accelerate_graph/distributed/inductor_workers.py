"""Give back what a rank's pools hold before it ends through os._exit.

A rank that compiled (--fuse) and ends without the interpreter's exit handlers would leave inductor's
compile-worker pools and their semaphores behind ('leaked semaphore objects' from the resource tracker)."""

from __future__ import annotations

from accelerate_graph.compat.torch_internals import stop_compile_workers


def release_process_resources() -> None:
    """What a normal exit of a multiprocessing child would do first: stop inductor's compile workers,
    then run the finalizers that give the semaphores of pools and queues back to the resource tracker
    (`multiprocessing.util._run_finalizers`: Python's own, not torch's; Python 3.8-3.13)."""
    import multiprocessing.util

    try:
        stop_compile_workers()
    except Exception:  # noqa: BLE001 - best effort on the way out; the process ends either way
        pass
    run = getattr(multiprocessing.util, "_run_finalizers", None)
    if run is not None:
        try:
            run(0)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
