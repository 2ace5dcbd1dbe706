"""``python -m b200c``: the same as the ``b200c`` command."""
import sys

from .cli import main

sys.exit(main())
