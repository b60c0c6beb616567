"""A real illegal instruction, for the tests of the crash paths."""

import ctypes
import mmap
import platform


def illegal_instruction() -> None:
    """Execute a real illegal instruction (ud2 / udf)."""
    code = b"\x0f\x0b" if platform.machine().lower() in ("x86_64", "amd64", "i686", "i386") else b"\x00\x00\x00\x00"
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    ctypes.CFUNCTYPE(None)(addr)()
