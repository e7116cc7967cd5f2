"""POSIX sh sources of the fake Android tools; ``@NAME@`` marks a substitution.

Shell, not Python, so they work on a device configured without python3.
"""

GETPROP = r"""#!/bin/sh
# Stand-in getprop: `getprop` lists "[k]: [v]", `getprop KEY [DEFAULT]` prints one.
props=@PROPS@
if [ $# -eq 0 ]; then
  while IFS= read -r line; do
    printf '[%s]: [%s]\n' "${line%%=*}" "${line#*=}"
  done < "$props"
  exit 0
fi
while IFS= read -r line; do
  if [ "${line%%=*}" = "$1" ]; then printf '%s\n' "${line#*=}"; exit 0; fi
done < "$props"
printf '%s\n' "${2:-}"
"""

DUMPSYS = r"""#!/bin/sh
# Stand-in dumpsys: `battery` and `thermalservice`, read live from the fake sysfs.
ps=@PS@
th=@TH@
rd() { cat "$1" 2>/dev/null || echo 0; }
fmt_temp() {
  t=$1; sign=
  if [ "$t" -lt 0 ]; then sign=-; t=$((-t)); fi
  frac=$(printf '%03d' $((t % 1000)))
  while [ "${#frac}" -gt 1 ] && [ "${frac%0}" != "$frac" ]; do frac=${frac%0}; done
  printf '%s%d.%s' "$sign" $((t / 1000)) "$frac"
}
zones() {
  for z in "$th"/thermal_zone*; do
    [ -f "$z/temp" ] || continue
    name=$(rd "$z/type"); t=$(rd "$z/temp")
    case "$name" in
      cpu*|CPU*) ty=0;; gpu*|GPU*) ty=1;; battery*) ty=2;; skin*) ty=3;;
      usb*) ty=4;; npu*|tpu*) ty=9;; *) ty=-1;;
    esac
    printf '\tTemperature{mValue=%s, mType=%d, mName=%s, mStatus=0}\n' "$(fmt_temp "$t")" "$ty" "$name"
  done
}
case "${1:-}" in
battery)
  case "$(rd "$ps/battery/status")" in
    Charging) st=2;; Discharging) st=3;; "Not charging") st=4;; Full) st=5;; *) st=1;;
  esac
  ac=false; [ "$(rd "$ps/ac/online")" = 1 ] && ac=true
  usb=false; [ "$(rd "$ps/usb/online")" = 1 ] && usb=true
  uv=$(rd "$ps/battery/voltage_now")
  printf 'Current Battery Service state:\n'
  printf '  AC powered: %s\n  USB powered: %s\n  Wireless powered: false\n' "$ac" "$usb"
  printf '  Max charging current: 0\n  Max charging voltage: 0\n  Charging counter: 0\n'
  printf '  status: %s\n  health: 2\n  present: true\n' "$st"
  printf '  level: %s\n  scale: 100\n' "$(rd "$ps/battery/capacity")"
  printf '  voltage: %s\n  temperature: %s\n' $((uv / 1000)) "$(rd "$ps/battery/temp")"
  printf '  technology: Li-ion\n'
  ;;
thermalservice)
  printf 'IsStatusOverride: false\nThermalEventListeners:\n\tcallbacks: 0\n\tkilled: false\n'
  printf '\tbroadcasts count: -1\nThermalStatusListeners:\n\tcallbacks: 0\n\tkilled: false\n'
  printf '\tbroadcasts count: -1\nThermal Status: 0\nCached temperatures:\n'
  zones
  printf 'HAL Ready: true\nHAL connection:\n\tThermalHAL 2.0 connected: yes\n'
  printf 'Current temperatures from HAL:\n'
  zones
  printf 'Current cooling devices from HAL:\n'
  ;;
-l)
  printf 'Currently running services:\n  battery\n  thermalservice\n'
  ;;
*)
  echo "Can't find service: ${1:-}" >&2
  ;;
esac
"""

UNAME = r"""#!/bin/sh
# The host is not an ARM phone, but `uname -m` should say it is.
if [ "${1:-}" = "-m" ] && [ $# -eq 1 ]; then echo @M@; exit 0; fi
exec /bin/uname "$@"
"""
