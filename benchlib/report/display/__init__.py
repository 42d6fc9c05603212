"""What notebooks and pages show: a study's results read once with a section per method (``results``), tables
as HTML (``show``), the summary notebook's sections (``summary``), the pair and tune notebooks' (``pair``), the
pair and profile pages' (``pages``), per-layer pages, each variant's difference split layer by layer and the
predictions made from them (``layers``), a ``benchmark`` result at a glance (``glance``) and the index of
published reports (``site``)."""
