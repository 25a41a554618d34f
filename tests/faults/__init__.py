"""Fault injection: dstbench killed, fed hostile input, out of disk; each fault against a tiny suite."""
