"""The dtgui training program: run once per task of a run bundle.

Copied verbatim into every bundle as the package ``dtgui_worker``; it uses relative imports
only. Importing this package does not import TensorFlow.
"""

from __future__ import annotations

EVENT_SCHEMA_VERSION = 1
