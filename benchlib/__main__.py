"""``python -m benchlib``: the same as the ``benchlib`` command."""
from .cli import entry

entry()
