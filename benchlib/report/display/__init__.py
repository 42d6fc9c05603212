"""What notebooks and pages show: tables as HTML (``show``), the summary notebook's sections (``summary``), the
pair and tune notebooks' (``pair``), the pair and profile pages' (``pages``), per-layer pages (``layers``), each
variant's difference split layer by layer (``explain``), a ``benchmark`` result at a glance (``glance``) and
the index of published reports (``site``)."""
