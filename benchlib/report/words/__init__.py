"""Words and numbers as a reader sees them: significant figures with units (``fmt``), table cells
(``cells``), the data dictionary of every column (``dictionary``), sentences written from their numbers
(``sentences``). Pure text; the lowest floor of the report."""
