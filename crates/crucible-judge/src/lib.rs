//! The judge (being written).
