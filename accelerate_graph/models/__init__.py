"""Getting a model: recipes (built-in model shapes with random weights, recipes/*.yaml), local folders and
hub ids loaded through transformers, and the fingerprint a plan keeps of the weights it was made with."""
