"""Settings: device profiles and scenario templates as validated YAML (profiles, on strict_model) and the
one resolver of a run's decode settings (resolve)."""
