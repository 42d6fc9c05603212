"""Every figure benchlib draws (matplotlib), each also saved as a PNG: the shared style (``style``), charts of
measured figures (``charts``), profiles (``profile``), telemetry (``telemetry``), rooflines (``roofline``),
per-layer rooflines (``layers``) and a difference split layer by layer (``explain``); a tuning study's figures
are Optuna's own, saved by ``readback.tuning``."""
