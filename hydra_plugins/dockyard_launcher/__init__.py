"""dockyard's Hydra launcher: `dockyard launch -m hydra/launcher=dockyard ...` (see `compiler.sweep`)."""
