"""The built-in trainer, one process per rank under torchrun (`python -m entrypoint.trainer`): the model,
the engine that wraps it for a strategy, the data, checkpoints and metrics."""
