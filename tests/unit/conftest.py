"""Make the working tree importable as ``ansible_collections.gpufleet.serving``.

The repository root is the collection root. ``.collections/ansible_collections/gpufleet/serving``
(made by ``make setup``, ignored by git) links back to it, so tests import the checkout itself and
never an installed copy.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS_ROOT = REPO / ".collections"
LINK = COLLECTIONS_ROOT / "ansible_collections" / "gpufleet" / "serving"
if not LINK.exists():
    LINK.parent.mkdir(parents=True, exist_ok=True)
    LINK.symlink_to("../../..")
if str(COLLECTIONS_ROOT) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS_ROOT))
