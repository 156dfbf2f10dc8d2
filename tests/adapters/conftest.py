"""The test adapters of this folder are importable as `adapters_broken:make_...` and
`adapters_declared:make_...` (the `package.module:factory` form a user's engine takes)."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
