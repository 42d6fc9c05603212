"""Tables as DataFrames: the headline (``headline``), ratios with their intervals (``comparisons``), per-layer
tables (``layers``) and the summary's other tables (``summaries``). No rendering."""
