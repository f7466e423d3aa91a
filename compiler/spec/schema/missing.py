"""omegaconf's marker for a mandatory value."""

from typing import Any

MISSING: Any = "???"
"""omegaconf's marker for a mandatory value (`omegaconf.MISSING` is this string), spelled out so that the
runtime does not import omegaconf."""
