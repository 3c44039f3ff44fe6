"""``python -m fucina.bench.replay``: see :mod:`fucina.bench.replay.cli`."""

import sys

from fucina.bench.replay.cli import main

sys.exit(main())
