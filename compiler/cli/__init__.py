"""The `dockyard` command (`main`): its verbs, and the Hydra tasks behind them (`tasks`)."""
