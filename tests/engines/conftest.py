"""tests/engines: the reference engine; `refengine_helpers` (this folder) is importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
