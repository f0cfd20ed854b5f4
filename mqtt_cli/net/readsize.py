"""How much one read of a socket asks for, everywhere: broker, clients, bench, WebSocket.

64 KiB, not more: Python allocates the whole size for each recv() and gives back the rest after, and glibc's
malloc serves a request of 128 KiB or more with mmap (its threshold does not rise for a buffer shrunk rather
than freed). A read of 256 KiB then cost about 25 µs more than one of 64 KiB, whatever it read (a map, a page
fault, a remap and an unmap; measured on an AMD EPYC): for a 70-byte message, five times the read itself. A
reader with more waiting than that reads again at once.
"""

from __future__ import annotations

__all__ = ["READ_SIZE"]

READ_SIZE = 65536
