"""Studies end to end: pairs through papermill notebooks, the summary, HTML and the index, SLURM job arrays."""
