"""The engine: a variant's knobs applied, the one training step, the train and evaluate loops, latency, weights."""
