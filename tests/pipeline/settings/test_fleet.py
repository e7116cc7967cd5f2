"""Fleet files are validated YAML: unknown keys, duplicate devices and unsafe labels are one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.errors import InputError
from specdec.pipeline.settings.fleet import fleet_from, load_fleet, parse_device


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_a_fleet_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "devices:\n"
                            "  - {serial: R5CT1, profile: pixel-8, label: desk}\n"
                            "  - {serial: '10.0.0.7:7401', host: farm.example, port: 5037, profile: phones/a.yaml}\n"
                            "jobs: 2\n")
    fleet = load_fleet(path)
    desk, farm = fleet.devices
    assert (desk.name, desk.server, desk.profile) == ("desk", None, "pixel-8")
    assert farm.name == "farm.example_5037_10.0.0.7_7401" and farm.server == "farm.example:5037"
    assert farm.profile == str(tmp_path / "phones/a.yaml")  # relative to the fleet file
    assert fleet.jobs == 2


@pytest.mark.parametrize("text, message", [
    ("devices:\n  - {serial: A, colour: red}\n", "'devices.0.colour': Extra inputs are not permitted"),
    ("devices: []\n", "'devices': List should have at least 1 item"),
    ("devices:\n  - {serial: A, label: ../up}\n", "label '../up' must be"),
    ("devices:\n  - {serial: A, label: x}\n  - {serial: B, label: x}\n", "two devices are labelled x"),
    ("devices:\n  - {serial: A}\n  - {serial: A, label: again}\n", "device A on the local adb server is listed twice"),
    ("devices:\n  - {serial: A, port: 99999}\n", "'devices.0.port': Input should be less than or equal to 65535"),
    ("jobs: 0\ndevices:\n  - {serial: A}\n", "'jobs': Input should be greater than or equal to 1"),
    ("- A\n", "must hold a mapping with a `devices` list"),
])
def test_bad_fleet_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        load_fleet(_write(tmp_path, text))
    line = caught.value.one_line()
    assert message in line and "\n" not in line and caught.value.exit_code == 2


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_fleet(tmp_path / "nope.yaml")


def test_serials_on_the_command_line() -> None:
    assert parse_device("R5CT1").server is None
    remote = parse_device("farm.example:5038/10.0.0.7:7401", profile="pixel-8")
    assert (remote.host, remote.port, remote.serial, remote.profile) == ("farm.example", 5038, "10.0.0.7:7401",
                                                                         "pixel-8")
    assert parse_device("[::1]:5037/emulator-5554").host == "::1"
    assert parse_device("R5CT1", host="h", port=5).server == "h:5"  # -H/-P for a device that names no server
    with pytest.raises(InputError, match="is not SERIAL or HOST:PORT/SERIAL"):
        parse_device("farm.example/R5CT1")


def test_file_and_serials_together(tmp_path: Path) -> None:
    path = _write(tmp_path, "devices:\n  - {serial: A}\n  - {serial: B, profile: pixel-8}\njobs: 3\n")
    fleet = fleet_from(path, ["C", "h:1/D"], profile="dimensity-9300", jobs=1)
    assert [(d.name, d.profile, d.server) for d in fleet.devices] == [
        ("A", "dimensity-9300", None), ("B", "pixel-8", None), ("C", "dimensity-9300", None),
        ("h_1_D", "dimensity-9300", "h:1")]
    assert fleet.jobs == 1
    assert [d.server for d in fleet_from(path, [], host="farm").devices] == ["farm:5037", "farm:5037"]
    with pytest.raises(InputError, match="two devices are labelled A"):
        fleet_from(path, ["A"])
    with pytest.raises(InputError, match="the fleet has no devices"):
        fleet_from(None, [])
