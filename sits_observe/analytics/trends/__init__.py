"""Fragmentation trend clustering (DBSCAN over features of each GPU's framebuffer series)."""
