//! Skeleton; see ARCHITECTURE.md.
