"""dockyard's compiler: Hydra configs → a validated, content-hashed launch plan."""
