"""Beam plumbing every pipeline uses: counters and job helpers, the
shuffle, sharded writes, one record per id."""
