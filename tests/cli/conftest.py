"""The toy engines of tests/sim (toy_engine.py, planted_pool_engine.py) are importable by name."""

import sys
from pathlib import Path

TOY_DIR = str(Path(__file__).resolve().parent.parent / "sim")
if TOY_DIR not in sys.path:
    sys.path.insert(0, TOY_DIR)
