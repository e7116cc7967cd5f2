"""A stand-in Android device: an adbd-protocol server on loopback.

The real adb server reaches it with ``adb connect 127.0.0.1:PORT``; commands
run on this host inside a sandbox directory (see ``device_fs.py``).

Run standalone (from the repository root)::

    python -m tests.standin.adbd --port 0 --root /tmp/dev --python /work/venv/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

from .device_fs import DeviceConfig, DeviceFs
from .services import StreamClosed, accepts_service, kill_group, run_service

A_SYNC = 0x434E5953
A_CNXN = 0x4E584E43
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_CLSE = 0x45534C43
A_WRTE = 0x45545257
A_AUTH = 0x48545541

A_VERSION = 0x01000001
# From this version on, both sides stop computing (and checking) data_check.
A_VERSION_SKIP_CHECKSUM = 0x01000001
MAX_PAYLOAD = 256 * 1024
# Until CNXN tells us otherwise, stay within the protocol's historic minimum.
MAX_PAYLOAD_V1 = 4096
HEADER = struct.Struct("<6I")
# Advertising stat_v2 / sendrecv_v2 would make adb use sync v2 requests,
# which we do not implement; fixed_push_mkdir stops adb from running
# `mkdir -p` itself before a directory push.
FEATURES = ("shell_v2", "cmd", "fixed_push_mkdir")


class Stream:
    """One adb stream: inbound WRTE queue and one outbound WRTE in flight."""

    def __init__(self, conn: Connection, local_id: int, remote_id: int) -> None:
        self.conn = conn
        self.local_id = local_id
        self.remote_id = remote_id
        self._inbox: deque[bytes | None] = deque()
        self._inbox_cv = threading.Condition()
        self._pending = b""
        self._writable = threading.Event()
        self._writable.set()
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self.closed = threading.Event()

    # -- inbound (called by the connection's reader thread)
    def deliver(self, data: bytes | None) -> None:
        with self._inbox_cv:
            self._inbox.append(data)
            self._inbox_cv.notify()

    def on_okay(self) -> None:
        self._writable.set()

    # -- service side
    def recv(self) -> bytes | None:
        """Next WRTE payload, or None once the stream is closed.

        The OKAY is sent only here, when the service takes the data, so a
        service that stops reading pushes back on the host (flow control).
        """
        if self._pending:
            pending, self._pending = self._pending, b""
            return pending
        with self._inbox_cv:
            while not self._inbox:
                self._inbox_cv.wait()
            data = self._inbox[0]
            if data is None:
                return None  # leave the marker: the stream stays closed
            self._inbox.popleft()
        self.conn.send(A_OKAY, self.local_id, self.remote_id)
        return data

    def read_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.recv()
            if chunk is None:
                return None
            need = n - len(buf)
            buf += chunk[:need]
            self._pending = chunk[need:]
        return bytes(buf)

    def write(self, data: bytes) -> None:
        """Send data, waiting for the host's OKAY before each next WRTE."""
        limit = self.conn.max_payload
        with self._write_lock:
            for off in range(0, len(data), limit):
                self._writable.wait()
                if self.closed.is_set():
                    raise StreamClosed()
                self._writable.clear()
                self.conn.send(A_WRTE, self.local_id, self.remote_id, data[off : off + limit])

    def close(self) -> None:
        """Close from the device side, after the last WRTE was acknowledged."""
        self._writable.wait(timeout=5)
        self._shutdown(send_clse=True)

    def remote_closed(self) -> None:
        # adbd answers a CLSE with its own CLSE (remote_socket_shutdown).
        self._shutdown(send_clse=True)

    def abort(self) -> None:
        self._shutdown(send_clse=False)

    def _shutdown(self, send_clse: bool) -> None:
        with self._state_lock:
            if self.closed.is_set():
                return
            self.closed.set()
        if send_clse:
            self.conn.send(A_CLSE, self.local_id, self.remote_id)
        self.conn.forget(self)
        self._writable.set()
        self.deliver(None)


class Connection:
    """One TCP connection from the adb server, i.e. one transport."""

    def __init__(self, device: StandinDevice, sock: socket.socket) -> None:
        self.device = device
        self.sock = sock
        self.version = A_VERSION
        self.max_payload = MAX_PAYLOAD_V1
        self._send_lock = threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._streams_lock = threading.Lock()
        self._next_id = 1
        self.dead = False

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        check = 0 if self.version >= A_VERSION_SKIP_CHECKSUM else sum(data) & 0xFFFFFFFF
        header = HEADER.pack(command, arg0, arg1, len(data), check, command ^ 0xFFFFFFFF)
        with self._send_lock:
            if self.dead:
                return
            try:
                self.sock.sendall(header + data)
            except OSError:
                self.dead = True

    def forget(self, stream: Stream) -> None:
        with self._streams_lock:
            self._streams.pop(stream.local_id, None)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def serve(self) -> None:
        try:
            while True:
                header = self._recv_exact(HEADER.size)
                if header is None:
                    break
                command, arg0, arg1, length, _check, magic = HEADER.unpack(header)
                # Checksums are deliberately not verified: adb >= 1.0.41 sends 0.
                payload = self._recv_exact(length) if length else b""
                if payload is None or magic != command ^ 0xFFFFFFFF:
                    break
                self._dispatch(command, arg0, arg1, payload)
        finally:
            self.teardown()

    def teardown(self) -> None:
        self.dead = True
        with self._streams_lock:
            streams = list(self._streams.values())
        for s in streams:
            s.abort()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.device._forget(self)

    def _dispatch(self, command: int, arg0: int, arg1: int, payload: bytes) -> None:
        if command in (A_CNXN, A_AUTH):
            # We never ask for AUTH; a stray AUTH just gets the banner again.
            if command == A_CNXN:
                self.version = min(arg0, A_VERSION)
                self.max_payload = min(arg1, MAX_PAYLOAD) or MAX_PAYLOAD_V1
            self.send(A_CNXN, self.version, MAX_PAYLOAD, self.device.banner())
        elif command == A_OPEN:
            self._open(arg0, payload.rstrip(b"\0").decode("utf-8", "replace"))
        else:
            with self._streams_lock:
                stream = self._streams.get(arg1)
            if stream is None or (arg0 and arg0 != stream.remote_id):
                return  # late packet for a stream that is already gone
            if command == A_OKAY:
                stream.on_okay()
            elif command == A_WRTE:
                stream.deliver(payload)
            elif command == A_CLSE:
                stream.remote_closed()

    def _open(self, remote_id: int, service: str) -> None:
        with self._streams_lock:
            local_id = self._next_id
            self._next_id += 1
            stream = Stream(self, local_id, remote_id)
            self._streams[local_id] = stream
        if not accepts_service(service):
            self.forget(stream)
            self.send(A_CLSE, 0, remote_id)
            return
        self.send(A_OKAY, local_id, remote_id)
        threading.Thread(
            target=run_service,
            args=(self.device, stream, service),
            name=f"standin-{service[:20]}",
            daemon=True,
        ).start()


def session_members(sessions: set[int]) -> list[int]:
    """Pids of live processes in any of these sessions (from /proc/PID/stat)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not sessions:
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # after "(comm)": state ppid pgrp session ...
        if len(fields) > 3 and fields[3].isdigit() and int(fields[3]) in sessions:
            found.append(int(entry.name))
    return found


class StandinDevice:
    """A fake phone listening on loopback; see README.md for the knobs."""

    def __init__(
        self,
        root: str | Path | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        config: DeviceConfig | None = None,
        **knobs: Any,
    ) -> None:
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="standin-")
            root = self._tmpdir.name
        self.config = (config or DeviceConfig()).with_overrides(**knobs)
        self.fs = DeviceFs(Path(root), self.config)
        self.fs.build()
        self.host = host
        self.port = port
        self._listener: socket.socket | None = None
        self._conns: set[Connection] = set()
        self._groups: set[int] = set()  # process groups of commands (and their jobs)
        self._lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle
    @property
    def root(self) -> Path:
        return self.fs.root

    @property
    def serial(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> StandinDevice:
        """Listen; after kill() this rebinds the same port so adb can reconnect."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(8)
        self.port = sock.getsockname()[1]
        self._listener = sock
        threading.Thread(target=self._accept_loop, args=(sock,), daemon=True).start()
        return self

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # listener shut down by kill()/stop()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=conn.serve, daemon=True).start()

    def kill(self) -> None:
        """Vanish abruptly: stop listening, drop every connection, kill children."""
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
            self._listener.close()
            self._listener = None
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.dead = True
            try:
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.kill_processes()

    disconnect = kill

    def stop(self) -> None:
        self.kill()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def __enter__(self) -> StandinDevice:
        return self.start() if self._listener is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------ processes
    def spawn(self, command: str | None, merge_stderr: bool) -> subprocess.Popen[bytes]:
        shell = self.fs.shell
        argv = [shell] if command is None else [shell, "-c", self.fs.rewrite_command(command)]
        proc = subprocess.Popen(
            argv,
            cwd=self.fs.tmp,
            env=self.fs.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,  # own process group, so kill() gets grandchildren too
        )
        with self._lock:
            self._groups.add(proc.pid)
        return proc

    def release(self, proc: subprocess.Popen[bytes]) -> None:
        """Called once a command was reaped: keep its session only if jobs remain."""
        try:
            os.killpg(proc.pid, 0)
        except OSError:
            if not session_members({proc.pid}):
                with self._lock:
                    self._groups.discard(proc.pid)

    def kill_processes(self) -> None:
        with self._lock:
            groups = list(self._groups)
            self._groups.clear()
        for pgid in groups:
            kill_group(pgid)
        # Jobs under `timeout` leave the command's group (GNU timeout leads a group of its own,
        # toybox's puts its child in one) but stay in its session: a reboot takes them too.
        for pid in session_members(set(groups)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _forget(self, conn: Connection) -> None:
        with self._lock:
            self._conns.discard(conn)

    def banner(self) -> bytes:
        c = self.config
        props = f"ro.product.name={c.product};ro.product.model={c.model};ro.product.device={c.device};"
        return f"device::{props}features={','.join(FEATURES)}".encode()

    # ------------------------------------------------------------ knobs
    def set_temperature(self, zone: int | str, milli_c: int) -> None:
        self.fs.set_temperature(zone, milli_c)

    def set_battery(self, **values: Any) -> None:
        """Keywords: current_ua, voltage_uv, level, temp_decic, charging, usb_online, ac_online."""
        self.fs.set_battery(**values)

    def set_cpu_freq(self, cpu: int, khz: int) -> None:
        self.fs.set_cpu_freq(cpu, khz)

    def set_prop(self, key: str, value: str) -> None:
        self.fs.set_prop(key, value)


def reap_jobs(root: Path) -> None:
    """Kill runner jobs a killed stand-in leaves behind under `root` (GNU timeout leads its own process group)."""
    for pid_file in root.glob("data/local/tmp/specdec/*/*.pid"):
        with contextlib.suppress(OSError, ValueError):
            for pid in (int(p) for p in pid_file.read_text().split()[:2]):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Stand-in adbd on loopback")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--root", help="sandbox dir (default: a temp dir)")
    ap.add_argument("--serialno", default=DeviceConfig.serialno, help="ro.serialno")
    ap.add_argument("--model", default=DeviceConfig.model)
    ap.add_argument("--android-version", default=DeviceConfig.android_version)
    ap.add_argument("--abi", default=DeviceConfig.abi)
    ap.add_argument("--python", help="host interpreter exposed as python3 (default: none)")
    args = ap.parse_args(argv)
    dev = StandinDevice(
        args.root,
        port=args.port,
        host=args.host,
        serialno=args.serialno,
        model=args.model,
        android_version=args.android_version,
        abi=args.abi,
        python=args.python,
    )
    dev.start()
    print(dev.port, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    dev.stop()


if __name__ == "__main__":
    main()

