"""What users feed in besides models: text files (text), chat templates (chat), prompt files (prompts)
and calibration text run through a bundle's graphs (calibration)."""
