"""Atomic writes and small manifest helpers shared by every long job.

A file is written to a temporary sibling and renamed into place, so a killed job never leaves a
half-written file that looks complete. A :class:`Manifest` is an append-only JSON-lines record of
finished item ids; a job restarted with the same command skips what the manifest lists.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["current_umask", "atomic_write_bytes", "atomic_write_text", "atomic_write", "atomic_save_image",
           "Manifest", "write_csv", "write_json", "table_meta_path", "read_table_meta", "skipped_path",
           "skip_reason"]


def current_umask() -> int:
    """The process's umask, read at each call (a later ``os.umask`` is honoured).

    Linux reports it in ``/proc/self/status``, read without changing it, so this is thread safe.
    Elsewhere it is set and restored at once; a file another thread creates in that instant gets
    the usual 022 (never 0, which would make it world-writable)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, writer: Callable[[Path], None]) -> Path:
    """Call ``writer(tmp_path)`` then rename ``tmp_path`` onto ``path`` (same folder, atomic).

    The file gets the mode a plain ``open(path, "w")`` would give it (0666 filtered by the umask,
    so 0644 under the usual 022): ``mkstemp``'s private 0600 would hide results from the group."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        writer(tmp_path)
        os.chmod(tmp_path, 0o666 & ~current_umask())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda p: p.write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda p: p.write_text(text))


def atomic_save_image(path: str | os.PathLike, image, **save_kw) -> Path:
    """Save a PIL image atomically; the format comes from ``path``'s suffix."""
    fmt = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}.get(
        Path(path).suffix.lower(), "PNG")
    return atomic_write(path, lambda p: image.save(p, format=fmt, **save_kw))


def write_csv(df, path: str | os.PathLike, **kw) -> Path:
    """Write a pandas DataFrame as CSV atomically (index off by default)."""
    kw.setdefault("index", False)
    return atomic_write(path, lambda p: df.to_csv(p, **kw))


def write_json(obj: Any, path: str | os.PathLike) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, default=str))


def table_meta_path(table: str | os.PathLike) -> Path:
    """The provenance sidecar of a table: ``x.csv`` -> ``x.meta.json``."""
    p = Path(table)
    return p.with_name(p.name[:-len(p.suffix)] + ".meta.json") if p.suffix else p.with_name(p.name + ".meta.json")


def skipped_path(table_csv: str | os.PathLike) -> Path:
    """The marker beside a table's CSV that says the table was skipped (see :meth:`Run.skip_table`)."""
    p = Path(table_csv)
    return p.with_name(p.name[: -len(".csv")] + ".skipped.json" if p.name.endswith(".csv") else p.name + ".skipped.json")


def skip_reason(table_csv: str | os.PathLike) -> str | None:
    """The stated reason a table was skipped, or None when it was not."""
    p = skipped_path(table_csv)
    try:
        return json.loads(p.read_text()).get("reason") if p.exists() else None
    except (OSError, json.JSONDecodeError):
        return None


def read_table_meta(table: str | os.PathLike) -> dict | None:
    """The sidecar of ``table`` (see :meth:`nearid_lib.run.Run.write_table`), None when there is none."""
    p = table_meta_path(table)
    return json.loads(p.read_text()) if p.exists() else None


class Manifest:
    """Append-only JSON-lines log of finished items: ``{"id": ..., **info}`` per line.

    A torn last line (the job was killed mid-write) is ignored on reading."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._done: dict[str, dict] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self._done[str(rec["id"])] = rec

    def __contains__(self, item_id: object) -> bool:
        return str(item_id) in self._done

    def __len__(self) -> int:
        return len(self._done)

    def records(self) -> list[dict]:
        return list(self._done.values())

    def add(self, item_id: object, **info: Any) -> None:
        rec = {"id": str(item_id), **info}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(rec, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self._done[str(item_id)] = rec

    def pending(self, ids: Iterable[object]) -> list[object]:
        return [i for i in ids if str(i) not in self._done]


@contextmanager
def file_lock(path: str | os.PathLike):
    """Hold an exclusive advisory lock on ``path`` (created if needed) for the ``with`` block: how
    processes that would build the same thing (two sweep workers needing one feature cache) take
    turns; the second finds the first's result. Without ``fcntl`` (Windows) it does not lock."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:           # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
