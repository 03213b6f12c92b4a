"""``python -m tools.dlc_describe`` (from the repository root) or ``python tools/dlc_describe``: run the generator."""

from __future__ import annotations

import importlib
import os
import sys

if __package__:
    from .generate import main
else:  # the folder itself was run: import it as the package ``tools.dlc_describe`` of the repository root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main = importlib.import_module("tools.dlc_describe.generate").main

if __name__ == "__main__":
    sys.exit(main())
