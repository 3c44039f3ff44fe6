"""``python -m benchmarks.replay``: see :mod:`benchmarks.replay.cli`."""

import sys

from benchmarks.replay.cli import main

sys.exit(main())
