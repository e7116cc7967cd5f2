"""Device profiles and scenario templates (YAML), validated on load."""
