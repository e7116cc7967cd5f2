"""Running the device runner on a device, for `specdec bench` and `specdec tune`.

`payload.py` lays out what is pushed (the runtime zip, run.json, the bundle's graphs),
`launch.py` opens the device and settles what starts the runner (its Python or the portable
runtime), `orchestrate.py` pushes, runs, polls, pulls and cleans up, and `controls.py` finds the
sensors the adaptive controllers read. The transports themselves are `pipeline/devices/`.
"""
