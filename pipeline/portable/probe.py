"""Start the runtime on the device once before a run and name the step that fails.

boot.py prints `specdec-step loader|import|session ok|failed DETAIL`; the first step without an
`ok` line is the one that failed: `loader` when Python never started (the phone refused glibc's
loader, wrong ABI, a noexec mount, an emulator missing), `import` when numpy or onnxruntime
cannot load (a crash there is a signal with no line), `session` when onnxruntime cannot build or
run a session on this CPU. Each gets its own fix in the one-line error.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from specdec.pipeline.devices.base import Device, PythonStatus, RunResult
from specdec.pipeline.errors import DeviceError
from specdec.pipeline.portable.remote import RemoteRuntime

STEPS = ("loader", "import", "session")
_PREFIX = "specdec-step "
FIXES = {
    "loader": ("the phone could not start the runtime's Python through glibc's loader: check "
               "`adb shell getprop ro.product.cpu.abi` says arm64-v8a and that /data/local/tmp allows running "
               "programs; or run with --runtime device-python and a Python of your own (Termux)"),
    "import": ("numpy or onnxruntime cannot load on this phone: rebuild the runtime (`specdec runtime build "
               "--force`), and if it persists report this line; or use --runtime device-python"),
    "session": ("onnxruntime cannot run on this CPU: report this line with `adb shell cat /proc/cpuinfo`; "
                "or use --runtime device-python with an onnxruntime built for the phone"),
}
_TIMEOUT_S = 300


@dataclass(frozen=True)
class ProbeResult:
    ok: dict[str, str] = field(default_factory=dict)  # step -> detail
    failed_step: str | None = None
    detail: str = ""

    def versions(self) -> dict[str, str]:
        """python / machine / numpy / onnxruntime from the `key=value` details."""
        pairs = (item.split("=", 1) for detail in self.ok.values() for item in detail.split() if "=" in item)
        return {key: value for key, value in pairs}


def probe_command(runtime: RemoteRuntime, run_dir: str, cpu_mask: str | None = None) -> str:
    mask = f" --cpu-mask {shlex.quote(cpu_mask)}" if cpu_mask else ""
    return (f"sh {shlex.quote(runtime.launcher)} --run-dir {shlex.quote(run_dir)}{mask} probe "
            f"{shlex.quote(runtime.probe_model)}")


def parse(result: RunResult) -> ProbeResult:
    ok: dict[str, str] = {}
    failed: tuple[str, str] | None = None
    for line in result.stdout.splitlines():
        if not line.startswith(_PREFIX):
            continue
        name, status, detail = [*line[len(_PREFIX):].split(" ", 2), "", ""][:3]
        if status == "ok":
            ok[name] = detail
        elif status == "failed" and failed is None:
            failed = (name, detail)
    if failed is None and result.returncode == 0 and all(step in ok for step in STEPS):
        return ProbeResult(ok)
    step = failed[0] if failed else next((s for s in STEPS if s not in ok), "session")
    detail = failed[1] if failed else _why(result)
    return ProbeResult(ok, step, detail)


def _why(result: RunResult) -> str:
    """The last line the shell, the loader or the emulator printed, else the exit status."""
    lines = [line.strip() for line in (result.stderr + "\n" + result.stdout).splitlines()
             if line.strip() and not line.startswith(_PREFIX)]
    code = result.returncode
    status = f"killed by signal {code - 128}" if 128 < code < 160 else f"exit {code}"
    if result.timed_out:
        status = "no answer (timed out)"
    return f"{lines[-1][:240]} ({status})" if lines else status


def run_probe(device: Device, runtime: RemoteRuntime, run_dir: str, cpu_mask: str | None = None) -> PythonStatus:
    """Start Python, import numpy and onnxruntime, run a session; DeviceError naming the failed step."""
    result = parse(device.run(probe_command(runtime, run_dir, cpu_mask), timeout_s=_TIMEOUT_S))
    if result.failed_step is not None:
        raise DeviceError(f"{device.serial}: the portable runtime {runtime.id} failed at the {result.failed_step} "
                          f"step: {result.detail}", FIXES[result.failed_step])
    versions = result.versions()
    return PythonStatus(executable=f"portable runtime {runtime.id}", found=True, version=versions.get("python"),
                        numpy=versions.get("numpy"), onnxruntime=versions.get("onnxruntime"))
