"""How much one read of a socket asks for, everywhere: broker, clients, bench, WebSocket.

64 KiB, not more: Python allocates the whole size for each recv() and gives back the rest after, and glibc's
malloc serves a request of 128 KiB or more with mmap (its threshold does not rise for a buffer shrunk rather
than freed), so a larger read pays a map, a page fault and an unmap whatever it reads (docs/PERFORMANCE.md,
"Socket reads"). A reader with more waiting than that reads again at once.
"""

from __future__ import annotations

__all__ = ["READ_SIZE"]

READ_SIZE = 65536
