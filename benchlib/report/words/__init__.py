"""Words and numbers as a reader sees them: significant figures with units (``fmt``), table cells
(``cells``), the data dictionary of every column (``dictionary``). Pure text; the lowest floor of the report."""
