"""``python -m jaxport._cli ARGS``: the ``jaxport`` command (scripts/audit_matrix.sh runs it
under each release's interpreter)."""

from jaxport._cli.main import main

main()
