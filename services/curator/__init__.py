"""Curator: verified solutions -> curated training samples, preference pairs, training requests."""
