"""`specdec generate`: stream text from any bundle on this machine, on top of the engine (stage.py)."""
