"""Container images for a plan: render the family's Dockerfile, gather its context, build and push it.

`render` turns the Plan into Dockerfile text (templates in the top-level `images/` folder), `context`
gathers every file the build reads and hashes them with the Dockerfile into the image's tag, `build`
runs the build through the Docker SDK (a no-op when the tag exists) and `push` sends it to a registry.
"""

from pathlib import Path

DOCKYARD_ROOT = Path(__file__).resolve().parents[2]
"""dockyard's source tree: the templates in `images/` and the package sources copied into every image."""
