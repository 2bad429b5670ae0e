"""The hook command ``loopwarden install`` writes: ``python -S .../hooks/entry.py AGENT``.

Run as a file by an interpreter started without ``site`` (``-S``): the cheapest
start Python has, since ``site`` alone imports ``os`` and reads the ``.pth``
files. It puts the directory that holds the ``loopwarden`` package first on
the path and runs :func:`loopwarden.hooks._protocol.main`, which imports
nothing else while the hook helper answers (it imports ``site`` itself when
it has to handle the event in process).
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path.

if __name__ == "__main__":
    import sys

    # This file is <dir>/loopwarden/hooks/entry.py; <dir> holds the package.
    sys.path[0] = __file__.replace("\\", "/").rsplit("/", 3)[0]
    from loopwarden.hooks._protocol import main

    raise SystemExit(main(sys.argv[1:]))
