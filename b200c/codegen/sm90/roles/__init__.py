"""Warp roles of the sm_90a backend (the producer is the shared load role)."""
