"""Put a prepared model, its engine, the scheduler and the HTTP front together (the CLI and the tests share it)."""

from __future__ import annotations

from dataclasses import dataclass

from accelerate_graph.generate.prompts import load_tokenizer
from accelerate_graph.generate.run import special_ids
from accelerate_graph.serve.app import Served, make_app
from accelerate_graph.serve.scheduler import DEFAULT_QUEUE, Scheduler


@dataclass
class Service:
    app: object  # the FastAPI app
    scheduler: Scheduler
    served: Served


def assemble(prepared, engine, *, max_batch: int | None = None, queue_limit: int = DEFAULT_QUEUE, name=None) -> Service:
    """The service of `engine` (a SlotEngine over `prepared`): not started (server.serve starts the scheduler)."""
    loaded = prepared.loaded
    tokenizer = load_tokenizer(loaded.reference if loaded.kind != "recipe" else None, loaded.revision)
    eos, _ = special_ids(loaded.model, tokenizer)
    scheduler = Scheduler(
        engine, tokenizer, eos, max_batch=max_batch, queue_limit=queue_limit, device=prepared.session.device
    )
    served = Served(name or loaded.reference, tokenizer, engine.max_len, engine.vocab_size)
    return Service(make_app(scheduler, served), scheduler, served)
