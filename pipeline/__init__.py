"""specdec's library: the stage packages (export, surgery, quantize, compile, tune, bench, draft), the
commands built on them (chain, generate), and what they share (bundle, graphs, inputs, settings, records,
passes, devices, ondevice, portable) above the torch-free decoding engine (engine) and errors.py.
docs/development.md has the map."""
