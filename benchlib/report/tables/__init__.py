"""Tables as DataFrames: the headline (``headline``), ratios with their intervals (``comparisons``), per-layer
tables (``layers``), two configurations' step difference split layer by layer (``explain``, pure; its sides'
rows and per-layer files in ``explain_rows``) and the summary's other tables (``summaries``). No rendering."""
