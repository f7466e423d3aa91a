"""Loss curves as a picture (loss.png): a run's, or every point's of a sweep. Training loss against the step
and, where the metrics time it, against seconds of training (runs with different batches or compile times
compare on the second); validation loss (`val_loss` records) as points on the same axes, in its curve's
colour."""

from pathlib import Path

LOSS_PLOT = "loss.png"


def plot_losses(curves: list[tuple[str, list[dict]]], title: str, path: Path) -> None:
    """Draw `curves` (a label and its metrics records each) into `path`."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    timed = all(m.get("elapsed_s") is not None for _, curve in curves for m in curve)
    figure, panels = pyplot.subplots(1, 2 if timed else 1, figsize=(14 if timed else 8, 5), squeeze=False)
    for axes, x, label in zip(panels[0], ("step", "elapsed_s"), ("step", "seconds of training"), strict=False):
        for name, curve in curves:
            train = [m for m in curve if m.get("loss") is not None]
            (line,) = axes.plot([m[x] for m in train], [m["loss"] for m in train], marker=".", label=name[:60])
            validated = [m for m in curve if m.get("val_loss") is not None]
            if validated:
                axes.plot(
                    [m[x] for m in validated],
                    [m["val_loss"] for m in validated],
                    linestyle="--",
                    marker="o",
                    color=line.get_color(),
                    label=f"{name[:52]} (val)",
                )
        axes.set_xlabel(label)
        axes.set_ylabel("loss")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
