"""The shared front door and result protocol, and one folder per result family."""
