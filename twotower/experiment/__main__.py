"""`python -m twotower.experiment`: the same as `twotower experiment`."""

import sys

from twotower import cli

sys.exit(cli.run_stage("experiment"))
