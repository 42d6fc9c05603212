"""Saved artefacts read back for a report: profiles (``profiles``), per-layer tables (``layers``), Optuna tuning
studies with their figures (``tuning``), the environment manifests (``manifests``), and the one roof a page shows
with every row placed under it (``roofs``)."""
