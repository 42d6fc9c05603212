"""How sure a comparison is: the statistics (``stats``), one inference per comparison of runs (``inference``), a
row's raw samples and which level of evidence applies (``samples``), the rows a report reads (``selection``), the
noise floor (``floors``), how precisely a study's runs pin its figures (``precision``), two results folders
compared (``diff``) and the rules a study's rows were measured under (``rules``). Statistics over rows and
samples; ``diff``, ``samples``, ``selection`` and ``rules`` read them from results folders, and nothing here
writes a file."""
