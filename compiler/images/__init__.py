"""Container images for a plan: render the family's Dockerfile, gather its context, build and push it.

`render` turns the Plan into Dockerfile text (the templates are this package's data: `*.j2`, with
`constraints.txt` and the `make-base` script), `context` gathers every file the build reads and hashes them
with the Dockerfile into the image's tag, `build` runs the build through the Docker SDK (a no-op when the tag
exists) and `push` sends it to a registry.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""This package's folder, where it is installed: its templates, pins and base-image script lie in it."""
PACKAGES_ROOT = PACKAGE_DIR.parents[1]
"""The folder dockyard's packages are installed in (site-packages, or the checkout of an editable install):
the runtime sources copied into every image are read from it, so the image is the installed dockyard's."""
