"""What a report shows: tables and figures computed from result files, and the notebook views around them."""
