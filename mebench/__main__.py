"""``python -m mebench ...``: the same as the ``mebench`` command."""

import sys

from mebench.cli import main

sys.exit(main())
