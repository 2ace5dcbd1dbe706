"""Warp roles shared by every backend (the TMA load warp). Backend-specific
roles live in ``b200c/codegen/<backend>/roles/``."""
