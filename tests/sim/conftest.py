"""The toy engine (tests/sim/toy_engine.py) is importable as `toy_engine:make_engine`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
