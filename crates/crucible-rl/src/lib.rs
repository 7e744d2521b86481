//! RL math over judge results, with no GPU and no judge dependency beyond the result schema.
//! [`reward`] turns one `crucible.result/1` document into a scalar reward under a named recipe
//! (`drkernel`, `weighted`, `tiered`, TritonRL's `hierarchical`); [`advantage`] turns a batch of
//! turns laid out as prompt → samples → turns into discounted returns, masks, rejection-sampling
//! decisions ([`sampling`]: PRS, MRS, group filter) and advantages (GRPO, RLOO, TRLOO, Kevin);
//! [`record`] is the trajectory row that trainers exchange, and [`io`] reads and writes it as JSONL
//! or Parquet (see `docs/trajectory-schema.md`). An `infra_error` result is never scored: it is
//! an error for a single reward and masks its whole episode in a batch.

pub mod advantage;
pub mod error;
pub mod io;
pub mod record;
pub mod reward;
pub mod sampling;

pub use advantage::{
    Columns, Config, Estimator, Reason, Summary, TurnInput, TurnOutput, TurnSource, compute,
    compute_columns,
};
pub use error::{Error, Result};
pub use record::TrajectoryRecord;
pub use reward::{Outcome, Recipe};
