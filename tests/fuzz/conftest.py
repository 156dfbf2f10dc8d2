"""The toy engine (tests/sim/toy_engine.py) is importable as `toy_engine:make_engine`."""

import sys
from pathlib import Path

TOY_DIR = str(Path(__file__).resolve().parent.parent / "sim")
if TOY_DIR not in sys.path:
    sys.path.insert(0, TOY_DIR)
