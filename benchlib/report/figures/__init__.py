"""Every figure (matplotlib), each also saved as a PNG: the shared style (``style``), charts of measured figures
(``charts``), profiles (``profile``), telemetry (``telemetry``), rooflines (``roofline``) and per-layer
rooflines (``layers``)."""
