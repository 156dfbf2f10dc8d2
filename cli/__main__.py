import sys

from schedcheck.cli.main import main

sys.exit(main())
