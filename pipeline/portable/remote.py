"""The runtime on a device: pushed once to `<remote_dir>/runtime/<id>/`, checked by hash, reused.

A push goes to a hidden `.<id>.partial-<random>` directory: the archive in chunks (each chunk's
sha256 checked by `Device.push`, which also gives the progress bar its steps), the whole
archive's sha256 checked on the device, unpacked, every file checked against FILES.sha256, a
`.specdec-complete` marker written, and only then renamed to `<id>`. A directory named by an id
is therefore always complete; an interrupted push leaves at most a partial directory, removed
at once on Ctrl-C and by the next push otherwise. Later runs check the marker and every file's
hash (a fraction of a second on a phone) and push nothing.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specdec.pipeline.devices.base import Device
from specdec.pipeline.devices.shell import q
from specdec.pipeline.errors import DeviceError, SpecdecError
from specdec.pipeline.portable import assemble
from specdec.pipeline.portable.archive import RuntimeArchive
from specdec.pipeline.progress import Progress, SilentProgress

log = logging.getLogger(__name__)

RUNTIME_DIR = "runtime"
MARKER = ".specdec-complete"
CHUNK_BYTES = 4 << 20
STALE_PARTIAL_MIN = 60  # another host may still be pushing a younger one
_LONG_S = 900


@dataclass(frozen=True)
class RemoteRuntime:
    """A verified runtime on a device."""

    id: str
    root: str
    pushed: bool  # pushed by this call (False: reused)
    push_s: float | None = None  # push + unpack + check, when pushed
    verify_s: float | None = None  # the hash check of an already-present runtime

    @property
    def launcher(self) -> str:
        return posixpath.join(self.root, assemble.LAUNCHER)

    @property
    def probe_model(self) -> str:
        return posixpath.join(self.root, assemble.PROBE_MODEL)


def runtimes_dir(device: Device) -> str:
    """`<remote_dir>/runtime`, next to the run dirs (the parent of any run's work dir)."""
    return posixpath.join(posixpath.dirname(device.workdir("x")), RUNTIME_DIR)


def present(device: Device) -> dict[str, str]:
    """Complete runtimes on the device: {id: archive sha256 from its marker}."""
    base = runtimes_dir(device)
    result = device.run(f"for m in {q(base)}/*/{MARKER}; do [ -f \"$m\" ] && {{ d=${{m%/*}}; v=; "
                        f"read -r v < \"$m\"; printf '%s %s\\n' \"${{d##*/}}\" \"$v\"; }}; done; true", timeout_s=60)
    found = {}
    for line in result.stdout.splitlines():
        name, _, sha = line.partition(" ")
        if len(sha) == 64 and sha.startswith(name):
            found[name] = sha
    return found


def verify(device: Device, root: str) -> list[str]:
    """Files under `root` that fail `sha256sum -c FILES.sha256` (empty: all match)."""
    command = (f"cd {q(root)} && out=$(sha256sum -c {assemble.MANIFEST} 2>&1); rc=$?; "
               "printf '%s\\n' \"$out\" | grep -v ': OK$' | head -n 20; echo \"verify-rc=$rc\"")
    result = device.run(command, timeout_s=_LONG_S)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    rc_line = next((line for line in reversed(lines) if line.startswith("verify-rc=")), None)
    failures = [line for line in lines if not line.startswith("verify-rc=")]
    if result.returncode != 0 or rc_line != "verify-rc=0":
        return failures or [f"sha256sum -c failed (exit {result.returncode}): {result.stderr.strip()[:200]}"]
    return failures


def ensure_runtime(device: Device, archive: RuntimeArchive, progress: Progress | None = None) -> RemoteRuntime:
    """The runtime on the device, pushed only when it is not there (or fails its hash check)."""
    progress = progress or SilentProgress()
    base = runtimes_dir(device)
    root = posixpath.join(base, archive.id)
    if present(device).get(archive.id) == archive.sha256:
        started = time.monotonic()
        failures = verify(device, root)
        if not failures:
            log.info("runtime %s already on %s (hashes checked)", archive.id, device.serial)
            return RemoteRuntime(archive.id, root, pushed=False, verify_s=round(time.monotonic() - started, 2))
        log.warning("runtime %s on %s fails its hash check (%s); pushing it again", archive.id, device.serial,
                    failures[0])
        device.remove(root)
    started = time.monotonic()
    with _partial_dir(device, base, archive.id) as partial:
        _push_chunks(device, archive, partial, progress)
        _unpack(device, archive, partial)
        tree = posixpath.join(partial, "tree")
        failures = verify(device, tree)
        if failures:
            raise DeviceError(f"{device.serial}: the unpacked runtime {archive.id} fails its hash check "
                              f"({failures[0]})", "check free space (adb shell df /data/local/tmp) and run again")
        _finish(device, archive, tree, root)
    _sweep(device, base, keep=archive.id)
    return RemoteRuntime(archive.id, root, pushed=True, push_s=round(time.monotonic() - started, 1))


@contextlib.contextmanager
def _partial_dir(device: Device, base: str, runtime_id: str) -> Iterator[str]:
    partial = posixpath.join(base, f".{runtime_id}.partial-{secrets.token_hex(4)}")
    device.mkdir(partial)
    try:
        yield partial
    finally:
        # After a rename nothing is left; after a failure or Ctrl-C the half-pushed dir goes.
        # A lost device keeps it: the next push sweeps it once it is stale.
        with contextlib.suppress(SpecdecError):
            device.remove(partial)


def _push_chunks(device: Device, archive: RuntimeArchive, partial: str, progress: Progress) -> None:
    count = max(1, -(-archive.size // CHUNK_BYTES))
    label = f"pushing runtime {archive.id} ({archive.size / 1e6:.1f} MB) to {device.serial}"
    with progress.task(label, total=count) as task, archive.path.open("rb") as source, \
            tempfile.TemporaryDirectory(prefix="specdec-chunk-") as scratch:
        for index in range(count):
            chunk = Path(scratch) / f"part.{index:04d}"
            chunk.write_bytes(source.read(CHUNK_BYTES))
            device.push(chunk, posixpath.join(partial, chunk.name))  # sha256 of each chunk checked
            chunk.unlink()
            task.advance()


def _unpack(device: Device, archive: RuntimeArchive, partial: str) -> None:
    p = q(partial)
    # The archive as a whole, then unpacked; `cat | zcat | tar` keeps one copy on the phone.
    result = device.run(f"cd {p} && cat part.* | sha256sum", timeout_s=_LONG_S)
    digest = result.stdout.split()[0] if result.stdout.split() else ""
    if result.returncode != 0 or digest != archive.sha256:
        raise DeviceError(f"{device.serial}: the pushed runtime archive's sha256 is {digest or 'unknown'}, "
                          f"not {archive.sha256}", "the copy is corrupt (storage full or a flaky cable); "
                                                   "run again")
    unpack = device.run(f"cd {p} && mkdir tree && cat part.* | zcat | tar -xf - -C tree && rm -f part.*",
                        timeout_s=_LONG_S)
    if unpack.returncode != 0:
        detail = " ".join((unpack.stderr or unpack.stdout).split())[-200:] or f"exit {unpack.returncode}"
        raise DeviceError(f"{device.serial}: unpacking the runtime failed: {detail}",
                          "check free space (the runtime needs about "
                          f"{archive.unpacked_size / 1e6:.0f} MB: adb shell df /data/local/tmp)")


def _finish(device: Device, archive: RuntimeArchive, tree: str, root: str) -> None:
    marker = posixpath.join(tree, MARKER)
    # The marker goes in before the rename, so a directory named by the id is complete. If another
    # host finished the same runtime meanwhile, its copy stands and ours is dropped with the partial.
    result = device.run(f"echo {archive.sha256} > {q(marker)} && if [ -e {q(root)} ]; then echo exists; "
                        f"else mv {q(tree)} {q(root)} && echo moved; fi", timeout_s=60)
    if result.returncode != 0 or result.stdout.strip() not in ("moved", "exists"):
        detail = " ".join((result.stderr or result.stdout).split())[-200:]
        raise DeviceError(f"{device.serial}: cannot move the runtime into {root}: {detail}",
                          "check the profile's runtime.remote_dir is writable")


def _sweep(device: Device, base: str, keep: str) -> None:
    """Remove other runtimes (a phone's storage is precious) and stale partial pushes."""
    command = (f"cd {q(base)} && for d in *; do [ -d \"$d\" ] && [ \"$d\" != {q(keep)} ] && rm -rf \"$d\"; done; "
               f"find . -maxdepth 1 -name '.*.partial-*' -mmin +{STALE_PARTIAL_MIN} -exec rm -rf {{}} + ; true")
    result = device.run(command, timeout_s=_LONG_S)
    if result.returncode != 0:
        log.debug("sweeping %s on %s: %s", base, device.serial, result.stderr.strip())
