"""`python -m controller ...` runs the hotagg-ctl command line."""

import sys

from controller.cli import main

sys.exit(main())
