"""Generating text through the captured graphs: a native decode loop and a drop-in for HF `generate()`."""
