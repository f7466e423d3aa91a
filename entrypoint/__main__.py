"""`python -m entrypoint` is `dockyard-entrypoint` (where the console script is not installed)."""

from entrypoint.main import main

main()
