"""``python -m benchlib``: the same as the ``benchlib`` command."""
import sys

from .cli import main

sys.exit(main())
