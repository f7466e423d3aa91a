"""dockyard's in-container runtime. It needs only the plan (JSON) and torch: no Hydra, no docker."""
