"""cugraph-accel: verified CUDA graphs for the decode step of Hugging Face causal LMs."""

__version__ = "0.1.0"


def accelerate(model, **options):
    """Route `model.generate()`'s decode steps through captured graphs; see accelerate_graph.generate.dropin.
    `settings=accelerate_graph.settings.DEFAULTS.replace(pdl=False)`, say, changes the engine's settings.

    Imported on first use: `import accelerate_graph` stays light."""
    from accelerate_graph.generate.dropin import accelerate as _accelerate

    return _accelerate(model, **options)
