import sys

from schedcheck.sim.cli import main

sys.exit(main())
