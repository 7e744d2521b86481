//! Multi-turn model rollouts against the judge. [`client`] talks to an OpenAI-compatible server;
//! [`prompt`] writes the first turn and the reviewer's note on each judged answer; [`extract`]
//! finds the code in a response; [`episode`] holds the turn record and the history modes (all,
//! last-k, best-window); [`engine`] runs episodes with the judge in-process and appends each turn
//! to the run's [`store`], from which an interrupted run resumes; [`metrics`] computes Fast@p and
//! the rest, [`report`] writes them as JSON, CSV, PNG plots and HTML; [`rollout`] turns episodes
//! into the RL core's trajectory rows; [`distill`] keeps correct, honest, fast trajectories as a
//! chat-format SFT set.

pub mod client;
pub mod distill;
pub mod engine;
pub mod episode;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod prompt;
pub mod report;
pub mod rollout;
pub mod store;
pub mod suite;

pub use error::{Error, Result};
