"""python -m baton: see baton.cli."""

import sys

from baton.cli import main

sys.exit(main())
