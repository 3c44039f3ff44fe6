"""``python -m fucina.cli ...`` is ``fucina ...``."""

import sys

from fucina.cli import main

sys.exit(main())
