from __future__ import annotations

from tests.tune.corpus import local_ray

__all__ = ["local_ray"]
