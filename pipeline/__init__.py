"""The stages of specdec: each one reads a bundle and writes a new one."""
