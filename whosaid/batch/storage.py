"""Where `whosaid batch` reads and writes: local paths, or any URI that pyarrow's filesystems
open (`s3://bucket/key`, `gs://bucket/key`, `file:///...`). A location is a string, a local
absolute path or a URI, so that it travels to Ray workers as is and names the file in the
results table.

Writes are atomic: a local file is written beside its destination and renamed into place, and an
object store shows an object only once its upload is complete; readers (and resume) see the
whole file or none.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem


def is_uri(location: str) -> bool:
    return "://" in location


def normalise(location: str) -> str:
    """A local path as an absolute path (workers may run elsewhere than the current folder); a
    URI without a trailing slash."""
    if is_uri(location):
        return location.rstrip("/") if not location.endswith("://") else location
    return os.path.abspath(location)


def filesystem(location: str) -> "tuple[FileSystem, str]":
    """The filesystem that holds `location` and the path within it."""
    from pyarrow import fs

    if is_uri(location):
        return fs.FileSystem.from_uri(location)
    return fs.LocalFileSystem(), os.path.abspath(location)


def join(location: str, relative: str) -> str:
    """`relative` (a POSIX path) below `location`."""
    if is_uri(location):
        return posixpath.join(location, relative)
    return os.path.join(location, *relative.split("/"))


def relative_to(location: str, base: str) -> str:
    """`location`'s POSIX path below `base` (both normalised, and `location` inside `base`)."""
    if is_uri(location):
        return posixpath.relpath(location, base)
    return os.path.relpath(location, base).replace(os.sep, "/")


def is_inside(location: str, base: str) -> bool:
    if is_uri(location) != is_uri(base):
        return False
    separator = "/" if is_uri(location) else os.sep
    return location.startswith(base.rstrip(separator) + separator)


def read_bytes(location: str) -> bytes:
    files, path = filesystem(location)
    with files.open_input_stream(path) as stream:
        return stream.read()


def write_atomically(location: str, data: bytes) -> None:
    if not is_uri(location):
        directory = os.path.dirname(location)
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(location)}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(handle, "wb") as output:
                output.write(data)
                output.flush()
                os.fsync(output.fileno())
            os.replace(temporary, location)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise
        return
    files, path = filesystem(location)
    files.create_dir(posixpath.dirname(path), recursive=True)
    with files.open_output_stream(path) as output:
        output.write(data)


def list_files(location: str) -> list[str]:
    """Every file below the folder `location`, as POSIX paths relative to it (sorted); none when
    the folder does not exist. Temporary files of unfinished writes are left out."""
    from pyarrow import fs

    files, path = filesystem(location)
    if files.get_file_info(path).type != fs.FileType.Directory:
        return []
    found = files.get_file_info(fs.FileSelector(path, recursive=True))
    names = (posixpath.relpath(info.path, path) if is_uri(location) else os.path.relpath(info.path, path)
             for info in found if info.type == fs.FileType.File)
    return sorted(name.replace(os.sep, "/") for name in names if not _is_temporary(name))


def _is_temporary(name: str) -> bool:
    base = posixpath.basename(name.replace(os.sep, "/"))
    return base.startswith(".") and base.endswith(".tmp")
