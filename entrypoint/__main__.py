"""`python -m entrypoint` is `dockyard-entrypoint` (where the console script is not installed)."""

from entrypoint.launcher.main import main

main()
