"""Services behind OPEN: ``shell[,v2,...]:CMD``, ``exec:CMD`` and ``sync:``."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import struct
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from .adbd import StandinDevice, Stream

# shell protocol v2 packet ids (adb's shell_protocol.h)
ID_STDIN, ID_STDOUT, ID_STDERR, ID_EXIT, ID_CLOSE_STDIN, ID_WINDOW_SIZE = range(6)
SHELL_HEADER = struct.Struct("<BI")
SYNC_HEADER = struct.Struct("<4sI")
SYNC_DATA_MAX = 64 * 1024
SYNC_PATH_MAX = 1024
READ_CHUNK = 16 * 1024


class StreamClosed(Exception):
    """The peer (or the device) closed the stream; stop producing data."""


def kill_group(pgid: int) -> None:
    # Backgrounded jobs share the group; a device reboot would take them too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _parse_shell(service: str) -> tuple[bool, str | None] | None:
    """(use shell protocol v2, command or None for interactive), or None."""
    if service.startswith("exec:"):
        return False, service[len("exec:") :]
    head, sep, command = service.partition(":")
    if not sep or head.split(",")[0] != "shell":
        return None
    # `raw` and `pty` both become pipes: there is no terminal emulation here.
    return "v2" in head.split(",")[1:], command or None


def accepts_service(service: str) -> bool:
    return service == "sync:" or _parse_shell(service) is not None


def run_service(device: StandinDevice, stream: Stream, service: str) -> None:
    try:
        if service == "sync:":
            run_sync(device, stream)
        else:
            parsed = _parse_shell(service)
            assert parsed is not None
            run_shell(device, stream, parsed[1], v2=parsed[0], raw=service.startswith("exec:"))
    except StreamClosed:
        pass
    finally:
        stream.close()


# ---------------------------------------------------------------- shell
def _shell_packet(ident: int, data: bytes) -> bytes:
    return SHELL_HEADER.pack(ident, len(data)) + data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def run_shell(
    device: StandinDevice, stream: Stream, command: str | None, v2: bool, raw: bool = False
) -> None:
    try:
        # Without the shell protocol adbd merges stderr into the one raw stream.
        proc = device.spawn(command, merge_stderr=not v2)
    except OSError as e:  # e.g. the sandbox was deleted under a running device
        message = f"standin: cannot run command: {e}\n".encode()
        stream.write(_shell_packet(ID_STDERR, message) + _shell_packet(ID_EXIT, b"\x7f") if v2 else message)
        return
    # exec: output is binary (exec-out); leave it byte-exact.
    root = None if raw or not device.config.unmap_output else str(device.root).encode()
    # If the host closes the stream first, adbd does not kill the command: it
    # closes stdin and the output pipes (SIGPIPE on the next write), so e.g.
    # `sleep` keeps running after ^C. _feed_stdin and _pump do the same.
    assert proc.stdin is not None and proc.stdout is not None
    outputs = [(proc.stdout, ID_STDOUT)] + ([(proc.stderr, ID_STDERR)] if proc.stderr else [])
    pumps = [
        threading.Thread(target=_pump, args=(stream, pipe, ident, v2, root), daemon=True)
        for pipe, ident in outputs
    ]
    threading.Thread(target=_feed_stdin, args=(stream, proc.stdin, v2), daemon=True).start()
    for t in pumps:
        t.start()
    # Like adbd, finish only when the output pipes close: a background job
    # that keeps stdout open keeps `adb shell` waiting, as on a real phone.
    for t in pumps:
        t.join()
    rc = proc.wait()
    device.release(proc)
    if v2 and not stream.closed.is_set():
        code = 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, as sh reports
        stream.write(_shell_packet(ID_EXIT, bytes([code & 0xFF])))


class Unmapper:
    """Strips the sandbox root from output so `pwd` says /data/local/tmp.

    A chunk's tail that could be the start of the root is held back until
    the next chunk (or EOF) so a root split across two reads is still caught.
    """

    def __init__(self, root: bytes | None) -> None:
        self.root = root
        self.carry = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.root:
            return chunk
        data = (self.carry + chunk).replace(self.root, b"")
        keep = next(
            (k for k in range(min(len(self.root) - 1, len(data)), 0, -1) if self.root.startswith(data[-k:])),
            0,
        )
        self.carry = data[len(data) - keep :]
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        rest, self.carry = self.carry, b""
        return rest


def _pump(stream: Stream, pipe: IO[bytes], ident: int, v2: bool, root: bytes | None) -> None:
    """Forward output as it is produced, so long commands stream."""
    fd = pipe.fileno()
    unmap = Unmapper(root)
    try:
        while chunk := os.read(fd, READ_CHUNK):
            if data := unmap.feed(chunk):
                stream.write(_shell_packet(ident, data) if v2 else data)
        if rest := unmap.flush():
            stream.write(_shell_packet(ident, rest) if v2 else rest)
    except (StreamClosed, OSError):
        pass
    finally:
        pipe.close()


def _feed_stdin(stream: Stream, stdin: IO[bytes], v2: bool) -> None:
    fd: int | None = stdin.fileno()
    buf = b""

    def deliver(data: bytes) -> None:
        nonlocal fd
        if fd is None:
            return
        try:
            _write_all(fd, data)
        except OSError:  # the command exited or closed its stdin
            fd = None

    while (data := stream.recv()) is not None:
        if not v2:
            deliver(data)
            continue
        buf += data
        while len(buf) >= SHELL_HEADER.size:
            ident, n = SHELL_HEADER.unpack_from(buf)
            if len(buf) < SHELL_HEADER.size + n:
                break
            body, buf = buf[SHELL_HEADER.size : SHELL_HEADER.size + n], buf[SHELL_HEADER.size + n :]
            if ident == ID_STDIN:
                deliver(body)
            elif ident == ID_CLOSE_STDIN and fd is not None:
                stdin.close()
                fd = None
            # ID_WINDOW_SIZE: no pty, nothing to resize.
    if fd is not None:
        stdin.close()


# ---------------------------------------------------------------- sync
def _fail(stream: Stream, message: str) -> None:
    data = message.encode()
    stream.write(SYNC_HEADER.pack(b"FAIL", len(data)) + data)


def run_sync(device: StandinDevice, stream: Stream) -> None:
    while (header := stream.read_exact(SYNC_HEADER.size)) is not None:
        ident, n = SYNC_HEADER.unpack(header)
        if ident == b"QUIT":
            return
        if n > SYNC_PATH_MAX:
            _fail(stream, "path too long")
            return
        raw = stream.read_exact(n)
        if raw is None:
            return
        path = raw.decode("utf-8", "surrogateescape")
        if ident == b"STAT":
            _sync_stat(device, stream, path)
        elif ident == b"LIST":
            _sync_list(device, stream, path)
        elif ident == b"SEND":
            if not _sync_send(device, stream, path):
                return
        elif ident == b"RECV":
            _sync_recv(device, stream, path)
        else:
            _fail(stream, f"unknown sync request {ident!r}")
            return


def _sync_stat(device: StandinDevice, stream: Stream, path: str) -> None:
    try:
        st = os.lstat(device.fs.host_path(path))
        fields = (st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime) & 0xFFFFFFFF)
    except OSError:
        fields = (0, 0, 0)  # v1 has no error code: mode 0 means "does not exist"
    stream.write(struct.pack("<4s3I", b"STAT", *fields))


def _sync_list(device: StandinDevice, stream: Stream, path: str) -> None:
    out = bytearray()
    try:
        with os.scandir(device.fs.host_path(path)) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                name = os.fsencode(entry.name)
                out += (
                    struct.pack(
                        "<4s4I",
                        b"DENT",
                        st.st_mode,
                        st.st_size & 0xFFFFFFFF,
                        int(st.st_mtime) & 0xFFFFFFFF,
                        len(name),
                    )
                    + name
                )
    except OSError:
        pass  # adbd also just ends an unreadable listing early
    out += struct.pack("<4s4I", b"DONE", 0, 0, 0, 0)
    stream.write(bytes(out))


def _sync_send(device: StandinDevice, stream: Stream, spec: str) -> bool:
    """Receive DATA.../DONE into a file; False if the stream must be dropped."""
    path, comma, mode_text = spec.rpartition(",")
    if not comma:
        path, mode_text = spec, "33188"  # 0100644
    mode = int(mode_text) if mode_text.isdigit() else 0o100644
    target = device.fs.host_path(path)
    error: str | None = None
    tmp = target.with_name(f".{target.name}.standin-partial")
    out: IO[bytes] | None = None
    link_target = bytearray()
    if not device.fs.is_writable(target):
        error = f"couldn't create file {path}: Read-only file system"
    elif not stat.S_ISLNK(mode):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)  # adbd mkdirs too
            out = tmp.open("wb")  # closed after the DATA loop
        except OSError as e:
            error = f"couldn't create file {path}: {e.strerror}"
    # Keep consuming DATA even after an error: the client pipelines the whole
    # file before it reads our verdict.
    mtime = 0
    try:
        while True:
            header = stream.read_exact(SYNC_HEADER.size)
            if header is None:
                return False
            ident, n = SYNC_HEADER.unpack(header)
            if ident == b"DONE":
                mtime = n
                break
            if ident != b"DATA" or n > SYNC_DATA_MAX:
                _fail(stream, "invalid data message")
                return False
            data = stream.read_exact(n)
            if data is None:
                return False
            if stat.S_ISLNK(mode):
                link_target += data
            elif out is not None:
                out.write(data)
    finally:
        if out is not None:
            out.close()
    if error is None:
        error = _finish_send(target, tmp, mode, mtime, bytes(link_target))
    if error is not None:
        tmp.unlink(missing_ok=True)
        _fail(stream, error)
    else:
        stream.write(SYNC_HEADER.pack(b"OKAY", 0))
    return True


def _finish_send(target: Path, tmp: Path, mode: int, mtime: int, link: bytes) -> str | None:
    try:
        if target.is_dir() and not target.is_symlink():
            return f"couldn't create file {target.name}: Is a directory"
        if stat.S_ISLNK(mode):
            target.unlink(missing_ok=True)
            target.symlink_to(os.fsdecode(link.rstrip(b"\0")))
            return None
        tmp.replace(target)
        target.chmod(mode & 0o777)
        os.utime(target, (mtime, mtime))
    except OSError as e:
        return f"{target.name}: {e.strerror}"
    return None


def _sync_recv(device: StandinDevice, stream: Stream, path: str) -> None:
    try:
        f = device.fs.host_path(path).open("rb")
    except OSError as e:
        _fail(stream, e.strerror or "read failed")
        return
    with f:
        batch = bytearray()
        try:
            while chunk := f.read(SYNC_DATA_MAX):
                batch += SYNC_HEADER.pack(b"DATA", len(chunk)) + chunk
                # Several DATA packets per WRTE: fewer round trips per MB.
                if len(batch) >= 3 * SYNC_DATA_MAX:
                    stream.write(bytes(batch))
                    batch.clear()
        except OSError as e:
            stream.write(bytes(batch))
            _fail(stream, e.strerror or "read failed")
            return
    stream.write(bytes(batch) + SYNC_HEADER.pack(b"DONE", 0))
