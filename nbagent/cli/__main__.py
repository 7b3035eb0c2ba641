"""`python -m nbagent.cli`: the `nbagent` command, for a venv whose scripts are not on the path."""

import sys

from nbagent.cli.commands import main

sys.exit(main())
