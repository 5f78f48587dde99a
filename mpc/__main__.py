"""``python -m mpc`` runs the ``mpc-accel`` command line (see :mod:`mpc.cli`)."""

import sys

from .cli import main

sys.exit(main())
