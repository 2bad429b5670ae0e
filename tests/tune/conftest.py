from __future__ import annotations

from .corpus import local_ray

__all__ = ["local_ray"]
