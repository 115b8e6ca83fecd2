"""Secure aggregation and differential privacy, pure and sans-I/O (DESIGN.md section 6).

- ``crypto.secagg``: secure aggregation (Bonawitz et al., CCS 2017) with the SecAgg+
  neighbour graph (Bell et al., CCS 2020): client and server state machines, messages,
  and ``run_in_process`` to drive a whole round without a transport.
- ``crypto.hazmat``: the hazardous primitives underneath (X25519, HKDF, ChaCha20 PRG,
  AEAD, Ed25519, Shamir); not for direct use outside ``crypto``.

This package imports nothing else of the project and performs no I/O.
"""
