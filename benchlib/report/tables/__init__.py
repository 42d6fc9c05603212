"""Tables as DataFrames: the headline (``headline``), ratios with their intervals (``comparisons``),
and the summary's other tables (``summaries``). No rendering."""
