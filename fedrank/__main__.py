"""``python -m fedrank``."""

import sys

from fedrank.cli import main

sys.exit(main())
