"""Foundation: imports nothing above it (config helper, JSON codec, fingerprints, schemas)."""
