"""``python -m lbdl_dsl`` is ``lbdl``."""

import sys

from lbdl_dsl.cli import main

sys.exit(main())
