"""Devices: one interface, a `local` and an `adb` transport (docs/design.md §6)."""
