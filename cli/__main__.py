import sys

from schedcheck.cli.entry import main

sys.exit(main())
