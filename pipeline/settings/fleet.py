"""Fleet files: the devices one `specdec bench --fleet` runs on (and `specdec devices --fleet` checks).

```yaml
devices:
  - serial: R5CT12345            # as `adb devices -l` lists it
    profile: pixel-8             # a built-in name or a YAML path (relative to this file); default android-generic
    label: desk-pixel            # its row and its results directory; default: made from the serial
  - serial: 10.0.0.7:7401        # a farm's phone, `adb connect`ed on the farm's adb server
    host: farm.example           # its adb server (default: the command's -H/-P, else the local one)
    port: 5037
jobs: 4                          # devices measured at once (default: all of them)
```

Unknown keys are errors; labels and (server, serial) pairs are unique. On the command line,
`-s SERIAL` and `-s HOST:PORT/SERIAL` add devices; the command's --profile, -H and -P apply to
every device that names none.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import Field, field_validator, model_validator

from specdec.pipeline.errors import InputError
from specdec.pipeline.settings.strict_model import StrictModel, validate_model

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_FIX = "fix the fleet file (keys: devices: [{serial, host, port, profile, label}], jobs; see docs/devices.md)"


class FleetEntry(StrictModel):
    """One device of a fleet: where its adb server is, which profile measures it, what its row is called."""

    serial: str = Field(min_length=1)
    host: str | None = Field(None, min_length=1)
    port: int | None = Field(None, ge=1, le=65535)
    profile: str | None = None  # None: the command's --profile, else android-generic
    label: str | None = None

    @field_validator("label")
    @classmethod
    def _safe_label(cls, label: str | None) -> str | None:
        # A label names a directory beside fleet.json: no separators, no `..`, nothing a shell must quote.
        if label is not None and not _LABEL.match(label):
            raise ValueError(f"label '{label}' must be 1-64 letters, digits, '.', '_' or '-', starting with a "
                             "letter or digit")
        return label

    @property
    def name(self) -> str:
        """The label, else one made from the server and serial (`127.0.0.1_5555`)."""
        if self.label:
            return self.label
        parts = [self.host, str(self.port) if self.port else None, self.serial]
        return _UNSAFE.sub("_", "_".join(p for p in parts if p)).strip("._-")[:64] or "device"

    @property
    def server(self) -> str | None:
        """`host:port` of its adb server, None for the local one."""
        if self.host is None and self.port is None:
            return None
        return f"{self.host or 'localhost'}:{self.port or 5037}"


class FleetFile(StrictModel):
    devices: list[FleetEntry] = Field(min_length=1)
    jobs: int | None = Field(None, ge=1)  # devices measured at once; None: all of them

    @model_validator(mode="after")
    def _unique(self) -> FleetFile:
        names = [d.name for d in self.devices]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two devices are labelled {', '.join(twice)}: give each a distinct `label`")
        addresses = [(d.server, d.serial) for d in self.devices]
        again = sorted({f"{s} on {server or 'the local adb server'}" for server, s in addresses
                        if addresses.count((server, s)) > 1})
        if again:
            raise ValueError(f"device {', '.join(again)} is listed twice")
        return self


def parse_device(text: str, *, profile: str | None = None, host: str | None = None,
                 port: int | None = None) -> FleetEntry:
    """`SERIAL`, or `HOST:PORT/SERIAL` for a device on another adb server (`host`/`port`: the -H/-P default)."""
    server, slash, serial = text.partition("/")
    if slash:
        name, colon, number = server.rpartition(":")
        if not colon or not name or not number.isdigit():
            raise InputError(f"--serial '{text}' is not SERIAL or HOST:PORT/SERIAL",
                             "write e.g. -s farm.example:5037/R5CT12345")
        host, port = name.strip("[]"), int(number)  # [::1]:5037 -> ::1
    else:
        serial = text
    return validate_model(FleetEntry, {"serial": serial, "host": host, "port": port, "profile": profile},
                          source=f"--serial '{text}'", fix="write e.g. -s farm.example:5037/R5CT12345")


def load_fleet(path: Path) -> FleetFile:
    """A fleet file, validated; a profile given as a relative YAML path is resolved against the file's folder."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"fleet file '{path}' does not exist", "pass a YAML file listing the devices") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"fleet file '{path}' cannot be read ({exc})", "pass a readable UTF-8 YAML file") from None
    except yaml.YAMLError as exc:
        raise InputError(f"fleet file '{path}' is not valid YAML ({exc})".replace("\n", " "), "fix the file") from None
    if not isinstance(data, dict):
        raise InputError(f"fleet file '{path}' must hold a mapping with a `devices` list", _FIX)
    fleet = validate_model(FleetFile, data, source=f"fleet file {path}", fix=_FIX)
    for entry in fleet.devices:
        profile = entry.profile
        if profile is not None and Path(profile).suffix in (".yaml", ".yml") and not Path(profile).is_absolute():
            entry.profile = str(path.parent / profile)
    return fleet


def fleet_from(path: Path | None, serials: list[str], *, profile: str | None = None, host: str | None = None,
               port: int | None = None, jobs: int | None = None) -> FleetFile:
    """The fleet file's devices, then those of `-s`; the command's --profile, -H and -P apply to the devices that
    name none; `jobs` overrides the file's."""
    fleet = load_fleet(path) if path is not None else None
    added = [parse_device(text, profile=profile, host=host, port=port) for text in serials]
    listed = [d.model_copy(update={"profile": d.profile or profile,
                                   **({"host": host, "port": port} if d.server is None else {})})
              for d in (fleet.devices if fleet else [])]
    devices = [*listed, *added]
    if not devices:
        raise InputError("the fleet has no devices", "pass --fleet FILE or -s SERIAL (repeatable)")
    return validate_model(FleetFile, {"devices": [d.model_dump() for d in devices],
                                      "jobs": jobs if jobs is not None else fleet.jobs if fleet else None},
                          source="fleet",
                          fix="give every device a distinct label or serial (--fleet, -s); --jobs is 1 or more")
