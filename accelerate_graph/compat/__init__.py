"""Everything this package borrows from transformers' and torch's internals, and nothing else.

A private attribute, a private module or an undocumented behaviour of an upstream library can change
in any release without notice. Each one we rely on is wrapped here in one small function (or, for a
base class, one subclass) whose docstring names the upstream symbol by its full dotted path, says why
no public API serves, and lists the versions it was checked against. tests/compat/test_compat.py
exercises each against the installed versions and fails naming the symbol when an upgrade removes or
changes it; tests/compat/test_no_internals_outside_compat.py fails when code outside this folder
reaches into an internal directly.

- torch_internals: torch's dispatch and function modes, pytrees, tensor versions, op schemas, dynamo's
  marks, counters and limits, inductor's configuration, decompositions, graph passes and caches, and
  the per-call lookup of `Module.forward`.
- transformers_internals: attention and experts implementation names in configs, cache-layer views,
  and the cache index attributes of attention modules.
"""
