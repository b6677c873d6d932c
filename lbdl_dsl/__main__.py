"""``python -m lbdl_dsl`` is ``lbdl-compile``."""

import sys

from lbdl_dsl.cli import main

sys.exit(main())
