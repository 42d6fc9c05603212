"""How sure a comparison is: the statistics (``stats``), a row's raw samples and which level of evidence
applies (``samples``), the rows a report reads (``selection``), the one roof a page shows and every row placed
under it (``roofs``), the noise floor (``floors``), how precisely a study's runs pin its figures
(``precision``), two results folders compared (``diff``) and the rules a study's rows were measured under
(``rules``). Statistics over rows and samples; ``diff``, ``samples``, ``selection``, ``roofs`` and ``rules``
read them from results folders, and nothing here writes a file."""
