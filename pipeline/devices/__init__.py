"""Devices: one interface, a `local` and an `adb` transport (DESIGN §6)."""
