"""A bundle directory as plain data and back: for tasks on nodes that share no disk.

pack_dir(DIR)            -> {relative path: bytes}   on the node that ran the task
unpack_dir(files, DIR)                               on the driver, under --out
"""

from __future__ import annotations

from pathlib import Path

BUNDLE_FILES_MAX = 64  # files in one bundle directory (a bundle has fewer than ten)
COMMAND_FILE = "command.txt"
HERE = b"{bundle}"


def pack_dir(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path relative to it (sorted: deterministic)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert len(files) <= BUNDLE_FILES_MAX, f"{folder}: {len(files)} files"
    packed = {str(p.relative_to(folder)): p.read_bytes() for p in files}
    if COMMAND_FILE in packed:
        packed[COMMAND_FILE] = packed[COMMAND_FILE].replace(str(folder).encode(), HERE)
    return packed


def unpack_dir(files: dict[str, bytes], folder: Path) -> Path:
    """Write `files` (from pack_dir) under `folder`; returns `folder`."""
    for relative, content in sorted(files.items()):
        path = folder / relative
        assert folder in path.parents, f"{relative}: outside the bundle"
        path.parent.mkdir(parents=True, exist_ok=True)
        if relative == COMMAND_FILE:
            content = content.replace(HERE, str(folder).encode())
        path.write_bytes(content)
    return folder
