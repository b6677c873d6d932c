"""``python -m lbdl_dsl.cli`` is ``lbdl``."""

import sys

from lbdl_dsl.cli import main

sys.exit(main())
