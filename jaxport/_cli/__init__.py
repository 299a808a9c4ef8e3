"""The ``jaxport`` command line, one module per command group (``main`` assembles them).

The package is private: its interface is the command line, not Python names. Importing it (or
one of its modules, as ``jaxport run``'s child imports ``runner``) imports no command: the
entry point is ``jaxport._cli.main:main``.
"""

__all__: list[str] = []
