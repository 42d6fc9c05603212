"""How sure a comparison is: the statistics (``stats``), one inference per comparison of runs (``inference``), a
row's raw samples and which level of evidence applies (``samples``), which rows a report compares and how it
names them (``selection``), the noise floor (``floors``), how precisely a study's runs pin its figures
(``precision``), two results folders compared (``diff``) and the rules a study's rows were measured under
(``rules``). Statistics over the rows and samples ``readback`` reads; nothing here opens or writes a file."""
