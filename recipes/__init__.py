"""Built-in model recipes (YAML files beside this one), shipped as package data."""
