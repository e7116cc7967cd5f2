"""Stand-in Android device (adbd protocol on loopback) for tests; see README.md."""
