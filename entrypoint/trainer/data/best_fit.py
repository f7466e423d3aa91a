"""Whole-document packing (`data.packing_strategy=bfd`, TRL's `packing_strategy="bfd"`): documents placed into
windows by best-fit decreasing, so that no document is cut across two windows. The longest documents are placed
first, each into the open window whose room left is the smallest that still holds it, or into a new window; the
room a window does not fill is padding (end-of-text tokens that are no targets).

A window holds seq_len + 1 tokens (the inputs and, shifted by one, the targets). A document longer than that
fits no window: `data.overlong` says whether it gets a window of its own, cut at the end (truncate), or is left
out (drop), as it does for unpacked documents.
"""

import bisect
from collections import defaultdict

import numpy as np


def best_fit_decreasing(lengths: np.ndarray, room: int) -> list[list[int]]:
    """The documents of each window, by number (a document of `lengths` longer than `room` alone in its own);
    windows in the order they were opened, each window's documents in the order they were placed. The same
    lengths give the same windows on every rank."""
    order = sorted(range(len(lengths)), key=lambda document: (-int(lengths[document]), document))
    windows: list[list[int]] = []
    by_room: dict[int, list[int]] = defaultdict(list)
    """Room left → the windows with that much room (a stack: the latest opened is filled first)."""
    rooms: list[int] = []
    """The room values that some open window has, sorted."""
    for document in order:
        length = int(lengths[document])
        if length >= room:  # fills a window, whole or cut: nothing else goes in
            windows.append([document])
            continue
        place = bisect.bisect_left(rooms, length)
        if place == len(rooms):
            window, left = len(windows), room
            windows.append([])
        else:
            left = rooms[place]
            window = by_room[left].pop()
            if not by_room[left]:
                rooms.pop(place)
        windows[window].append(document)
        left -= length
        if left > 0:
            if not by_room[left]:
                bisect.insort(rooms, left)
            by_room[left].append(window)
    return windows
