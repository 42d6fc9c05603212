"""Running configurations: measure one (no files), record it (rows, resume, weights), profile it, tune it."""
