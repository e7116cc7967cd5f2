"""Sandbox directory that plays the stand-in device's filesystem.

Device paths such as ``/data/local/tmp`` or ``/sys/class/thermal`` live under
``<root>/...``.  Shell commands see them through textual substitution of the
command string (see :meth:`DeviceFs.rewrite_command`), and sync (push/pull)
paths through :meth:`DeviceFs.host_path`.  Fake Android tools (``getprop``,
``dumpsys``, ``uname``) are POSIX ``sh`` scripts so they work even when the
device has no Python.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .fake_tools import DUMPSYS, GETPROP, UNAME

# Device directories that are redirected into the sandbox.  Anything else
# (e.g. /proc/meminfo, /bin/sh) is the host's own file.
MAPPED_DIRS: tuple[str, ...] = (
    "/data/local/tmp",
    "/sdcard",
    "/sys/class/power_supply",
    "/sys/class/thermal",
    "/sys/devices/system/cpu",
)

DEFAULT_HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Userlands: "toybox" runs commands with mksh and only toybox applets on PATH, like Android's
# /system/bin (Debian packages mksh and toybox); "host" runs them with /bin/sh and the host's
# GNU tools below. "auto" picks toybox when both are installed; STANDIN_USERLAND sets the default.
USERLANDS = ("auto", "toybox", "host")

# Roughly what toybox offers on a real device; only these leak from the host so
# a `python=None` device really has no python3 (or anything else surprising).
HOST_TOOLS: tuple[str, ...] = (
    "sh",
    "cat",
    "echo",
    "sleep",
    "timeout",
    "nohup",
    "kill",
    "ps",
    "sha256sum",
    "md5sum",
    "mkdir",
    "rm",
    "rmdir",
    "ls",
    "cp",
    "mv",
    "ln",
    "date",
    "head",
    "tail",
    "grep",
    "sed",
    "awk",
    "tr",
    "wc",
    "env",
    "test",
    "[",
    "true",
    "false",
    "find",
    "dirname",
    "basename",
    "readlink",
    "realpath",
    "stat",
    "chmod",
    "touch",
    "cut",
    "tee",
    "xargs",
    "printf",
    "sort",
    "uniq",
    "seq",
    "expr",
    "id",
    "du",
    "df",
    "od",
    "cmp",
    "diff",
    "pgrep",
    "pkill",
    "nproc",
    "mktemp",
    "tar",
    "gzip",
    "dd",
    "sync",
    "yes",
    "which",
)

DEFAULT_ZONES: dict[str, int] = {
    "cpu0": 41500,
    "cpu1": 42000,
    "gpu": 39000,
    "battery": 30000,
    "skin": 35000,
}

_UNAME_M = {"arm64-v8a": "aarch64", "armeabi-v7a": "armv8l", "x86_64": "x86_64", "x86": "i686"}


@dataclass
class DeviceConfig:
    """Everything a test may want to tweak about the pretend phone."""

    model: str = "Standin_Pixel"
    product: str = "standin"
    device: str = "standin"
    manufacturer: str = "Standin"
    android_version: str = "14"
    sdk: int = 34
    abi: str = "arm64-v8a"
    serialno: str = "STANDIN0001"
    # None: no python3 on the device PATH; else a host interpreter exposed as python3.
    python: str | None = None
    host_path: str = DEFAULT_HOST_PATH
    thermal_zones: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_ZONES))
    battery_current_ua: int = -450_000  # Pixel convention: negative = discharging
    battery_voltage_uv: int = 3_900_000
    battery_level: int = 80
    battery_temp_decic: int = 300  # tenths of a degree C, as sysfs reports it
    charging: bool = False
    usb_online: bool = False
    ac_online: bool = False
    cpu_count: int = 8
    cpu_freq_khz: int = 1_800_000
    extra_props: dict[str, str] = field(default_factory=dict)
    # Strip the sandbox root from shell output (`pwd` -> /data/local/tmp).
    unmap_output: bool = True
    userland: str = field(default_factory=lambda: os.environ.get("STANDIN_USERLAND", "auto"))
    # Extra environment of device commands (e.g. SPECDEC_EXEC_WRAPPER for an emulator).
    env: dict[str, str] = field(default_factory=dict)

    def with_overrides(self, **knobs: object) -> DeviceConfig:
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(knobs) - names
        if unknown:
            raise TypeError(f"unknown device knob(s): {sorted(unknown)}")
        return dataclasses.replace(self, **knobs)  # type: ignore[arg-type]


def toybox_tools(host_path: str = DEFAULT_HOST_PATH) -> tuple[str, str] | None:
    """(mksh, toybox) host paths when both are installed."""
    mksh, toybox = shutil.which("mksh", path=host_path), shutil.which("toybox", path=host_path)
    return (mksh, toybox) if mksh and toybox else None


def resolve_userland(config: DeviceConfig) -> str:
    if config.userland not in USERLANDS:
        raise ValueError(f"userland must be one of {USERLANDS}, not {config.userland!r}")
    if config.userland == "auto":
        return "toybox" if toybox_tools(config.host_path) else "host"
    if config.userland == "toybox" and not toybox_tools(config.host_path):
        raise FileNotFoundError("userland='toybox' needs mksh and toybox (apt-get install mksh toybox)")
    return config.userland


class DeviceFs:
    """Creates and mutates the sandbox; maps device paths to host paths."""

    def __init__(self, root: Path, config: DeviceConfig) -> None:
        self.root = root.resolve()
        self.config = config
        self.props: dict[str, str] = {}
        self.userland = resolve_userland(config)
        tools = toybox_tools(config.host_path) if self.userland == "toybox" else None
        # The device's shell: what `sh -c` and the fake tools' #! lines use.
        self.shell = tools[0] if tools else "/bin/sh"
        self._dir_re = re.compile(
            r"(?<![\w.\-/])(" + "|".join(re.escape(d) for d in MAPPED_DIRS) + r")(?![\w.\-])"
        )

    # ----------------------------------------------------------- paths
    @property
    def tmp(self) -> Path:
        return self.root / "data/local/tmp"

    @property
    def state_dir(self) -> Path:
        return self.root / ".standin"

    @property
    def system_bin(self) -> Path:
        """Where the device's tools live (Android: /system/bin): host tools or toybox applets."""
        return self.state_dir / ("toybox-bin" if self.userland == "toybox" else "hostbin")

    def rewrite_command(self, command: str) -> str:
        """Point device paths in a shell command at the sandbox.

        Plain text substitution: paths built at runtime (``$D/tmp``) or
        written inside pushed scripts are *not* rewritten.
        """
        return self._dir_re.sub(lambda m: str(self.root) + m.group(1), command)

    def host_path(self, device_path: str) -> Path:
        for d in MAPPED_DIRS:
            if device_path == d or device_path.startswith(d + "/"):
                return self.root / device_path.lstrip("/")
        return Path(device_path)

    def is_writable(self, host_path: Path) -> bool:
        """Sync writes must stay inside the sandbox; the host is read-only."""
        try:
            host_path.resolve().relative_to(self.root)
        except ValueError:
            return False
        return True

    def env(self) -> dict[str, str]:
        # A clean environment: nothing from the test process (VIRTUAL_ENV,
        # PYTHONPATH, ...) may leak into "device" commands.
        return {
            "PATH": f"{self.root / 'bin'}:{self.system_bin}",
            # Real shells have TMPDIR=/data/local/tmp (mkshrc); HOME stays out
            # of it so tools' caches don't show up in listings of tmp.
            "HOME": str(self.state_dir / "home"),
            "TMPDIR": str(self.tmp),
            "ANDROID_DATA": "/data",
            "ANDROID_ROOT": "/system",
            "EXTERNAL_STORAGE": "/sdcard",
            "SHELL": "/system/bin/sh" if self.userland == "toybox" else "/bin/sh",
            **self.config.env,
        }

    # ----------------------------------------------------------- build
    def build(self) -> None:
        c = self.config
        for d in (self.tmp, self.root / "sdcard", self.root / "bin", self.state_dir / "home"):
            d.mkdir(parents=True, exist_ok=True)
        self._link_host_tools()
        self.props = {
            "ro.product.model": c.model,
            "ro.product.name": c.product,
            "ro.product.device": c.device,
            "ro.product.manufacturer": c.manufacturer,
            "ro.product.brand": c.manufacturer.lower(),
            "ro.build.version.release": c.android_version,
            "ro.build.version.sdk": str(c.sdk),
            "ro.product.cpu.abi": c.abi,
            "ro.product.cpu.abilist": c.abi,
            "ro.serialno": c.serialno,
            "ro.boot.serialno": c.serialno,
            "ro.hardware": c.device,
            "ro.build.type": "user",
            **c.extra_props,
        }
        self._write_props()
        self._write_tools()
        self._build_sysfs()

    def _link_host_tools(self) -> None:
        bindir = self.system_bin
        if bindir.exists():
            shutil.rmtree(bindir)
        bindir.mkdir(parents=True)
        if self.userland == "toybox":
            mksh, toybox = toybox_tools(self.config.host_path) or ("", "")
            applets = subprocess.run([toybox], capture_output=True, text=True, check=True).stdout.split()
            for name in applets:
                (bindir / name).symlink_to(toybox)
            (bindir / "sh").symlink_to(mksh)
            return
        for name in HOST_TOOLS:
            found = shutil.which(name, path=self.config.host_path)
            if found:
                (bindir / name).symlink_to(found)

    def _write_props(self) -> None:
        text = "".join(f"{k}={v}\n" for k, v in sorted(self.props.items()))
        self._put(self.state_dir / "build.prop", text)

    def _write_tools(self) -> None:
        bindir = self.root / "bin"
        q = shlex.quote
        scripts = {
            "getprop": GETPROP.replace("@PROPS@", q(str(self.state_dir / "build.prop"))),
            "dumpsys": DUMPSYS.replace("@PS@", q(str(self.root / "sys/class/power_supply"))).replace(
                "@TH@", q(str(self.root / "sys/class/thermal"))
            ),
            "uname": UNAME.replace("@M@", _UNAME_M.get(self.config.abi, self.config.abi)),
        }
        py = bindir / "python3"
        if py.exists():
            py.unlink()
        if self.config.python:
            # A wrapper, not a symlink: a venv interpreter finds its pyvenv.cfg
            # from the path it is invoked by.
            scripts["python3"] = f'#!/bin/sh\nexec {q(self.config.python)} "$@"\n'
        for name, text in scripts.items():
            text = text.replace("#!/bin/sh\n", f"#!{self.shell}\n", 1)
            self._put(bindir / name, text)
            (bindir / name).chmod(0o755)

    def _build_sysfs(self) -> None:
        c = self.config
        self.set_battery(
            current_ua=c.battery_current_ua,
            voltage_uv=c.battery_voltage_uv,
            level=c.battery_level,
            temp_decic=c.battery_temp_decic,
            charging=c.charging,
            usb_online=c.usb_online,
            ac_online=c.ac_online,
        )
        bat = self.root / "sys/class/power_supply/battery"
        for name, value in (("present", "1"), ("health", "Good"), ("technology", "Li-ion")):
            self._put(bat / name, value + "\n")
        for i, (name, milli_c) in enumerate(c.thermal_zones.items()):
            zone = self.root / f"sys/class/thermal/thermal_zone{i}"
            self._put(zone / "type", name + "\n")
            self._put(zone / "mode", "enabled\n")
            self._put(zone / "temp", f"{milli_c}\n")
        cpu = self.root / "sys/devices/system/cpu"
        span = f"0-{c.cpu_count - 1}\n"
        for name in ("online", "present", "possible"):
            self._put(cpu / name, span)
        for i in range(c.cpu_count):
            freq = cpu / f"cpu{i}/cpufreq"
            self._put(freq / "cpuinfo_min_freq", "300000\n")
            self._put(freq / "cpuinfo_max_freq", f"{c.cpu_freq_khz}\n")
            self._put(freq / "scaling_max_freq", f"{c.cpu_freq_khz}\n")
            self.set_cpu_freq(i, c.cpu_freq_khz)

    # ----------------------------------------------------------- knobs
    def age(self, device_path: str, seconds: float) -> None:
        """Back-date a device path and everything under it, as if untouched for `seconds`."""
        root = self.host_path(device_path)
        when = time.time() - seconds
        for path in [*root.rglob("*"), root]:
            os.utime(path, (when, when), follow_symlinks=False)

    def set_prop(self, key: str, value: str) -> None:
        self.props[key] = value
        self._write_props()

    def set_temperature(self, zone: int | str, milli_c: int) -> None:
        """Zone by index (thermal_zoneN) or by its type name (e.g. "cpu0")."""
        if isinstance(zone, str):
            names = list(self.config.thermal_zones)
            if zone not in names:
                raise KeyError(f"no thermal zone named {zone!r}; have {names}")
            self.config.thermal_zones[zone] = milli_c
            zone = names.index(zone)
        else:
            self.config.thermal_zones[list(self.config.thermal_zones)[zone]] = milli_c
        self._put(self.root / f"sys/class/thermal/thermal_zone{zone}/temp", f"{milli_c}\n")

    def set_battery(
        self,
        *,
        current_ua: int | None = None,
        voltage_uv: int | None = None,
        level: int | None = None,
        temp_decic: int | None = None,
        charging: bool | None = None,
        usb_online: bool | None = None,
        ac_online: bool | None = None,
    ) -> None:
        c = self.config
        bat = self.root / "sys/class/power_supply/battery"
        if current_ua is not None:
            c.battery_current_ua = current_ua
            self._put(bat / "current_now", f"{current_ua}\n")
            self._put(bat / "current_avg", f"{current_ua}\n")
        if voltage_uv is not None:
            c.battery_voltage_uv = voltage_uv
            self._put(bat / "voltage_now", f"{voltage_uv}\n")
        if level is not None:
            c.battery_level = level
            self._put(bat / "capacity", f"{level}\n")
        if temp_decic is not None:
            c.battery_temp_decic = temp_decic
            self._put(bat / "temp", f"{temp_decic}\n")
        if charging is not None:
            c.charging = charging
            self._put(bat / "status", ("Charging" if charging else "Discharging") + "\n")
        if usb_online is not None:
            c.usb_online = usb_online
            self._put(self.root / "sys/class/power_supply/usb/online", f"{int(usb_online)}\n")
        if ac_online is not None:
            c.ac_online = ac_online
            self._put(self.root / "sys/class/power_supply/ac/online", f"{int(ac_online)}\n")

    def set_cpu_freq(self, cpu: int, khz: int) -> None:
        path = self.root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
        self._put(path, f"{khz}\n")

    @staticmethod
    def _put(path: Path, text: str) -> None:
        # Atomic replace so a sampler reading concurrently never sees a torn value.
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
