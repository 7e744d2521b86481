//! RL math over judge results (being written).
