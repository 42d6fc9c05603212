"""Findings as sentences: claims (``claims``, ``variants``), where the time goes against the roof (``work``), caveats
(``caveats``), why B is faster layer by layer (``explain``), bf16 against fp16 (``precisions``), and the key
findings assembled (``key``). No rendering."""
