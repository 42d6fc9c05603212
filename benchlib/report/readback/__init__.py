"""Saved artefacts read back for a report: profiles (``profiles``), Optuna tuning studies with their
figures (``tuning``), the environment manifests (``manifests``)."""
