"""One model end to end: corpus, tokenizer, training, held-out measure, saved folder."""

from __future__ import annotations

import functools
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from accelerate_graph.training import evaluation, save
from accelerate_graph.training.corpus import Corpus, load_corpus
from accelerate_graph.training.loop import build_model, say, train
from accelerate_graph.training.model_specs import ModelSpec
from accelerate_graph.training.tokenizer import token_stream, train_tokenizer

CPU_THREADS = 1  # fixed, so a CPU run repeats its loss curve on one machine (and a busy machine wastes none)
SAMPLE_CHARS = 12_000  # held-out text saved in the folder for re-measuring


@dataclass(frozen=True)
class TrainingData:
    corpus: Corpus
    tokenizer: object  # a PreTrainedTokenizerFast
    train_ids: torch.Tensor
    held_ids: torch.Tensor


@functools.lru_cache(maxsize=2)
def prepare_data(
    corpus_bytes: int, include_tests: bool, vocab_size: int, chat: bool, log: Callable[[str], None] = say
) -> TrainingData:
    """Corpus, tokenizer and token streams; models of one run that share them train one tokenizer."""
    corpus = load_corpus(corpus_bytes, include_tests)
    log(
        f"corpus: {len(corpus.train_files)} files, {corpus.train_bytes:,} bytes; held out "
        f"{len(corpus.held_out_files)} files, {corpus.held_out_bytes:,} bytes (Python {corpus.python})"
    )
    tokenizer = train_tokenizer(corpus.train, vocab_size, chat)
    train_ids = token_stream(tokenizer, corpus.train)
    held_ids = token_stream(tokenizer, corpus.held_out)
    log(f"tokenizer: {len(tokenizer)} ids; {train_ids.numel():,} training, {held_ids.numel():,} held-out tokens")
    return TrainingData(corpus, tokenizer, train_ids, held_ids)


def train_model(
    spec: ModelSpec,
    out: Path,
    device: torch.device,
    steps: int | None,
    budget_s: float,
    log: Callable[[str], None] = say,
    command: str = "",
) -> dict:
    """Train `spec` and write its folder at `out`; returns the report saved as training.json."""
    began = time.perf_counter()
    if device.type == "cpu":
        torch.set_num_threads(CPU_THREADS)
    data = prepare_data(spec.corpus_bytes, spec.include_tests, spec.vocab_size, spec.chat, log)
    corpus, tokenizer, train_ids, held_ids = data.corpus, data.tokenizer, data.train_ids, data.held_ids

    model = build_model(spec, tokenizer, device)
    parameters = sum(p.numel() for p in model.parameters())
    log(f"model: {spec.model_type}, {parameters:,} parameters, on {device}")
    result = train(model, train_ids, spec, device, steps, budget_s, log)

    dtype = getattr(torch, spec.save_dtype)
    model = model.to(dtype).float()  # measure the weights as saved
    windows = evaluation.held_out_windows(held_ids, spec.context, spec.eval_tokens)
    counts = evaluation.unigram_counts(train_ids, spec.vocab_size)
    held_out = evaluation.compare_with_unigram(model, windows, counts, device)
    report = {
        "name": spec.name,
        "description": spec.description,
        "command": command,
        "model_type": spec.model_type,
        "parameters": parameters,
        "saved_dtype": spec.save_dtype,
        "corpus": corpus.describe(),
        "tokenizer": {"kind": "byte-level BPE", "vocab_size": len(tokenizer), "chat_template": spec.chat},
        "training": {
            "device": str(device),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "steps": result.steps,
            "stopped_by": result.stopped_by,
            "seconds": result.seconds,
            "tokens_seen": result.tokens,
            "epochs": round(result.tokens / train_ids.numel(), 2),
            "batch": spec.batch,
            "context": spec.context,
            "lr": spec.lr,
            "seed": spec.seed,
            "budget_s": budget_s,
            "loss_curve": result.losses,
        },
        "held_out": held_out,
        "total_seconds": round(time.perf_counter() - began, 1),
    }
    sample = "".join(corpus.held_out)[:SAMPLE_CHARS]
    save.write_folder(out, model.to(dtype), tokenizer, report, counts, sample)
    log(summary_line(report))
    return report


def summary_line(report: dict) -> str:
    held = report["held_out"]
    return (
        f"{report['name']}: held-out {held['model']['nats_per_token']:.3f} nats/token "
        f"(perplexity {held['model']['perplexity']:.1f}) against unigram {held['unigram']['nats_per_token']:.3f} "
        f"(perplexity {held['unigram']['perplexity']:.1f}) on {held['tokens']:,} tokens; "
        f"{report['training']['steps']} steps in {report['training']['seconds']:.0f} s"
    )
