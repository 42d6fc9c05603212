"""Findings as sentences: claims (``claims``), where the time goes against the roof (``work``), caveats
(``caveats``), and the key findings assembled (``key``). No rendering."""
