//! Static verifier for candidate Triton solutions (being written).
