"""``python -m load``: see :mod:`load.load_generator`."""

import sys

from .load_generator import main

sys.exit(main())
