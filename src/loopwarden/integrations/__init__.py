"""Framework integrations, one module each, installed with an extra.

``import loopwarden.integrations`` imports no framework; each module imports its
framework when it is imported itself and names the extra to install if missing.
"""

from __future__ import annotations
