"""Every file a report reads, read back here and nowhere else in ``report/``: results folders and their rows, noise
floors and recorded rules (``folders``), a run's own samples, per-layer file and telemetry (``samples``), profiles
(``profiles``), per-layer tables (``layers``), Optuna tuning studies with their figures (``tuning``), the environment
manifests (``manifests``), the one roof a page shows with every row placed under it (``roofs``) and published report
folders (``published``)."""
